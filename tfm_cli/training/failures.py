"""The errors that stop a run: the loss or the weights gone NaN, memory, a disk that filled up or was made read-only,
a run directory in use. Each one says where the run stands (the last intact checkpoint) and the way on from there."""

from __future__ import annotations

import errno
from pathlib import Path

import torch

from tfm_cli.distributed import resume_command
from tfm_cli.errors import TfmError, shell_word
from tfm_cli.files import WRITE_ERRNOS
from tfm_cli.runs import checkpoint_steps, state_path


def last_intact(run_dir: Path) -> tuple[bool, str]:
    """Whether a checkpoint a resume can take is there (with its trainer state), and a phrase naming the newest."""
    found = [(s, w) for s, w in checkpoint_steps(run_dir) if state_path(w).is_file()]
    if not found:
        return False, "no checkpoint was saved yet"
    return True, f"the last checkpoint ({found[-1][1].name}, step {found[-1][0]}) is intact"


def diverged(
    run_dir: Path, step: int, lr: float, in_a_row: int = 0, what: str = "", device: torch.device | None = None
) -> TfmError:
    """The error that stops a run whose loss stayed NaN or infinite (`in_a_row` steps), or whose weights became
    so (`what` happened); it names the last good checkpoint (none holds a NaN: such weights are never saved)."""
    found, kept = last_intact(run_dir)
    then = (
        f"then `{resume_command(run_dir, device=device)} train.lr_factor=...` or start again"
        if found  # with no checkpoint there is nothing to resume, and a start with other settings is refused there
        else f"and start again with another --out (or delete {shell_word(run_dir)} first: it has nothing to resume)"
    )
    return TfmError(
        f"training stopped at step {step}: {what or f'the loss was NaN or infinite {in_a_row} steps in a row at lr {lr:.3g}'}; "
        f"{kept}",
        hint=f"lower the learning rate (train.lr_factor) or lengthen train.warmup_steps, {then}",
    )


def out_of_memory(error: BaseException) -> bool:
    """A CUDA or CPU allocation that failed (torch raises RuntimeError for the CPU's, MemoryError in places)."""
    text = str(error)
    return (
        isinstance(error, (MemoryError, torch.OutOfMemoryError))
        or "can't allocate memory" in text or "out of memory" in text.lower()
    )


def ran_out_of_memory(run_dir: Path, step: int, device: torch.device, error: BaseException) -> TfmError:
    """The error that stops a run whose step (or evaluation) could not allocate its tensors; it names the last
    intact checkpoint and the settings that take less memory."""
    found, kept = last_intact(run_dir)
    why = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
    then = (
        f"then resume with them (`{resume_command(run_dir, device=device)} train.max_tokens=...`, refused in one line "
        "if the run's place in its batches does not exist with them) or start a new run with another --out"
        if found
        else f"and start again with another --out (or delete {shell_word(run_dir)} first: it has nothing to resume)"
    )
    return TfmError(
        f"training ran out of memory on {device} {'in its first step' if step == 0 else f'after step {step}'} ({why}); {kept}",
        hint=f"lower train.max_tokens (raising train.accum_steps keeps the tokens per step) or the model's size, {then}",
    )


def not_saved(
    run_dir: Path, step: int, error: OSError, what: str = "its checkpoint", done: bool = False,
    device: torch.device | None = None,
) -> TfmError:
    """The error that stops a run whose checkpoint (or `what` else) could not be written (a disk that filled up,
    or was made read-only); it names the last checkpoint that was (a resume takes the newest one with its trainer
    state), and the resume with the job's processes. `done`: training had reached its end (the final phase)."""
    found, kept = last_intact(run_dir)
    then = f"then continue with `{resume_command(run_dir, device=device)}`" if found else "then run the same command again"
    if found and done:
        then = f"then `{resume_command(run_dir, device=device)}` writes the final model from the checkpoints"
    fix = "make it writable again" if error.errno in (errno.EROFS, errno.EACCES, errno.EPERM) else "free some space there"
    stopped = f"training ended at step {step}, but" if done else f"training stopped at step {step}:"
    return TfmError(
        f"{stopped} {what} could not be written ({error.filename or run_dir}: {error.strerror or error}); {kept}",
        hint=f"{fix}, {then}",
    )


def unwritable(error: BaseException) -> bool:
    """Whether `error` is a file that could not be written for want of room or of write access (said with the way
    on, by `not_saved`), not a bug."""
    return isinstance(error, OSError) and error.errno in (*WRITE_ERRNOS, errno.EACCES, errno.EPERM)


def in_training(run_dir: Path) -> TfmError:
    return TfmError(
        f"{run_dir} is in use by another process right now (a training, or `tfm tokenize` or `tfm export` writing into it)",
        hint="wait until it ends, or stop it (Ctrl-C or kill: it saves a checkpoint), then `tfm train --resume "
        f"{shell_word(run_dir)}`; or train into another --out",
    )
