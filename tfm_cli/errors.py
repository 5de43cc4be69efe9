"""The project's own error type.

Library code raises `TfmError` (or a subclass) for anything the user can fix: a bad recipe, a corrupt corpus
line, a checkpoint that does not match its tokenizer. The CLI turns it into one red line plus a hint on stderr
and exit status 1; any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import shlex


class TfmError(Exception):
    """A problem the user can fix. `str(err)` is the one-line message; `hint` says what to do."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class RecipeError(TfmError):
    """One or more problems in a recipe; `problems` lists each as a line."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = list(problems)
        n = len(self.problems)
        head = f"{source} has {n} problem{'s' if n != 1 else ''}:"
        super().__init__(head + "".join(f"\n  {p}" for p in self.problems))


class CorpusError(TfmError):
    """A corpus file that cannot be read: the message names the file and the line."""


class CheckpointError(TfmError):
    """A run directory or checkpoint that is missing, incomplete or inconsistent."""


def shell_word(path: str | os.PathLike) -> str:
    """`path` as it must be typed in a command a message suggests: quoted when it holds spaces or shell characters
    (`tfm translate --model 'my runs/tiny'`), as is otherwise."""
    return shlex.quote(os.fspath(path))
