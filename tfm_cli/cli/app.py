"""The `tfm` Typer app: one module per command, this file only wires them together and handles errors.

Problems the user can fix (TfmError) become one red line and exit status 1; usage errors (an unknown option, a
missing argument, a bad value: Click's) become the same red line, with the way to the command's help as its hint,
and exit status 2. So does an operating-system error about a named file (a disk that fills up, a path that turns unwritable while
a command runs), which the commands check for up front where they can, exit status 1. A reader of stdout that
went away (`tfm translate < in.txt | head -1`) ends the command quietly with status 141, as the shell reports
`seq 1000000 | head -1`. Anything else is a bug and keeps its traceback. TFM_DEBUG=1 shows the traceback of every error.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import inspect
import os
import select
import signal
import sys
from collections.abc import Iterator
from typing import Any

import typer

from tfm_cli import __version__
from tfm_cli.cli import bench, export, inspect_attn, tokenize, train, translate
from tfm_cli.cli.common import Command, Group, SentenceCommand, stderr_to_devnull, stopping_on_signals
from tfm_cli.errors import TfmError
from tfm_cli.files import TEXT_ERRORS, WRITE_ERRNOS


class StdoutGone(Exception):
    """The reader of stdout went away (`| head -1`): not an OSError, so that Click's own answer to a broken pipe
    (exit 1 from wherever the write was) lets it through to `main`."""


def _stdout_gone() -> bool:
    """Whether stdout is a pipe or socket whose reader has closed it (poll says POLLERR); True where poll is not
    there to ask."""
    if not hasattr(select, "poll"):
        return True
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


class _Group(Group):
    """The `tfm` group: a broken pipe on stdout, wherever a command meets it, becomes StdoutGone."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:  # the group's options: --version
        with _stdout_gone_raises():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: Any) -> Any:  # the commands
        with _stdout_gone_raises():
            return super().invoke(ctx)


@contextlib.contextmanager
def _stdout_gone_raises() -> Iterator[None]:
    try:
        yield
    except BrokenPipeError as error:
        if error.filename is None and _stdout_gone():
            raise StdoutGone from error
        raise


def _stdout_console_broken_pipe(console: Any) -> None:
    """rich's answer to a broken pipe, for a console on stdout (the help pages, tables): StdoutGone, where rich
    put /dev/null on stdout and exited 1. stderr's console (`common.err`) has its own: it goes quiet."""
    console.quiet = True
    raise StdoutGone


app = typer.Typer(
    name="tfm",
    cls=_Group,
    help="The Transformer of 'Attention Is All You Need' (Vaswani et al., 2017): tokenize, train, translate, inspect-attn, bench, export.\n\nResults go to stdout, progress and logs to stderr. Set TFM_DEBUG=1 for tracebacks.",
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
    """Options of `tfm` itself (the help shown is the app's `help`, above)."""


app.command("tokenize", cls=Command)(stopping_on_signals(tokenize.tokenize))
app.command("train", cls=Command)(train.train)
app.command("translate", cls=SentenceCommand)(translate.translate)
app.command("inspect-attn", cls=SentenceCommand)(stopping_on_signals(inspect_attn.inspect_attn))
app.add_typer(bench.app, name="bench")
app.command("export", cls=Command)(export.export)


def _reflowed(doc: str) -> str:
    """A docstring whose prose paragraphs are joined into one line each, for the terminal's width to wrap: Typer
    keeps a paragraph's line breaks, so at 80 columns a 110-column line ended in a one-word line. Indented
    paragraphs (the examples) keep theirs."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(p if p.startswith((" ", "-")) else " ".join(p.split("\n")) for p in paragraphs)


for _info in [*app.registered_commands, *bench.app.registered_commands]:
    if _info.help is None and _info.callback is not None and _info.callback.__doc__:
        _info.help = _reflowed(_info.callback.__doc__)


def _debug() -> bool:
    """TFM_DEBUG set to a true value (1, yes, true, on): `TFM_DEBUG=0` in a CI file, meant to turn it off, showed
    tracebacks."""
    return os.environ.get("TFM_DEBUG", "").strip().lower() not in ("", "0", "no", "false", "off", "n", "f")


MIN_TORCH = (2, 11)  # pyproject's floor: 2.3-2.9 cannot index the corpus's uint16 ids on the CPU


def _older_torch() -> str | None:
    """The installed torch's version where it is older than MIN_TORCH (pip's --no-deps, an environment that keeps
    its own torch): `tfm train` failed there with a traceback in its first batch. None where it is new enough or
    not found (read from its metadata: torch itself is not imported)."""
    import re
    from importlib import metadata

    try:
        version = metadata.version("torch")
    except (metadata.PackageNotFoundError, ValueError):
        return None
    numbers = re.match(r"(\d+)\.(\d+)", version or "")
    return version if numbers and tuple(map(int, numbers.groups())) < MIN_TORCH else None


def main() -> None:
    """Console-script entry point."""
    if sys.stdout is None:  # started with stdout closed (>&-): every command's results go there, said after the work
        from tfm_cli.cli.common import report_error

        if sys.stderr is not None:
            report_error(TfmError("standard output is closed: there is nowhere to write the results", hint="redirect it instead, e.g. > out.txt or > /dev/null"))
        sys.exit(1)
    if sys.stderr is None:  # started with stderr closed (2>&-): progress and logs go nowhere, the work goes on
        stderr_to_devnull()
    _utf8_output()
    try:
        os.getcwd()
    except FileNotFoundError:  # deleted under the shell: torch's MKL then stopped every command with a "FATAL ERROR"
        from tfm_cli.cli.common import report_error

        report_error(TfmError("the current directory no longer exists (it was deleted after the shell entered it)",
                              hint="cd to a directory that exists, then run the command again"))
        sys.exit(1)
    older = _older_torch()
    if older is not None:
        from tfm_cli.cli.common import report_error

        floor = ".".join(map(str, MIN_TORCH))
        report_error(TfmError(
            f"tfm needs PyTorch {floor} or newer; this Python has torch {older}",
            hint=f"pip install 'torch>={floor}' (a CPU-only machine: its CPU build, --index-url https://download.pytorch.org/whl/cpu)",
        ))
        sys.exit(1)
    from rich.console import Console

    Console.on_broken_pipe = _stdout_console_broken_pipe  # type: ignore[method-assign]
    try:
        status = app(standalone_mode=False)
    except StdoutGone:
        _reader_went_away()
    except TfmError as error:
        if _debug():
            raise
        from tfm_cli.cli.common import report_error

        report_error(error)
        sys.exit(1)
    except OSError as error:
        if error.errno == errno.EPIPE and error.filename is None and _stdout_gone():  # met outside a command
            _reader_went_away()
        if _debug() or not (error.filename or error.errno in WRITE_ERRNOS):
            raise
        from tfm_cli.cli.common import report_error

        if error.filename:
            report_error(TfmError(f"{error.filename}: {error.strerror or error}", hint="check the path, its permissions and the free space"))
        else:  # the results on stdout (the files a command writes are named in their own errors)
            _stdout_to_devnull()
            report_error(TfmError(f"writing the output failed: {error.strerror or error}", hint="check the free space where stdout goes"))
        sys.exit(1)
    except MemoryError:  # Python's own allocations refused (a memory limit, ulimit -v): was a traceback
        if _debug():
            raise
        from tfm_cli.cli.common import report_error

        report_error(TfmError(
            "out of memory: the system refused this process more memory",
            hint="free memory, lift a limit on this process's memory (ulimit -v, a container's), or ask for less: "
                 "a smaller model, train.max_tokens or --batch-tokens",
        ))
        sys.exit(1)
    except Exception as error:  # Click's usage errors and aborts: standalone_mode=False hands them here
        if _is_a(error, "ClickException"):
            _report_click_error(error)
            sys.exit(error.exit_code)  # type: ignore[attr-defined]
        if _is_a(error, "Abort"):  # Click's name for a Ctrl-C (or end of input) no command caught itself
            if isinstance(error.__cause__, KeyboardInterrupt):
                sys.exit(130)  # as the commands that stop on Ctrl-C: the shell's 128 + SIGINT, nothing more to say
            from tfm_cli.cli.common import report_error

            report_error(TfmError("aborted: the input ended"))
            sys.exit(1)
        raise
    sys.exit(status if type(status) is int else 0)  # a typer.Exit(code), Ctrl-C's 130 included


def _is_a(error: BaseException, name: str) -> bool:
    """By class name, for the Click that this Typer carries (0.29 has its own copy)."""
    return any(cls.__name__ == name for cls in type(error).__mro__)


def _report_click_error(error: Any) -> None:
    """A usage error as the one red line of every other error, with the way to the command's help as its hint
    (Typer's boxed panel, with the usage line above it, was five lines; Click's "did you mean" stays in the
    message). `tfm` and `tfm bench` alone print their help (Click's NoArgsIsHelpError), and nothing more."""
    from tfm_cli.cli.common import report_error

    if type(error).__name__ == "NoArgsIsHelpError":
        return
    ctx = getattr(error, "ctx", None)
    hint = None
    if _is_a(error, "UsageError"):  # (the parser's own errors, "Option '--device' requires an argument.", have no ctx)
        hint = f"see {ctx.command_path if ctx is not None else _command_path(sys.argv[1:])} --help"
    message = " ".join(error.format_message().split())  # one line, whatever the terminal's width
    if _is_a(error, "NoSuchOption") and ctx is not None:  # another toolkit's option: what tfm does instead
        words, at = [], ctx
        while at.parent is not None:  # the subcommand's words, whatever the root is called (tfm, python -m tfm_cli)
            words.insert(0, at.info_name)
            at = at.parent
        known = _OTHER_TOOLKITS.get((" ".join(words), error.option_name))
        if known is not None:
            said, hint = known
            message = f"No such option: {error.option_name}: {said}"
    report_error(TfmError(message, hint=hint))


# Options of fairseq, OpenNMT-py, Marian and Hugging Face that tfm has otherwise: Click's "did you mean" named
# the nearest spelling, another setting ("--input (Possible options: --output)", --output being for scoring runs).
_STDIN = ("tfm translate reads the sentences to translate from stdin, one a line", "tfm translate --model RUN < input.txt > output.txt")
_STDOUT = ("tfm translate writes the translations to stdout, one a line (--output is for scoring runs)",
           "tfm translate --model RUN < input.txt > output.txt")
_MODEL = ("tfm translate's model (a run, a checkpoint, a release or an export) is --model", "tfm translate --model runs/tiny < input.txt")
_RECIPE = ("tfm train takes its recipe (a YAML file) as its first argument", "tfm train recipes/tiny.yaml (overrides after it: train.max_steps=2000)")
_OUT = ("tfm train's run directory is --out", "tfm train RECIPE --out runs/mine")
_OTHER_TOOLKITS: dict[tuple[str, str], tuple[str, str]] = {
    **{("translate", name): _STDIN for name in ("--input", "-i", "--src", "-src", "--source", "--input-file", "--input_file")},
    **{("translate", name): _STDOUT for name in ("-o", "--out", "--output-file", "--output_file")},
    **{("translate", name): _MODEL for name in ("--path", "--checkpoint", "--ckpt", "--model-path", "--model_path", "-model")},
    **{("train", name): _RECIPE for name in ("--config", "-c", "-config", "--recipe", "--config-file", "--config_file")},
    **{("train", name): _OUT for name in ("--save-dir", "--save_dir", "--output-dir", "--output_dir", "-save_model", "--model-dir")},
}


def _command_path(args: list[str]) -> str:
    """`tfm bench translate` for the arguments `bench translate --model`: the command words at their head."""
    command, words = typer.main.get_command(app), ["tfm"]
    for word in args:
        commands = getattr(command, "commands", None)
        if commands is None:  # a command: its arguments follow
            break
        if word.startswith("-"):  # the group's own options (--help, --version) take no value
            continue
        if word not in commands:
            break
        command = commands[word]
        words.append(word)
    return " ".join(words)


def _reader_went_away() -> None:
    """End as the shell reports `seq 1000000 | head -1`: quietly, status 128 + SIGPIPE."""
    _stdout_to_devnull()
    sys.exit(128 + getattr(signal, "SIGPIPE", 13))


def _stdout_to_devnull() -> None:
    """/dev/null on stdout, or Python's final flush of what is left in its buffer fails again, with a traceback."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _utf8_output() -> None:
    """Results and messages are written in UTF-8, as every input is read (stdin, corpora, references), whatever
    the locale or PYTHONIOENCODING say: with an ASCII or Latin-1 stdout, the first result holding a character it
    lacks (a translation, a piece's '▁') was a UnicodeEncodeError traceback, after the work was done. A path whose
    bytes the locale could not read is written as those bytes where they are UTF-8, else with backslash escapes
    (`files.TEXT_ERRORS`): the output stays UTF-8 (raw, it was invalid JSON) and never stops a command
    (reconfigure's "strict" was a traceback at the first status line naming such a path, under LC_ALL=C with
    PYTHONUTF8=0)."""
    for stream in (sys.stdout, sys.stderr):
        if stream is None or not hasattr(stream, "reconfigure"):  # closed, or replaced by a caller
            continue
        try:
            is_utf8 = codecs.lookup(stream.encoding or "").name == "utf-8"
        except LookupError:
            is_utf8 = False
        try:
            if not is_utf8:
                stream.reconfigure(encoding="utf-8", errors=TEXT_ERRORS)
            elif stream.errors != TEXT_ERRORS:
                stream.reconfigure(errors=TEXT_ERRORS)
        except OSError:  # "Illegal seek": a stream that has been written to and cannot say where it is
            pass
