"""The `tfm inspect-attn` exporters: the self-contained HTML page (in a real headless Chromium) and the images.

The browser test drives Debian's `chromium` through `chromium-driver` and Selenium, with explicit paths so
Selenium never downloads anything. Set TFM_SCREENSHOT=/some/file.png to also save a screenshot of the page.
Without the browser the browser tests skip, saying what to install (the README's test command passes on a fresh
machine, where the system packages are not pip's to install); in CI (`CI` set, as .ci/run runs it, having
installed them) they fail instead, so a browser missing there cannot pass unseen.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
from pathlib import Path

import pytest

from tfm_cli.cli.views.images import write_image
from tfm_cli.cli.views.page import render_html, write_html

NASTY = "</script><b>&\"'"
INSTALL = (
    "the attention page test needs Chromium and its driver: `apt-get install -y chromium chromium-driver` "
    "(Debian) and `pip install -e \".[dev]\"` for selenium; .ci/run installs them"
)


def _softmax_rows(logits: list[list[float]]) -> list[list[float]]:
    rows = []
    for row in logits:
        top = max(row)
        exps = [0.0 if x == -math.inf else math.exp(x - top) for x in row]
        total = sum(exps)
        rows.append([e / total for e in exps])
    return rows


def make_report(src: list[str], tgt: list[str], layers=(2, 2), heads=4, seed=0) -> dict:
    """A synthetic report as `tfm inspect-attn --json` prints it: rows sum to 1, decoder causal."""
    rng = random.Random(seed)
    src_tokens, tgt_tokens, tgt_inputs = [*src, "</s>"], [*tgt, "</s>"], ["<s>", *tgt]

    def weights(n_layers: int, n_q: int, n_k: int, causal: bool) -> list:
        out = []
        for _ in range(n_layers):
            out.append([])
            for _ in range(heads):
                shift, sharp = rng.choice([-1, 0, 0, 1]), rng.uniform(2.5, 5.0)
                logits = [
                    [
                        -math.inf
                        if causal and k > q
                        else rng.gauss(0, 1) + (sharp if k == min(n_k - 1, max(0, round(q * n_k / n_q) + shift)) else 0)
                        for k in range(n_k)
                    ]
                    for q in range(n_q)
                ]
                out[-1].append(_softmax_rows(logits))
        return out

    return {
        "source": "".join(src).replace("▁", " ").strip(),
        "target": "".join(tgt).replace("▁", " ").strip(),
        "forced_target": False,
        "model": "runs/tiny",
        "word_level": False,
        "src_tokens": src_tokens,
        "tgt_tokens": tgt_tokens,
        "tgt_inputs": tgt_inputs,
        "n_layers": {"encoder": layers[0], "decoder": layers[1]},
        "n_heads": heads,
        "d_k": 16,
        "attention": {
            "encoder": weights(layers[0], len(src_tokens), len(src_tokens), False),
            "decoder": weights(layers[1], len(tgt_tokens), len(tgt_inputs), True),
            "cross": weights(layers[1], len(tgt_tokens), len(src_tokens), False),
        },
    }


SRC = ["▁Der", "▁schnell", "e", "▁braun", "e", "▁Fuchs", "▁spring", "t", "▁über", "▁den", "▁faul", "en", "▁Hund", "."]
TGT = ["▁The", "▁quick", "▁brown", "▁fox", "▁jump", "s", "▁over", "▁the", "▁lazy", "▁dog", "."]


@pytest.fixture
def report() -> dict:
    return make_report(SRC, TGT)


@pytest.fixture
def nasty_report() -> dict:
    return make_report(["▁a", NASTY, "▁&amp;", "▁日本"], ["▁x", "<unk>", NASTY], layers=(1, 1), heads=2, seed=3)


# --- the report builder itself keeps the contract -------------------------------------------------------------


def test_synthetic_report_keeps_the_contract(report):
    for kind, (n_q, n_k) in {
        "encoder": (len(report["src_tokens"]), len(report["src_tokens"])),
        "decoder": (len(report["tgt_tokens"]), len(report["tgt_inputs"])),
        "cross": (len(report["tgt_tokens"]), len(report["src_tokens"])),
    }.items():
        for heads in report["attention"][kind]:
            assert len(heads) == report["n_heads"]
            for rows in heads:
                assert len(rows) == n_q and all(len(r) == n_k for r in rows)
                assert all(abs(sum(r) - 1) < 1e-9 and min(r) >= 0 for r in rows)
                if kind == "decoder":
                    assert all(rows[q][k] == 0 for q in range(n_q) for k in range(q + 1, n_k))


# --- the HTML page ----------------------------------------------------------------------------------------------


def _embedded(page: str) -> dict:
    match = re.search(r'<script type="application/json" id="report">(.*?)</script>', page, flags=re.S)
    assert match, "the report is embedded as application/json"
    return json.loads(match.group(1))


def test_page_is_self_contained(tmp_path, report):
    path = write_html(report, tmp_path / "sub" / "attn.html")
    assert path == tmp_path / "sub" / "attn.html"
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, flags=re.I), "no external resources"
    assert "@import" not in page and not re.search(r"url\((?!#)", page)  # url(#id): a pattern of the page's own
    assert "{{" not in page, "every placeholder filled"
    data = _embedded(page)
    assert data["src_tokens"] == report["src_tokens"] and data["tgt_inputs"] == report["tgt_inputs"]
    ours, theirs = data["attention"]["cross"][1][2][3], report["attention"]["cross"][1][2][3]
    assert ours == pytest.approx(theirs, abs=1e-4)
    for control in ('id="heatmap"', 'id="kind"', 'id="layer"', 'id="head"'):
        assert control in page


def test_page_escapes_tokens(nasty_report):
    page = render_html(nasty_report)
    assert page.count("</script>") == 2, "only the two real script elements end"
    assert "<b>&" not in page
    assert "&lt;/script&gt;&lt;b&gt;&amp;&quot;&#x27;" in page.split("</title>")[0], "escaped in the <title>"
    data = _embedded(page)
    assert NASTY in data["src_tokens"] and NASTY in data["tgt_tokens"] and "▁&amp;" in data["src_tokens"]
    assert data["source"] == nasty_report["source"]


def test_page_template_is_package_data():
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    assert "cli/views/*.html" in pyproject


# --- images -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "layer", "head"),
    [("cross", 1, 2), ("encoder", 0, None), ("decoder", None, None), ("cross", None, 0)],
)
@pytest.mark.parametrize("ext", [".png", ".svg"])
def test_write_image(tmp_path, report, kind, layer, head, ext):
    pytest.importorskip("matplotlib")  # the [plot] extra; CI installs it with [all]
    path = write_image(report, tmp_path / f"attn{ext}", kind=kind, layer=layer, head=head)
    data = path.read_bytes()
    if ext == ".png":
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000
    else:
        text = data.decode("utf-8")
        assert "<svg" in text and text.rstrip().endswith("</svg>")


def test_write_image_of_a_long_sentence_stays_in_bounds(tmp_path):
    """240 tokens on three layers drew a 28,700-pixel-wide canvas (645 tokens: more than 23 GB, killed): long
    sentences get smaller cells and a label on every few tokens, within 60 inches (9,000 px) of cells."""
    pytest.importorskip("matplotlib")
    words = [f"▁w{i}" for i in range(239)]
    long = make_report(words, words, layers=(3, 3), heads=1)
    data = write_image(long, tmp_path / "long.png", "cross", None, None).read_bytes()
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert data.startswith(b"\x89PNG") and 4_000 < width < 12_000 and height < 6_000, (width, height)


def test_write_image_titles_and_labels(tmp_path, nasty_report):
    pytest.importorskip("matplotlib")
    text = write_image(nasty_report, tmp_path / "a.svg", "decoder", 0, 1).read_text(encoding="utf-8")
    assert "<svg" in text
    # matplotlib writes text as glyph paths with the string in a comment or as <text>; either way it is escaped
    assert "<b>" not in text


def test_write_image_title_names_the_heads_it_averages(tmp_path):
    """A one-head model's image was titled "mean of 1 heads"."""
    pytest.importorskip("matplotlib")
    for heads, said in ((1, "its one head"), (3, "mean of 3 heads")):
        one = make_report(SRC, TGT, layers=(1, 1), heads=heads)
        text = write_image(one, tmp_path / f"h{heads}.svg", "cross", None, None).read_text(encoding="utf-8")
        assert said in text and "mean of 1 heads" not in text


def test_write_image_missing_glyphs_are_one_line(tmp_path, capsys, recwarn):
    """A label the font has no glyph for (CJK without a CJK font) gave a two-line UserWarning per character,
    with matplotlib's file and source line; now one warning line names the characters and what to do."""
    pytest.importorskip("matplotlib")
    lacking = "\U0010fffd\U0010fffc"  # private-use characters no font has
    report = make_report(["▁a", lacking], ["▁b"])
    assert write_image(report, tmp_path / "a.png", "encoder", 0, None).is_file()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: the image's font (") and "has no glyph for" in lines[0]
    assert f"{lacking[0]} {lacking[1]}:" in lines[0] and "matplotlibrc" in lines[0]
    assert not [w for w in recwarn if "Glyph" in str(w.message)]


@pytest.mark.parametrize("name", ["attn.jpg", "attn", "attn.html"])
def test_write_image_rejects_other_extensions(tmp_path, report, name):
    with pytest.raises(ValueError, match=r"\.png, \.svg"):
        write_image(report, tmp_path / name, "encoder", 0, 0)
    assert not (tmp_path / name).exists()


def test_write_image_rejects_bad_choices(tmp_path, report):
    from tfm_cli.errors import TfmError

    for kind, layer, head, why in [
        ("self", 0, 0, "unknown attention kind 'self': expected one of encoder, decoder, cross"),
        ("encoder", 2, 0, r"layer index 2 is out of range: the encoder has 2 layers \(0-based\)"),
        ("cross", 0, 4, r"head index 4 is out of range: there are 4 heads \(0-based\)"),
        ("decoder", -1, None, r"layer index -1 is out of range: the decoder has 2 layers \(0-based\)"),
    ]:
        with pytest.raises(TfmError, match=f"^{why}$"):
            write_image(report, tmp_path / "a.png", kind, layer, head)
        assert not (tmp_path / "a.png").exists()


# --- the page in a real browser -----------------------------------------------------------------------------------


def _binary(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


def _missing(what: str) -> None:
    """No browser to drive: a failure in CI, a skip that says what to install elsewhere."""
    message = f"{what}: {INSTALL}"
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium is not installed")
    chromium = _binary("chromium", "chromium-browser")
    driver_path = _binary("chromedriver")
    if not chromium or not driver_path:
        _missing(f"{'chromium' if not chromium else 'chromedriver'} is not on PATH")
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must never try to download a driver
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,900", "--hide-scrollbars", "--force-device-scale-factor=1"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Chromium leaves a folder of its own in TMPDIR (org.chromium.Chromium.*, its singleton socket) at every start:
    # one in /tmp per test run, kept; here it goes in a temporary folder of pytest's
    scratch = {**os.environ, "TMPDIR": str(tmp_path_factory.mktemp("chromium"))}
    driver = webdriver.Chrome(service=Service(executable_path=driver_path, env=scratch), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _severe(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def _fills(driver) -> list[str]:
    return driver.execute_script(
        "return [...document.querySelectorAll('#heatmap rect.cell')].map(r => r.getAttribute('fill'));"
    )


def _labels(driver, which: str) -> list[str]:
    # the full token is in each label's <title>; the visible text is the same unless it is very long
    return driver.execute_script(
        "return [...document.querySelectorAll('#heatmap .' + arguments[0] + ' > title')].map(t => t.textContent);",
        which,
    )


def test_page_in_chromium(browser, tmp_path, report):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    path = write_html(report, tmp_path / "attention.html")
    browser.get(path.as_uri())
    assert _severe(browser) == []
    assert browser.find_element(By.ID, "source").text == report["source"]
    assert browser.find_element(By.ID, "target").text == report["target"]
    assert _labels(browser, "qlabel") == report["src_tokens"] and _labels(browser, "klabel") == report["src_tokens"]
    n = len(report["src_tokens"])
    assert len(_fills(browser)) == n * n

    # a real change event on the head control redraws the heatmap
    before = _fills(browser)
    Select(browser.find_element(By.ID, "head")).select_by_value("1")
    after = _fills(browser)
    assert len(after) == n * n and after != before

    # kinds: the axes carry that kind's tokens
    kind = Select(browser.find_element(By.ID, "kind"))
    kind.select_by_value("cross")
    assert _labels(browser, "qlabel") == report["tgt_tokens"]
    assert _labels(browser, "klabel") == report["src_tokens"]
    kind.select_by_value("decoder")
    assert _labels(browser, "qlabel") == report["tgt_tokens"]
    assert _labels(browser, "klabel") == report["tgt_inputs"]
    assert len(browser.find_elements(By.CSS_SELECTOR, "#heatmap rect.cell.masked")) == sum(
        range(len(report["tgt_tokens"]))
    )
    layer = Select(browser.find_element(By.ID, "layer"))
    assert len(layer.options) == report["n_layers"]["decoder"]
    before = _fills(browser)
    layer.select_by_value("1")
    assert _fills(browser) != before
    # what a screen reader says is the layer and head on screen (it said "layer 1" of the second, 0-based)
    label = browser.find_element(By.ID, "heatmap").get_attribute("aria-label")
    assert label == "Decoder masked self-attention, layer 2, head 2", label

    # hovering a query token shades the key labels with its row and shows the numbers
    kind.select_by_value("cross")
    Select(browser.find_element(By.ID, "head")).select_by_value("mean")
    q = 3
    label = browser.find_element(By.CSS_SELECTOR, f'#heatmap .qlabel[data-q="{q}"]')
    ActionChains(browser).move_to_element(label).perform()
    shades = browser.execute_script(
        "return [...document.querySelectorAll('#heatmap .klabel .kbg')].map(r => r.getAttribute('fill'));"
    )
    assert "transparent" not in shades and len(set(shades)) > 1
    numbers = [float(x.text) for x in browser.find_elements(By.CSS_SELECTOR, "#focus .chip .w")]
    assert len(numbers) == len(report["src_tokens"]) and abs(sum(numbers) - 1) < 0.01
    assert layer.first_selected_option.get_attribute("value") == "1", "the layer is kept across kinds"
    mean = [sum(h[q][k] for h in report["attention"]["cross"][1]) / report["n_heads"] for k in range(len(numbers))]
    assert numbers == pytest.approx(mean, abs=6e-4)
    assert report["tgt_tokens"][q].lstrip("▁") in browser.find_element(By.ID, "focus").text

    # clicking pins the row (for touch and keyboard users), clicking again unpins it
    label.click()
    ActionChains(browser).move_to_element(browser.find_element(By.ID, "title")).perform()
    assert "pinned" in browser.find_element(By.ID, "focus").text
    assert len(browser.find_elements(By.CSS_SELECTOR, "#focus .chip")) == len(report["src_tokens"])

    screenshot = os.environ.get("TFM_SCREENSHOT")
    if screenshot:
        kind.select_by_value("cross")
        layer.select_by_value("1")
        Select(browser.find_element(By.ID, "head")).select_by_value("2")
        label = browser.find_element(By.CSS_SELECTOR, '#heatmap .qlabel[data-q="4"]')
        label.click()
        cell = browser.find_element(By.CSS_SELECTOR, '#heatmap rect.cell[data-q="4"][data-k="6"]')
        ActionChains(browser).move_to_element(cell).perform()
        browser.set_window_size(1100, 900)
        height = browser.execute_script("return document.documentElement.scrollHeight;")
        browser.set_window_size(1100, 900 + height - browser.execute_script("return window.innerHeight;"))
        ActionChains(browser).move_to_element(cell).perform()
        browser.save_screenshot(screenshot)
        browser.set_window_size(1280, 900)
    assert _severe(browser) == []


def test_page_in_chromium_shows_tokens_literally(browser, tmp_path, nasty_report):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(write_html(nasty_report, tmp_path / "nasty.html").as_uri())
    assert _severe(browser) == []
    assert browser.find_elements(By.CSS_SELECTOR, "#heatmap b") == [], "no markup injected"
    assert _labels(browser, "qlabel") == nasty_report["src_tokens"]
    visible = browser.execute_script(
        "return [...document.querySelectorAll('#heatmap .qlabel text')].map(t => t.textContent);"
    )
    assert NASTY in visible and "&amp;" in visible and "日本" in visible  # a word's "▁" dropped, as in the terminal
    assert not any("▁" in text for text in visible)
    assert browser.find_element(By.ID, "source").text == nasty_report["source"]
    Select(browser.find_element(By.ID, "kind")).select_by_value("decoder")
    assert _labels(browser, "klabel") == nasty_report["tgt_inputs"]
    assert browser.title == f"Attention: {nasty_report['source']} → {nasty_report['target']}"
    assert _severe(browser) == []


def test_page_in_chromium_reads_right_to_left_tokens_in_their_direction(browser, tmp_path):
    """An Arabic source: its sentence, labels and tooltips were laid out left to right, so "كتاب." showed its period
    on the right, at the word's start, and the title's arrow moved among the words."""
    from selenium.webdriver.common.by import By

    arabic = make_report(["▁قرأت", "▁كتاب.", "</s>"], ["▁I", "▁read", "▁a", "▁book", "."], layers=(1, 1), heads=1)
    browser.get(write_html(arabic, tmp_path / "ar.html").as_uri())
    assert _severe(browser) == []
    directions = browser.execute_script(
        "return ['source', 'target'].map(id => getComputedStyle(document.getElementById(id)).direction);"
    )
    assert directions == ["rtl", "ltr"]
    # the label "▁كتاب.": its period (the last character) is drawn left of its first letter, as Arabic reads
    first, period = browser.execute_script(
        "const t = [...document.querySelectorAll('#heatmap .qlabel text')].find(t => t.textContent.endsWith('.'));"
        "return [t.getStartPositionOfChar(1).x, t.getStartPositionOfChar(t.textContent.length - 1).x];"
    )
    assert period < first
    assert browser.title == f"Attention: \u2068{arabic['source']}\u2069 → {arabic['target']}"
    assert browser.find_element(By.ID, "target").text == arabic["target"]


def test_page_in_chromium_says_the_translation_was_cut(browser, tmp_path, report):
    """The text views and --json say when the translation reached the maximum output length ("stopped":
    "max_len": its last row, </s>, was forced, not predicted); the page showed such a target as any other."""
    from selenium.webdriver.common.by import By

    for stopped in ("eos", None):  # the model ended it, or a given target: no note
        browser.get(write_html({**report, "stopped": stopped}, tmp_path / f"{stopped}.html").as_uri())
        assert not browser.find_element(By.ID, "stopped").is_displayed()
        assert browser.find_element(By.ID, "target-label").text == "target (model's output)"
    browser.get(write_html({**report, "stopped": "max_len"}, tmp_path / "cut.html").as_uri())
    note = browser.find_element(By.ID, "stopped")
    assert note.is_displayed(), "the page does not say the translation was cut"
    assert note.text == (
        f"The translation reached the maximum output length ({len(report['tgt_tokens']) - 1} tokens) and was cut "
        "there: its last row, </s>, was forced, not predicted (teacher-force a target with --target)."
    )
    assert browser.find_element(By.ID, "target-label").text == "target (model's output, cut)"
    words = {**report, "stopped": "max_len", "word_level": True}  # words are no count of the tokens the limit counts
    browser.get(write_html(words, tmp_path / "words.html").as_uri())
    assert browser.find_element(By.ID, "stopped").text.startswith("The translation reached the maximum output length and was cut")
    assert _severe(browser) == []


def test_page_in_chromium_opens_on_the_view_the_command_chose(browser, tmp_path, report):
    """`tfm inspect-attn --kind cross --layer 2 --head 3 --html page.html` wrote a page that opened on encoder
    self-attention, layer 1, the mean of the heads, whatever the options said: it opens on their view now."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(write_html({**report, "view": {"kind": "cross", "layer": 1, "head": 2}}, tmp_path / "view.html").as_uri())
    assert _severe(browser) == []
    chosen = [Select(browser.find_element(By.ID, name)).first_selected_option.get_attribute("value") for name in ("kind", "layer", "head")]
    assert chosen == ["cross", "1", "2"]
    assert _labels(browser, "qlabel") == report["tgt_tokens"] and _labels(browser, "klabel") == report["src_tokens"]
    expected = report["attention"]["cross"][1][2]  # the weights drawn are that head's: the darkest cell of each row
    fills = _fills(browser)
    n = len(report["src_tokens"])
    for q, row in enumerate(expected):
        darkest = min(range(n), key=lambda k: sum(int(c) for c in fills[q * n + k][4:-1].split(",")))
        assert row[darkest] == max(row), (q, row)
    browser.get(write_html({**report, "view": {"kind": "decoder", "layer": None, "head": None}}, tmp_path / "mean.html").as_uri())
    chosen = [Select(browser.find_element(By.ID, name)).first_selected_option.get_attribute("value") for name in ("kind", "layer", "head")]
    assert chosen == ["decoder", "0", "mean"]  # no layer given to the page: its first (the command gives one always)


def _contrast(a: str, b: str) -> float:
    """WCAG contrast ratio of two CSS colours given as rgb(...) strings."""

    def luminance(css: str) -> float:
        channels = [int(c) / 255 for c in re.findall(r"\d+", css)[:3]]
        lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_page_in_chromium_holds_still_reads_well_and_says_it_as_text(browser, tmp_path):
    """From a browser audit of a 60-word page: hovering a row grew the numbers panel above the heatmap (70 chips),
    so the heatmap jumped under the pointer; white figures on mid-blue chips read at 2.4-4.4:1; a pinned query was
    lost at each change of layer or head; masked future keys read "0.000"; a screen reader heard every chip at
    every hover, and had no text for the matrix; a --token page did not show that token."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    src = [f"▁w{i}" for i in range(70)]
    report = make_report(src, TGT, layers=(1, 2), heads=2, seed=5)
    browser.get(write_html({**report, "view": {"kind": "encoder", "layer": 0, "head": None, "query": 5}}, tmp_path / "long.html").as_uri())
    assert _severe(browser) == []
    top = lambda: browser.execute_script("return document.getElementById('heatmap').getBoundingClientRect().top + window.scrollY;")  # noqa: E731
    pressed = lambda: [g.get_attribute("aria-pressed") for g in browser.find_elements(By.CSS_SELECTOR, "#heatmap .qlabel")]  # noqa: E731
    assert pressed().index("true") == 5 and pressed().count("true") == 1  # --token's row, pinned
    assert "w5 (pinned)" in browser.find_element(By.ID, "focus").text
    before = top()
    for q in (0, 30, 69):  # rows of every length of chip list: the heatmap stays where it is
        ActionChains(browser).move_to_element(browser.find_element(By.CSS_SELECTOR, f'#heatmap .qlabel[data-q="{q}"]')).perform()
        assert top() == before, q
        assert browser.find_element(By.ID, "status").text == ""  # nothing announced on a hover
        for chip in browser.find_elements(By.CSS_SELECTOR, "#focus .chip"):
            colour, paper = chip.value_of_css_property("color"), chip.value_of_css_property("background-color")
            assert _contrast(colour, paper) >= 4.5, (q, chip.text, colour, paper)
        keys = browser.execute_script(  # the key labels shaded with the row: their ink was the stylesheet's, dark on dark
            "return [...document.querySelectorAll('#heatmap .klabel')].map(g => "
            "[getComputedStyle(g.querySelector('text')).fill, g.querySelector('.kbg').getAttribute('fill')]);"
        )
        assert min(_contrast(ink, paper) for ink, paper in keys) >= 4.5, (q, keys)
    Select(browser.find_element(By.ID, "head")).select_by_value("1")
    assert pressed().index("true") == 5, "the pin is kept across heads"
    browser.find_element(By.CSS_SELECTOR, '#heatmap .qlabel[data-q="5"]').click()  # unpinned
    assert "true" not in pressed()
    browser.find_element(By.CSS_SELECTOR, '#heatmap .qlabel[data-q="7"]').click()
    assert browser.execute_script("return document.getElementById('status').textContent;").startswith("query w7 pinned; attends most to ")

    # the view as a table: every weight to 5 decimals, as --json has them
    browser.find_element(By.CSS_SELECTOR, "#as-table summary").click()
    # the table is filled on the <details> "toggle" event, which the browser fires after the click returns: wait
    # for it (read at once, they were missing in one of five runs)
    WebDriverWait(browser, 10).until(lambda b: b.execute_script("return document.querySelectorAll('#as-table tr').length;"))
    rows = browser.execute_script(
        "return [...document.querySelectorAll('#as-table tr')].map(r => [...r.cells].map(c => c.textContent));"
    )
    assert len(rows) == len(report["src_tokens"]) + 1 and rows[0][1:] == [t.lstrip("▁") for t in report["src_tokens"]]
    head = report["attention"]["encoder"][0][1]
    assert [float(x) for x in rows[8][1:]] == pytest.approx(head[7], abs=6e-6)

    # decoder: masked keys say so, in the chips and in the table
    Select(browser.find_element(By.ID, "kind")).select_by_value("decoder")
    browser.find_element(By.CSS_SELECTOR, '#heatmap .qlabel[data-q="2"]').click()
    figures = [w.text for w in browser.find_elements(By.CSS_SELECTOR, "#focus .chip .w")]
    assert figures[3:] == ["masked"] * (len(report["tgt_inputs"]) - 3) and "masked" not in figures[:3]
    table = browser.execute_script("return [...document.querySelectorAll('#as-table tr')][3].textContent;")
    assert table.count("masked") == len(report["tgt_inputs"]) - 3
    assert _severe(browser) == []


def test_page_in_chromium_shows_the_step_by_step_of_its_token(browser, tmp_path, report):
    """A --token page holds --explain's numbers of that query for every head: the page shows the head on screen's
    (q·k, divided by sqrt(d_k), softmax), asks for a head on the mean, and has none for another kind."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    n = len(report["src_tokens"])
    heads = {
        f"{layer},{h}": [[10.0 * layer + h + k, (10.0 * layer + h + k) / 4, report["attention"]["encoder"][layer][h][3][k]] for k in range(n)]
        for layer in range(2)
        for h in range(4)
    }
    steps = {"kind": "encoder", "query": 3, "d_k": 16, "heads": heads}
    browser.get(write_html({**report, "view": {"kind": "encoder", "layer": 1, "head": 2, "query": 3}, "steps": steps}, tmp_path / "steps.html").as_uri())
    assert _severe(browser) == []
    panel = browser.find_element(By.ID, "steps")
    assert panel.is_displayed() and "query 4 “braun”" in panel.text and "√d_k = √16 = 4.00" in panel.text
    rows = browser.execute_script("return [...document.querySelectorAll('#steps tr')].map(r => [...r.cells].map(c => c.textContent));")
    assert rows[0] == ["key", "", "q·k", "÷ 4.00", "softmax"]
    assert rows[1:] == [[str(k + 1), report["src_tokens"][k].lstrip("▁"), f"{12.0 + k:.2f}", f"{(12.0 + k) / 4:.2f}", f"{w:.4f}"]
                        for k, (_, _, w) in enumerate(heads["1,2"])]
    Select(browser.find_element(By.ID, "head")).select_by_value("mean")
    assert "Choose a head" in panel.text and not browser.find_elements(By.CSS_SELECTOR, "#steps table")
    Select(browser.find_element(By.ID, "kind")).select_by_value("cross")
    assert not panel.is_displayed()
    assert _severe(browser) == []


def test_page_in_chromium_follows_a_dark_system_theme(browser, tmp_path, report):
    """The page stayed light under a dark system theme (the browser audit): it follows prefers-color-scheme now,
    its text readable on its panels, the heatmap's scale kept."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    try:
        browser.get(write_html(report, tmp_path / "dark.html").as_uri())
        page = browser.execute_script("return getComputedStyle(document.documentElement).backgroundColor;")
        panel = browser.find_element(By.ID, "heatmap-wrap").value_of_css_property("background-color")
        assert _contrast(page, "rgb(0, 0, 0)") < 2, page  # a dark page
        ActionChains(browser).move_to_element(browser.find_element(By.CSS_SELECTOR, '#heatmap .qlabel[data-q="1"]')).perform()
        for selector, prop in (("#heatmap .qlabel text", "fill"), ("#axes", "color"), ("#focus .query", "color"), ("#source", "color")):
            ink = browser.execute_script("return getComputedStyle(document.querySelector(arguments[0]))[arguments[1]];", selector, prop)
            assert _contrast(ink, panel if selector != "#source" else page) >= 4.5, (selector, ink, panel)
        for chip in browser.find_elements(By.CSS_SELECTOR, "#focus .chip"):
            assert _contrast(chip.value_of_css_property("color"), chip.value_of_css_property("background-color")) >= 4.5
        assert _severe(browser) == []
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "light"}]})


def _word_level_report() -> dict:
    """A report merged to words (as `--words` makes it) whose target has a word of three pieces, `tired` as
    `▁ti` `r` `ed`: its later pieces read the first piece of the key word `tired`, which is not masked."""
    import torch

    from tfm_cli.attention import AttentionReport, merge_words

    src, tgt = ["▁Je", "▁suis", "▁fatigué", ".", "</s>"], ["▁I", "▁am", "▁ti", "r", "ed", "</s>"]
    inputs = ["<s>", *tgt[:-1]]
    gen = torch.Generator().manual_seed(0)

    def weights(n_q: int, n_k: int, causal: bool) -> torch.Tensor:
        logits = torch.randn(2, 2, n_q, n_k, generator=gen)
        if causal:
            logits = logits.masked_fill(torch.ones(n_q, n_k, dtype=torch.bool).triu(1), float("-inf"))
        return logits.softmax(-1)

    pieces = AttentionReport(
        "Je suis fatigué.", "I am tired", False, "runs/x", src, tgt, inputs,
        {"encoder": weights(5, 5, False), "decoder": weights(6, 6, True), "cross": weights(6, 5, False)}, 16,
    )
    words = merge_words(pieces)
    assert words.tgt_tokens == ["I", "am", "tired", "</s>"] and words.tgt_inputs == ["<s>", "I", "am", "tired"]
    assert words.decoder_visible() == [1, 2, 4, 4] and pieces.decoder_visible() == [1, 2, 3, 4, 5, 6]
    w = words.weights["decoder"]
    for q, visible in enumerate(words.decoder_visible()):  # the keys past what a word reads are exactly 0, the rest not
        assert bool((w[:, :, q, visible:] == 0).all()) and bool((w[:, :, q, :visible] > 0).all())
    return words.to_dict()


def test_word_level_decoder_weights_are_not_shown_as_masked_in_the_image(tmp_path):
    """At word level `tired` (`▁ti` `r` `ed`) puts real weight on the key word `tired`, one right of the diagonal:
    the image greyed it as masked, as every cell past the diagonal."""
    pytest.importorskip("matplotlib")
    import numpy as np

    report = _word_level_report()
    shown = []
    import matplotlib.axes

    original = matplotlib.axes.Axes.imshow

    def keep(self, data, *args, **kwargs):
        shown.append(data)
        return original(self, data, *args, **kwargs)

    matplotlib.axes.Axes.imshow = keep
    try:
        write_image(report, tmp_path / "words.png", "decoder", 0, 0)
    finally:
        matplotlib.axes.Axes.imshow = original
    mask = np.ma.getmaskarray(shown[0])
    assert mask.tolist() == [[k >= v for k in range(4)] for v in report["decoder_visible"]]
    assert not mask[2, 3] and shown[0][2, 3] == pytest.approx(report["attention"]["decoder"][0][0][2][3])


def test_page_in_chromium_shows_word_level_decoder_weights_past_the_diagonal(browser, tmp_path):
    from selenium.webdriver.support.ui import Select

    report = _word_level_report()
    browser.get(write_html(report, tmp_path / "words.html").as_uri())
    Select(browser.find_element("id", "kind")).select_by_value("decoder")
    masked = browser.execute_script(
        "return [...document.querySelectorAll('#heatmap rect.cell.masked')].length;")
    assert masked == sum(4 - v for v in report["decoder_visible"]) == 5  # 3 + 2 + 0 + 0: not the 6 past the diagonal
    assert _severe(browser) == []
