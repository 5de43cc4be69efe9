"""The training data path as its own iterator: each step's batches, built ahead on a background thread on CUDA.

One optimizer step trains on one *group*: `train.accum_steps` consecutive batches of a `BatchStream`.
`Prefetcher` builds the next `depth` groups on a daemon thread while the model trains on the current one (the
trainer asks for that on CUDA; on the CPU, whose cores the step itself uses, `depth` is 0: no thread), so
gathering and padding the ids and building the masks overlap the step instead of preceding it. On CUDA the
thread also puts every tensor in pinned (page-locked) memory, so that the step's `.to(device,
non_blocking=True)` is an asynchronous copy the GPU overlaps with its work.

It hands out exactly the groups that drawing from the stream would, in the same order. Only the position
differs: the thread runs ahead of the step, so the stream's own `state_dict()` counts batches that were built
but not yet trained on. `Prefetcher.state_dict()` is the position after the last group *handed out*: that is
what a checkpoint saves, and what `BatchStream.load_state_dict` resumes from exactly.

An exception in the thread (a bad corpus, a bug) is raised again in the training thread, the same exception
object with its one-line message, at the `next()` that would have returned the failed group; `close()` (or
leaving a `with` block, Ctrl-C included) stops the thread.
"""

from __future__ import annotations

import queue
import threading

import torch

from tfm_cli.data import Batch, BatchStream

PREFETCH_GROUPS = 2  # groups the trainer builds ahead: one to cover a slow batch, one being copied


class Prefetcher:
    """Groups of `group_size` batches from `stream`, built `depth` groups ahead on a background thread.

    Args:
        stream: the batches; load its state (resume) before the first `next()`. From then on the thread
            alone draws from it: read the position from `state_dict()` here, never from the stream.
        group_size: batches per group (per optimizer step).
        depth: groups built ahead (the bound of the queue); 0 builds each group when it is asked for, in the
            calling thread, with no thread at all.
        pin_memory: put the batches' tensors in pinned memory (CUDA only), for non-blocking copies.
        device: the CUDA device the pinned memory is for (the thread makes it its current device).
    """

    def __init__(
        self,
        stream: BatchStream,
        group_size: int = 1,
        depth: int = PREFETCH_GROUPS,
        pin_memory: bool = False,
        device: torch.device | None = None,
    ) -> None:
        if group_size < 1 or depth < 0:
            raise ValueError(f"need group_size >= 1 and depth >= 0, got {group_size} and {depth}")
        self.stream = stream
        self.group_size, self.depth, self.pin_memory = group_size, depth, pin_memory
        self._device = device
        self._queue: queue.Queue = queue.Queue(maxsize=max(depth, 1))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._batches = None  # the stream's iterator, created by whichever thread builds the first group
        self._state: dict[str, int] | None = None  # the stream's position after the last group handed out
        self._started = self._closed = False
        self._error: BaseException | None = None

    def __iter__(self) -> Prefetcher:
        return self

    def __next__(self) -> list[Batch]:
        """The next group of batches (its tensors pinned when `pin_memory`).

        Raises:
            The producer thread's exception (e.g. TfmError), as it was raised there.
            StopIteration: after `close()`.
        """
        if self._error is not None:
            raise self._error
        if self._closed:
            raise StopIteration
        if not self._started:
            self._start()
        if self.depth == 0:
            group, state = self._build()
        else:
            item = self._take()
            if isinstance(item, BaseException):
                self._error = item
                self.close()
                raise item
            group, state = item
        self._state = state
        return group

    def state_dict(self) -> dict[str, int]:
        """{"epoch", "position"} of the stream after the last group handed out (not the ones built ahead)."""
        return dict(self._state) if self._state is not None else self.stream.state_dict()

    @property
    def epoch(self) -> int:
        """The epoch of the last group handed out."""
        return self.state_dict()["epoch"]

    def close(self) -> None:
        """Stop the thread (it finishes the batch it is building, then ends); later `next()` calls stop."""
        self._closed = True
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=10)  # a daemon: even a thread stuck in a huge batch cannot keep the process alive

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- inside ---

    def _start(self) -> None:
        self._started = True
        self._state = self.stream.state_dict()  # nothing handed out yet: where the stream stands now
        if self.depth > 0:
            self._thread = threading.Thread(target=self._produce, name="tfm-prefetch", daemon=True)
            self._thread.start()

    def _build(self) -> tuple[list[Batch], dict[str, int]]:
        if self._batches is None:
            self._batches = iter(self.stream)
        group = [next(self._batches) for _ in range(self.group_size)]
        if self.pin_memory:
            group = [b.pin_memory() for b in group]
        return group, self.stream.state_dict()

    def _produce(self) -> None:
        """The thread: build groups into the queue until stopped; an exception goes into the queue instead."""
        try:
            if self.pin_memory and self._device is not None and self._device.index is not None:
                torch.cuda.set_device(self._device)
            while not self._stop.is_set():
                if not self._put(self._build()):
                    return
        except BaseException as err:  # handed to the training thread, which raises it at its next()
            self._put(err)

    def _put(self, item) -> bool:
        """Queue `item`, waiting while the queue is full; False when stopped first."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _take(self):
        """The next item of the queue; waits for the thread, and notices if it died without a word."""
        while True:
            try:
                return self._queue.get(timeout=1.0)
            except queue.Empty:
                if self._thread is None or not self._thread.is_alive():
                    if not self._queue.empty():
                        continue
                    raise RuntimeError("the batch prefetching thread stopped without a batch or an error") from None
