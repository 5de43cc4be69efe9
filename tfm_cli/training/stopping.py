"""Stopping a run at a clean point: Ctrl-C and the stop signals held until the end of the step.

A KeyboardInterrupt raised wherever a signal lands can break what it lands in (`tfm_cli.signals`: the locking of
tensorboard's queue, or the batch prefetcher's; an interrupted run then hung in tensorboard's `close()` after
saving its checkpoint). So during training a stop signal is only noted, and raised at the end of the step, where
the trainer saves the last completed step and returns. Only the dev set's decoding, long and free of such
locks, is ended at once (`interruptible`).

In a DDP job the same point is also where the ranks agree (one small all-reduce): every rank receives the
signal on its own, each at its own moment, and a rank that stopped between two collectives would leave the
others waiting inside one (a gloo error, or torchrun's SIGKILL after its grace period) before rank 0 could
save. When any rank was told to stop, all of them stop after that same step and save it together, each rank's
random state included, so that the resume is exact.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from tfm_cli.distributed import Distributed
from tfm_cli.signals import STOP_SIGNALS as HELD  # in the order that decides which one the ranks report
from tfm_cli.signals import stops_the_run, swap_handlers


class HeldStops:
    """`with HeldStops(dist) as stops:` around the training loop; `stops.check()` at the end of each step.

    Only for the signals whose handler would raise KeyboardInterrupt (Python's for Ctrl-C, `tfm train`'s for
    SIGTERM and SIGHUP): a signal left to its default or ignored (`nohup`) keeps that. The signal is held; at
    `check` (after the ranks agree, in a DDP job) the handler it would have reached is called (so `tfm train`
    knows which signal stopped the run), which raises KeyboardInterrupt there. Signals that arrive after that
    (torchrun passes Ctrl-C on a second time) are ignored while the checkpoint is saved. In one process a second
    Ctrl-C during the step stops it at once, for a step too long to wait for.
    """

    def __init__(self, dist: Distributed, on_hold: Callable[[int], None] | None = None) -> None:
        """`on_hold(signum)` is called (inside the signal handler: it must take no lock) when a first signal is
        held, to say that the run stops at the end of the step."""
        self.dist = dist
        self.on_hold = on_hold
        self.received: list[int] = []
        self.previous: dict[int, Any] = {}
        self.agreed = False  # the stop was delivered (in a DDP job: agreed, so every rank is at the same step)
        self._immediate = False

    def __enter__(self) -> HeldStops:
        if threading.current_thread() is threading.main_thread():  # (only the main thread may set handlers)
            try:
                swap_handlers({sig: self._hold for sig in HELD if stops_the_run(signal.getsignal(sig))}, self.previous)
            except KeyboardInterrupt:  # a stop that came while they were swapped: no `with` block, no __exit__
                self.__exit__(KeyboardInterrupt, None, None)
                raise
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: Any) -> None:
        previous, self.previous = self.previous, {}
        swap_handlers(previous)
        if kind is None and self.received and not self.agreed:  # arrived after the last step's check: deliver it
            self._deliver(self.received[0], previous)

    def _hold(self, signum: int, frame: Any) -> None:
        self.received.append(signum)
        if self.agreed:  # stopping already: the checkpoint is being saved
            return
        if self._immediate and len(self.received) == 1:
            if self.dist.enabled:
                raise KeyboardInterrupt  # ends the `interruptible` block; the ranks agree at the next check
            self.agreed = True
            self._deliver(signum, self.previous)
        if not self.dist.enabled and signum == signal.SIGINT and len(self.received) > 1:  # Ctrl-C again: now
            self.agreed = True
            self._deliver(self.received[0], self.previous)
        if len(self.received) == 1 and self.on_hold is not None:
            self.on_hold(signum)

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        """Long work that takes no lock in Python code (rank 0's dev decoding, which the other ranks wait for): a
        signal ends it at once. In one process the run stops there; in a DDP job the block ends and the stop is
        agreed on at the next `check`."""
        self._immediate = True
        try:
            yield
        except KeyboardInterrupt:
            if not self.dist.enabled:
                raise
        finally:
            self._immediate = False

    def check(self) -> None:
        """At the end of each step (on every rank at the same point): if this process (or any rank) was told to
        stop, raise KeyboardInterrupt here."""
        if not self.previous:
            return
        if self.dist.enabled:
            counts = self.dist.sum([float(bool(self.received) and self.received[0] == sig) for sig in HELD])
            told = [sig for sig, n in zip(HELD, counts, strict=True) if n > 0]
        else:
            told = self.received[:1]
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
