"""Reading parallel corpora: one TSV file, or two line-aligned files, plain or compressed (gzip, xz, bzip2),
streamed line by line.

A corpus spec is one of:
  - "path/to/corpus.tsv[.gz]": source TAB target per line; columns after the second are ignored;
  - ["src.txt", "tgt.txt"]: two line-aligned files, one sentence per line;
  - "bundled:tatoeba-fr-en/train.tsv.gz": a file shipped inside the package (tfm_cli/corpora/...);
  - for training, a mixture: [{"path": SPEC, "weight": 2.0}, {"path": SPEC}, ...] (`corpus_parts`).
The compression is detected by its magic bytes, not by the file name. Every line is strict UTF-8; a line that is not (another
encoding, UTF-16, compressed or binary data, a stray carriage return) is a `CorpusError` naming the file and line
and saying how to convert it.

Plain Python, no torch: `tfm tokenize` and the path checks of every command read corpora without loading it
(`tfm_cli.data` turns what is read here into tensors).
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import itertools
import lzma
import os
import re
import shlex
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import IO, Any

from tfm_cli.errors import CorpusError, TfmError, shell_word
from tfm_cli.files import free_name, home_path
from tfm_cli.sentences import with_number_placeholders

BUNDLED_PREFIX = "bundled:"
GZIP_MAGIC = b"\x1f\x8b"
XZ_MAGIC = re.compile(rb"\xfd7zXZ\x00")
BZIP2_MAGIC = re.compile(rb"BZh[1-9](1AY&SY|\x17rE8P\x90)")
# Compressed formats other than gzip: their first bytes, their name, the command that undoes them (a file), and
# the one that streams them (a pipe into stdin, which is read as text: `tfm translate`'s says so).
OTHER_COMPRESSION = {
    XZ_MAGIC: ("xz", "unxz -k", "xzcat"),
    BZIP2_MAGIC: ("bzip2", "bunzip2 -k", "bzcat"),
    re.compile(rb"\(\xb5/\xfd"): ("zstd", "unzstd", "zstdcat"),
    re.compile(rb"PK\x03\x04"): ("zip", "unzip", "unzip -p"),
}
READ_COMPRESSION = ("gzip", "xz", "bzip2")  # a corpus file so compressed is read as it streams (Python's own modules)
# The commands that stream and write each one, for the fixes messages suggest (`zcat F | iconv ... | gzip > G`)
_CAT = {"gzip": "zcat", "xz": "xzcat", "bzip2": "bzcat"}
_SUFFIXES = {".gz": "gzip", ".xz": "xz", ".bz2": "bzip2"}
_STREAM_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError)  # gzip.BadGzipFile is an OSError, and bz2's errors
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")

# Invisible characters that only shape how text is shown, dropped wherever they are: U+FEFF, a byte-order mark
# (files concatenated with `cat` carry one mid-file); U+200B zero-width space, U+2060 word joiner and U+00AD soft
# hyphen (line-breaking hints that web pages and word processors leave inside words: "tr<U+200B>ès" was encoded
# as byte pieces and translated as another word); U+200E/U+200F, the left-to-right and right-to-left marks. The
# zero-width joiner and non-joiner (U+200D, U+200C) stay: they change the letters in Persian and Indic scripts
# and make one emoji of several.
INVISIBLE = "\ufeff\u200b\u2060\u00ad\u200e\u200f"
_NOT_SHOWN = str.maketrans("", "", INVISIBLE + "\u2581")  # and "▁", which the tokenizer reads as a space

_SPACES = re.compile("[\\s\u2581]+")  # whitespace, and ▁, which normalising makes one space a run (or none at an end)
MOST_COMPOSED = 4  # NFC composes at most 4 code points into one (U+1F8F: Α, dasia, perispomeni, prosgegrammeni)


def surely_longer(text: str, tokens: int, longest_piece: int) -> bool:
    """Whether `text` takes more than `tokens` tokens whatever its pieces, told without encoding it (a 100 MB line
    took 9.5 GB to encode): more characters, once normalised, than `tokens` pieces of `longest_piece` characters
    hold. The characters are counted low: whitespace, ▁ and invisible marks not at all (normalising makes a run of
    them one space or none), the others over 4, the most code points NFC composes into one (U+1F8F)."""
    bound = tokens * longest_piece
    if len(text) <= bound * MOST_COMPOSED:  # (every line of a real corpus: one len())
        return False
    visible = len(_SPACES.sub("", text)) - sum(text.count(c) for c in INVISIBLE)
    return visible // MOST_COMPOSED > bound


def head_for(text: str, tokens: int, longest_piece: int) -> str:
    """The start of `text` that still encodes to its first `tokens` tokens: `text` itself, unless it is surely
    longer than `tokens` (`surely_longer`), then a start that is still surely longer than that, ended at a space
    where one comes soon after, so that no word is cut (BPE splits a word as a whole). A 32 MB dev line was encoded
    whole to keep 255 of its tokens: 5.2 GB of memory for 31 s."""
    if not surely_longer(text, tokens, longest_piece):
        return text
    size = tokens * longest_piece * MOST_COMPOSED * 2
    while size < len(text) and not surely_longer(text[:size], tokens, longest_piece):  # (runs of spaces count none)
        size *= 2
    space = _SPACES.search(text, size, size + 10_000)
    return text[: space.start() if space else size]


Pair = tuple[int, str, str]  # (line number, 1-based; source sentence; target sentence)
CorpusSpec = str | os.PathLike | Sequence[str | os.PathLike]
# data.train may also be a mixture: a list of {path: CORPUS, weight: W} mappings, CORPUS one of the specs above and
# W > 0 how many times an epoch trains on its pairs (2: each pair twice; 0.5: a random half, drawn again each epoch)


@dataclass(frozen=True)
class CorpusPart:
    """One corpus of `corpus_parts`: `spec` a TSV path or [source_file, target_file], `weight` > 0 the times an
    epoch trains on its pairs, `number` its place in a mixture (1-based; 0: the corpus is no mixture)."""

    spec: Any
    weight: float = 1.0
    number: int = 0


def is_mixture(spec: Any) -> bool:
    """Whether `spec` is a list of corpora with weights (a list of mappings), not one corpus."""
    return isinstance(spec, (list, tuple)) and any(isinstance(item, Mapping) for item in spec)


def corpus_parts(spec: Any) -> list[CorpusPart]:
    """The corpora of a spec, each with its weight: a mixture's, in order; one corpus of weight 1 otherwise."""
    if not is_mixture(spec):
        return [CorpusPart(spec)]
    return [CorpusPart(item["path"], float(item.get("weight", 1.0)), n) for n, item in enumerate(spec, start=1)]


def corpus_files(spec: Any) -> list[Any]:
    """Every file a spec names, in order (none for None)."""
    if spec is None:
        return []
    if is_mixture(spec):
        return [f for part in corpus_parts(spec) for f in corpus_files(part.spec)]
    return list(spec) if isinstance(spec, (list, tuple)) else [spec]


def map_files(spec: Any, fn: Callable[[Any], Any]) -> Any:
    """`spec` with each file it names replaced by `fn(file)`, in the same shape (a mixture's weights kept)."""
    if spec is None:
        return None
    if is_mixture(spec):
        return [{**item, "path": map_files(item["path"], fn)} for item in spec]
    return [fn(f) for f in spec] if isinstance(spec, (list, tuple)) else fn(spec)


def corpus_text(spec: Any) -> str:
    """A corpus spec as a recipe writes it in YAML's one-line form: `train.tsv`, `[a.fr, a.en]`, or a mixture's
    `[{path: a.tsv, weight: 2}, {path: b.tsv}]`."""
    if is_mixture(spec):
        return "[" + ", ".join("{" + ", ".join(f"{k}: {corpus_text(v) if k == 'path' else v}" for k, v in item.items()) + "}"
                               for item in spec) + "]"
    return f"[{', '.join(map(str, spec))}]" if isinstance(spec, list) else str(spec)


def describe(spec: Any) -> str:
    """A spec as messages show it: `train.tsv`, `train.fr and train.en`, or a mixture's corpora with their weights."""
    if is_mixture(spec):
        return " + ".join(
            describe(part.spec) + ("" if part.weight == 1 else f" (weight {part.weight:g})") for part in corpus_parts(spec)
        )
    return " and ".join(map(os.fspath, spec)) if isinstance(spec, (list, tuple)) else os.fspath(spec)


# ---- reading ------------------------------------------------------------------------------------


def has_text(side: str) -> bool:
    """Whether a sentence holds anything once normalised: not only whitespace, "▁" and invisible characters."""
    return bool(side.translate(_NOT_SHOWN).strip())


def line_count(text: str) -> int:
    """How many non-blank lines `text` holds, its lines ending where tfm reads a line's end: at a line feed or a
    carriage return (stdin and corpus files read lines to their \\n and name a stray \\r), not at the other
    characters `str.splitlines` breaks at (U+2028, U+0085, form feed, \\x1c-\\x1e), which a line keeps inside it.
    More than one in a sentence (`tfm translate "$(cat input.fr)"`, `translate("Merci.\\nSalut.")`) would be
    glued into one: the command line and the API refuse it."""
    return sum(1 for line in re.split(r"\r\n|\r|\n", text) if line.strip())


def bundled_dir() -> Path:
    """The folder that holds the bundled corpora (`<tfm_cli package>/corpora`)."""
    return Path(str(files("tfm_cli"))) / "corpora"


def resolve_corpus_path(spec: str | os.PathLike, once: bool = False, option: str | None = None) -> Path:
    """Turn one corpus file spec into an existing path; `bundled:NAME/FILE` resolves inside the package.

    A pipe (`<(cut -f2 dev.tsv)`, /dev/stdin) is refused unless the caller reads the file only `once`.
    `option` names the command-line option the path came from (e.g. "--reference"); otherwise it came from a
    recipe or a corpus option, and the message says where to look for it there.

    Raises:
        CorpusError: the file does not exist (the message names it and says what to check).
    """
    text = os.fspath(spec)
    if not text.strip():  # Path("") is the current directory
        raise CorpusError(f"{option or 'a corpus file path'} is empty (an unset shell variable?): give the path of a .tsv or .txt file")
    if text.startswith(BUNDLED_PREFIX):
        rel = text[len(BUNDLED_PREFIX) :].lstrip("/")
        root = bundled_dir()
        path = root / rel
        if ".." in Path(rel).parts or not path.is_file():
            available = sorted(
                f"{BUNDLED_PREFIX}{p.parent.name}/{p.name}"
                for p in root.glob("*/*")
                if p.is_file() and ".tsv" in p.name
            )
            raise CorpusError(
                f"bundled corpus file {text} does not exist; the bundled corpus files are: "
                + (", ".join(available) if available else "none (is the package installed with its data?)")
            )
        return path
    if text == "-" and not once:  # stdin, as `-` is to `tfm translate`: said, not "does not exist"
        raise CorpusError(
            f"{option or 'corpus file'} - would be standard input, which can be read only once, and a corpus is read "
            "more than once: save it to a file first (gzip it if it is large: tfm reads .gz as a stream)"
        )
    path = home_path(text)
    if not path.exists() and path.is_symlink():  # "does not exist" sent the user looking for a file that is there
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        where = f"{option} " if option is not None else "corpus file "
        raise CorpusError(
            f"{where}{text} is a symbolic link to {target}, which does not exist (or links round in a loop)",
            hint=f"point the link at the corpus file (ln -sf FILE {shlex.quote(text)}), or give the file itself",
        )
    # named as given, quoted for the shell: `data.train='base.tsv '` was "corpus file base.tsv  does not exist"
    spaced = text != text.strip() and home_path(text.strip()).exists()
    if not path.exists() and spaced:
        raise CorpusError(f"{option or 'corpus file'} {shell_word(text)} does not exist, but {shell_word(text.strip())} "
                          "does: drop the white space around the path")
    if not path.exists() and option is not None:
        raise CorpusError(f"{option} {shell_word(text)} does not exist", hint=f"check the path given to {option}")
    if not path.exists():
        raise CorpusError(
            f"corpus file {shell_word(text)} does not exist: check the path (data.train / data.dev in the recipe, "
            "or the path you gave), or use a bundled corpus such as bundled:tatoeba-fr-en/train.tsv.gz"
        )
    if path.is_dir() and option is not None:
        raise CorpusError(f"{option} {text} is a directory, not a file", hint=f"give {option} the path of a text file")
    if path.is_dir():
        raise CorpusError(f"corpus file {text} is not a file but a directory: give the path of a .tsv or .txt file")
    if path.is_socket():  # open() fails with "No such device or address", which read as a damaged file
        what = f"{option} {text}" if option is not None else f"corpus file {text}"
        raise CorpusError(f"{what} is a socket, not a file", hint="give the path of a text file")
    if not path.is_file() and not once:  # a pipe (/dev/stdin, <(zcat ...)) or a device: it can be read only once
        raise CorpusError(
            f"{f'{option} {text}' if option is not None else f'corpus file {text}'} is a pipe or a device, not a file: "
            "a corpus is read more than once, "
            "so save it to a file first (gzip it if it is large: tfm reads .gz as a stream)"
        )
    return path


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two corpus paths name the same file (through links and `bundled:` too); False where either is missing."""
    try:
        return resolve_corpus_path(a, once=True).samefile(resolve_corpus_path(b, once=True))
    except (OSError, TfmError):
        return False


class _Decompressed(io.RawIOBase):
    """A file's xz or bzip2 data (`kind`), decompressed as it is read. Several streams one after the other (`cat
    a.xz b.xz`) read as one file, as xzcat and bzcat read them; bytes after the last one that start no other (text
    appended with `>>`) are an OSError, where Python's LZMAFile and BZ2File drop them without a word (their lines
    were lost)."""

    def __init__(self, f: IO[bytes], kind: str) -> None:
        super().__init__()
        self._f, self.kind = f, kind
        self._new = lzma.LZMADecompressor if kind == "xz" else bz2.BZ2Decompressor
        self._magic = XZ_MAGIC if kind == "xz" else BZIP2_MAGIC
        self._d, self._in = self._new(), b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        while True:
            if self._d.eof:  # a stream ended: another may follow
                rest = self._d.unused_data
                while True:
                    if self.kind == "xz":  # stream padding: the xz format allows null bytes between and after streams
                        rest = rest.lstrip(b"\x00")
                    if len(rest) >= 10 or not (more := self._f.read(1 << 16)):
                        break
                    rest += more
                if not rest:
                    return 0
                if not self._magic.match(rest):
                    raise OSError(f"bytes after the end of the {self.kind} data that start no other {self.kind} stream "
                                  "(text appended to the compressed file?)")
                self._d, self._in = self._new(), rest
            if self._d.needs_input and not self._in:
                self._in = self._f.read(1 << 16)
                if not self._in:
                    raise EOFError(f"the {self.kind} data ends before its end-of-stream marker (a file cut short?)")
            data, self._in = (self._in, b"") if self._d.needs_input else (b"", self._in)
            out = self._d.decompress(data, len(buffer))
            if out:
                buffer[: len(out)] = out
                return len(out)


@contextlib.contextmanager
def _open_binary(path: Path) -> Iterator[IO[bytes]]:
    """A corpus file opened for binary line reading, decompressed as it is read if it starts with the magic bytes
    of gzip, xz or bzip2 (looked at without reading them, so that a pipe works too)."""
    with open(path, "rb") as f:
        head = f.peek(10)[:10]
        if head[:2] == GZIP_MAGIC:
            opened: IO[bytes] = gzip.GzipFile(fileobj=f, mode="rb")
        elif XZ_MAGIC.match(head) or BZIP2_MAGIC.match(head):
            opened = io.BufferedReader(_Decompressed(f, "xz" if XZ_MAGIC.match(head) else "bzip2"), 1 << 16)
        else:
            yield f
            return
        with opened:
            yield opened


def _compression(f: IO[bytes]) -> str | None:
    """The compression a file opened by `_open_binary` is read through ("gzip", "xz", "bzip2"), or None."""
    if isinstance(f, gzip.GzipFile):
        return "gzip"
    return getattr(getattr(f, "raw", None), "kind", None)  # (a _Decompressed under its buffer)


def _by_name(path: Path) -> tuple[str | None, str]:
    """(the compression its name says: "gzip" for .gz, "xz", "bzip2"; else None, the name without that suffix)."""
    kind = _SUFFIXES.get(path.suffix)
    return kind, path.name.removesuffix(path.suffix) if kind else path.name


def _read_lines(path: Path, shown: str, trailing_blanks: bool = False, keep_bom: bool = False) -> Iterator[tuple[int, str]]:
    """Yield (line_no, text) with the newline (and a CR before it) stripped, decoded as strict UTF-8.

    Blank lines at the very end of the file are dropped unless `trailing_blanks`; blank lines elsewhere are
    yielded as "". A byte-order mark that starts a line is dropped unless `keep_bom` (a line of a BOM alone is
    blank either way).
    """
    pending_blank: list[int] = []
    line_no = 0
    try:
        with _open_binary(path) as f:

            def not_text(raw: bytes, line_no: int) -> None:  # binary data: refused, naming the line
                if (line_no == 1 or b"\x00" in raw) and (problem := _not_text(raw, line_no, path, _compression(f))):
                    _check_intact(f, shown, line_no, path)
                    raise CorpusError(f"{shown}:{line_no}: {problem}")

            for line_no, raw in enumerate(_whole_lines(f, not_text), start=1):
                if raw.endswith(b"\n"):
                    raw = raw[:-1]
                if raw.endswith(b"\r"):
                    raw = raw[:-1]
                kind = _compression(f)  # by its content, as read: the fixes say zcat, xzcat, bzcat or cat by it
                not_text(raw, line_no)
                if b"\r" in raw:  # read as one line, it would silently glue many sentences together
                    _check_intact(f, shown, line_no, path)
                    raise CorpusError(f"{shown}:{line_no}: {_carriage_return(path, kind)}")
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    _check_intact(f, shown, line_no, path)
                    name, fixed = _shell_path(path), _shell_path(path, "utf8-")
                    western = reads_as_western(raw)
                    code = "cp1252" if western else "ENCODING"
                    fix = (
                        f"pipe it through iconv -f {code} -t utf-8"
                        if not path.is_file()
                        else f"{_CAT[kind]} {name} | iconv -f {code} -t utf-8 | {kind} > {fixed}"
                        if kind is not None
                        else f"iconv -f {code} -t utf-8 {name} > {fixed}"
                    )
                    raise CorpusError(
                        f"{shown}:{line_no}: invalid UTF-8 at byte {err.start + 1} of the line "
                        f"({raw[err.start : err.start + 1]!r}); re-encode the file as UTF-8 (e.g. {fix}"
                        + (f", {WESTERN_OR_NOT}" if western else f", {ENCODINGS}")
                        + ")"
                    ) from None
                if text.startswith("\ufeff") and (not keep_bom or text == "\ufeff"):  # a UTF-8 byte-order mark is
                    text = text[1:]  # not part of a sentence: at the start of the file, or of a later line where
                    # files saved with one were concatenated (kept for scoring as written, as sacrebleu reads it)
                if not text:
                    pending_blank.append(line_no)
                    continue
                for blank in pending_blank:
                    yield blank, ""
                pending_blank.clear()
                yield line_no, text
            if trailing_blanks:
                for blank in pending_blank:
                    yield blank, ""
    except PermissionError:  # the file is fine, its mode is not: asking whether it is complete would mislead
        raise CorpusError(
            f"{shown}: permission denied: make the file readable (chmod +r {_shell_path(path)}) or run tfm as a "
            "user who may read it",
            hint="",  # the fix is in the line: no hint of another kind is to be added to it
        ) from None
    except gzip.BadGzipFile as err:
        if line_no == 0 or not str(err).startswith("Not a gzipped file"):
            raise CorpusError(f"{shown}: cannot read the file ({err}); is it a complete text file, plain or compressed?") from err
        # bytes after the compressed data that are no second gzip member: text appended to the .gz (`>>`), whose
        # lines would be lost if read as gzip does (gunzip keeps the compressed part, "trailing garbage ignored")
        part = _shell_path(free_name(path, "compressed-part-" + path.name.removesuffix(".gz")))
        raise CorpusError(
            f"{shown}: after its compressed data ({line_no:,} lines) the file goes on with bytes that are not gzip: "
            f"text appended to a compressed file? Rebuild it from its parts (zcat {_shell_path(path)} > {part} writes "
            "the lines of the compressed part, gzip warning of the rest it leaves out)"
        ) from None
    except _STREAM_ERRORS as err:
        raise CorpusError(
            f"{shown}: cannot read the file ({err}); is it a complete text file, plain or compressed (gzip, xz, bzip2)?"
        ) from err


PART = 1 << 24  # bytes of a line read at a time (16 MiB)


def _whole_lines(f: IO[bytes], look: Callable[[bytes, int], None]) -> Iterator[bytes]:
    """The lines of `f`, each whole with its line end, read PART bytes at a time: `look(part, line_no)` sees the
    first part of a longer line before the rest is read (and may raise), so that a file of gigabytes without a line
    end is refused as binary after 16 MiB (3 GB of zero bytes took 6.6 GB of memory and 24 s to be called "a NUL
    byte at byte 1"). A text line that long is read whole, as before (the training data skips it for its length)."""
    line_no = 0
    while raw := f.readline(PART):
        line_no += 1
        if len(raw) == PART and not raw.endswith(b"\n"):
            look(raw, line_no)
            parts = [raw]
            while not parts[-1].endswith(b"\n") and (more := f.readline(PART)):
                parts.append(more)
            raw = b"".join(parts)
        yield raw


def _check_intact(f: IO[bytes], shown: str, line_no: int, path: Path) -> None:
    """Before a line of a compressed file is blamed for not being text, read the stream to its end: damaged compressed
    data decompresses to garbage that looks like another encoding or binary until the CRC at the end says so, and
    re-encoding it (the fix the message would suggest) would keep the damage. Raises CorpusError if it is damaged."""
    kind = _compression(f)
    if kind is None:
        return
    try:
        while f.read(1 << 20):
            pass
    except _STREAM_ERRORS as err:
        raise CorpusError(
            f"{shown}: the compressed data is damaged ({err}; line {line_no} came out as garbage): restore the "
            f"file from a good copy ({kind} -t {_shell_path(path)} checks one)"
        ) from None


# What a message says of an encoding that is not Windows' Western one (cp1252 read such text into wrong letters
# silently: a Russian file in cp1251 became "ó÷èòåëü", which tfm then trained on)
_BY_SCRIPT = (("cp1251", "Cyrillic"), ("cp1253", "Greek"), ("cp1254", "Turkish"), ("cp1250", "Central European"),
              ("cp1252", "Western European"), ("gb18030", "Chinese"), ("shift_jis", "Japanese"), ("euc-kr", "Korean"))


def _encodings(leave_out: str = "", first: str = "") -> str:
    """The usual encodings by script, as a message lists them ("cp1251 for Cyrillic, cp1253 Greek, ..."), `first`
    first (the likeliest), `leave_out` left out."""
    ordered = sorted(_BY_SCRIPT, key=lambda pair: pair[0] != first)  # a stable sort: the rest keep their order
    named = [f"{code} {script}" for code, script in ordered if code != leave_out]
    return named[0].replace(" ", " for ", 1) + ", " + ", ".join(named[1:])


ENCODINGS = f"where ENCODING is the file's own: {_encodings()}; file -i or uchardet can tell"
# ... and of a line that reads as Western European text, which Central European text can too (Czech ě read as ì)
WESTERN_OR_NOT = f"if it is Western European text; else -f its own encoding: {_encodings(leave_out='cp1252', first='cp1250')}"


def reads_as_western(raw: bytes) -> bool:
    """Whether a line that is not UTF-8 reads as Windows' Western European text (cp1252, of which Latin-1 is
    nearly all): accented letters inside words of ASCII ones. Not when cp1252 cannot decode it, when it makes
    runs of three or more accented letters, or words of two (whole words of another alphabet: Cyrillic, Greek, CJK
    bytes), Turkish's ğ İ ı ş Ş Ğ read as ð Ý ý þ Þ Ð (Icelandic's ð þ ý too, then), or a symbol inside a word (Polish
    ł ą ż read as ³ ¹ ¿). A guess: Central European text whose letters read as Western ones (Czech ě as ì, Polish ń
    and ę as ñ and ê) passes, which is why the message names the other encodings beside cp1252."""
    try:
        text = raw.decode("cp1252")
    except UnicodeDecodeError:
        return False
    accented = r"[^\W\d_a-zA-Z]"  # a letter, not an ASCII one
    if re.search(rf"{accented}{{3}}|\b{accented}{{2}}\b", text) or any(ch in "ÐðÝýÞþ" for ch in text):
        return False
    for i in range(1, len(text) - 1):
        ch = text[i]
        if not (ch.isascii() or ch.isalpha() or ch in "’‘´·–—") and text[i - 1].isalpha() and text[i + 1].isalpha():
            return False
    return True


def _shell_path(path: Path, prefix: str = "") -> str:
    """`path` (or a new file beside it named `prefix` + its name, `files.free_name`) as a shell word, for the
    commands a message suggests: they work from the directory the user ran tfm in, whatever the file's name."""
    return shlex.quote(str(free_name(path, prefix + path.name) if prefix else path))


def _carriage_return(path: Path, kind: str | None) -> str:
    """The problem of a line holding a carriage return that does not end it (CR-only line ends, old Mac style)."""
    cat, name = _CAT.get(kind or "", "cat"), _shell_path(path)
    fixed = shlex.quote(str(free_name(path, "fixed-" + _by_name(path)[1])))  # (plain text: no .gz, .xz, .bz2)
    return (
        "a carriage return (\\r) inside the line: if the file ends its lines with CR alone (old Mac style), convert "
        f"them ({cat} {name} | tr '\\r' '\\n' > {fixed}); if they are stray characters in sentences, make them "
        f"spaces ({cat} {name} | tr '\\r' ' ' > {fixed})"
    )


# What a file of another kind starts with (`file` tells them so), and the control bytes no text holds (not TAB, LF
# or CR; ESC and form feed are rare enough in a corpus's first line)
_BINARY_KINDS = {
    b"%PDF-": "a PDF document", b"\x89PNG": "a PNG image", b"\xff\xd8\xff": "a JPEG image",
    b"GIF8": "a GIF image", b"\x7fELF": "an executable (ELF)", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1": "an old Office document",
    b"SQLite format 3\x00": "an SQLite database", b"\x80\x02": "a Python pickle", b"\x93NUMPY": "a NumPy array",
}
_CONTROL_BYTES = bytes([*range(0, 9), 11, 12, *range(14, 32), 127])


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _not_text(raw: bytes, line_no: int, path: Path, kind: str | None) -> str | None:
    """What a line is when it is not UTF-8 text at all (compressed, UTF-16, binary), or None. `kind`: the
    compression the file was read through (`_compression`)."""
    name, fixed = _shell_path(path), _shell_path(path, "utf8-")
    if line_no == 1:
        for magic, (other, undo, _) in OTHER_COMPRESSION.items():
            if magic.match(raw) and other not in READ_COMPRESSION:
                return (f"{other}-compressed data, not text: tfm reads plain text, or text compressed with gzip, xz or "
                        f"bzip2; decompress it first (e.g. {undo} {name})")
        if raw[257:262] == b"ustar":  # a tar header's magic (WMT and OPUS ship .tgz): "a NUL byte at byte 15"
            flag = {"gzip": "z", "xz": "J", "bzip2": "j"}.get(kind or "", "")
            return (f"a tar archive{f' ({kind}-compressed)' if kind else ''}, not a text file: extract it (tar "
                    f"x{flag}f {name}) and give the corpus files it holds")
        if kind is not None and (raw.startswith(GZIP_MAGIC) or XZ_MAGIC.match(raw) or BZIP2_MAGIC.match(raw)):
            return (f"compressed twice: decompress it once (e.g. {_CAT[kind]} {name} > {_shell_path(path, 'once-')}) "
                    "and give that file")
        if raw.startswith(UTF16_BOMS):
            fix = f"{_CAT[kind]} {name} | iconv -f utf-16 -t utf-8 | {kind} > {fixed}" if kind else f"iconv -f utf-16 -t utf-8 {name} > {fixed}"
            return f"UTF-16 text, not UTF-8: re-encode the file (e.g. {fix})"
        for magic, what in _BINARY_KINDS.items():  # a PDF was "invalid UTF-8 ... iconv -f cp1252", a PNG too
            # (the two that text could start with, `%PDF-` and `GIF8`, only as the files themselves start)
            plain = magic in (b"%PDF-", b"GIF8")
            if raw.startswith(magic) and (not plain or re.fullmatch(rb"%PDF-\d\.\d\s*|GIF8[79]a.*[\x00-\x08].*", raw, re.S)):
                return f"{what}, not text: give the corpus as UTF-8 text, plain or compressed (source TAB target)"
    if b"\x00" in raw:  # valid UTF-8, but no text holds NUL bytes
        return (
            f"a NUL byte at byte {raw.index(0) + 1} of the line: a binary file (or UTF-16), not UTF-8 text; "
            "give a UTF-8 text file, plain or compressed"
        )
    controls = sum(raw.count(bytes([c])) for c in _CONTROL_BYTES) if line_no == 1 else 0
    # random bytes read as "a carriage return inside the line" (valid UTF-8 with control characters is text: a
    # model's output spelled in byte tokens can hold them)
    if len(raw) >= 16 and controls > len(raw) / 20 and not _utf8(raw):
        return (
            f"binary data, not text ({controls} control bytes in its {len(raw):,}): give the corpus as UTF-8 text, "
            "plain or compressed (source TAB target)"
        )
    return None


def read_lines(spec: str | os.PathLike, option: str | None = None, keep_bom: bool = False) -> list[str]:
    """All lines of one text file (plain or compressed: gzip, xz, bzip2; strict UTF-8; a pipe too), e.g. reference translations;
    `option` names the command-line option that gave the path, for the messages. A byte-order mark that starts a
    line is dropped, unless `keep_bom` (references scored as written, as sacrebleu reads the file, keep it).

    Raises:
        CorpusError: the file is missing or unreadable, or a line is not valid UTF-8 (file and line named).
    """
    path = resolve_corpus_path(spec, once=True, option=option)
    return [text for _, text in _read_lines(path, _shown(spec, path), keep_bom=keep_bom)]


def _shown(spec: str | os.PathLike, path: Path) -> str:
    text = os.fspath(spec)
    return text if text.startswith(BUNDLED_PREFIX) else str(path)


@dataclass
class TsvColumns:
    """A TSV corpus's lines counted by columns as `read_pairs` reads them (the columns after the second are ignored: a
    Tatoeba or Anki export's attribution), for `warning`: a file most of whose lines have K columns and a few more
    most likely has a tab inside a few sentences, where the rest of the source became the target (of two columns)
    or was dropped (of three); a first line of column names, which is trained as a pair like any other; and sides
    in a spreadsheet's or a CSV writer's quotes, which are read as text of the sentences."""

    shown: str = ""  # the file, as messages name it
    by_count: dict[int, int] = field(default_factory=dict)  # number of columns -> lines
    first_of: dict[int, list[int]] = field(default_factory=dict)  # number of columns -> its first few lines
    header: tuple[str, str] | None = None  # line 1, when it reads as column names
    quoted: int = 0  # lines whose two sides are each in double quotes ("Va !" TAB "Go!")
    escaped: list[int] = field(default_factory=list)  # lines with a quoted side holding "" (CSV's quote in a field)

    def count(self, line_no: int, columns: int) -> None:
        self.by_count[columns] = self.by_count.get(columns, 0) + 1
        first = self.first_of.setdefault(columns, [])
        if len(first) < 3:
            first.append(line_no)

    def look(self, line_no: int, src: str, tgt: str) -> None:
        """Count a line's sides in double quotes, as a spreadsheet or Python's csv module quotes a field."""
        wrapped = [len(side) > 1 and side[0] == side[-1] == '"' for side in (src, tgt)]
        self.quoted += all(wrapped)
        if any(w and '""' in side[1:-1] for w, side in zip(wrapped, (src, tgt), strict=True)):
            self.escaped.append(line_no)

    def warning(self) -> str | None:
        """What to say of the file (its columns, a header line, quoting), or None."""
        said = [w for w in (self._columns_warning(), self._header_warning(), self._quotes_warning()) if w]
        return "; and ".join(said) or None

    def _quotes_warning(self) -> str | None:
        # The bundled corpus, 161,979 pairs: 56 with both sides quoted (sentences that are quotations), 1 with "".
        total = sum(self.by_count.values())
        if not total or (self.quoted <= total / 2 and len(self.escaped) <= max(2, total / 1000)):
            return None
        path = Path(self.shown)
        kind, plain = _by_name(path)
        out = _shell_path(free_name(path, "unquoted-" + plain.removesuffix(".tsv") + ".tsv"))
        read = f"{_CAT[kind]} {_shell_path(path)} | " if kind else ""
        fix = (f"{read}python3 -c 'import csv, sys; [print(*row[:2], sep=\"\\t\") for row in csv.reader(sys.stdin, "
               f"delimiter=\"\\t\")]'{'' if kind else ' < ' + _shell_path(path)} > {out}")
        lines = ", ".join(map(str, self.escaped[:3])) + (", ..." if len(self.escaped) > 3 else "")
        what = (f"{self.quoted:,} of {total:,} lines have both sides in double quotes" if self.quoted > total / 2
                else f"{len(self.escaped):,} lines have a side in double quotes with \"\" inside it (line{'s' if len(self.escaped) > 1 else ''} {lines})")
        return (f"{self.shown}: {what}, as a spreadsheet or a CSV writer quotes a field: tfm reads no quoting, so the "
                f"quotes are text of the sentences the model learns; save the file without it (e.g. {fix})")

    def _columns_warning(self) -> str | None:
        if len(self.by_count) < 2:
            return None
        usual = max(self.by_count, key=lambda k: (self.by_count[k], -k))  # the most lines; of a tie, the fewer columns
        more = sorted(k for k in self.by_count if k > usual)
        if not more:  # fewer columns than the others (an attribution left out): nothing is lost
            return None
        n = sum(self.by_count[k] for k in more)
        first = sorted(line for k in more for line in self.first_of[k])[:3]
        lines = ", ".join(map(str, first)) + (", ..." if n > len(first) else "")
        total = sum(self.by_count.values())
        kind, _ = _by_name(Path(self.shown))  # (`zcat -f` passes xz and bzip2 data through as they are: no line found)
        cat = f"{_CAT[kind]} " if kind in ("xz", "bzip2") else "zcat -f "
        check = f"{cat}{_shell_path(Path(self.shown))} | awk -F'\\t' 'NF > {usual} {{print NR}}'"
        if usual == 2:
            return (
                f"{self.shown}: {n:,} of {total:,} lines {'has' if n == 1 else 'have'} more than two tab-separated columns "
                f"(line{'s' if n > 1 else ''} {lines}) where the others have two: a tab inside a sentence makes "
                f"the rest of it the target, and columns after the second are ignored; check them, e.g. {check}"
            )
        return (
            f"{self.shown}: {n:,} of {total:,} lines {'has' if n == 1 else 'have'} more than {usual} tab-separated columns "
            f"(line{'s' if n > 1 else ''} {lines}) where the others have {usual}: a tab inside a sentence makes the rest "
            f"of it another column, and columns after the second are ignored; check them, e.g. {check}"
        )

    def _header_warning(self) -> str | None:
        if self.header is None:
            return None
        src, tgt = self.header
        path = Path(self.shown)
        kind, plain = _by_name(path)
        out = _shell_path(free_name(path, "no-header-" + plain))
        name = _shell_path(path)
        cut = f"{_CAT[kind]} {name} | tail -n +2 > {out}" if kind else f"tail -n +2 {name} > {out}"
        return (
            f"{self.shown}: line 1 ({src!r} / {tgt!r}) reads as the names of the columns, and is read as a sentence "
            f"pair like the others: remove it (e.g. {cut})"
        )


# What a first line of column names holds: a language's code (fr, en, pt-BR, zh_Hans; ISO 639-1's, or a few of ISO
# 639-3's) or a word that names a side. "Oui<TAB>Yes" and "go<TAB>va" are sentence pairs.
_ISO_639_1 = frozenset(
    "aa ab ae af ak am an ar as av ay az ba be bg bh bi bm bn bo br bs ca ce ch co cr cs cu cv cy da de dv dz ee el en "
    "eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu hy hz ia id ie ig ii ik io is it iu ja jv "
    "ka kg ki kj kk kl km kn ko kr ks ku kv kw ky la lb lg li ln lo lt lu lv mg mh mi mk ml mn mr ms mt my na nb nd ne "
    "ng nl nn no nr nv ny oc oj om or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg si sk sl sm sn so sq sr ss st "
    "su sv sw ta te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo za zh zu".split()
)
_LANGUAGE = re.compile(r"([A-Za-z]{2,3})(?:[-_][A-Za-z]{2,4})?")
_SIDE_WORD = re.compile(
    r"(source|target|src|tgt|input|output|text|translation|sentence|reference|ref|hypothesis|original|english|french|"
    r"german|spanish|[a-z]+_(text|sentence|lang))s?", re.I
)
_ISO_639_3 = frozenset("eng fra deu spa ita por rus zho cmn jpn kor ara nld tur pol ukr ces swe fin hin".split())


def _names_a_column(side: str) -> bool:
    side = side.strip()
    if side[:1].isupper() and not side.isupper() and _SIDE_WORD.fullmatch(side) is None:  # "No<TAB>Ne", "Ja<TAB>Da"
        return False  # (a code in lower case or capitals, fr or FR, names a column; "Fr" starts a sentence)
    code = _LANGUAGE.fullmatch(side)
    return bool(_SIDE_WORD.fullmatch(side)) or (code is not None and code.group(1).lower() in _ISO_639_1 | _ISO_639_3)


def _looks_like_header(src: str, tgt: str) -> bool:
    """Whether a first line's two sides are column names (`fr<TAB>en`, `source<TAB>target`), not a sentence pair."""
    return src.strip().lower() != tgt.strip().lower() and _names_a_column(src) and _names_a_column(tgt)


PROGRESS_EVERY = 30.0  # seconds between two progress lines while a large corpus is read


def now_and_then(seconds: float, say: Callable[[str, float], None]) -> Callable[[str], None]:
    """`said(text)` that passes `text` and the seconds since it was made to `say`, at most once every `seconds`:
    progress lines of a long quiet phase (reading millions of corpus lines) that do not flood the log."""
    start = last = time.perf_counter()

    def said(text: str) -> None:
        nonlocal last
        now = time.perf_counter()
        if now - last >= seconds:
            last = now
            say(text, now - start)

    return said


def tokenizer_texts(
    spec: CorpusSpec, say: Callable[[str], None], option: str | None = None, numbers: bool = True
) -> Callable[[], Iterator[str]]:
    """The `texts` of `tokenizer.train_tokenizer` for the corpus `spec`: both sides, pair by pair, read anew on each
    call, with a progress line to `say` every PROGRESS_EVERY seconds (it reads the corpus twice, for the alphabet,
    then for the pieces: 2,000,000 pairs took two minutes with nothing said); with `numbers`, each number a pair has
    on both sides as the placeholder a model that reads numbers so is given (`ModelConfig.numbers`), which the
    tokenizer then learns as a piece of its own."""
    passes = iter(("for its alphabet (pass 1 of 2)", "for its pieces (pass 2 of 2)"))

    def texts() -> Iterator[str]:
        what = next(passes, "")
        said = now_and_then(PROGRESS_EVERY, lambda text, seconds: say(f"{text} so far ({seconds:,.0f}s)"))
        read = 0
        parts = corpus_parts(spec)
        readers = [read_pairs(part.spec, option=option) for part in parts]  # every file checked before reading
        for part, pairs in zip(parts, readers, strict=True):  # each corpus of a mixture looked at on its own
            first = what.endswith("(pass 1 of 2)")
            look = Segmented(part.spec, f"{option or 'data.train'}[{part.number}]" if part.number else option)
            for in_part, (_, src, tgt) in enumerate(pairs, start=1):
                read += 1
                if first:
                    look.look(src, tgt)
                if numbers:
                    src, tgt = with_number_placeholders(src, tgt)
                yield src
                yield tgt
                said(f"tokenizer: {read:,} pairs read {what}")
                if first and in_part == SPM_SAMPLE:  # said at the start, not after a first pass of minutes
                    if warning := look.warning():
                        say(f"warning: {warning}")
                    first = False
            if first and (warning := look.warning()):
                say(f"warning: {warning}")

    return texts


SPM_SAMPLE = 1000  # the first pairs, which tell a corpus already cut into subwords
SPM_MARK = "\u2581"  # "▁": SentencePiece's word-start mark, which a corpus already cut into its pieces is full of
_BPE_JOINER = re.compile(r"\w@@( |$)")  # subword-nmt's `étu@@ diant`: a piece that goes on in the next


class Segmented:
    """Whether a corpus's first SPM_SAMPLE pairs are already cut into subwords: SentencePiece's pieces (`▁Je ▁suis
    ▁étud iant .`) or subword-nmt's BPE (`Je suis étu@@ diant .`, fairseq's preprocessing), as many Marian, OpenNMT
    and fairseq users have theirs. tfm learns its subwords from plain text: the marks were read as text, and its
    translations would hold them. `look` at each pair, then `warning`."""

    def __init__(self, spec: CorpusSpec, option: str | None = None) -> None:
        self.spec, self.option = spec, option
        self.read = self.spm = self.bpe = 0

    def look(self, src: str, tgt: str) -> None:
        if self.read < SPM_SAMPLE:
            self.read += 1
            self.spm += SPM_MARK in src or SPM_MARK in tgt
            self.bpe += _BPE_JOINER.search(src) is not None or _BPE_JOINER.search(tgt) is not None

    def warning(self) -> str | None:
        """What to say of the corpus (after "warning: "), or None."""
        if self.read < 10:
            return None
        files = describe(self.spec)
        share = f"of its {'first ' if self.read == SPM_SAMPLE else ''}{self.read:,} pairs"
        where = f"{self.option or 'data.train'} {files}"
        if self.spm >= self.read / 2:
            return (
                f"{where}: {self.spm / self.read:.0%} {share} hold ▁ (U+2581), as text encoded by SentencePiece does: tfm "
                "learns its subwords from plain text and reads ▁ as a space, so its translations will not be in "
                "SentencePiece's pieces; decode the corpus first (spm_decode), or train on the plain text"
            )
        if self.bpe >= self.read / 4:  # a short sentence may hold no word cut in two
            return (
                f"{where}: {self.bpe / self.read:.0%} {share} hold '@@ ', the joiner of subword-nmt's BPE (fairseq's "
                "preprocessing): tfm learns its subwords from plain text, so its translations would hold @@; undo the "
                "BPE first (sed -r 's/(@@ )|(@@ ?$)//g'), or train on the plain text"
            )
        return None


def read_pairs(
    spec: CorpusSpec, once: bool = False, option: str | None = None, columns: TsvColumns | None = None,
    target_bom: bool = False,
) -> Iterator[Pair]:
    """Stream the sentence pairs of a corpus, line by line (nothing is held in memory).

    The files are checked for existence at once; their lines are read lazily as the stream is consumed.

    Args:
        spec: a TSV path, `bundled:NAME/FILE`, or a list/tuple [source_file, target_file]; or a mixture (a list
            of {path, weight} mappings), whose corpora are read one after the other (the weights are the batches').
        once: the caller reads the corpus once (scoring), so a pipe will do; training reads it more than once.
        option: the command-line option that gave the path(s) (e.g. "--score"), for the messages.
        columns: counts a TSV file's lines by their number of columns as they are read (two files: untouched).
        target_bom: two files: keep a byte-order mark that starts a line of the target file (`read_lines`'s
            `keep_bom`: references scored as written, as sacrebleu reads the file).

    Returns:
        A generator of (line_no, src, tgt), line_no 1-based. A pair with an empty side is yielded as is
        (`encode_corpus` skips and counts it).

    Raises:
        CorpusError: a missing file (at the call), or while iterating: invalid UTF-8, a TSV line without a tab,
            source/target files with different line counts, or no pair at all. The message names the file and line and says what to do.
        TfmError: `spec` is neither a path nor a pair of paths.
    """
    if is_mixture(spec):  # each corpus in turn, each file checked now (`columns`: read the parts one by one for it)
        readers = [read_pairs(part.spec, once, option, None, target_bom) for part in corpus_parts(spec)]
        return itertools.chain.from_iterable(readers)
    if isinstance(spec, (str, os.PathLike)):
        path = resolve_corpus_path(spec, once, option)
        return _read_tsv(path, _shown(spec, path), option, columns)
    if isinstance(spec, (list, tuple)) and len(spec) == 2:
        src_path, tgt_path = resolve_corpus_path(spec[0], once, option), resolve_corpus_path(spec[1], once, option)
        return _read_parallel(src_path, _shown(spec[0], src_path), tgt_path, _shown(spec[1], tgt_path), target_bom, option)
    raise TfmError(
        f"corpus {spec!r} is not a corpus spec: give a TSV file path (source<TAB>target per line) "
        "or a list of two line-aligned files [source_file, target_file]"
    )


def _read_tsv(path: Path, shown: str, option: str | None = None, columns: TsvColumns | None = None) -> Iterator[Pair]:
    n = full = 0  # lines, and lines with text on both sides
    if columns is not None:
        columns.shown = shown
    ids = _IdColumns(shown, path)
    for line_no, text in _read_lines(path, shown):
        parts = text.split("\t", 2)  # columns after the second (a Tatoeba/Anki attribution) are ignored
        if columns is not None:  # trailing tabs (empty columns at the end) cut no sentence
            # (a line with a tab has two columns, the second empty or not: `source<TAB>` is no line of one column)
            columns.count(line_no, max(len(text.rstrip("\t \u00a0").split("\t")), min(len(parts), 2)))
            if len(parts) >= 2:
                columns.look(line_no, parts[0], parts[1])
            if line_no == 1 and len(parts) >= 2 and _looks_like_header(parts[0], parts[1]):
                columns.header = (parts[0], parts[1])
        if ids.looking:
            ids.look(text)
        if len(parts) < 2:
            what = "is blank" if not text else "holds only whitespace" if not text.strip() else "has no tab"
            # the two files as the user gives them: a recipe's list, or the option twice on a command line
            pair = f"{option} SOURCE_FILE {option} TARGET_FILE" if option else "[source_file, target_file]"
            if n == 0 and (kind := _other_format(text, path)):  # a TMX or JSON Lines file is no TSV with a tab missing
                raise CorpusError(f"{shown}:{line_no}: {kind}")
            raise CorpusError(
                f"{shown}:{line_no}: the line {what}: each line must be source<TAB>target "
                f"(remove blank lines; for one sentence per line, give {pair})"
            )
        n += 1
        full += has_text(parts[0]) and has_text(parts[1])
        yield line_no, parts[0], parts[1]
    if ids.looking:
        ids.verdict()
    if n == 0:
        raise CorpusError(f"{shown} contains no sentence pairs: expected source<TAB>target lines")
    if full == 0:
        raise CorpusError(
            f"{shown} has {n} lines but none with both a source and a target: every line has a side that is empty "
            "or holds only whitespace or invisible characters such as U+200B (expected source<TAB>target lines)"
        )


def _other_format(text: str, path: Path) -> str | None:
    """What the first line of a corpus file without a tab shows the file to be, when it is a format of parallel text
    other than TSV (XML such as TMX or WMT's SGML, JSON Lines as Hugging Face datasets write them, CSV), with how to
    convert it; or None. Each was "the line has no tab", true of its first line and no help."""
    kind, plain = _by_name(path)
    tsv = _shell_path(free_name(path, plain.rsplit(".", 1)[0] + ".tsv"))
    cat = f"{_CAT[kind]} {_shell_path(path)} | " if kind else ""
    line = text.strip()
    if re.match(r"<(\?xml|!DOCTYPE|[A-Za-z][\w:.-]*[\s>/])", line, re.I):
        return ("XML or SGML markup (a TMX, XLIFF or SGM file?), not source<TAB>target lines: extract its sentence "
                "pairs into a text file of source<TAB>target lines first")
    if line.startswith("{"):
        import json

        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict):
            def key(name: str) -> str:  # jq's path step for a key
                return f".{name}" if re.fullmatch(r"[A-Za-z_]\w*", name) else f".{json.dumps(name)}"

            def texts(mapping: dict, outer: str = "") -> list[str]:  # its string fields, not its ids
                return [outer + key(k) for k, v in mapping.items()
                        if isinstance(v, str) and not re.fullmatch(r"(?i)(id|idx|index|uid|guid|key|.+_id)", k)]

            # Hugging Face's {"id": "0", "translation": {"en": ..., "fr": ...}}: the pair is the nested one, and an
            # id is no side of it (an "id", "idx", "..._id" key; the values themselves may be numbers: "10", "dix")
            translation = record.get("translation")
            paths = texts(translation, key("translation")) if isinstance(translation, dict) else []
            if len(paths) < 2:
                paths = texts(record)
            if len(paths) < 2:
                paths += [p for k, v in record.items() if isinstance(v, dict) for p in texts(v, key(k))]
            fields = ", ".join(paths[:2]) if len(paths) >= 2 else ".SOURCE_KEY, .TARGET_KEY"
            jq = f"jq -r '[{fields}] | join(\"\\t\")'"
            command = f"{cat}{jq}" if kind else f"{jq} {_shell_path(path)}"
            return f"a JSON record (JSON Lines?), not source<TAB>target: convert the file first, e.g. {command} > {tsv} (source key first)"
    if plain.lower().endswith(".csv") and "," in line:
        return ("comma-separated (CSV), not tab-separated: convert the file first (its header line too, if it has one, "
                f"is read as a pair: remove it), e.g. {cat}python3 -c "
                f"'import csv, sys; [print(row[0], row[1], sep=\"\\t\") for row in csv.reader(sys.stdin)]'"
                f"{'' if kind else ' < ' + _shell_path(path)} > {tsv}")
    return None


class _IdColumns:
    """Over a TSV file's first LOOK lines: whether its first or second column is no side of a pair but a record's
    field, where the text of the pair is in the columns after: a number on nearly every line, in order or beside
    another column of numbers (an id, a row number, a score the file is sorted by); a language code on every line,
    of a few codes (the Tatoeba Challenge's `cmn_Hans` and `yue_Hant` in one column); a web address on nearly every
    line (the pages the pair came from).
    Tatoeba's own download (`id<TAB>sentence<TAB>id<TAB>translation`), a pandas `to_csv(sep="\\t")` (its index first),
    WikiMatrix's `score<TAB>source<TAB>target`, the Tatoeba Challenge's and OPUS's test files (`fra<TAB>eng<TAB>source<TAB>target`)
    and ParaCrawl's raw files (`url<TAB>url<TAB>source<TAB>target<TAB>score`) were read so without a word: every source a
    number, `fra` (a model that translated everything as "eng"), an address. `verdict` raises CorpusError for such a
    file, with the `cut` of its two text columns. Numbers not in order (numbers read out as words, with an attribution
    after them) are a task of their own, and read as they are."""

    LOOK = 200

    def __init__(self, shown: str, path: Path) -> None:
        self.shown, self.path = shown, path
        self.rows: list[list[str]] = []
        self.looking = True

    def look(self, text: str) -> None:
        self.rows.append(text.split("\t"))
        if len(self.rows) >= self.LOOK:
            self.verdict()

    def verdict(self) -> None:
        self.looking = False
        rows = [r for r in self.rows if len(r) >= 2]
        if len(rows) < 5:
            return
        width = max(len(r) for r in rows)
        numbers = [[float(r[i]) for r in rows if i < len(r) and _NUMBER.fullmatch(r[i])] for i in range(width)]
        share = [len(found) / len(rows) for found in numbers]
        text = [i for i in range(width) if share[i] < 0.5 and sum(i < len(r) and has_text(r[i]) for r in rows) > len(rows) / 2]
        # in order, or beside another column of numbers (Tatoeba's two sentence ids, whatever their order)
        paired = any(share[k] >= 0.9 for k in range(2, width))
        ordered = [share[i] >= 0.9 and (paired or _monotonic(numbers[i])) for i in range(min(width, 2))]
        values = [{r[k].strip() for r in rows if k < len(r)} for k in range(width)]
        addresses = [sum(k < len(r) and bool(_URL.fullmatch(r[k].strip())) for r in rows) / len(rows) for k in range(width)]
        record = {}  # the first two columns that are a record's fields, and what each is
        for i in range(min(width, 2)):
            if ordered[i]:
                record[i] = (f"is a number on {share[i]:.0%} of its first {len(rows):,} lines: an id, a row number or "
                             "a score (Tatoeba's download, a pandas index, WikiMatrix?)")
            elif len(rows) >= 20 and (len(values[i]) <= 10 and all(_LANGUAGE_CODE.fullmatch(v) for v in values[i])
                                      or len(values[i]) <= 2 and all(v.isalpha() for v in values[i])):  # `French`
                shown = " or ".join(repr(v) for v in sorted(values[i])[:4]) + (" or ..." if len(values[i]) > 4 else "")
                record[i] = (f"is {shown} on each of its first {len(rows):,} lines: a language code or name (the "
                             "Tatoeba Challenge's or OPUS's test files?)")
            elif addresses[i] >= 0.9:
                record[i] = (f"is a web address on {addresses[i]:.0%} of its first {len(rows):,} lines: the page the "
                             "pair came from (ParaCrawl's raw files?)")
        # the pair's text: two columns of text, one of them after the first two (a column of one value, a language
        # code `eng`, or of addresses, is no side of a pair)
        text = [k for k in text if k not in record and addresses[k] < 0.5]
        text = [k for k in text if len(values[k]) > 1] or text
        if not record or len(text) < 2 or max(text) < 2:
            return
        i = next((k for k in record if ordered[k]), min(record))  # (an id's message first, as it always was)
        side = "source" if i == 0 else "target"
        name = _shell_path(self.path)
        fields = ",".join(str(k + 1) for k in text[:2])
        kind, plain = _by_name(self.path)
        out = _shell_path(free_name(self.path, "text-" + plain))
        cut = f"{_CAT[kind]} {name} | cut -f{fields} > {out}" if kind else f"cut -f{fields} {name} > {out}"
        raise CorpusError(
            f"{self.shown}: its {side} side (column {i + 1}) {record[i]}; tfm reads column 1 as the source and column 2 "
            f"as the target: cut the file down to its two text columns first (e.g. {cut})"
        )


_NUMBER = re.compile(r"\s*[-+]?\d+(\.\d+)?\s*")  # an id, a row number, a score (not "1,234" or "+33 6 12 34 05")
_URL = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.-]{0,31}://|www\.)\S+")  # a web address, alone in its column
# A language's code as corpora tag their lines with: ISO 639's two or three letters, with a script or a region
# (`fra`, `en`, `pt-BR`, `cmn_Hans`, `srp_Latn`, `zh_Hant_TW`).
_LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(?:[_-][a-z0-9]{2,4}){0,2}", re.I)


def _monotonic(values: list[float]) -> bool:
    """Whether `values` never go down, or never go up (and change at all)."""
    steps = [b - a for a, b in zip(values, values[1:], strict=False)]
    return any(steps) and (all(s >= 0 for s in steps) or all(s <= 0 for s in steps))


class _TabbedSides:
    """Two TSV files given as a list (`data.train: [a.tsv, b.tsv]`, meant as "train on both") were read as a source
    file and a target file: each "sentence" a whole `source<TAB>target` line, silently. A side whose every
    non-blank line among the first LOOK holds a tab is refused, when those lines have been read."""

    LOOK = 100

    def __init__(self, src_shown: str, tgt_shown: str, option: str | None = None) -> None:
        self.shown, self.option = (src_shown, tgt_shown), option
        self.text, self.tabbed = [0, 0], [0, 0]  # non-blank lines, and those holding a tab, per side

    def count(self, n: int, *sides: str) -> None:
        if n > self.LOOK:
            return
        for i, line in enumerate(sides):
            self.text[i] += bool(line.strip())
            self.tabbed[i] += "\t" in line.strip()
        if n == self.LOOK:
            self.check(n)

    def check(self, n: int) -> None:
        for i, shown in enumerate(self.shown):
            if self.text[i] and self.tabbed[i] == self.text[i]:
                lines = f"every one of its first {min(n, self.LOOK)} lines" if self.text[i] > 1 else "its line"
                if self.option is not None:  # a command's files (`--score a.tsv --score b.tsv`), not a recipe's
                    other = "reference" if self.option == "--score" else "target"
                    then = ("score two such files one after the other" if self.option == "--score" else
                            "to use both, join them (cat a.tsv b.tsv > both.tsv) and give that one")
                    raise CorpusError(
                        f"{self.option} {shown}, given as the {('source', other)[i]} file of {self.option} SOURCE "
                        f"{self.option} {other.upper()}, holds a tab in {lines}: it looks like a TSV "
                        f"(source<TAB>{other}), which is given alone ({self.option} {shown}); {then}"
                    )
                raise CorpusError(
                    f"{shown}, given as the {('source', 'target')[i]} file of [source_file, target_file], holds a tab "
                    f"in {lines}: it looks like a TSV (source<TAB>target); to train on two TSV files, join them "
                    "(cat a.tsv b.tsv > both.tsv) and name that one file, or give them as two corpora: [{path: a.tsv}, {path: b.tsv}]"
                )


def _read_parallel(
    src_path: Path, src_shown: str, tgt_path: Path, tgt_shown: str, target_bom: bool = False, option: str | None = None
) -> Iterator[Pair]:
    # Blank lines at the end are read as lines: a last sentence may be empty on one side (a pair skipped like
    # any other with an empty side), so "a\nb\nc\n" and "x\ny\n\n" are aligned, as `wc -l` says.
    src_lines = _read_lines(src_path, src_shown, trailing_blanks=True)
    tgt_lines = _read_lines(tgt_path, tgt_shown, trailing_blanks=True, keep_bom=target_bom)
    n = full = 0  # lines, and lines with text on both sides
    tabs = _TabbedSides(src_shown, tgt_shown, option)
    while True:
        src_item, tgt_item = next(src_lines, None), next(tgt_lines, None)
        if src_item is None or tgt_item is None:
            break
        n += 1
        full += has_text(src_item[1]) and has_text(tgt_item[1])
        tabs.count(n, src_item[1], tgt_item[1])
        yield src_item[0], src_item[1], tgt_item[1]
    tabs.check(n)
    first = src_item if src_item is not None else tgt_item
    if first is not None:
        # One file ended first: count the rest of the other one (still streaming). Blank lines alone there are
        # the end of that file (an editor's extra newline), not sentences without a counterpart.
        extra, text_left = 1, bool(first[1])
        for _, text in src_lines if src_item is not None else tgt_lines:
            extra, text_left = extra + 1, text_left or bool(text)
    if first is not None and text_left:
        n_src = n + (extra if src_item is not None else 0)
        n_tgt = n + (extra if tgt_item is not None else 0)
        longer = src_shown if n_src > n_tgt else tgt_shown
        raise CorpusError(
            f"{src_shown} has {n_src} lines but {tgt_shown} has {n_tgt}: the source and target files must be "
            f"line-aligned (one sentence per line, in the same order); {longer}:{n + 1} has no counterpart"
        )
    if n == 0:
        raise CorpusError(f"{src_shown} and {tgt_shown} contain no sentence pairs: both files are empty")
    if full == 0:
        raise CorpusError(
            f"{src_shown} and {tgt_shown} have {n} lines but no pair with both a source and a target sentence "
            "(every line is blank, or holds only invisible characters such as U+200B, on one side)"
        )
