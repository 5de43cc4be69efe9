"""What every command shares: where output goes, how tables and errors look, common options.

Results go to stdout, progress and logs to stderr, so `tfm translate < in.txt > out.txt` works in a pipe.
Tables are rich tables on a terminal, and plain tab-separated lines when stdout is piped or NO_COLOR is set.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import select
import signal
import stat
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import typer
from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from tfm_cli.corpus import line_count as line_count  # (the commands take it from here)
from tfm_cli.errors import RecipeError, TfmError, shell_word
from tfm_cli.files import TEXT_ERRORS, WRITE_ERRNOS, home_path
from tfm_cli.signals import swap_handlers


class _StderrConsole(Console):
    """stderr carries progress and logs, no result: a reader of it that went away (`2>&1 | tee log` whose tee was
    killed, `2>&1 | head`) must not stop the work. rich's own answer to a broken pipe put /dev/null on *stdout*
    and raised SystemExit(1) wherever the write was: a training run ended at its next log line without saving
    the steps since its last checkpoint, and a translation into a file stopped half-way, exit 1 without a word.
    Here the console goes quiet and the work goes on."""

    def on_broken_pipe(self) -> None:
        self.quiet = True

    def _check_buffer(self) -> None:  # (rich's one place of writing: it catches a broken pipe only)
        try:
            super()._check_buffer()
        except OSError as error:  # stderr on a full disk (`2>log`) or a failing device: the logs go nowhere, the work goes on
            if error.errno not in (*WRITE_ERRNOS, errno.EBADF):  # (not EAGAIN: a full pipe for a moment is no reason)
                raise
            del self._buffer[:]
            stderr_to_devnull()


def stderr_to_devnull() -> None:
    """A closed stderr (Python's sys.stderr None), or one that cannot be written (a full disk under `2>log`), becomes
    /dev/null on descriptor 2, as for a reader of stderr that went away: training ended at its first progress line
    ('NoneType' object has no attribute 'isatty'; "No space left on device", blamed on stdout), exit 1 with a
    half-made run and no word. On descriptor 2 itself, so the processes a command starts (torchrun's) get one."""
    fd = os.open(os.devnull, os.O_WRONLY)
    if fd != 2:
        os.dup2(fd, 2)
        os.close(fd)
    sys.stderr = open(2, "w", encoding="utf-8", errors=TEXT_ERRORS, closefd=False)  # noqa: SIM115 (the process's own stream)


# stderr: progress, logs, errors. stdout: results only.
err = _StderrConsole(stderr=True, highlight=False)
out = Console(highlight=False)

DEVICE_HELP = "Where to run: auto (CUDA when available), cpu, cuda, or cuda:N (one GPU)."
JSON_HELP = "Print results as JSON for scripts instead of a table."


def device_name(value: str) -> str:
    """--device's check: a name that is no device (`--device tpu`) is a usage error, exit status 2, as a bad
    choice of any other option is; a GPU asked for and missing is the machine's (exit status 1, later)."""
    from tfm_cli.runtime import check_device_name

    try:
        check_device_name(value)
    except TfmError as error:
        raise typer.BadParameter(f"{error.message}: {error.hint}") from None
    return "cpu" if value == "cpu:0" else value  # torch's name of the CPU, as the Python API takes it


def fancy_stdout() -> bool:
    """Rich tables only for a person at a terminal; plain text for pipes, files and NO_COLOR."""
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ


def fancy_stderr() -> bool:
    """Live progress bars only at a terminal that can redraw a line: not for NO_COLOR, nor for TERM=dumb (Emacs'
    shell), where rich draws no live display at all, so a training showed nothing until its end."""
    return sys.stderr.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM", "").lower() not in ("dumb", "unknown")


_piped_tables = 0  # tables this process has written as tab-separated text


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A table on stdout: rich when at a terminal, else a header line and tab-separated rows (a blank line between
    two such tables, so that a reader can tell where the next header is)."""
    global _piped_tables
    if fancy_stdout():
        # escaped: titles and cells hold the user's text (a sentence, a token, a path), where rich would read
        # "[bold]" as style and "[/]" as a MarkupError traceback
        table = Table(title=_escape(title), title_justify="left")
        for i, column in enumerate(columns):
            table.add_column(_escape(column), justify="left" if i == 0 else "right")
        for row in rows:
            table.add_row(*(_escape(_cell(v, human=True)) for v in row))
        width = Measurement.get(out, out.options.update(max_width=1_000_000), table).maximum  # unclamped
        if width <= out.width:
            if cell_len(title) > width:  # rich wrapped a long title to the table's width: a sentence given to
                # `tokenize --encode` was a column of words above a narrow table, cut inside a Thai or CJK word
                table.title = None
                out.print(_escape(title), style="italic", soft_wrap=True)
            out.print(table)
            return
        # Wider than the terminal: rich cut every cell to "entro…", "0.…" (inspect-attn --summary at 80 columns);
        # the rows as a pipe gets them, whole, under the title, instead
        out.print(_escape(title), style="italic", soft_wrap=True)
    if _piped_tables:
        print()
    _piped_tables += 1
    print("\t".join(columns))
    for row in rows:
        print("\t".join(_cell(v, human=False) for v in row))


def _cell(value: Any, human: bool) -> str:
    """Numbers with thousands separators for people; plain for pipes. Pass ids as str to keep them bare."""
    if isinstance(value, float):
        return (f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}") if human else f"{value:.6g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}" if human else str(value)
    return str(value)


# Line breaks to Unicode (and Python's str.splitlines) that JSON leaves unescaped: inside a string (a source line
# holding U+2028) they split one JSON line in two for a reader that splits on them. Escaped, the text is the same.
_UNICODE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def print_json(data: Any) -> None:
    """One JSON document on stdout, on one line (UTF-8 kept readable; U+0085, U+2028 and U+2029 escaped). NaN and
    infinities, which JSON has no words for (Python would write the invalid `NaN`), are written as null."""
    try:
        text = json.dumps(data, ensure_ascii=False, allow_nan=False)
    except ValueError:
        text = json.dumps(_finite(data), ensure_ascii=False, allow_nan=False)
    text = text.translate(_UNICODE_BREAKS) + "\n"
    # In pieces: one write of a big document (inspect-attn's maps, megabytes) that a reader leaves half-way through
    # (`| head -c 100`) came back partly done, without the broken pipe, and the command exited 0 having written half.
    start = 0
    while start < len(text):
        end = min(len(text), start + JSON_PIECE)
        while end < len(text) and "\udc80" <= text[end - 1] <= "\udcff":  # a name's bytes the locale could not read:
            end += 1  # in one piece, which TEXT_ERRORS reads together (split, `é` came out as \udcc3\udca9)
        sys.stdout.write(text[start:end])
        sys.stdout.flush()
        start = end


JSON_PIECE = 1 << 16  # characters per write of print_json


def _finite(data: Any) -> Any:
    if isinstance(data, float):
        return data if data == data and abs(data) != float("inf") else None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    return data


def info(message: str) -> None:
    """A status line on stderr."""
    err.print(one_line(message), markup=False, soft_wrap=True)


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/yellow] {_escape(message)}", soft_wrap=True)


# Control characters but tab and newline (C0, DEL, C1), as \x1b: a sentence or file name holding ESC, echoed in a
# status line or an error (`source: ...`), set the terminal's title or colours instead of being seen.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c not in (0x09, 0x0A)}


def visible(text: str) -> str:
    """`text` with its control characters written out (\\x1b), for the terminal."""
    return text.translate(_CONTROLS)


def one_line(text: str) -> str:
    """`visible(text)` with its line breaks written out too (\\n): a status line, warning or error stays one line
    when a name in it holds a line break (a folder called "a<newline>b" split `Error: ...` in two)."""
    return visible(text).replace("\n", "\\n")


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(one_line(text))


def report_error(error: TfmError) -> None:
    """The one red line (plus an indented hint) that replaces a traceback for problems the user can fix."""
    lines = [str(error) or error.__class__.__name__]  # one line: a line break in it is a name's (one_line)
    hint = error.hint
    if isinstance(error, RecipeError) and len(error.problems) == 1:  # one problem: one line, file first
        # unless a command-line override is to blame: the problem starts with it, and the file is not named
        lines = [error.problems[0] if error.only_overrides else f"{error.source}: {error.problems[0]}"]
    elif isinstance(error, RecipeError) and error.problems:  # a line each: the file's (or overrides') head, problems
        lines = [error.head, *(f"  {p}" for p in error.problems)]
    if isinstance(error, RecipeError) and hint is None and any(error.from_overrides):
        hint = _override_hint(error)
    err.print(f"[bold red]Error:[/bold red] {_escape(lines[0])}", soft_wrap=True)
    for line in lines[1:]:
        err.print(_escape(line), soft_wrap=True)
    if hint:
        err.print(f"[dim]hint:[/dim] {_escape(hint)}", soft_wrap=True)


def _override_hint(error: RecipeError) -> str:
    """Where a command-line override's problem is fixed: in the command, not in the recipe file."""
    if error.only_overrides:
        one = len(error.problems) == 1
        it = "it" if one else "them"
        return (f"the override{'' if one else 's'} {'is' if one else 'are'} on the command line (key=value after the "
                f"recipe), not in {error.source}: correct {it} in the command, or leave {it} out")
    return (f"the problems starting with 'override' are the command line's (key=value after the recipe): correct them "
            f"in the command; the others are in {error.source}")


_EMPTY_PATH = "is empty (an unset shell variable?): give a path"


def given_path(value: str) -> Path:
    """A typer `parser` for an option or argument that names a file or a folder: an empty value (`--out "$RUN"`
    with RUN unset) is refused, where Path("") would quietly be the current directory. A leading `~` is the home
    folder, as in a recipe's paths: the shell leaves it as it is after `=` (`--out=~/runs/x` made a folder `~` in
    the current directory, and the messages' `~/runs/x` read as the home's)."""
    if not value.strip():
        raise typer.BadParameter(_EMPTY_PATH)
    _refuse_a_line_end(value)
    return home_path(value)


def _refuse_a_line_end(value: str) -> None:
    """A path ending in a carriage return (a shell script saved with Windows line ends: `--out runs/x\\r` made a
    folder whose name ends in an invisible character) or a line feed is refused."""
    if value.endswith(("\r", "\n")):
        raise typer.BadParameter(
            f"{value!r} ends with a {'carriage return' if value.endswith(chr(13)) else 'line feed'}, which no name means to: "
            "a script saved with Windows line ends (convert it: dos2unix SCRIPT)? Give the path without it"
        )


def file_path(example: str) -> Callable[[str], Path]:
    """A typer `parser` for an option that names an output file: a path that ends with "/" (or is "." or
    empty) names a folder, which Path() would quietly turn into a file name (`--out newdir/` wrote a file
    called newdir). `example` is the file name the message suggests inside it."""

    def parse(value: str) -> Path:
        if not value.strip():
            raise typer.BadParameter(_EMPTY_PATH)
        _refuse_a_line_end(value)
        if value.endswith(("/", os.sep)) or Path(value).name in ("", ".", ".."):
            inside = os.path.join(value or ".", example)
            raise typer.BadParameter(f"{value!r} names a folder, not a file: give a file path, e.g. {inside}")
        return home_path(value)  # (`~`, as `given_path` reads it)

    return parse


def check_output_file(
    path: Path,
    option: str,
    inputs: Sequence[Path | str] = (),
    keeps: Callable[[Path], bool] | None = None,
    what: str = "",
    reads_stdin: bool = False,
    example: str = "out",
) -> Path:
    """Refuse, before any work is done, an output file that cannot be written or whose writing would destroy
    something: a directory, one of the command's own inputs, or (with `keeps`) an existing file that `keeps`
    does not recognise as a previous output of the same kind (`what` names that kind). An input is the same file
    by device and inode (a hard link, a symlink, another spelling of the path); with `reads_stdin`, the file
    behind standard input (`< file`) is an input too. Probes the nearest existing
    folder on the way with a temporary file, so an unwritable place is said now, not after the work; the missing
    folders are left to the writer to create, so that a command that fails first leaves none behind.
    """
    try:
        path.exists()
    except OSError as error:  # a name on the way longer than the file system takes (ENAMETOOLONG), a loop of links
        raise TfmError(f"{option} {path} cannot be written: {error.strerror or error}", hint=f"give {option} another path") from None
    if path.is_dir():
        raise TfmError(f"{option} {path} is a directory", hint=f"give {option} a file path, e.g. {path / example}")
    if path.is_symlink() and not path.exists() and not written_file(path).parent.is_dir():
        # "could not be written: No such file or directory", after the work, said nothing of the link
        raise TfmError(
            f"{option} {path} is a broken symbolic link (to {os.readlink(path)}), whose folder does not exist",
            hint=f"make that folder, or give {option} another path",
        )
    if path.exists():
        for given in inputs:
            if _same_file(path, Path(given)):
                raise TfmError(
                    f"{option} {path} is also an input of this command: writing it would destroy it",
                    hint=f"give {option} another path",
                )
        if _is_stdout(path):  # `--output out.txt > out.txt`: two writers of one file, each from its own offset
            raise TfmError(
                f"{option} {path} is also where standard output goes (> {path}): what the command prints and what it "
                "writes there would overwrite each other",
                hint=f"give {option} another path, or send standard output elsewhere",
            )
        if reads_stdin and _is_stdin(path):
            raise TfmError(
                f"{option} {path} is the file the input is read from (standard input): writing it would destroy it",
                hint=f"give {option} another path",
            )
        held = _held_by_a_model(written_file(path)) if path.is_file() else None
        if held is not None:  # `--html runs/tiny/model.safetensors` replaced a trained model with a page, without a word
            raise TfmError(
                f"{option} {path} already exists and is {held}: writing it would destroy it",
                hint=f"give {option} another path (or delete the file first, if it is of no use)",
            )
        if keeps is not None and path.is_file() and not keeps(path):  # (a device or a pipe is written in place)
            raise TfmError(
                f"{option} {path} already exists and is not {what}: it is left as it is",
                hint=f"give {option} another path, or delete the file first",
            )
    if path.exists() and not path.is_file():  # a device or a pipe (/dev/stdout, a FIFO) is written in place
        if not os.access(path, os.W_OK):
            raise TfmError(f"{option} {path} cannot be written: permission denied", hint=f"give {option} a writable path")
        return path
    from tfm_cli.files import name_too_long, nearest_existing

    existing = nearest_existing(written_file(path).absolute().parent)  # where the file (a link's, named) will be
    try:
        if not existing.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, f"{existing} is a file, not a folder")
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".tfm-write-check-"):
            pass
    except OSError as error:
        raise TfmError(f"{option} {path} cannot be written: {error.strerror or error}", hint=f"give {option} a writable path") from None
    if why := name_too_long(path, existing):  # found by the write at the end, after all the work
        raise TfmError(f"{option} {path} cannot be written: {why}", hint=f"give {option} a shorter name")
    return path


def say_which_weights(model: Path | None, weights: Path) -> None:
    """Name, on stderr, the weights a command translates with when the user did not name the file: the newest
    run's (no --model), or a checkpoint of a run given by its directory that has no final model yet (still
    training, or stopped): a score of such a run said nothing of the step it measured."""
    from tfm_cli.runs import BEST, CHECKPOINTS

    if model is None:
        info(f"using {weights} (the most recent run; choose another with --model)")
    elif Path(model).is_dir() and (weights.parent.name == CHECKPOINTS or weights.name == BEST):
        which = "its best checkpoint" if weights.name == BEST else "its newest checkpoint"
        info(f"using {weights}: {model} has no final model yet (still training, or stopped), so {which}")


def check_utf8(text: str, what: str) -> str:
    """`text` from the command line as UTF-8, whatever the locale says, as every input is read; refused when it is
    not valid UTF-8 (its bad bytes arrive as surrogate escapes, which the tokenizer cannot take); `what` names it
    in the message. Under an ASCII locale with Python's UTF-8 mode off (`LC_ALL=C PYTHONUTF8=0`), Python decoded
    the arguments' bytes as ASCII, so "Ça" arrived as escapes too: their bytes are read again as UTF-8."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError as e:
        bad = e.start
    with contextlib.suppress(UnicodeEncodeError, UnicodeDecodeError):
        return text.encode(sys.getfilesystemencoding(), "surrogateescape").decode("utf-8")
    raise TfmError(
        f"{what} is not valid UTF-8 (a bad byte at character {bad + 1})",
        hint="give UTF-8 text; check the terminal's encoding (e.g. LANG=C.UTF-8)",
    )


def names_a_file(text: str) -> bool:
    """True when a sentence argument is the path of an existing file: the user meant its lines
    (`tfm translate input.fr`)."""
    try:
        return "\n" not in text and Path(text).is_file()
    except (OSError, ValueError):  # a sentence too long for a file name, or one holding a NUL
        return False


def _compression(first_line: bytes) -> tuple[str, str] | None:
    """(name, the command that streams it) of a compressed stdin, by its first bytes (the corpus reader's table);
    None for a line of text (bzip2's magic bytes are ASCII: a text line may start with them). Zip's are the control
    characters of no text (PK\x03\x04), and a stored zip's first line can be valid UTF-8 (`zip` of a text file:
    the magic, then a newline byte): it was translated as text, then stopped at its NUL bytes on line 2."""
    from tfm_cli.corpus import GZIP_MAGIC, OTHER_COMPRESSION

    if first_line.startswith(b"PK\x03\x04"):
        return "zip", "unzip -p"
    try:
        if b"\x00" not in first_line and first_line.decode("utf-8"):
            return None
    except UnicodeDecodeError:
        pass
    if first_line.startswith(GZIP_MAGIC):
        return "gzip", "zcat"
    for magic, (kind, _, stream) in OTHER_COMPRESSION.items():
        if magic.match(first_line):
            return kind, stream
    return None


def typed_command(name: str, drop: str | None = None) -> str:
    """The command line as the user typed it (`tfm translate --model runs/tiny`), quoted for the shell, for a hint
    that pipes into it or redirects into it: a hint with a bare `tfm translate` would run another model (the most
    recent run) and lose the other options. `drop` leaves out one argument (a file given as the sentence);
    `tfm NAME` when the process was not started as that command."""
    import shlex

    args = sys.argv[1:]
    if args[:1] != [name]:
        return f"tfm {name}"
    if drop is not None and drop in args[1:]:
        at = len(args) - 1 - args[::-1].index(drop)
        args = args[:at] + args[at + 1 :]
    return shlex.join(["tfm", *args])


MAX_LINE_BYTES = 1 << 20  # a line of stdin longer than this is no sentence (the model takes 1,023 tokens of one)


def stdin_lines(command: str) -> Iterator[str]:
    """Lines of stdin, decoded strictly as UTF-8 so that a bad byte is reported with its line; `command` (e.g.
    "tfm translate") is the one the hints pipe into. A line over `MAX_LINE_BYTES` is refused when that many bytes
    have come without its end (`< /dev/zero` read on until memory ran out)."""
    number = 0
    while raw := sys.stdin.buffer.readline(MAX_LINE_BYTES + 1):
        number += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            _stdin_line(number, raw, command)  # binary data (a NUL byte) is named as such first
            raise _line_too_long(number, command)
        yield _stdin_line(number, raw, command)


def _line_too_long(number: int, command: str) -> TfmError:
    return TfmError(
        f"stdin line {number} runs over {MAX_LINE_BYTES // (1 << 20)} MiB without a line end: that is no sentence "
        "(the model translates the first 1,023 tokens of a line)",
        hint=f"give one sentence a line; to translate the start of a long text, cut it, e.g. head -c 100000 input.txt | {command}",
    )


class StdinLines:
    """stdin's lines, checked as `stdin_lines` checks them, read from its file descriptor so that `ready()` can tell
    whether the next line is there without waiting for the writer. `tfm translate` uses it to translate what has
    been read whenever reading on would wait: a co-process that writes one line and waits for its translation, or
    `tail -f`, gets each translation at once, while a file piped in is still read in large batches. At most the
    line being read and one read's worth of bytes (64 KiB) are held beyond the lines handed out."""

    READ_BYTES = 1 << 16

    def __init__(self, command: str) -> None:
        self._command = command
        self._fd = sys.stdin.fileno()
        self._buffer = b""
        self._pos = 0  # where the next line starts in _buffer
        self._eof = False
        self._number = 0

    @staticmethod
    def usable() -> bool:
        """Whether stdin is a file descriptor that select() can watch (not on Windows, where select takes sockets
        only; not a replaced sys.stdin without one)."""
        if os.name == "nt" or sys.stdin is None:
            return False
        try:
            sys.stdin.fileno()
        except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is an OSError and a ValueError
            return False
        return True

    def __iter__(self) -> StdinLines:
        return self

    def __next__(self) -> str:
        while True:
            end = self._buffer.find(b"\n", self._pos)
            if end >= 0:
                raw, self._pos = self._buffer[self._pos : end + 1], end + 1
                break
            if self._eof:
                if self._pos >= len(self._buffer):
                    raise StopIteration
                raw, self._pos = self._buffer[self._pos :], len(self._buffer)
                break
            self._read()  # waits for the writer when nothing is there
        self._number += 1
        return _stdin_line(self._number, raw, self._command)

    def _check_partial(self) -> None:
        """Refuse the line being read, before its end has come, when it is already binary data (a NUL byte) or
        longer than any sentence: `tfm translate < /dev/zero` read on, holding it all, until memory ran out."""
        end = self._buffer.find(b"\n", self._pos)
        length = (end if end >= 0 else len(self._buffer)) - self._pos  # of the next line, without its line end
        if length > MAX_LINE_BYTES or (end < 0 and length > self.READ_BYTES and self._buffer.find(b"\x00", self._pos) >= 0):
            line = self._buffer[self._pos : self._pos + length]
            _stdin_line(self._number + 1, line, self._command)  # a NUL byte (binary data), UTF-16 or compressed data
            raise _line_too_long(self._number + 1, self._command)

    def ready(self) -> bool:
        """Whether the next line, or the end of the input, can be had without waiting."""
        while self._buffer.find(b"\n", self._pos) < 0 and not self._eof:
            try:
                readable = select.select([self._fd], [], [], 0)[0]
            except (OSError, ValueError):  # a descriptor select() cannot watch: say "no", so nothing waits on it
                return False
            if not readable:
                return False
            self._read()
        return True

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._fd, self.READ_BYTES)
                break
            except BlockingIOError:  # a non-blocking descriptor (shared with a writer that set O_NONBLOCK): wait
                select.select([self._fd], [], [])
        if not data:
            self._eof = True
        self._buffer = self._buffer[self._pos :] + data  # what is left of the last read, and the new bytes
        self._pos = 0
        self._check_partial()


def _stdin_line(number: int, raw: bytes, command: str) -> str:
    """stdin's line `number`, as read (line end included), checked and decoded: UTF-16, a compressed stream, a NUL
    byte, invalid UTF-8 and CR-only line ends are a TfmError naming the line."""
    if number == 1 and raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise TfmError("stdin is UTF-16 text, not UTF-8", hint="re-encode the input, e.g. iconv -f utf-16 -t utf-8")
    compressed = _compression(raw) if number == 1 else None
    if compressed:
        kind, tool = compressed
        raise TfmError(f"stdin is {kind}-compressed, not text", hint=f"decompress it on the way in, e.g. {tool} input | {command}")
    if b"\x00" in raw:
        if number == 1:  # UTF-16 without a byte-order mark (Windows tools write it): not "binary data"
            from tfm_cli.recipe import utf16_without_mark

            code = utf16_without_mark(raw)
            if code:
                raise TfmError(f"stdin is {code.upper()} text (a NUL byte beside each letter), not UTF-8",
                               hint=f"re-encode the input, e.g. iconv -f {code} -t utf-8")
        raise TfmError(
            f"stdin line {number}: a NUL byte at byte {raw.index(0) + 1}: binary data, not text",
            hint="pipe in UTF-8 text, one sentence per line",
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        from tfm_cli.corpus import ENCODINGS, WESTERN_OR_NOT, reads_as_western

        raise TfmError(
            f"stdin line {number}: invalid UTF-8 at byte {e.start + 1}",
            hint="re-encode the input as UTF-8, e.g. "
            + (f"iconv -f cp1252 -t utf-8, {WESTERN_OR_NOT}" if reads_as_western(raw) else f"iconv -f ENCODING -t utf-8, {ENCODINGS}"),
        ) from None
    if "\r" in text.removesuffix("\n").removesuffix("\r"):  # CR-only line ends would glue sentences together
        if number > 1 or text.endswith("\n"):  # the input ends its lines with LF: a stray CR inside a sentence
            raise TfmError(
                f"stdin line {number}: a stray carriage return (\\r) inside the line",
                hint=f"make such characters spaces (one output line per input line stays), e.g. tr '\\r' ' ' < input.txt | {command}",
            )
        raise TfmError(  # no line feed at all yet: CR-only line ends (old Mac style), or one line with a stray CR
            f"stdin line {number}: a carriage return (\\r) inside the line",
            hint=f"if the input ends its lines with CR alone, convert them (tr '\\r' '\\n' < input.txt | {command}); "
            f"if they are stray characters in a sentence, make them spaces (tr '\\r' ' ')",
        )
    return text  # (a byte-order mark, on line 1 or after a `cat` of two files, is dropped by the Translator)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:  # b does not exist (or cannot be looked at): it is not an input to protect
        return False


def reads_from_stdin(path: Path) -> bool:
    """True when reading `path` would read standard input: `-`, or the file, pipe or terminal behind it
    (`/dev/stdin`, `/dev/fd/0`, `/proc/self/fd/0`), by device and inode."""
    if str(path) == "-":
        return True
    try:
        stdin, target = os.fstat(0), os.stat(path)
    except OSError:  # stdin closed, or path not there
        return False
    return (stdin.st_dev, stdin.st_ino) == (target.st_dev, target.st_ino)


def _is_stdout(path: Path) -> bool:
    """True when standard output is a regular file and `path` is that file (`/dev/stdout` included), by device and
    inode. A terminal or a pipe behind both is fine: it has no offsets to collide."""
    try:
        out, target = os.fstat(1), os.stat(path)
    except OSError:  # stdout closed, or path not there
        return False
    return stat.S_ISREG(out.st_mode) and (out.st_dev, out.st_ino) == (target.st_dev, target.st_ino)


def _is_stdin(path: Path) -> bool:
    """True when standard input is a regular file and `path` is that file (by device and inode)."""
    try:
        regular = stat.S_ISREG(os.fstat(0).st_mode)
    except OSError:  # stdin closed
        return False
    return regular and str(path) != "-" and reads_from_stdin(path)


# What a model's folder (a tfm run, release or ONNX export; a Hugging Face or CTranslate2 model) needs beside them.
_MODEL_FILES = frozenset({
    "config.json", "tokenizer.json", "recipe.yaml", "metrics.jsonl", "summary.json", "onnx.json", "tfm-export.json",
    "translate.py", "sentences.py", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json",
    "vocab.json", "source.spm", "target.spm", "shared_vocabulary.json", "shared_vocabulary.txt",
    "README.md", "curves.png",  # a release's, an export's or a Hugging Face model's card; a run's curves
})
# The weights whose presence makes a folder a model's: tfm's final and best models, an ONNX export's graphs,
# Hugging Face's and CTranslate2's weights.
_MODEL_WEIGHTS = ("model.safetensors", "best.safetensors", "encoder.onnx", "pytorch_model.bin", "model.bin")


def _held_by_a_model(path: Path) -> str | None:
    """What `path` (an existing file) is to a model, when a command's output would destroy it there: a file of
    weights anywhere, or one of the files a model's folder (a run, a release, an export, a Hugging Face or
    CTranslate2 model) needs beside its weights; None for any other file (translations, pages, a run's own earlier
    outputs, a tokenizer.json where no model is)."""
    from tfm_cli.files import WEIGHT_SUFFIXES

    if path.suffix.lower() in WEIGHT_SUFFIXES:
        return "a model's weights"
    folder = path.parent
    try:
        # a run's records in its folders (tensorboard's events, a checkpoint's evaluation, which a resume reads)
        if folder.name in ("checkpoints", "tensorboard") and _is_model_folder(folder.parent):
            return f"a file of the run in {folder.parent}"
        if path.name in _MODEL_FILES and _is_model_folder(folder):
            return f"a file of the model in {folder}"
    except OSError:  # a folder this user cannot look into: not known to be a model's
        return None
    return None


def _is_model_folder(folder: Path) -> bool:
    """Whether `folder` holds a model: weights of one (`_MODEL_WEIGHTS`), or a run's checkpoints."""
    return any((folder / name).is_file() for name in _MODEL_WEIGHTS) or any((folder / "checkpoints").glob("step-*.safetensors"))


def written_file(path: Path) -> Path:
    """The file that writing `path` writes: the one a symbolic link names (followed to the end), else `path`,
    which a link to a device or a pipe (/dev/stdout) stays, written in place through it."""
    try:
        if not path.is_symlink() or (path.exists() and not path.is_file()):
            return path
        return path.resolve()
    except (OSError, RuntimeError):  # a name too long, a loop of links: said by the checks, as a path that cannot be written
        return path


def write_output(path: Path, option: str, write: Callable[[str], object]) -> Path:
    """Write a command's output file (`write(filename)` writes it) whole or not at all: into a temporary file
    beside it, then renamed over it, so that a full disk or Ctrl-C leaves the previous file as it was. A symbolic
    link is kept, and the file it names replaced so; a device or a pipe (/dev/stdout, a FIFO) is written in place.
    Returns `path`.

    Raises:
        TfmError: the file could not be written (the message names it, and says that nothing was replaced).
    """
    from tfm_cli.files import atomic_write, remove_empty

    path = Path(path)
    # a symbolic link: the file it names is replaced whole, the link kept (written in place through the link, a
    # full disk left that file cut short: a tokenizer.json that no longer loaded)
    target = written_file(path)
    in_place = target.exists() and not target.is_file()
    made = [p for p in [target.absolute().parent, *target.absolute().parent.parents] if not p.exists()]
    try:
        if in_place:
            write(str(path))
        else:
            atomic_write(target, write)
    except OSError as error:
        remove_empty(made)  # the folders made on the way: a command that fails leaves none behind
        kept = "" if in_place else ("; the file there is as it was" if path.exists() else "; nothing was written")
        raise TfmError(
            f"{option} {path} could not be written: {error.strerror or error}{kept}",
            hint="check the free space and the permissions there, or give another path",
        ) from None
    return path


@contextlib.contextmanager
def route_warnings(at_most: dict[type, int] | None = None) -> Iterator[None]:
    """Show the library's warnings (Python `warnings`) as our yellow stderr lines, every one of them; of a category
    in `at_most`, only the first so many, then one line at the end counting the rest (200,000 inputs printed 3,102
    lines of "input line N has ... tokens")."""
    held: dict[type, int] = {}

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        limit = (at_most or {}).get(category)
        if limit is not None and held.get(category, -limit) >= 0:
            held[category] += 1
            return
        if limit is not None:
            held[category] = held.get(category, -limit) + 1
        warn(str(message))

    with warnings.catch_warnings():  # restores the filters and showwarning on the way out
        warnings.simplefilter("always")
        warnings.showwarning = show
        try:
            yield
        finally:
            for category, more in held.items():
                if more > 0:
                    warn(f"... and {more:,} more like the last {at_most[category]} (not shown)")


@contextlib.contextmanager
def progress_bar(label: str, total: int | None) -> Iterator[Callable[[int], None] | None]:
    """A transient rich progress bar on stderr, advanced by the callable it yields (None when stderr is no
    terminal, so pipes and logs stay clean). `total=None` counts without an end (a stream)."""
    if not fancy_stderr():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = [TextColumn(f"[bold]{label}[/bold]"), BarColumn()]
    columns += [MofNCompleteColumn()] if total is not None else [TextColumn("{task.completed:,} sentences")]
    # redirect_stdout=False: by default rich's live display captures sys.stdout and re-prints it on its own
    # console (stderr), which would send results written meanwhile (a translation stream) to the terminal.
    bar = Progress(*columns, TimeElapsedColumn(), console=err, transient=True, redirect_stdout=False)
    task = bar.add_task(label, total=total)
    with bar:
        yield lambda n: bar.advance(task, n)


PLAIN_EVERY = 30.0  # seconds between the progress lines of a long count when stderr is no terminal


@contextlib.contextmanager
def counted_progress(what: str, total: int, noun: str = "sentences") -> Iterator[Callable[[int], None]]:
    """The progress of `total` things done in batches (a beam search over a dev set), advanced by the callable it
    yields: a transient rich bar at a terminal, else a line when it starts and one every PLAIN_EVERY seconds; in
    both, a line when it ends, with the time it took. Minutes of silence look hung."""
    started = last = time.perf_counter()
    done = 0
    if fancy_stderr():
        with progress_bar(what, total) as advance:
            yield advance
    else:
        info(f"{what}: {total:,} {noun} to decode")

        def advance(n: int) -> None:
            nonlocal done, last
            done += n
            if time.perf_counter() - last >= PLAIN_EVERY and done < total:
                last = time.perf_counter()
                info(f"{what}: {done:,}/{total:,} {noun} decoded ({duration(last - started)})")

        yield advance
    info(f"{what}: {total:,} {noun} decoded in {duration(time.perf_counter() - started)}")


def duration(seconds: float) -> str:
    """0:42, 12:05, 1:02:03."""
    h, rem = divmod(int(seconds), 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


# ---- stop signals ----------------------------------------------------------------------------------------------


# SIGXCPU: a CPU-time limit's notice (`ulimit -S -t`, a scheduler's), before the SIGKILL of the hard limit: it
# killed a run at once, the steps since its last checkpoint lost, with no word
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGXCPU", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def stop_signals() -> Iterator[list[int]]:
    """SIGTERM (a batch scheduler's notice before it kills a job, `kill`, `docker stop`), SIGXCPU (a CPU-time
    limit's notice) and SIGHUP (the terminal closed) raise KeyboardInterrupt, as Ctrl-C does: training saves the
    last completed step and returns, an export removes its staging directory.

    Yields the list of the signals received (the first one decides the exit status). A signal whose handling
    is not the default (`nohup` ignores SIGHUP, a caller installed its own) is left alone; a second signal
    while the checkpoint is being saved is ignored, so the save completes.
    """
    received: list[int] = []

    def stop(signum: int, frame: Any) -> None:
        received.append(signum)
        if len(received) == 1:
            raise KeyboardInterrupt

    stop.raises_keyboard_interrupt = True  # type: ignore[attr-defined]  # (tfm_cli.signals.stops_the_run)
    with handling_stop_signals(stop):
        yield received


@contextlib.contextmanager
def handling_stop_signals(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """`handler` for each of STOP_SIGNALS whose handling is the default, the previous handling restored after."""
    previous: dict[int, Any] = {}
    try:
        swap_handlers({sig: handler for sig in STOP_SIGNALS if signal.getsignal(sig) is signal.SIG_DFL}, previous)
        yield
    finally:
        swap_handlers(previous)


def stopping_on_signals(command: Callable[..., Any]) -> Callable[..., Any]:
    """`command` with SIGTERM and SIGHUP stopping it as Ctrl-C does (`stop_signals`): the file being written
    (`write_output`) is left as it was, its temporary file removed, and the exit status is 128 + the signal.
    SIGTERM used to end the process at once, leaving a hidden .NAME.XXXX.tmp beside an --image or --out."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        with stopped_by_signals():
            return command(*args, **kwargs)

    return run


@contextlib.contextmanager
def stopped_by_signals(say: Callable[[], str] | None = None) -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP (`stop_signals`) end the block, and the command, with 128 + the signal as the
    shell's status (130, 143, 129), after the line `say()` gives (what was kept), when given."""
    received: list[int] = []
    try:
        with stop_signals() as received:
            yield
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # on the way out: a second Ctrl-C changes nothing
        if say is not None:
            with contextlib.suppress(OSError, ValueError):
                sys.stdout.flush()
            info(say())
        raise typer.Exit(interrupted_status(received)) from None


def interrupted_status(received: list[int]) -> int:
    """128 + the signal, as a shell reports a process it ended: 130 for Ctrl-C, 143 for SIGTERM."""
    return 128 + (received[0] if received else signal.SIGINT)


class _FlagsTakeNoValue:
    """Help pages show no type beside a flag: Typer 0.29 prints `--greedy <bool>` (and `--help <bool>`), which
    reads as if the flag took a value. Options that take one keep theirs (`--beam <int>`)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        for param in self.get_params(ctx):  # type: ignore[attr-defined]
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
        super().format_help(ctx, formatter)  # type: ignore[misc]


RICH_HELP_COLUMNS = 80  # narrower terminals get a command's help as Click's plain list (see Command)


class Command(_FlagsTakeNoValue, typer.core.TyperCommand):
    """Every tfm command. Its --help is Typer's rich panels on a terminal of RICH_HELP_COLUMNS columns or more, and
    Click's plain list on a narrower one: there the panels' option column cut names short (`--vocab…`, `--n-bes…`
    at 40 columns, 2 to 18 names a command) and left a word a line for the descriptions. An option naming one
    file or folder given two is refused (`_refuse_repeated_options`)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        _refuse_repeated_options(self, args)
        return super().parse_args(ctx, args)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        from rich.console import Console

        columns = Console().width
        if columns >= RICH_HELP_COLUMNS:
            return super().format_help(ctx, formatter)
        formatter.width = max(20, columns - 2)  # Click's own floor is 50
        # an option name longer than a third of the width gets a line of its own, its description the lines below
        formatter.write_dl = functools.partial(_write_dl, formatter, formatter.write_dl, col_max=max(10, columns // 3))
        rich_mode, self.rich_markup_mode = self.rich_markup_mode, None  # Typer's own switch to Click's help
        try:
            return super().format_help(ctx, formatter)
        finally:
            self.rich_markup_mode = rich_mode


def _write_dl(formatter: Any, write_dl: Callable[..., None], rows: Sequence[tuple[str, str]], **options: Any) -> None:
    """Click's `write_dl` with a flag pair wider than the terminal (`--split-sentences / --no-split-sentences` at
    40 columns) on two lines, broken after its slash."""
    fitted: list[tuple[str, str]] = []
    for term, text in rows:
        if formatter.current_indent + len(term) > formatter.width and " / " in term:
            first, second = term.split(" / ", 1)
            fitted += [(f"{first} /", ""), (second, text)]
        else:
            fitted.append((term, text))
    write_dl(fitted, **options)


PATH_METAVAR = "<path>"  # the metavar of every option that names one file or folder


def _refuse_repeated_options(command: Any, args: Sequence[str]) -> None:
    """Click keeps the last value of an option given twice: `--model a --model b` translated with b (no ensemble)
    and exited 0 (options that take several, as `--reference`, are `multiple`). Two different files or folders
    for an option that takes one (its metavar `<path>`) are a usage error now; the same one twice is not, and a
    setting given again (`--beam 5` after an alias's `--beam 4`) is the last one, as in most command lines."""
    takes_value: dict[str, Any] = {}
    for param in command.params:
        if getattr(param, "param_type_name", "") == "option" and not getattr(param, "is_flag", False) and not getattr(param, "count", False):
            takes_value.update({name: param for name in (*param.opts, *param.secondary_opts)})
    seen: dict[str, tuple[str, str | None]] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":  # the rest are arguments (a sentence that starts with "-")
            return
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if not arg.startswith("--") and len(arg) > 2 and arg[:2] in takes_value:  # -ofile: the value attached
            name, eq, value = arg[:2], "=", arg[2:]
        param = takes_value.get(name)
        if param is not None:
            if not eq:
                value, i = (args[i + 1] if i + 1 < len(args) else None), i + 1
            if not param.multiple and param.metavar == PATH_METAVAR:
                if param.name in seen and seen[param.name][1] != value:
                    first, before = seen[param.name]
                    raise typer.BadParameter(
                        f"given twice ({first} {before} and {name} {value}); it takes one value: give it once",
                        param_hint=name,
                    )
                seen[param.name] = (name, value)
        i += 1


class Group(_FlagsTakeNoValue, typer.core.TyperGroup):
    """Every group of tfm commands (`tfm`, `tfm bench`)."""


class SentenceCommand(Command):
    """A command whose argument is a sentence (`translate`, `inspect-attn`). The parser reads a word that starts
    with "-" as an option, so a sentence such as "- Bonjour !" (a dialogue line) or "-5 °C" was refused with
    "No such option: -" or "No such option: -5", which names no sentence: the error says to put -- before it."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        import re

        given = list(args)  # the parser consumes `args`
        try:
            return super().parse_args(ctx, args)
        except Exception as error:  # Click's NoSuchOption, of whichever Click this Typer uses (0.29 has its own copy)
            if type(error).__name__ == "MissingParameter" and getattr(getattr(error, "param", None), "name", None) == "sentence":
                # "Missing argument 'SENTENCE'." said neither what a sentence is here nor that - reads stdin
                # (`echo ... | tfm inspect-attn` without the -, as tfm translate takes stdin without one)
                typed = typed_command("inspect-attn")  # the options given, --model above all, stay in the examples
                error.message = (  # type: ignore[attr-defined]
                    f'Give the sentence to inspect, in quotes ({typed} "Je suis étudiant."), or - to read '
                    f"it from stdin (head -n 1 input.fr | {typed} -)"
                )
                raise
            if type(error).__name__ != "NoSuchOption" or getattr(error, "possibilities", None):
                raise  # another usage error, or a mistyped option (--beem): Click's "Possible options" stands
            known = {name for param in self.params for name in (*param.opts, *param.secondary_opts)}
            sentence = next(
                (a for a in given if a.startswith("-") and a not in ("-", "--") and a.split("=", 1)[0] not in known
                 and not re.fullmatch(r"--?[A-Za-z][A-Za-z0-9-]*(=.*)?", a, flags=re.S)),
                None,
            )  # a word spelled like an option (--foo, -x) is taken for a mistyped one: Click's message stands
            if sentence is None:
                raise
            what = "translate" if self.name == "translate" else "inspect"
            raise typer.BadParameter(
                f"{sentence!r} starts with '-', so it was read as an option: to {what} a sentence that starts with "
                f"'-', put -- between the options and it: tfm {self.name} [OPTIONS] -- {shell_word(sentence)}",
                ctx=ctx, param_hint="TEXT" if self.name == "translate" else "SENTENCE",
            ) from None
