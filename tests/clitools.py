"""Running the installed `tfm` the way the CLI tests do: plain output, one torch thread, text in and out."""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from forkserver import FORKED_ENV

TFM = Path(sys.executable).parent / "tfm"  # the console script next to the interpreter running pytest


def tiny_recipe(name: str, **sections: Any) -> str:
    """The YAML of a recipe for the smallest model the CLI tests train (32 wide, one layer a side, a 400-token
    vocabulary, fp32, sentences of at most 32 tokens), each of `sections` updating its section key by key:
    `tiny_recipe("e2e", data={"train": path, "dev": None}, train={"max_steps": 40})`."""
    recipe: dict[str, Any] = {
        "name": name,
        "data": {"max_len": 32},
        "tokenizer": {"vocab_size": 400},
        "model": {"d_model": 32, "d_ff": 64, "n_heads": 2, "n_enc_layers": 1, "n_dec_layers": 1, "max_positions": 64},
        "train": {"precision": "fp32"},
    }
    for section, values in sections.items():  # a section's keys are updated; a top-level value is set
        recipe[section] = {**recipe.get(section, {}), **values} if isinstance(values, dict) else values
    return yaml.safe_dump(recipe, sort_keys=False, allow_unicode=True)


def tfm(
    *args: str,
    stdin: bytes | str | None = None,
    cwd: Path | None = None,
    env_extra: dict[str, str | None] | None = None,
    check: bool = True,
    timeout: int = 600,
) -> subprocess.CompletedProcess:
    """Run `tfm ARGS`; stdout and stderr come back as text. With `check`, a non-zero exit or a traceback fails.

    One torch thread: the CI box has 2 shared cores, where torch's default thread pool spins against other
    jobs, and exact-resume comparisons need the same thread count anyway. The process is forked from this worker's
    fork server (tests/forkserver.py: the same entry point, without `import torch` each time) wherever the
    environment allows, else started afresh.
    """
    data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
    env = tfm_env(env_extra)
    server = _fork_server()
    if server is not None and server.forkable(env):
        proc = server.run(args, data or b"", env, cwd, timeout)
    else:
        proc = subprocess.run(
            [str(TFM), *args], input=data if data is not None else b"", capture_output=True, env=env, cwd=cwd,
            timeout=timeout,
        )
    proc.stdout, proc.stderr = proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8")
    if check:
        assert proc.returncode == 0, f"tfm {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}"
        assert "Traceback" not in proc.stderr
    return proc


class ForkServer:
    """This worker's tests/forkserver.py: started once, with the environment `tfm_env()` gives every call."""

    def __init__(self) -> None:
        self.channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.env = tfm_env()
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("forkserver.py")), str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=self.env,
        )
        theirs.close()
        self.ended: dict[int, int] = {}  # pid -> exit status, of children not yet asked about
        self._message(120)  # {"ready"}: the libraries are imported
        atexit.register(self.close)

    def forkable(self, env: dict[str, str]) -> bool:
        """Whether a call's environment agrees with the server's on what was read once, when it started."""
        read_at_start = {k for k in {*env, *self.env} if k.startswith(("PYTHON", "LD_", "TORCH_CPP_"))} | set(FORKED_ENV)
        return all(env.get(k) == self.env.get(k) for k in read_at_start)

    def run(
        self, args: tuple[str, ...], stdin: bytes, env: dict[str, str], cwd: Path | None, timeout: float
    ) -> subprocess.CompletedProcess:
        """`tfm ARGS` in a forked child whose stdin, stdout and stderr are pipes to this process, as
        `subprocess.run(..., input=stdin, capture_output=True)` gives them."""
        proc = self.start(args, env, cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            stdout, stderr = proc.communicate(stdin, timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
            raise subprocess.TimeoutExpired(proc.args, timeout) from None
        return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)

    def start(self, args: tuple[str, ...], env: dict[str, str], cwd: Path | None, *, stdin: Any = None,
              stdout: Any = None, stderr: Any = None, text: bool = False) -> Forked:
        """`tfm ARGS` forked and not waited for, its streams given as to `subprocess.Popen`: PIPE, DEVNULL, a file
        (or descriptor), or None for this process's own; with `text`, `communicate` gives and takes str."""
        ours, theirs = [], []  # our ends of the pipes (None where there is none), the child's descriptors
        for fd, given in enumerate((stdin, stdout, stderr)):
            if given == subprocess.PIPE:
                read, write = os.pipe()
                ours.append(open(write, "wb") if fd == 0 else open(read, "rb"))
                theirs.append(read if fd == 0 else write)
                continue
            ours.append(None)
            if given == subprocess.DEVNULL:
                theirs.append(os.open(os.devnull, os.O_RDWR))
            else:
                theirs.append(os.dup(fd if given is None else given if isinstance(given, int) else given.fileno()))
        request = {"args": list(args), "env": env, "cwd": str(cwd or Path.cwd()), "script": str(TFM), "plot": PLOT["drawn"]}
        try:
            socket.send_fds(self.channel, [json.dumps(request).encode()], theirs)
        finally:
            for fd in theirs:
                os.close(fd)
        while "status" in (message := self._message(30)):  # children that ended meanwhile, then this one's pid
            self.ended[message["pid"]] = message["status"]
        return Forked(self, [str(TFM), *args], message["pid"], ours, text)

    def status(self, pid: int, timeout: float | None) -> int | None:
        """The exit status of child `pid`, waiting for it up to `timeout` seconds (None: for ever); None if it
        has not ended by then."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while pid not in self.ended:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            message = self._message(left, none_on_timeout=True)
            if message is None:
                return None
            self.ended[message["pid"]] = message["status"]  # after the handshake, only ends come unasked
        return self.ended.pop(pid)

    def _message(self, timeout: float | None, none_on_timeout: bool = False) -> dict | None:
        ready, _, _ = select.select([self.channel], [], [], timeout)
        if not ready:
            if none_on_timeout:
                return None
            raise subprocess.TimeoutExpired("the fork server's reply", timeout or 0)
        message = self.channel.recv(1 << 16)
        if not message:
            raise RuntimeError(f"the fork server ended (exit {self.proc.wait()})")
        return json.loads(message)

    def close(self) -> None:
        self.channel.close()  # the server reads the end of the stream and returns
        self.proc.wait(timeout=30)


class Forked:
    """A `tfm` child of the fork server, started and not waited for: what the tests use of `subprocess.Popen`
    (pid, returncode, poll, wait, communicate, send_signal, terminate, kill)."""

    def __init__(self, server: ForkServer, args: list[str], pid: int, pipes: list, text: bool) -> None:
        self._server, self.args, self.pid, self.text = server, args, pid, text
        self.stdin, self.stdout, self.stderr = pipes
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.status(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._server.status(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def communicate(self, input: bytes | str | None = None, timeout: float | None = None) -> tuple[Any, Any]:
        """Write `input` to the child's stdin and read its stdout and stderr (those that are pipes) to their ends,
        then wait for it."""
        data = input.encode("utf-8") if isinstance(input, str) else input or b""
        try:
            out, err = _communicate(self.stdin, self.stdout, self.stderr, data, 1e9 if timeout is None else timeout)
        finally:  # closed by _communicate, also on a timeout: a second call (after a kill) only waits
            self.stdin = self.stdout = self.stderr = None
        self.wait(timeout)
        if self.text:
            out, err = (None if b is None else b.decode("utf-8") for b in (out, err))
        return out, err

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:  # not a pid that may have been given to another process since
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _communicate(to_child, out, err, data: bytes, timeout: float) -> tuple[bytes | None, bytes | None]:
    """Write `data` to the child's stdin and read its stdout and stderr to their ends, all at once (a child that
    writes much before it reads all its input would otherwise wait on a full pipe), as `Popen.communicate` does.
    Each of the three may be None (not a pipe), and then gives None."""
    deadline = time.monotonic() + timeout
    readers = [f for f in (out, err) if f is not None]
    fds = [None if f is None else f.fileno() for f in (out, err)]
    chunks: dict[int, list[bytes]] = {f.fileno(): [] for f in readers}
    writers, view = [to_child] if to_child is not None and data else [], memoryview(data)
    if to_child is not None and not data:
        to_child.close()
    try:
        while readers or writers:
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired("tfm", timeout)
            readable, writable, _ = select.select(readers, writers, [], left)
            for f in writable:
                try:
                    view = view[os.write(f.fileno(), view[: 1 << 16]):]
                except BrokenPipeError:  # the child stopped reading (it ended, or refused its input)
                    view = view[:0]
                if not view:
                    writers.remove(f)
                    f.close()
            for f in readable:
                chunk = os.read(f.fileno(), 1 << 16)
                if chunk:
                    chunks[f.fileno()].append(chunk)
                else:
                    readers.remove(f)
    finally:
        for f in (to_child, out, err):
            if f is not None:
                f.close()
    return tuple(None if fd is None else b"".join(chunks[fd]) for fd in fds)


_SERVER: list[ForkServer] = []
PLOT = {"drawn": False}  # forked calls run as tfm installed without the [plot] extra, unless a test is marked `plot`


def _fork_server() -> ForkServer | None:
    if os.environ.get("TFM_TEST_FORK", "1") == "0":
        return None
    if not _SERVER:
        _SERVER.append(ForkServer())
    return _SERVER[0]


def tfm_env(env_extra: dict[str, str | None] | None = None) -> dict[str, str]:
    """The environment `tfm` runs in here: plain output, one torch thread, no TFM_DEBUG; `env_extra` on top, where
    a value of None removes the variable."""
    env = {k: v for k, v in os.environ.items() if k not in ("TFM_DEBUG", "FORCE_COLOR")}
    env.update({"NO_COLOR": "1", "COLUMNS": "200", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **(env_extra or {})})
    return {k: v for k, v in env.items() if v is not None}


def start_tfm(*args: str, env_extra: dict[str, str | None] | None = None, **popen: Any) -> subprocess.Popen | Forked:
    """`tfm ARGS` started and not waited for (a test that signals or kills it); stdout and stderr piped as bytes
    unless `popen` says otherwise (stdin, stdout, stderr, text and cwd as `subprocess.Popen` takes them). Forked
    from the fork server where the environment allows, as `tfm` calls are; the child has Python's own Ctrl-C
    handler, as a fresh interpreter whose SIGINT is not ignored (`cmd &` in a shell ignores it) has."""
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **popen}
    env = tfm_env(env_extra)
    server = _fork_server()
    if server is not None and server.forkable(env) and set(popen) <= {"stdin", "stdout", "stderr", "text", "cwd"}:
        return server.start(args, env, popen.pop("cwd", None), **popen)
    return subprocess.Popen([str(TFM), *args], env=env, **popen)


def wait_until(
    proc: subprocess.Popen, ready: Callable[[], bool], what: str, timeout: float = 120, every: float = 0.2
) -> None:
    """Poll `ready()` every `every` seconds until true; fail with the process's stderr if it ends first, or with
    `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, proc.communicate()[1].decode()
        assert time.monotonic() < deadline, what
        time.sleep(every)


def has_lines(path: Path) -> Callable[[], bool]:
    """A `ready` for `wait_until`: the run's metrics.jsonl (or any file) has a line."""
    return lambda: path.is_file() and bool(path.read_text(encoding="utf-8").strip())


def has_module(name: str) -> bool:
    """Whether an optional dependency (an extra) is installed."""
    try:
        __import__(name)
    except ImportError:
        return False
    return True
