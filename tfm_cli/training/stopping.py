"""Stopping a multi-process run together: Ctrl-C and the stop signals held until the ranks agree.

In one process Ctrl-C (and SIGTERM or SIGHUP, which `tfm train` turns into the same KeyboardInterrupt) stops
training wherever it lands, and the trainer saves the last completed step. In a DDP job every rank receives
the signal on its own, each at its own moment: a rank that stopped between two collectives would leave the
others waiting inside one (a gloo error, or torchrun's SIGKILL after its grace period) before rank 0 could save.
So there a signal is only noted; at the end of each step the ranks agree (one small all-reduce), and when any
rank was told to stop, all of them stop after that same step and save it together, each rank's random state
included, so that the resume is exact.

In one process the signal is noted too, and passed on at once. Python runs a signal handler between two
bytecodes of whatever the main thread is doing, and that may be a finalizer (`__del__`, a weakref callback),
which prints a KeyboardInterrupt raised there as "Exception ignored" and carries on: the note makes the end of
that step raise it again, so a run told to stop always stops.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from tfm_cli.distributed import Distributed

# The signals a run stops on, in the order that decides which one the ranks report when they received
# different ones: a scheduler's notice first.
HELD = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGINT") if hasattr(signal, name))


class HeldStops:
    """`with HeldStops(dist) as stops:` around the training loop; `stops.check()` at the end of each step.

    Only for the signals whose handler would raise KeyboardInterrupt (Python's for Ctrl-C, `tfm train`'s for
    SIGTERM and SIGHUP): a signal left to its default or ignored (`nohup`) keeps that. In a multi-process job the
    signal is held: on agreement each rank calls the handler the signal would have reached (so `tfm train` knows
    which signal stopped the run), which raises KeyboardInterrupt at a point where every rank is in step. Signals
    that arrive after that (torchrun passes Ctrl-C on a second time) are ignored while the checkpoint is saved.
    In one process the handler is called at once, and `check` raises KeyboardInterrupt if the run went on anyway.
    """

    def __init__(self, dist: Distributed) -> None:
        self.dist = dist
        self.received: list[int] = []
        self.previous: dict[int, Any] = {}
        self._handlers: dict[int, Any] = {}
        self.agreed = False  # the ranks agreed to stop: every rank is at the same step
        self._immediate = False

    def __enter__(self) -> HeldStops:
        if threading.current_thread() is threading.main_thread():  # (only the main thread may set handlers)
            for sig in HELD:
                if callable(signal.getsignal(sig)):
                    self.previous[sig] = signal.signal(sig, self._hold if self.dist.enabled else self._note)
        self._handlers = dict(self.previous)  # what `_note` passes a signal on to, even while __exit__ restores them
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: Any) -> None:
        previous, self.previous = self.previous, {}
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if kind is None and self.received and not self.agreed and self.dist.enabled:
            self._deliver(self.received[0], previous)  # arrived after the last step's check: deliver it

    def _note(self, signum: int, frame: Any) -> None:
        """One process: pass the signal on at once (its handler raises KeyboardInterrupt), noted for `check`."""
        self.received.append(signum)
        self._handlers[signum](signum, frame)

    def _hold(self, signum: int, frame: Any) -> None:
        self.received.append(signum)
        if self._immediate and len(self.received) == 1:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        """Work that the other ranks only wait for (rank 0's dev evaluation): a signal ends it at once, and the
        block, and is agreed on at the next `check`. In one process Ctrl-C goes through as everywhere else."""
        self._immediate = True
        try:
            yield
        except KeyboardInterrupt:
            if not self.dist.enabled:
                raise
        finally:
            self._immediate = False

    def check(self) -> None:
        """On every rank at the same point of each step: if any rank was told to stop, stop all of them.

        In one process: if a stop signal came and the run went on (its KeyboardInterrupt was swallowed where it
        landed), raise it here."""
        if not self.dist.enabled:
            if self.received:
                raise KeyboardInterrupt
            return
        if not self.previous:
            return
        counts = self.dist.sum([float(bool(self.received) and self.received[0] == sig) for sig in HELD])
        told = [sig for sig, n in zip(HELD, counts, strict=True) if n > 0]
        if told:
            self.agreed = True
            self._deliver(told[0], self.previous)

    @staticmethod
    def _deliver(signum: int, handlers: dict[int, Any]) -> None:
        """Call the handler `signum` would have reached (it raises KeyboardInterrupt); raise it if it did not."""
        handler = handlers.get(signum)
        if callable(handler):
            handler(signum, None)
        raise KeyboardInterrupt
