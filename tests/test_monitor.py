"""Watching a run (issue: TensorBoard, curves, early stopping), through the installed `tfm` on tiny runs.

TensorBoard files are read back with TensorBoard's own EventAccumulator, across a crash-like stop and `--resume`;
early stopping is driven by a run whose dev score cannot move (a learning rate of ~0); the terminal chart is
checked in a pipe; the PNG where matplotlib is installed; and a machine without tensorboard trains as before.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import math
import re
from pathlib import Path

import pytest
from clitools import has_module, tfm, tiny_recipe

from tfm_cli.errors import RecipeError
from tfm_cli.monitor import EarlyStopping, read_curves
from tfm_cli.recipe import load_recipe

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
CORPORA = REPO / "tfm_cli" / "corpora" / "tatoeba-fr-en"


@pytest.fixture(scope="module")
def recipe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("watch")
    for name, n in (("train", 2000), ("dev", 20)):
        with gzip.open(CORPORA / f"{name}.tsv.gz", "rt", encoding="utf-8") as f:
            (root / f"{name}.tsv").write_text("".join(itertools.islice(f, n)), encoding="utf-8")
    path = root / "watch.yaml"
    text = tiny_recipe(
        "watch", data={"train": str(root / "train.tsv"), "dev": str(root / "dev.tsv")},
        train={"max_tokens": 400, "max_steps": 15, "warmup_steps": 10, "log_every": 5, "save_every": 10,
               "eval_every": 10, "eval_sentences": 10, "keep_last": 3, "average_last": 2},
        decode={"max_len_offset": 5},
    )
    path.write_text(text, encoding="utf-8")
    return path


# ---- TensorBoard -------------------------------------------------------------------------------------------


@pytest.mark.skipif(not has_module("tensorboard"), reason="tensorboard is not installed (the tensorboard extra)")
def test_tensorboard_curves_continue_across_a_crash_and_resume(recipe: Path, tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    tfm("train", str(recipe), "--out", str(run), "--device", "cpu")  # logs 5, 10, 15; eval 10; final 15
    # A crash after step 15 was logged but before its checkpoint: remove that checkpoint, resume from step 10.
    for path in (run / "checkpoints").glob("step-00000015.*"):
        path.unlink()
    tfm("train", "--resume", str(run), "train.max_steps=20", "--device", "cpu")

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    steps = lambda tag: [e.step for e in events.Scalars(tag)]  # noqa: E731
    for tag in ("train/loss", "train/ppl", "train/lr", "train/tgt_tokens_per_s"):
        assert steps(tag) == [5, 10, 15, 20], tag  # step 15 once: the resumed run's, the crashed one's purged
    assert steps("dev/bleu") == steps("dev/loss") == [10, 20]  # 20: the last step, on the schedule of every 10
    assert steps("final/bleu") == [20]  # the first run's final model (step 15) was purged with the rest
    latest = {r["step"]: r for r in read_curves(run)["train"]}
    for e in events.Scalars("train/loss"):
        assert e.value == pytest.approx(latest[e.step]["loss"], rel=1e-6)
    assert "recipe/text_summary" in events.Tags()["tensors"]  # the resolved recipe, as text


def test_a_line_cut_by_a_crash_loses_no_record_after_it(recipe: Path, tmp_path: Path) -> None:
    """metrics.jsonl ending in a line cut mid-write (a crash, a full disk): the resumed run's first record was
    appended to it, on the same line, and lost with it (the curves skip a line they cannot read)."""
    run = tmp_path / "run"
    tfm("train", str(recipe), "--out", str(run), "--device", "cpu")
    for path in (run / "checkpoints").glob("step-00000015.*"):
        path.unlink()
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write('{"kind": "train", "step": 1')  # no newline: cut there
    tfm("train", "--resume", str(run), "train.max_steps=20", "--device", "cpu")
    lines = (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines.count('{"kind": "train", "step": 1') == 1  # the cut line stays alone on its line
    curves = json.loads(tfm("train", "--curves", str(run), "--json").stdout)
    assert [r["step"] for r in curves["train"]] == [5, 10, 15, 20]  # 15: the resumed run's first record


def test_training_without_tensorboard_changes_nothing(recipe: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "block" / "tensorboard"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('tensorboard is blocked for this test')\n")
    run = tmp_path / "run"
    proc = tfm("train", str(recipe), "train.max_steps=5", "--out", str(run), "--device", "cpu",
               env_extra={"PYTHONPATH": str(tmp_path / "block")})
    assert (run / "model.safetensors").is_file() and not (run / "tensorboard").exists()
    assert "tensorboard" not in proc.stderr.lower()


# ---- curves: terminal chart and PNG --------------------------------------------------------------------------


@pytest.mark.plot
def test_curves_in_a_pipe_and_png(recipe: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    trained = tfm("train", str(recipe), "--out", str(run), "--device", "cpu")
    # At the end of the run, after the summary table: the chart in plain characters.
    assert "train loss │" in trained.stdout and "└" in trained.stdout and "dev BLEU" in trained.stdout
    shown = tfm("train", "--curves", str(run))
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("train loss │") and "\x1b[" not in shown.stdout  # no colour codes in a pipe
    assert any("step 5" in line and line.rstrip().endswith("15") for line in lines)  # the x range
    final = next(line for line in lines if line.startswith("final"))
    summary = json.loads((run / "summary.json").read_text())
    assert f"BLEU {summary['dev']['bleu']:.2f}" in final
    data = json.loads(tfm("train", "--curves", str(run), "--json").stdout)
    assert [r["step"] for r in data["train"]] == [5, 10, 15] and [r["step"] for r in data["eval"]] == [10]
    png = run / "curves.png"
    if has_module("matplotlib"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "curves:" in shown.stderr
        # HOME unusable (unset or read-only in CI containers): matplotlib's own set-up said two lines of warnings
        homeless = tfm("train", "--curves", str(run), env_extra={"HOME": "/dev/null/home", "MPLCONFIGDIR": "",
                                                                  "XDG_CONFIG_HOME": "", "XDG_CACHE_HOME": ""})
        assert homeless.stderr.splitlines() == [f"curves: {png}"], homeless.stderr
    else:
        assert not png.exists() and "matplotlib" in shown.stderr
    missing = tfm("train", "--curves", str(tmp_path / "nowhere"), check=False)
    assert missing.returncode == 1 and f"Error: run directory {tmp_path / 'nowhere'} does not exist" in missing.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    missing = tfm("train", "--curves", str(empty), check=False)
    assert missing.returncode == 1 and "has no metrics.jsonl" in missing.stderr


@pytest.mark.plot
@pytest.mark.skipif(not has_module("matplotlib"), reason="matplotlib is not installed (the plot extra)")
def test_png_written_at_the_end_of_a_run(recipe: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = tfm("train", str(recipe), "train.max_steps=5", "--out", str(run), "--device", "cpu")
    assert (run / "curves.png").read_bytes()[:4] == b"\x89PNG" and "curves:" in proc.stderr
    bare = tmp_path / "no-dev"  # no dev set: nothing to label on the BLEU side, and no matplotlib warning
    proc = tfm("train", str(recipe), "train.max_steps=5", "data.dev=null", "train.eval_every=0", "--out", str(bare), "--device", "cpu")
    assert (bare / "curves.png").is_file() and "Warning" not in proc.stderr and "legend" not in proc.stderr


# ---- early stopping -----------------------------------------------------------------------------------------


def test_early_stopping_on_a_plateau(recipe: Path, tmp_path: Path) -> None:
    """With a learning rate of ~0 the dev scores never change: the first evaluation is the best, and with
    patience 2 the run stops at the third, cleanly (checkpoint, average, final evaluation, reason)."""
    run = tmp_path / "run"
    proc = tfm(
        "train", str(recipe), "train.lr_factor=1e-12", "train.max_steps=40", "train.eval_every=5",
        "train.save_every=100", "train.patience=2", "--out", str(run), "--device", "cpu", "--json",
    )
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 15
    assert "dev BLEU did not improve for 2 evaluations" in summary["stopped"] and "step 5" in summary["stopped"]
    assert json.loads(proc.stdout)["stopped"] == summary["stopped"]
    curves = read_curves(run)
    assert [r["step"] for r in curves["eval"]] == [5, 10, 15]
    assert curves["final"]["step"] == 15 and (run / "model.safetensors").is_file()
    assert (run / "checkpoints" / "step-00000015.safetensors").is_file()  # saved at the stop
    # a plain resume has nothing to do (it trained 5 more steps, stopped again and replaced the final model)
    files = {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
    proc = tfm("train", "--resume", str(run), "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    assert f"{run} stopped early at step 15" in proc.stderr and "nothing to do" in proc.stderr
    assert "train.patience=N (more than 2, or 0 for none)" in proc.stderr
    assert {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()} == files
    proc = tfm("train", "--resume", str(run), "train.patience=3", "--device", "cpu")  # more patience: trains on
    assert proc.returncode == 0 and "nothing to do" not in proc.stderr, proc.stderr
    assert json.loads((run / "summary.json").read_text())["steps"] == 20


def test_early_stopping_rule_and_its_state() -> None:
    by_loss = EarlyStopping(patience=2, metric="loss")
    assert [by_loss.update(s, {"loss": v}) for s, v in ((1, 3.0), (2, 2.5), (3, 2.5), (4, 2.6))] == [False, False, False, True]
    assert by_loss.best == 2.5 and by_loss.best_step == 2 and "dev loss" in by_loss.reason()
    resumed = EarlyStopping(patience=2, metric="loss")
    resumed.load_state_dict({"best": 2.5, "best_step": 2, "bad_evals": 1})
    assert resumed.update(5, {"loss": 2.7})  # the count carried over a resume
    by_bleu = EarlyStopping(patience=1, metric="bleu")
    assert [by_bleu.update(s, {"bleu": v}) for s, v in ((1, 10.0), (2, 12.0), (3, 12.0))] == [False, False, True]
    never = EarlyStopping(patience=0)
    assert not any(never.update(s, {"bleu": 1.0}) for s in range(5))


def test_patience_needs_a_dev_set_and_periodic_evaluation(recipe: Path) -> None:
    with pytest.raises(RecipeError) as info:
        load_recipe(recipe, ["train.patience=3", "data.dev=null", "train.eval_every=0"])
    problems = info.value.problems
    assert any("train.patience=3 needs a dev set" in p and "data.dev is null" in p for p in problems)
    assert any("train.patience=3 needs periodic evaluation" in p and "train.eval_every=0" in p for p in problems)
    with pytest.raises(RecipeError, match="train.patience_metric='bleu2' must be one of: bleu, loss"):
        load_recipe(recipe, ["train.patience_metric=bleu2"])
    proc = tfm("train", str(recipe), "train.patience=2", "train.eval_every=0", check=False)
    assert proc.returncode == 1 and "needs periodic evaluation" in proc.stderr and "Traceback" not in proc.stderr


# ---- the time budget (train.max_time) --------------------------------------------------------------------------


def test_time_budget_ends_the_run_cleanly(recipe: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = tfm("train", str(recipe), "train.max_steps=1000000", "train.max_time=2s", "train.save_every=100000",
               "--out", str(run), "--device", "cpu", "--json")
    summary = json.loads((run / "summary.json").read_text())
    assert 0 < summary["steps"] < 1000000
    assert summary["stopped"].startswith("time budget: train.max_time=2s used up at step ")
    assert json.loads(proc.stdout)["stopped"] == summary["stopped"]
    step = summary["steps"]
    assert (run / "checkpoints" / f"step-{step:08d}.safetensors").is_file()  # saved where it stopped
    assert (run / "model.safetensors").is_file() and read_curves(run)["final"]["step"] == step
    # the steps since the last train record are logged at the stop (they were left out: 253 steps, the last
    # record at 250), unless the stop came right after one
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "train"][-1] == step
    resumed = tfm("train", "--resume", str(run), f"train.max_steps={step + 3}", "train.max_time=null", "--device", "cpu")
    assert json.loads((run / "summary.json").read_text())["steps"] == step + 3 and "resumed from" in resumed.stderr


def test_time_budget_counts_training_time_across_resumes(recipe: Path, tmp_path: Path) -> None:
    """train.max_time counted from `tfm train`'s start (tokenizer and corpus reading included) and afresh at each
    resume: a plain --resume of a run its budget had ended trained for another max_time. Now it counts the training
    of all sessions (as fairseq's --stop-time-hours), the final model is said to come after it, and summary.json
    splits the session's time."""
    run = tmp_path / "run"
    proc = tfm("train", str(recipe), "train.max_steps=1000000", "train.max_time=2s", "train.save_every=100000",
               "--out", str(run), "--device", "cpu")
    assert "train.max_time counts training only: averaging the last checkpoints and evaluating the final model on all 20 dev sentences" in proc.stderr
    first = json.loads((run / "summary.json").read_text())
    assert 2 <= first["train_seconds"] < 2 + 5  # training only: not the set-up, not the final evaluation
    assert first["session_seconds"] >= first["setup_seconds"] + first["train_seconds"] + first["final_seconds"] - 0.5
    dry = tfm("train", "--resume", str(run), "--dry-run", "--device", "cpu").stdout  # says what the resume will do:
    # nothing (it said "spent: the resume ... writes the final model", which was written already)
    assert f"# finished at step {first['steps']:,} (time budget: train.max_time=2s used up" in dry, dry
    assert "its final model is written: the resume has nothing to do" in dry and "train_seconds" not in dry
    dry = json.loads(tfm("train", "--resume", str(run), "train.max_time=1h", "--dry-run", "--json", "--device", "cpu").stdout)
    assert dry["train_seconds_used"] == pytest.approx(first["train_seconds"], abs=0.2)
    assert dry["train_seconds_left"] == pytest.approx(3600 - first["train_seconds"], abs=0.2)
    again = tfm("train", "--resume", str(run), "--device", "cpu")  # the budget is spent: nothing to do
    assert "when its time budget ran out (train.max_time=2s" in again.stderr and "nothing to do" in again.stderr
    assert "train.max_time=LONGER" in again.stderr
    assert json.loads((run / "summary.json").read_text()) == first
    more = tfm("train", "--resume", str(run), "train.max_time=4s", "--device", "cpu")  # 2 more seconds of training
    assert "resumed from" in more.stderr
    second = json.loads((run / "summary.json").read_text())
    assert second["steps"] > first["steps"] and 4 <= second["train_seconds"] < 4 + 5
    assert second["stopped"].startswith(f"time budget: train.max_time=4s used up at step {second['steps']} ")
    assert "s of training in all sessions)" in second["stopped"]


def test_a_budget_that_ran_out_after_a_checkpoint_and_an_evaluation_is_spent_on_resume(recipe: Path, tmp_path: Path) -> None:
    """The step's checkpoint was saved before its dev evaluation, and the budget ran out during that evaluation: the
    checkpoint's training time was under the budget, so a plain --resume trained on instead of having nothing to do."""
    run = tmp_path / "run"
    tfm("train", str(recipe), "train.max_steps=1000000", "train.max_time=2s", "train.save_every=1", "train.eval_every=1",
        "--out", str(run), "--device", "cpu")
    first = json.loads((run / "summary.json").read_text())
    again = tfm("train", "--resume", str(run), "--device", "cpu")
    assert "nothing to do" in again.stderr and json.loads((run / "summary.json").read_text()) == first


def test_eta_ends_at_the_time_budget(recipe: Path, tmp_path: Path) -> None:
    """With train.max_time and a far train.max_steps, the progress line's eta counted to max_steps (hours) although
    the run would end within seconds."""
    proc = tfm("train", str(recipe), "train.max_steps=1000000", "train.max_time=3s", "train.log_every=2",
               "train.eval_every=0", "train.save_every=100000", "--out", str(tmp_path / "run"), "--device", "cpu")
    etas = [line.rsplit("eta ", 1)[1] for line in proc.stderr.splitlines() if line.startswith("step ")]
    assert etas and all(len(eta.split(":")) == 2 and int(eta.split(":")[0]) == 0 and int(eta.split(":")[1]) <= 3 for eta in etas), etas


def test_dev_decoding_shows_its_progress(recipe: Path, tmp_path: Path) -> None:
    """The final evaluation of a barely trained model (every sentence run to the maximum length) took minutes on a
    CPU without a line: it looked hung. Each dev evaluation's beam search now says how many sentences it decodes
    and its progress (plain lines here; a row on the training bar at a terminal), and the API gets it too."""
    from tfm_cli import TrainEvents, train

    proc = tfm("train", str(recipe), "--out", str(tmp_path / "run"), "--device", "cpu")  # eval at 10, final at 15
    err = proc.stderr
    assert "dev evaluation at step 10: 10 dev sentences to decode" in err
    assert "dev evaluation at step 10: 10 dev sentences decoded in " in err
    assert "final model: the last checkpoint: 20 dev sentences to decode" in err
    assert "final model: the average of 2 checkpoints: 20 dev sentences decoded in " in err

    class Recorder(TrainEvents):
        def __init__(self) -> None:
            self.decoded: list[tuple[str, int, int]] = []

        @contextlib.contextmanager
        def decoding(self, what: str, sentences: int):
            done = [0]
            yield lambda n: done.__setitem__(0, done[0] + n)
            self.decoded.append((what, sentences, done[0]))

    events = Recorder()
    train(recipe, tmp_path / "api", device="cpu", events=events)
    assert events.decoded == [
        ("dev evaluation at step 10", 10, 10), ("final model: the last checkpoint", 20, 20),
        ("final model: the average of 2 checkpoints", 20, 20),
    ]


def test_dev_lines_of_several_sentences_are_counted_as_both(recipe: Path, tmp_path: Path) -> None:
    """A dev line of two sentences is translated a sentence at a time, so the progress counts sentences, while the
    scores count lines: the log said "11 dev sentences to decode" then "BLEU ... (first 10 sentences)", with
    nothing to tell the two apart (2,022 and 2,000 on the bundled dev set)."""
    lines = (recipe.parent / "dev.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
    src, tgt = lines[3].rstrip("\n").split("\t")[:2]
    lines[3] = f"{src} Il fait beau.\t{tgt} The weather is nice.\n"
    dev = tmp_path / "dev.tsv"
    dev.write_text("".join(lines), encoding="utf-8")
    err = tfm("train", str(recipe), f"data.dev={dev}", "train.max_steps=10", "--out", str(tmp_path / "run"),
              "--device", "cpu").stderr
    assert "dev evaluation at step 10 (10 dev lines, as 11 sentences): 11 dev sentences to decode" in err
    assert "(first 10 lines)" in err and json.loads((tmp_path / "run" / "summary.json").read_text())["dev"]["decoded_sentences"]


def test_a_run_whose_loss_exploded_without_nan_says_it_diverged(recipe: Path, tmp_path: Path) -> None:
    """A learning rate far too high drove the loss to tens of thousands without a NaN: the run ended like any other,
    its dev BLEU 0.00 the only sign. A training loss at the end over twice a uniform guess's (ln V), past the
    warm-up, is said to be a divergence, with a dev set or without."""
    said = re.compile(r"warning: the training loss at the end, [\d,.e+]+, is over twice a uniform guess's \(ln [\d,]+ = "
                      r"[\d.]+\): the run diverged")
    for dev in ([], ["data.dev=null"]):
        err = tfm("train", str(recipe), "train.lr_factor=1000", "train.max_steps=30", "train.eval_every=0",
                  "train.average_last=3", *dev, "--out", str(tmp_path / f"run{len(dev)}"), "--device", "cpu").stderr
        assert said.search(err), err[-2000:]
    healthy = tfm("train", str(recipe), "--out", str(tmp_path / "healthy"), "--device", "cpu").stderr
    assert "diverged" not in healthy


def test_durations() -> None:
    from tfm_cli.recipe import parse_duration

    assert [parse_duration(t) for t in ("90s", "15m", "2h", "1h30m", "0.5h", "1h2m3s")] == [90, 900, 7200, 5400, 1800, 3723]
    assert [parse_duration(t) for t in ("15 minutes", "", "0m", "1h30", "m", "-5m")] == [None] * 6


def test_bad_time_budget_is_a_recipe_error(recipe: Path) -> None:
    with pytest.raises(RecipeError, match=r"train.max_time='15 minutes' is not a positive duration: write e.g. 90s, 15m, 2h"):
        load_recipe(recipe, ["train.max_time=15 minutes"])
    proc = tfm("train", str(recipe), "train.max_time=fast", check=False)
    assert proc.returncode == 1 and "train.max_time='fast' is not a positive duration" in proc.stderr
    with pytest.raises(RecipeError, match=r"train.max_time=15 needs a unit: write e.g. 15m for minutes"):
        load_recipe(recipe, ["train.max_time=15"])  # said "must be a string (put it in quotes)": "15" is refused too
    for value in (".nan", ".inf", "-.inf", "0", "-5"):  # ".nan" was told to write "nanm for minutes"
        with pytest.raises(RecipeError, match=r"must be a positive time budget with a unit, e.g. 90s, 15m, 2h") as caught:
            load_recipe(recipe, [f"train.max_time={value}"])
        assert "nanm" not in str(caught.value) and "infm" not in str(caught.value)


def test_rising_loss_warns_once_per_climb_and_not_on_noise() -> None:
    from tfm_cli.monitor import RisingLoss

    watch = RisingLoss(windows=3, rise=0.10)
    falling_with_noise = [6.0, 5.1, 5.2, 4.6, 4.7, 4.2, 4.25, 4.1]  # a healthy run: single upticks only
    assert [watch.update(x, 1e-3) for x in falling_with_noise] == [None] * len(falling_with_noise)
    small_drift = [4.11, 4.12, 4.13]  # three rises in a row, but well within 10% of the best loss: noise
    assert [watch.update(x, 1e-3) for x in small_drift] == [None] * 3
    climbing = [4.5, 5.2, 6.3]  # 4.5 is still within 10% of the best (4.1); 5.2 is not
    warnings = [watch.update(x, 7e-4) for x in climbing]
    assert warnings[0] is None and "risen 3 log windows in a row" in warnings[1]
    assert "lr 0.0007" in warnings[1] and "4.120 -> 4.130 -> 4.500 -> 5.200" in warnings[1]
    assert warnings[2] is None  # still the same climb: said once
    assert watch.update(6.0, 7e-4) is None  # a fall re-arms it
    assert [watch.update(x, 7e-4) for x in (6.1, 6.2)] == [None, None]
    assert "6.000 -> 6.100 -> 6.200 -> 6.400" in watch.update(6.4, 7e-4)


def test_a_run_that_raises_leaves_no_tensorboard_thread_behind(recipe: Path, tmp_path: Path) -> None:
    """The TensorBoard writer was closed on the normal, interrupted and diverged paths only: a `train()` whose
    events raised (or any crash) left its writer thread running, one more per call, in a notebook's process."""
    import threading

    from tfm_cli import TrainEvents
    from tfm_cli.training import train

    class Boom(TrainEvents):
        def step(self, step: int, metrics: dict) -> None:
            if step == 5:
                raise RuntimeError("boom")

    before = threading.active_count()
    for i in range(2):
        with pytest.raises(RuntimeError, match="boom"):
            train(load_recipe(recipe, ["train.save_every=100"]), tmp_path / f"run{i}", device="cpu", events=Boom())
    assert threading.active_count() == before, [t.name for t in threading.enumerate()]
    assert any((tmp_path / "run0" / "tensorboard").iterdir())  # it did write its events


@pytest.mark.skipif(not has_module("tensorboard"), reason="needs the tensorboard extra (pip install -e '.[tensorboard]')")
def test_event_files_that_cannot_be_written_end_tensorboard_logging_in_one_line(tmp_path: Path, capfd) -> None:
    """A disk that filled up while TensorBoard wrote: its writer thread printed a traceback, and the OSError it
    handed to the next call, naming no file, stopped the run as "writing the output failed" (stdout's error).
    Logging to TensorBoard now stops with one warning naming RUN/tensorboard; the run goes on (its next checkpoint
    or metrics.jsonl line says the disk is full, with the way to resume)."""
    import errno
    import threading

    from tfm_cli.monitor import TensorBoardLog

    said: list[str] = []
    board = TensorBoardLog.open(tmp_path, 0, said.append)
    board.train(1, {"loss": 5.0, "lr": 1e-3})
    records = board.writer.file_writer.event_writer._async_writer._writer  # what the writer's thread writes through

    def full(data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    records.write = full
    threads = threading.active_count()
    for step in (2, 3, 4):  # the first call hands the thread's error on; the others find logging stopped
        board.train(step, {"loss": 4.0, "lr": 1e-3})
    board.evaluation(4, {"bleu": 1.0})
    board.close()
    assert said == [
        f"warning: TensorBoard logging stopped: {tmp_path / 'tensorboard'} could not be written (No space left on device); "
        "training goes on, and metrics.jsonl keeps every figure"
    ]
    assert not board.enabled and threading.active_count() <= threads
    assert "Traceback" not in capfd.readouterr().err


def test_perplexity_is_capped_and_said_to_be() -> None:
    """exp(NLL) is capped at exp(50) for JSON; the log lines said 5184705528587072045056.0 on every step of a
    diverged run, as if measured, and printed a large figure whole."""
    from tfm_cli.monitor import perplexity, ppl_text

    assert perplexity(2.0) == math.exp(2.0) and perplexity(60.0) == perplexity(50.0) == math.exp(50.0)
    assert ppl_text(perplexity(60.0)) == ">5.2e+21" and ppl_text(perplexity(49.0)) == "1.91e+21"
    assert ppl_text(1.178e17) == "1.18e+17" and ppl_text(12.345) == "12.3" and ppl_text(12.345, 2) == "12.35"


def test_a_chart_of_one_point_is_one_line() -> None:
    """A run logged once (train.log_every above max_steps) drew a chart of one ▁ with its value as both ends of
    the range and "step 30 30" under it."""
    from tfm_cli.cli.views import bar_chart

    assert bar_chart("train loss", [30], [6.4912]) == ["train loss 6.49 at step 30"]
    lines = bar_chart("train loss", [10, 20, 30], [6.0, 5.0, 4.0])
    assert lines[0].startswith("train loss │") and "step 10" in lines[-1] and lines[-1].rstrip().endswith("30")
