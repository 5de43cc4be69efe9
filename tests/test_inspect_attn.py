"""inspect-attn on a small trained model (conftest.py's `trained`): the weights' invariants, the numbers of
every view against each other, the explicit-math path against the fast one, and each view and bad input
through the installed CLI."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import unicodedata
from pathlib import Path

import pytest
import torch
from clitools import TFM, has_module, tfm, tfm_env

from tfm_cli import Translator
from tfm_cli.attention import (
    KINDS,
    alignment,
    attention_report,
    explain,
    find_token,
    focus,
    head_summary,
    merge_words,
    word_groups,
)
from tfm_cli.errors import TfmError
from tfm_cli.model.masks import causal_mask, padding_mask

pytestmark = pytest.mark.slow

SENTENCE = "L'animal n'a pas traversé la rue parce qu'il était trop fatigué."


@pytest.fixture(scope="module")
def translator(trained: dict) -> Translator:
    return Translator.load(trained["dir"], device="cpu", precision="fp32")


@pytest.fixture(scope="module")
def report(translator: Translator):
    return attention_report(translator, SENTENCE)


# ---- the weights ---------------------------------------------------------------------------------------------


def test_shapes_rows_and_causality(report) -> None:
    s, t = len(report.src_tokens), len(report.tgt_tokens)
    assert report.src_tokens[-1] == "</s>" and report.tgt_tokens[-1] == "</s>" and report.tgt_inputs[0] == "<s>"
    assert report.tgt_inputs[1:] == report.tgt_tokens[:-1]
    shapes = {k: tuple(report.weights[k].shape) for k in KINDS}
    assert shapes == {"encoder": (2, 4, s, s), "decoder": (2, 4, t, t), "cross": (2, 4, t, s)}
    for kind in KINDS:
        w = report.weights[kind]
        assert torch.allclose(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-5), kind
        assert (w >= 0).all()
    above = torch.ones(t, t, dtype=torch.bool).triu(1)
    assert (report.weights["decoder"][..., above] == 0).all()  # no query sees a later position


def test_padded_keys_get_zero_and_the_explicit_path_equals_the_fast_one(translator: Translator) -> None:
    model, tok, cfg = translator.model, translator.tokenizer, translator.model.config
    seqs = [tok.encode("Je suis étudiant.") + [cfg.eos_id], tok.encode("Merci.") + [cfg.eos_id]]
    src = torch.full((2, max(map(len, seqs))), cfg.pad_id)
    for i, seq in enumerate(seqs):
        src[i, : len(seq)] = torch.tensor(seq)
    tgt = torch.tensor([[cfg.bos_id] + tok.encode("I am.")] * 2)
    src_mask, tgt_mask = padding_mask(src, cfg.pad_id), causal_mask(tgt.size(1))
    with torch.no_grad():
        maps = model.attention_maps(src, tgt, src_mask, tgt_mask)
        pad = ~src_mask[1, 0, 0]  # the second sentence's padding
        assert pad.any()
        for kind in ("encoder", "cross"):
            for w in maps[kind]:
                assert (w[1][..., pad] == 0).all(), kind
        # The explicit-math path (weights on request) computes what the fused path computes.
        memory_fast = model.encode(src, src_mask)
        memory_math, _ = model.encode(src, src_mask, need_weights=True)
        assert torch.allclose(memory_fast, memory_math, atol=1e-5)
        logits_fast = model.decode(tgt, memory_fast, src_mask, tgt_mask)
        logits_math = model.decode(tgt, memory_fast, src_mask, tgt_mask, need_weights=True)[0]
        assert torch.allclose(logits_fast, logits_math, atol=1e-4)


def _words_as_aligners_count(text: str) -> list[str]:
    """`text` split at spaces, and the punctuation that opens or closes a word split off it (Moses-like)."""
    words = []
    for word in text.split():
        opening = re.match(r"^[^\w]*", word).group()
        closing = re.search(r"[^\w]*$", word[len(opening):]).group()
        words += [part for part in (opening, word[len(opening):len(word) - len(closing)], closing) if part]
    return words


def test_words_keep_rows_summing_to_one(report) -> None:
    words = merge_words(report)
    # the words as written, the punctuation before or after one a word of its own (`fatigué` `.`)
    assert words.word_level and [t for t in words.src_tokens if t != "</s>"] == _words_as_aligners_count(SENTENCE)
    assert [t for t in words.tgt_tokens if t != "</s>"] == _words_as_aligners_count(report.target)
    for kind in KINDS:
        w = words.weights[kind]
        assert w.shape[-2:] == (len(words.query_tokens(kind)), len(words.key_tokens(kind)))
        assert torch.allclose(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-5), kind
    # A word's key weight is the sum of its pieces' weights (here: the first query, layer 1, head 1).
    groups = word_groups(report.src_tokens)
    row = report.weights["encoder"][0, 0]
    first_word_queries = groups[0]
    expected = row[first_word_queries][:, groups[1]].sum(-1).mean()
    assert float(words.weights["encoder"][0, 0, 0, 1]) == pytest.approx(float(expected), abs=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_step_by_step_reproduces_the_heatmap(report, kind: str) -> None:
    query = len(report.query_tokens(kind)) - 2
    for layer in range(report.n_layers["encoder" if kind == "encoder" else "decoder"]):
        for head in range(report.n_heads):
            data = explain(report, kind, layer, head, query)
            weights = torch.tensor([r["weight"] for r in data["rows"]], dtype=torch.float32)
            visible = len(data["rows"])
            assert visible == (query + 1 if kind == "decoder" else len(report.key_tokens(kind)))
            assert torch.allclose(weights, report.weights[kind][layer, head, query, :visible], atol=1e-5)
            for r in data["rows"]:
                assert r["scaled"] == pytest.approx(r["dot"] / data["sqrt_d_k"])


def test_focus_summary_and_alignment_agree_with_the_weights(report) -> None:
    query = find_token(report.src_tokens, "il")
    assert "il" in re.split(r"\W+", report.src_tokens[query].replace("▁", ""))  # "il", or "qu'il" in one piece
    data = focus(report, "encoder", query)
    w = report.weights["encoder"][:, :, query, :]
    for layer, per_head in enumerate(data["top"]):
        for head, top in enumerate(per_head):
            assert top["weight"] == pytest.approx(float(w[layer, head].max())) and top["key"] == int(w[layer, head].argmax())
    rows = head_summary(report)
    assert len(rows) == (2 + 2 + 2) * 4
    for r in rows:
        n_keys = len(report.key_tokens(r["kind"]))
        assert 0 <= r["entropy"] <= torch.log(torch.tensor(float(n_keys))) + 1e-5
        assert 0 < r["max_weight"] <= 1 and 0 <= r["eos_share"] <= 1 and 0 <= r["punct_share"] <= 1
    pairs = alignment(report)
    words = merge_words(report)
    assert [j for _, j in pairs] == list(range(len(words.tgt_tokens) - 1))  # every target word once, not </s>
    assert all(0 <= i < len(words.src_tokens) - 1 for i, _ in pairs)


def test_the_api_refuses_what_it_cannot_show(translator: Translator, report, trained: dict) -> None:
    """A bad selection gave all-null weights (`to_dict(kind="cros")`, `to_dict(layer=3)` of a 2-layer model) or a
    bare IndexError/KeyError (`matrix`, `focus`, `explain`, `alignment`); a path for the translator, None or bytes
    for the sentence failed inside the tokenizer; the weights of an int8 translator were its quantized copy's; and
    inside a caller's bf16 autocast the weights were bf16 (up to 0.011 apart), though documented fp32."""
    layers, heads = report.n_layers["encoder"], report.n_heads
    for call, said in (
        (lambda: report.to_dict(kind="cros"), "kind='cros' is not one of"),
        (lambda: report.to_dict(layer=layers), f"layer={layers} is out of range: 0 to {layers - 1}"),
        (lambda: report.to_dict(layer=-1), "layer=-1 is out of range"),
        (lambda: report.to_dict(head=heads), f"head={heads} is out of range"),
        (lambda: report.matrix("cross", 0, heads), "head="),
        (lambda: focus(report, "cross", len(report.tgt_tokens)), "query="),
        (lambda: focus(report, None, 0), "kind=None is not one of"),
        (lambda: explain(report, "bogus", 0, 0, 0), "kind='bogus' is not one of"),
        (lambda: alignment(report, layer=layers + 5), "layer="),
    ):
        with pytest.raises(ValueError, match=re.escape(said)):
            call()
    for args in ((str(trained["dir"]), "Je suis."), (translator, None), (translator, b"Je suis."), (translator, "Je suis.", 5)):
        with pytest.raises(TypeError, match="attention_report\\(\\) takes"):
            attention_report(*args)
    with pytest.raises(TfmError, match="int8"):
        attention_report(Translator.load(trained["dir"], device="cpu", precision="int8"), SENTENCE)
    # decode settings are checked (beam=0, an unknown one), and refused with a target, which nothing decodes:
    # both were taken without a word there
    with pytest.raises(TfmError, match="beam=0 must be >= 1"):
        attention_report(translator, SENTENCE, beam=0)
    for settings in ({"beam": 0}, {"bogus": 1}, {"greedy": True}):
        with pytest.raises(TfmError, match=r"decode settings \(.*\) have no effect with a target"):
            attention_report(translator, SENTENCE, "I am a student.", **settings)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = attention_report(translator, SENTENCE)
    assert all(torch.equal(inside.weights[k], report.weights[k]) for k in KINDS)



def test_numbers_are_shown_as_the_model_reads_them(translator: Translator) -> None:
    """The trained model reads numbers as the placeholder (model.numbers, a new model's way): the source's pieces
    are of XNUM, not of its digits, and a target is teacher-forced with the source's numbers as the placeholder
    too (the model's own translation is written with the number back, as tfm translate writes it)."""
    assert translator.model.config.numbers == "placeholders"
    report = attention_report(translator, "J'ai 3 chats.", "I have 3 cats.")
    assert "XNUM" in "".join(report.src_tokens) and "3" not in "".join(report.src_tokens)
    assert "XNUM" in "".join(report.tgt_tokens) and "3" not in "".join(report.tgt_tokens)
    assert report.source == "J'ai 3 chats." and report.target == "I have 3 cats."
    own = attention_report(translator, "J'ai 3 chats.")
    assert "XNUM" not in own.target and own.target == translator.translate("J'ai 3 chats.", split_sentences=False).text


def test_numpy_and_tensor_indices_are_indices(report) -> None:
    """An index from numpy (`np.argmax` of a row) or a one-element integer tensor is an index: both were refused
    as "must be an int", though torch and numpy take them; a float, a bool or a string still is not."""
    import numpy as np

    last = report.n_layers["decoder"] - 1
    expected = report.matrix("cross", last, 0)
    for layer, head in ((np.int64(last), np.int32(0)), (torch.tensor(last), torch.tensor(0))):
        assert torch.equal(report.matrix("cross", layer, head), expected)
        # written as JSON as the plain ints are (the selection held np.int64(1): "not JSON serializable")
        shown = json.dumps(report.to_dict(kind="cross", layer=layer, head=head))
        assert shown == json.dumps(report.to_dict(kind="cross", layer=last, head=0))
        assert json.dumps(explain(report, "cross", layer, head, np.int64(0))) == json.dumps(explain(report, "cross", last, 0, 0))
    query = int(np.argmax(expected[:, 0].numpy()))
    assert json.dumps(focus(report, "cross", np.int64(query))) == json.dumps(focus(report, "cross", query))
    for bad, name in ((1.0, "float"), (True, "bool"), ("0", "str"), (torch.tensor(0.0), "Tensor")):
        with pytest.raises(TypeError, match=f"layer must be an int \\(0-based\\) or None, not {name}"):
            report.matrix("cross", bad, 0)
    with pytest.raises(ValueError, match="layer=99 is out of range"):
        report.matrix("cross", np.int64(99), 0)


def test_find_token() -> None:
    tokens = ["▁L'", "an", "▁qu'il", "▁était", "</s>"]
    assert find_token(tokens, "il") == 2 and find_token(tokens, "qu'il") == 2 and find_token(tokens, "3") == 2
    assert find_token(tokens, "ÉTAIT") == 3
    with pytest.raises(TfmError, match="'elle' is not in the sentence") as info:
        find_token(tokens, "elle")
    assert "3:▁qu'il" in info.value.hint
    with pytest.raises(TfmError, match="out of range: the tokens are numbered 1-5"):
        find_token(tokens, "9")
    # a character the vocabulary lacks is spelled in byte pieces: found by its text, at its first byte
    spelled = ["▁Le", "▁", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>", "▁", "<0xE6>", "<0x88>", "<0x91>", "<0xE7>", "<0x9A>",
               "<0x84>", "▁", "<0xD7>", "<0xA9>", ".", "</s>"]  # Le 😀 我的 ש.
    assert [find_token(spelled, q) for q in ("😀", "我", "的", "我的", "ש")] == [2, 7, 10, 7, 14]
    with pytest.raises(TfmError, match="'我的ש' is not in the sentence"):
        find_token(spelled, "我的ש")  # not one run: a "▁" between
    # a target row is labelled by the token it predicts: "<s>" (which none predicts) is the first, that reads it
    targets, inputs = ["▁I", "▁am", "</s>"], ["<s>", "▁I", "▁am"]
    assert find_token(targets, "<s>", inputs) == 0 and find_token(targets, "am", inputs) == 1
    with pytest.raises(TfmError, match="'<s>' is not in the sentence"):
        find_token(tokens, "<s>")  # the source has no <s>


# ---- through the command line ----------------------------------------------------------------------------------


def _run(trained: dict, *args: str, check: bool = True):
    return tfm("inspect-attn", "--model", str(trained["dir"]), "--device", "cpu", SENTENCE, *args, check=check)


def _at_a_terminal(trained: dict, *args: str, term: str, colorterm: str | None) -> str:
    """stdout of `tfm inspect-attn` run at a pseudo-terminal whose TERM (and COLORTERM) say how many colours it has."""
    import os
    import pty

    parent, child = pty.openpty()
    env = tfm_env({"NO_COLOR": None, "TERM": term, "COLORTERM": colorterm, "COLUMNS": "200"})
    proc = subprocess.Popen([str(TFM), "inspect-attn", "--model", str(trained["dir"]), "--device", "cpu", SENTENCE, *args],
                            stdout=child, stderr=subprocess.PIPE, env=env)
    os.close(child)
    chunks = []
    while True:
        try:
            chunk = os.read(parent, 65536)
        except OSError:  # the child closed its side
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(parent)
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    return b"".join(chunks).decode("utf-8")


def test_cli_colour_heatmap_sets_its_ink_and_falls_back_to_shades(trained: dict) -> None:
    """At a colour terminal the cells set only their paper: a dark theme's light ink vanished on the light cells,
    a weight under 0.5% was "0" where piped output says "·", the legend named shade characters it did not draw, and
    a terminal of 16 colours (TERM=xterm) drew 0.003 and 0.19 in the same colour."""
    text = _at_a_terminal(trained, "--numbers", term="xterm-256color", colorterm="truecolor")
    assert "\x1b[" in text and "48;2;" in text  # coloured cells
    cells = re.findall(r"\x1b\[([0-9;]*)m([^\x1b]*)", text)
    painted = [(codes, body) for codes, body in cells if "48;2;" in codes]
    assert painted and all("38;2;" in codes for codes, _ in painted)  # every cell sets its ink
    assert any(body.strip() == "·" for _, body in painted)  # as piped output marks the tiny weights
    assert not any(body.strip() == "0" for _, body in painted)
    plain = _at_a_terminal(trained, term="xterm-256color", colorterm="truecolor")
    assert "colours: white 0 to dark blue 1" in plain and "shades:" not in plain
    sixteen = _at_a_terminal(trained, term="xterm", colorterm=None)
    assert "48;2;" not in sixteen and "48;5;" not in sixteen and "shades: '" in sixteen  # the six shade levels
    # a terminal of 256 colours put the blues on the palette's five (0.71 and 1.0 alike): greys there, ~20 levels
    palette = _at_a_terminal(trained, term="xterm-256color", colorterm=None)
    assert "48;5;" in palette and "48;2;" not in palette and "colours: white 0 to black 1" in palette
    from tfm_cli.cli.inspect_attn import _paper

    levels = [_paper(w / 20, "256") for w in range(21)]
    assert len(set(levels)) >= 20 and levels[0] == "color(231)" and levels[-1] == "color(232)", levels
    assert _paper(0.71, "256") != _paper(1.0, "256") and _paper(0.1, "256") != _paper(0.3, "256")
    assert _paper(0.5, "truecolor") == "rgb(155,155,255)"


def test_cli_heatmap_and_numbers(trained: dict, report) -> None:
    lines = _run(trained).stdout.splitlines()
    assert lines[0].startswith("encoder-decoder cross-attention, layer 2, mean of heads")
    assert len([line for line in lines if re.match(r"^\s+\d+ \S", line)]) == len(report.tgt_tokens)
    first = report.src_tokens[0].replace("▁", "")
    assert any(line.startswith(f"keys: 1 {first}  2 ") for line in lines)
    numbers = _run(trained, "--kind", "encoder", "--layer", "1", "--head", "2", "--numbers").stdout.splitlines()
    assert numbers[0].startswith("encoder self-attention, layer 1, head 2")
    prefix = f"  1 {first}"
    row = next(line for line in numbers if line.startswith(prefix + " "))
    values = [int(v) for v in re.findall(r"\d+", row[len(prefix):].replace("·", " 0"))]
    expected = [round(100 * float(x)) for x in report.weights["encoder"][0, 1, 0]]
    assert values == [e if e >= 1 else 0 for e in expected]  # the printed percentages are the weights


def test_cli_token_explain_summary_align_words(trained: dict, report) -> None:
    query = find_token(report.src_tokens, "il")
    label = report.src_tokens[query].replace("▁", "")
    focused = _run(trained, "--token", "il").stdout
    assert f"Where \"{label}\" (query {query + 1}) attends in encoder self-attention" in focused and "layer 2:" in focused
    explained = _run(trained, "--token", "il", "--explain", "--layer", "2", "--head", "3").stdout
    assert f"layer 2, head 3, query {query + 1}" in explained and "softmax" in explained
    data = explain(report, "encoder", 1, 2, query)
    best = max(data["rows"], key=lambda r: r["weight"])
    assert f"takes {best['weight']:.0%} of the attention" in explained
    assert "not used" not in _run(trained, "--token", "il", "--explain", "--layer", "2", "--head", "3").stderr
    # --head mean typed with --explain explained head 1 without a word; left out, head 1 is the documented default
    mean = _run(trained, "--token", "il", "--explain", "--head", "mean", check=False)
    assert mean.returncode == 2 and "--explain shows one head's numbers" in mean.stderr and mean.stdout == ""
    assert f"layer 2, head 1, query {query + 1}" in _run(trained, "--token", "il", "--explain").stdout
    ignored = _run(trained, "--token", "il", "--layer", "1", "--head", "2").stderr  # the table shows all of them
    assert "warning: --layer and --head are not used here: the --token table shows every layer and head" in ignored
    assert "--head is not used here: the summary shows every layer and head" in _run(trained, "--summary", "--head", "1").stderr
    # with the summary beside it, --explain takes them: the warning said they were unused (a review found it)
    both = _run(trained, "--summary", "--token", "il", "--explain", "--layer", "2", "--head", "3")
    assert "not used" not in both.stderr and f"layer 2, head 3, query {query + 1}" in both.stdout
    summary = _run(trained, "--summary")
    assert len([line for line in summary.stdout.splitlines() if re.match(r"^(encoder|decoder|cross)\t\d", line)]) == 24
    assert "sharpest head" in summary.stderr
    aligned = _run(trained, "--align").stdout.splitlines()[0]
    assert aligned == " ".join(f"{i}-{j}" for i, j in alignment(report))
    encoder = _run(trained, "--align", "--kind", "encoder")  # the kind was dropped without a word
    assert encoder.stdout.splitlines()[0] == aligned and "warning: --kind encoder is not used here: --align reads cross-attention" in encoder.stderr
    assert "not used" not in _run(trained, "--align", "--kind", "cross").stderr
    words = _run(trained, "--words", "--kind", "encoder").stdout
    assert "keys: 1 L'animal  2 n'a" in words


def test_cli_token_start_of_sentence(trained: dict, report) -> None:
    """The decoder heatmap lists <s> among its keys, but --token '<s>' --kind decoder said it was not in the
    sentence: the rows are labelled by the token each position predicts. It selects the first row."""
    data = json.loads(_run(trained, "--token", "<s>", "--kind", "decoder", "--explain", "--head", "2", "--json").stdout)
    assert data["focus"]["query"] == 0 and data["explain"]["query"] == 0
    assert [r["token"] for r in data["explain"]["rows"]] == ["<s>"]  # the first position sees only <s>
    assert torch.allclose(torch.tensor(data["focus"]["layer_means"]), report.weights["decoder"][:, :, 0, :].mean(dim=1), atol=1e-5)
    focused = _run(trained, "--token", "<s>").stdout  # not in the source: cross-attention, the first row
    assert f'Where "{report.tgt_tokens[0].replace("▁", "")}" (query 1) attends in encoder-decoder cross-attention' in focused
    proc = _run(trained, "--token", "<s>", "--kind", "encoder", check=False)  # the target's, not the source's
    assert proc.returncode == 1 and "--token '<s>' is a target token, and --kind encoder's queries are the source's" in proc.stderr


def test_cli_sentence_from_stdin_or_a_file_name(trained: dict, tmp_path: Path) -> None:
    """`-` inspected the text "-", and a file's name was inspected as a sentence: `-` reads the one sentence
    on stdin (as tfm translate does), and a SENTENCE naming a file is refused, pointing to stdin."""
    base = ["inspect-attn", "--model", str(trained["dir"]), "--device", "cpu", "--kind", "encoder", "--json"]
    given = json.loads(tfm(*base, SENTENCE).stdout)
    piped = json.loads(tfm(*base, "-", stdin=f"\ufeff\n{SENTENCE}\r\n\n").stdout)
    assert piped["source"] == SENTENCE and piped["src_tokens"] == given["src_tokens"]
    assert piped["attention"] == given["attention"]
    typed = shlex.join(["tfm", *base, "-"])  # the hints pipe into the command as given: --model kept
    for stdin, message, hint in (("Je suis là.\n\nTu es là.\n", "stdin holds more than one sentence (lines 1 and 3)",
                                  f"sed -n 3p input.fr | {typed}"),
                                 (" \n", "stdin holds no sentence to inspect", f"head -n 1 input.fr | {typed}")):
        proc = tfm(*base, "-", stdin=stdin, check=False)
        assert proc.returncode == 1 and f"Error: {message}" in proc.stderr and proc.stdout == "", proc.stderr
        assert proc.stderr.strip().endswith(hint), proc.stderr
    sentences = tmp_path / "input.fr"
    sentences.write_text(SENTENCE + "\n", encoding="utf-8")
    proc = tfm(*base, "input.fr", check=False, cwd=tmp_path)
    assert proc.returncode == 2 and "is a file, not a sentence" in proc.stderr and proc.stdout == ""
    # `head -n 1 input.fr | tfm inspect-attn -` dropped --model: pasted, it inspected the most recent run under runs/
    command = re.search(r"give it on stdin \((.*)\)$", proc.stderr.splitlines()[0]).group(1)
    assert command == f"head -n 1 input.fr | {typed}"
    followed = subprocess.run(command.replace("| tfm ", f"| {TFM} "), shell=True, cwd=tmp_path, capture_output=True, env=tfm_env())
    assert followed.returncode == 0 and json.loads(followed.stdout)["attention"] == given["attention"], followed.stderr


def test_word_units_of_scripts_written_without_spaces() -> None:
    """Chinese has no "▁" inside a sentence: the whole target was one "word" (--words, --align). There each piece
    is a unit, and so is the punctuation after one; the byte pieces of one character stay together; spaced
    scripts keep their words."""
    chinese = ["▁我的", "朋友", "喜欢", "<0xE8>", "<0x8B>", "<0xB9>", "果", "。", "</s>"]  # 苹 spelled in bytes
    assert word_groups(chinese) == [[0], [1], [2], [3, 4, 5], [6], [7], [8]]
    thai = ["▁วันนี้", "อากาศ", "ดี", "</s>"]
    assert word_groups(thai) == [[0], [1], [2], [3]]
    mixed = ["<s>", "▁The", "▁i", "Phone", "手机", "▁is", "▁sh", "<0xD7>", "<0xA9>", "!", "</s>"]
    assert word_groups(mixed) == [[0], [1], [2, 3], [4], [5], [6, 7, 8], [9], [10]]
    spelled = ["▁", "<0xE6>", "<0x88>", "<0x91>", "<0xE7>", "<0x9A>", "<0x84>", "</s>"]  # " 我的" in bytes
    assert word_groups(spelled) == [[0, 1, 2, 3], [4, 5, 6], [7]]
    assert word_groups(["▁", "▁Je", "</s>"]) == [[0], [1], [2]]  # as before: a word after a bare "▁" is its own
    # punctuation before or after a word is a word of its own (`--align` gave `She <- rouge.`); inside one it stays
    french = ["▁Elle", "▁a", "▁une", "▁voiture", "▁rouge", ".", "</s>"]
    assert word_groups(french) == [[0], [1], [2], [3], [4], [5], [6]]
    framed = ["▁", "(", "B", "on", "jour", ")", "▁«", "▁S", "al", "ut", "▁»", "▁?", "</s>"]
    assert word_groups(framed) == [[0, 1], [2, 3, 4], [5], [6], [7, 8, 9], [10], [11], [12]]
    inside = ["▁W", "ow", "!", "!", "!", "▁C'est", "-", "à", "-d", "ire", ".", ".", ".", "▁U", ".", "S", ".", "</s>"]
    assert word_groups(inside) == [[0, 1], [2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12], [13, 14, 15], [16], [17]]
    # a word as written, its punctuation with it, is still found (the last word of a sentence copied with its ".")
    assert find_token(french, "rouge.") == 4 and find_token(french, "rouge") == 4 and find_token(french, ".") == 5


def test_cli_heatmap_rows_line_up_with_wide_characters(trained: dict) -> None:
    """Labels are cut and padded by terminal cells: a CJK character takes two, so rows of Chinese query words
    were one to nine cells longer than the header and the shading sat under the wrong keys."""
    from rich.cells import cell_len

    target = "我的朋友喜欢吃非常好吃的苹果。"  # characters this French-English vocabulary spells in bytes
    out = _run(trained, "--target", target, "--words", "--kind", "cross").stdout.splitlines()
    rows = [line for line in out if re.match(r"^ {0,2}\d+ ", line)]  # not the header: the labels' width of spaces
    assert len(rows) == len(target) + 1  # one word per character (and the full stop), then </s>
    assert "\n".join(rows).count("我") == 1 and len({cell_len(line) for line in rows}) == 1, "\n".join(rows)


@pytest.mark.plot
def test_cli_json_target_and_files(trained: dict, tmp_path: Path) -> None:
    data = json.loads(_run(trained, "--target", "The animal did not cross the street.", "--json", "--token", "il", "--explain").stdout)
    assert data["forced_target"] and data["target"] == "The animal did not cross the street."
    assert {"src_tokens", "tgt_tokens", "tgt_inputs", "attention", "summary", "alignment", "focus", "explain"} <= set(data)
    assert len(data["attention"]["cross"]) == 2 and len(data["attention"]["cross"][0]) == 4
    assert len(data["attention"]["cross"][0][0]) == len(data["tgt_tokens"])
    assert len(data["attention"]["cross"][0][0][0]) == len(data["src_tokens"])
    page = tmp_path / "page.html"
    proc = _run(trained, "--html", str(page))
    assert page.is_file() and "wrote" in proc.stderr and "<html" in page.read_text(encoding="utf-8").lower()
    if has_module("matplotlib"):
        image = tmp_path / "heat.png"
        _run(trained, "--image", str(image), "--kind", "encoder")
        assert image.read_bytes()[:4] == b"\x89PNG"


def test_cli_page_holds_the_json_weights(trained: dict, report, tmp_path: Path) -> None:
    """The page embeds the very numbers --json prints (rounded once, to 5 decimals, from the model's weights);
    it rounded them again to 4 decimals, so its read-out could differ from --json's by 1e-4 (0.00005 -> 0.0001)."""
    page = tmp_path / "page.html"
    data = json.loads(_run(trained, "--json", "--html", str(page)).stdout)
    match = re.search(r'<script type="application/json" id="report">(.*?)</script>', page.read_text(encoding="utf-8"), flags=re.S)
    embedded = json.loads(match.group(1))
    assert embedded["attention"] == data["attention"] and embedded["tgt_tokens"] == data["tgt_tokens"] == report.tgt_tokens
    for kind in KINDS:
        assert torch.allclose(torch.tensor(embedded["attention"][kind], dtype=torch.float64), report.weights[kind].double(), atol=5.001e-6, rtol=0)
    assert embedded["view"] == {"kind": "cross", "layer": 1, "head": None, "query": None}  # the terminal's default view: the last layer
    _run(trained, "--kind", "encoder", "--layer", "1", "--head", "3", "--html", str(page))
    match = re.search(r'<script type="application/json" id="report">(.*?)</script>', page.read_text(encoding="utf-8"), flags=re.S)
    assert json.loads(match.group(1))["view"] == {"kind": "encoder", "layer": 0, "head": 2, "query": None}  # the page opens there


def test_cli_bad_input(trained: dict, tmp_path: Path) -> None:
    base = ["inspect-attn", "--model", str(trained["dir"]), "--device", "cpu"]
    cases = [
        (["   "], "the sentence to inspect is empty"),
        ([SENTENCE, "--token", "elle"], "--token 'elle' is in neither the source nor the translation the model gave"),
        ([SENTENCE, "--token", "elle", "--target", "The animal was tired."], "--token 'elle' is in neither the source nor the target"),
        # a source word with --kind cross was "not in the sentence"
        ([SENTENCE, "--kind", "cross", "--token", "animal"], "--token 'animal' is a source token, and --kind cross's queries are the target's tokens"),
        ([SENTENCE, "--kind", "encoder", "--layer", "9"], "--layer 9 is out of range: the encoder has layers 1-2"),
        ([SENTENCE, "--head", "5"], "--head 5 is out of range: the model has heads 1-4"),
        # said before the sentence is translated (here: before it is found too long to be)
        (["maison " * 80, "--layer", "9"], "--layer 9 is out of range: the decoder has layers 1-2"),
        (["maison " * 80, "--head", "7"], "--head 7 is out of range: the model has heads 1-4"),
    ]
    for args, message in cases:
        proc = tfm(*base, *args, check=False)
        assert proc.returncode == 1 and message in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)
        assert len([line for line in proc.stderr.splitlines() if line.startswith("Error:")]) == 1
        # a word of another translation (the seeds' "it" where the model said "he"): --target asks about it
        assert ("give the translation to inspect with --target" in proc.stderr) == (args[1:3] == ["--token", "elle"] and "--target" not in args)
    proc = tfm(*base, SENTENCE, "--explain", check=False)
    assert proc.returncode == 2 and "--token" in proc.stderr
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "model.safetensors").write_bytes((trained["dir"] / "model.safetensors").read_bytes())
    proc = tfm("inspect-attn", "--model", str(bare), "--device", "cpu", SENTENCE, check=False)
    assert proc.returncode == 1 and "tokenizer.json is missing" in proc.stderr


def test_cli_inspects_the_translation_tfm_translate_prints(trained: dict) -> None:
    """inspect-attn translated in fp32 whatever the machine, while tfm translate's default (auto) is bf16 on CUDA and
    on CPUs with native bf16: for about one sentence in ten of a small model the "model's translation" it showed was
    not the one tfm translate printed. It translates with tfm translate's precision (--precision, default auto);
    the weights are computed in fp32 on that translation."""
    bf16 = Translator.load(trained["dir"], device="cpu", precision="bf16")
    fp32 = Translator.load(trained["dir"], device="cpu", precision="fp32")
    sentence = next(s for s in trained["sources"] if bf16.translate(s).text != fp32.translate(s).text)
    base = ["--model", str(trained["dir"]), "--device", "cpu"]
    for precision in ([], ["--precision", "bf16"], ["--precision", "fp32"]):
        printed = tfm("translate", *base, *precision, sentence).stdout.rstrip("\n")
        data = json.loads(tfm("inspect-attn", *base, *precision, sentence, "--kind", "encoder", "--json").stdout)
        assert data["target"] == printed and not data["forced_target"], (precision, sentence)
    forced = json.loads(tfm("inspect-attn", *base, sentence, "--target", bf16.translate(sentence).text, "--json").stdout)
    in_bf16 = json.loads(tfm("inspect-attn", *base, "--precision", "bf16", sentence, "--json").stdout)
    assert in_bf16["attention"] == forced["attention"]  # the weights themselves are fp32 whatever the translation's precision
    proc = tfm("inspect-attn", *base, "--precision", "int8", sentence, check=False)
    assert proc.returncode == 2 and "int8" in proc.stderr and "Traceback" not in proc.stderr


def test_find_token_of_a_word_in_several_pieces() -> None:
    """--token found a piece, or a word inside one piece, but not a word the vocabulary splits ("été" as "▁ét"
    "é.", "Prix" as "▁P" "ri" "x"): it said the word was not in the sentence. Such a word is found at the piece
    where it starts ("animal" in "▁L'" "an" "imal" at "an"); a query in NFD, in capitals or with ' for ’ (or the
    other way round) finds the same token."""
    tokens = ["▁Il", "▁fait", "▁chaud", "▁en", "▁ét", "é.", "▁P", "ri", "x", "▁L’", "an", "imal", "▁qu’il", "</s>"]
    found = {q: find_token(tokens, q) for q in ("été", "ÉTÉ", "e\u0301te\u0301", "été.", "prix", "animal", "l'animal", "l’animal",
                                                  "qu'il", "é.")}
    assert found == {"été": 4, "ÉTÉ": 4, "e\u0301te\u0301": 4, "été.": 4, "prix": 6, "animal": 10, "l'animal": 9,
                     "l’animal": 9, "qu'il": 12, "é.": 5}
    pieces = ["▁l", "'", "ap", "rès", "-", "mid", "i", "</s>"]
    assert [find_token(pieces, q) for q in ("midi", "après", "l'après-midi")] == [5, 2, 0]
    for partial in ("mi", "ida", "té"):  # a piece of a word is not a word
        with pytest.raises(TfmError, match="is not in the sentence"):
            find_token(pieces + ["▁ét", "é."], partial)


def test_find_token_in_scripts_without_spaces_and_turkish_capitals() -> None:
    """Where a script has no spaces every piece is a unit, so a word over several pieces ("แมว" as "แ" "ม" "ว") or
    inside one ("果" in "苹果") was "not in the sentence"; and Python lowercases "İ" to "i" and a combining dot,
    so "istanbul" never found "İstanbul" though case "does not matter"."""
    thai = ["▁", "ฉัน", "ชอบ", "แ", "ม", "ว", "มา", "ก", "</s>"]
    assert [find_token(thai, q) for q in ("แมว", "ชอบแ", "ชอบ", "มาก")] == [3, 2, 2, 6]
    chinese = ["▁", "我", "喜欢", "苹果", "。", "</s>"]
    assert [find_token(chinese, q) for q in ("我喜欢", "果", "欢苹", "喜欢")] == [1, 3, 2, 2]
    for absent in ("香蕉", "我爱"):
        with pytest.raises(TfmError, match="is not in the sentence"):
            find_token(chinese, absent)
    mixed = ["▁I", "▁like", "▁", "苹果", "▁ap", "ples", "</s>"]
    with pytest.raises(TfmError, match="is not in the sentence"):
        find_token(mixed, "like苹")  # a letter of a spaced script: words are matched as before, not runs of letters
    with pytest.raises(TfmError, match="is not in the sentence"):
        find_token(mixed, "pl")
    turkish = ["▁İstanbul", "'", "da", "▁ÖĞRENCİ", "▁ılık", "▁KIŞ", "</s>"]
    found = {q: find_token(turkish, q) for q in ("istanbul", "ISTANBUL", "İSTANBUL", "öğrenci", "Öğrenci", "ılık", "ILIK", "kış")}
    assert found == {"istanbul": 0, "ISTANBUL": 0, "İSTANBUL": 0, "öğrenci": 3, "Öğrenci": 3, "ılık": 4, "ILIK": 4, "kış": 5}


def test_cli_token_of_a_word_in_several_pieces(trained: dict) -> None:
    """`--token traversé`, a word this vocabulary spells in several pieces, shows the piece it starts with, and says so."""
    pieces = Translator.load(trained["dir"], device="cpu", precision="fp32").tokenizer.pieces(SENTENCE)
    starts = [i for i, p in enumerate(pieces) if p.startswith("▁")] + [len(pieces)]
    word = SENTENCE.split()[3]
    start, end = starts[3], starts[4]
    assert word == "traversé" and end - start > 1, pieces[start:end]  # else this test shows nothing
    data = json.loads(_run(trained, "--token", word, "--kind", "encoder", "--json").stdout)
    assert data["focus"]["query"] == start and data["focus"]["query_token"] == pieces[start]
    proc = _run(trained, "--token", unicodedata.normalize("NFD", word).upper(), "--kind", "encoder")
    label = pieces[start].replace("▁", "")
    assert f'Where "{label}" (query {start + 1}) attends in encoder self-attention' in proc.stdout
    spelled = " ".join(p.replace("▁", "") for p in pieces[start:end])
    assert f'"traversé" is {end - start} pieces here ({spelled}): the view is of its piece 1, "{label}" ' \
        f'(query {start + 1}; --words merges a word\'s pieces)' in proc.stderr
    # its second piece, by number: "the view is of piece 5" named the query's number as if it were the piece's
    proc = _run(trained, "--token", str(start + 2), "--kind", "encoder")
    assert f'pieces here ({spelled}): the view is of its piece 2, "{pieces[start + 1].replace("▁", "")}" (query {start + 2};' in proc.stderr


def test_cli_json_alignment_names_the_words_it_counts(trained: dict) -> None:
    """--json gave the alignment's Pharaoh indices with subword `src_tokens` only: a script had to split the
    sentence at spaces to read them, which is wrong as soon as a Chinese word is inside it ("東京" is two words
    here: 1-j named "東", 2-j "京", where the split gave "東京" and "beaucoup."). The JSON names the words."""
    base = ["inspect-attn", "--model", str(trained["dir"]), "--device", "cpu", "J'aime 東京 beaucoup.", "--target", "I love Tokyo a lot."]
    data = json.loads(tfm(*base, "--json").stdout)
    # (the full stops are words of their own, as word aligners count them)
    assert data["src_words"] == ["J'aime", "東", "京", "beaucoup", "."] and data["tgt_words"] == ["I", "love", "Tokyo", "a", "lot", "."]
    pairs = [tuple(map(int, pair.split("-"))) for pair in data["alignment"].split()]
    assert [j for _, j in pairs] == list(range(6)) and all(0 <= i < 5 for i, _ in pairs)
    words = json.loads(tfm(*base, "--json", "--words").stdout)
    assert words["src_words"] == words["src_tokens"][:-1] == data["src_words"] and words["alignment"] == data["alignment"]


class _HeatmapInput:
    """What the heatmap reads of an AttentionReport: these tokens, and these weights (else random rows)."""

    def __init__(self, queries: list[str], keys: list[str], weights: torch.Tensor | None = None) -> None:
        self.queries, self.keys = queries, keys
        rows = torch.randn(len(queries), len(keys), generator=torch.Generator().manual_seed(0)).softmax(-1)
        self.weights = rows if weights is None else weights

    def matrix(self, kind, layer, head):
        return self.weights

    def query_tokens(self, kind):
        return self.queries

    def key_tokens(self, kind):
        return self.keys


@pytest.mark.parametrize("columns", [40, 80])
def test_heatmap_lines_fit_the_terminal_in_cells_with_wide_characters(columns: int, capsys, monkeypatch) -> None:
    """The legend was wrapped by characters: Japanese keys (two cells each) ran 96 cells wide at COLUMNS=80 and
    the terminal broke the line inside an entry; the title was never wrapped at all."""
    from rich.cells import cell_len

    from tfm_cli.cli.inspect_attn import _render_heatmap

    keys = ["▁", "大きい", "犬", "とても", "食べる", "見る", "猫", "家", "水", "小さい", "猫", "家", "。"] * 2
    queries = ["The", "big", "dog", "学校", "ね", "</s>"]

    monkeypatch.setenv("COLUMNS", str(columns))
    _render_heatmap(_HeatmapInput(queries, keys), "cross", 0, None, numbers=False)
    lines = capsys.readouterr().out.splitlines()
    assert max(cell_len(line) for line in lines) <= columns, [line for line in lines if cell_len(line) > columns]
    start = next(i for i, line in enumerate(lines) if line.startswith("keys: "))
    end = next(i for i, line in enumerate(lines) if line.startswith("shades: "))
    legend = "  ".join(line.strip() for line in lines[start:end])
    entries = [f"{j + 1} {k.replace('▁', '_')}" for j, k in enumerate(keys)]
    assert legend == "keys: " + "  ".join(entries), legend  # every key, in order, no entry broken


@pytest.mark.parametrize("numbers", [False, True])
def test_key_numbers_of_a_long_sentence_stay_over_their_columns(numbers: bool, capsys, monkeypatch) -> None:
    """From key 100 the header's numbers took 4 cells over 3-cell columns: each drifted one cell further right
    than its column, and the header ran past the terminal's edge. Every number ends where its column's cell ends
    (the weight, or the shade, of that key), on every block, within the width."""
    from tfm_cli.cli.inspect_attn import _render_heatmap

    keys, queries = [f"▁w{j}" for j in range(152)], ["▁a", "▁b", "</s>"]
    hot = {0: 5, 1: 101, 2: 150}  # each query puts all its weight on one key

    weights = torch.zeros(len(queries), len(keys))
    for q, k in hot.items():
        weights[q, k] = 1.0
    monkeypatch.setenv("COLUMNS", "80")
    _render_heatmap(_HeatmapInput(queries, keys, weights), "encoder", 0, None, numbers=numbers)
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80, [line for line in lines if len(line) > 80]
    for q, k in hot.items():
        block = next(i for i, line in enumerate(lines) if line.startswith("keys ") and int(line.split()[1].split("-")[0]) <= k + 1
                     <= int(line.split()[1].split("-")[1]))
        header, row = lines[block + 1], lines[block + 2 + q]
        end = re.search("100" if numbers else "█+", row).end()  # where the key's cell ends (a space after)
        assert header[:end].split()[-1] == str(k + 1) and header[end:end + 1] in (" ", ""), (header, row)


@pytest.mark.parametrize("numbers", [False, True])
def test_right_to_left_labels_keep_the_numbers_after_them_in_their_columns(numbers: bool, capsys, monkeypatch) -> None:
    """A terminal that applies the bidirectional algorithm (Konsole, mlterm, macOS Terminal) joins the digits that
    follow an Arabic or Hebrew letter to its right-to-left run: `1 قطة  ·  51  48` showed as `1 48 51 · قطة`, the
    weights under the wrong keys, and each key's number beside another word in the legend. A left-to-right mark
    (no width) now ends every such label: no digit follows a right-to-left letter without one between."""
    import re

    from rich.cells import cell_len

    from tfm_cli.cli.inspect_attn import _label, _render_heatmap

    keys = ["▁أنا", "▁أحب", "▁القطة", "▁الكبيرة", ".", "▁שלום", "</s>"]
    queries = ["▁I", "▁like", "▁قطة", "▁cat", "</s>"]

    monkeypatch.setenv("COLUMNS", "100")
    _render_heatmap(_HeatmapInput(queries, keys), "cross", 0, None, numbers=numbers)
    out = capsys.readouterr().out
    right_to_left = "[\u0590-\u08ff]"
    assert re.search(right_to_left, out) and not re.search(f"{right_to_left}[^\u200e\\d]*\\d", out), out
    assert "\u200e" not in "".join(line for line in out.splitlines() if not re.search(right_to_left, line))
    assert _label("▁قطة", 16) == "قطة\u200e" and cell_len(_label("▁قطة", 16)) == 3 and _label("▁cat", 16) == "cat"


def test_the_source_line_is_the_text_as_given_when_not_at_a_terminal(trained: dict) -> None:
    """The `source:` line ended in a left-to-right mark (U+200E, for terminals that apply the bidirectional
    algorithm) in a pipe or a log too, so the text copied or grepped from it was not the text given."""
    sentence = "שלום le monde"
    proc = tfm("inspect-attn", "--model", str(trained["dir"]), "--device", "cpu", sentence, "--summary")
    assert f"source: {sentence}\n" in proc.stderr and "\u200e" not in proc.stderr, repr(proc.stderr)


def test_a_piece_that_starts_with_a_combining_mark_is_shown_on_a_dotted_circle() -> None:
    """A Devanagari vowel sign or virama that is a piece of its own combined with the space printed before it."""
    from tfm_cli.cli.inspect_attn import _label

    assert [_label(t, 16) for t in ("े", "▁्", "▁", "नम")] == ["◌े", "◌्", "_", "नम"]


def test_html_page_of_a_token_holds_its_step_by_step_for_every_head(trained: dict, report, tmp_path: Path) -> None:
    """The page had no step-by-step view, and a --token page did not even show that token: it holds --explain's
    numbers for every layer and head of that query now (and pins its row)."""
    from test_attention_page import _embedded

    page = tmp_path / "il.html"
    _run(trained, "--token", "il", "--html", str(page))
    data = _embedded(page.read_text(encoding="utf-8"))
    query = find_token(report.src_tokens, "il")
    assert data["view"]["query"] == query and data["steps"]["kind"] == "encoder" and data["steps"]["query"] == query
    assert len(data["steps"]["heads"]) == report.n_layers["encoder"] * report.n_heads
    for layer, head in ((0, 0), (1, 2)):
        rows = explain(report, "encoder", layer, head, query)["rows"]
        got = data["steps"]["heads"][f"{layer},{head}"]
        assert got == [pytest.approx([r["dot"], r["scaled"], r["weight"]], abs=1e-4) for r in rows]
        assert [w for _, _, w in got] == pytest.approx(data["attention"]["encoder"][layer][head][query], abs=1e-4)
    words = tmp_path / "words.html"  # word-level tokens have no one q and k: no steps
    _run(trained, "--token", "il", "--words", "--html", str(words))
    assert "steps" not in _embedded(words.read_text(encoding="utf-8"))


def test_a_sentence_in_capitals_is_inspected_as_the_model_is_given_it(translator: Translator) -> None:
    """`translate` gives a sentence written in capitals to the model in sentence case (and writes its translation
    in capitals): the report shows the pieces the model was given, and the attention of its own translation, the
    same weights as for the sentence case itself."""
    from tfm_cli.sentences import sentence_case

    shouted = attention_report(translator, SENTENCE.upper())
    cased = attention_report(translator, sentence_case(SENTENCE.upper()))
    assert shouted.source == SENTENCE.upper() and shouted.target == translator.translate(SENTENCE.upper()).text
    assert shouted.target == cased.target.upper()
    assert shouted.src_tokens == cased.src_tokens and shouted.tgt_tokens == cased.tgt_tokens
    for kind in ("encoder", "decoder", "cross"):
        assert torch.equal(shouted.weights[kind], cased.weights[kind])
    raw = attention_report(translator, SENTENCE.upper(), verbatim=True)  # as written: the capitals' own pieces
    assert raw.src_tokens == [*(translator.tokenizer.id_to_piece(i) for i in translator.tokenizer.encode(SENTENCE.upper())), "</s>"]
    assert raw.target == translator.translate(SENTENCE.upper(), verbatim=True).text


def test_a_target_in_capitals_or_a_frame_is_teacher_forced_as_the_model_would_write_it(translator: Translator) -> None:
    """A target is forced as the model writes the translation of a source it is given (sentence case, no frame), so
    its maps are those of a pair the model translates: the same pieces and weights as for the plain target, and as
    written with verbatim=True (the only decode setting a target takes)."""
    from tfm_cli.sentences import sentence_case

    target = "The animal did not cross the street because it was too tired."
    cost = translator.tokenizer.word_cost  # capitals are given in the case the tokenizer knows best
    cases = ((SENTENCE.upper(), target.upper(), sentence_case(target.upper(), cost)), (f'"{SENTENCE}"', f'"{target}"', target),
             (f"- {SENTENCE}", f"- {target}", target))
    for source, given, forced in cases:
        plain = attention_report(translator, SENTENCE, forced)
        report = attention_report(translator, source, given)
        assert report.target == given and report.forced_target
        assert report.src_tokens == plain.src_tokens and report.tgt_tokens == plain.tgt_tokens, given
        for kind in ("encoder", "decoder", "cross"):
            assert torch.equal(report.weights[kind], plain.weights[kind]), (given, kind)
        raw = attention_report(translator, source, given, verbatim=True)
        pieces = [translator.tokenizer.id_to_piece(i) for i in translator.tokenizer.encode(given)]
        assert raw.tgt_tokens == [*pieces, "</s>"] and raw.tgt_tokens != plain.tgt_tokens
    # beside a source given as written, a target is forced as written too (title case, quotes: the user's to force)
    for given in ("The Animal Did Not Cross The Street.", f'"{target}"'):
        report = attention_report(translator, SENTENCE, given)
        assert report.tgt_tokens == [*(translator.tokenizer.id_to_piece(i) for i in translator.tokenizer.encode(given)), "</s>"]
    with pytest.raises(TfmError, match=r"decode settings \(beam\) have no effect with a target"):
        attention_report(translator, SENTENCE, target, beam=2, verbatim=True)
    with pytest.raises(TfmError, match="verbatim='yes' must be True or False"):
        attention_report(translator, SENTENCE, target, verbatim="yes")


def test_cli_verbatim_gives_the_sentence_and_target_as_written(trained: dict, translator: Translator) -> None:
    """`tfm inspect-attn --verbatim` shows the pieces of the sentence and --target as written, as the API's verbatim=True;
    without it, those the model is given (a frame off)."""
    target, source = '"The animal did not cross the street."', f'"{SENTENCE}"'
    for flag, verbatim in (("--verbatim", True), ("--no-verbatim", False)):
        out = json.loads(tfm("inspect-attn", "--model", str(trained["dir"]), "--device", "cpu", source, "--target", target,
                             "--json", flag).stdout)
        report = attention_report(translator, source, target, verbatim=verbatim)
        assert out["tgt_tokens"] == report.tgt_tokens and out["src_tokens"] == report.src_tokens, flag
        assert ('"' in "".join(out["tgt_tokens"])) is verbatim, out["tgt_tokens"]


def test_a_sentence_without_a_letter_is_inspected_only_verbatim(trained: dict, translator: Translator) -> None:
    """`tfm translate` writes "?!..." or "42" as they are, without the model: inspect-attn showed the one row of an
    empty translation labelled "the model's translation". It says so now, and --verbatim shows what the model makes
    of it."""
    for source in ("?!...", "(2020)"):
        with pytest.raises(TfmError, match=f"the sentence {re.escape(repr(source))} has no letter: tfm translate writes it as it is"):
            attention_report(translator, source)
        raw = attention_report(translator, source, verbatim=True)
        assert raw.src_tokens[:-1] == [translator.tokenizer.id_to_piece(i) for i in translator.tokenizer.encode(source)]
    proc = tfm("inspect-attn", "--model", str(trained["dir"]), "--device", "cpu", "42", check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("Error: the sentence '42' has no letter") and "--verbatim" in proc.stderr


def test_cli_token_finds_a_number_read_as_a_placeholder(trained: dict) -> None:
    """`--token 4` on "J'ai 23 ans et 4 chats." showed token 4, `et`, without a word, and `--token 23` was out of
    range: the model reads each number as a placeholder, so no number could be asked for by its digits. A number
    is found at its placeholder, digits that are also another token's index are refused, and `#N` is the index."""
    base = ("inspect-attn", "--model", str(trained["dir"]), "--device", "cpu", "J'ai 23 ans et 4 chats.",
            "--target", "I have 4 cats and I am 23.")
    data = json.loads(tfm(*base, "--token", "23", "--json").stdout)
    src, tgt = data["src_tokens"], data["tgt_tokens"]
    def placeholders(tokens: list[str]) -> list[int]:  # where XNUM starts: one piece, or X N U M in this small vocabulary
        text = [t.replace("▁", "") for t in tokens]
        return [i for i in range(len(text)) if "".join(text[i:i + 4]).startswith("XNUM") and text[i].startswith("X")]

    src_at, tgt_at = placeholders(src), placeholders(tgt)
    assert len(src_at) == 2 and len(tgt_at) == 2, (src, tgt)  # else this test shows nothing
    assert (data["focus"]["kind"], data["focus"]["query"]) == ("encoder", src_at[0])
    # in the target, whose numbers come in another order: 23 is its second placeholder
    cross = json.loads(tfm(*base, "--token", "23", "--kind", "cross", "--json").stdout)["focus"]
    assert (cross["kind"], cross["query"]) == ("cross", tgt_at[1])
    said = tfm(*base, "--token", "23").stderr
    assert f"the number 23 is read by the model as the placeholder XNUM (query {src_at[0] + 1})" in said
    ambiguous = tfm(*base, "--token", "4", check=False)  # token 4 is `et`, the number 4 another token
    assert ambiguous.returncode == 1 and ambiguous.stdout == "" and "Traceback" not in ambiguous.stderr
    assert f"--token 4 is both token 4 ({src[3]}) and the number 4 of the sentence (token {src_at[1] + 1}" in ambiguous.stderr
    assert f"give --token '#4' for token 4, or --token '#{src_at[1] + 1}' for the number" in ambiguous.stderr
    assert json.loads(tfm(*base, "--token", "#4", "--json").stdout)["focus"]["query"] == 3
    assert json.loads(tfm(*base, "--token", f"#{src_at[1] + 1}", "--json").stdout)["focus"]["query"] == src_at[1]
    # with --words, a word may hold two placeholders (`2h30` as `XNUMhXNUM`): the second one's number is said too
    glued = tfm("inspect-attn", "--model", str(trained["dir"]), "--device", "cpu", "Il arrive à 2h30.", "--words", "--token", "30")
    assert "the number 30 is read by the model as the placeholder XNUM" in glued.stderr, glued.stderr
    # digits that are no number of the sentence are the index, as before
    assert json.loads(tfm(*base, "--token", "3", "--json").stdout)["focus"]["query"] == 2
    # with --kind, the same refusal (it said the token was of the other side, and to leave --kind out)
    kind = tfm(*base, "--token", "4", "--kind", "encoder", check=False)
    assert kind.returncode == 1 and "--token 4 is both token 4 (" in kind.stderr and "is a target token" not in kind.stderr
    # a digit inside a number as written (a model that reads digits so, or --verbatim: `1984` as `▁1` `9` `8` `4`) is no
    # number of the sentence: `--token 4` is token 4, and `--token 1984` the number, at its first piece
    verbatim = ("inspect-attn", "--model", str(trained["dir"]), "--device", "cpu", "En 1984, il avait 3 chats.", "--verbatim")
    pieces = json.loads(tfm(*verbatim, "--token", "#1", "--json").stdout)["src_tokens"]
    assert json.loads(tfm(*verbatim, "--token", "4", "--json").stdout)["focus"]["query"] == 3
    first = next(i for i, p in enumerate(pieces) if p.replace("▁", "").startswith("1"))
    assert json.loads(tfm(*verbatim, "--token", "1984", "--json").stdout)["focus"]["query"] == first, pieces


def test_cli_a_line_of_several_sentences_is_said_to_be_translated_whole(trained: dict) -> None:
    """`tfm translate` translates each sentence of a line apart; inspect-attn shows the model's translation of the
    line whole (one source, one output), and said nothing: its target was not the translation translate prints."""
    line = "Il pleut. Je reste à la maison."
    proc = tfm("inspect-attn", "--model", str(trained["dir"]), "--device", "cpu", line, "--align")
    assert "warning: the sentence holds 2 sentences, which tfm translate translates one by one" in proc.stderr
    whole = tfm("translate", "--model", str(trained["dir"]), "--device", "cpu", "--precision", "fp32", "--no-split-sentences", line).stdout.strip()
    assert f"target: {whole}  (the model's translation)" in proc.stderr
    data = json.loads(tfm("inspect-attn", "--model", str(trained["dir"]), "--device", "cpu", line, "--json", "--kind", "cross", "--layer", "1").stdout)
    assert data["sentences"] == 2 and data["target"] == whole
    for quiet in (("--target", "It is raining. I stay at home."), ("--verbatim",), ()):
        args = (line,) if quiet else ("Il pleut.",)
        assert "sentences" not in tfm("inspect-attn", "--model", str(trained["dir"]), "--device", "cpu", *args, *quiet).stderr


def test_cli_html_takes_the_layer_and_head_the_summary_does_not(trained: dict, tmp_path: Path) -> None:
    """`--summary --layer 2 --head 3 --html F` warned that --layer and --head were not used, but the page opens on them."""
    page = tmp_path / "page.html"
    proc = _run(trained, "--summary", "--layer", "2", "--head", "3", "--html", str(page))
    assert "not used" not in proc.stderr and page.is_file()
    assert '"view":{"kind":"cross","layer":1,"head":2,' in page.read_text(encoding="utf-8")  # 0-based
    assert "--layer and --head are not used here" in _run(trained, "--summary", "--layer", "2", "--head", "3").stderr
