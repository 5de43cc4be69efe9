"""What every export format shares: the result it reports, the checks it ran, optional imports, the
sentences it verifies on, and the staging directory that keeps a failed or interrupted export from touching
what is already at the destination.

An exporter is a function `export_X(loaded, out, sources, **options) -> ExportResult`: it writes its files into
`out` (an empty staging directory), checks them against the PyTorch model it came from, and returns what it
measured. `tfm_cli.export.run_export` picks the weights, stages, calls it, and installs the result.
"""

from __future__ import annotations

import contextlib
import glob
import importlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from tfm_cli.errors import TfmError, install_hint
from tfm_cli.files import (
    WRITE_ERRNOS,
    DirectoryLock,
    current_umask,
    json_value,
    nearest_existing,
    remove_empty,
    utf8_name,
    write_failure,
)
from tfm_cli.runs import EXPORT_INFO as EXPORT_INFO  # tfm-export.json, kept with the run's file names


@dataclass
class Check:
    """One comparison of an export against the PyTorch model.

    Attributes:
        name: what was compared, e.g. "encoder output, max |diff| (8 random batches)".
        value: the measured figure, e.g. "3.1e-06" or "200/200 identical".
        ok: whether it met `limit`.
        limit: the rule it was held to, e.g. "<= 1e-4" or "all identical"; "" for a figure reported only.
    """

    name: str
    value: str
    ok: bool
    limit: str = ""


@dataclass
class ExportResult:
    """What an exporter wrote and what it verified."""

    format: str
    path: Path  # the export directory (its final place once installed)
    source: Path  # the weights file it was made from
    files: list[str] = field(default_factory=list)  # relative names, in the order written
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # how to use it, e.g. the command that loads it

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format, "path": str(self.path), "source": str(self.source), "files": self.files,
            "checks": [asdict(c) for c in self.checks], "notes": self.notes, "ok": self.ok,
        }


class ExportCheckError(TfmError):
    """An export that does not reproduce its model; `result` holds every check, so the failure can be shown."""

    def __init__(self, message: str, result: ExportResult, hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.result = result


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """Import an optional dependency, or fail with one line naming the extra that installs it.

    onnxruntime is imported with its usage telemetry off (ORT_DISABLE_TELEMETRY=1, unless the environment sets it):
    where it cannot keep its device id under the cache folder (HOME unset or read-only, as in many CI containers)
    it printed "[W:onnxruntime:Default, telemetry_1ds.cc] Failed to persist telemetry device ID; using an
    in-memory identifier" on import, into the output of every export and onnxruntime translation.
    """
    if module.split(".")[0] == "onnxruntime":
        os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    try:
        return importlib.import_module(module)
    except ImportError:
        raise TfmError(
            f"{purpose} needs the Python package '{module.split('.')[0]}', which is not installed",
            hint=install_hint(extra),
        ) from None


def max_abs_diff(a, b) -> float:
    """Largest |a - b| over two arrays or tensors of the same shape (compared in float64)."""
    import numpy as np

    a = a.detach().cpu().double().numpy() if hasattr(a, "detach") else np.asarray(a, dtype=np.float64)
    b = b.detach().cpu().double().numpy() if hasattr(b, "detach") else np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    return float(np.abs(a - b).max()) if a.size else 0.0


def agreement(name: str, expected: Sequence[str], got: Sequence[str], minimum: float = 1.0) -> Check:
    """A check that `got` equals `expected` line by line (at least a `minimum` share of lines; 1.0 = all)."""
    same = sum(e == g for e, g in zip(expected, got, strict=True))
    n = len(expected)
    first = next((i for i, (e, g) in enumerate(zip(expected, got, strict=True)) if e != g), None)
    value = f"{same}/{n} identical"
    if first is not None:
        value += f" (first difference: line {first + 1}: {_short(expected[first])!r} vs {_short(got[first])!r})"
    limit = "all identical" if minimum >= 1.0 else f">= {minimum:.0%} identical"
    return Check(name, value, n > 0 and same >= minimum * n, limit)  # nothing compared is nothing checked


def _short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


class ProbeSentences(list):
    """The sentences an export is checked on; `what` says where they come from ("dev", "training", "made-up"),
    for the names of the checks."""

    def __init__(self, lines, what: str) -> None:
        super().__init__(lines)
        self.what = what


def probe_sources(run_dir: Path | None, n: int, tokenizer=None) -> ProbeSentences:
    """Source sentences to verify an export on: the first `n` of the run's dev set (n <= 0: all of it).

    Falls back to the training corpus, then (no corpus readable, e.g. a release moved to another machine)
    to pseudo-sentences decoded from a fixed sequence of token ids, which exercise the graphs just as well.
    The result's `what` says which.
    """
    from tfm_cli.corpus import read_pairs
    from tfm_cli.recipe import load_recipe

    recipe_file = Path(run_dir) / "recipe.yaml" if run_dir is not None else None
    if recipe_file is not None and recipe_file.is_file():
        with contextlib.suppress(TfmError, OSError, ValueError):
            recipe = load_recipe(recipe_file)
            for spec, what in ((recipe.data.dev, "dev"), (recipe.data.train, "training")):
                if not spec:
                    continue
                lines: list[str] = []
                with contextlib.suppress(TfmError, OSError, ValueError):
                    for _, src, _tgt in read_pairs(spec):
                        if src.strip():
                            lines.append(src)
                        if 0 < n <= len(lines):
                            break
                if lines:
                    return ProbeSentences(lines, what)
    if tokenizer is None:
        raise TfmError(f"no sentences to verify on: {recipe_file} names no readable corpus")
    return ProbeSentences(pseudo_sentences(tokenizer, n if n > 0 else 200), "made-up")


def pseudo_sentences(tokenizer, count: int, longest: int = 20) -> list[str]:
    """`count` pseudo-sentences of 3 to `longest` learned pieces (fewer if `longest` is below 3), decoded from a
    fixed random sequence of token ids: they exercise an export's graphs as well as real sentences do."""
    import random

    from tfm_cli.tokenizer import FIRST_PIECE_ID  # learned pieces: no specials, no lone bytes

    rng = random.Random(0)
    high = max(tokenizer.vocab_size, FIRST_PIECE_ID + 1)
    longest = max(1, longest)
    return [
        tokenizer.decode([rng.randrange(FIRST_PIECE_ID, high) for _ in range(rng.randint(min(3, longest), longest))])
        for _ in range(count)
    ]


def corpus_lines(spec: Any) -> list[str]:
    """Where the training data came from, and the bundled corpus's attribution paragraph when it is one (each
    corpus of a mixture, with its weight)."""
    from tfm_cli.corpus import BUNDLED_PREFIX, bundled_dir, corpus_parts, describe, is_mixture

    if is_mixture(spec):
        lines = []
        for part in corpus_parts(spec):
            first, *rest = corpus_lines(part.spec)
            lines += [first.replace("- training data:", f"- training data (weight {part.weight:g}):", 1), *rest]
        return lines
    if not isinstance(spec, str) or not spec.startswith(BUNDLED_PREFIX):
        return [f"- training data: `{describe(spec)}` (a user corpus: give its attribution when you publish)"]
    name = spec[len(BUNDLED_PREFIX) :].split("/")[0]
    lines = [f"- training data: `{spec}`, the corpus bundled with tfm"]
    readme = bundled_dir() / name / "README.md"
    text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    title = next((line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("# ")), "")
    if title:
        lines.append(f"- corpus: {title}")
    match = re.search(r"\*\*Attribution[^*]*\*\*\s*(\"[^\"]+\")", text)
    if match:
        lines.append("- attribution (required when you redistribute or publish): " + " ".join(match.group(1).split()))
    licence = re.search(r"(CC-BY[^,(\n]*)", text)
    if licence:
        lines.append(f"- licence of the corpus: {licence.group(1).strip()}")
    return lines


def training_data_lines(run_dir: Path) -> list[str]:
    """A model card's "Data" lines for the run in `run_dir`: its training corpus, with the bundled corpus's
    attribution and licence (which whoever publishes the model must give), as its recipe names it."""
    from tfm_cli.recipe import load_recipe

    recipe_file = Path(run_dir) / "recipe.yaml"
    if not recipe_file.is_file():
        return ["- training data: not recorded (no recipe.yaml)"]
    try:
        spec = load_recipe(recipe_file).data.train
    except (TfmError, OSError, ValueError):
        return ["- training data: not recorded (its recipe.yaml does not load)"]
    return corpus_lines(spec) if spec else ["- training data: not recorded in its recipe.yaml"]


def _refuse_non_utf8(out: Path) -> None:
    if not utf8_name(out.absolute()):  # the export records its path in UTF-8 JSON, and safetensors takes no other
        raise TfmError(
            f"the export folder {out} has a name that is not UTF-8 (bytes of another encoding)",
            hint="choose an --out whose name is UTF-8 (e.g. ASCII letters, digits, '-', '_')",
        )


def check_destination(out: Path, force: bool) -> Path:
    """Refuse an --out an export may not take the place of; return the folder it is written to (a link's target).

    Read-only; `staging` asks it once the partials of killed exports are swept, and `run_export` before loading the
    model where `out` exists (the sweep changes nothing there), so a full folder is said before the model's load.
    """
    _refuse_non_utf8(out)
    resolved = out.resolve()
    if out.is_symlink() and not out.exists():  # the export was made, then its rename failed: "...partial: Not a directory"
        raise TfmError(
            f"{out} is a symbolic link to {os.readlink(out)}, which does not exist",
            hint="remove the link or create its target, or choose another --out directory",
        )
    if out.is_symlink():  # a link to a folder (on a bigger disk, say): the export goes where it points, the link stays
        out = resolved
    if out.exists() and not out.is_dir():
        raise TfmError(f"{out} exists and is not a directory", hint="choose another --out directory")
    if out.is_dir() and os.path.ismount(out):  # an empty volume (docker -v): said after every check had run, as
        # "filled by another process"; the export is written beside `out` and renamed into its place, and a mount
        # point cannot be renamed over
        raise TfmError(
            f"{out} is a mount point, which an export cannot take the place of (it is written beside its folder, "
            "then renamed into place)",
            hint=f"give a folder inside it, e.g. --out {out / 'export'}",
        )
    if out.is_dir() and ((out / "checkpoints").is_dir() or (out / "metrics.jsonl").is_file()):
        # another run's checkpoints and trainer states: --force is for replacing an export, not a training run
        raise TfmError(
            f"{out} is a training run (it holds checkpoints/ or metrics.jsonl): an export never replaces one, even with --force",
            hint="choose another --out directory, e.g. exports/NAME",
        )
    if out.is_dir() and any(out.iterdir()) and not force:
        raise TfmError(f"{out} is not empty", hint="choose another --out directory, or add --force to replace it")
    if out.is_dir() and Path.cwd().resolve().is_relative_to(resolved):
        # `--out . --force` would replace the folder the user works in (and everything in it) with the export
        raise TfmError(f"{out} is the current directory, or holds it", hint="choose another --out directory")
    if out.is_dir() and force:
        _check_replaceable(out)
    return out


@contextlib.contextmanager
def staging(out: Path, force: bool, protect: Sequence[Path] = ()) -> Iterator[Path]:
    """An empty directory beside `out` to write into; on success it takes `out`'s place in one rename.

    A non-empty `out` is refused unless `force`, and even then unless it is an earlier export holding nothing
    else (`_check_replaceable`); with `force` the old contents are removed only once the new export is complete
    and verified. `protect` (the run being exported) may never be the destination, nor may
    any other training run (a folder with checkpoints/ or metrics.jsonl).
    On any error the staging directory is removed and `out` is left as it was.
    """
    out = Path(out)
    _refuse_non_utf8(out)
    # first: a killed --force's previous export goes back to `out` before `out` is looked at (beside the folder a
    # link points to, where a --force through the link put it aside)
    _sweep_partials(Path(os.path.realpath(out)) if out.is_symlink() else out)
    resolved = out.resolve()
    for path in protect:
        p = Path(path).resolve()
        if resolved == p or p.is_relative_to(resolved):
            raise TfmError(f"{out} holds the model being exported", hint="choose another --out directory")
        earlier_export = out.is_dir() and (out / EXPORT_INFO).is_file()  # RUN/release written by tfm export
        if resolved.is_relative_to(p) and out.exists() and (not out.is_dir() or any(out.iterdir())) and not earlier_export:
            # e.g. RUN/checkpoints: --force would delete the run's checkpoints and trainer states
            raise TfmError(
                f"{out} is part of the run being exported ({path}): replacing it would delete the run's files",
                hint="choose an --out outside the run, e.g. exports/NAME",
            )
    out = check_destination(out, force)
    existing = nearest_existing(out.absolute().parent)
    if not existing.is_dir():
        raise TfmError(f"{out} cannot be written: {existing} is a file, not a folder", hint="choose another --out directory")
    made = [p for p in [out.absolute().parent, *out.absolute().parent.parents] if not p.exists()]
    _sweep_partials(out)  # (again: `out` may have been a link, now the folder it points to)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.{os.getpid()}.", suffix=".partial", dir=out.parent))
    except OSError as err:
        remove_empty(made)
        raise TfmError(f"{out} cannot be written: {err.strerror or err}", hint="choose a writable --out directory") from None
    lock = DirectoryLock(out)  # held until the export is installed: a `tfm train --out` there meanwhile is refused
    try:
        if out.is_dir():
            _lock_or_refuse(lock, out)
        tmp.chmod(0o777 & ~current_umask())  # mkdtemp makes 0700; an export is meant to be shared
        yield tmp
        mode = 0o666 & ~current_umask()  # some writers (tempfile-based ones) leave 0600: an export is for others
        for path in tmp.rglob("*"):
            if path.is_file():
                path.chmod(mode)
        if out.exists() and force:
            _lock_or_refuse(lock, out, meanwhile=True)  # (made while this export ran, by a training: its lock)
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.{os.getpid()}.", suffix=".old", dir=out.parent))
            try:
                out.rename(old / out.name)
                tmp.rename(out)
            except BaseException:
                if (old / out.name).exists() and not out.exists():
                    (old / out.name).rename(out)  # put the previous export back
                shutil.rmtree(old, ignore_errors=True)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            _install_new(tmp, out, lock)
    except BaseException as error:
        failure = write_failure(error, out)  # before the staging folder goes: a full disk is still full
        shutil.rmtree(tmp, ignore_errors=True)
        remove_empty(made)  # a failed export leaves no new folders behind either
        if failure is None or failure.errno not in WRITE_ERRNOS:
            raise
        kept = f"{out} is as it was" if out.exists() else "nothing was written"
        raise TfmError(
            f"{out} could not be written: {failure.strerror}; {kept}",
            hint="free some space there (or check its permissions), or choose another --out",
        ) from error
    finally:
        lock.release()


def _lock_or_refuse(lock: DirectoryLock, out: Path, meanwhile: bool = False) -> None:
    """Take the lock of the folder `out` (the one `tfm train` holds on its run from its first moment), or raise
    TfmError: an empty `out` may be a run starting (building its tokenizer), which an export took over, the
    run's files then written beside the export's card, and the run's lock left on the folder put aside."""
    try:
        taken = lock.acquire()
    except OSError:  # a folder that cannot be opened to lock: the checks and the rename say what is wrong
        return
    if not taken:
        raise TfmError(
            f"{out} is in use by another process right now (a training starting in it, or an export)"
            + (" since this export began; the export was not installed" if meanwhile else ""),
            hint="choose another --out directory",
        )


def _check_replaceable(out: Path) -> None:
    """Refuse to replace a non-empty `out` that holds anything an earlier export did not write: --force replaces
    an export (the files its tfm-export.json lists, and that file), never other files (a folder of notes, a
    training run one level down, a home directory), which the replacement would delete with it."""
    entries = sorted(p.name for p in out.iterdir())
    if not entries:
        return
    try:
        info = json_value((out / EXPORT_INFO).read_text(encoding="utf-8"))
        written = {EXPORT_INFO, *(Path(f).parts[0] for f in info["files"])}
    except (OSError, ValueError, TypeError, KeyError, IndexError):  # no export record, or not one tfm wrote
        written = None
    if written is None:
        raise TfmError(
            f"{out} is not an earlier export (no readable {EXPORT_INFO}) and holds {_some(entries)}: --force replaces an "
            "earlier export only, never other files",
            hint="choose another --out directory, or move those files away first",
        )
    others = [name for name in entries if name not in written and not (name == "__pycache__" and _bytecode_of(out / name, written))]
    if others:
        raise TfmError(
            f"{out} holds {_some(others)} besides the earlier export: --force would delete it with the export",
            hint="move it out of that folder first, or choose another --out directory",
        )


def _bytecode_of(cache: Path, written: set[str]) -> bool:
    """Whether the folder `cache` (a `__pycache__`) holds only what Python compiled of the export's own .py files
    (`sentences.cpython-311.pyc` beside an ONNX export's translate.py, by a Python that writes bytecode): part of
    the export, replaced with it, where --force refused the folder once translate.py had run."""
    stems = {Path(name).stem for name in written if name.endswith(".py")}
    # Python's names for them: sentences.cpython-311.pyc, sentences.cpython-311.opt-1.pyc
    compiled = re.compile(rf"(?:{'|'.join(map(re.escape, stems))})\.[a-z]+-[0-9]+(?:\.opt-[12])?\.pyc") if stems else None
    try:
        return compiled is not None and cache.is_dir() and not cache.is_symlink() and all(
            f.is_file() and not f.is_symlink() and compiled.fullmatch(f.name) for f in cache.iterdir()
        )
    except OSError:
        return False


def _some(names: Sequence[str]) -> str:
    """'a', 'a and b', or 'a, b and 3 more'."""
    shown = [repr(n) for n in names[:2]]
    if len(names) > 2:
        return f"{shown[0]}, {shown[1]} and {len(names) - 2} more"
    return " and ".join(shown)


def _install_new(tmp: Path, out: Path, lock: DirectoryLock) -> None:
    """Rename the staged export to `out`, which was missing or empty when the export began (no --force).

    Another export to the same `out` (a second `tfm export` started alongside) may have installed itself there
    meanwhile: the rename, which never replaces a non-empty folder, then fails, and that export is kept rather
    than silently replaced by this one without --force. A `tfm train --out` that made `out` meanwhile holds its
    lock: refused too (`lock`, held since the start when `out` was there).
    """
    if out.is_dir():
        _lock_or_refuse(lock, out, meanwhile=True)
        with contextlib.suppress(OSError):
            out.rmdir()  # the empty folder that was there (only an empty one goes)
    try:
        tmp.rename(out)
    except OSError as err:
        if not (out.exists() or out.is_symlink()):
            raise
        if out.is_dir() and not out.is_symlink() and not any(out.iterdir()):  # still empty: it could not be replaced
            raise TfmError(
                f"{out} (an empty folder) cannot be replaced by the export: {err.strerror or err}",
                hint=f"give --out a folder that does not exist yet, e.g. {out / 'export'}",
            ) from err
        raise TfmError(
            f"{out} was filled by another process (another tfm export?) while this export ran; it is kept as that "
            "process left it, and this export was not installed",
            hint="export again with --force to replace it, or choose another --out directory",
        ) from err


def _sweep_partials(out: Path) -> None:
    """Clear what earlier exports to `out` left when their process was killed (SIGKILL, a machine that went
    down), named .NAME.PID.XXXX.partial (a staging folder: removed) and .NAME.PID.XXXX.old (the export a --force
    was replacing: put back where `out` is missing, the kill having come between the two renames, else removed).
    Those of a live process are left."""
    if not out.parent.is_dir():
        return
    # the whole name: `.exp.*.old` also matches `.exp.20241129.<pid>.XXXX.old`, another --out's (exp.20241129)
    ours = re.compile(rf"\.{re.escape(out.name)}\.([0-9]+)\.[^./]+\.(partial|old)")
    for stale in sorted(out.parent.glob(f".{glob.escape(out.name)}.*"), key=lambda p: p.name.endswith(".old")):
        found = ours.fullmatch(stale.name)
        if found is None or int(found[1]) == os.getpid():
            continue
        try:
            os.kill(int(found[1]), 0)
        except ProcessLookupError:
            if found[2] == "old" and (stale / out.name / EXPORT_INFO).is_file() and not os.path.lexists(out):
                with contextlib.suppress(OSError):
                    (stale / out.name).rename(out)
            shutil.rmtree(stale, ignore_errors=True)
        except OSError:  # alive, but another user's
            pass


