"""Writing files whole or not at all, without importing torch (the CLI's writers use it too).

A reader (or a crash, a full disk, Ctrl-C) sees the old file or the new one, never half of one; the data is
synced to the disk before the rename, and the folder after it.
"""

from __future__ import annotations

import codecs
import errno
import json
import os
import re
import stat
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tfm_cli.errors import TfmError


def json_value(text: str | bytes) -> Any:
    """`json.loads` for text read from a file: JSON nested deeper than Python's recursion limit (`[[[[...`, a
    damaged or hostile file) is a ValueError, as any other malformed JSON is, not a RecursionError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None

WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS}  # a disk that fills up, or fails


def _name_bytes(error: UnicodeError) -> tuple[bytes | str, int]:
    """The codec error handler TEXT_ERRORS. A path's bytes that the locale's encoding could not read are held by
    Python as lone surrogates (every non-ASCII name under LC_ALL=C with PYTHONUTF8=0; a Latin-1 name anywhere), and
    UTF-8 text with them failed to be written ("surrogates not allowed": a traceback at the first status line, the
    model card, the recipe). Written back as the bytes they were where those are UTF-8 (`uni_é` stays `uni_é`),
    else as backslash escapes (`b\\udcffad`), so the text stays UTF-8 (and JSON valid)."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    run = error.object[error.start : error.end]
    try:
        raw = run.encode("utf-8", "surrogateescape")
        raw.decode("utf-8")
        return raw, error.end
    except UnicodeError:
        return run.encode("ascii", "backslashreplace").decode("ascii"), error.end


TEXT_ERRORS = "tfm-name-bytes"  # errors= for the text tfm writes: stdout, stderr, and files that may name a path
codecs.register_error(TEXT_ERRORS, _name_bytes)


def as_path(given: object, who: str, name: str = "a path") -> str | Path | None:
    """`given` as a str or Path, for an API that takes a path: any `os.PathLike` (a `PurePosixPath`, an
    `os.DirEntry`) is taken as the path it names; None stays None; anything else, a bytes path included, is a
    TypeError naming `who`; an empty string (an unset variable: it would mean the current directory) a TfmError."""
    if isinstance(given, os.PathLike):
        given = os.fspath(given)
    if given is not None and not isinstance(given, (str, Path)):
        raise TypeError(f"{who} takes {name} (str or os.PathLike) or None, not {type(given).__name__}")
    if isinstance(given, str) and not given.strip():  # Path("") is the current directory: a run written into it
        raise TfmError(f"{who}: {name} is empty (an unset variable?): give a path")
    return given


# How much longer than a file's name its temporary name is (".NAME." + mkstemp's 8 characters + ".tmp"): a name
# within this of the file system's limit can be the file's but not its temporary file's.
TEMPORARY_NAME_EXTRA = 14


# Files of weights, whatever folder holds them (safetensors, ONNX graphs, PyTorch's and Hugging Face's checkpoints).
WEIGHT_SUFFIXES = frozenset({".safetensors", ".onnx", ".pt", ".pth", ".ckpt", ".bin"})


def missing(path: Path) -> str:
    """How a path that does not exist is said: "does not exist", or, for a symbolic link whose end is not there or
    that links round in a loop, what it links to ("does not exist" sent users looking for a file that is there)."""
    try:
        if Path(path).is_symlink():
            return f"is a symbolic link to {os.readlink(path)}, which does not exist (or links round in a loop)"
    except OSError:
        pass
    return "does not exist"


# fsync's errors that say the file or folder cannot be synced (a platform or file system without it), not that
# the data failed to reach the disk (EIO, ENOSPC: those are raised).
_NO_SYNC = {errno.EINVAL, errno.EBADF, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EACCES, errno.EPERM}


def sync_file(path: str | os.PathLike[str]) -> None:
    """Force a written file's data onto the disk (fsync) before it is renamed into place: after a crash of the
    machine (a power cut, the virtual machine killed) a rename can outlive data still in the page cache, and the
    name then holds an empty or partial file (XFS; ext4 outside its rename heuristics). A full disk or an I/O
    error found by the sync is raised (the caller names the file); a file that cannot be synced (a pipe, a
    platform without it) is left as it is."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as error:
        if error.errno in _NO_SYNC:
            return
        raise
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.fsync(fd)
    except OSError as error:
        if error.errno not in _NO_SYNC:
            raise
    finally:
        os.close(fd)


def sync_folder(folder: str | os.PathLike[str]) -> None:
    """fsync `folder`, so that a file renamed into it keeps its new name after a crash of the machine; as far as
    the system allows: a folder that cannot be opened or synced so (Windows, some network file systems) is left as
    it is, and an error of the sync itself too, as the file is in place by then and reads as written (an error
    raised here was said as a write that failed, "the file there is as it was", of a file already replaced)."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, write: Callable[[str], object]) -> None:
    """Call `write(tmp_path)`, sync it to the disk, then rename it onto `path` and sync the folder, so that readers
    see the old file or the new one, never half, and a crash of the machine (not only of the process) cannot
    leave `path` empty. A file replaced keeps its permissions (as a shell's `>` keeps them: a private 0600 output
    became 0644); a new one reads like any other (0666 less the umask)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as error:  # a read-only folder: name the file, not the temporary one
        raise OSError(error.errno, error.strerror, str(path)) from error
    os.close(fd)
    try:
        write(tmp)
        sync_file(tmp)  # (before the chmod: mkstemp's 0600 can be read back, a write-only file's mode could not)
        os.chmod(tmp, _mode_of(path))  # mkstemp makes 0600
        os.replace(tmp, path)
        sync_folder(path.parent)
    except BaseException as error:
        failure = write_failure(error, path)  # before the temporary file goes: a full disk is still full
        Path(tmp).unlink(missing_ok=True)
        if failure is not None:
            raise failure from error
        raise


def write_failure(error: BaseException, path: Path) -> OSError | None:
    """`error`, raised while `path` was being written, as an OSError naming `path`; None when it is not the
    disk's (a bug, Ctrl-C).

    The CLI says an OSError in one line, but only where it names its file: a write's error names none (it was
    taken for stdout's), and safetensors' and torch's writers raise errors of their own, a traceback. safetensors
    keeps the system's "(os error 28)" in its message; torch says only "unexpected pos", so for its error a
    folder left with no free space is taken as the cause.
    """
    path = Path(path)
    if isinstance(error, OSError):
        return OSError(error.errno, error.strerror, str(path)) if error.errno else None
    if not isinstance(error, Exception) or isinstance(error, TfmError):  # Ctrl-C; a problem already said
        return None
    found = re.search(r"\(os error (\d+)\)", str(error))
    if found:
        code = int(found.group(1))
    elif _no_space_left(path.parent):
        code = errno.ENOSPC
    else:
        return None
    return OSError(code, os.strerror(code), str(path))


def _no_space_left(folder: Path) -> bool:
    try:
        return os.statvfs(folder).f_bavail == 0
    except (OSError, AttributeError):  # no such folder, or no statvfs (Windows)
        return False


def utf8_name(path: str | Path) -> bool:
    """Whether `path` is UTF-8 (a name in another encoding, Latin-1 on a shared disk, holds surrogates in Python),
    as the safetensors library, tensorboard and JSON files that record the path need."""
    try:
        os.fsencode(path).decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def name_too_long(path: Path, existing: Path) -> str | None:
    """Why `path` cannot be created below `existing` (its nearest folder that exists) because a name on the way is
    longer than the file system takes, or None: said before a command's work, not by the write at its end. The
    file's own name must leave room for its temporary name (`atomic_write`)."""
    limit = os.pathconf(existing, "PC_NAME_MAX") if hasattr(os, "pathconf") else 255
    part, room = path.absolute(), limit - TEMPORARY_NAME_EXTRA
    while part != existing and part != part.parent:
        size = len(os.fsencode(part.name))
        if size > room:
            which = "its name" if room < limit else f"the folder name {part.name[:20]}..."
            return f"{which} is {size} bytes, and this file system takes {room} at most there"
        part, room = part.parent, limit
    return None


def home_path(text: str | os.PathLike[str]) -> Path:
    """`text` as a path, a leading `~` the home folder (and `~user` that user's), as a shell reads it; `~name` of no
    such user as written (Path.expanduser raised "Could not determine home directory", a traceback).

    Raises:
        TfmError: `~` or `~/...` where there is no home folder to read it as (HOME unset, a user with no entry).
    """
    try:
        return Path(text).expanduser()
    except RuntimeError:
        word = os.fspath(text)
        if word == "~" or word.startswith("~/"):  # not a name: the home, which cannot be found (not a folder `~` here)
            from tfm_cli.errors import TfmError

            raise TfmError(f"{word}: there is no home folder to read ~ as (HOME is not set)",
                           hint="set HOME, or give the path in full") from None
        return Path(text)


def free_name(path: Path, name: str) -> Path:
    """The file `name` beside `path`, or `converted-name`, `converted-2-name`, ... where that one is there (or is
    `path` itself): the file a command in a message writes, never over one that is there."""
    candidates = [name, f"converted-{name}", *(f"converted-{k}-{name}" for k in range(2, 100))]
    return next((path.with_name(c) for c in candidates if c != path.name and not os.path.lexists(path.with_name(c))),
                path.with_name(f"converted-{name}"))


def remove_empty(folders: Sequence[Path]) -> None:
    """Remove these folders (deepest first), as long as they are empty: those a failed write made on the way."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def nearest_existing(path: Path) -> Path:
    """`path`, or the nearest of its parents that exists: where a writer would have to create the rest (as
    written: a relative path gives a relative answer, "." at most)."""
    existing = Path(path)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return existing


def _mode_of(path: Path) -> int:
    """The permission bits a file written to `path` should have: those of the file it replaces, if any."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o666 & ~current_umask()


def current_umask() -> int:
    """The process's file-creation mask (reading it means setting it, so set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class DirectoryLock:
    """An exclusive, advisory lock on a directory (`flock` on the directory itself: no lock file to leave behind),
    held until `release()` or the process ends, however it ends (the kernel drops it with the process).

    `acquire()` answers at once: False when another process holds it. Where the file system cannot lock
    (flock unsupported, e.g. some network mounts) it answers True: the lock guards against a mistake, it is not
    needed for correctness.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    def acquire(self) -> bool:
        if self._fd is not None:
            return True
        fd, held = self._flock(exclusive=True)
        if not held:
            self._fd = fd
        return not held

    def held_elsewhere(self) -> bool:
        """Whether another process holds the lock, asked with a shared lock taken and let go at once: two such
        questions at the same moment do not see each other, as two exclusive tries did (the ranks of a job each ask
        before they start, and one was told the run was "in use by another process": its peer's question)."""
        if self._fd is not None:
            return False
        fd, held = self._flock(exclusive=False)
        if fd is not None:
            os.close(fd)
        return held

    def _flock(self, exclusive: bool) -> tuple[int | None, bool]:
        """The directory opened and locked without waiting: (its descriptor, False), or (None, True) where another
        process holds the lock. A file system that cannot lock counts as one where nobody holds it."""
        import errno
        import fcntl

        fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                os.close(fd)
                return None, True
        return fd, False

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the lock
            self._fd = None

    def moved(self) -> Path | None:
        """Where the locked directory is now when its path no longer names it (renamed, or deleted: `mv RUN
        RUN-old` while it trains, then another `tfm train --out RUN`, whose folder the first process then wrote
        into); None while it does, or when no lock is held. The new place comes from /proc where there is one."""
        if self._fd is None:
            return None
        held = os.fstat(self._fd)
        try:
            now = os.stat(self.path)
        except OSError:
            now = None
        if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            return None
        try:
            where = Path(os.readlink(f"/proc/self/fd/{self._fd}"))
        except OSError:
            return Path("?")
        return where
