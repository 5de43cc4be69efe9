"""Watching a run: TensorBoard event files, early stopping, and the curves of `metrics.jsonl` (data and PNG).

- `TensorBoardLog` writes the trainer's scalars into RUN/tensorboard when the `tensorboard` package is installed
  (`pip install -e ".[tensorboard]"`), and does nothing otherwise. A resumed run purges the events logged after
  the checkpoint it resumes from, so the curves continue without duplicated or missing steps.
- `EarlyStopping` watches dev BLEU (higher is better) or dev loss (lower) and says when `patience` evaluations
  in a row brought nothing better; its state is saved with each checkpoint so that resume stays exact.
- `RisingLoss` warns when the training loss climbs for several log windows in a row (a diverging run).
- `read_curves` turns a run's metrics.jsonl into plain lists; `write_curves_png` draws them with matplotlib
  (the `plot` extra) into RUN/curves.png. The terminal chart is drawn by the CLI (tfm_cli/cli/views/).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tfm_cli.files import atomic_write, json_value, write_failure
from tfm_cli.runs import CURVES_PNG, TENSORBOARD_DIR
from tfm_cli.signals import held_stop_signals

PPL_CAP_NATS = 50.0  # perplexity is exp(NLL) up to exp(50) = 5.2e21, a model long diverged: a finite figure for JSON


def perplexity(nll: float) -> float:
    """exp(mean NLL per token), capped at exp(PPL_CAP_NATS) (log lines show the cap as ">5.2e+21": `ppl_text`)."""
    return math.exp(min(nll, PPL_CAP_NATS))


def ppl_text(ppl: float, digits: int = 1) -> str:
    """A perplexity for a log line: the figure (3 significant digits from a million: 117832928967061616.0 was
    printed whole), or ">5.2e+21" at the cap (the same figure on every step of a diverged run read like a
    measurement)."""
    cap = math.exp(PPL_CAP_NATS)
    return f">{cap:.2g}" if ppl >= cap else f"{ppl:.{digits}f}" if ppl < 1e6 else f"{ppl:.3g}"

_TRAIN_SCALARS = {"loss": "train/loss", "ppl": "train/ppl", "lr": "train/lr", "tgt_tokens_per_s": "train/tgt_tokens_per_s"}
_DEV_SCALARS = {"loss": "dev/loss", "ppl": "dev/ppl", "bleu": "dev/bleu", "chrf": "dev/chrf"}


class TensorBoardLog:
    """Scalars for TensorBoard (`tensorboard --logdir runs/`); a no-op without the tensorboard package.

    Its writer hands events to a thread through a `queue.Queue`: a Ctrl-C or stop signal that arrives during a
    call is held until the call is done (`held_stop_signals`), since one raised inside the queue's locking
    made `close()` hang.

    The event files are a view of the run, not its record (metrics.jsonl is): where they cannot be written (a
    full or read-only disk), logging to TensorBoard stops, `on_lost` is told once, and training goes on, to
    the checkpoint that says the disk is full with the way to resume. The writer's thread printed a traceback,
    and the error it handed on, naming no file, was taken for stdout's.
    """

    def __init__(self, writer: Any, log_dir: Path | None = None, on_lost: Callable[[str], None] | None = None) -> None:
        self.writer = writer
        self.log_dir = log_dir
        self.on_lost = on_lost

    @classmethod
    def open(cls, run_dir: Path, start_step: int = 0, on_lost: Callable[[str], None] | None = None) -> TensorBoardLog:
        """Event files in RUN/tensorboard for a run that continues after `start_step` (0 for a fresh run).

        Events of later steps that an interrupted attempt had logged are purged (TensorBoard hides them):
        this run logs those steps again. `on_lost(message)`: told once if the files cannot be written.
        """
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # tensorboard is an optional extra: training does not need it
            return cls(None)
        _quiet_writer_threads()
        log_dir = Path(run_dir) / TENSORBOARD_DIR
        board = cls(None, log_dir, on_lost)
        with held_stop_signals():  # it starts the writer's thread and queues the file's first event
            board._guarded(lambda: setattr(board, "writer", SummaryWriter(log_dir=str(log_dir), purge_step=start_step + 1)))
        return board

    def _guarded(self, call: Callable[[], object]) -> None:
        """`call()`; an OSError from it (or from the writer's thread, handed on) ends TensorBoard logging, said once."""
        try:
            call()
        except OSError as error:
            writer, self.writer = self.writer, None
            if writer is not None:
                with contextlib.suppress(Exception):  # its thread has failed: closing flushes what it could not
                    writer.close()
            if self.on_lost is not None:
                why = error.strerror or str(error) or type(error).__name__
                self.on_lost(
                    f"warning: TensorBoard logging stopped: {self.log_dir} could not be written ({why}); training goes "
                    "on, and metrics.jsonl keeps every figure"
                )

    @property
    def enabled(self) -> bool:
        return self.writer is not None

    def recipe(self, text: str, step: int) -> None:
        """The resolved recipe as text, shown in TensorBoard's Text tab."""
        if self.writer is not None:
            with held_stop_signals():
                self._guarded(lambda: self.writer.add_text("recipe", "```yaml\n" + text + "\n```", step))

    def train(self, step: int, metrics: dict[str, Any]) -> None:
        self._scalars(_TRAIN_SCALARS, step, metrics)

    def evaluation(self, step: int, metrics: dict[str, Any], final: bool = False) -> None:
        names = {k: v.replace("dev/", "final/") for k, v in _DEV_SCALARS.items()} if final else _DEV_SCALARS
        self._scalars(names, step, metrics)

    def _scalars(self, names: dict[str, str], step: int, metrics: dict[str, Any]) -> None:
        if self.writer is None:
            return
        def write() -> None:
            for key, tag in names.items():
                value = metrics.get(key)
                if isinstance(value, (int, float)) and math.isfinite(value):
                    self.writer.add_scalar(tag, value, step)
            self.writer.flush()

        with held_stop_signals():
            self._guarded(write)

    def close(self) -> None:
        """Flush and stop the writer (and its thread); once: a second call does nothing."""
        if self.writer is not None:
            with held_stop_signals():
                self._guarded(self.writer.close)
            self.writer = None


def _quiet_writer_threads() -> None:
    """Keep the traceback of TensorBoard's writer thread off stderr when it fails to write (a full disk): the
    writer hands the error on to the next call, where `TensorBoardLog` says it in one line. Other threads' errors,
    and the writer's other than OSError, are printed as before."""
    previous = threading.excepthook
    if getattr(previous, "_tfm_quiet", False):
        return

    def hook(args: threading.ExceptHookArgs) -> None:
        if type(args.thread).__name__ == "_AsyncWriterThread" and isinstance(args.exc_value, OSError):
            return
        previous(args)

    hook._tfm_quiet = True  # type: ignore[attr-defined]
    threading.excepthook = hook


EARLY_STOP = "early stop"  # how the reason begins (summary.json's "stopped")
TIME_BUDGET = "time budget:"  # ... and when train.max_time ended the run


class EarlyStopping:
    """Stop when `patience` dev evaluations in a row did not improve the watched metric (strictly)."""

    def __init__(self, patience: int, metric: str = "bleu") -> None:
        if metric not in ("bleu", "loss"):
            raise ValueError(f"early stopping watches bleu or loss, not {metric!r}")
        self.patience, self.metric = patience, metric
        self.best: float | None = None
        self.best_step = 0
        self.bad_evals = 0

    def update(self, step: int, metrics: dict[str, Any]) -> bool:
        """Record an evaluation; True when training should stop now."""
        value = float(metrics[self.metric])
        better = self.best is None or (value > self.best if self.metric == "bleu" else value < self.best)
        if better:
            self.best, self.best_step, self.bad_evals = value, step, 0
        else:
            self.bad_evals += 1
        return self.done

    @property
    def done(self) -> bool:
        """Its patience has run out: the last evaluation said to stop (True from `update`)."""
        return self.patience > 0 and self.bad_evals >= self.patience

    def reason(self) -> str:
        name = "dev BLEU" if self.metric == "bleu" else "dev loss"
        return (
            f"{EARLY_STOP}: {name} did not improve for {self.bad_evals} evaluation{'s' if self.bad_evals != 1 else ''} "
            f"(best {self.best:.4g} at step {self.best_step}; train.patience={self.patience})"
        )

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "best_step": self.best_step, "bad_evals": self.bad_evals}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.best_step, self.bad_evals = state["best"], state["best_step"], state["bad_evals"]


class RisingLoss:
    """Warns when the training loss climbs for `windows` log windows in a row: a run diverging says so early.

    Noise makes a window now and then a little worse than the one before; several rises in a row that add up
    to a real climb (at least `rise` above the lowest loss so far) do not happen in a healthy run. The warning
    is given once per climb; a window that falls again re-arms it. (A base-recipe run with its warm-up cut
    to 800 steps diverged into "The The The ..." while nothing said so.)
    """

    def __init__(self, windows: int = 3, rise: float = 0.10) -> None:
        self.windows, self.rise = windows, rise
        self.history: list[float] = []
        self.lowest = math.inf
        self.warned = False

    def update(self, loss: float, lr: float) -> str | None:
        """Record one log window's loss; returns the warning to show, or None."""
        self.history = [*self.history[-self.windows :], loss]
        climbing = len(self.history) > self.windows and all(
            b > a for a, b in zip(self.history, self.history[1:], strict=False)
        )
        if not climbing:
            self.warned = False
        self.lowest = min(self.lowest, loss)
        if climbing and not self.warned and loss >= self.lowest * (1 + self.rise):
            self.warned = True
            trail = " -> ".join(f"{x:.3f}" for x in self.history)
            return (
                f"warning: the training loss has risen {self.windows} log windows in a row ({trail}) at lr {lr:.3g}: "
                "the run may be diverging; a lower train.lr_factor or a longer train.warmup_steps usually helps"
            )
        return None


def purge_metrics_after(run_dir: Path, step: int) -> int:
    """Drop the records of metrics.jsonl logged after `step` (by a session that died past its last checkpoint, a
    `kill -9`), as TensorBoard's purge_step drops its events, so that a resume from `step` does not interleave its
    records with those of a future that was thrown away. Returns how many were dropped (the file is rewritten
    whole, or not at all, only then). Lines that are no record are kept."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return 0
    kept: list[bytes] = []
    dropped = 0
    for line in path.read_bytes().splitlines(keepends=True):
        try:
            record = json.loads(line)
        except ValueError:
            kept.append(line)
            continue
        later = isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] > step
        dropped += later
        if not later:
            kept.append(line)
    if dropped:
        atomic_write(path, lambda tmp: Path(tmp).write_bytes(b"".join(kept)))
    return dropped


def append_metrics(run_dir: Path, record: dict[str, Any]) -> None:
    """Add one record (a log window, an evaluation, the final scores) to the run's metrics.jsonl, on a line of
    its own: after a line that a crash cut mid-write (no newline at the end of the file), a new line is started
    first, or the record would be glued to it and lost with it (`read_curves` skips a line it cannot read)."""
    path = Path(run_dir) / "metrics.jsonl"
    try:
        with open(path, "a+b") as f:  # writes go to the end, wherever it has read
            size = f.seek(0, 2)
            if size:
                f.seek(size - 1)
            cut = size > 0 and f.read(1) != b"\n"
            f.write((("\n" if cut else "") + json.dumps(record) + "\n").encode("utf-8"))
    except OSError as error:  # a write's error names no file (a full disk): name this one
        failure = write_failure(error, path)
        if failure is None:
            raise
        raise failure from error


def _is_skipped_step(record: Any) -> bool:
    """The trainer's record of an update it skipped (`{"kind": "skipped", "step": N, "loss": "nan", ...}`)."""
    return isinstance(record, dict) and record.get("kind") == "skipped" and isinstance(record.get("step"), int) \
        and not isinstance(record.get("step"), bool)


def _is_record(record: Any, finite: bool = True) -> bool:
    """A record the curves can draw: a train or eval window with a step and numbers, or the final scores; with
    `finite` False, one of those whose numbers may be NaN or infinite."""
    if not isinstance(record, dict):
        return False
    step = record.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        return False
    numbers = {"train": ("loss",), "eval": ("loss", "bleu"), "final": ()}.get(record.get("kind"))
    if numbers is None:
        return False
    if record["kind"] == "final" and "bleu" in record:
        numbers = ("bleu", "chrf")
    if not all(isinstance(record.get(k), (int, float)) and not isinstance(record.get(k), bool) for k in numbers):
        return False
    # NaN, Infinity and 1e400 are valid JSON for Python's reader; a chart of them failed ("cannot convert float NaN
    # to integer"). (tfm writes a skipped step's loss as the string "nan", in a record of its own kind.)
    return not finite or all(math.isfinite(record[k]) for k in numbers if isinstance(record[k], float))


def _tidy(record: dict[str, Any]) -> dict[str, Any]:
    """`record` without what the views print beside its numbers where that is of another type (edited by hand):
    left out rather than a traceback ("Cannot specify ',' with 's'")."""
    sentences = record.get("sentences")
    if sentences is not None and (not isinstance(sentences, int) or isinstance(sentences, bool)):
        del record["sentences"]
    if record.get("final_model") is not None and not isinstance(record["final_model"], dict):
        del record["final_model"]
    return record


def read_curves(run_dir: Path) -> dict[str, Any]:
    """The curves of a run from its metrics.jsonl: {"train": [{step, loss, lr, ...}], "eval": [{step, loss, bleu,
    chrf, ...}], "final": {...} or None, "skipped_steps": [the steps whose update the trainer skipped, its loss not
    finite], "not_finite": N records of numbers a chart cannot draw (NaN, infinite), "damaged_lines": N lines that
    are no record tfm writes (cut by a crash, damaged, edited), "first_damaged_line": the first one's number or
    None}. A resumed run's repeated steps keep their latest record.

    Raises:
        FileNotFoundError: the run has no metrics.jsonl.
    """
    path = Path(run_dir) / "metrics.jsonl"
    train: dict[int, dict[str, Any]] = {}
    evals: dict[int, dict[str, Any]] = {}
    final = None
    damaged: list[int] = []
    skipped_steps: set[int] = set()
    not_finite = 0
    # Bytes that are not UTF-8 (a disk's garbage after a crash), and lines that are JSON but not one of our records
    # (edited by hand, a damaged file), are skipped as a cut line is: the curves must never stop a run at its end.
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            line = line.strip()
            if not line:
                continue
            try:
                record = json_value(line)
            except ValueError:  # a line cut by a crash mid-write: skip it
                damaged.append(number)
                continue
            if _is_skipped_step(record):  # the trainer's own note of a step it did not apply
                skipped_steps.add(record["step"])
                continue
            if not _is_record(record):
                if _is_record(record, finite=False):
                    not_finite += 1
                else:
                    damaged.append(number)
                continue
            record = _tidy(record)
            kind = record.get("kind")
            if kind == "train":
                train[record["step"]] = record
            elif kind == "eval":
                evals[record["step"]] = record
            elif kind == "final":
                final = record
    return {
        "train": [train[s] for s in sorted(train)], "eval": [evals[s] for s in sorted(evals)], "final": final,
        "skipped_steps": sorted(skipped_steps), "not_finite": not_finite,
        "damaged_lines": len(damaged), "first_damaged_line": damaged[0] if damaged else None,
    }


def write_curves_png(run_dir: Path, curves: dict[str, Any] | None = None) -> Path | None:
    """Training loss and dev BLEU against step as RUN/curves.png, when matplotlib is installed (else None)."""
    # Where HOME is unset or read-only (CI containers), matplotlib's import said "mkdir -p failed for path ..." and
    # "Matplotlib created a temporary cache directory ..." on stderr at every drawing: its own set-up, not ours
    # to report (it uses a temporary folder and removes it), so its warnings are silenced while it is imported.
    quiet = logging.getLogger("matplotlib")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:  # a Figure of its own, not pyplot's: no display, no figure kept in a global registry
        from matplotlib.figure import Figure
    except ImportError:
        return None
    finally:
        quiet.setLevel(level)
    curves = curves if curves is not None else read_curves(run_dir)
    if not curves["train"]:
        return None
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    ax_loss, ax_bleu = fig.subplots(1, 2)
    ax_loss.plot([r["step"] for r in curves["train"]], [r["loss"] for r in curves["train"]], label="train")
    if curves["eval"]:
        ax_loss.plot([r["step"] for r in curves["eval"]], [r["loss"] for r in curves["eval"]], "o-", label="dev")
        n = curves["eval"][-1].get("sentences", "?")
        ax_bleu.plot(
            [r["step"] for r in curves["eval"]], [r["bleu"] for r in curves["eval"]], "o-", label=f"dev, first {n} sentences"
        )
    if curves["final"] is not None and "bleu" in curves["final"]:
        final = curves["final"]
        which = "last checkpoint" if (final.get("final_model") or {}).get("chosen") == "last" else "averaged model"
        label = f"final {which}, {final.get('sentences', '?')} sentences"
        ax_bleu.plot([final["step"]], [final["bleu"]], "*", markersize=12, label=label)
    ax_loss.set(title="label-smoothed loss per target token", xlabel="step")
    ax_bleu.set(title="dev BLEU", xlabel="step")
    for ax in (ax_loss, ax_bleu):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # a run without a dev set has nothing to label on the BLEU side
            ax.legend()
    path = Path(run_dir) / CURVES_PNG
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))  # no temporary file left on a failure
    return path
