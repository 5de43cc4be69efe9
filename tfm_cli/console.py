"""The `tfm` console script: the app, imported under the same Ctrl-C rule as the commands.

Importing the app (typer, rich, every command's module) takes a few tenths of a second, during which nothing
of tfm's own handles Ctrl-C yet: a Ctrl-C then printed Python's traceback of whatever was being imported. Here it
ends the command as a Ctrl-C anywhere else does when nothing was started: exit status 130 (the shell's 128 +
SIGINT), nothing more to say.
"""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from tfm_cli.cli.app import main as run

        run()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
