"""Where a run keeps its files, and which weights a `--model` path means: file names and paths only.

A run directory (`runs/<recipe name>/` by default) holds `model.safetensors` (the final model), `best.safetensors`,
and `checkpoints/step-NNNNNNNN.safetensors` with their `.state.pt` trainer states (`tfm_cli.checkpoint` writes and
reads them). Plain Python, no torch: `tfm tokenize` and every command's argument checks find runs without loading
it.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from tfm_cli.errors import CheckpointError, shell_word

FINAL = "model.safetensors"
BEST = "best.safetensors"
EXPORT_INFO = "tfm-export.json"  # written into every export (tfm_cli.export): format, source weights, tfm version, checks
CHECKPOINTS = "checkpoints"
TENSORBOARD_DIR = "tensorboard"  # TensorBoard's event files (tfm_cli.monitor)
CURVES_PNG = "curves.png"  # the loss and BLEU curves (tfm_cli.monitor)
_STEP_FILE = re.compile(r"step-(\d+)\.safetensors$")


def checkpoint_steps(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, path) of every periodic checkpoint in the run, oldest first."""
    folder = Path(run_dir) / CHECKPOINTS
    found = []
    for path in folder.glob("step-*.safetensors") if folder.is_dir() else []:
        match = _STEP_FILE.search(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def missing_model(path: Path) -> CheckpointError:
    """The error for a model path that does not exist, worded alike by every command that reads one."""
    from tfm_cli.files import missing

    return CheckpointError(f"model {path} {missing(path)}", hint="pass a run directory (runs/NAME) or a .safetensors file")


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS / f"step-{step:08d}.safetensors"


def state_path(weights: Path) -> Path:
    return weights.with_name(weights.name.replace(".safetensors", ".state.pt"))


def evaluated_path(weights: Path) -> Path:
    """Where the outcome of the dev evaluation after a checkpoint's step is kept (written once it is complete):
    the checkpoint itself is saved before that evaluation."""
    return weights.with_name(weights.name.replace(".safetensors", ".evaluated.json"))


def prune_checkpoints(run_dir: Path, keep_last: int) -> list[OSError]:
    """Delete all but the newest `keep_last` periodic checkpoints (weights and trainer state), and the trainer
    states older than those whose weights are gone (a prune cut short between its two deletions, `kill -9`, left
    one behind for good: each a few hundred MB on a real model).

    A file that may not be deleted (immutable, another user's) is left and the others are deleted all the same
    (the first one stopped the prune, at every save, so `keep_last` no longer held): returns those errors."""
    found = checkpoint_steps(run_dir)
    failed: list[OSError] = []
    for _, path in found[:-keep_last]:
        delete_checkpoint(path, failed)
    kept = found[-keep_last:]
    if kept:
        for state in (Path(run_dir) / CHECKPOINTS).glob("step-*.state.pt"):
            match = re.fullmatch(r"step-(\d+)\.state\.pt", state.name)
            if match and int(match.group(1)) < kept[0][0] and not state.with_name(state.name.replace(".state.pt", ".safetensors")).exists():
                _delete(state, failed)
    return failed


def unfinished_first_checkpoint(run_dir: Path) -> Path | None:
    """The weights of a run's first and only checkpoint when a stop while it was saved (a kill between the weights
    and the trainer state written after them) left them without their trainer state, and the run has no final
    model: nothing a resume can continue exactly, and nothing a start in the run's folder must refuse to replace."""
    found = checkpoint_steps(run_dir)
    if len(found) != 1 or os.path.lexists(Path(run_dir) / FINAL):
        return None
    weights = found[0][1]
    return None if os.path.lexists(state_path(weights)) else weights


def delete_checkpoint(weights: Path, failed: list[OSError]) -> None:
    """Delete a checkpoint's weights, trainer state and evaluation record; what may not be deleted goes to `failed`."""
    for path in (weights, state_path(weights), evaluated_path(weights)):
        _delete(path, failed)


def _delete(path: Path, failed: list[OSError]) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as error:
        failed.append(error)


def resolve_weights(spec: str | os.PathLike[str] | None, runs_root: str | os.PathLike[str] = "runs") -> Path:
    """The weights file meant by `spec`: a .safetensors file, or a run directory, or (None) the newest run.

    In a run directory the final averaged model wins, then the best checkpoint, then the newest checkpoint.
    """
    if spec is None:
        if isinstance(runs_root, os.PathLike):
            runs_root = os.fspath(runs_root)
        if not isinstance(runs_root, (str, Path)) or not str(runs_root).strip():  # runs_root=5 failed in pathlib
            raise TypeError(f"runs_root must be a non-empty path (str or os.PathLike), not {runs_root!r}")
        root = Path(runs_root)
        candidates = [p for p in root.glob("*/") if p.is_dir()] if root.is_dir() else []
        runs = [(weights_mtime(p), p) for p in candidates]
        runs = [(t, p) for t, p in runs if t is not None]
        if not runs:
            raise CheckpointError(
                f"no trained model found under {root}/", hint="train one with `tfm train recipes/tiny.yaml`, or name the run directory (e.g. runs/tiny)"
            )
        return resolve_weights(max(runs)[1])
    path = Path(spec)
    if path.is_file():
        other = _not_weights(path)
        if other is not None:
            raise other
        return path
    if not path.exists():
        raise missing_model(path)
    for candidate in (path / FINAL, path / BEST):
        if candidate.is_file():
            return candidate
        if os.path.lexists(candidate):  # a dangling link, a link to /dev/null, a folder: was skipped without a word
            what = f"a broken link (to {os.readlink(candidate)})" if candidate.is_symlink() and not candidate.exists() else "not a regular file"
            raise CheckpointError(
                f"{candidate} is {what}", hint="put the weights file back, or give one checkpoint of the run (checkpoints/step-*.safetensors)"
            )
    inside = [p for p in path.glob("step-*.safetensors") if _STEP_FILE.search(p.name)] if path.is_dir() else []
    if inside and not checkpoint_steps(path):  # runs/NAME/checkpoints itself: which of its checkpoints?
        run, newest = shell_word(path.parent), shell_word(max(inside, key=lambda p: p.name))
        raise CheckpointError(
            f"{path} is the checkpoints folder of a run, not a run",
            hint=f"give the run directory ({run}) for its final model, or one checkpoint, e.g. {newest}",
        )
    steps = checkpoint_steps(path)
    if steps:
        return steps[-1][1]
    if path.is_dir() and any(path.glob("*.onnx")):  # `tfm export --format onnx` (whole or not): graphs, no weights
        lacking = [name for name in ("encoder.onnx", "decoder.onnx") if not (path / name).is_file()]
        if lacking:
            raise CheckpointError(
                f"{path} is an incomplete ONNX export: {' and '.join(lacking)} {'is' if len(lacking) == 1 else 'are'} missing",
                hint=f"export it again: tfm export RUN --format onnx --out {shell_word(path)} --force",
            )
        raise CheckpointError(
            f"{path} is an ONNX export ({', '.join(sorted(p.name for p in path.glob('*.onnx')))}): it holds no PyTorch weights",
            hint="translate it with `tfm translate --model DIR` (onnxruntime); for this command, give the run it was "
            "exported from (its tfm-export.json names the weights)",
        )
    if path.is_dir() and (path / "model.bin").is_file():  # CTranslate2's converters write model.bin + config.json
        raise CheckpointError(
            f"{path} is a CTranslate2 model (model.bin), not tfm's",
            hint="translate with it through ctranslate2.Translator, or give tfm the run it was converted from",
        )
    if path.exists() and not path.is_dir():  # a FIFO, a device: "holds no model" spoke of a folder
        raise CheckpointError(
            f"{path} is neither a weights file (.safetensors) nor a run directory",
            hint="give a run directory, its model.safetensors, a release or an export",
        )
    raise CheckpointError(
        f"{path} holds no model ({FINAL}, {BEST} or {CHECKPOINTS}/step-*.safetensors)",
        hint="train into it with `tfm train RECIPE --out DIR`, or give a run that finished a checkpoint",
    )


def _not_weights(path: Path) -> CheckpointError | None:
    """The error for a file that is, by its name, something other than weights (an ONNX graph, a trainer state, a
    run's tokenizer or config), so that it is named for what it is, not called a damaged safetensors file."""
    name, folder = path.name, shell_word(path.parent)
    if name.endswith(".state.pt"):
        weights = shell_word(path.with_name(name.removesuffix(".state.pt") + ".safetensors"))
        return CheckpointError(
            f"{path} is a checkpoint's trainer state (optimizer, schedule, RNG: for --resume), not its weights",
            hint=f"give the checkpoint's weights ({weights}) or the run directory ({shell_word(run_dir_of(path))})",
        )
    if path.suffix == ".onnx":
        return CheckpointError(
            f"{path} is one graph of an ONNX export, not a model's weights",
            hint=f"give the export directory ({folder}): `tfm translate` runs it with onnxruntime",
        )
    if path.suffix in (".pt", ".pth", ".ckpt"):  # torch.save files: fairseq, OpenNMT-py, JoeyNMT checkpoints
        return CheckpointError(
            f"{path} is a PyTorch pickle (torch.save), not safetensors: tfm loads weights only from safetensors files",
            hint="give a run directory or a .safetensors file written by tfm train",
        )
    kinds = {".json": "a JSON", ".jsonl": "a JSON lines", ".yaml": "a YAML", ".yml": "a YAML", ".txt": "a text",
             ".tsv": "a text", ".gz": "a gzip"}
    if path.suffix in kinds:
        return CheckpointError(
            f"{path} is {kinds[path.suffix]} file, not a model's weights",
            hint=f"give the run directory it belongs to ({shell_word(run_dir_of(path))}) or a .safetensors file",
        )
    return None


def weights_mtime(run_dir: Path) -> float | None:
    """Modification time of the newest weights file in a run directory, or None if it has none."""
    files = [run_dir / FINAL, run_dir / BEST, *(p for _, p in checkpoint_steps(run_dir))]
    times = []
    for path in files:
        with contextlib.suppress(OSError):  # not there, or pruned by a run training right now
            times.append(path.stat().st_mtime)
    return max(times) if times else None


def run_dir_of(weights: Path) -> Path:
    """The run directory a weights file belongs to (checkpoints live one level down)."""
    parent = weights.parent
    return parent.parent if parent.name == CHECKPOINTS else parent
