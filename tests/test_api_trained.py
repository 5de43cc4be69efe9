"""The Python API on a model that really translates: `train` and `load_recipe` from `tfm_cli`, then `Translator`
against the `tfm translate` command line, bf16 against fp32, and `min_len`.

The model is conftest.py's `trained` fixture (shared with test_inspect_attn.py): varied, sentence-like English,
so agreement between two decoders means something. The e2e model of test_e2e.py is too small for that: it
prints the same string for every input.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TFM = Path(sys.executable).parent / "tfm"


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TFM_DEBUG"}
    env.update({"NO_COLOR": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    proc = subprocess.run(
        [str(TFM), *args], input=stdin or "", capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def test_python_train_api(trained: dict) -> None:
    result = trained["result"]
    assert result.step == 600 and not result.interrupted and result.run_dir == trained["dir"]
    assert (trained["dir"] / "model.safetensors").is_file()
    assert trained["dir"].joinpath("recipe.yaml").read_text(encoding="utf-8").count("seed: 3") == 1  # the override
    final = trained["events"].evaluations[-1]
    assert final["final"] and final["sentences"] == 200 and final["bleu"] == result.final["bleu"]
    assert result.final["bleu"] > 1.0 and result.final["chrf"] > 10.0  # it learned something


def test_api_and_cli_translate_identically(trained: dict) -> None:
    """`tfm translate` is a face over `Translator`: the same translations, scores, n-best lists and BLEU."""
    from tfm_cli import Translator

    sources = trained["sources"][:60] + ["", "Je suis étudiant."] + _paragraphs(trained, 60, 8)
    stdin = "\n".join(sources) + "\n"
    translator = Translator.load(trained["dir"], device="cpu")
    outputs = set()
    for args, settings in (([], {}), (["--greedy"], {"greedy": True}), (["--beam", "3", "--n-best", "2"], {"beam": 3, "n_best": 2})):
        cli = [json.loads(line) for line in _cli("translate", "--model", str(trained["dir"]), "--json", *args, stdin=stdin).stdout.splitlines()]
        api = translator.translate(sources, **settings)
        assert [r["translation"] for r in cli] == [t.text for t in api], args
        assert [r["score"] for r in cli] == [round(t.score, 4) for t in api], args
        if settings.get("n_best"):
            assert [[h["translation"] for h in r["nbest"]] for r in cli] == [[h.text for h in t.nbest] for t in api]
            assert [[[x["translation"] for x in h.get("sentences", [])] for h in r["nbest"]] for r in cli] == [
                [[x.text for x in h.sentences] if len(h.sentences) > 1 else [] for h in t.nbest] for t in api
            ]
        # a line of several sentences: each of them, as the API has them
        assert [[x["translation"] for x in r.get("sentences", [])] for r in cli] == [
            [x.text for x in t.sentences] if len(t.sentences) > 1 else [] for t in api
        ]
        outputs.update(t.text for t in api)
    assert len(outputs) > 40  # varied output, so an order or batching mix-up would show
    plain = _cli("translate", "--model", str(trained["dir"]), stdin=stdin).stdout.split("\n")[:-1]
    assert plain == [t.text for t in translator.translate(sources)]
    report = json.loads(_cli("translate", "--model", str(trained["dir"]), "--score", str(trained["dir"].parent / "dev.tsv"), "--json").stdout)
    api_report = translator.score(trained["sources"], trained["references"])
    assert (report["bleu"], report["chrf"]) == (api_report["bleu"], api_report["chrf"])
    from sacrebleu.metrics import BLEU

    independent = BLEU().corpus_score([t.text for t in api_report["translations"]], [trained["references"]]).score
    assert api_report["bleu"] == round(independent, 2)

    # the scored translations are translate()'s for the same list (10,000 at a time); kept or not, each is handed on
    assert [t.text for t in api_report["translations"]] == [t.text for t in translator.translate(trained["sources"])]
    seen: list = []
    lean = translator.score(trained["sources"], trained["references"], on_translation=seen.append, keep_translations=False)
    assert "translations" not in lean and {k: v for k, v in api_report.items() if k != "translations"} == lean
    assert [t.text for t in seen] == [t.text for t in api_report["translations"]]
    with pytest.raises(TypeError, match="on_translation takes a function"):
        translator.score(trained["sources"], trained["references"], on_translation=3)
    with pytest.raises(TypeError, match="keep_translations must be True or False, not str"):
        translator.score(trained["sources"], trained["references"], keep_translations="no")


def test_bf16_agrees_with_fp32(trained: dict) -> None:
    """bf16 autocast (forced, so this runs on CPUs without native bf16 too): most translations identical,
    BLEU within 1 point."""
    from tfm_cli import Translator

    sources, references = trained["sources"], trained["references"]
    fp32 = Translator.load(trained["dir"], device="cpu", precision="fp32").score(sources, references)
    bf16 = Translator.load(trained["dir"], device="cpu", precision="bf16").score(sources, references)
    same = sum(a.text == b.text for a, b in zip(fp32["translations"], bf16["translations"], strict=True))
    assert same >= 0.8 * len(sources), f"only {same} of {len(sources)} translations identical"
    assert abs(fp32["bleu"] - bf16["bleu"]) <= 1.0
    cli = _cli("translate", "--model", str(trained["dir"]), "--precision", "bf16", stdin="\n".join(sources[:50]) + "\n")
    assert cli.stdout.split("\n")[:-1] == [t.text for t in bf16["translations"][:50]]


def test_translate_min_len(trained: dict) -> None:
    stdin = "\n".join(trained["sources"][:40]) + "\n"
    base = ["translate", "--model", str(trained["dir"]), "--json"]
    plain = [len(json.loads(line)["tokens"]) for line in _cli(*base, "--greedy", stdin=stdin).stdout.splitlines()]
    minimum = sorted(plain)[len(plain) // 2] + 2  # above most outputs' own length, so most must grow
    for args in (["--greedy"], ["--beam", "3"]):
        out = _cli(*base, "--min-len", str(minimum), *args, stdin=stdin).stdout.splitlines()
        lengths = [len(json.loads(line)["tokens"]) for line in out]
        assert min(lengths) >= minimum, args


def test_readme_python_example_runs(trained: dict, tmp_path: Path) -> None:
    """The README's Python API example, run as written against this run (its paths pointed here)."""
    import re

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Python API", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert 'Translator.load("runs/tiny")' in code
    (tmp_path / "input.fr").write_text("Bonjour.\nMerci beaucoup.\n", encoding="utf-8")
    code = code.replace('"runs/tiny"', repr(str(trained["dir"])))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 + 2 + 2 + 1  # one translation, two n-best lines, two streamed lines, one BLEU
    assert 0.0 <= float(lines[-1]) <= 100.0


def _paragraphs(trained: dict, start: int, count: int) -> list[str]:
    """`count` lines of three dev sources each (from source `start` on), as a document's paragraph holds them."""
    sources = trained["sources"]
    return [" ".join(sources[i : i + 3]) for i in range(start, start + 3 * count, 3)]


def test_a_line_of_several_sentences_translates_as_they_do_one_at_a_time(trained: dict) -> None:
    """A model trained on sentence pairs drops all but the first sentence of a line that holds several: the
    Translator splits such a line, translates its sentences in the same batches as the other lines, and joins them
    again. Checked against translating each sentence as a line of its own; the line whole (split_sentences=False)
    against the search itself (`translate_ids`)."""
    from tfm_cli import Translator
    from tfm_cli.decoding import translate_ids
    from tfm_cli.sentences import join_sentences, split_sentences

    translator = Translator.load(trained["dir"], device="cpu")
    lines = _paragraphs(trained, 0, 12) + ["", trained["sources"][0]]
    parts = [split_sentences(line) for line in lines]
    assert sum(len(p) > 1 for p in parts) >= 10  # the dev sources end their sentences
    alone = translator.translate([s for p in parts for s in p if s])
    calls: list[int] = []
    results = translator.translate(lines, progress=calls.append)
    assert sum(calls) == len(lines)  # lines, not sentences
    done = iter(alone)
    for line, sentences, result in zip(lines, parts, results, strict=True):
        if not line:
            assert result.text == "" and result.sentences == [result]
            continue
        mine = [next(done) for _ in sentences]
        assert result.text == join_sentences([t.text for t in mine])
        assert [t.text for t in result.sentences] == [t.text for t in mine] if len(mine) > 1 else result.sentences == [result]
        assert [t.source for t in result.sentences] == sentences if len(mine) > 1 else result.source == line
        assert result.source == line
        assert result.score == pytest.approx(sum(t.score for t in mine), abs=1e-9)
        assert result.log_prob == pytest.approx(sum(t.log_prob for t in mine), abs=1e-9)
        assert result.tokens == [piece for t in mine for piece in t.tokens]
    assert [t.text for t in translator.translate_stream(lines, chunk_lines=5)] == [t.text for t in results]

    whole = translator.translate(lines[:12], split_sentences=False)
    ids = translate_ids(translator.model, [translator.tokenizer.encode(line) for line in lines[:12]], max_len_offset=20)
    assert [t.tokens for t in whole] == [[translator.tokenizer.id_to_piece(i) for i in h[0].tokens] for h in ids]
    assert all(t.sentences == [t] for t in whole)
    # the point of it: whole, the model stops early (fewer words than the three sentences' translations)
    assert sum(len(t.text.split()) for t in whole) < 0.8 * sum(len(t.text.split()) for t in results[:12])


def test_the_n_best_of_a_split_line_are_the_best_combinations_of_its_sentences(trained: dict) -> None:
    """n-best of a line of several sentences: the k best choices of one hypothesis per sentence by their summed
    scores, against every choice enumerated."""
    import itertools

    from tfm_cli import Translator
    from tfm_cli.sentences import split_sentences

    translator = Translator.load(trained["dir"], device="cpu")
    for line in _paragraphs(trained, 90, 3):
        sentences = split_sentences(line)
        assert len(sentences) > 1
        each = [t.nbest for t in translator.translate(sentences, beam=3, n_best=3)]
        every = sorted(itertools.product(*each), key=lambda c: -sum(h.score for h in c))
        got = translator.translate(line, beam=3, n_best=3).nbest
        assert len(got) == 3
        for hyp, combination in zip(got, every[:3], strict=True):
            assert hyp.score == pytest.approx(sum(h.score for h in combination), abs=1e-9)
            assert [h.text for h in hyp.sentences] == [h.text for h in combination]


def test_the_dev_bleu_of_training_is_that_of_tfm_translate_on_lines_of_several_sentences(trained: dict, tmp_path: Path) -> None:
    """The training's final dev BLEU is the score of what `tfm translate` prints: its evaluation splits the dev
    lines of several sentences as the Translator does (4 of the 200 here). A recipe's decode.split_sentences: false
    keeps lines whole in `tfm translate`, and --split-sentences turns it back on."""
    import shutil

    from tfm_cli import Translator
    from tfm_cli.sentences import split_sentences

    translator = Translator.load(trained["dir"], device="cpu", precision="fp32")  # as the run trained (auto: bf16 on some CPUs)
    split = [i for i, s in enumerate(trained["sources"]) if len(split_sentences(s)) > 1]
    assert len(split) == 4
    report = translator.score(trained["sources"], trained["references"])
    assert report["bleu"] == trained["result"].final["bleu"] and report["lines_split"] == 4
    whole = translator.translate([trained["sources"][i] for i in split], split_sentences=False)
    assert [t.text for t in whole] != [report["translations"][i].text for i in split]  # so the check above means something

    run = tmp_path / "run"
    shutil.copytree(trained["dir"], run, ignore=shutil.ignore_patterns("checkpoints", "tensorboard"))
    recipe = run / "recipe.yaml"  # the run's resolved recipe holds every key
    assert "split_sentences: true" in recipe.read_text(encoding="utf-8")
    recipe.write_text(recipe.read_text(encoding="utf-8").replace("split_sentences: true", "split_sentences: false"), encoding="utf-8")
    assert Translator.load(run, device="cpu").settings.split_sentences is False
    lines = [trained["sources"][i] for i in split]
    stdin = "\n".join(lines) + "\n"
    assert _cli("translate", "--model", str(run), stdin=stdin).stdout.splitlines() == [t.text for t in whole]
    on = _cli("translate", "--model", str(run), "--split-sentences", stdin=stdin).stdout.splitlines()
    assert on == [report["translations"][i].text for i in split]
    off = _cli("translate", "--model", str(trained["dir"]), "--no-split-sentences", stdin=stdin).stdout.splitlines()
    assert off == [t.text for t in whole]
    scored = _cli("translate", "--model", str(trained["dir"]), "--score", str(trained["dir"].parent / "dev.tsv"))
    assert "4 of the 200 sources held several sentences and were translated a sentence at a time" in scored.stderr


def test_a_sentence_in_capitals_or_in_a_frame_is_given_as_the_model_reads_it(trained: dict, tmp_path: Path) -> None:
    """A model trained on ordinary text cannot read words in capitals (the quickstart model: BLEU 0.18 on 300 dev
    sentences in capitals): such a sentence is given to it in sentence case, and its translation written in
    capitals; a sentence in a frame (a list's bullet or number, double quotes, brackets, emoji) is given without it,
    and its translation written inside it. Checked against doing so by hand, sentence by sentence within a line;
    and the training's evaluation scores what `tfm translate` prints for such lines and for lines of several
    sentences."""
    import contextlib

    from tfm_cli import Translator, load_recipe
    from tfm_cli.sentences import sentence_case
    from tfm_cli.training.evaluation import evaluate, load_dev

    translator = Translator.load(trained["dir"], device="cpu", precision="fp32")  # as the run trained (auto: bf16 on some CPUs)
    sources = trained["sources"][:30]
    shouted = translator.translate([s.upper() for s in sources])
    cased = translator.translate([sentence_case(s.upper(), translator.tokenizer.word_cost) for s in sources])
    assert [t.text for t in shouted] == [t.text.upper() for t in cased]
    assert [t.source for t in shouted] == [s.upper() for s in sources]
    from tfm_cli.sentences import in_title_case, title_case

    headlines = [h for h in map(title_case, sources) if in_title_case(h)]  # given as a sentence, written back so
    assert len(headlines) >= 20
    expected = translator.translate([sentence_case(h, translator.tokenizer.word_cost) for h in headlines])
    assert [t.text for t in translator.translate(headlines)] == [title_case(t.text) for t in expected]
    mixed = translator.translate(f"{sources[0].upper()} {sources[1]}")  # one sentence in capitals, one not
    assert [t.text for t in mixed.sentences] == [cased[0].text.upper(), translator.translate(sources[1]).text]
    # a sentence in a frame (a list's bullet, double quotes, brackets, an emoji) is translated without it
    plain = translator.translate(sources)
    for wrap in ("- {}", "1. {}", '"{}"', "({})", "{} 🙂"):
        framed = translator.translate([wrap.format(s) for s in sources])
        assert [t.text for t in framed] == [wrap.format(t.text) for t in plain], wrap
    # a sentence without a letter is written as it is, as many times as the n-best asks, without the model
    literal = ["42", "(2020)", "😀", "3,5 %"]
    assert [t.text for t in translator.translate(literal)] == literal
    # ... and says so: "stopped" is "copied" (it was "eos", and a script could not tell it from a translation)
    assert {(t.stopped, t.score, tuple(t.tokens)) for t in translator.translate(literal)} == {("copied", 0.0, ())}
    assert [(h.text, h.stopped) for h in translator.translate("42", beam=3, n_best=3).nbest] == [("42", "copied")] * 3
    line = f"{sources[0]} 42."
    assert translator.translate(line).text == translator.translate(sources[0]).text + " 42."
    both = translator.translate(line)  # the line was translated: by the model where it made its sentence's end
    assert both.stopped == translator.translate(sources[0]).stopped and [s.stopped for s in both.sentences][1] == "copied"
    assert translator.translate("").stopped == "eos"  # an empty line: nothing to copy nor to translate, as before
    # verbatim: each line to the model as written, as the search itself gets it
    from tfm_cli.decoding import translate_ids

    raw = [s.upper() for s in sources[:5]] + ['- "' + sources[5] + '"', "42", f"{sources[6]} {sources[7]}"]
    ids = translate_ids(translator.model, [translator.tokenizer.encode(x) for x in raw], max_len_offset=20)
    expected = [[translator.tokenizer.id_to_piece(i) for i in h[0].tokens] for h in ids]
    assert [t.tokens for t in translator.translate(raw, verbatim=True)] == expected
    assert [t.tokens for t in translator.translate(raw)] != expected
    stdin = "".join(x + "\n" for x in raw)
    cli = _cli("translate", "--model", str(trained["dir"]), "--verbatim", stdin=stdin).stdout.splitlines()
    assert cli == [t.text for t in translator.translate(raw, verbatim=True)]
    assert _cli("translate", "--model", str(trained["dir"]), stdin=stdin).stdout.splitlines() == [t.text for t in translator.translate(raw)]
    both = subprocess.run([str(TFM), "translate", "--model", str(trained["dir"]), "--verbatim", "--split-sentences", "Oui. Non."],
                          capture_output=True, text=True, timeout=300)
    assert both.returncode == 2 and "--split-sentences has no effect with --verbatim" in both.stderr and "Traceback" not in both.stderr

    # the training's evaluation: lines in capitals and lines of several sentences, scored as tfm translate scores them
    lines = [(s.upper(), r.upper()) for s, r in zip(sources[:10], trained["references"][:10], strict=True)]
    lines += [(" ".join(trained["sources"][i : i + 2]), " ".join(trained["references"][i : i + 2])) for i in range(30, 50, 2)]
    lines += [(f'- "{s}"', f'- "{r}"') for s, r in zip(trained["sources"][50:60], trained["references"][50:60], strict=True)]
    (tmp_path / "dev.tsv").write_text("".join(f"{s}\t{r}\n" for s, r in lines), encoding="utf-8")
    recipe = load_recipe(trained["dir"] / "recipe.yaml")
    model, tokenizer = translator.model, translator.tokenizer
    dev = load_dev(str(tmp_path / "dev.tsv"), tokenizer, model.config.max_positions)
    metrics = evaluate(model, tokenizer, dev, recipe, contextlib.nullcontext)
    report = translator.score([s for s, _ in lines], [r for _, r in lines])
    assert (metrics["bleu"], metrics["chrf"]) == (report["bleu"], report["chrf"])
    assert report["bleu"] > translator.score([s for s, _ in lines], [r for _, r in lines], split_sentences=False)["bleu"]
