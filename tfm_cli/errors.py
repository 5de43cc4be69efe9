"""The project's own error type.

Library code raises `TfmError` (or a subclass) for anything the user can fix: a bad recipe, a corrupt corpus
line, a checkpoint that does not match its tokenizer. The CLI turns it into one red line plus a hint on stderr
and exit status 1; any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import re
import shlex


class TfmError(Exception):
    """A problem the user can fix. `str(err)` is the one-line message; `hint` says what to do."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


def install_hint(extra: str) -> str:
    """How to install one of tfm's optional extras: from the checkout, as the README installs tfm (PyPI's "tfm" is
    another project), or its packages by name, read from the installed metadata."""
    from importlib import metadata

    try:
        requires = metadata.requires("tfm") or []
    except metadata.PackageNotFoundError:
        requires = []
    marker = f'extra == "{extra}"'
    packages = [re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0] for r in requires if marker in r]
    packages = [p for p in dict.fromkeys(packages) if p != "tfm"]
    alone = f" (or pip install {' '.join(packages)})" if packages else ""
    return f'pip install -e ".[{extra}]" in the tfm checkout{alone}'


class RecipeError(TfmError):
    """One or more problems in a recipe; `problems` lists each as a line. `from_overrides` says, problem by problem,
    whether a `key=value` override (not the recipe `source`) is to blame; such a problem starts with the override."""

    def __init__(self, source: str, problems: list[str], from_overrides: list[bool] | None = None) -> None:
        self.source = source
        self.problems = list(problems)
        self.from_overrides = list(from_overrides) if from_overrides is not None else [False] * len(self.problems)
        n = len(self.problems)
        s = "s" if n != 1 else ""
        if self.only_overrides:
            head = f"the override{s} given with {source} ha{'ve' if n != 1 else 's'} {n} problem{s}:"
        else:
            head = f"{source} has {n} problem{s}:"
        self.head = head
        super().__init__(head + "".join(f"\n  {p}" for p in self.problems))

    @property
    def only_overrides(self) -> bool:
        """Every problem is an override's: the recipe file itself is fine."""
        return bool(self.problems) and all(self.from_overrides)


class RecipeNotFoundError(RecipeError):
    """A recipe file that does not exist, said as every other missing path is (`recipe X does not exist`, with
    what to give instead as the hint), not as a problem of the file (`X: no such file`)."""

    def __init__(self, source: str, message: str, hint: str | None = None) -> None:
        super().__init__(source, [])
        TfmError.__init__(self, message, hint)


class CorpusError(TfmError):
    """A corpus file that cannot be read: the message names the file and the line."""


class CheckpointError(TfmError):
    """A run directory or checkpoint that is missing, incomplete or inconsistent."""


class UnreadableFileError(CheckpointError):
    """A checkpoint file the system would not let us read (permissions, an I/O error): what it holds may be whole,
    so unlike a damaged file's, its message never advises deleting it."""


def human_size(n: int) -> str:
    """Bytes for a person: 512 B, 40.0 KiB, 3.2 MiB, 1,536.0 GiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n} B"


def shell_word(path: str | os.PathLike) -> str:
    """`path` as it must be typed in a command a message suggests: quoted when it holds spaces or shell characters
    (`tfm translate --model 'my runs/tiny'`), as is otherwise; a name holding a line break or another control
    character in bash's $'...' quoting (`$'runs/a\\nb'`), which keeps the message on one line and still types it."""
    text = os.fspath(path)
    if not any(_unsafe(c) for c in text):
        return shlex.quote(text)
    # a character escaped is written as its bytes in the file system's encoding, which is what bash's \xHH gives back
    # (U+0085 is \xc2\x85 in UTF-8; a byte the locale could not decode, held as a surrogate, is that byte)
    return "$'" + "".join(
        _ANSI_C.get(c) or ("".join(f"\\x{b:02x}" for b in os.fsencode(c)) if _unsafe(c) else c) for c in text
    ) + "'"


_ANSI_C = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _unsafe(c: str) -> bool:
    """A control character (C0, DEL, C1), or a byte of a name the locale could not decode (a lone surrogate)."""
    return ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or 0xD800 <= ord(c) < 0xE000
