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

    sources = trained["sources"][:60] + ["", "Je suis étudiant."]
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
