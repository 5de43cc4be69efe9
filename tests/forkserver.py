"""A fork server for the CLI tests: `tfm` in a process of its own, without paying for `import torch` each time.

A fresh `tfm` process spends about 3 s of a slow 2-core CPU importing PyTorch before it reads its first argument,
and a training 2 s more importing the torch._dynamo that torch's optimizers import; the suite starts hundreds of
them. This server imports the heavy third-party libraries once (torch and torch._dynamo, safetensors, tokenizers,
typer, rich, yaml, sacrebleu, tensorboard; never `tfm_cli`), then forks one child per call. The child is what a fresh
`tfm` process is from there on: it takes the call's environment, working directory, argv and standard streams,
imports `tfm_cli` afresh (so no state of ours is shared between calls), runs the installed console script's entry
point (`[project.scripts] tfm`, found through the package metadata, as the `tfm` script finds it), then ends as an
interpreter does: threads joined, atexit handlers run, streams flushed, and the exit status of `sys.exit`.

What a child cannot take from its call is what was read while the server started: the OpenMP and MKL thread
settings, the locale, and every PYTHON* and LD_* variable (PYTHONPATH and its sitecustomize, the I/O encoding).
`clitools.tfm` therefore forks only calls whose environment agrees with the server's on those (`FORKED_ENV`, and
the PYTHON* and LD_* variables), and starts a real process for the rest; the tests that signal or kill `tfm`
(`start_tfm`) and those that run the `tfm` script by path start real processes too.
`TFM_TEST_FORK=0` makes every call a real process.

Protocol, over a Unix socket the server inherits (SOCK_SEQPACKET: one message each): a request is one JSON object
{"args", "env", "cwd", "script"} sent with three file descriptors (SCM_RIGHTS), the child's stdin, stdout and
stderr: pipes, as `subprocess.run` gives a process. The server answers {"pid"} once forked and {"status"} when the child has ended (its exit code,
or minus the signal that ended it, as `subprocess` reports it).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

FORKED_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "LANG", "LC_ALL", "LC_CTYPE")  # and PYTHON*, LD_*


def _child(request: dict, fds: list[int]) -> None:
    """In the forked child: become the `tfm` process of `request`, run it, and never return."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter has them
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
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

    channel = socket.socket(fileno=int(sys.argv[1]))
    sys.stdout = sys.stderr  # nothing of the server's goes to a child's stdout
    channel.send(json.dumps({"ready": os.getpid()}).encode())
    while True:
        message, fds, _, _ = socket.recv_fds(channel, 1 << 20, 3)
        if not message:
            return  # the tests are over
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            channel.close()
            _child(json.loads(message), fds)
        for fd in fds:
            os.close(fd)
        channel.send(json.dumps({"pid": pid}).encode())
        _, status = os.waitpid(pid, 0)
        channel.send(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode())


if __name__ == "__main__":
    serve()
