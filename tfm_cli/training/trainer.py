"""The training loop: `train(recipe, run_dir, ...)` and the `Trainer` it runs (set up, step, evaluate, save).

It goes recipe -> tokenizer -> token-bucketed batches -> model -> checkpoints, and reports through a
`TrainEvents` object so that the CLI (rich progress) and tests (nothing) can both drive it. Resume is exact:
optimizer, step, RNG states and data position are saved beside each checkpoint (resume.py reads them back).

Under torchrun the same `train()` runs as one rank of a DDP job (see `tfm_cli.distributed`): every rank builds
the same global batches and trains on its share of each, the loss is normalised by the global batch's target
tokens, and rank 0 alone evaluates, writes and reports.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import random
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from tfm_cli import __version__
from tfm_cli.batches import PREFETCH_GROUPS, Prefetcher
from tfm_cli.checkpoint import (
    WEIGHTS_CRC,
    load_state,
    read_metadata,
    read_weights,
    save_weights,
    weights_crc32,
    weights_state,
)
from tfm_cli.corpus import corpus_parts
from tfm_cli.data import (
    BatchStream,
    CorpusStats,
    MixturePart,
    TokenizedCorpus,
    pad_multiple_for,
    pairs_an_epoch,
)
from tfm_cli.distributed import Distributed, RankError, lost_a_peer, resume_command
from tfm_cli.distributed import setup as setup_distributed
from tfm_cli.errors import CheckpointError, RecipeError, TfmError, shell_word
from tfm_cli.files import DirectoryLock, as_path, atomic_write, home_path, json_value
from tfm_cli.monitor import (
    TIME_BUDGET,
    EarlyStopping,
    RisingLoss,
    TensorBoardLog,
    append_metrics,
    perplexity,
    purge_metrics_after,
    write_curves_png,
)
from tfm_cli.recipe import (
    MIN_VOCAB_SIZE,
    Recipe,
    dump_recipe,
    load_recipe,
    model_config,
    parse_duration,
    reads_placeholders,
    recipe_as_written,
    recipe_to_dict,
    validate_recipe,
    with_numbers_of,
)
from tfm_cli.runs import (
    BEST,
    CHECKPOINTS,
    FINAL,
    checkpoint_path,
    checkpoint_steps,
    delete_checkpoint,
    evaluated_path,
    prune_checkpoints,
    run_dir_of,
    state_path,
    unfinished_first_checkpoint,
)
from tfm_cli.runtime import (
    autocast,
    release_cpu_memory,
    resolve_device,
    resolve_precision,
    tune_cpu_allocator,
)
from tfm_cli.scoring import DEFAULT_WHY
from tfm_cli.signals import held_stop_signals
from tfm_cli.tokenizer import Tokenizer, train_corpus_tokenizer
from tfm_cli.training.checks import (
    InitModel,
    check_beam,
    check_init,
    check_recipe_file,
    check_resumable,
    check_room,
    check_tokenizer_kept,
    damaged_recipe_path,
    dev_is_train,
    foreign_dev,
    foreign_tokenizer,
    preflight,
    restored_recipe_note,
    resume_recipe,
    run_numbers,
    schedule_warnings,
    swapped_dev,
    with_absolute_paths,
    with_init_tokenizer,
    with_tokenizer_size,
)
from tfm_cli.training.compiling import check_compile
from tfm_cli.training.corpora import in_tokens, mixture_said, reading_progress, usable_corpus
from tfm_cli.training.evaluation import evaluate, finish, load_dev
from tfm_cli.training.events import TrainEvents
from tfm_cli.training.failures import (
    diverged,
    in_training,
    not_saved,
    out_of_memory,
    ran_out_of_memory,
    unwritable,
)
from tfm_cli.training.optim import inverse_sqrt_lr, load_optimizer_state
from tfm_cli.training.resume import (
    check_state_fits,
    finished_summary,
    restore_stream,
    resume_point,
    seconds_evaluated,
)
from tfm_cli.training.step import setup_model, step_tokens, train_step
from tfm_cli.training.stopping import HeldStops

TRIM_EVERY = 50  # CPU: steps between returning the heap's free pages to the kernel (see runtime.py)
MAX_BAD_STEPS = 5  # this many NaN/infinite losses in a row stop the run (each one alone is skipped)


_EVENTS_CALLED = ("message", "start", "step", "evaluation")  # what the trainer calls on any events (the rest if there)


@dataclass
class TrainResult:
    run_dir: Path
    step: int
    interrupted: bool
    final: dict[str, Any] = field(default_factory=dict)  # dev metrics of the final model (the average, or the last checkpoint where it scored higher)
    seconds: float = 0.0
    stopped: str = ""  # why training ended before train.max_steps (early stopping, time budget); "" if it reached it


# --- The training loop ----------------------------------------------------------------------------------------


def _rng_state(device: torch.device) -> dict[str, Any]:
    """The random states a resume restores: torch's CPU generator, Python's, and the CUDA generator of the GPU this
    process trains on. Only that one: every visible GPU's states were saved, and a run resumed where fewer GPUs are
    visible (CUDA_VISIBLE_DEVICES, a smaller machine, a DDP run resumed as one process) failed setting theirs."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    cuda = state.get("cuda")
    if device.type != "cuda" or cuda is None:
        return
    if isinstance(cuda, (list, tuple)):  # a checkpoint of earlier code (to 2026-11): one state per visible GPU
        index = device.index if device.index is not None else torch.cuda.current_device()
        cuda = cuda[index] if index < len(cuda) else None  # (that GPU was not visible then: it starts as seeded)
    if cuda is not None:
        torch.cuda.set_rng_state(cuda, device)


def _load_scaler(scaler: torch.amp.GradScaler, saved: dict[str, Any]) -> None:
    """fp16's loss scale, as saved. A checkpoint trained in bf16 or fp32 saved none (a disabled scaler's state is
    {}), and an fp16 resume of it starts with a fresh scale (torch refused to load an empty state: a traceback on
    `--resume` with train.precision=fp16, or with `auto` moving a bf16 run of an H100 onto a V100 or T4)."""
    if saved:
        scaler.load_state_dict(saved)


def _seed_rank(seed: int, dist: Distributed) -> None:
    """Give each rank of a multi-process job its own dropout masks (rank 0 keeps a single process's stream)."""
    if dist.rank > 0:
        torch.manual_seed(seed + dist.rank)
        random.seed(seed + dist.rank)


def _restore_rng(state: dict[str, Any], dist: Distributed, seed: int) -> None:
    """Each rank's RNG states as saved (`rng_ranks`); a run resumed with another number of processes cannot be
    exact anyway: its ranks take rank 0's states and reseed as a fresh start would."""
    ranks = state.get("rng_ranks") or [state["rng"]]
    if len(ranks) == dist.world_size:
        _set_rng_state(ranks[dist.rank], dist.device)
    else:
        _set_rng_state(state["rng"], dist.device)
        _seed_rank(seed, dist)


def _share_tokenizer(tokenizer: Tokenizer | None, dist: Distributed) -> Tokenizer:
    """Rank 0's tokenizer on every rank, sent as its JSON text (other nodes need not see the run directory)."""
    if not dist.enabled:
        return tokenizer
    from tokenizers import Tokenizer as HFTokenizer

    text = dist.broadcast(tokenizer.backend.to_str() if tokenizer is not None else None)
    return tokenizer if tokenizer is not None else Tokenizer(HFTokenizer.from_str(text), source="rank 0's tokenizer")


def _prepare_tokenizer(recipe: Recipe, run_dir: Path, events: TrainEvents, resume: bool = False) -> Tokenizer:
    """The run's tokenizer: its own (a resume, or one that `tfm tokenize` or an earlier start left in the run
    directory; `preflight` refused one that is not tokenizer.path), copied from tokenizer.path, or trained on
    the corpus."""
    target = run_dir / "tokenizer.json"
    if target.is_file():
        tokenizer = Tokenizer.load(target)
        if not resume and recipe.tokenizer.path:  # the same tokenizer (preflight compared them)
            events.message(f"tokenizer: {recipe.tokenizer.path} ({tokenizer.vocab_size} tokens)")
        elif not resume:  # said, since the recipe's tokenizer settings go unused
            events.message(
                f"tokenizer: {target} ({tokenizer.vocab_size} tokens), already in the run directory (from `tfm "
                "tokenize` or an earlier start), not trained again: delete it to train one with tokenizer.vocab_size "
                f"{recipe.tokenizer.vocab_size} and tokenizer.min_frequency {recipe.tokenizer.min_frequency}"
            )
        return tokenizer
    if recipe.tokenizer.path:
        tokenizer = Tokenizer.load(home_path(recipe.tokenizer.path))
        tokenizer.save(target)
        events.message(f"tokenizer: {recipe.tokenizer.path} ({tokenizer.vocab_size} tokens)")
        return tokenizer
    started = time.perf_counter()
    numbers = reads_placeholders(recipe)
    tokenizer = train_corpus_tokenizer(
        recipe.data.train, recipe.tokenizer.vocab_size, recipe.tokenizer.min_frequency, numbers=numbers, say=events.message
    )
    tokenizer.save(target)
    events.message(
        f"tokenizer: trained {tokenizer.vocab_size} tokens in {time.perf_counter() - started:.1f}s -> {target}"
    )
    if tokenizer.vocab_size < recipe.tokenizer.vocab_size:  # said, as `tfm tokenize` says it (recipe.yaml was rewritten unsaid)
        recorded = "recipe.yaml records it" if tokenizer.vocab_size >= MIN_VOCAB_SIZE else (
            f"recipe.yaml keeps {recipe.tokenizer.vocab_size}, the least a recipe takes being {MIN_VOCAB_SIZE}; config.json has it")
        events.message(
            f"note: {tokenizer.vocab_size:,} tokens, fewer than the {recipe.tokenizer.vocab_size:,} asked: the corpus has no "
            f"more pairs of pieces seen at least {recipe.tokenizer.min_frequency} times ({recorded})"
        )
    return tokenizer


def _drop_stop_checkpoints(run_dir: Path, before: int) -> list[OSError]:
    """Delete the checkpoints (and trainer states) older than step `before` that are off the train.save_every
    schedule, saved only because the run was stopped there (`Trainer.save_checkpoint(on_stop=True)`) or ended
    there; one whose metadata cannot be read is kept. Returns the errors of files that may not be deleted."""
    failed: list[OSError] = []
    for step, path in checkpoint_steps(run_dir):
        if step >= before:
            continue
        try:
            saved_on = read_metadata(path).get("saved_on")
        except (TfmError, OSError, ValueError):
            continue
        if saved_on in (json.dumps("stop"), json.dumps("end")):
            delete_checkpoint(path, failed)
    return failed


def train(
    recipe: Recipe | str | os.PathLike[str] | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    device: str | torch.device = "auto",
    resume: bool = False,
    events: TrainEvents | None = None,
) -> TrainResult:
    """Train `recipe` into `run_dir`; with `resume`, continue from the newest checkpoint there.

    Ctrl-C (KeyboardInterrupt) saves a checkpoint at the last completed step and returns with interrupted=True.
    During a step it is held until the step ends (`HeldStops`); in a multi-process job a Ctrl-C or stop signal
    to any rank stops every rank after the same step.

    Started by torchrun (RANK, WORLD_SIZE and LOCAL_RANK set, more than one process), this process is one rank
    of a DDP job: `recipe.train.max_tokens` is then the budget of the global batch that all ranks share, so a
    recipe means the same on 1 or 8 GPUs; rank 0 alone writes the run and reports to `events`.

    Args:
        recipe: a `Recipe` (see `load_recipe`) or the path of a recipe YAML; with `resume` it may be None, and
            the run's own recipe.yaml is used.
        run_dir: where the run goes (default: runs/<recipe name>).
        device: "auto" (CUDA when available), "cpu", "cuda", "cuda:N", or a torch.device. Under torchrun,
            "cuda" means the GPU of this process's local rank.
        resume: continue the run in `run_dir` from its newest checkpoint, exactly.
        events: receives progress (messages, steps, evaluations); the default prints nothing.

    Returns:
        TrainResult: the run directory, the last step, whether it was interrupted, the final dev scores
            (those only on rank 0).

    Raises:
        TfmError: a bad recipe (a `Recipe` changed in code is checked as a file is), corpus or device, or a run
            directory that already holds a run (without resume).
        TypeError: `recipe` is neither a Recipe nor a path, `resume` is not a bool, or `events` not a TrainEvents.
    """
    if not isinstance(resume, bool):  # resume="no" would resume
        raise TypeError(f"train(resume=...) must be True or False, not {resume!r}")
    run_dir = as_path(run_dir, "train()", "run_dir as a path")  # "" trained into the current directory
    if not isinstance(device, (str, torch.device)):  # device=0 failed as "'int' object has no attribute 'startswith'"
        raise TypeError(f"train(device=...) takes a str (auto, cpu, cuda, cuda:N) or a torch.device, not {type(device).__name__}")
    missing = [] if events is None else [n for n in _EVENTS_CALLED if not callable(getattr(events, n, None))]
    if missing:  # events=3 failed as "'int' object has no attribute 'message'"
        raise TypeError(
            f"train(events=...) takes a TrainEvents (subclass it for the calls you want), not {type(events).__name__}: "
            f"it has no {', '.join(missing)}"
        )
    recipe_file = None
    if recipe is None:
        if not (resume and run_dir is not None):
            raise TfmError("train() needs a recipe, or resume=True with the run_dir to continue")
        recipe = resume_recipe(Path(run_dir), [])
    elif isinstance(recipe, Recipe):  # checked again: fields set in code after load_recipe were never checked
        problems = validate_recipe(recipe)  # (on the recipe given: a copy keeps no attribute that is no key)
        recipe = recipe_as_written(recipe)  # a Path as its text: recipe.yaml is written from it
        if problems:
            raise RecipeError(f"the recipe {recipe.name!r} given to train()", problems)
    elif isinstance(recipe, (str, os.PathLike)):
        recipe_file, recipe = recipe, load_recipe(recipe)
    else:
        raise TypeError(f"train(recipe=...) must be a Recipe (see load_recipe) or a recipe file's path, not {type(recipe).__name__}")
    run_dir = Path(run_dir) if run_dir is not None else Path("runs") / recipe.name
    if recipe_file is not None and not resume:
        check_recipe_file(recipe_file, recipe, run_dir)
    device = resolve_device(device)  # a torch.device too: torch.device("cuda") without a GPU failed deep in torch
    recipe = with_init_tokenizer(recipe, resume)  # fine-tuning (train.init_from): that model's tokenizer
    if resume and recipe.model.numbers is None:  # a recipe given to a resume: numbers read as the run's model reads them
        recipe = with_numbers_of(recipe, run_numbers(run_dir))
    preflight(recipe, run_dir, resume)
    dist = setup_distributed(device)  # one rank of a torchrun job, or a single process
    events = (events or TrainEvents()) if dist.is_main else TrainEvents()  # rank 0 alone reports
    failed = False
    try:
        return _train(recipe, run_dir, resume, events, dist)
    except BaseException as error:
        failed = True
        if isinstance(error, TfmError) and not isinstance(error, RankError):
            dist.say_stopping()  # rank 0's own line says it all (a full disk): rank 1 need not add "lost contact"
        if dist.owns_group:
            _let_go_of_frames(error)
        raise
    finally:
        # torchrun's SIGTERM to the ranks left after one died lands here: its KeyboardInterrupt replaced the "lost
        # contact" error on the way out, which was then said as a stop "outside a training step"
        with held_stop_signals(deliver=not failed):
            dist.cleanup()


def _let_go_of_frames(error: BaseException) -> None:
    """Clear the locals of the finished frames that `error` (and the errors it was raised from) carries, before
    `Distributed.cleanup` destroys the process group: a step's frame holds the DDP wrapper (`model`), which then
    outlived the group with its gradient reducer, to be freed at some later moment or in the interpreter's exit
    (see `Trainer.release`). The traceback's lines stay as they were."""
    import traceback

    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)  # a frame still running (this one, its callers) is skipped
        error = error.__cause__ or error.__context__


def _train(recipe: Recipe, run_dir: Path, resume: bool, events: TrainEvents, dist: Distributed) -> TrainResult:
    """`train()` after the checks (on every rank; rank 0 writes)."""
    trainer = Trainer(recipe, run_dir, resume, events, dist)
    try:
        trainer.setup()
        return trainer.fit()
    finally:
        board = getattr(trainer, "board", None)
        if board is not None:  # an exception (a caller's events raising, a crash) left its writer thread running
            board.close()
        trainer.lock.release()
        trainer.release()


class Trainer:
    """One run, in the order of the paper's section 5: `setup()` reads the data and builds the model and its
    optimizer (or restores them from the newest checkpoint), `fit()` steps, logs, saves and evaluates until
    train.max_steps, a stop (early stopping, the time budget, divergence) or Ctrl-C, then writes the final model.

    The step itself is `train_step` (step.py), the batches come from `Prefetcher` (batches.py), the checks that
    precede any write from checks.py; this class holds the run's state between them.
    """

    def __init__(self, recipe: Recipe, run_dir: Path, resume: bool, events: TrainEvents, dist: Distributed) -> None:
        self.recipe, self.t, self.run_dir, self.resume = recipe, recipe.train, run_dir, resume
        self.events, self.dist = events, dist
        self.device, self.main = dist.device, dist.is_main
        self.step = self.last_saved = 0
        self.best_bleu = -1.0
        self.evaluated_step = -1  # the step of the last dev evaluation done
        self.eval_owed = False  # resumed from a checkpoint whose step's dev evaluation was never completed
        self.window = _Window()  # the sums of the steps since the last train record (`fit`)
        self.resumed_window: dict[str, Any] | None = None  # those a checkpoint saved, for the resume's first record
        # the sums of a train record logged off the train.log_every schedule, at an end (train.max_steps, the time
        # budget, early stopping): a run extended past it logs them again in its next record, as the longer run would
        self.ended_window: dict[str, Any] | None = None
        self.window_logged = False  # the window a resume carries in was logged already (at the checkpoint's end)
        self.last_train_loss: float | None = None  # of this session's last train record
        self.undeletable: set[str | None] = set()  # files of old checkpoints that could not be pruned (said once each)
        self.early = EarlyStopping(self.t.patience, self.t.patience_metric)
        self.started = time.perf_counter()
        self.earlier_seconds = 0.0  # training time of the sessions before a resume, up to its checkpoint
        # this session's training loop (its first step to its last; set-up and the final model excluded): with
        # earlier_seconds, the training time that train.max_time counts and checkpoints save (`train_seconds`)
        self.loop_started: float | None = None
        self.loop_ended: float | None = None
        self.lock = DirectoryLock(run_dir)  # rank 0 holds it while it trains the run
        self.finished: dict[str, Any] | None = None  # a resumed run that was already finished: its summary.json
        self.corpus_stats: CorpusStats | None = None  # what reading data.train kept and skipped (summary.json)
        self.corpus_mixture: list[MixturePart] | None = None
        self.init_model: InitModel | None = None  # the model a fine-tuning starts from (train.init_from), checked
        # the weights it started from, as summary.json records them (kept in every checkpoint's state for resumes):
        # the run named by train.init_from may train on and write another model.safetensors
        self.init_weights: dict[str, Any] | None = None

    def _lock(self) -> None:
        """One process at a time trains a run: a second one (a --resume of a run still training, or a start into
        its directory) would rewrite its checkpoints under it, or resume from one that is about to be pruned."""
        if self.main and not self.lock.acquire():
            raise in_training(self.run_dir)
        if self.main:
            _sweep_temporary_files(self.run_dir)

    def _check_place(self) -> None:
        """Rank 0 writes into its run directory by name: if that name is no longer the folder it locked (moved
        while it trains, and maybe another run started there), stop before writing into what is not its own."""
        if not self.main or (where := self.lock.moved()) is None:
            return
        if (board := getattr(self, "board", None)) is not None:
            board.close()
        gone = " (deleted)" in str(where) or str(where) == "?"
        now = "deleted" if gone else f"now {where}"
        raise TfmError(
            f"{self.run_dir} was moved or deleted while this run trained (its folder is {now}): stopped at step "
            f"{self.step} before writing into {self.run_dir}, which is no longer its folder",
            hint="start again with another --out" if gone else f"continue it where it is: {resume_command(where, device=self.device)}",
        )

    def log(self, record: dict[str, Any]) -> None:
        """A record for metrics.jsonl (rank 0 writes it)."""
        if not self.main:
            return
        self._check_place()
        try:
            append_metrics(self.run_dir, record)
        except OSError as error:  # a disk that filled up: said as for a checkpoint, with the way on
            if not unwritable(error):
                raise
            raise not_saved(self.run_dir, self.step, error, what="its log line", device=self.device) from error

    # --- set up -----------------------------------------------------------------------------------------------

    def setup(self) -> None:
        """Tokenizer, corpus, dev set, model, optimizer, batch stream; a resume restores them all exactly."""
        t, run_dir, dist = self.t, self.run_dir, self.dist
        weights, state = None, {}
        if t.compile:  # no C++ compiler or Triton: said before the run's folder or tokenizer is made
            check_compile(self.device)
        if self.resume:  # read (and refuse) the trainer state before anything in the run is rewritten
            self._lock()
            self.step, weights, state = resume_point(run_dir, self.events)
            size = Tokenizer.load(run_dir / "tokenizer.json").vocab_size
            check_tokenizer_kept(self.recipe, run_dir, size, state.get("recipe"))  # before a finished run returns: an override is not ignored
            self.recipe = with_tokenizer_size(self.recipe, size)
            trained = seconds_evaluated(weights, float(state.get("train_seconds", 0.0)), self.step)
            self.finished = finished_summary(run_dir, self.step, self.recipe, trained)
            if self.finished is not None:  # nothing to train, average or evaluate: `fit` says so
                return
        created = _make_run_dir(run_dir) if self.main else False
        if not self.resume:
            try:
                self._lock()
            except TfmError:
                if created:
                    run_dir.rmdir()
                raise
            if self.main and (unfinished := unfinished_first_checkpoint(run_dir)) is not None:  # (`preflight` let it be)
                failed: list[OSError] = []
                delete_checkpoint(unfinished, failed)
                if failed:
                    raise CheckpointError(f"{failed[0].filename} cannot be removed: {failed[0].strerror}", hint="check its permissions")
                self.events.message(f"removed {unfinished}: the run stopped while it saved it, before its trainer state")
        self.started = time.perf_counter()
        if self.device.type == "cpu":
            tune_cpu_allocator()
        self.precision = resolve_precision(t.precision, self.device, "train.precision")
        # (a partial, not a lambda over self: that made the trainer a reference cycle, which outlived train() and
        # held the DDP wrapper, and the process group with it, past Distributed.cleanup; see `release`)
        self.amp = functools.partial(autocast, self.device, self.precision)
        torch.manual_seed(t.seed)
        random.seed(t.seed)
        had_tokenizer = (run_dir / "tokenizer.json").exists()
        corpus = self._read_inputs(created, weights)
        self.corpus_digest = corpus.digest()  # saved with each checkpoint: a resume tells a corpus changed in place
        self.corpus_stats = corpus.stats
        self.corpus_mixture = corpus.mixture  # a mixture's corpora, each with its counts and weight (summary.json)
        had_checkpoints = (run_dir / CHECKPOINTS).exists()
        try:
            if dist.enabled:
                self._check_same_job()
            if self.main:  # an unwritable or full run directory is said now, not after an hour
                check_room(run_dir, self.config, t, self.resume)
            # a model too large for the memory is said before the run's files are written
            self.model, self.optimizer, self.scaler = setup_model(self.config, t, self.device, self.precision)
            if self.init_model is not None:
                self._start_from(self.init_model)
        except BaseException:
            if self.main and not self.resume:  # take back what this start wrote: its tokenizer, checkpoints/
                if not had_tokenizer:
                    (run_dir / "tokenizer.json").unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    if not had_checkpoints:
                        (run_dir / CHECKPOINTS).rmdir()  # only when empty
                    if created:
                        run_dir.rmdir()
            raise
        _seed_rank(t.seed, dist)
        tok = self.tokenizer
        self.stream = BatchStream(
            corpus, t.max_tokens, t.seed, tok.pad_id, tok.bos_id, tok.eos_id, dist.rank, dist.world_size,
            pad_multiple=pad_multiple_for(self.device),
        )
        if self.resume:
            self._restore(weights, state)
        if self.main:  # only now: a resume that cannot continue (above) leaves the run's recipe.yaml as it was
            self._write_run_files()
        if self.main and self.resume and (dropped := purge_metrics_after(run_dir, self.step)):
            # a session that died past its last checkpoint (kill -9) logged a future this resume throws away
            self.events.message(
                f"dropped {dropped} record(s) of metrics.jsonl logged after step {self.step} by a session that stopped "
                "without saving them in a checkpoint (this resume trains those steps again)"
            )
        if self.main and self.resume:
            self._discard_future()
        if dist.enabled:
            self.events.message(f"{dist.world_size} processes (DDP over {dist.device.type}): each trains on its share of every batch")
        self.step_model = dist.wrap(self.model)  # DDP in a multi-process job; `model` stays what is saved and evaluated
        # purges what a dead attempt logged past `step`
        self.board = TensorBoardLog.open(run_dir, self.step, self.events.message) if self.main else TensorBoardLog(None)
        if self.board.enabled and not self.resume:
            self.board.recipe(yaml.safe_dump(recipe_to_dict(self.recipe), sort_keys=False, allow_unicode=True), self.step)

    def _check_same_job(self) -> None:
        """Every process of a multi-process job trains with the same settings on the same pairs: a node started
        with another override (`train.lr_factor=2.0` on node 1 alone) trained a model neither recipe describes,
        without a word, and recipe.yaml said node 0's. Compared here: every setting of the recipe but the names of
        its files (nodes may keep their copies at other paths; their pairs are compared by hash instead)."""
        signature = {f"{section}.{key}": value for section, values in recipe_to_dict(self.recipe).items()
                     if isinstance(values, dict) for key, value in values.items()}
        for own_file in ("data.train", "data.dev", "tokenizer.path", "train.init_from"):
            signature.pop(own_file, None)
        signature["data.train's pairs"] = self.corpus_digest
        signature["data.train's weights"] = [part.weight for part in corpus_parts(self.recipe.data.train)]
        every = self.dist.gather(signature)
        for rank, other in enumerate(every[1:], start=1):
            differ = [key for key in signature if other.get(key) != every[0].get(key)]
            if differ:
                key = differ[0]
                what = (f"process {rank} read other pairs from data.train than process 0 (another file, or another copy)"
                        if key == "data.train's pairs" else f"{key} is {every[0][key]!r} in process 0 but {other[key]!r} in process {rank}")
                more = f" ({len(differ) - 1} more setting(s) differ)" if len(differ) > 1 else ""
                raise TfmError(
                    f"the processes of this job were started with different settings: {what}{more}",
                    hint="start every node with the same recipe, overrides and corpus",
                )

    def _discard_future(self) -> None:
        """Remove what a session that stopped while saving left past the step this resume starts from: weights
        without their trainer state, or the reverse. A run that ended before that step (a lower train.max_steps,
        train.max_time) averaged such weights into its final model and counted them against keep_last.

        A best.safetensors written past it (an evaluation between two checkpoints, then a kill) is a model this run
        trained and scored: kept, and its BLEU is the one a later evaluation must beat (the checkpoint's own best
        was older, and a resumed evaluation scoring between the two replaced the best model by a worse one)."""
        failed: list[OSError] = []
        paths = sorted((self.run_dir / CHECKPOINTS).glob("step-*"))
        steps = {int(m.group(1)) for p in paths if (m := re.fullmatch(r"step-(\d+)\.(safetensors|state\.pt|evaluated\.json)", p.name))}
        removed = [p.name for p in paths for step in steps if step > self.step and p.name.startswith(f"step-{step:08d}.")]
        for step in sorted(s for s in steps if s > self.step):
            delete_checkpoint(checkpoint_path(self.run_dir, step), failed)  # its weights, state and evaluation
        best = self.run_dir / BEST
        try:
            metadata = read_metadata(best) if best.is_file() else {}
            best_step, best_bleu = int(metadata.get("step", -1)), float(metadata.get("bleu", "nan"))
            scored_alike = json.loads(metadata.get("scoring", "null")) == json.loads(json.dumps(self._scoring()))
        except (CheckpointError, ValueError):
            best_step, best_bleu, scored_alike = -1, math.nan, False  # not tfm's, or no step: left as it is
        # (a best of another dev set or scoring, as a session between may have had, is no BLEU to beat)
        if best_step > self.step and scored_alike and best_bleu > self.best_bleu:
            self.best_bleu = best_bleu
        if failed:  # (an immutable file, another user's): the final model would average it
            error = failed[0]
            raise TfmError(
                f"{error.filename} could not be removed ({error.strerror or error}): it was left past step {self.step}, "
                "which this resume starts from, by a session that stopped before it saved that step whole",
                hint=f"remove it yourself, then `{resume_command(self.run_dir, device=self.device)}` again",
            )
        if removed:
            self.events.message(
                f"removed {', '.join(removed)}: left past step {self.step} by a session that stopped before it saved "
                "that step whole (this resume trains those steps again)"
            )

    def _start_from(self, init: InitModel) -> None:
        """Fine-tuning: the trained weights of train.init_from in place of the random ones (every rank reads the
        same file); the optimizer and the learning-rate schedule start afresh, at step 0. A run that is training
        may have pruned the checkpoint chosen before the corpus was read: chosen again, as `load_model` does."""
        for _ in range(4):
            try:
                state = read_weights(init.path)
                break
            except (OSError, RuntimeError):  # (safetensors says a missing file in either)
                if init.path.exists():
                    raise
                init = self.init_model = check_init(self.recipe, self.config)
        else:
            raise CheckpointError(
                f"train.init_from: the checkpoints of {run_dir_of(init.path)} were deleted as fast as they were read "
                "(a run training with a small train.keep_last?)",
                hint="fine-tune from a copy of one of its checkpoints, or once that run has written its final model",
            )
        load_state(self.model, state, init.path)
        # what was read, not what was checked minutes before (while the corpus was read): a run that trains on may
        # have written that file again since (its best or final model)
        crc, step = weights_crc32(state), init.step
        if init.crc is not None and crc != init.crc:  # (a file of older tfm has no CRC to compare)
            step = None
            with contextlib.suppress(OSError, ValueError, KeyError, CheckpointError):
                metadata = read_metadata(init.path)
                if metadata.get(WEIGHTS_CRC) == crc:
                    step = int(metadata["step"])
        self.init_weights = {"path": str(init.path.resolve()), "step": step, "weights_crc32": crc}
        self.events.message(
            f"fine-tuning {init.path} ({f'its step {step:,}' if step is not None else 'written again since it was checked'}): "
            "its weights and tokenizer, a fresh optimizer and learning-rate schedule from step 0"
        )

    def _read_inputs(self, created: bool, weights: Path | None) -> TokenizedCorpus:
        """The tokenizer, model config and dev set (kept on self) and the encoded training corpus (returned), all
        read before the run's files are written: a bad corpus leaves the run as it was."""
        recipe, run_dir, main = self.recipe, self.run_dir, self.main
        had_tokenizer = (run_dir / "tokenizer.json").exists()
        try:
            prepared = _prepare_tokenizer(recipe, run_dir, self.events, self.resume) if main else None
            self.tokenizer = tok = _share_tokenizer(prepared, self.dist)
            self.recipe = recipe = with_tokenizer_size(recipe, tok.vocab_size)  # recipe.yaml records the run's size
            self.config = model_config(recipe, tok.vocab_size, tok.pad_id, tok.bos_id, tok.eos_id)
            self.recipe = recipe = with_numbers_of(recipe, self.config.numbers)  # recipe.yaml says how it reads numbers
            if recipe.train.init_from and not self.resume:  # its shapes against this config, before any corpus is read
                self.init_model = check_init(recipe, self.config)
            check_beam(recipe, tok.vocab_size)  # a tokenizer trained here may hold fewer tokens than asked for
            read_start = time.perf_counter()
            corpus = usable_corpus(recipe, tok, reading_progress(self.events) if main else None)  # every rank encodes it all
            s = corpus.stats
            self.events.message(
                f"train corpus: {s.kept:,} pairs kept of {s.read:,} read "
                f"({s.skipped_empty:,} with an empty side and {s.skipped_long:,} with a side over {in_tokens(recipe.data.max_len - 1)} skipped: "
                f"data.max_len={recipe.data.max_len} counts the </s>) "
                f"in {time.perf_counter() - read_start:.1f}s"
            )
            for line in mixture_said(corpus):  # (raises where the weights take no pair, or too many)
                self.events.message(line)
            if main and s.columns_warning:
                self.events.message(f"warning: data.train {s.columns_warning}")
            for part in (corpus.mixture or ()) if main else ():  # each corpus of a list, by its place
                if part.stats.columns_warning:
                    self.events.message(f"warning: data.train[{part.number}] {part.stats.columns_warning}")
            self.dev = (load_dev(recipe.data.dev, tok, recipe.model.max_positions, self.t.bleu_tokenize, reads_placeholders(recipe))
                        if recipe.data.dev and main else None)
            if self.dev is not None and self.dev.columns_warning:
                self.events.message(f"warning: data.dev {self.dev.columns_warning}")
            if main and self.dev is not None and self.dev.cut_warning:
                self.events.message(f"warning: data.dev {self.dev.cut_warning}")
            if self.dev is not None and self.dev.skipped_empty:  # said: sacrebleu on the whole file scores them too
                n, skipped = len(self.dev.sources), self.dev.skipped_empty
                self.events.message(
                    f"dev corpus: {n:,} pairs scored of {n + skipped:,} read ({skipped:,} with an empty side left out: "
                    "BLEU and chrF of the whole file, as `tfm translate --score` gives them, count these too)"
                )
            if main and self.dev is not None and (changed := self.dev.references_changed()):
                n = len(self.dev.references)
                self.events.message(
                    f"dev corpus: {changed:,} of {n:,} references change when normalised as the translations are (NFC, "
                    "spacing, ’ as '): dev BLEU and chrF are of the normalised references, and also given as written "
                    "(\"as written\", as sacrebleu scores the file: the figure to publish)"
                )
            if main and not self.resume:  # one this start did not train, or its own (too small a vocabulary)
                where = (f"{run_dir / 'tokenizer.json'}" if had_tokenizer else f"tokenizer.path {recipe.tokenizer.path}"
                         if recipe.tokenizer.path else None)
                if warning := foreign_tokenizer(recipe, corpus, tok, where):
                    self.events.message(f"warning: {warning}")
            for warning in (foreign_dev, swapped_dev) if self.dev is not None else ():
                if said := warning(recipe.data.dev, self.dev, corpus):
                    self.events.message(f"warning: {said}")
            for warning in schedule_warnings(recipe) if main else ():
                self.events.message(f"warning: {warning}")
            if main and (warning := dev_is_train(recipe)):
                self.events.message(f"warning: {warning}")
            if self.dev is not None and (self.dev.bleu_tokenize != "13a" or self.dev.bleu_why not in ("", DEFAULT_WHY)):
                why = f" ({self.dev.bleu_why})" if self.dev.bleu_why else ""
                self.events.message(f"dev BLEU: sacrebleu tokenize={self.dev.bleu_tokenize}{why}")
            if self.resume:
                check_resumable(run_dir, weights, self.config, self.step, self.t.max_steps)  # (the tokenizer kept: above)
        except BaseException:
            if main and not had_tokenizer and not self.resume:  # take back what this start wrote (a tokenizer it trained)
                (run_dir / "tokenizer.json").unlink(missing_ok=True)
            if main and created:
                with contextlib.suppress(OSError):
                    run_dir.rmdir()  # only when empty
            raise
        return corpus

    def _write_run_files(self) -> None:
        """recipe.yaml and config.json of the run (rank 0), once its checkpoints and model are known to fit."""
        run_dir, config = self.run_dir, self.config
        if self.resume and (note := restored_recipe_note(run_dir)):  # damaged or lost: written again from the state
            self.events.message(note)
            if (run_dir / "recipe.yaml").is_file():
                (run_dir / "recipe.yaml").replace(damaged_recipe_path(run_dir))  # kept as it was
        dump_recipe(with_absolute_paths(self.recipe), run_dir / "recipe.yaml")  # --resume works from any directory
        atomic_write(run_dir / "config.json", lambda tmp: Path(tmp).write_text(json.dumps(config.to_dict(), indent=2)))
        if not self.resume:  # a fresh start (preflight let it in: nothing of another run is here) logs afresh
            (run_dir / "metrics.jsonl").unlink(missing_ok=True)

    def _restore(self, weights: Path, state: dict[str, Any]) -> None:
        """Weights, Adam's moments, loss scale, data position, RNG states and the evaluation history, as saved
        (every rank loads the same checkpoint)."""
        load_state(self.model, read_weights(weights), weights)  # load_state_dict copies onto the model's device
        check_state_fits(weights, state["optimizer"], list(self.model.parameters()))
        load_optimizer_state(self.optimizer, state["optimizer"])
        _load_scaler(self.scaler, state["scaler"])
        note = restore_stream(
            self.stream, state["stream"], self.recipe, self.run_dir, state.get("recipe"),
            corpus_changed=None if "corpus_digest" not in state else state["corpus_digest"] != self.corpus_digest,
        )
        if note and self.main:
            self.events.message(note)
        _restore_rng(state, self.dist, self.t.seed)
        self.earlier_seconds = float(state.get("train_seconds", 0.0))
        self.resumed_window = state.get("log_window")
        self.window_logged = bool(state.get("log_window_logged", False))
        self.evaluated_step = int(state.get("evaluated_step", -1))
        self.init_weights = state.get("init_weights")
        # owed too where this resume's recipe evaluates at the checkpoint's step and the run did not (the old last
        # step of a run extended with a higher train.max_steps, evaluated there as the final model only)
        self.eval_owed = bool(state.get("eval_owed", False)) or (
            "evaluated_step" in state and self._evaluates_at(self.step) and self.evaluated_step != self.step
        )
        # rank 0's: only it reads the dev set, whose `auto` BLEU tokenizer is part of it (another rank, taking its
        # own None for a change, skipped the evaluation's outcome, redid an evaluation owed nowhere else, and waited
        # in a collective the others never joined: a 2-process resume hung for good)
        scoring, now = state.get("scoring"), self.dist.broadcast(self._scoring())
        had_best = state.get("best_bleu", -1.0) >= 0 or state.get("early_stopping", {}).get("best") is not None
        if scoring is not None and scoring != now:  # a BLEU of another dev set or tokenization is not comparable
            changed = "; ".join(f"{k} {scoring.get(k)!r} -> {v!r}" for k, v in now.items() if scoring.get(k) != v)
            if had_best:
                self.events.message(
                    f"this resume changes how the dev set is scored ({changed}): the best checkpoint and early "
                    "stopping start afresh from here"
                )
        else:
            self.best_bleu = state.get("best_bleu", -1.0)
            if "early_stopping" in state:
                self.early.load_state_dict(state["early_stopping"])
            self._restore_evaluation(weights)
        self.events.message(f"resumed from {weights} at step {self.step}, epoch {self.stream.epoch}")
        saved_by = state.get("processes", len(state.get("rng_ranks") or [None]))  # (older states: the ranks' RNGs)
        if saved_by != self.dist.world_size:  # allowed, but not the exact resume the README promises: said
            self.events.message(
                f"this checkpoint was saved by a run of {saved_by} process(es), resumed with {self.dist.world_size}: it "
                "continues from the same weights and data position, but not bit for bit as the run would have gone on "
                "(the gradients are summed in another order, and each process draws its own dropout masks)"
            )
        saved_threads, threads = state.get("threads"), torch.get_num_threads()  # (older states: not saved)
        if saved_threads is not None and saved_threads != threads and self.device.type == "cpu" and self.main:
            self.events.message(
                f"this checkpoint was saved by a run of {saved_threads} torch thread(s) a process, resumed with "
                f"{threads}: it continues from the same weights and data position, but not bit for bit as the run "
                f"would have gone on (float sums depend on the threads; OMP_NUM_THREADS={saved_threads} resumes exactly)"
            )

    def _restore_evaluation(self, weights: Path) -> None:
        """The outcome of the dev evaluation that followed this checkpoint, if it was completed (its state was
        saved before it): the best BLEU, early stopping and the step evaluated as they were after it."""
        if not self.eval_owed:
            return
        try:
            done = json_value(evaluated_path(weights).read_text(encoding="utf-8"))
            best_bleu, early, step = float(done["best_bleu"]), done["early_stopping"], int(done["evaluated_step"])
        except (OSError, ValueError, KeyError, TypeError):  # not written (stopped in the evaluation) or damaged
            return
        if step == self.step:
            self.best_bleu, self.evaluated_step, self.eval_owed = best_bleu, step, False
            self.early.load_state_dict(early)
            self.earlier_seconds = seconds_evaluated(weights, self.earlier_seconds, step)

    def _scoring(self) -> dict[str, Any]:
        """What makes two dev evaluations comparable (the best BLEU, early stopping's best): saved with each
        checkpoint, so a resume that changes one of them starts those afresh instead of mixing scales."""
        return {
            "data.dev": with_absolute_paths(self.recipe).data.dev,
            "train.eval_sentences": self.t.eval_sentences,
            "train.bleu_tokenize": self.dev.bleu_tokenize if self.dev is not None else None,  # as `auto` chose it
            "train.patience_metric": self.t.patience_metric,
        }

    # --- train ------------------------------------------------------------------------------------------------

    def fit(self) -> TrainResult:
        """Train to train.max_steps or a stop; then average, evaluate and write the final model (rank 0).

        Each step: train it (`_train_step`: the batches, the update, the train record, the checkpoint), then
        evaluate and decide whether to stop (`_after_step`: dev scores, early stopping, the time budget, a stop
        signal). A stop ends as a finished run does, with a checkpoint and the final model (`_finish`); Ctrl-C
        saves a checkpoint and returns an interrupted run (`_interrupted`)."""
        t, dist = self.t, self.dist
        if self.finished is not None:
            return self._nothing_to_do()
        self.model.train()
        # The data path: each step's batches built ahead on a thread (pinned for asynchronous copies on CUDA). From
        # here on the stream runs ahead of training: positions come from `batches.state_dict()`, the consumed ones.
        # On CUDA the next groups are built on a thread while the GPU computes; on CPU the step already uses every
        # core and building a batch costs under 1% of it, so a second thread only competes (measured: trainer /
        # model step 0.90x with it, quickstart recipe, 2-core CPU): there each group is built when it is needed.
        cuda = self.device.type == "cuda"
        batches = Prefetcher(
            self.stream, t.accum_steps, depth=PREFETCH_GROUPS if cuda else 0, pin_memory=cuda, device=self.device
        )
        if t.compile and self.main:  # a log that says nothing for a minute looks hung
            self.events.message(
                "train.compile: the model compiles during its first steps (TorchInductor: about a minute before the "
                "first log line)" + (", and again for eval mode at the first dev evaluation" if self.dev is not None else "")
            )
        self.events.start(self.step, t.max_steps)
        self.last_saved = self.step
        # seconds of training, all sessions together (as fairseq's --stop-time-hours): a resume continues the count
        budget = parse_duration(t.max_time) if t.max_time else None
        self.window = _Window.resumed(self.resumed_window)
        self.loop_started = time.perf_counter()
        stopped = self._stopped_before_training(budget)
        loop = _Loop(batches, batches.state_dict(), budget)
        # A checkpoint at an evaluation step is saved before that step's evaluation (its state: the best BLEU and
        # early stopping before it). A run stopped after the save (Ctrl-C in the evaluation, a kill while best was
        # written, or during the final phase after an early stop) lost that evaluation for good: its resume went on
        # to the next step without it (no best.safetensors, another early-stopping step). It is done again first.
        # (A checkpoint saved after its step's evaluation, where early stopping or the time budget ended the run,
        # says so: that evaluation is not done twice.)
        owed_eval = self.resume and self.eval_owed and self._evaluates_at(self.step)
        # the prefetching thread stopped at the end of training, an error or Ctrl-C; with several processes a stop
        # signal stops every rank after the same step
        said = getattr(self.events, "stopping", None) if not dist.enabled else None  # (DDP: torchrun passes Ctrl-C twice)
        with batches, HeldStops(dist, said) as stops:
            try:
                if owed_eval and stopped:  # the time budget was spent in the sessions before: the evaluation owed
                    if self.main and not stops.received:  # still comes before the final model (best.safetensors)
                        self.evaluate_dev(stops.interruptible)
                    stops.check()  # (every rank, as after a step: a stop signal during it stops them all)
                    owed_eval = False
                # (an owed evaluation at train.max_steps too: the loop did not run, and the resume went on to the
                # final model without it, leaving an older best.safetensors and a hole in the curves)
                while (self.step < t.max_steps or owed_eval) and not stopped:
                    if not owed_eval:  # (a resume whose step's evaluation is owed evaluates first, trains no step)
                        self._train_step(loop)
                    owed_eval = False
                    stopped = self._after_step(loop, stops)
            except KeyboardInterrupt:
                return self._interrupted(loop.stream_state, together=stops.agreed)
            except (RuntimeError, MemoryError) as error:  # torch.OutOfMemoryError is a RuntimeError
                if dist.enabled and isinstance(error, RuntimeError) and lost_a_peer(error):
                    raise self._lost_a_peer() from error
                if out_of_memory(error):  # was a 40-line traceback from inside backward()
                    self.board.close()
                    raise ran_out_of_memory(self.run_dir, self.step, self.device, error) from None
                raise
        self.loop_ended = time.perf_counter()
        return self._finish(stopped)

    def _nothing_to_do(self) -> TrainResult:
        """A resume of a run whose final model is written: said, with the setting that would train it on."""
        t, resume = self.t, resume_command(self.run_dir, device=self.device)
        if str(self.finished.get("stopped", "")).startswith(TIME_BUDGET):
            self.events.message(
                f"{self.run_dir} stopped at step {self.step} when its time budget ran out (train.max_time={t.max_time}; "
                f"{self.finished.get('train_seconds', 0):,.0f}s of training in all its sessions) and its final model is written: "
                f"nothing to do; to train on: {resume} train.max_time=LONGER "
                "(it counts the training time of all sessions) or train.max_time=null"
            )
        elif self.step < t.max_steps:  # early stopping ended it
            self.events.message(
                f"{self.run_dir} stopped early at step {self.step} ({self.finished['stopped']}) and its final model "
                f"is written: nothing to do; to train on: {resume} train.patience=N (more than {t.patience}, or 0 for none)"
            )
        else:
            self.events.message(
                f"{self.run_dir} finished at step {self.step} (train.max_steps={t.max_steps}) and its final model is "
                f"written: nothing to do; to train on: {resume} train.max_steps=N"
            )
        final = self.finished.get("dev") or {"final_model": self.finished.get("final_model")}
        return TrainResult(self.run_dir, self.step, False, final if self.main else {}, 0.0, "")

    def _stopped_before_training(self, budget: float | None) -> str:
        """Why a resume trains no step ("" if it trains): its time budget was spent, or early stopping decided, in
        the sessions before. Otherwise the time budget left is said."""
        t = self.t
        if budget is not None and self.earlier_seconds >= budget and self.step < t.max_steps:
            stopped = (
                f"{TIME_BUDGET} train.max_time={t.max_time} used up at step {self.step} of {t.max_steps} "
                f"({self.earlier_seconds:,.0f}s of training in the sessions before this resume)"
            )
            self.events.message(f"{stopped}: no step to train; writing the final model")
            self._said_after_budget()
            return stopped
        if self.resume and self.early.done and self.evaluated_step == self.step:
            stopped = self.early.reason()
            self.events.message(f"{stopped}, at step {self.step} before this resume: no step to train; writing the final model")
            return stopped
        said = getattr(self.events, "time_budget", None)  # (the CLI's events are duck-typed)
        if budget is not None and said is not None:
            said(budget - self.earlier_seconds)
        return ""

    def _train_step(self, loop: _Loop) -> None:
        """One optimizer step on the next group of batches, then its train record and checkpoint when due. A
        NaN or infinite loss skips the update; MAX_BAD_STEPS of them in a row stop the run (TfmError)."""
        t = self.t
        loop.stream_state = loop.batches.state_dict()  # where this step's data starts: saved on Ctrl-C mid-step
        waited = time.perf_counter()
        group = next(loop.batches)  # t.accum_steps batches
        self.window.waiting += time.perf_counter() - waited  # the data path's cost to this thread
        lr = inverse_sqrt_lr(self.step + 1, self.config.d_model, t.warmup_steps, t.lr_factor)
        stepping = time.perf_counter()
        loss, nll = train_step(self.step_model, self.optimizer, self.scaler, group, lr, t, self.amp, self.device, self.dist)
        self.window.stepping += time.perf_counter() - stepping  # the model step itself (it ends synchronised)
        self.step += 1
        loop.stream_state = loop.batches.state_dict()
        self.ended_window = None
        self.window_logged = False
        if math.isfinite(loss):
            loop.bad_in_a_row = 0
            self.window.add(step_tokens(group), loss, nll)
        else:  # the update was skipped; a few in a row mean the run has diverged
            loop.skipped += 1
            loop.bad_in_a_row += 1
            self.log({"kind": "skipped", "step": self.step, "loss": str(loss), "lr": lr})
            self.events.message(f"step {self.step}: the loss is {loss} at lr {lr:.3g}: update skipped ({loop.skipped} so far)")
            if loop.bad_in_a_row >= MAX_BAD_STEPS:
                self.board.close()
                raise diverged(self.run_dir, self.step, lr, loop.bad_in_a_row, device=self.device)

        metrics: dict[str, Any] = {}
        if self.step % t.log_every == 0 or self.step == t.max_steps:
            metrics = self._log_window(loop, lr)
        self.events.step(self.step, metrics)
        if self.device.type == "cpu" and self.step % TRIM_EVERY == 0:
            release_cpu_memory()

        if self.step % t.save_every == 0 or self.step == t.max_steps or loop.save_owed:
            # weights whose loss was just NaN are not checkpointed (and prune no good checkpoint): the save waits
            # for a finite loss, or for the run to stop on the checkpoints before
            loop.save_owed = bool(loop.bad_in_a_row) and self.step < t.max_steps
            if not loop.save_owed:
                self.save_checkpoint(loop.stream_state, at_end=self.step == t.max_steps)

    def _after_step(self, loop: _Loop, stops: HeldStops) -> str:
        """The dev evaluation when due, then whether to stop ("" to go on): early stopping, the time budget, a
        stop signal (KeyboardInterrupt, on every rank). A stop is ended here as a finished run would end its last
        step: the steps since the last train record logged, a checkpoint, the reason said."""
        t, dist = self.t, self.dist
        stopped = ""
        evaluating = self._evaluates_at(self.step)
        if evaluating and self.main and not stops.received:  # rank 0 alone (the weights are the same)
            stopped = self.evaluate_dev(stops.interruptible)
        if not stopped and loop.budget is not None and (spent := self._train_seconds()) >= loop.budget:
            stopped = (
                f"{TIME_BUDGET} train.max_time={t.max_time} used up at step {self.step} "
                f"of {t.max_steps} ({spent:,.0f}s of training"
                f"{' in all sessions' if self.earlier_seconds else ''})"
            )
        if dist.enabled and (evaluating or loop.budget is not None):
            stopped = dist.broadcast(stopped)  # rank 0 decides: only it evaluated, and the clocks differ
        stops.check()  # a stop signal to any rank: KeyboardInterrupt on every rank, here
        if stopped:
            # the steps since the last train record (the budget ran out between two); not those a resume carried
            # in that its checkpoint's end had logged (an evaluation owed at train.max_steps, then a stop)
            if self.window.tokens and not self.window_logged:
                self._log_window(loop, inverse_sqrt_lr(self.step, self.config.d_model, t.warmup_steps, t.lr_factor))
            if self.step > self.last_saved:
                self.save_checkpoint(loop.stream_state, at_end=True)
                stops.check()  # a stop signal during that save: an interrupted run, as anywhere else
            self.events.message(stopped)
            if stopped.startswith(TIME_BUDGET):
                self._said_after_budget()
        return stopped

    def _log_window(self, loop: _Loop, lr: float) -> dict[str, Any]:
        """The steps since the last train record, logged (at every train.log_every steps, and at a stop)."""
        if not self.window.tokens:
            return {}
        metrics = self.window.metrics(self.step, loop.batches.epoch, lr, self.started)
        if loop.skipped:
            metrics["skipped_steps"] = loop.skipped
        self.log({"kind": "train", **metrics})
        self.last_train_loss = metrics["loss"]
        self.board.train(self.step, metrics)
        warning = loop.rising.update(metrics["loss"], lr)
        if warning:
            self.events.message(warning)
        self.ended_window = self.window.sums() if self.step % self.t.log_every else None
        self.window = _Window()
        return metrics

    def _check_weights_finite(self) -> None:
        """Raise the divergence error when an update left NaN or infinite weights although its loss was finite
        (a learning rate so large that the step itself overflowed): they were saved as a checkpoint, called intact
        and offered for resume. The next loss would be NaN; checked where weights are saved or scored."""
        if bool(torch.stack([p.isfinite().all() for p in self.model.parameters()]).all()):  # one sync, not one a tensor
            return
        self.board.close()
        lr = inverse_sqrt_lr(self.step, self.config.d_model, self.t.warmup_steps, self.t.lr_factor)
        raise diverged(self.run_dir, self.step, lr, what=f"its update at lr {lr:.3g} made weights NaN or infinite (its loss was finite)",
                        device=self.device)

    def _evaluates_at(self, step: int) -> bool:
        """Whether training evaluates on the dev set after `step`: every train.eval_every steps, the last included
        when it falls on them (it was left to the final evaluation, whose scores are of all of dev and of the final
        model: best.safetensors never held the last step, however well it scored)."""
        t = self.t
        return bool(self.recipe.data.dev) and bool(t.eval_every) and step % t.eval_every == 0 and step <= t.max_steps

    def release(self) -> None:
        """Let go of the DDP wrapper, the run's one holder of the process group (its gradient reducer), so that
        `Distributed.cleanup` destroys the group with nothing else holding it. The wrapper was left to the garbage
        collector, so it outlived the group and was freed at an unpredictable moment, the interpreter's exit
        included (the suspected cause of rank 1's rare "terminate called without an active exception", SIGABRT,
        at the end of a 2-process run on CPU)."""
        self.step_model = getattr(self, "model", None)

    def _train_seconds(self) -> float:
        """Training time so far, all sessions: what train.max_time counts and each checkpoint saves. A session
        counts from its first step to its last (periodic dev evaluations and checkpoints included); reading the
        corpus, training the tokenizer, building the model and writing the final model are not training."""
        if self.loop_started is None:
            return self.earlier_seconds
        return self.earlier_seconds + (self.loop_ended or time.perf_counter()) - self.loop_started

    def _said_after_budget(self) -> None:
        """The final model comes after the time budget, not inside it: said, with what it costs."""
        if self.main and self.dev is not None:
            self.events.message(
                f"train.max_time counts training only: averaging the last checkpoints and evaluating the final model on "
                f"all {len(self.dev.sources):,} dev sentences (beam {self.recipe.decode.beam}) follow, outside it "
                "(summary.json: final_seconds)"
            )

    def evaluate_dev(self, interruptible: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext) -> str:
        """Rank 0's periodic dev evaluation: logged, the best weights kept as best.safetensors. Returns why the
        run should stop (early stopping's patience ran out), or "". The decoding runs in `interruptible` (a stop
        signal ends it at once; in a DDP job that leaves it unfinished and the ranks stop at this step's check);
        the logging after it takes locks (tensorboard's queue) and is not interrupted."""
        result = None
        self._check_weights_finite()  # NaN weights would score (and might be kept as best.safetensors)
        with interruptible():
            result = evaluate(
                self.model, self.tokenizer, self.dev, self.recipe, self.amp, self.t.eval_sentences, self.events,
                f"dev evaluation at step {self.step}",
            )
        if result is None:
            return ""
        self.log({"kind": "eval", "step": self.step, **result})
        self.board.evaluation(self.step, result)
        self.events.evaluation(self.step, result)
        if result["bleu"] > self.best_bleu:
            self.best_bleu = result["bleu"]
            try:  # (not written: the resume evaluates this step again, as its checkpoint says it is owed)
                save_weights(
                    self.run_dir / BEST, weights_state(self.model), self.config, self.tokenizer.sha256, self.step,
                    bleu=self.best_bleu, scoring=self._scoring(),  # (which dev set, how scored: `_discard_future`)
                )
            except OSError as error:
                if not unwritable(error):
                    raise
                raise not_saved(self.run_dir, self.step, error, what=BEST, device=self.device) from error
        stop = self.early.update(self.step, result)
        self.evaluated_step = self.step
        if self.last_saved == self.step:  # the checkpoint of this step was saved before: its evaluation is done
            done = {
                "evaluated_step": self.step, "best_bleu": self.best_bleu, "early_stopping": self.early.state_dict(),
                "train_seconds": self._train_seconds(),  # the evaluation counts (train.max_time), as in the run
            }
            with contextlib.suppress(OSError):  # not written (a full disk): a resume from here evaluates again
                atomic_write(
                    evaluated_path(checkpoint_path(self.run_dir, self.step)),
                    lambda tmp: Path(tmp).write_text(json.dumps(done) + "\n", encoding="utf-8"),
                )
        return self.early.reason() if stop else ""

    # --- save -------------------------------------------------------------------------------------------------

    def save_checkpoint(
        self, stream_state: dict[str, int], every_rank: bool = True, on_stop: bool = False, at_end: bool = False
    ) -> Path:
        """Checkpoint this step: weights (safetensors) and, beside them, the trainer state an exact resume needs.

        Called on every rank at the same steps (each rank's RNG state is gathered), or, with every_rank=False
        (Ctrl-C, where the ranks are not in step), on rank 0 alone.

        `on_stop`: a checkpoint off the train.save_every schedule, saved only so that a stopped run (Ctrl-C, a
        stop signal) can resume from its last step. It is marked so (`saved_on` in its metadata) and deleted by the
        next checkpoint, before that one prunes: the final average and keep_last see the checkpoints an
        uninterrupted run has (an interrupt at step 7 put step 7 into the average of the last checkpoints; a
        second stop before the next scheduled checkpoint pruned a scheduled one in its place). So is a
        checkpoint off the schedule where the run ended (`at_end`: train.max_steps, the time budget, early
        stopping; marked `saved_on: end`), once a run extended past it saves the next one.
        """
        dist = self.dist
        self._check_weights_finite()  # on every rank alike (their weights are the same): never a broken checkpoint
        self._check_place()
        rng = _rng_state(self.device)
        rng_ranks = dist.gather(rng) if dist.enabled and every_rank else None
        path = checkpoint_path(self.run_dir, self.step)
        if not self.main:
            self.last_saved = self.step
            return path
        state = {
            "step": self.step, "optimizer": self.optimizer.state_dict(), "scaler": self.scaler.state_dict(),
            "stream": stream_state, "rng": rng, "best_bleu": self.best_bleu, "tfm_version": __version__,
            "processes": dist.world_size, "threads": torch.get_num_threads(), "corpus_digest": self.corpus_digest,
            "early_stopping": self.early.state_dict(), "scoring": self._scoring(),
            "train_seconds": self._train_seconds(), "evaluated_step": self.evaluated_step, "init_weights": self.init_weights,
            # saved before this step's dev evaluation: a resume from here does it (see `fit`), unless its outcome
            # was written beside the checkpoint (`evaluate_dev`)
            "eval_owed": self._evaluates_at(self.step) and self.evaluated_step != self.step,
            # the recipe it was trained with: a resume tells a recipe.yaml cut short (`resume_recipe`)
            "recipe": recipe_to_dict(with_absolute_paths(self.recipe)),
            # the steps since the last train record on the schedule: the resume's first record covers them too, as
            # the run's did (those an end logged included: a run extended past its end logs them again)
            "log_window": _Window.resumed(self.ended_window).plus(self.window).sums(),
            "log_window_logged": self.ended_window is not None and not self.window.tokens,  # all of it, at an end
        }
        if rng_ranks is not None:
            state["rng_ranks"] = rng_ranks
        try:
            # off the train.save_every schedule: where the run was stopped, or where it ended (train.max_steps, the
            # time budget, early stopping), which a run extended past it would not have saved
            # (a step on the schedule is no such step, whoever saves it: a second Ctrl-C cut a scheduled save short,
            # the stop saved the step again marked "stop", and the next save deleted a checkpoint of the average)
            off = None if self.step % self.t.save_every == 0 else "stop" if on_stop else "end" if at_end else None
            marked = {"saved_on": off} if off else {}
            save_weights(
                path, weights_state(self.model), self.config, self.tokenizer.sha256, self.step, precision=self.precision,
                **marked,
            )
            atomic_write(state_path(path), lambda tmp: torch.save(state, tmp))
            self._keep_tokenizer()
        except OSError as error:  # a disk that filled up: say what is kept and how to go on
            if not unwritable(error):
                raise
            raise not_saved(self.run_dir, self.step, error, device=self.device) from error
        self.last_saved = self.step  # only now: Ctrl-C in the middle of a save saves again in `_interrupted`
        failed = _drop_stop_checkpoints(self.run_dir, before=self.step)  # (an earlier stop's too: it counted in keep_last)
        failed += prune_checkpoints(self.run_dir, self.t.keep_last)
        self._say_undeletable(failed)
        return path

    def _say_undeletable(self, failed: list[OSError]) -> None:
        for error in failed:  # a file that may not be deleted (immutable, another user's): it stopped the run
            if error.filename not in self.undeletable:  # said once
                self.undeletable.add(error.filename)
                self.events.message(
                    f"warning: an older checkpoint's file could not be deleted ({error.filename}: {error.strerror or error}): "
                    "it is kept, and the run goes on"
                )

    def _keep_tokenizer(self) -> None:
        """Write the run's tokenizer.json back from memory when it is gone (deleted while the run trained): the run
        ended with exit 0, and its model then loaded nowhere, nor resumed (`tfm tokenize` may not write it there)."""
        own = self.run_dir / "tokenizer.json"
        if os.path.lexists(own):
            return
        self.tokenizer.save(own)
        self.events.message(f"warning: {own} was gone (deleted while the run trained): written back, as the model needs it")

    def _interrupted(self, stream_state: dict[str, int], together: bool = False) -> TrainResult:
        """Ctrl-C: keep the last completed step and say how to continue. With `together` (the ranks agreed to stop,
        see `HeldStops`) every rank is at this step and takes part in the save; otherwise rank 0 saves alone."""
        self.optimizer.zero_grad(set_to_none=True)
        resume = f"continue with `{resume_command(self.run_dir, device=self.device)}`"
        if self.step > self.last_saved and (self.main or together):
            with _sigint_ignored():  # a second Ctrl-C must not cut the save short (the first one asked for it)
                path = self.save_checkpoint(stream_state, every_rank=together, on_stop=True)
            self.events.message(f"interrupted: saved {path}; {resume}")
        elif not checkpoint_steps(self.run_dir):  # (stopped in its first step: a compiled model's first takes a minute)
            self.events.message(
                f"interrupted at step {self.step}, before the first checkpoint: there is nothing to resume; start the "
                "run again with the same command (its folder takes it)"
            )
        else:
            self.events.message(f"interrupted at step {self.step}; {resume}")
        self.board.close()
        return TrainResult(self.run_dir, self.step, True, seconds=time.perf_counter() - self.started)

    def _lost_a_peer(self) -> RankError:
        """Another process of the job is gone mid-step (killed, crashed, its machine lost): this one cannot go on.
        Every checkpoint was saved with all ranks in step, so the newest one is whole."""
        if self.dist.peer_said_why():  # it stopped on an error of its own (a full disk), and said so
            return RankError(
                f"process {self.dist.rank} of {self.dist.world_size} stopped after step {self.step} with process 0, "
                "which said why", said_elsewhere=True,
            )
        saved = checkpoint_steps(self.run_dir)
        where = f"its checkpoints (up to step {saved[-1][0]}) are intact" if saved else "no checkpoint was saved yet"
        return RankError(
            f"process {self.dist.rank} of {self.dist.world_size} lost contact with another process of the job after "
            f"step {self.step} (it stopped, or its machine did: its own output or torchrun's says why); {where}",
            hint=f"continue with `{resume_command(self.run_dir, device=self.device)}`" if saved else "start the run again",
        )

    def _corpus_counts(self) -> dict[str, Any]:
        """The pairs data.train and data.dev gave this session: read, kept (scored) and skipped, as the start said."""
        counts: dict[str, Any] = {}
        if (s := self.corpus_stats) is not None:
            counts["train_corpus"] = {
                "read": s.read, "kept": s.kept, "skipped_empty": s.skipped_empty, "skipped_long": s.skipped_long,
                "max_len": self.recipe.data.max_len,
            }
            if self.corpus_mixture is not None:  # each corpus's own counts, its weight and its pairs an epoch
                counts["train_corpus"]["corpora"] = [
                    {"corpus": part.name, "weight": part.weight, "read": part.stats.read, "kept": part.stats.kept,
                     "skipped_empty": part.stats.skipped_empty, "skipped_long": part.stats.skipped_long,
                     "pairs_an_epoch": taken}
                    for part, taken in zip(self.corpus_mixture, pairs_an_epoch(self.corpus_mixture), strict=True)
                ]
        if (dev := getattr(self, "dev", None)) is not None:
            n = len(dev.sources)
            counts["dev_corpus"] = {"read": n + dev.skipped_empty, "scored": n, "skipped_empty": dev.skipped_empty}
        return counts

    def _say_if_diverged(self) -> None:
        """A run whose training loss, past the warm-up, is over twice a uniform guess's (ln V) at its last record:
        one whose loss exploded without becoming NaN (a learning rate far too high: 2,087 -> 64,748 with
        `train.lr_factor=1000`) ended like any other, its dev BLEU 0.00 the only sign. (The training loss, not the
        dev loss: a model that learns its training set by heart has a dev loss that high too.)"""
        loss = self.last_train_loss
        uniform = math.log(self.config.vocab_size)
        if loss is not None and math.isfinite(loss) and loss > 2 * uniform and self.step >= self.t.warmup_steps:
            self.events.message(
                f"warning: the training loss at the end, {loss:,.4g}, is over twice a uniform guess's (ln "
                f"{self.config.vocab_size:,} = {uniform:.2f}): the run diverged; train again with a lower "
                "train.lr_factor or a longer train.warmup_steps (or train.clip_norm=1)"
            )

    def _finish(self, stopped: str) -> TrainResult:
        """The final model (average or last checkpoint, see `finish`), summary.json and the curves (rank 0)."""
        if not self.main:  # rank 0 writes the final model and the summary; the others are done
            return TrainResult(self.run_dir, self.step, False, {}, time.perf_counter() - self.started, stopped)
        run_dir, t = self.run_dir, self.t
        finishing = time.perf_counter()
        self._check_place()  # the final model, curves and summary are written by the folder's name too
        self._keep_tokenizer()  # (deleted after the last checkpoint: the final model needs it too)
        try:
            final = finish(run_dir, self.recipe, self.model, self.tokenizer, self.dev, self.amp, self.events, self.board)
        except OSError as error:  # model.safetensors, or its metrics.jsonl line
            if not unwritable(error):
                raise
            raise not_saved(run_dir, self.step, error, what="the final model", done=True, device=self.device) from error
        self._say_if_diverged()
        # a resume of a finished run that lowers train.keep_last writes the final model again, and saves nothing
        # that would prune (3 checkpoints stayed where keep_last said 2); average_last <= keep_last, so none it needs
        self._say_undeletable(prune_checkpoints(run_dir, t.keep_last))
        self.board.close()
        result = TrainResult(run_dir, self.step, False, final, time.perf_counter() - self.started, stopped)
        summary = {
            "recipe": self.recipe.name, "steps": self.step, "parameters": self.model.num_parameters(),
            "precision": self.precision, "device": str(self.device), "processes": self.dist.world_size,
            # the training time of all sessions (what train.max_time counts: each session's loop, from its first
            # step to its last), and this session's wall time: its set-up, its training and the final model
            "train_seconds": round(self._train_seconds(), 1), "session_seconds": round(result.seconds, 1),
            "setup_seconds": round((self.loop_started or finishing) - self.started, 1),
            "final_seconds": round(time.perf_counter() - finishing, 1),  # averaging and the final evaluation
            "tfm_version": __version__, **self._corpus_counts(), "dev": final,
            "final_model": final.get("final_model"), "stopped": stopped or f"reached train.max_steps={t.max_steps}",
            # the recipe this final model was made with: recipe.yaml is rewritten when a resume starts, so a resume
            # stopped before this file was written (while averaging or evaluating) left a recipe.yaml ahead of it
            "recipe_resolved": recipe_to_dict(with_absolute_paths(self.recipe)),
            "init_from": with_absolute_paths(self.recipe).train.init_from,  # the model it was fine-tuned from, or None
            "init_weights": self.init_weights,  # its weights file, step and CRC-32 when this run started, or None
        }
        # the curves before summary.json, which marks the run finished: a stop between the two left it without
        # curves.png for good (its resume found nothing to do)
        try:
            png = write_curves_png(run_dir)
        except Exception as error:  # noqa: BLE001 - a full disk, a matplotlibrc asking for LaTeX: not worth the summary
            why = getattr(error, "strerror", None) or (str(error).splitlines() or [type(error).__name__])[0]
            self.events.message(f"warning: curves.png not written ({why}); `tfm train --curves {shell_word(run_dir)}` draws them")
        else:
            if png is not None:
                self.events.message(f"curves: {png}")
        try:
            atomic_write(run_dir / "summary.json", lambda tmp: Path(tmp).write_text(json.dumps(summary, indent=2)))
        except OSError as error:
            if not unwritable(error):
                raise
            raise not_saved(run_dir, self.step, error, what="summary.json", done=True, device=self.device) from error
        return result


@dataclass
class _Loop:
    """What a session's training loop carries from one step to the next (`Trainer.fit`)."""

    batches: Prefetcher
    stream_state: dict[str, Any]  # where the data of the step being trained starts, then of the next one
    budget: float | None  # train.max_time in seconds, all sessions together
    rising: RisingLoss = field(default_factory=RisingLoss)  # warns of a climbing training loss
    skipped: int = 0  # steps whose loss was NaN or infinite, in all
    bad_in_a_row: int = 0  # ... and in a row
    save_owed: bool = False  # a checkpoint put off while the loss was NaN


@dataclass
class _Window:
    """Sums over the steps since the last log line."""

    start: float = field(default_factory=time.perf_counter)
    tokens: int = 0
    loss: float = 0.0
    nll: float = 0.0
    waiting: float = 0.0  # waiting for the next batches
    stepping: float = 0.0  # inside the optimizer steps
    carried: int = 0  # of `tokens`, those of steps trained before a resume: in the loss, not in this session's speed

    def add(self, tokens: int, loss: float, nll: float) -> None:
        self.tokens += tokens
        self.loss += loss
        self.nll += nll

    def sums(self) -> dict[str, Any]:
        """What a checkpoint saves of it: the loss sums and their tokens."""
        return {"tokens": self.tokens, "loss": self.loss, "nll": self.nll}

    def plus(self, other: _Window) -> _Window:
        """The sums of both windows (as `resumed` makes them: for a checkpoint)."""
        return _Window(tokens=self.tokens + other.tokens, loss=self.loss + other.loss, nll=self.nll + other.nll)

    @classmethod
    def resumed(cls, saved: Any) -> _Window:
        """A window holding the sums a checkpoint saved (`sums`), or an empty one (none saved: an older tfm)."""
        try:
            tokens, loss, nll = int(saved["tokens"]), float(saved["loss"]), float(saved["nll"])
        except (TypeError, KeyError, ValueError):
            return cls()
        return cls(tokens=tokens, loss=loss, nll=nll, carried=tokens)

    def metrics(self, step: int, epoch: int, lr: float, started: float) -> dict[str, Any]:
        """The log line's numbers (per target token; throughput over the window's wall time)."""
        return {
            "step": step, "epoch": epoch, "loss": self.loss / self.tokens,
            "ppl": perplexity(self.nll / self.tokens), "lr": lr,
            "tgt_tokens_per_s": (self.tokens - self.carried) / (time.perf_counter() - self.start),
            "elapsed_s": time.perf_counter() - started,
            "data_wait_s": self.waiting,  # of the window's wall time, spent waiting for the next batches
            "step_s": self.stepping,  # of the window's wall time, spent in the optimizer steps themselves
        }


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored for the block, then its handler put back (on the main thread only: signals are its)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _make_run_dir(run_dir: Path) -> bool:
    """Create the run directory; whether this start created it (then an early failure removes it again)."""
    try:
        run_dir.mkdir(parents=True)  # not exist_ok: of two starts at once only the one that made it removes it
        return True
    except FileExistsError:
        if run_dir.is_dir():
            return False
        what = "a broken symbolic link" if run_dir.is_symlink() else "a file, not a directory"
        raise TfmError(f"the run directory {run_dir} is {what}", hint="remove it or choose another --out") from None
    except OSError as err:
        raise TfmError(f"cannot create the run directory {run_dir}: {err.strerror}", hint="choose another --out") from None


def _sweep_temporary_files(run_dir: Path) -> None:
    """Remove the half-written files of a trainer that was killed (`kill -9`, a machine that went down) in the
    middle of a save: `checkpoints/.step-*.tmp` (a state file of the base recipe is hundreds of MB), the write
    probe, and the final or best weights' temporary files, and safetensors' own (`.tmpXXXXXX`: its writer makes the
    file under such a name beside ours, then renames it; a kill left one as large as the weights). Only a trainer
    writes them, and this one holds the run's lock, so none is being written now. They outlived resumes and the end
    of the run."""
    safetensors_own = ".tmp" + "[0-9A-Za-z]" * 6  # the Rust tempfile crate's name
    folders = {run_dir / CHECKPOINTS: (".step-*.tmp", ".write-test-*", safetensors_own),
               run_dir: (f".{FINAL}.*.tmp", f".{BEST}.*.tmp", safetensors_own)}
    for folder, patterns in folders.items():
        for pattern in patterns:
            for stale in folder.glob(pattern):
                with contextlib.suppress(OSError):
                    stale.unlink()
