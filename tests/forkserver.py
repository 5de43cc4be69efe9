"""A fork server for the CLI tests: `tfm` in a process of its own, without paying for `import torch` each time.

A fresh `tfm` process spends about 3 s of a slow 2-core CPU importing PyTorch before it reads its first argument,
a training 2 s more importing the torch._dynamo that torch's optimizers import, and one with a dev set 1-2 s more
importing matplotlib for its curves.png; the suite starts hundreds of them. This server imports the heavy third-party
libraries once (torch and torch._dynamo, safetensors, tokenizers, typer, rich, yaml, sacrebleu, tensorboard,
matplotlib's pyplot where installed; never `tfm_cli`), then forks one child per call. The child is what a fresh
`tfm` process is from there on: it takes the call's environment, working directory, argv and standard streams,
imports `tfm_cli` afresh (so no state of ours is shared between calls), runs the installed console script's entry
point (`[project.scripts] tfm`, found through the package metadata, as the `tfm` script finds it), then ends as an
interpreter does: threads joined, atexit handlers run, streams flushed, and the exit status of `sys.exit`.

What a child cannot take from its call is what was read while the server started: the OpenMP and MKL thread
settings, the locale, matplotlib's configuration and cache folders (MPLCONFIGDIR, XDG_*), and every PYTHON*
and LD_* variable (PYTHONPATH and its sitecustomize, the I/O encoding). `clitools` therefore forks only calls whose
environment agrees with the server's on those (`FORKED_ENV`, and the PYTHON* and LD_* variables), and starts a real
process for the rest, and for the tests that run the `tfm` script by path. `TFM_TEST_FORK=0` makes every call a
real process.

A training draws curves.png at its end with matplotlib, about a second of a slow CPU even with pyplot imported, which
most tests never look at. A request says whether the child may import matplotlib (`"plot"`); a child that may not
runs as `tfm` does when installed without the [plot] extra (no curves.png, no `curves:` line; `inspect-attn
--image` says what to install). The tests that look at what matplotlib draws are marked `plot` (tests/conftest.py); a fresh
process always has matplotlib.

Protocol, over a Unix socket the server inherits (SOCK_SEQPACKET: one message each): a request is one JSON object
{"args", "env", "cwd", "script", "plot"} sent with three file descriptors (SCM_RIGHTS), the child's stdin, stdout
and stderr. The server answers {"pid"} once forked, and {"pid", "status"} whenever a child has ended (its exit code, or
minus the signal that ended it, as `subprocess` reports it). Several children may run at once (a test that starts
a training, then calls `tfm` again while it runs), so these come in any order after the request's {"pid"}; the
client (clitools.ForkServer) sorts them out.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import socket
import sys
import tempfile

# Read once, at start: the thread settings, the locale, and where matplotlib keeps its configuration and font cache
# (not HOME itself, which calls change to test `~`: a child with another HOME draws with the server's folders).
FORKED_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "LANG", "LC_ALL", "LC_CTYPE",
              "MPLCONFIGDIR", "MPLBACKEND", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")  # and PYTHON*, LD_*


def _child(request: dict, fds: list[int]) -> None:
    """In the forked child: become the `tfm` process of `request`, run it, and never return."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter has them
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # found again from this call's TMPDIR at its first use, as in a fresh interpreter
        if not request.get("plot", True):  # as installed without the [plot] extra: `import matplotlib` fails
            for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
                sys.modules[name] = None
        for fd, given in enumerate(fds):
            os.dup2(given, fd)
            os.close(given)
        sys.stdout = sys.__stdout__  # the server wrote its log to stderr; a child's prints go to its own stdout
        sys.argv = [request["script"], *request["args"]]
        from importlib.metadata import entry_points

        (script,) = entry_points(group="console_scripts", name="tfm")
        try:
            result = script.load()()
            code = 0 if result is None else result
        except SystemExit as stop:
            code = stop.code
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        code = code or 0
    except KeyboardInterrupt:
        code = 128 + signal.SIGINT
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            import atexit
            import threading

            threading._shutdown()  # as an interpreter ends: wait for the threads that are not daemons, then atexit
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 1)


def _matplotlib_folders_writable() -> bool:
    """Whether matplotlib's configuration and cache folders (its own lookup: MPLCONFIGDIR, else the XDG folders
    under HOME) can be written, or made."""
    home = os.path.expanduser("~")
    config = os.environ.get("MPLCONFIGDIR") or os.path.join(os.environ.get("XDG_CONFIG_HOME") or f"{home}/.config", "matplotlib")
    cache = os.environ.get("MPLCONFIGDIR") or os.path.join(os.environ.get("XDG_CACHE_HOME") or f"{home}/.cache", "matplotlib")
    for folder in (config, cache):
        while folder and not os.path.exists(folder):
            folder = os.path.dirname(folder)
        if not folder or not os.access(folder, os.W_OK):
            return False
    return True


def serve() -> None:
    import rich  # noqa: F401  (imported here once, so that no call pays for them again)
    import sacrebleu  # noqa: F401
    import safetensors.torch  # noqa: F401
    import tokenizers  # noqa: F401
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401  (2 s: torch.optim's first param group imports it, so every training does)
    import torch.utils.tensorboard  # noqa: F401
    import typer  # noqa: F401
    import yaml  # noqa: F401

    for name in (  # what typer and rich import on first use, in every call (0.3-0.5 s a call on a slow CPU)
        "typer._adapters",  # typer's parameter coercion, and the pydantic it imports: every call with an argument
        "typer.rich_utils",  # help and usage errors
        "rich.console", "rich.table", "rich.panel", "rich.columns", "rich.markdown", "rich.progress",
        "rich.traceback", "rich._emoji_codes",
    ):
        with contextlib.suppress(ImportError):  # private or moved in another version: that call pays, as before
            importlib.import_module(name)

    if _matplotlib_folders_writable():  # else its import makes a temporary folder that each child's atexit would remove
        with contextlib.suppress(ImportError):  # the [plot] extra: every training with a dev set draws curves.png
            import matplotlib

            matplotlib.use("Agg")  # as tfm_cli.monitor sets it, before pyplot
            import matplotlib.pyplot  # noqa: F401

    channel = socket.socket(fileno=int(sys.argv[1]))
    sys.stdout = sys.stderr  # nothing of the server's goes to a child's stdout
    wake, woken = os.pipe()  # a child's end (SIGCHLD) wakes the loop through this pipe
    os.set_blocking(wake, False)
    os.set_blocking(woken, False)
    signal.set_wakeup_fd(woken)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a Python handler, without which no wake-up is written
    channel.send(json.dumps({"ready": os.getpid()}).encode())
    children: set[int] = set()
    while True:
        readable, _, _ = select.select([channel, wake], [], [])
        if wake in readable:
            with contextlib.suppress(BlockingIOError):
                os.read(wake, 1 << 12)
            for pid in sorted(children):
                ended, status = os.waitpid(pid, os.WNOHANG)
                if ended:
                    children.discard(pid)
                    channel.send(json.dumps({"pid": pid, "status": os.waitstatus_to_exitcode(status)}).encode())
        if channel in readable:
            message, fds, _, _ = socket.recv_fds(channel, 1 << 20, 3)
            if not message:
                return  # the tests are over (a child still running goes on, as a started process would)
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in (channel.fileno(), wake, woken):
                    os.close(fd)
                _child(json.loads(message), fds)
            for fd in fds:
                os.close(fd)
            children.add(pid)
            channel.send(json.dumps({"pid": pid}).encode())

if __name__ == "__main__":
    serve()
