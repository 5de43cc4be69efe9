"""Run directories and checkpoints: save, load, validate, average.

A run directory (`runs/<recipe name>/` by default) holds:

    recipe.yaml            the resolved recipe (with every override applied)
    config.json            the ModelConfig
    tokenizer.json         the joint subword tokenizer
    metrics.jsonl          one JSON object per log line / evaluation
    checkpoints/step-00001000.safetensors   weights; metadata: config, tokenizer hash, step, tfm version, CRC-32
    checkpoints/step-00001000.state.pt      optimizer, schedule, RNG and data position (for --resume only)
    best.safetensors       the checkpoint with the best dev BLEU so far
    model.safetensors      the final model: the average of the last checkpoints (paper section 6.1)

Weights are safetensors with tied tensors stored once. Every file is written to a temporary name, synced to the
disk and renamed, so an interrupted write (or a crash of the machine) never leaves a truncated checkpoint behind. The file names, and which weights a run
directory or `--model` path means, are `tfm_cli.runs` (no torch there).
"""

from __future__ import annotations

import json
import os
import warnings
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load, save, save_file

from tfm_cli import __version__
from tfm_cli.errors import CheckpointError, UnreadableFileError, human_size, shell_word
from tfm_cli.files import atomic_write, json_value, utf8_name
from tfm_cli.model import ModelConfig, Transformer
from tfm_cli.runs import FINAL, checkpoint_steps, resolve_weights, run_dir_of, state_path
from tfm_cli.signals import held_stop_signals
from tfm_cli.tokenizer import Tokenizer


def weights_state(model: Transformer) -> dict[str, torch.Tensor]:
    """The model's parameters with tied tensors kept once (under their first name), contiguous, on CPU."""
    seen: set[int] = set()
    out: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        key = tensor.untyped_storage().data_ptr()
        if key in seen:
            continue
        seen.add(key)
        out[name] = tensor.detach().to("cpu").contiguous()
    return out


WEIGHTS_CRC = "weights_crc32"  # the metadata key of `weights_crc32`, checked by `read_weights`


def weights_crc32(state: Mapping[str, torch.Tensor]) -> str:
    """CRC-32 of the tensors, in name order, each as its name, dtype, shape and bytes: 8 hex digits.

    Saved with the weights and checked whenever they are read, so that a file damaged after it was written (a
    disk, a copy, a sync tool: bytes zeroed or changed inside the tensor data) is refused by name instead of
    translating garbage, a truncated file being the only damage safetensors itself notices. A check against
    accidents, not tampering; zlib's CRC-32 runs at about 1.8 GB/s here, a tenth of a second for the base model.
    """
    crc = 0
    for name in sorted(state):
        tensor = state[name].detach().to("cpu").contiguous()
        crc = zlib.crc32(f"{name}\0{str(tensor.dtype)[len('torch.'):]}\0{list(tensor.shape)}\0".encode(), crc)
        crc = zlib.crc32(tensor.reshape(-1).view(torch.uint8).numpy(), crc)
    return f"{crc:08x}"


class DamagedWeightsError(CheckpointError):
    """A weights file whose tensors no longer match the CRC-32 saved with them."""


def save_weights(
    path: Path, state: dict[str, torch.Tensor], config: ModelConfig, tokenizer_sha256: str, step: int, **extra: Any
) -> None:
    """Write weights as safetensors with the metadata needed to rebuild and validate the model, and the CRC-32 of
    the tensors (`weights_crc32`), which every read checks."""
    metadata = {
        "format": "tfm",
        "tfm_version": __version__,
        "config": json.dumps(config.to_dict()),
        "tokenizer_sha256": tokenizer_sha256,
        "step": str(step),
        WEIGHTS_CRC: weights_crc32(state),
    }
    metadata.update({k: json.dumps(v) for k, v in extra.items()})
    if utf8_name(path):
        atomic_write(Path(path), lambda tmp: (save_file(state, tmp, metadata=metadata), _sort_metadata(tmp)))
    else:  # a name the library cannot take: serialised in memory, written by Python
        atomic_write(Path(path), lambda tmp: Path(tmp).write_bytes(_metadata_sorted(save(state, metadata=metadata))))


def _header_in_key_order(header: bytes) -> bytes:
    """A safetensors header (JSON) with its metadata in key order and the same length (padded with spaces, as the
    format pads); `header` itself where that cannot be. The library writes the metadata from a hash map, in an order
    that changes from process to process: two identical runs wrote equal tensors in files of different bytes."""
    try:
        parsed = json_value(header)
    except ValueError:
        return header
    metadata = parsed.get("__metadata__") if isinstance(parsed, dict) else None
    if not isinstance(metadata, dict):
        return header
    parsed["__metadata__"] = dict(sorted(metadata.items()))
    text = json.dumps(parsed, separators=(",", ":"), ensure_ascii=False).encode()
    return text.ljust(len(header)) if len(text) <= len(header) else header


def _metadata_sorted(data: bytes) -> bytes:
    """A serialised safetensors file with its metadata in key order (`_header_in_key_order`)."""
    size = int.from_bytes(data[:8], "little")
    return data[:8] + _header_in_key_order(data[8 : 8 + size]) + data[8 + size :]


def _sort_metadata(path: str) -> None:
    """Rewrite, in place, the header of the safetensors file `path` with its metadata in key order."""
    with open(path, "r+b") as f:
        size = int.from_bytes(f.read(8), "little")
        header = f.read(size)
        f.seek(8)
        f.write(_header_in_key_order(header))


def _header_metadata(path: str | Path) -> dict[str, str]:
    """The metadata of a safetensors file read by hand (the 8-byte header length, then the JSON header), for a
    path the library cannot take: it takes only UTF-8 names (a run in a folder named in Latin-1 was "not a readable
    safetensors file, or truncated or corrupt")."""
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        return _metadata_of(size, f.read(size) if 2 <= size <= 100_000_000 else b"")


def _metadata_of(size: int, header: bytes) -> dict[str, str]:
    """The `__metadata__` of a safetensors header of `size` bytes (said by the file's first 8), `header` read."""
    if not 2 <= size <= 100_000_000:
        raise SafetensorError(f"a header of {size} bytes")
    try:
        parsed = json_value(header)
    except ValueError as err:
        raise SafetensorError(f"its header is not JSON ({err})") from None
    metadata = parsed.get("__metadata__") if isinstance(parsed, dict) else None
    return metadata if isinstance(metadata, dict) else {}


def unreadable(path: str | Path, err: OSError) -> UnreadableFileError:
    """The error for a checkpoint file that `err` kept us from reading. safetensors calls every file it cannot open
    "No such file or directory", so a file that is there but not readable is said to be so."""
    denied = Path(path).exists() and not os.access(path, os.R_OK)
    return UnreadableFileError(
        f"{path} cannot be read ({'permission denied' if denied else err.strerror or err})",
        hint="check its permissions and the disk, then run the command again; the file was left as it is",
    )


def read_metadata(path: Path) -> dict[str, str]:
    """The safetensors metadata of a tfm checkpoint; CheckpointError if it is not one."""
    try:
        if utf8_name(path):
            with safe_open(str(path), framework="pt") as f:
                metadata = f.metadata() or {}
        else:
            metadata = _header_metadata(path)
    except OSError as err:
        raise unreadable(path, err) from None
    except SafetensorError as err:
        raise CheckpointError(
            f"{path} is not a readable safetensors file, or is truncated or corrupt ({err})",
            hint="pass a run directory or a .safetensors file written by tfm train; copy a damaged file again, "
            "or use another checkpoint of the run (checkpoints/step-*.safetensors)",
        ) from None
    if metadata.get("format") != "tfm" or "config" not in metadata or not metadata.get("tokenizer_sha256"):
        if (Path(path).parent / "generation_config.json").is_file():  # transformers' save_pretrained wrote it
            raise CheckpointError(
                f"{path} is a Hugging Face transformers model (e.g. a `tfm export --format huggingface`), not tfm's",
                hint="load it with transformers (MarianMTModel.from_pretrained), or give tfm the run it was exported from",
            )
        raise CheckpointError(f"{path} has no tfm metadata (config, tokenizer hash)", hint="was it written by tfm train?")
    return metadata


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file (as safetensors' `load_file` reads them), checked against the CRC-32
    saved in its metadata (`weights_crc32`; files written before it have none): DamagedWeightsError, naming the
    file, where they differ. The metadata and the tensors come from one opening of the file, so a file renamed
    over it meanwhile (a training replacing best.safetensors) is not taken for a damaged one.

    Read with the stop signals held: Ctrl-C or SIGTERM landing inside it raised KeyboardInterrupt in the Python
    calls its Rust code makes, which came out as "ValueError: could not determine the shape of object type
    'UntypedStorage'", a traceback instead of the interruption (an export stopped while it loaded its release to
    check it). Held, it is raised after the read."""
    with held_stop_signals():
        if utf8_name(path):
            with safe_open(str(path), framework="pt") as f:
                metadata = f.metadata() or {}
                state = {name: f.get_tensor(name) for name in f.keys()}
        else:
            with open(path, "rb") as f:  # a name the library cannot take: read whole, then parsed from memory
                data = f.read()
            state = load(data)
            size = int.from_bytes(data[:8], "little")
            metadata = _metadata_of(size, data[8:8 + size])
    expected = metadata.get(WEIGHTS_CRC)
    if expected is not None and (found := weights_crc32(state)) != expected:
        raise DamagedWeightsError(
            f"{path} is damaged: its tensors no longer match the CRC-32 saved with them ({found}, saved {expected}); "
            "a disk, copy or transfer error changed it after it was written (or a script of yours, that kept its "
            f"metadata: write their new one as {WEIGHTS_CRC}, tfm_cli.checkpoint.weights_crc32(tensors), or drop the key)",
            hint=_damaged_hint(Path(path)),
        )
    return state


def _damaged_hint(path: Path) -> str:
    """What to do about a damaged weights file, by where it is."""
    if path.parent.name == "checkpoints":
        run = path.parent.parent
        return (f"copy it again from a backup, or use another checkpoint of the run; to train on, delete it and "
                f"{state_path(path).name}: `tfm train --resume {shell_word(run)}` continues from the newest whole one left")
    if (path.parent / "checkpoints").is_dir():
        return (f"copy it again from where it came, or use a checkpoint of the run "
                f"({shell_word(path.parent / 'checkpoints')}/step-*.safetensors translate too)")
    return "copy it again from where it came (a backup, the machine that trained it), or export it again from its run"


def average_checkpoints(paths: Sequence[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the weights in `paths` (the paper averages the last 5 checkpoints)."""
    if not paths:
        raise CheckpointError("no checkpoints to average", hint="train for at least train.save_every steps")
    total: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    for path in paths:
        try:
            state = read_weights(path)
        except OSError as err:
            raise unreadable(path, err) from None
        except (SafetensorError, DamagedWeightsError) as err:  # an older checkpoint damaged since it was saved (a
            run = Path(path).parent.parent  # resume reads only the newest)
            what = str(err) if isinstance(err, DamagedWeightsError) else (
                f"{path} is not a readable safetensors file, or is truncated or corrupt ({err})")
            raise CheckpointError(
                f"{what}: it is one of the {len(paths)} checkpoints averaged into the final model",
                hint=f"delete it and its {state_path(Path(path)).name}, then `tfm train --resume {shell_word(run)}` "
                "writes the final model from the others",
            ) from None
        if not total:
            total = {name: t.double() for name, t in state.items()}
            dtypes = {name: t.dtype for name, t in state.items()}
            continue
        if state.keys() != total.keys() or any(t.shape != total[n].shape for n, t in state.items()):
            raise CheckpointError(f"{path} and {paths[0]} hold different tensors: they come from different models")
        for name, tensor in state.items():
            total[name] += tensor.double()
    return {name: (t / len(paths)).to(dtypes[name]) for name, t in total.items()}


@dataclass
class LoadedModel:
    """A model ready to translate, with the tokenizer it was trained with."""

    model: Transformer
    tokenizer: Tokenizer
    path: Path  # the weights file
    run_dir: Path
    step: int
    metadata: dict[str, str]


def load_model(
    spec: str | os.PathLike[str] | None, device: str | torch.device = "cpu", runs_root: str | os.PathLike[str] = "runs"
) -> LoadedModel:
    """Load weights + config + tokenizer and check that they belong together.

    Raises:
        CheckpointError: missing files, a corrupt checkpoint, or a tokenizer other than the one trained with.
    """
    for _ in range(4):
        path = resolve_weights(spec, runs_root)
        try:
            loaded = _load_model(path, device)
            if path.name == FINAL and (spec is None or Path(spec).is_dir()):
                _warn_if_trained_on(loaded)
            return loaded
        except _ReplacedWhileRead:  # best.safetensors replaced by a training between its metadata and its tensors
            continue
        except (CheckpointError, OSError, RuntimeError):
            # a run that is training prunes its oldest checkpoints: the newest one, chosen a moment ago, may be
            # gone before it is read (safetensors said so in a FileNotFoundError or RuntimeError): choose again
            if path.exists():
                raise
    raise CheckpointError(
        f"the checkpoints of {run_dir_of(path)} were deleted or replaced as fast as they were read (a run training with a "
        "small train.keep_last or train.eval_every?)",
        hint="translate once it has written its final model, or copy a checkpoint out of the run first",
    )


class _ReplacedWhileRead(Exception):
    """The weights file was replaced (renamed over) between reading its metadata and its tensors."""


def _warn_if_trained_on(loaded: LoadedModel) -> None:
    """A resume that trained on past the final model and was stopped leaves the final model of an earlier session:
    a run directory still means that one (its final model), but not silently."""
    steps = checkpoint_steps(loaded.run_dir)
    if steps and steps[-1][0] > loaded.step:
        newest, run = steps[-1], shell_word(loaded.run_dir)
        warnings.warn(
            f"{loaded.path} is the final model of step {loaded.step}, but {loaded.run_dir} has trained on to step "
            f"{newest[0]} since (a resume, stopped or still training): using the step-{loaded.step} model; `tfm train --resume "
            f"{run}` finishes the run, or give {shell_word(newest[1])} to use the newest checkpoint",
            stacklevel=3,
        )


def tokenizer_folder(path: Path) -> Path:
    """The run directory whose tokenizer.json goes with the weights file `path`: its own folder (its run's, for a
    checkpoint), or, where that has none and `path` is a symbolic link (`ln -s /shared/runs/x/model.safetensors
    fr-en.safetensors`), the folder of the file it links to."""
    run_dir = run_dir_of(path)
    if not (run_dir / "tokenizer.json").exists() and path.is_symlink():
        target = run_dir_of(path.resolve())
        if (target / "tokenizer.json").is_file():
            return target
    return run_dir


def _load_model(path: Path, device: str | torch.device) -> LoadedModel:
    metadata = read_metadata(path)
    run_dir = tokenizer_folder(path)
    tok_path = run_dir / "tokenizer.json"
    if tok_path.exists() and not tok_path.is_file():
        raise CheckpointError(
            f"{tok_path} is not a file (a directory?): {path} needs the tokenizer.json it was trained with",
            hint=f"put the run's tokenizer.json file at {tok_path.absolute()}",
        )
    if not tok_path.is_file():
        raise CheckpointError(
            f"{tok_path} is missing: {path} needs the tokenizer it was trained with",
            hint=f"copy the run's tokenizer.json into {run_dir.absolute()} (a .safetensors file finds it in its own "
            "folder; a checkpoint, in its run's folder; a symbolic link, beside the file it links to when not beside itself)",
        )
    tokenizer = Tokenizer.load(tok_path)
    expected = metadata["tokenizer_sha256"]
    if tokenizer.sha256 != expected:
        raise CheckpointError(
            f"{tok_path} does not match {path} (tokenizer hash {tokenizer.sha256[:12]}, checkpoint expects {expected[:12]})",
            hint="put back the tokenizer.json this model was trained with",
        )
    try:
        config = ModelConfig.from_dict(config_in_metadata(path, metadata))
    except (ValueError, TypeError) as err:
        raise CheckpointError(f"{path}: invalid model config in metadata ({err})") from None
    try:
        step = int(metadata.get("step", 0))
    except ValueError:
        raise CheckpointError(f"{path}: the step in its metadata, {metadata['step']!r}, is not an integer") from None
    if config.vocab_size != tokenizer.vocab_size:
        raise CheckpointError(
            f"{tok_path} has {tokenizer.vocab_size} tokens but {path} was trained with {config.vocab_size}",
            hint="put back the tokenizer.json this model was trained with",
        )
    _warn_if_config_differs(run_dir / "config.json", config, path)
    with torch.random.fork_rng(devices=[]):  # the random initialisation the weights replace: the caller's seed stays
        model = Transformer(config)
    load_state(model, read_weights(path), path)
    if read_metadata(path) != metadata:  # a training renamed a newer file over it meanwhile: the step said (and the
        raise _ReplacedWhileRead(path)  # config checked) were another file's than the weights read: read it again
    model.to(device).eval()
    return LoadedModel(model, tokenizer, path, run_dir, step, metadata)


def config_in_metadata(path: Path, metadata: dict[str, str], hint: str | None = None) -> dict[str, Any]:
    """The model config a checkpoint's metadata carries, as a dict: a CheckpointError naming `path` (with `hint`)
    where it is missing, not JSON (or nested too deeply to read) or not a JSON object."""
    try:
        data = json_value(metadata["config"])
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    except (KeyError, ValueError) as err:
        raise CheckpointError(f"{path}: invalid model config in metadata ({err})", hint=hint) from None
    return data


CONFIG_JSON_MAX = 1 << 20  # bytes; a model config is a few hundred


def _warn_if_config_differs(config_json: Path, config: ModelConfig, path: Path) -> None:
    """The weights carry their own config, which tfm uses; a config.json beside them that says otherwise (edited,
    or copied from another run) is what other tools read, so a release with it would build them another model."""
    if not os.path.lexists(config_json):  # a bare .safetensors file, or a run that has none: nothing to compare
        return
    theirs, problem = None, ""
    try:
        if not config_json.is_file():  # a FIFO would block the command, a link to /dev/zero fill the memory
            problem = "is not a regular file"
        elif (size := config_json.stat().st_size) > CONFIG_JSON_MAX:
            problem = f"is {human_size(size)}, not a model config"
        else:
            theirs = json_value(config_json.read_text(encoding="utf-8"))
            problem = "" if isinstance(theirs, dict) else "is not a JSON object"
    except OSError as error:
        problem = f"cannot be read ({error.strerror or error})"
    except ValueError as error:  # not UTF-8, or not JSON (empty, cut short, another file's bytes)
        problem = f"is not JSON ({str(error).splitlines()[0]})"
    if problem:
        warnings.warn(
            f"{config_json} {problem}: tfm uses the config the weights carry; other tools read config.json (an export, "
            "e.g. `tfm export RUN --format release`, writes one from the weights)",
            stacklevel=4,
        )
        return
    assert isinstance(theirs, dict)
    ours = config.to_dict()
    # as JSON writes them: "d_model 256 there, 256 in the weights" was the string "256" against the number
    differ = [f"{k} {json.dumps(theirs[k])} there, {json.dumps(v)} in the weights" for k, v in ours.items()
              if k in theirs and theirs[k] != v]
    if differ:
        more = f" and {len(differ) - 2} more" if len(differ) > 2 else ""
        warnings.warn(
            f"{config_json} describes another model than {path} ({'; '.join(differ[:2])}{more}): tfm uses the config "
            "the weights carry; other tools read config.json (an export, e.g. `tfm export RUN --format release`, "
            "writes one from the weights)",
            stacklevel=4,
        )


def _kind(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')} {list(t.shape)}"


def load_state(model: Transformer, state: dict[str, torch.Tensor], source: Path | str) -> None:
    """Load deduplicated weights into `model`; tied tensors need only one of their names present."""
    params = dict(model.state_dict())
    hint = "the weights and the model config come from different models (another shape, or another tokenizer's vocabulary)"
    for name, tensor in state.items():  # checked here: torch says a shape mismatch in one line per tensor
        want = params.get(name)
        if want is not None and (
            tensor.shape != want.shape or tensor.is_floating_point() != want.is_floating_point()
        ):  # an integer tensor would load, cast, as silently wrong weights
            raise CheckpointError(
                f"{source} does not fit the model config: {name} is {_kind(tensor)}, the config needs {_kind(want)}",
                hint=hint,
            )
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            # such weights translate every sentence to an empty line (or score NaN), without any error
            bad = int((~torch.isfinite(tensor)).sum())
            raise CheckpointError(
                f"{source}: {name} holds {bad:,} NaN or infinite value{'s' if bad != 1 else ''} of {tensor.numel():,}: "
                "these weights are unusable (a damaged file, or a run that diverged)",
                hint="use an earlier checkpoint (RUN/checkpoints/step-*.safetensors), or retrain, e.g. with a lower train.lr_factor",
            )
    missing, unexpected = model.load_state_dict(state, strict=False)
    really_missing = [
        name for name in missing if not any(params[name].data_ptr() == params[k].data_ptr() for k in state if k in params)
    ]
    if really_missing or unexpected:
        problems = ", ".join([f"missing {n}" for n in really_missing[:3]] + [f"unexpected {n}" for n in unexpected[:3]])
        raise CheckpointError(f"{source} does not fit the model config ({problems})", hint=hint)
