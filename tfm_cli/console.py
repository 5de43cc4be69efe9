"""The `tfm` console script: the app, imported under the same Ctrl-C rule as the commands.

Importing the app (typer, rich, every command's module) takes a few tenths of a second, during which nothing
of tfm's own handles Ctrl-C yet: a Ctrl-C then printed Python's traceback of whatever was being imported. Here it
ends the command as a Ctrl-C anywhere else does when nothing was started: exit status 130 (the shell's 128 +
SIGINT), nothing more to say.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys


class NumpyBeforeTorch(importlib.abc.MetaPathFinder):
    """Imports numpy, in Python, just before the first `import torch`.

    torch imports numpy from its C code while it loads, and drops any error of that import without a word, a
    KeyboardInterrupt included: a Ctrl-C in those tenths of a second was lost (the command went on) and left numpy
    half made, so that a later `numpy.linalg` or `numpy.iterable` failed with a traceback, minutes on (`tfm train`
    at its optimizer or its curves; 8 of 60 random interrupts of `import torch` were lost, none of 60 with numpy first).
    Imported first, numpy is whole or the Ctrl-C ends the command here. Finds nothing itself."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        # It stays in sys.meta_path, which the import machinery is going through now. Without numpy, torch warns
        # and goes on, as it did before.
        if name == "torch" and "numpy" not in sys.modules:
            with contextlib.suppress(ImportError):
                import numpy  # noqa: F401
        return None


def numpy_before_torch() -> None:
    """Install `NumpyBeforeTorch` (once) where torch is not imported yet: in every process tfm starts as a program
    (this console script, `python -m tfm_cli`, the torchrun launcher of `--nproc-per-node`)."""
    if "torch" not in sys.modules and not any(isinstance(f, NumpyBeforeTorch) for f in sys.meta_path):
        sys.meta_path.insert(0, NumpyBeforeTorch())


def columns_zero_as_unset() -> None:
    """COLUMNS=0 (or a number below 1) as if unset: rich took it for a width of nothing, and every error, and the
    help, came out as blank lines (exit status 1 and not a word); Python's own `shutil.get_terminal_size` reads it
    as unset too, and asks the terminal."""
    import os

    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:  # unset, or no number (`--5`, `abc`): rich ignores those itself
        return
    if columns < 1:
        del os.environ["COLUMNS"]


def main() -> None:
    try:
        columns_zero_as_unset()  # before rich's consoles are made
        numpy_before_torch()
        from tfm_cli.cli.app import main as run

        run()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
