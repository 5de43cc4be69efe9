"""`python -m tfm_cli.torchrun ARGS`: torchrun (`torch.distributed.run`), as `tfm train --nproc-per-node` starts it.

The same launcher with the same options, quieter where tfm has already spoken: a worker that failed has printed
its one-line error, and a stop signal (Ctrl-C, SIGTERM) reaches the workers, which save a checkpoint and say so;
torchrun's own traceback after either would bury that line. A worker killed by a signal (`kill -9`, the
out-of-memory killer) cannot say so itself, and its peers stop on torchrun's SIGTERM: that is one `Error:` line
here, naming the process, the newest whole checkpoint and the command that resumes the run with the same
processes. The exit status is the first failed worker's, or 128 + the signal. It stops (SIGTERM, passed on to
the workers) when `tfm train` ends, even by `kill -9`. A job that cannot meet (node 0's port taken by another
program, an address that cannot be reached) is one `Error:` line and status 1, instead of torchrun's traceback.

torchrun keeps its workers' error files in a log directory that it makes in TMPDIR (`torchelastic_XXXX`) and never
removes: one more left behind by every job. Unless `--log-dir` is given, the job's goes in a temporary directory
of tfm's own, removed when torchrun returns (a worker's error has been read by then), however the job ended.
`tfm train` gives one of its own (marked by OWNED_LOGS_ENV): it removes it once torchrun ends (a torchrun ended
by a signal at the rendezvous cannot), and from its folders tells whether a worker had started; torchrun removes
it only when `tfm train` is gone by then.
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

LAUNCH_OPTIONS_ENV = "TFM_LAUNCH_OPTIONS"
# the log directory `tfm train` made and gave as --log-dir, which it removes once torchrun ends; torchrun removes
# it instead when `tfm train` is gone by then (killed outright, it could not)
OWNED_LOGS_ENV = "TFM_TORCHRUN_LOGS"


def main(argv: Sequence[str]) -> int:
    """Run torchrun on `argv` (its options, then `-m tfm_cli train ...`); the exit status."""
    import os
    import signal

    from tfm_cli.signals import PARENT_ENV, stop_with_parent

    if not stop_with_parent():  # `tfm train` is gone already: start nothing
        return 128 + signal.SIGTERM
    parent = os.environ.get(PARENT_ENV, "")
    owned = os.environ.pop(OWNED_LOGS_ENV, None)
    os.environ[PARENT_ENV] = str(os.getpid())  # for the workers, which stop when torchrun does
    # c10d's C++ warnings, torchrun's and its workers': the agent of node 1, whose node 0 ends (a stop in its final
    # phase, which rank 0 does alone), printed "recvValueWithTimeout failed ... Exception raised from recvBytes" and
    # 34 frames, and so did a worker whose process 0 ended while they met, before its own error line. Unless the
    # user set a level (TORCH_CPP_LOG_LEVEL=WARNING shows them again). Put back as it was once torchrun returns.
    given_level = os.environ.get("TORCH_CPP_LOG_LEVEL")
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    # for the workers' resume hints: this node's own launcher options (`--node-rank 1 --master-addr ...`), which
    # they cannot tell from torchrun's environment (a hint of `--nnodes 2` alone was refused as it stood)
    os.environ[LAUNCH_OPTIONS_ENV] = " ".join(o for o in _run_and_launch_options(argv)[1] if not o.startswith("--device "))
    from torch.distributed import DistError
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError
    from torch.distributed.run import main as torchrun

    # torchrun's agent logged, after a worker's own one-line error, the SIGTERM it sends the other workers ("W...
    # Sending process N closing signal SIGTERM") and the failure ("E... failed (exitcode: 1) local_rank: 0 (pid:
    # N) of binary: ..."), which buried that line. Its elastic loggers are quiet; a worker killed by a signal,
    # which says nothing itself, is said below in one Error line of tfm's own.
    # Each of its modules' loggers has a level of its own (torch's get_logger sets WARNING), so the parent's level
    # alone let "W... Received 2 death signal, shutting down workers" through on Ctrl-C or SIGTERM: its records
    # now stop at the parent, whatever their logger's level.
    elastic = logging.getLogger("torch.distributed.elastic")
    elastic.setLevel(logging.CRITICAL)
    elastic.addHandler(logging.NullHandler())
    elastic.propagate = False
    _quiet_keep_alive_timer_stop()
    argv = list(argv)
    logs = None if _gives_log_dir(argv) else tempfile.mkdtemp(prefix="tfm-torchrun-")
    try:
        torchrun([f"--log-dir={logs}", *argv] if logs else argv)
    except SignalException as stop:  # the workers were sent the same signal and have saved
        return 128 + int(stop.sigval)
    except ChildFailedError as failed:
        rank, failure = failed.get_first_failure()
        code = failure.exitcode
        if code < 0:  # killed by signal -code: the process could not say so itself
            print(killed_message(f"process {rank} of the job (pid {failure.pid})", -code, argv), file=sys.stderr)
        return code if code > 0 else 128 - code if code < 0 else 1  # a negative code: killed by signal -code
    except (DistError, RendezvousError) as error:  # the rendezvous, before any worker started
        lines = str(error).strip().splitlines() or [type(error).__name__]
        timed_out = "timed out" in lines[0].lower() or "timeout" in lines[0].lower()  # (RendezvousTimeoutError)
        hint = (  # every node was waited for that long (up to 15 minutes), and one or more never came
            "start the same command on every node (each with its own --node-rank) within the wait, and check that "
            "each can reach node 0's address and port"
            if timed_out
            else "the port may be taken by another program: choose a free one (--master-port P, or "
            "--rdzv-endpoint HOST:PORT), and check that node 0's address can be reached from this node"
        )
        print(f"Error: the processes of the job could not meet: {lines[0]}\nhint: {hint}", file=sys.stderr)
        return 1
    finally:
        if given_level is None:
            os.environ.pop("TORCH_CPP_LOG_LEVEL", None)
        if logs:
            shutil.rmtree(logs, ignore_errors=True)
        elif owned and not (parent.isdigit() and os.getppid() == int(parent)):  # `tfm train` was killed
            shutil.rmtree(owned, ignore_errors=True)
    return 0


def _quiet_keep_alive_timer_stop() -> None:
    """Leave out torch's "Exception ignored in: <finalize object ...> ... RuntimeError: cannot join current
    thread", which torchrun printed now and then after a stop signal.

    The rendezvous keeps itself alive with a `_PeriodicTimer`, whose `weakref.finalize` sets its thread's stop event
    and then joins that thread. The timer is in a reference cycle, so it is freed by the cyclic garbage collector,
    which runs in whichever thread happens to allocate: when that is the timer's own thread, the join raises (the
    thread stops anyway: its event is already set). Every other unraisable exception is reported as before.
    """
    report = sys.unraisablehook

    def hook(unraisable) -> None:
        frames = []
        tb = unraisable.exc_traceback
        while tb is not None:
            frames.append(tb.tb_frame.f_code.co_name)
            tb = tb.tb_next
        if not (
            isinstance(unraisable.exc_value, RuntimeError)
            and str(unraisable.exc_value) == "cannot join current thread"
            and "_stop_thread" in frames
        ):
            report(unraisable)

    sys.unraisablehook = hook


def killed_message(who: str, signum: int, argv: Sequence[str]) -> str:
    """The Error line (and hint) for a process of the job (`who`) killed by `signum`: what of the run is intact,
    and the command that resumes it with the same processes (from `argv`: torchrun's options, then `-m tfm_cli
    train ... --out RUN` or `--resume RUN`, as `tfm train --nproc-per-node` starts it)."""
    import signal

    from tfm_cli.errors import shell_word

    line = (f"Error: {who} was killed by {_signal_name(signum)}"
            f"{' (out of memory?)' if signum == signal.SIGKILL else ''}, which stopped the job")
    run_dir, options = _run_and_launch_options(argv)
    if run_dir is None:
        return line
    from tfm_cli.runs import checkpoint_steps, state_path

    whole = [step for step, weights in checkpoint_steps(Path(run_dir)) if state_path(weights).is_file()]
    if not whole:
        return f"{line}; no checkpoint was saved yet\nhint: start the run again"
    resume = " ".join(["tfm train --resume", shell_word(run_dir), *options])
    return f"{line}; the checkpoints of {shell_word(run_dir)} (up to step {whole[-1]}) are intact\nhint: continue with `{resume}`"


def _run_and_launch_options(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """The run directory of `-m tfm_cli train ... --out RUN` (or `--resume RUN`) in torchrun's `argv`, and the
    `tfm train` options that start the same job: the launcher's (`torchrun_command`'s, read back) and --device."""
    argv = list(argv)
    try:
        start = argv.index("-m")
    except ValueError:
        return None, []
    launcher, command = argv[:start], argv[start + 1:]
    if command[:2] != ["tfm_cli", "train"]:
        return None, []
    run_dir = None
    for option in ("--resume", "--out"):
        if option in command[:-1]:
            run_dir = command[command.index(option) + 1]
            break
    given = dict(arg[2:].split("=", 1) for arg in launcher if arg.startswith("--") and "=" in arg)
    options = [f"--nproc-per-node {given.get('nproc-per-node', '1')}"]
    if given.get("nnodes", "1") != "1":
        options.append(f"--nnodes {given['nnodes']}")
    for name in ("node-rank", "master-addr", "master-port", "rdzv-endpoint"):
        if name in given:
            options.append(f"--{name} {given[name]}")
    if "--device" in command[:-1] and (device := command[command.index("--device") + 1]) != "auto":
        options.append(f"--device {device}")
    return run_dir, options


def _signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _gives_log_dir(argv: Sequence[str]) -> bool:
    """Whether torchrun's own options (those before `-m module`, as tfm starts it) name a log directory."""
    for arg in argv:
        if arg == "-m":
            return False
        if arg.split("=", 1)[0] in ("--log-dir", "--log_dir"):
            return True
    return False


if __name__ == "__main__":
    from tfm_cli.console import numpy_before_torch

    try:
        numpy_before_torch()  # a stop passed on while torch loads must not be lost (console.NumpyBeforeTorch)
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:  # Ctrl-C passed on by `tfm train` while torch was still loading: no worker yet
        sys.exit(128 + 2)
