"""The signals that stop a run, and holding them over code that a KeyboardInterrupt would break.

Python runs a signal's handler between two bytecodes of whatever the main thread is doing. Where the handler
raises KeyboardInterrupt (Python's for Ctrl-C, `tfm train`'s for SIGTERM and SIGHUP) inside the pure-Python
locking of `threading.Condition` or `queue.Queue`, a lock stays held or a wake-up is lost: tensorboard's event
writer, interrupted so, made `close()` wait two minutes or for ever. `held_stop_signals()` notes such a signal
over a block and passes it on once the block is done. The training loop holds them for a whole step
(`tfm_cli.training.stopping.HeldStops`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

# In the order that decides which one the ranks of a DDP job report when they received different ones: a
# scheduler's notice first.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGXCPU", "SIGHUP", "SIGINT") if hasattr(signal, name))


def stops_the_run(handler: Any) -> bool:
    """Whether `handler` is one that raises KeyboardInterrupt: Python's for Ctrl-C, or one marked with
    `raises_keyboard_interrupt` (`tfm train`'s for SIGTERM and SIGHUP). Another program's handler is left alone."""
    return handler is signal.default_int_handler or bool(getattr(handler, "raises_keyboard_interrupt", False))


def swap_handlers(handlers: dict[int, Any], replaced: dict[int, Any] | None = None) -> None:
    """Install `handlers` (signal number -> handler) whole, even when a signal's handler raises half-way.

    A signal landing between two installs runs its handler there; one that raises (KeyboardInterrupt) stopped a
    plain loop with some handlers swapped and the ones they replaced unrecorded, so they stayed for good (a later
    SIGTERM noted by a handler nobody read). Here the swap goes on to the end and the exception is raised after it,
    and `replaced` (signal -> the handler it had) is filled before each install, so the caller can always put
    them back. (Blocking the signals meanwhile would not do: another thread of the process, torch's or
    tensorboard's, takes the signal, and Python still runs its handler in the main thread.)
    """
    replaced = {} if replaced is None else replaced
    todo, raised = list(handlers.items()), None
    while todo:
        try:
            sig, handler = todo[0]
            if sig not in replaced:
                replaced[sig] = signal.getsignal(sig)
            signal.signal(sig, handler)
            todo.pop(0)  # (a signal landing before this installs the same handler again: harmless)
        except KeyboardInterrupt as error:  # raised by a stop signal's handler: finish the swap first
            raised = raised or error
    if raised is not None:
        raise raised


@contextlib.contextmanager
def held_stop_signals(deliver: bool = True) -> Iterator[None]:
    """Hold the stop signals whose handler raises KeyboardInterrupt (`stops_the_run`) over the block, then call
    that handler for the first one that came (it raises after the block, not inside it); with `deliver=False`
    they are dropped instead (the process is already ending on an error, which a KeyboardInterrupt would hide).
    Outside the main thread, where no handler runs, this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []

    def note(signum: int, frame: Any) -> None:
        came.append(signum)

    previous: dict[int, Any] = {}
    try:
        swap_handlers({sig: note for sig in STOP_SIGNALS if stops_the_run(signal.getsignal(sig))}, previous)
        yield
    finally:
        swap_handlers(previous)
        if came and deliver:
            previous[came[0]](came[0], None)


@contextlib.contextmanager
def ending_on_stop_signals(say: Callable[[int], None]) -> Iterator[None]:
    """Over a block whose main thread waits inside C++ for other processes (joining a process group: gloo waits up
    to an hour for the job's other workers), a stop signal ends the process at once, with 128 + the signal as its
    status, once `say(signum)` has said so. Nothing may be written in the block: there is nothing to save.

    Python runs a signal's handler in the main thread between two bytecodes, so one that came during such a wait
    ran only when it returned: a Ctrl-C or SIGTERM to a node whose worker waited for another node's (still reading
    its corpus, or never coming) did nothing, until torchrun killed the worker 30 s later, and no word was said.
    The C-level handler writes the signal's number to a pipe (`signal.set_wakeup_fd`), which a thread here reads
    (and passes on to the wakeup fd set before, asyncio's, if any).
    Only a signal whose handler stops the run (`stops_the_run`) ends it; the others are handled as usual after
    the block, and so is one that came as the block ended (the main thread waits for the end meanwhile).
    Outside the main thread, this does nothing.
    """
    if threading.current_thread() is not threading.main_thread() or sys.platform == "win32":  # (a socket there)
        yield
        return
    import select

    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    lock, done = threading.Lock(), threading.Event()

    def watch() -> None:
        while not done.is_set():
            if not select.select([read_end], [], [], 0.1)[0]:
                continue
            came = os.read(read_end, 64)
            if previous >= 0:  # the caller's own wakeup fd (asyncio's) gets them too
                with contextlib.suppress(OSError):
                    os.write(previous, came)
            for signum in came:
                with lock:
                    if done.is_set() or not stops_the_run(signal.getsignal(signum)):
                        continue
                    say(signum)
                    with contextlib.suppress(OSError, ValueError):
                        sys.stderr.flush()
                    os._exit(128 + signum)  # with the lock held: the main thread goes no further

    watcher = threading.Thread(target=watch, name="tfm-stop-while-waiting", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        with lock:
            done.set()
        signal.set_wakeup_fd(previous)
        watcher.join()
        os.close(read_end)
        os.close(write_end)


# The process that started this one, for `stop_with_parent`: `tfm train --nproc-per-node` sets it for torchrun,
# which sets it for its workers.
PARENT_ENV = "TFM_PARENT_PID"


def stop_with_parent() -> bool:
    """Linux: have the kernel send this process SIGTERM when its parent ends, however it ends (`kill -9` too).

    `tfm train --nproc-per-node N` is three generations of processes: tfm, torchrun, the workers. Killed outright,
    tfm left torchrun and the workers training on in the background, writing the run (torchrun puts each worker in
    a session of its own, so even the terminal's process group missed them). With this in torchrun and in each
    worker, a lost parent is a SIGTERM: the workers save at the end of the step and stop, as on a scheduler's notice.

    Returns:
        False when the parent named by `PARENT_ENV` had already ended before this was set (it can no longer
        signal); True otherwise, and elsewhere than on Linux, where nothing is set.
    """
    if not sys.platform.startswith("linux"):
        return True
    try:
        ctypes.CDLL(None).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # no prctl in this C library
        return True
    parent = os.environ.get(PARENT_ENV, "")
    return not parent.isdigit() or os.getppid() == int(parent)
