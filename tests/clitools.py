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
        self._reply(120)  # {"ready"}: the libraries are imported
        atexit.register(self.close)

    def forkable(self, env: dict[str, str]) -> bool:
        """Whether a call's environment agrees with the server's on what was read once, when it started."""
        read_at_start = {k for k in {*env, *self.env} if k.startswith(("PYTHON", "LD_"))} | set(FORKED_ENV)
        return all(env.get(k) == self.env.get(k) for k in read_at_start)

    def run(
        self, args: tuple[str, ...], stdin: bytes, env: dict[str, str], cwd: Path | None, timeout: float
    ) -> subprocess.CompletedProcess:
        """`tfm ARGS` in a forked child whose stdin, stdout and stderr are pipes to this process, as
        `subprocess.run(..., input=stdin, capture_output=True)` gives them."""
        pipes = [os.pipe() for _ in range(3)]  # (read, write) each
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1]]
        request = {"args": list(args), "env": env, "cwd": str(cwd or Path.cwd()), "script": str(TFM)}
        try:
            socket.send_fds(self.channel, [json.dumps(request).encode()], theirs)
        finally:
            for fd in theirs:
                os.close(fd)
        pid = self._reply(30)["pid"]
        with open(pipes[0][1], "wb") as to_child, open(pipes[1][0], "rb") as out, open(pipes[2][0], "rb") as err:
            try:
                stdout, stderr = _communicate(to_child, out, err, stdin, timeout)
                status = self._reply(timeout)["status"]
            except subprocess.TimeoutExpired:
                os.kill(pid, signal.SIGKILL)
                self._reply(30)
                raise subprocess.TimeoutExpired([str(TFM), *args], timeout) from None
        return subprocess.CompletedProcess([str(TFM), *args], status, stdout, stderr)

    def _reply(self, timeout: float) -> dict:
        ready, _, _ = select.select([self.channel], [], [], timeout)
        if not ready:
            raise subprocess.TimeoutExpired("the fork server's reply", timeout)
        message = self.channel.recv(1 << 16)
        if not message:
            raise RuntimeError(f"the fork server ended (exit {self.proc.wait()})")
        return json.loads(message)

    def close(self) -> None:
        self.channel.close()  # the server reads the end of the stream and returns
        self.proc.wait(timeout=30)


def _communicate(to_child, out, err, data: bytes, timeout: float) -> tuple[bytes, bytes]:
    """Write `data` to the child's stdin and read its stdout and stderr to their ends, all at once (a child that
    writes much before it reads all its input would otherwise wait on a full pipe), as `Popen.communicate` does."""
    deadline = time.monotonic() + timeout
    chunks: dict[int, list[bytes]] = {out.fileno(): [], err.fileno(): []}
    readers, writers, view = [out, err], [to_child] if data else [], memoryview(data)
    if not data:
        to_child.close()
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
    return b"".join(chunks[out.fileno()]), b"".join(chunks[err.fileno()])


_SERVER: list[ForkServer] = []


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


def start_tfm(*args: str, **popen: Any) -> subprocess.Popen:
    """`tfm ARGS` started and not waited for (a test that signals or kills it); stdout and stderr piped as bytes
    unless `popen` says otherwise."""
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **popen}
    return subprocess.Popen([str(TFM), *args], env=tfm_env(), **popen)


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
