"""`TrainEvents`: what the trainer tells the outside world. The CLI overrides it with its rich progress display; tests
and the Python API use it as it is, which says nothing."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any


class TrainEvents:
    """What the trainer tells the outside world; the CLI overrides these, the defaults say nothing."""

    def message(self, text: str) -> None:
        """A one-line status message (tokenizer trained, corpus read, checkpoint saved...)."""

    def start(self, step: int, max_steps: int) -> None:
        """Training steps begin at `step` (0, or where a resumed run stopped)."""

    def time_budget(self, seconds_left: float) -> None:
        """After `start`, when train.max_time is set: the training time it leaves this session (all sessions count),
        so that an estimate of the time remaining can end there rather than at train.max_steps."""

    def step(self, step: int, metrics: dict[str, Any]) -> None:
        """After every optimizer step; `metrics` holds loss, lr, tokens/s when a log line was due."""

    def evaluation(self, step: int, metrics: dict[str, Any]) -> None:
        """After a dev-set evaluation."""

    def decoding(self, what: str, sentences: int) -> contextlib.AbstractContextManager[Callable[[int], None] | None]:
        """Around the beam search of a dev evaluation (`what`: "dev evaluation at step N", "final model..."), which
        translates `sentences` dev sentences: a context manager that yields a function called with the number of
        sentences done after each batch (progress), or None."""
        return contextlib.nullcontext(None)

    def stopping(self, signum: int) -> None:
        """A stop signal came during a step, which ends first (`HeldStops`). Called inside the signal handler:
        take no lock (write with os.write, not print)."""
