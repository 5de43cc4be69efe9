"""What an exact resume reads back, and checks before it trains on: the newest checkpoint with its trainer state
(`resume_point`; the state read without running code, `load_trainer_state`, and of this model, `check_state_fits`),
the data position in this resume's batches (`restore_stream`), the training time spent so far (`trained_seconds`),
and whether the run is finished already (`finished_resume`). `check_resume` is all of it at once, for
`tfm train --resume RUN --dry-run`; the trainer itself restores the optimizer, RNG states and progress."""

from __future__ import annotations

import contextlib
import json
import math
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tfm_cli.checkpoint import read_metadata, read_weights, unreadable
from tfm_cli.corpus import corpus_parts, corpus_text
from tfm_cli.data import BatchStream, pad_multiple_for
from tfm_cli.errors import CheckpointError, TfmError, UnreadableFileError, shell_word
from tfm_cli.files import DirectoryLock, json_value
from tfm_cli.model import Transformer
from tfm_cli.monitor import EARLY_STOP, TIME_BUDGET
from tfm_cli.recipe import Recipe, load_recipe, model_config, parse_duration, recipe_to_dict
from tfm_cli.runs import (
    CHECKPOINTS,
    FINAL,
    checkpoint_steps,
    evaluated_path,
    state_path,
    unfinished_first_checkpoint,
)
from tfm_cli.tokenizer import Tokenizer
from tfm_cli.training.checks import (
    check_resumable,
    check_tokenizer_kept,
    new_run_hint,
    with_absolute_paths,
    with_tokenizer_size,
)
from tfm_cli.training.corpora import usable_corpus
from tfm_cli.training.events import TrainEvents
from tfm_cli.training.failures import in_training


def check_resume(
    recipe: Recipe, run_dir: Path, device: torch.device | None = None, said: Callable[[str], None] | None = None
) -> int:
    """What a resume checks before it writes (`tfm train --resume RUN --dry-run`): a checkpoint with its trainer
    state (read safely), the run's tokenizer matching it, overrides that keep the checkpoint's model and a
    train.max_steps not behind it, and a data position that exists in the batches of the corpus as this resume
    reads it (`device`: where it would train, whose padding shapes the batches). Returns the step the run would
    continue from. `said` receives what the resume would say of the checkpoints it passes over."""
    lock = DirectoryLock(run_dir)
    if not lock.acquire():  # as the resume itself refuses it (the dry run said "resumes from step N")
        raise in_training(run_dir)
    lock.release()
    step, weights, state = resume_point(run_dir, _Messages(said) if said is not None else TrainEvents())
    tok = Tokenizer.load(run_dir / "tokenizer.json")
    check_resumable(run_dir, weights, model_config(recipe, tok.vocab_size, tok.pad_id, tok.bos_id, tok.eos_id), step,
                    recipe.train.max_steps)
    check_tokenizer_kept(recipe, run_dir, tok.vocab_size, state.get("recipe"))
    with torch.device("meta"):  # the shapes alone: no memory, no time
        shapes = Transformer(model_config(recipe, tok.vocab_size, tok.pad_id, tok.bos_id, tok.eos_id))
    check_state_fits(weights, state["optimizer"], list(shapes.parameters()))
    read_weights(weights)  # its CRC-32: a checkpoint damaged since it was written fails here as in the resume
    corpus = usable_corpus(recipe, tok)
    stream = BatchStream(
        corpus, recipe.train.max_tokens, recipe.train.seed, tok.pad_id, tok.bos_id, tok.eos_id,
        pad_multiple=pad_multiple_for(device or torch.device("cpu")),
    )
    changed = None if "corpus_digest" not in state else state["corpus_digest"] != corpus.digest()
    if (note := restore_stream(stream, state["stream"], recipe, run_dir, state.get("recipe"), changed)) and said is not None:
        said(note)
    return step


class _Messages(TrainEvents):
    """Events that pass on only the messages."""

    def __init__(self, said: Callable[[str], None]) -> None:
        self.said = said

    def message(self, text: str) -> None:
        self.said(text)


def trained_seconds(run_dir: Path) -> float:
    """The training time (seconds, all sessions: what train.max_time counts) saved with the checkpoint a resume of
    `run_dir` continues from (0 for a checkpoint of an older tfm, which saved none), with its step's evaluation."""
    step, weights, state = resume_point(run_dir, TrainEvents())
    return seconds_evaluated(weights, float(state.get("train_seconds", 0.0)), step)


def seconds_evaluated(weights: Path, saved: float, step: int) -> float:
    """The training time after the dev evaluation that followed the checkpoint `weights` of `step` (saved before
    it, with `saved` seconds), where that evaluation was completed and said so: the time budget counts evaluations, and one
    that used it up must not leave the resume time to train on (`saved` otherwise)."""
    try:
        done = json_value(evaluated_path(weights).read_text(encoding="utf-8"))
        seconds, evaluated = float(done["train_seconds"]), int(done["evaluated_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return saved
    return max(saved, seconds) if evaluated == step else saved


def finished_resume(run_dir: Path, recipe: Recipe) -> dict[str, Any] | None:
    """The summary.json of `run_dir` when a resume with `recipe` would find the run finished (at train.max_steps,
    stopped early or its time budget spent, its final model written, nothing in the recipe changed) and do
    nothing; None when it would train, or write the final model. What `tfm train --resume --dry-run` reports."""
    step, weights, state = resume_point(run_dir, TrainEvents())
    recipe = with_tokenizer_size(recipe, Tokenizer.load(run_dir / "tokenizer.json").vocab_size)
    return finished_summary(run_dir, step, recipe, seconds_evaluated(weights, float(state.get("train_seconds", 0.0)), step))


def resume_point(run_dir: Path, events: TrainEvents) -> tuple[int, Path, dict[str, Any]]:
    """The newest checkpoint that has its trainer state: (step, weights file, trainer state)."""
    found = checkpoint_steps(run_dir)
    # A start into run_dir is refused once it holds checkpoints or a final model: then the way on is a new run.
    anew = f"start a new run from its recipe: tfm train {run_dir / 'recipe.yaml'} --out NEW_DIR"
    if not found:
        again = f"start it again without --resume: tfm train {shell_word(run_dir / 'recipe.yaml')} --out {shell_word(run_dir)}"
        # a run copied without its checkpoints keeps its trained weights: fine-tune from them rather than start over
        keep = (f"train on from its final model's weights (a new optimizer and schedule): tfm train "
                f"{shell_word(run_dir / 'recipe.yaml')} train.init_from={shell_word(run_dir)} --out NEW_DIR; or {anew}")
        hint = keep if (run_dir / FINAL).is_file() else again
        raise CheckpointError(f"{run_dir} has no checkpoint to resume from", hint=hint)
    # Weights are written before their trainer state: a run killed between the two leaves weights that
    # cannot be resumed exactly, so resume from the newest checkpoint that has both.
    complete = [(s, w) for s, w in found if state_path(w).is_file()]
    newest = complete[-1][0] if complete else -1
    odd = [state_path(w) for s, w in found if s > newest and os.path.lexists(state_path(w))]
    if odd:  # a folder or a pipe by that name: it was passed over as a missing state, unsaid in a dry run
        raise CheckpointError(
            f"{odd[-1]} is not a regular file (a directory, a pipe or a broken link), so it is no trainer state",
            hint="put the trainer state back there, or move that away to resume from the checkpoint before",
        )
    if not complete and (first := unfinished_first_checkpoint(run_dir)) is not None:
        raise CheckpointError(  # (it pointed to a new folder, and a start in this one was refused: no way on in place)
            f"{run_dir} stopped while it saved its first checkpoint ({first.name}, without its trainer state): "
            "there is nothing to resume from",
            hint=f"start it again in its folder, which removes that checkpoint: tfm train {shell_word(run_dir / 'recipe.yaml')} "
            f"--out {shell_word(run_dir)}",
        )
    if not complete:
        raise CheckpointError(
            f"{run_dir} has no checkpoint with its trainer state ({state_path(found[-1][1]).name} and older are missing)",
            hint=f"an exact resume needs the .state.pt files; {anew}",
        )
    step, weights = complete[-1]
    tok_path = run_dir / "tokenizer.json"
    if not tok_path.is_file():  # else a start would train or copy a tokenizer, which need not be the run's
        raise CheckpointError(
            f"{tok_path} is missing: the run cannot continue without the tokenizer it was trained with",
            hint="put back the tokenizer.json this run was trained with",
        )
    try:
        expected = read_metadata(weights).get("tokenizer_sha256")
    except UnreadableFileError:
        raise
    except CheckpointError as error:  # damaged (a disk that filled up, a copy cut short): the one before may be whole
        raise CheckpointError(
            str(error), hint=f"delete it and its {state_path(weights).name} to resume from the checkpoint before"
        ) from None
    if expected and Tokenizer.load(tok_path).sha256 != expected:
        raise CheckpointError(
            f"{tok_path} does not match {weights} (tokenizer hash differs): the run cannot continue with it",
            hint="put back the tokenizer.json this run was trained with",
        )
    newer = [s for s, _ in found if s > step]
    if newer:
        events.message(
            f"checkpoint(s) at step {', '.join(map(str, newer))} have no trainer state (the run stopped while "
            f"saving): resuming from step {step}; the resume removes them and trains those steps again"
        )
    steps = {s for s, _ in found}
    orphans = sorted(int(f.name[5:13]) for f in (run_dir / CHECKPOINTS).glob("step-*.state.pt")
                     if f.name[5:13].isdigit() and int(f.name[5:13]) > step and int(f.name[5:13]) not in steps)
    if orphans:  # weights deleted or lost beside their state (it fell back without a word)
        events.message(
            f"checkpoint(s) at step {', '.join(map(str, orphans))} have a trainer state but no weights (.safetensors): "
            f"resuming from step {step}; the resume removes them and trains those steps again"
        )
    # On the CPU: the RNG states must stay CPU ByteTensors (map_location=cuda broke resume on GPUs), and
    # Optimizer.load_state_dict moves each state tensor to its parameter's device itself.
    state = load_trainer_state(state_path(weights))
    if state.get("step", step) != step:  # e.g. copied from another checkpoint: Adam's moments and the data
        raise CheckpointError(  # position of another step, on these weights
            f"{state_path(weights)} is the trainer state of step {state['step']}, not of its checkpoint's step {step}",
            hint=f"put back the state saved with {weights.name}, or delete both files to resume from the checkpoint before",
        )
    return step, weights, state


def finished_summary(run_dir: Path, step: int, recipe: Recipe, train_seconds: float = 0.0) -> dict[str, Any] | None:
    """The summary.json of a run that a resume finds finished, or None: its newest checkpoint is at
    train.max_steps, where early stopping ended it or where its time budget ran out (`train_seconds`: the
    training time that checkpoint saved, all sessions, against train.max_time), its final model and summary were written from it, and the
    resume changes nothing in its recipe (a changed setting, `train.average_last=3` or `train.patience=8` say,
    writes the final model again, or trains on)."""
    try:
        summary = json_value((run_dir / "summary.json").read_text(encoding="utf-8"))
        early = isinstance(summary, dict) and str(summary.get("stopped", "")).startswith(EARLY_STOP)
        budget = parse_duration(recipe.train.max_time) if recipe.train.max_time else None
        # as final: a resume continues the count. Its summary says so too where the checkpoint was saved before
        # the budget ran out at the same step (a checkpoint, then a periodic evaluation, then the budget check)
        by_budget = isinstance(summary, dict) and str(summary.get("stopped", "")).startswith(TIME_BUDGET)
        spent = budget is not None and (train_seconds >= budget or by_budget)
        if step < recipe.train.max_steps and not early and not spent:  # an early stop is as final: its patience is spent
            return None
        if isinstance(summary, dict) and "recipe_resolved" in summary:  # the recipe its final model was made with
            before = summary["recipe_resolved"]
        else:  # a summary of an older tfm: the run's recipe.yaml (older files: defaults)
            before = recipe_to_dict(with_absolute_paths(load_recipe(run_dir / "recipe.yaml")))
        now = json.loads(json.dumps(recipe_to_dict(with_absolute_paths(recipe))))
        for side in (before, now):  # the run's tokenizer.json fixes it (an older tfm recorded the size asked for)
            if isinstance(side, dict) and isinstance(side.get("tokenizer"), dict):
                side["tokenizer"].pop("vocab_size", None)
        same = before == now
        written = read_metadata(run_dir / FINAL).get("step") == str(step)
    except (OSError, ValueError, TfmError):  # a missing or damaged file: write the final model again
        return None
    if not (same and written and isinstance(summary, dict) and summary.get("steps") == step):
        return None
    return summary


_STREAM_KEYS = ("data.train", "data.max_len", "train.max_tokens")  # what decides the batches a saved position points into
_ORDER_KEYS = (*_STREAM_KEYS, "train.seed")  # ... and their order within an epoch


def _trained_with(run_dir: Path, saved_recipe: dict[str, Any] | None) -> dict[str, Any]:
    """The recipe the checkpoint was trained with, as a dict: the one its state saved, else the run's recipe.yaml
    (older states; a session started after the checkpoint may have rewritten it), else {}."""
    if isinstance(saved_recipe, dict):
        return saved_recipe
    try:
        return recipe_to_dict(with_absolute_paths(load_recipe(run_dir / "recipe.yaml")))
    except TfmError:
        return {}


def _weights(spec: Any) -> list[float] | None:
    """The weights of a data.train's corpora, None where they are all 1: the batches are then those of the files
    joined (`BatchStream`), so that `[{path: a.tsv}, {path: b.tsv}]` is the corpus its files make, joined."""
    try:
        weights = [part.weight for part in corpus_parts(spec)]
    except (KeyError, TypeError, ValueError):  # a recipe.yaml edited by hand: compared as it is
        return [math.nan]
    return None if all(w == 1 for w in weights) else weights


def _change_text(key: str, before: Any, now: Any) -> str:
    """`key before -> now`, a corpus spec as a recipe writes it; a mixture whose files stay, by the weights that
    change (`data.train[1].weight 2 -> 3`)."""
    if key != "data.train":
        return f"{key} {before!r} -> {now!r}"
    with contextlib.suppress(KeyError, TypeError, ValueError):
        was, is_ = corpus_parts(before), corpus_parts(now)
        if len(was) == len(is_) > 1 and all(a.spec == b.spec for a, b in zip(was, is_, strict=True)):
            return ", ".join(f"{key}[{b.number}].weight {a.weight:g} -> {b.weight:g}"
                             for a, b in zip(was, is_, strict=True) if a.weight != b.weight)
    return f"{key} {corpus_text(before)} -> {corpus_text(now)}"


def _changed_settings(
    recipe: Recipe, before: dict[str, Any], keys: tuple[str, ...]
) -> list[tuple[str, str, str]]:
    """The (key, section, name) of `keys` whose values this resume's recipe changes from `before`."""
    now = recipe_to_dict(with_absolute_paths(recipe))
    return [
        (key, section, name)
        for key in keys
        for section, name in [key.split(".")]
        if isinstance(before.get(section), dict) and before[section].get(name) != now[section].get(name)
    ]


def check_state_fits(weights: Path, optimizer: dict[str, Any], params: list[torch.Tensor]) -> None:
    """Refuse a trainer state whose Adam moments are not of these parameters (a `.state.pt` copied from a run of
    another model): loaded, torch took them without a check, and the run crashed (a segmentation fault) or trained
    on with moments of the wrong shapes, without a word."""
    ids = [i for group in optimizer.get("param_groups", []) for i in group.get("params", [])]
    moments = optimizer.get("state", {})
    problem = None
    if len(ids) != len(params):
        problem = f"Adam's moments of {len(ids)} parameter tensors, where the model has {len(params)}"
    else:
        for i, param in zip(ids, params, strict=True):
            moment = moments.get(i, {}).get("exp_avg") if isinstance(moments.get(i), dict) else None
            if isinstance(moment, torch.Tensor) and tuple(moment.shape) != tuple(param.shape):
                problem = f"Adam's moments of shape {tuple(moment.shape)} for a parameter of shape {tuple(param.shape)}"
                break
    if problem is not None:
        raise CheckpointError(
            f"{state_path(weights)} is the trainer state of another model: it holds {problem} ({weights.name}'s model)",
            hint=f"put back the state saved with {weights.name}, or delete both files to resume from the checkpoint before",
        )


def restore_stream(
    stream: BatchStream, saved: dict[str, int], recipe: Recipe, run_dir: Path, saved_recipe: dict[str, Any] | None = None,
    corpus_changed: bool | None = None,
) -> str | None:
    """Put `stream` at the data position a checkpoint saved; when the position does not exist in this resume's
    batches, say which of the recipe's data settings this resume changes from those the checkpoint was trained
    with (`saved_recipe`, its state's; else the run's recipe.yaml), or that the corpus changed in place
    (`corpus_changed`: its pairs' ids are not those the checkpoint saved a hash of; False: they are, so a moved
    copy of the file or a data.max_len that keeps the same pairs changes no batch; None: an older state, no hash).

    Returns:
        What to say when this resume changes what orders the batches (data.train, data.max_len, train.max_tokens,
        train.seed, or the corpus files' content) and the position still exists: the rest of its epoch comes in
        another order. Else None.

    Raises:
        CheckpointError: the position lies past the end of its epoch (another corpus, max_len or max_tokens).
    """
    before = _trained_with(run_dir, saved_recipe)
    try:
        stream.load_state_dict(saved)
    except TfmError as error:
        differ = _changed_settings(recipe, before, _STREAM_KEYS)
        now = recipe_to_dict(with_absolute_paths(recipe))
        changed = [_change_text(key, before[section][name], now[section][name]) for key, section, name in differ]
        why = (f"this resume changes {'; '.join(changed)}" if changed
               else f"data.train holds other pairs than it was trained on ({error})" if corpus_changed else str(error))
        raise CheckpointError(
            f"{run_dir} cannot continue from its data position (epoch {saved.get('epoch')}, batch "
            f"{saved.get('position')}): {why}",
            hint=f"resume with the run's own {', '.join(_STREAM_KEYS)} (its recipe.yaml), or start a new run with "
            f"{'them' if changed else 'its recipe'}: "
            + new_run_hint(run_dir, [(key, now[section][name]) for key, section, name in differ]),
        ) from None
    # the position exists, but in batches made or ordered otherwise: the rest of the epoch was read in another
    # order without a word (measured: train.seed=5 trained 200 of 1,160 pairs twice in that epoch, 217 not at all)
    at_its_end = stream.position >= len(stream.batches())  # nothing of that epoch is left to read
    differ = _changed_settings(recipe, before, _ORDER_KEYS)
    if corpus_changed is False:  # the same pairs' ids, in the same order: only the batching settings matter
        reweighed = _weights(before["data"].get("train")) != _weights(recipe.data.train)  # they make the batches too
        differ = [d for d in differ if d[0] not in ("data.train", "data.max_len") or (d[0] == "data.train" and reweighed)]
    if not at_its_end and (differ or corpus_changed):
        # a file edited or replaced under the same path: its batches were other ones without a word
        what = ", ".join(key for key, _, _ in differ) if differ else "the content of data.train (the same path holds other pairs)"
        return (
            f"note: this resume changes {what}: the rest of epoch {saved.get('epoch')} "
            f"(from batch {saved.get('position')}) comes from batches made or ordered otherwise, so some of its pairs "
            "train twice in it and others not at all; the epochs after it are whole"
        )
    return None


def _pickle_naming_code(path: Path) -> bool:
    """Whether `path` is a pickle (read as opcodes, never run) that names a function or class to call: what a
    planted pickle does. A torch.save archive that does so is told by torch.load's error ("GLOBAL")."""
    import pickletools

    try:
        with open(path, "rb") as f:
            return any(op.name in ("GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE") for op, _, _ in pickletools.genops(f))
    except Exception:  # noqa: BLE001 - not a pickle at all (random bytes): damaged
        return False


def load_trainer_state(path: Path) -> dict[str, Any]:
    """A checkpoint's trainer state, read without executing code (`torch.load(weights_only=True)`).

    Raises:
        CheckpointError: in one line, for a file that is damaged or holds anything but tensors and plain data
            (a pickle that would run code is refused, never executed).
    """
    weights_name = path.name.removesuffix(".state.pt") + ".safetensors"
    try:
        with warnings.catch_warnings():  # torch's note on a pickle protocol it does not expect, before it refuses
            warnings.simplefilter("ignore", UserWarning)
            state = torch.load(path, map_location="cpu", weights_only=True)
    except OSError as err:  # permissions, the disk: the file may be whole
        raise unreadable(path, err) from None
    except Exception as err:  # UnpicklingError, RuntimeError, EOFError...: torch's text is many lines long
        code = "GLOBAL" in str(err) or _pickle_naming_code(path)  # else damaged (random bytes were "could run code")
        why = "holds more than tensors and plain data (it could run code), so it was not loaded" if code else "is damaged"
        raise CheckpointError(
            f"{path} {why}",
            hint=f"delete it and its {weights_name} to resume from the checkpoint before, or start a new run from the "
            f"run's recipe: {new_run_hint(path.parent.parent, [])}",  # RUN/checkpoints/step-N.state.pt
        ) from None
    if not isinstance(state, dict) or not {"optimizer", "scaler", "stream", "rng"} <= state.keys():
        raise CheckpointError(f"{path} is not a tfm trainer state", hint=f"delete it and its {weights_name} to resume from the checkpoint before")
    return state
