"""`tfm export`: turn a training run into artefacts others can use, each checked against the PyTorch model.

Formats (one module each; each writes, then verifies itself, and reports what it measured):

    release       model.safetensors (averaged/best weights, optionally fp16/bf16) + config + tokenizer + model card
    onnx          encoder and incremental decoder-step graphs (past K/V in and out), run by onnxruntime
    huggingface   a MarianMT directory for `transformers` (and, from it, CTranslate2's converter)

`run_export` is the one entry point the CLI and Python users share: it loads the weights, picks the sentences
to verify on, writes into a staging directory, and only then puts the export at its destination.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tfm_cli.errors import TfmError, shell_word
from tfm_cli.export.common import (
    EXPORT_INFO,
    Check,
    ExportCheckError,
    ExportResult,
    check_destination,
    staging,
)
from tfm_cli.files import TEXT_ERRORS, as_path

__all__ = ["FORMATS", "Check", "ExportCheckError", "ExportResult", "run_export", "default_out"]

# format -> "module:function"; the modules import their optional dependencies only when called.
FORMATS = {
    "release": "tfm_cli.export.release:export_release",
    "onnx": "tfm_cli.export.onnx:export_onnx",
    "huggingface": "tfm_cli.export.huggingface:export_huggingface",
}
OPTIONS = {"release": ("dtype",), "onnx": ("opset",), "huggingface": ()}  # each format's keyword options


def default_out(model: str | Path | None, fmt: str, runs_root: str | Path = "runs") -> Path:
    """exports/<run name>-<format>: beside the runs, never inside one."""
    from tfm_cli.runs import resolve_weights, run_dir_of

    return _out_for(run_dir_of(resolve_weights(model, runs_root)), fmt)


def _out_for(run: Path, fmt: str) -> Path:
    # the run's own name, also when given as `.` or `..` (they made exports/-release, and ..-release in a folder)
    return Path("exports") / f"{Path(os.path.abspath(run)).name}-{fmt}"


def _of_the_run(out: Path, model: Path | None, runs_root: str | os.PathLike[str]) -> bool:
    """Whether `out` is the run being exported, or inside it, or holds it: `staging` refuses it then, naming the run
    (the early check's "not empty, add --force" would invite the user to replace the run's own files)."""
    from tfm_cli.runs import resolve_weights, run_dir_of

    try:
        run = run_dir_of(resolve_weights(model, runs_root)).resolve()
    except (TfmError, OSError, ValueError, TypeError):  # the model's own error comes first, from its load
        return True
    where = out.resolve()
    return where == run or where.is_relative_to(run) or run.is_relative_to(where)


def run_export(
    fmt: str,
    model: str | os.PathLike[str] | None,
    out: str | os.PathLike[str] | None = None,
    *,
    force: bool = False,
    verify_lines: int = 200,
    runs_root: str | os.PathLike[str] = "runs",
    progress: Callable[[str, int], contextlib.AbstractContextManager[Callable[[int], None] | None]] | None = None,
    **options: Any,
) -> ExportResult:
    """Export a run's model in format `fmt` and verify it.

    Args:
        fmt: one of FORMATS.
        model: a run directory (its final model, else best, else newest checkpoint), a release directory, a
            .safetensors file written by tfm, or None for the newest run under `runs_root`.
        out: the export directory (default: exports/<run name>-<format>). A non-empty one needs `force`.
        force: replace a non-empty `out` (only after the new export is written and verified).
        verify_lines: how many dev sentences the translation checks use (0: the whole dev set).
        progress: release: called as `progress(what, sentences)` before each translating it does (the checks,
            and an fp16/bf16 release's scoring of the whole dev set for its model card); it may return a context
            manager around it that yields a function called with the sentences done after each batch (or None), or
            that function itself, or nothing (a plain callback); unused by the others.
        **options: format options (release: dtype; onnx: opset).

    Returns:
        The `ExportResult`, with every check it ran.

    Raises:
        TypeError: a `model` or `out` that is not a path (str or os.PathLike) or None, a `force` that is not a bool.
        TfmError: an unknown format, a missing or invalid model, a missing optional package (naming the extra),
            or a destination that would be overwritten without `force`.
        ExportCheckError: a failed check; nothing is installed, and the error's `result` holds every check.
    """
    # 123 failed inside pathlib, naming neither; any os.PathLike is a path
    model, out = (as_path(given, "run_export()", f"{name} as a path") for name, given in (("model", model), ("out", out)))
    if not isinstance(force, bool):  # force="no" is true: it replaced a non-empty `out` without being asked
        raise TypeError(f"run_export() takes force=True or False, not {force!r}")
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise TfmError(f"unknown export format {fmt!r}", hint=f"choose one of: {', '.join(FORMATS)}")
    unknown = sorted(set(options) - set(OPTIONS[fmt]))
    if unknown:  # e.g. dtype= for onnx: a TypeError from inside the exporter
        known = ", ".join(OPTIONS[fmt]) or "none"
        raise TfmError(f"{', '.join(unknown)} is not an option of the {fmt} export (its options: {known})",
                       hint="see run_export's docstring for each format's options")
    if progress is not None and not callable(progress):
        raise TypeError(f"run_export(progress=...) takes a function of (what, sentences), not {type(progress).__name__}")
    if isinstance(verify_lines, bool) or not isinstance(verify_lines, int) or verify_lines < 0:  # -1 meant "all"
        raise TfmError(f"verify_lines must be an integer >= 0 (0: the whole dev set), not {verify_lines!r}")
    if "opset" in options and options["opset"] is not None and (
        isinstance(options["opset"], bool) or not isinstance(options["opset"], int)
    ):  # "17" was "opset 17 is not supported"
        raise TfmError(f"opset must be an integer, not {options['opset']!r}")
    from tfm_cli import __version__
    from tfm_cli.checkpoint import load_model
    from tfm_cli.decoding import NonFiniteOutput
    from tfm_cli.export.common import probe_sources
    from tfm_cli.files import utf8_name

    if out is not None and os.path.exists(out) and not _of_the_run(Path(out), model, runs_root):
        check_destination(Path(out), force)  # a full --out said at once, not after the model's load (asked again there)
    loaded = load_model(model, "cpu", runs_root)
    if not utf8_name(loaded.path.absolute()):  # the export's files record where it came from, in UTF-8
        raise TfmError(
            f"{loaded.path} has a name that is not UTF-8 (bytes of another encoding), which the export's model "
            "card and tfm-export.json record",
            hint="give it a UTF-8 name (rename it, or link it: ln -s OLD NEW), then export that",
        )
    out = Path(out) if out is not None else _out_for(loaded.run_dir, fmt)  # not resolved again: a run training now may have pruned it
    module_name, func_name = FORMATS[fmt].split(":")
    exporter = getattr(importlib.import_module(module_name), func_name)
    sources = probe_sources(loaded.run_dir, verify_lines, loaded.tokenizer)
    with staging(out, force, protect=[loaded.run_dir]) as tmp:
        extra = {"progress": progress} if fmt == "release" and progress is not None else {}
        try:
            result: ExportResult = exporter(loaded, tmp, sources, **options, **extra)
        except NonFiniteOutput as err:  # the source weights give NaN: named, as tfm translate names them
            raise TfmError(f"{loaded.path}: {err}", hint=err.hint) from None
        result.path = out
        # name the final place: as the notes quote it for a shell too (`--out "ex-q'uote"` named the staging folder)
        result.notes = [note.replace(shell_word(tmp), shell_word(out)).replace(str(tmp), str(out)) for note in result.notes]
        info = {"format": fmt, "tfm_version": __version__, "step": loaded.step, **result.to_dict()}
        (tmp / EXPORT_INFO).write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n", encoding="utf-8", errors=TEXT_ERRORS)
        result.files.append(EXPORT_INFO)
        failed = [c for c in result.checks if not c.ok]
        if failed:
            c = failed[0]
            raise ExportCheckError(
                f"the {fmt} export failed its check: {c.name}: {c.value} (needs {c.limit}); nothing was written to {out}",
                result,
                hint="please report it: the export does not reproduce the PyTorch model",
            )
    return result
