"""The `tfm` Typer app: one module per command, this file only wires them together and handles errors.

Problems the user can fix (TfmError) become one red line and exit status 1; usage errors exit 2 (Click); so
does an operating-system error about a named file (a disk that fills up, a path that turns unwritable while
a command runs), which the commands check for up front where they can. Anything else is a bug and keeps its
traceback. TFM_DEBUG=1 shows the traceback of every error.
"""

from __future__ import annotations

import codecs
import contextlib
import inspect
import os
import sys

import typer

from tfm_cli import __version__
from tfm_cli.cli import bench, export, inspect_attn, tokenize, train, translate
from tfm_cli.cli.common import SentenceCommand
from tfm_cli.errors import TfmError
from tfm_cli.files import WRITE_ERRNOS

app = typer.Typer(
    name="tfm",
    help="The Transformer of 'Attention Is All You Need' (Vaswani et al., 2017): tokenize, train, translate, inspect-attn, bench, export.",
    no_args_is_help=True,
    add_completion=False,  # static scripts live in completions/ (see the README)
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tfm {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """The Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as a command-line toolkit.

    Results go to stdout, progress and logs to stderr. Set TFM_DEBUG=1 for tracebacks.
    """


app.command("tokenize")(tokenize.tokenize)
app.command("train")(train.train)
app.command("translate", cls=SentenceCommand)(translate.translate)
app.command("inspect-attn", cls=SentenceCommand)(inspect_attn.inspect_attn)
app.add_typer(bench.app, name="bench")
app.command("export")(export.export)


def _reflowed(doc: str) -> str:
    """A docstring whose prose paragraphs are joined into one line each, for the terminal's width to wrap: Typer
    keeps a paragraph's line breaks, so at 80 columns a 110-column line ended in a one-word line. Indented
    paragraphs (the examples) keep theirs."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(p if p.startswith((" ", "-")) else " ".join(p.split("\n")) for p in paragraphs)


for _info in [*app.registered_commands, *bench.app.registered_commands]:
    if _info.help is None and _info.callback is not None and _info.callback.__doc__:
        _info.help = _reflowed(_info.callback.__doc__)


def main() -> None:
    """Console-script entry point."""
    if sys.stdout is None:  # started with stdout closed (>&-): every command's results go there, said after the work
        from tfm_cli.cli.common import report_error

        if sys.stderr is not None:
            report_error(TfmError("standard output is closed: there is nowhere to write the results", hint="redirect it instead, e.g. > out.txt or > /dev/null"))
        sys.exit(1)
    _utf8_output()
    try:
        app()
    except TfmError as error:
        if os.environ.get("TFM_DEBUG"):
            raise
        from tfm_cli.cli.common import report_error

        report_error(error)
        sys.exit(1)
    except OSError as error:
        if os.environ.get("TFM_DEBUG") or not (error.filename or error.errno in WRITE_ERRNOS):
            raise
        from tfm_cli.cli.common import report_error

        if error.filename:
            report_error(TfmError(f"{error.filename}: {error.strerror or error}", hint="check the path, its permissions and the free space"))
        else:  # the results on stdout (the files a command writes are named in their own errors)
            with contextlib.suppress(OSError):  # or Python's final flush of stdout fails again, with a traceback
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            report_error(TfmError(f"writing the output failed: {error.strerror or error}", hint="check the free space where stdout goes"))
        sys.exit(1)


def _utf8_output() -> None:
    """Results and messages are written in UTF-8, as every input is read (stdin, corpora, references), whatever
    the locale or PYTHONIOENCODING say: with an ASCII or Latin-1 stdout, the first result holding a character it
    lacks (a translation, a piece's '▁') was a UnicodeEncodeError traceback, after the work was done."""
    for stream in (sys.stdout, sys.stderr):
        if stream is None or not hasattr(stream, "reconfigure"):  # closed, or replaced by a caller
            continue
        try:
            is_utf8 = codecs.lookup(stream.encoding or "").name == "utf-8"
        except LookupError:
            is_utf8 = False
        if not is_utf8:
            stream.reconfigure(encoding="utf-8")
