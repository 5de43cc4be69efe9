"""End to end through the installed `tfm`: tokenize -> train -> translate -> score, resume, dry run.

One tiny model (d_model 32, 1+1 layers, 400-token vocabulary) is trained once on the first 3000 pairs of the
bundled Tatoeba corpus and shared by the module; a second run is trained to step 20 and resumed to step 30 to
check that resuming is exact. Every subprocess runs torch on one thread: the CI box has 2 shared cores, where
torch's default thread pool spins against other jobs (about 50x slower for a model this small), and both halves
of the exact-resume comparison must use the same thread count anyway (float sums depend on it).
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from clitools import has_lines, start_tfm, tfm, tiny_recipe, wait_until

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
CORPORA = REPO / "tfm_cli" / "corpora" / "tatoeba-fr-en"

MAX_STEPS = 40  # checkpoints at 10, 20, 30, 40; keep_last 3 prunes step 10


def _head(name: str, n: int) -> str:
    with gzip.open(CORPORA / name, "rt", encoding="utf-8") as f:
        return "".join(itertools.islice(f, n))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("e2e")
    train, dev = root / "train.tsv", root / "dev.tsv"
    train.write_text(_head("train.tsv.gz", 3000), encoding="utf-8")  # short sentences come first
    dev.write_text(_head("dev.tsv.gz", 50), encoding="utf-8")
    recipe = root / "e2e.yaml"
    text = tiny_recipe(
        "e2e", description="a tiny model for the end-to-end tests", data={"train": str(train), "dev": str(dev)},
        tokenizer={"min_frequency": 2},
        train={"max_tokens": 512, "max_steps": MAX_STEPS, "warmup_steps": 10, "save_every": 10, "keep_last": 3,
               "average_last": 2, "log_every": 10, "eval_every": 20, "eval_sentences": 20},
        decode={"max_len_offset": 20},
    )
    recipe.write_text(text, encoding="utf-8")
    return {"root": root, "train": train, "dev": dev, "recipe": recipe}


@pytest.fixture(scope="module")
def run(data: dict[str, Path]) -> dict:
    """tfm tokenize, then tfm train: the shared run directory and what the commands printed."""
    run_dir = data["root"] / "run"
    tok = tfm("tokenize", str(data["recipe"]), "--out", str(run_dir / "tokenizer.json"), "--json")
    trained = tfm("train", str(data["recipe"]), "--out", str(run_dir), "--device", "cpu", "--json")
    return {"dir": run_dir, "tokenize": tok, "train": trained}


@pytest.fixture(scope="module")
def resumed(data: dict[str, Path], run: dict) -> dict:
    """The same recipe trained to step 20, then `tfm train --resume RUN train.max_steps=30`."""
    # the same vocabulary as the straight run, so the weights can be compared exactly
    run_dir = _run_dir_with_tokenizer(data["root"] / "resumed", run)
    first = tfm("train", str(data["recipe"]), "train.max_steps=20", "--out", str(run_dir), "--device", "cpu")
    metrics_before = (run_dir / "metrics.jsonl").read_text(encoding="utf-8")
    second = tfm("train", "--resume", str(run_dir), "train.max_steps=30", "--device", "cpu")
    return {"dir": run_dir, "first": first, "second": second, "metrics_before": metrics_before}


def _run_dir_with_tokenizer(run_dir: Path, run: dict) -> Path:
    """A new run directory holding the shared run's tokenizer.json: the same vocabulary, trained once."""
    run_dir.mkdir()
    shutil.copy(run["dir"] / "tokenizer.json", run_dir / "tokenizer.json")
    return run_dir


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]


def _translate(run: dict, *args: str, stdin: str | None = None, check: bool = True):
    return tfm("translate", "--model", str(run["dir"]), "--device", "cpu", *args, stdin=stdin, check=check)


# ---- tokenize and train ------------------------------------------------------------------------------------


def test_tokenize_report(run: dict) -> None:
    report = json.loads(run["tokenize"].stdout)
    assert Path(report["tokenizer"]) == run["dir"] / "tokenizer.json"
    assert 300 <= report["vocab_size"] <= 400
    assert report["sentences"] == 3000


def test_run_directory(run: dict) -> None:
    d = run["dir"]
    for name in (
        "model.safetensors",
        "best.safetensors",
        "recipe.yaml",
        "config.json",
        "tokenizer.json",
        "metrics.jsonl",
        "summary.json",
    ):
        assert (d / name).is_file(), name
    kept = sorted(p.name for p in (d / "checkpoints").iterdir())
    # the dev evaluations of steps 20 and 40, done after their checkpoints were saved, are kept beside them (a resume
    # from there needs them)
    expected = [f"step-000000{s}.evaluated.json" for s in (20, 40)]
    expected += [f"step-{s:08d}.{ext}" for s in (20, 30, 40) for ext in ("safetensors", "state.pt")]
    assert kept == sorted(expected), kept
    assert not list(d.glob("**/*.tmp")), "temporary files left behind"


def test_the_last_step_is_evaluated_when_it_falls_on_the_schedule(run: dict) -> None:
    """The evaluation of the last step was left to the final evaluation (of all of dev, and of the final model),
    so best.safetensors could never be the last step, however well it scored: a run whose dev BLEU rose to its
    end kept step 150 (BLEU 1.73) as its best where the last step scored 6.45."""
    from safetensors import safe_open

    records = [json.loads(line) for line in (run["dir"] / "metrics.jsonl").read_text().splitlines()]
    evals = {r["step"]: r["bleu"] for r in records if r["kind"] == "eval"}
    assert sorted(evals) == [20, 40]
    with safe_open(str(run["dir"] / "best.safetensors"), framework="pt") as f:
        best = int(f.metadata()["step"])
    assert best == (40 if evals[40] > evals[20] else 20)  # a later evaluation replaces the best only when higher


def test_final_model_averages_last_checkpoints(run: dict, data: dict[str, Path]) -> None:
    from safetensors import safe_open

    with safe_open(str(run["dir"] / "model.safetensors"), framework="pt") as f:
        metadata = f.metadata()
    assert metadata["step"] == str(MAX_STEPS)
    # Both candidates were evaluated on all of dev; the average is kept unless it scored lower (paper: average).
    summary = json.loads((run["dir"] / "summary.json").read_text())
    final = summary["final_model"]
    average, last = final["average"]["bleu"], final["last"]["bleu"]
    if average >= last:
        assert final["chosen"] == "average" and summary["dev"]["bleu"] == average
        assert json.loads(metadata["averaged"]) == ["step-00000030.safetensors", "step-00000040.safetensors"]
    else:
        assert final["chosen"] == "last" and summary["dev"]["bleu"] == last
        assert json.loads(metadata["last"]) == "step-00000040.safetensors" and "averaged" not in metadata
    assert f"BLEU: average {average:.2f}, last checkpoint {last:.2f}" in run["train"].stderr
    # which checkpoints the average was of, whichever won (said of the average alone before)
    assert final["averaged"] == ["step-00000030.safetensors", "step-00000040.safetensors"]
    assert average >= last or "the average of steps 30 and 40 scored lower" in run["train"].stderr
    # what to run next, with a sentence of the run's own source language: its first short dev source
    first = next(s for s, _ in (line.split("\t")[:2] for line in data["dev"].read_text(encoding="utf-8").splitlines()) if len(s) <= 40)
    assert f"next: tfm translate --model {run['dir']} {shlex.quote(first)}" in run["train"].stderr


def test_a_planted_pickle_is_refused_not_executed(data: dict[str, Path], run: dict, tmp_path: Path) -> None:
    """A state file is read with weights_only=True; a pickle that would run code gets our one line."""
    import pickle

    copy = tmp_path / "run"
    shutil.copytree(run["dir"], copy)
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    newest = sorted((copy / "checkpoints").glob("*.state.pt"))[-1]
    newest.write_bytes(pickle.dumps(Payload()))
    before = _snapshot(copy)
    proc = tfm("train", "--resume", str(copy), "train.max_steps=50", "--device", "cpu", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "WeightsUnpickler" not in proc.stderr
    assert not marker.exists(), "the planted pickle was executed"
    lines = [line for line in proc.stderr.splitlines() if line.startswith(("Error", "hint"))]
    assert lines[0] == f"Error: {newest} holds more than tensors and plain data (it could run code), so it was not loaded"
    assert lines[1].startswith("hint: delete it")
    assert _snapshot(copy) == before  # nothing saved was touched


def test_a_diverging_run_skips_nan_steps_then_stops_with_the_lr(data: dict[str, Path], tmp_path: Path) -> None:
    """An absurd learning rate blows the weights up after the first update; every later loss is NaN or
    infinite: each is skipped and counted, five in a row stop the run, and the checkpoint before is intact."""
    out = tmp_path / "diverged"
    proc = tfm(
        "train", str(data["recipe"]), "train.lr_factor=1e30", "train.save_every=1", "train.keep_last=1", "train.average_last=1", "train.eval_every=0",
        "train.max_steps=30", "--out", str(out), "--device", "cpu", check=False,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "update skipped (1 so far)" in proc.stderr
    error = next(line for line in proc.stderr.splitlines() if line.startswith("Error:"))
    assert "the loss was NaN or infinite 5 steps in a row at lr" in error and "is intact" in error
    skipped = [r for r in _records(out) if r["kind"] == "skipped"]
    assert len(skipped) == 5 and skipped[-1]["lr"] > 0
    assert not (out / "model.safetensors").exists()
    # no checkpoint of the weights whose loss was NaN: they were saved, pruned the good ones (keep_last) and were
    # then called intact. The one named is the last saved before the first skipped step, and the only one kept.
    first_bad = skipped[0]["step"]
    saved = sorted(int(p.stem.split("-")[1]) for p in (out / "checkpoints").glob("step-*.safetensors"))
    assert saved and max(saved) < first_bad, (saved, first_bad)
    assert f"step-{max(saved):08d}.safetensors, step {max(saved)}) is intact" in error
    from tfm_cli.translator import Translator

    Translator.load(out, device="cpu")  # the last checkpoint still loads


@pytest.mark.parametrize("schedule", [("train.save_every=1", "train.eval_every=0"), ("train.max_steps=1", "train.eval_every=0"),
                                      ("train.save_every=100", "train.eval_every=1")])
def test_an_update_that_overflows_the_weights_with_a_finite_loss_saves_and_scores_nothing(
    data: dict[str, Path], tmp_path: Path, schedule: tuple[str, str]
) -> None:
    """lr 1e300: step 1's loss is finite, its update makes the weights inf and NaN. They were saved as step 1's
    checkpoint, called intact and offered for resume (which refused them), or written as model.safetensors
    (max_steps 1), or scored as a dev evaluation. Now the run stops there, saying so, and nothing of them is kept."""
    out = tmp_path / "overflowed"
    proc = tfm(
        "train", str(data["recipe"]), "train.lr_factor=1e300", "train.max_steps=30", *schedule, "--out", str(out),
        "--device", "cpu", check=False,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    error = next(line for line in proc.stderr.splitlines() if line.startswith("Error:"))
    assert error.startswith("Error: training stopped at step 1: its update at lr ") and "made weights NaN or infinite" in error
    assert "no checkpoint was saved yet" in error, error
    assert not list((out / "checkpoints").glob("step-*")) and not (out / "model.safetensors").exists()
    assert not (out / "best.safetensors").exists() and "dev evaluation" not in proc.stderr


def test_a_run_that_diverges_before_its_first_checkpoint_says_how_to_start_again(data: dict[str, Path], tmp_path: Path) -> None:
    """With no checkpoint saved, the hint said `tfm train --resume RUN train.lr_factor=...`, which answers "no
    checkpoint to resume from"; and a start into RUN with the lower rate is refused (another recipe is there). The
    hint now names what works, and doing what it says trains."""
    out = tmp_path / "diverged-early"
    start = ("train", str(data["recipe"]), "train.save_every=100", "train.eval_every=0", "train.max_steps=30")
    proc = tfm(*start, "train.lr_factor=1e30", "--out", str(out), "--device", "cpu", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    error, hint = (line for line in proc.stderr.splitlines() if line.startswith(("Error:", "hint:")))
    assert "no checkpoint was saved yet" in error
    assert "--resume" not in hint and "another --out" in hint and f"delete {out} first" in hint
    tfm(*start[:2], "train.max_steps=2", "train.save_every=2", "train.eval_every=0", "--out", str(tmp_path / "again"), "--device", "cpu")


def test_fine_tuning_starts_from_the_trained_weights_and_tokenizer(data: dict[str, Path], run: dict, tmp_path: Path) -> None:
    """`train.init_from=RUN`: a new run whose model starts as RUN's final model, on RUN's tokenizer, with a fresh
    optimizer and schedule (fairseq --restore-file --reset-optimizer, Marian --pretrained-model). With a learning
    rate of 1e-30 its one update changes no fp32 weight, so its model is RUN's bit for bit. The run it came from
    is not read again by a resume; a model section of other shapes is refused in one line."""
    import torch
    from safetensors.torch import load_file

    init = tmp_path / "init"
    shutil.copytree(run["dir"], init)
    other = tmp_path / "other.tsv"  # another corpus: the data of the fine-tuning
    other.write_text("".join(data["train"].read_text(encoding="utf-8").splitlines(keepends=True)[1000:1600]), encoding="utf-8")
    out = tmp_path / "ft"
    args = (
        "train", str(data["recipe"]), "--out", str(out), f"train.init_from={init}", f"data.train={other}", "data.dev=null",
        "train.lr_factor=1e-30", "model.dropout=0.0", "train.max_steps=1", "train.save_every=1", "train.average_last=1",
        "train.keep_last=1", "--device", "cpu",
    )
    dry = tfm(*args, "--dry-run")
    assert f"# fine-tunes {init / 'model.safetensors'} (its step {MAX_STEPS})" in dry.stdout, dry.stdout
    proc = tfm(*args)
    assert f"fine-tuning {init / 'model.safetensors'} (its step {MAX_STEPS})" in proc.stderr
    assert (out / "tokenizer.json").read_bytes() == (init / "tokenizer.json").read_bytes()
    theirs, ours = load_file(str(init / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert theirs.keys() == ours.keys() and all(torch.equal(theirs[k], ours[k]) for k in theirs)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["init_from"] == str(init) and summary["steps"] == 1
    from tfm_cli.checkpoint import (
        read_metadata,  # the file, step and content it started from, whatever RUN becomes
    )

    started = {"path": str(init / "model.safetensors"), "step": MAX_STEPS,
               "weights_crc32": read_metadata(init / "model.safetensors")["weights_crc32"]}
    assert summary["init_weights"] == started
    refused = tfm("train", "--resume", str(out), f"train.init_from={run['dir']}", check=False)  # history it never had
    assert refused.returncode == 1 and "train.init_from=" in refused.stderr and "on a resume" in refused.stderr, refused.stderr
    shutil.rmtree(init)  # a resume trains on from its own checkpoint
    tfm("train", "--resume", str(out), "train.max_steps=2", "train.lr_factor=1", "--device", "cpu")
    resumed = json.loads((out / "summary.json").read_text())
    assert resumed["steps"] == 2 and resumed["init_weights"] == started  # kept by the checkpoint for the resume
    refused = tfm("train", str(data["recipe"]), "--out", str(tmp_path / "wide"), f"train.init_from={out}",
                  "model.d_ff=128", "--device", "cpu", check=False)
    error = next(line for line in refused.stderr.splitlines() if line.startswith("Error:"))
    assert refused.returncode == 1 and "d_ff=64, but this recipe's has model.d_ff=128" in error, refused.stderr
    assert "set model.d_ff=64" in refused.stderr and not (tmp_path / "wide").exists()


def test_a_fine_tuning_records_the_weights_it_read_not_those_it_checked(data: dict[str, Path], run: dict, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """train.init_from is checked before the corpus is read (minutes on a large one) and read after: a run training
    on may write its model again in between. summary.json's init_weights (and the start line) are of what was
    read: the step and CRC of the file written over it here, where they named the file as checked."""
    from tfm_cli import TrainEvents, load_recipe, train
    from tfm_cli.checkpoint import read_metadata
    from tfm_cli.training import trainer

    init = tmp_path / "init"
    shutil.copytree(run["dir"], init)
    newer = sorted((init / "checkpoints").glob("step-*.safetensors"))[0]  # another model of the same shapes
    assert read_metadata(newer)["weights_crc32"] != read_metadata(init / "model.safetensors")["weights_crc32"]
    real = trainer.read_weights

    def written_again_first(path):
        if Path(path) == init / "model.safetensors" and newer.exists():
            os.replace(newer, path)  # as that run's resume would, once its corpus was read here
        return real(path)

    monkeypatch.setattr(trainer, "read_weights", written_again_first)
    messages = []

    class Said(TrainEvents):
        def message(self, text: str) -> None:
            messages.append(text)

    recipe = load_recipe(data["recipe"], overrides=[f"train.init_from={init}", "data.dev=null", "train.max_steps=1",
                                                   "train.save_every=1", "train.average_last=1", "train.keep_last=1"])
    train(recipe, tmp_path / "ft", device="cpu", events=Said())
    read = read_metadata(init / "model.safetensors")
    summary = json.loads((tmp_path / "ft" / "summary.json").read_text())
    assert summary["init_weights"] == {"path": str(init / "model.safetensors"), "step": int(read["step"]),
                                       "weights_crc32": read["weights_crc32"]}
    assert any(f"fine-tuning {init / 'model.safetensors'} (its step {int(read['step']):,})" in m for m in messages), messages


def test_a_fine_tuning_recipe_naming_a_run_beside_it_says_where_relative_paths_are_read(run: dict, tmp_path: Path) -> None:
    """`init_from: initrun`, a run folder beside the recipe, run from another directory: the hint that relative paths
    are read from the current directory was given for files only ("model initrun does not exist")."""
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    shutil.copytree(run["dir"], cfg / "initrun")
    text = (run["dir"] / "recipe.yaml").read_text(encoding="utf-8").replace("init_from: null", "init_from: initrun")
    (cfg / "r.yaml").write_text(text, encoding="utf-8")
    proc = tfm("train", str(cfg / "r.yaml"), "--out", str(tmp_path / "ft"), "--dry-run", cwd=tmp_path, check=False)
    assert proc.returncode == 1 and "train.init_from: initrun does not exist in the current directory" in proc.stderr, proc.stderr
    assert "it is there beside the recipe: write init_from: cfg/initrun" in proc.stderr, proc.stderr


def test_fine_tuning_from_a_run_that_prunes_the_checkpoint_it_chose_chooses_again(
    data: dict[str, Path], run: dict, tmp_path: Path, monkeypatch
) -> None:
    """train.init_from=RUN while RUN trains (save_every 1, keep_last 1): the checkpoint chosen before the corpus was
    read was pruned before its weights were, a FileNotFoundError traceback. Chosen again, as translate does."""
    from tfm_cli.recipe import load_recipe
    from tfm_cli.runs import checkpoint_path, checkpoint_steps
    from tfm_cli.training import train as train_in_process
    from tfm_cli.training import trainer

    live = tmp_path / "live"
    shutil.copytree(run["dir"], live, ignore=shutil.ignore_patterns("model.safetensors", "best.safetensors"))
    real = trainer.check_init
    pruned: list[Path] = []

    def the_run_saves_and_prunes(recipe, config):
        chosen = real(recipe, config)
        if not pruned:  # once, after the first choice: step N+1 saved, step N pruned
            shutil.copy(chosen.path, checkpoint_path(live, chosen.step + 1))
            chosen.path.unlink()
            pruned.append(chosen.path)
        return chosen

    monkeypatch.setattr(trainer, "check_init", the_run_saves_and_prunes)
    said: list[str] = []

    class Said(trainer.TrainEvents):
        def message(self, text: str) -> None:
            said.append(text)

    recipe = load_recipe(data["recipe"], [f"train.init_from={live}", "train.max_steps=1", "train.save_every=1",
                                          "train.average_last=1", "data.dev=null"])
    train_in_process(recipe, tmp_path / "ft", device="cpu", events=Said())
    newest = checkpoint_steps(live)[-1][1]
    assert pruned and pruned[0] != newest and any(f"fine-tuning {newest} (its step " in s for s in said), said


def test_metrics_and_summary(run: dict) -> None:
    records = _records(run["dir"])
    kinds = {r["kind"] for r in records}
    assert kinds == {"train", "eval", "final"}
    assert [r["step"] for r in records if r["kind"] == "train"] == [10, 20, 30, 40]
    for r in records:  # each log window says how long the trainer waited for batches, within its wall time
        if r["kind"] == "train":
            assert 0 <= r["data_wait_s"] < r["elapsed_s"] and 0 < r["step_s"] < r["elapsed_s"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [20, 40] and all(r["sentences"] == 20 for r in evals)
    final = [r for r in records if r["kind"] == "final"]
    assert len(final) == 1 and final[0]["sentences"] == 50 and final[0]["step"] == MAX_STEPS
    summary = json.loads((run["dir"] / "summary.json").read_text())
    assert summary["steps"] == MAX_STEPS and summary["recipe"] == "e2e" and summary["parameters"] > 0
    printed = json.loads(run["train"].stdout)  # tfm train --json: the same facts on stdout
    assert printed["steps"] == MAX_STEPS and "bleu" in printed and "chrf" in printed


def test_dry_run(data: dict[str, Path], run: dict, tmp_path: Path) -> None:
    before = _snapshot(run["dir"])
    # A real start into a directory that holds a run is refused, so the dry run says so too, touching nothing.
    refused = tfm("train", str(data["recipe"]), "--dry-run", "--out", str(run["dir"]), check=False)
    assert refused.returncode == 1 and "already holds a trained run" in refused.stderr and refused.stdout == ""
    assert _snapshot(run["dir"]) == before
    fresh = tmp_path / "fresh"
    proc = tfm("train", str(data["recipe"]), "--dry-run", "--out", str(fresh))
    assert "name: e2e" in proc.stdout and "d_model: 32" in proc.stdout
    parameters = json.loads((run["dir"] / "summary.json").read_text())["parameters"]
    # the start trains the tokenizer, which may come out smaller than tokenizer.vocab_size: the dry run gave the
    # count for the size asked as the start's (a 300-line corpus: 277,376 said, 64,544 trained); now a bound
    bound = re.search(r"# parameters: up to ([\d,]+) \(vocabulary up to ([\d,]+): the start trains the tokenizer", proc.stdout)
    assert bound and parameters <= int(bound[1].replace(",", "")), proc.stdout
    assert json.loads(tfm("train", str(data["recipe"]), "--dry-run", "--json", "--out", str(fresh)).stdout)["upper_bounds"] == ["vocab_size", "parameters"]
    # with a tokenizer at hand the figure is the start's own
    exact = tfm("train", str(data["recipe"]), f"tokenizer.path={run['dir'] / 'tokenizer.json'}", "--dry-run", "--out", str(fresh))
    assert f"# parameters: {parameters:,} (vocabulary" in exact.stdout
    assert "upper_bounds" not in json.loads(tfm("train", str(data["recipe"]), f"tokenizer.path={run['dir'] / 'tokenizer.json'}", "--dry-run", "--json", "--out", str(fresh)).stdout)
    assert "# tokens per step: up to 512 source + 512 target" in proc.stdout
    assert not fresh.exists()  # a dry run writes nothing


def test_dry_run_checks_the_corpora_a_start_would_read(data: dict[str, Path], tmp_path: Path) -> None:
    missing = tmp_path / "no-such-corpus.tsv"
    proc = tfm("train", str(data["recipe"]), f"data.train={missing}", "--dry-run", "--out", str(tmp_path / "r"), check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and proc.stdout == ""
    assert "data.train" in proc.stderr and str(missing) in proc.stderr
    proc = tfm("train", str(data["recipe"]), "tokenizer.path=/no/such/tokenizer.json", "--dry-run", check=False)
    assert proc.returncode == 1 and "tokenizer.path" in proc.stderr


# ---- translate -----------------------------------------------------------------------------------------------


def test_translate_one_sentence(run: dict) -> None:
    proc = _translate(run, "Je suis étudiant.")
    assert len(proc.stdout.splitlines()) == 1 and proc.stdout.endswith("\n")


INPUTS = ["Bonjour.", "Je suis là.", "", "Merci beaucoup.", "Il fait beau."]


def test_translate_stdin_keeps_order_and_empty_lines(run: dict) -> None:
    plain = _translate(run, stdin="\n".join(INPUTS) + "\n").stdout.split("\n")
    assert plain[-1] == "" and len(plain) == len(INPUTS) + 1, plain  # 5 lines, each ended by a newline
    records = [
        json.loads(line)
        for line in _translate(run, "--json", stdin="\n".join(INPUTS) + "\n").stdout.splitlines()
    ]
    assert [r["source"] for r in records] == INPUTS  # the order of the input
    for record in records:
        assert set(record) == {"source", "translation", "score", "log_prob", "tokens", "truncated", "stopped"}
        assert isinstance(record["score"], float) and isinstance(record["tokens"], list)
    assert records[2] == {"source": "", "translation": "", "score": 0.0, "log_prob": 0.0, "tokens": [], "truncated": False, "stopped": "eos"}
    # line i of the output is the translation of line i: the model of this test translates most inputs alike (to "I"),
    # so each line is held to its own input translated alone by its score too, which differs from line to line
    from tfm_cli import Translator

    translator = Translator.load(run["dir"], device="cpu")
    alone = [translator.translate(source) for source in INPUTS]
    scores = sorted(a.score for a in alone if a.source)  # a swap of two lines would show
    assert all(b - a > 2e-4 for a, b in itertools.pairwise(scores)), scores  # (twice the tolerance below: a swap fails it)
    for record, own in zip(records, alone, strict=True):
        assert (record["translation"], record["tokens"]) == (str(own), own.tokens)
        assert record["score"] == pytest.approx(own.score, abs=1e-4)  # --json rounds it to 4 decimals
    assert plain[:-1] == [r["translation"] for r in records]
    assert plain[2] == ""


def test_translate_n_best(run: dict) -> None:
    sources = ["Bonjour.", "Merci beaucoup."]
    proc = _translate(run, "--n-best", "2", "--beam", "2", stdin="\n".join(sources) + "\n")
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    assert [r[0] for r in rows] == ["1", "1", "2", "2"]  # 2 lines per input, input line number first
    for line_no in ("1", "2"):
        scores = [float(r[1]) for r in rows if r[0] == line_no]
        assert scores == sorted(scores, reverse=True)


def test_translate_greedy(run: dict) -> None:
    """--greedy is greedy search: the library's greedy translation, scored without a length penalty."""
    from tfm_cli import Translator

    proc = _translate(run, "--greedy", "--json", "Je suis étudiant.")
    record = json.loads(proc.stdout)
    greedy = Translator.load(run["dir"], device="cpu").translate("Je suis étudiant.", greedy=True)
    assert record["source"] == "Je suis étudiant."
    assert (record["translation"], record["tokens"]) == (str(greedy), greedy.tokens)
    assert record["score"] == record["log_prob"] == pytest.approx(greedy.log_prob, abs=1e-4)  # --json: 4 decimals


def test_translations_that_leave_out_a_number_are_said_once_at_the_end(run: dict, tmp_path: Path) -> None:
    """The run's model reads numbers as a placeholder (a new model's default); a search that writes none of them
    (sitecustomize, before tfm imports it) leaves out every number: one warning at the end names the lines and the
    numbers, --json gives each line's, and a line without numbers is not named."""
    (tmp_path / "sitecustomize.py").write_text(
        "import tfm_cli.translator as t\n"
        "from tfm_cli.decoding import Hypothesis\n"
        "def search(engine, sequences, *, into, n_best=1, **_):\n"
        "    for out in into:\n"
        "        out.extend(Hypothesis([10, 11], -1.0, -1.0) for _ in range(n_best))\n"
        "    return into\n"
        "t.translate_ids = search\n"
    )
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    assert json.loads((run["dir"] / "config.json").read_text())["numbers"] == "placeholders"
    stdin = "J'ai 3 chats et 12 chiens.\nBonjour.\nIl est né en 1990.\n"
    proc = tfm("translate", "--model", str(run["dir"]), "--device", "cpu", stdin=stdin, env_extra=env)
    warnings = [line for line in proc.stderr.splitlines() if "leave out" in line]
    assert len(warnings) == 1 and len(proc.stdout.splitlines()) == 3, proc.stderr
    assert warnings[0].startswith("warning: 2 of 3 translations (lines 1, 3) leave out 3 numbers of their sources (3, 12, 1990)")
    records = [json.loads(x) for x in tfm("translate", "--model", str(run["dir"]), "--device", "cpu", "--json",
                                          stdin=stdin, env_extra=env).stdout.splitlines()]
    assert [r.get("numbers_left_out") for r in records] == [["3", "12"], None, ["1990"]]
    proc = tfm("translate", "--model", str(run["dir"]), "--device", "cpu", "Il a 42 ans. Elle a 3 chats.", "--json", env_extra=env)
    record = json.loads(proc.stdout)  # a line of two sentences: which of them left out which
    assert [s.get("numbers_left_out") for s in record["sentences"]] == [["42"], ["3"]] and record["numbers_left_out"] == ["42", "3"]
    proc = tfm("translate", "--model", str(run["dir"]), "--device", "cpu", "Il a 42 ans.", env_extra=env)
    assert ("warning: the translation leaves out a number of its source (42): the model wrote fewer number placeholders "
            "than the sentence has numbers; check it (--json gives") in proc.stderr
    proc = tfm("translate", "--model", str(run["dir"]), "--device", "cpu", "Écrivez à tom@example.com demain.", env_extra=env)
    assert ("warning: the translation leaves out a number or address of its source (tom@example.com): the model wrote "
            "fewer placeholders than the sentence has numbers and addresses; check it") in proc.stderr
    scored = tmp_path / "scored.tsv"  # scoring: said too, without --json's key (its --json is the report)
    scored.write_text("Il a 42 ans.\tHe is 42.\nBonjour.\tHello.\n", encoding="utf-8")
    proc = tfm("translate", "--model", str(run["dir"]), "--device", "cpu", "--score", str(scored), "--json", env_extra=env)
    said = [line for line in proc.stderr.splitlines() if "leaves out" in line]
    assert len(said) == 1 and "1 of 2 translations (line 1) leaves out a number of its source (42)" in said[0]
    assert "--json" not in said[0] and "bleu" in json.loads(proc.stdout)


def test_translate_long_input_warns(run: dict) -> None:
    text = " ".join(["bonjour"] * 200)  # far more tokens than model.max_positions=64
    proc = _translate(run, text)
    assert len(proc.stdout.splitlines()) == 1
    assert "warning" in proc.stderr and "at most 63" in proc.stderr


def test_score_tsv(run: dict, data: dict[str, Path]) -> None:
    report = json.loads(_translate(run, "--score", str(data["dev"]), "--json").stdout)
    assert report["sentences"] == 50
    assert report["sources"] == report["references"] == str(data["dev"])  # the TSV holds both
    pairs = [line.split("\t") for line in data["dev"].read_text(encoding="utf-8").splitlines()]
    src, ref = data["root"] / "score.fr", data["root"] / "score.en"
    src.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    ref.write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    apart = json.loads(_translate(run, "--score", str(src), "--score", str(ref), "--json").stdout)
    assert apart["sources"] == str(src) and apart["references"] == str(ref)
    assert (apart["bleu"], apart["chrf"], apart["sentences"]) == (report["bleu"], report["chrf"], 50)
    assert isinstance(report["bleu"], (int, float)) and isinstance(report["chrf"], (int, float))
    assert 0 <= report["bleu"] <= 100 and 0 <= report["chrf"] <= 100
    assert report["bleu_signature"].startswith("nrefs:1|") and "version:" in report["bleu_signature"]
    assert "nrefs:1|" in report["chrf_signature"]


def test_score_reference_with_stdin(run: dict, data: dict[str, Path]) -> None:
    pairs = [line.split("\t") for line in data["dev"].read_text(encoding="utf-8").splitlines()[:5]]
    reference = data["root"] / "ref.txt"
    reference.write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    output = data["root"] / "hyp.txt"
    proc = _translate(
        run,
        "--reference",
        str(reference),
        "--output",
        str(output),
        "--json",
        stdin="".join(s + "\n" for s, _ in pairs),
    )
    report = json.loads(proc.stdout)
    assert report["sentences"] == 5 and "bleu" in report and "chrf" in report
    assert report["sources"] == "stdin" and report["references"] == str(reference)
    assert len(output.read_text(encoding="utf-8").splitlines()) == 5


def _fifo(path: Path, data: bytes) -> Path:
    """A named pipe at `path` that a thread fills with `data` once a reader opens it (as bash's `<(...)`)."""
    import threading

    os.mkfifo(path)

    def fill() -> None:
        with open(path, "wb") as f:
            f.write(data)

    threading.Thread(target=fill, daemon=True).start()
    return path


def test_references_and_score_files_may_be_pipes(run: dict, data: dict[str, Path]) -> None:
    """Read once, references and `--score` files may be pipes (`--reference <(cut -f2 test.tsv)`), gzip or not:
    the scores are those of the same text in files. Training corpora, read more than once, still refuse one."""
    pairs = [line.split("\t") for line in data["dev"].read_text(encoding="utf-8").splitlines()[:5]]
    sources, references = "".join(s + "\n" for s, _ in pairs), "".join(t + "\n" for _, t in pairs)
    root = data["root"]
    (root / "src.txt").write_text(sources, encoding="utf-8")
    (root / "ref.txt").write_text(references, encoding="utf-8")
    expected = json.loads(_translate(run, "--score", str(root / "src.txt"), "--score", str(root / "ref.txt"), "--json").stdout)
    piped = _fifo(root / "ref.pipe", gzip.compress(references.encode("utf-8")))
    report = json.loads(_translate(run, "--reference", str(piped), "--json", stdin=sources).stdout)
    assert (report["bleu"], report["chrf"], report["sentences"]) == (expected["bleu"], expected["chrf"], 5)
    src, ref = _fifo(root / "src.pipe", sources.encode("utf-8")), _fifo(root / "ref2.pipe", references.encode("utf-8"))
    report = json.loads(_translate(run, "--score", str(src), "--score", str(ref), "--json").stdout)
    assert (report["bleu"], report["chrf"], report["sentences"]) == (expected["bleu"], expected["chrf"], 5)


# ---- resume --------------------------------------------------------------------------------------------------


def test_resume_continues(resumed: dict) -> None:
    d = resumed["dir"]
    before = [
        r for r in (json.loads(x) for x in resumed["metrics_before"].splitlines()) if r["kind"] == "train"
    ]
    assert [r["step"] for r in before] == [10, 20]
    records = _records(d)
    assert [r["step"] for r in records if r["kind"] == "train"] == [10, 20, 30]  # carried on from 20
    assert [r["step"] for r in records if r["kind"] == "final"] == [20, 30]
    assert "at step 20" in resumed["second"].stderr
    assert (d / "model.safetensors").is_file()
    summary = json.loads((d / "summary.json").read_text())
    assert summary["steps"] == 30
    # the training time counts the first session up to its step-20 checkpoint too, not just the resumed one (whose
    # own training is its wall time less its set-up and final model)
    resumed_training = summary["session_seconds"] - summary["setup_seconds"] - summary["final_seconds"]
    assert summary["train_seconds"] > resumed_training + 0.05 > 0
    assert "max_steps: 30" in (d / "recipe.yaml").read_text()


def test_resume_is_exact(run: dict, resumed: dict) -> None:
    """Straight to step 30 == to step 20, stop, resume to 30: the same weights, bit for bit (fp32, cpu), and the
    same file, byte for byte (a checksum says so too: safetensors wrote its metadata in a random order)."""
    from safetensors.torch import load_file

    straight_file = run["dir"] / "checkpoints" / "step-00000030.safetensors"
    again_file = resumed["dir"] / "checkpoints" / "step-00000030.safetensors"
    straight, again = load_file(str(straight_file)), load_file(str(again_file))
    assert straight.keys() == again.keys()
    different = [k for k in straight if not bool((straight[k] == again[k]).all())]
    assert not different, f"resumed weights differ from the uninterrupted run in {different[:5]}"
    assert straight_file.read_bytes() == again_file.read_bytes()


def _same_weights(a: Path, b: Path) -> None:
    from safetensors.torch import load_file

    first, second = load_file(str(a)), load_file(str(b))
    assert first.keys() == second.keys()
    different = [k for k in first if not bool((first[k] == second[k]).all())]
    assert not different, f"{b} differs from {a} in {different[:5]}"


def test_kill_9_then_resume_is_bit_exact(data: dict[str, Path], run: dict) -> None:
    """A real SIGKILL at an arbitrary moment after step 20's checkpoint, then --resume to step 40: the weights
    equal the uninterrupted run's step 40, bit for bit (fp32, CPU, one thread)."""
    import signal

    run_dir = _run_dir_with_tokenizer(data["root"] / "killed", run)
    proc = start_tfm("train", str(data["recipe"]), "train.max_steps=100000", "--out", str(run_dir), "--device", "cpu",
                     stdout=subprocess.DEVNULL)
    state = run_dir / "checkpoints" / "step-00000020.state.pt"
    wait_until(proc, state.is_file, "training never saved step 20", every=0.01)
    proc.send_signal(signal.SIGKILL)  # no handler runs: whatever was half-done stays half-done
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    saved = [int(p.name[5:13]) for p in (run_dir / "checkpoints").glob("step-*.state.pt")]
    assert 20 <= max(saved) < 40, saved  # a real resume follows
    tfm("train", "--resume", str(run_dir), "train.max_steps=40", "--device", "cpu")
    _same_weights(run["dir"] / "checkpoints" / "step-00000040.safetensors", run_dir / "checkpoints" / "step-00000040.safetensors")


def test_resume_skips_a_checkpoint_that_lost_its_state(data: dict[str, Path], run: dict) -> None:
    """Killed between writing step 30's weights and its trainer state: resume from step 20, still exact."""
    run_dir = _run_dir_with_tokenizer(data["root"] / "half-saved", run)
    tfm("train", str(data["recipe"]), "train.max_steps=30", "--out", str(run_dir), "--device", "cpu")
    (run_dir / "checkpoints" / "step-00000030.state.pt").unlink()
    (run_dir / "model.safetensors").unlink()
    proc = tfm("train", "--resume", str(run_dir), "train.max_steps=40", "--device", "cpu")
    assert "step 30 have no trainer state" in proc.stderr and "resuming from step 20" in proc.stderr
    _same_weights(run["dir"] / "checkpoints" / "step-00000040.safetensors", run_dir / "checkpoints" / "step-00000040.safetensors")
    for name in ("step-00000030.safetensors", "step-00000030.state.pt"):
        assert (run_dir / "checkpoints" / name).is_file()  # rewritten, complete this time



def test_a_resume_that_ends_before_a_half_saved_step_leaves_it_out(data: dict[str, Path], run: dict) -> None:
    """Weights saved without their trainer state (a kill, a full disk between the two writes) past the step a
    resume starts from were "rewritten when the run gets there"; a resume that ended before it (a lower
    train.max_steps, train.max_time) averaged them into its final model (stamped with their step) and counted them
    against keep_last. The resume removes them now. A best.safetensors evaluated past that step (an evaluation
    between two checkpoints, then a kill) is a model the run scored: kept, and the BLEU to beat."""
    from safetensors.torch import load_file, save_file

    from tfm_cli.checkpoint import read_metadata

    run_dir = _run_dir_with_tokenizer(data["root"] / "half-saved-ended", run)
    tfm("train", str(data["recipe"]), "train.max_steps=30", "--out", str(run_dir), "--device", "cpu")
    checkpoints = run_dir / "checkpoints"
    (checkpoints / "step-00000030.state.pt").unlink()
    for name in ("model.safetensors", "summary.json"):
        (run_dir / name).unlink()
    future = checkpoints / "step-00000030.safetensors"  # a best of that future, never scored by what is kept
    save_file(load_file(str(future)), str(run_dir / "best.safetensors"), metadata={**read_metadata(future), "bleu": "99.0"})
    proc = tfm("train", "--resume", str(run_dir), "train.max_steps=25", "--device", "cpu")
    assert "removed step-00000030.safetensors: left past step 20 by a session" in proc.stderr, proc.stderr
    assert sorted(p.name for p in checkpoints.glob("step-*.safetensors")) == [
        "step-00000010.safetensors", "step-00000020.safetensors", "step-00000025.safetensors"]
    assert read_metadata(run_dir / "model.safetensors")["step"] == "25"
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["steps"] == 25 and [Path(c).name for c in summary["final_model"]["checkpoints"]] == [
        "step-00000020.safetensors", "step-00000025.safetensors"], summary["final_model"]
    assert read_metadata(run_dir / "best.safetensors")["bleu"] == "99.0"  # kept: no evaluation beat it


def test_unwritable_or_full_run_directory_is_reported_before_training(data: dict[str, Path], tmp_path: Path, monkeypatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    proc = tfm("train", str(data["recipe"]), "--out", str(blocker / "run"), "--device", "cpu", check=False)
    assert proc.returncode == 1 and "cannot create the run directory" in proc.stderr and "Traceback" not in proc.stderr
    import shutil as shutil_module
    from collections import namedtuple

    import tfm_cli.training as training
    import tfm_cli.training.checks as checks
    from tfm_cli import TfmError, load_recipe

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(checks.shutil, "disk_usage", lambda path: usage(10**12, 10**12 - 1000, 1000))
    assert checks.shutil is shutil_module
    run_dir = tmp_path / "full"
    with pytest.raises(TfmError, match=r"has 1000 B free, but 3 checkpoints of this [\d,]+-parameter model .* need about [\d.]+ MiB"):
        training.train(load_recipe(data["recipe"]), run_dir, device="cpu")
    assert not list((run_dir / "checkpoints").glob("step-*"))  # nothing trained, nothing written


# ---- a run directory is not overwritten ----------------------------------------------------------------------


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def refused(data: dict[str, Path], run: dict) -> dict:
    """A fresh `tfm train` into a copy of the finished run (with another max_steps): it must refuse."""
    target = data["root"] / "refused"
    shutil.copytree(run["dir"], target)
    before = _snapshot(target)
    proc = tfm(
        "train",
        str(data["recipe"]),
        "train.max_steps=50",
        "--out",
        str(target),
        "--device",
        "cpu",
        check=False,
    )
    return {"dir": target, "before": before, "after": _snapshot(target), "proc": proc}


def test_fresh_train_refuses_a_run_with_checkpoints(refused: dict) -> None:
    proc = refused["proc"]
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "already holds a trained run" in proc.stderr and "--resume" in proc.stderr
    before, after = refused["before"], refused["after"]
    assert before.keys() == after.keys()
    weights = [k for k in before if k.endswith((".safetensors", ".pt", ".jsonl", "tokenizer.json"))]
    assert all(before[k] == after[k] for k in weights)


def test_refused_train_leaves_every_file_untouched(refused: dict) -> None:
    changed = [k for k in refused["before"] if refused["before"][k] != refused["after"].get(k)]
    assert not changed, f"a refused tfm train changed {changed}"


@pytest.mark.parametrize("signame, status", [("SIGINT", 130), ("SIGTERM", 143), ("SIGXCPU", 152)])
def test_ctrl_c_saves_a_checkpoint_and_resume_continues(data: dict[str, Path], run: dict, signame: str, status: int) -> None:
    """SIGINT (Ctrl-C), SIGTERM (a scheduler's notice, `kill`) or SIGXCPU (a CPU-time limit's notice: it killed the run
    at once, no word, the steps since its last checkpoint lost) mid-training: exit 128 + the signal, a checkpoint
    at the last completed step, then --resume carries on."""
    import signal

    run_dir = _run_dir_with_tokenizer(data["root"] / f"interrupted-{signame}", run)
    args = [str(data["recipe"]), "train.max_steps=100000", "train.log_every=5", "train.save_every=100000",
            "train.eval_every=0", "--out", str(run_dir), "--device", "cpu"]
    # Ctrl-C as a terminal delivers it: start_tfm's child has Python's own SIGINT handler even where this test
    # process was started by a shell in the background (`cmd &` without job control sets SIGINT to "ignore").
    proc = start_tfm("train", *args)
    metrics = run_dir / "metrics.jsonl"
    wait_until(proc, has_lines(metrics), "training never logged a step")
    proc.send_signal(getattr(signal, signame))
    _, stderr = proc.communicate(timeout=120)
    stderr = stderr.decode("utf-8")
    assert proc.returncode == status, stderr
    assert "Traceback" not in stderr
    assert "--resume" in stderr
    saved = sorted((run_dir / "checkpoints").glob("step-*.safetensors"))
    assert len(saved) == 1
    step = int(saved[0].stem.split("-")[1])
    assert step >= 5
    assert (run_dir / "checkpoints" / f"step-{step:08d}.state.pt").is_file()
    tfm("train", "--resume", str(run_dir), f"train.max_steps={step + 3}", "--device", "cpu")
    logged = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines()]
    assert logged[-1]["kind"] == "final" and logged[-1]["step"] == step + 3
    assert (run_dir / "model.safetensors").is_file()


def test_sigterm_while_setting_up_says_there_is_nothing_to_resume(data: dict[str, Path], run: dict) -> None:
    """SIGTERM while the start reads the whole bundled corpus (seconds, before any step): exit 143, one line that
    says so, no traceback, nothing of the run left but the tokenizer it was given; the same start then works."""
    import signal

    run_dir = _run_dir_with_tokenizer(data["root"] / "set-up-interrupted", run)
    args = [str(data["recipe"]), "data.train=bundled:tatoeba-fr-en/train.tsv.gz", "--out", str(run_dir), "--device", "cpu"]
    proc = start_tfm("train", *args)
    first = proc.stderr.readline().decode("utf-8")  # printed before the corpus is read (162k pairs: seconds)
    assert first.startswith("tfm train: recipe"), first
    proc.send_signal(signal.SIGTERM)
    _, rest = proc.communicate(timeout=120)
    stderr = first + rest.decode("utf-8")
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr and "Aborted" not in stderr
    assert "stopped by SIGTERM before the first checkpoint; nothing to resume: start again" in stderr
    assert sorted(p.name for p in run_dir.iterdir()) == ["tokenizer.json"]
    tfm("train", str(data["recipe"]), "train.max_steps=2", "train.save_every=2", "--out", str(run_dir), "--device", "cpu")


def test_a_run_stopped_in_its_first_step_starts_again_with_the_same_command(data: dict[str, Path], run: dict, monkeypatch) -> None:
    """Ctrl-C during the first step (a compiled model's takes a minute or so): the run says that there is nothing to
    resume and to start again, not `--resume` (which refused it), and the same command then trains in that folder
    (its recipe.yaml, which records model.numbers as resolved, was taken for another run's)."""
    import tfm_cli.training.trainer as trainer_module
    from tfm_cli import TrainEvents, load_recipe, train

    run_dir = _run_dir_with_tokenizer(data["root"] / "first-step-stopped", run)

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    said: list[str] = []

    class Events(TrainEvents):
        def message(self, text: str) -> None:
            said.append(text)

    monkeypatch.setattr(trainer_module, "train_step", stopped)
    result = train(load_recipe(data["recipe"]), run_dir, "cpu", events=Events())
    assert result.interrupted and result.step == 0
    assert any("interrupted at step 0, before the first checkpoint: there is nothing to resume; start the run again" in m
               for m in said), said
    assert "numbers: placeholders" in (run_dir / "recipe.yaml").read_text() and "numbers" not in data["recipe"].read_text()
    monkeypatch.undo()
    import torch

    from tfm_cli.training.compiling import compile_problem

    if compile_problem(torch.device("cpu")) is None:  # train.compile either way is the same run (it computes the same)
        tfm("train", str(data["recipe"]), "train.compile=true", "--out", str(run_dir), "--device", "cpu", "--dry-run")
    tfm("train", str(data["recipe"]), "--out", str(run_dir), "--device", "cpu")
    assert (run_dir / "model.safetensors").is_file()
    # a vocabulary asked larger than the corpus gives: recipe.yaml records the size trained, and the same command
    # is still the same run; another one is refused, naming what differs
    monkeypatch.setattr(trainer_module, "train_step", stopped)
    big = data["root"] / "first-step-stopped-big"
    train(load_recipe(data["recipe"], ["tokenizer.vocab_size=8000"]), big, "cpu", events=Events())
    monkeypatch.undo()
    assert "vocab_size: 8000" not in (big / "recipe.yaml").read_text()
    tfm("train", str(data["recipe"]), "tokenizer.vocab_size=8000", "--out", str(big), "--device", "cpu", "--dry-run")
    other = tfm("train", str(data["recipe"]), "tokenizer.vocab_size=8000", "train.seed=9", "--out", str(big),
                "--device", "cpu", "--dry-run", check=False)
    assert other.returncode == 1 and "already holds another run (its recipe.yaml differs from this one: train.seed 1 there -> 9 here;" in other.stderr, other.stderr


def test_train_reports_the_corpus_it_read(run: dict) -> None:
    """The kept/skipped counts reach the user (3000 pairs, none empty, none over data.max_len=32)."""
    assert "train corpus: 3,000 pairs kept of 3,000 read (0 with an empty side and 0 with a side over 31 tokens skipped: data.max_len=32 counts the </s>)" in run["train"].stderr


def test_skipped_pairs_are_counted(data: dict[str, Path], run: dict, tmp_path: Path) -> None:
    """An empty side and an over-long pair are skipped, counted and reported, not fatal. data.max_len=32 counts
    the </s>: a side of 32 tokens as `tfm tokenize --encode` counts them is over it, one of 31 is not."""
    from tfm_cli.tokenizer import Tokenizer

    tok = Tokenizer.load(run["dir"] / "tokenizer.json")

    def words(n: int) -> str:  # a sentence of exactly n tokens
        text = "maison"
        while len(tok.encode(text)) < n:
            text += next(w for w in (" maison", " chat", " a", ",", "!") if len(tok.encode(text + w)) <= n)
        assert len(tok.encode(text)) == n
        return text

    for n in (31, 32):
        printed = tfm("tokenize", "--tokenizer", str(run["dir"]), "--encode", words(n), "--json").stdout
        assert len(json.loads(printed)["ids"]) == n
    corpus = tmp_path / "mixed.tsv"
    long_src = " ".join(["maison"] * 80)
    corpus.write_text(
        data["train"].read_text(encoding="utf-8") + "\tempty source\n" + f"{long_src}\thouse\n"
        + f"{words(32)}\thouse\n" + f"{words(31)}\thouse\n",
        encoding="utf-8",
    )
    out = _run_dir_with_tokenizer(tmp_path / "run", run)
    proc = tfm("train", str(data["recipe"]), f"data.train={corpus}", "train.max_steps=1", "train.save_every=1",
               "train.keep_last=1", "train.average_last=1", "--out", str(out), "--device", "cpu")
    assert "3,001 pairs kept of 3,004 read (1 with an empty side and 2 with a side over 31 tokens skipped: data.max_len=32 counts the </s>)" in proc.stderr


def test_summary_records_the_corpus_counts(data: dict[str, Path], run: dict, tmp_path: Path) -> None:
    """summary.json keeps what the start said of data.train and data.dev (read, kept or scored, skipped), for
    scripts that check a corpus was read as meant."""
    corpus, dev = tmp_path / "mixed.tsv", tmp_path / "dev.tsv"
    long_src = " ".join(["maison"] * 80)
    corpus.write_text(data["train"].read_text(encoding="utf-8") + "\tempty source\n" + f"{long_src}\thouse\n", encoding="utf-8")
    dev.write_text(data["dev"].read_text(encoding="utf-8") + "Bonjour.\t \n", encoding="utf-8")
    out = _run_dir_with_tokenizer(tmp_path / "run", run)
    tfm("train", str(data["recipe"]), f"data.train={corpus}", f"data.dev={dev}", "train.max_steps=1", "train.save_every=1",
        "train.keep_last=1", "train.average_last=1", "--out", str(out), "--device", "cpu")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["train_corpus"] == {"read": 3002, "kept": 3000, "skipped_empty": 1, "skipped_long": 1, "max_len": 32}
    assert summary["dev_corpus"] == {"read": 51, "scored": 50, "skipped_empty": 1}


def test_relative_corpus_paths_resume_from_another_directory(data: dict[str, Path], run: dict, tmp_path: Path) -> None:
    """Relative paths are relative to the CWD; the run stores them absolute, so --resume works from anywhere."""
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(data["train"], work / "train.tsv")
    shutil.copy(data["dev"], work / "dev.tsv")
    out = _run_dir_with_tokenizer(tmp_path / "run", run)
    overrides = ["data.train=train.tsv", "data.dev=dev.tsv", "train.max_steps=2", "train.save_every=1",
                 "train.keep_last=2", "train.average_last=1"]
    tfm("train", str(data["recipe"]), *overrides, "--out", str(out), "--device", "cpu", cwd=work)
    saved = (out / "recipe.yaml").read_text(encoding="utf-8")
    assert str(work / "train.tsv") in saved and str(work / "dev.tsv") in saved
    tfm("train", "--resume", str(out), "train.max_steps=3", "--device", "cpu", cwd=tmp_path)
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert logged[-1]["kind"] == "final" and logged[-1]["step"] == 3


def test_resume_with_another_tokenizer_is_refused_before_anything_is_rewritten(run: dict, tmp_path: Path) -> None:
    from tfm_cli.tokenizer import train_tokenizer

    copy = Path(shutil.copytree(run["dir"], tmp_path / "run"))
    texts = [line.split("\t")[0] for line in _head("train.tsv.gz", 500).splitlines()]
    train_tokenizer(texts, vocab_size=400).save(copy / "tokenizer.json")
    before = _snapshot(copy)
    proc = tfm("train", "--resume", str(copy), "train.max_steps=60", "--device", "cpu", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{copy / 'tokenizer.json'} does not match" in proc.stderr and "hint: put back" in proc.stderr
    assert _snapshot(copy) == before


def test_dev_scores_equal_tfm_translate_on_dev_sentences_longer_than_max_len(data: dict[str, Path], run: dict, tmp_path: Path) -> None:
    """data.max_len filters the training pairs; a dev source longer than it (but within model.max_positions) is
    translated whole, as `tfm translate` translates it, so the dev BLEU/chrF of the run are the scores of the text
    `tfm translate` prints (they were of sources cut to data.max_len - 1 tokens)."""
    pairs = [line.split("\t")[:2] for line in data["dev"].read_text(encoding="utf-8").splitlines()]
    dev = tmp_path / "long-dev.tsv"  # two dev sentences a line: most over max_len=32 tokens, under 64 positions
    groups = [pairs[i : i + 2] for i in range(0, 50, 2)]
    dev.write_text("".join(" ".join(s for s, _ in g) + "\t" + " ".join(t for _, t in g) + "\n" for g in groups), encoding="utf-8")
    out = _run_dir_with_tokenizer(tmp_path / "run", run)
    lengths = [len(json.loads(tfm("tokenize", "--tokenizer", str(out), "--encode", " ".join(s for s, _ in g), "--json").stdout)["ids"]) for g in groups]
    assert sum(32 < n < 64 for n in lengths) >= 10 and max(lengths) < 64, lengths
    # decode.min_len: two steps' model emits nothing else, and what it emits depends on the source it was given
    tfm("train", str(data["recipe"]), f"data.dev={dev}", "train.max_steps=2", "train.eval_every=2", "train.save_every=2", "decode.min_len=64",
        "train.average_last=1", "--out", str(out), "--device", "cpu")
    summary = json.loads((out / "summary.json").read_text())
    report = json.loads(tfm("translate", "--model", str(out), "--device", "cpu", "--score", str(dev), "--json").stdout)
    assert (summary["dev"]["bleu"], summary["dev"]["chrf"]) == (report["bleu"], report["chrf"])


def test_data_max_len_may_fill_the_position_table(data: dict[str, Path], run: dict, tmp_path: Path) -> None:
    """data.max_len counts the </s>: a source takes its tokens and </s>, a decoder input <s> and its tokens, so
    data.max_len = model.max_positions fits (the rule asked for 2 positions more, refusing 19 where 20 fit)."""
    from tfm_cli.tokenizer import Tokenizer

    out = _run_dir_with_tokenizer(tmp_path / "run", run)
    tok = Tokenizer.load(out / "tokenizer.json")
    pairs = [line.split("\t") for line in data["train"].read_text(encoding="utf-8").splitlines()]
    full = [(s, t) for s, t in pairs if max(len(tok.encode(s)), len(tok.encode(t))) == 19]  # 19 tokens + </s> (or <s>)
    assert len(full) >= 20, len(full)
    train = tmp_path / "full.tsv"
    train.write_text("".join(f"{s}\t{t}\n" for s, t in full), encoding="utf-8")
    proc = tfm("train", str(data["recipe"]), f"data.train={train}", "data.dev=null", "data.max_len=20",
               "model.max_positions=20", "train.max_steps=2", "train.save_every=2", "train.average_last=1",
               "--out", str(out), "--device", "cpu")
    assert f"{len(full):,} pairs kept of {len(full):,} read" in proc.stderr, proc.stderr
    assert tfm("translate", "--model", str(out), "--device", "cpu", full[0][0]).returncode == 0


def test_dev_pairs_left_out_for_an_empty_side_are_counted(data: dict[str, Path], run: dict, tmp_path: Path) -> None:
    """Dev pairs with an empty side are not scored (as in data.train); the start says how many, since sacrebleu
    or `tfm translate --score` on the whole file counts them and gives other scores."""
    dev = tmp_path / "dev.tsv"
    dev.write_text(data["dev"].read_text(encoding="utf-8") + "Bonjour.\t \n\tHello.\n", encoding="utf-8")
    out = _run_dir_with_tokenizer(tmp_path / "run", run)
    proc = tfm("train", str(data["recipe"]), f"data.dev={dev}", "train.max_steps=1", "train.save_every=1",
               "train.keep_last=1", "train.average_last=1", "--out", str(out), "--device", "cpu")
    assert "dev corpus: 50 pairs scored of 52 read (2 with an empty side left out" in proc.stderr
    assert "(50 sentences)" in proc.stderr
    report = json.loads(tfm("translate", "--model", str(out), "--device", "cpu", "--score", str(dev), "--json").stdout)
    assert report["sentences"] == 52



def test_a_periodic_dev_line_says_its_loss_is_of_every_sentence(data: dict[str, Path], run: dict, tmp_path: Path) -> None:
    """With train.eval_sentences under the dev set's size, the line said "loss ... ppl ... BLEU ... (20
    sentences)", and the record `"sentences": 20`, though the loss and perplexity are of the whole dev set (only
    the scores are of the first 20). The line says both now, and the record counts both."""
    out = _run_dir_with_tokenizer(tmp_path / "run", run)
    proc = tfm("train", str(data["recipe"]), "train.max_steps=2", "train.save_every=2", "train.eval_every=2",
               "train.eval_sentences=20", "train.average_last=1", "--out", str(out), "--device", "cpu")
    line = next(x for x in proc.stderr.splitlines() if x.startswith("dev step 2:"))
    assert re.search(r"ppl \S+  \(all 50\)  BLEU \S+  chrF \S+  \(first 20 sentences\)$", line), line
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    periodic = next(r for r in records if r["kind"] == "eval")
    final = next(r for r in records if r["kind"] == "final")
    assert (periodic["sentences"], periodic["loss_sentences"], final["sentences"]) == (20, 50, 50)
    assert periodic["loss"] == final["loss"]  # the same weights (the last checkpoint, average_last=1), every sentence
