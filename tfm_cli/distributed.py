"""Multi-process training on PyTorch's own engine: torchrun starts the processes, DDP keeps them in step.

Every piece of torch.distributed that tfm uses lives here, so the trainer only asks plain questions (am I the
main process? what do all ranks agree on?) and works unchanged in a single process:

  - `setup(device)` reads torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK), joins the process group (gloo on
    CPU, NCCL on CUDA, each process on the GPU of its local rank) and returns a `Distributed`; outside torchrun,
    or with one process in all, it returns a single-process `Distributed` whose collectives are no-ops;
  - `Distributed` wraps the model in DistributedDataParallel, and broadcasts, sums and gathers small values;
  - `sync_gradients(model, sync)` skips DDP's gradient all-reduce on the micro-batches that do not step;
  - `torchrun_command(...)` is the command `tfm train --nproc-per-node N` re-launches itself with.

The data side (each rank's share of every global batch) is `tfm_cli.data.BatchStream(rank=, world_size=)`.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from tfm_cli.errors import TfmError
from tfm_cli.signals import ending_on_stop_signals, stop_with_parent

# How long a rank waits in a collective before the job is declared hung. Rank 0 alone evaluates on the dev set
# (and writes the final model) while the others wait at the next collective, so this must outlast a full
# evaluation, not just a step (NCCL's own default is 10 minutes).
TIMEOUT = timedelta(hours=1)


def backend_for(device: torch.device) -> str:
    """NCCL between CUDA GPUs, gloo between CPU processes."""
    return "nccl" if device.type == "cuda" else "gloo"


def torchrun_env(environ: Mapping[str, str] | None = None) -> tuple[int, int, int] | None:
    """(rank, local_rank, world_size) when this process was started by torchrun, else None."""
    environ = os.environ if environ is None else environ
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return None
    try:
        rank, world_size = int(environ["RANK"]), int(environ["WORLD_SIZE"])
        local_rank = int(environ.get("LOCAL_RANK", rank))
    except ValueError:
        raise TfmError(
            f"RANK={environ['RANK']!r}, WORLD_SIZE={environ['WORLD_SIZE']!r} are not integers",
            hint="start the processes with torchrun (or `tfm train --nproc-per-node N`), which sets them",
        ) from None
    return rank, local_rank, world_size


@dataclass(frozen=True)
class Distributed:
    """This process's place in the job. A single process is rank 0 of 1, and every collective is a no-op."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    owns_group: bool = False  # setup() joined the process group, so cleanup() leaves it
    said_why_key: str = ""  # the store key of `say_stopping`: one for each setup(), as a caller's group outlives a run

    @property
    def enabled(self) -> bool:
        """More than one process: DDP, sharded batches and collectives are on."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes files, logs and prints progress."""
        return self.rank == 0

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """`model` in DistributedDataParallel (the model itself in a single process).

        DDP broadcasts rank 0's weights at construction, so every rank starts from the same ones. Buffers are
        not re-broadcast on every forward: the model's only buffer is the constant sinusoid table.
        """
        if not self.enabled:
            return model
        import inspect

        from torch.nn.parallel import DistributedDataParallel

        device_ids = [self.device.index] if self.device.type == "cuda" else None
        new_name = "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters  # torch 2.13
        no_buffer_sync = {"forward_sync_buffers" if new_name else "broadcast_buffers": False}
        return DistributedDataParallel(model, device_ids=device_ids, **no_buffer_sync)

    def barrier(self) -> None:
        """Wait until every rank gets here."""
        if self.enabled:
            dist.barrier(device_ids=[self.device.index] if self.device.type == "cuda" else None)

    def broadcast(self, value: Any) -> Any:
        """Rank 0's `value` (any picklable object), on every rank."""
        if not self.enabled:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0, device=self.device)
        return box[0]

    def sum(self, values: Sequence[float] | torch.Tensor) -> list[float]:
        """Each of `values` summed over the ranks (float64), on every rank. A NaN anywhere is a NaN everywhere.

        `values` may be a 1-D tensor on this rank's device (the trainer's loss sums): it is reduced where it is,
        and read back to the host once, with the result.
        """
        if isinstance(values, torch.Tensor):
            t = values.detach().to(self.device, torch.float64, copy=True)
        elif not self.enabled:
            return list(values)
        else:
            t = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        if self.enabled:
            dist.all_reduce(t)
        return t.tolist()

    def gather(self, value: Any) -> list[Any]:
        """Every rank's `value` (any picklable object), in rank order, on every rank."""
        if not self.enabled:
            return [value]
        values: list[Any] = [None] * self.world_size
        dist.all_gather_object(values, value)
        return values

    def say_stopping(self) -> None:
        """Tell the job's other processes that this one, rank 0, stops on an error it reports itself (a full disk
        while saving): a process that then loses contact with it (`peer_said_why`) need not say so too. Written to
        the job's key-value store, which torchrun's agent keeps after a worker has gone."""
        if self.enabled and self.is_main:
            with contextlib.suppress(Exception):  # the store gone too: the others say they lost contact
                _store().set(self.said_why_key, "1")

    def peer_said_why(self) -> bool:
        """Whether rank 0 has said why it stopped (`say_stopping`), to the console of this process's node."""
        if not self.enabled or os.environ.get("GROUP_RANK", "0") != "0":  # another node's console saw nothing of it
            return False
        try:
            return bool(_store().check([self.said_why_key]))
        except Exception:  # the store went with rank 0 (not torchrun's agent store): nothing was said that we know of
            return False

    def cleanup(self) -> None:
        """Leave the process group if `setup` joined it.

        What still holds the group (a DDP wrapper and its gradient reducer) should be gone by now (the trainer lets
        go of its own first); whatever a reference cycle kept is collected before the group is destroyed, not at
        some later collection or in the interpreter's exit, where the group's threads were torn down with it.
        """
        if self.owns_group and dist.is_initialized():
            gc.collect()
            dist.destroy_process_group()


_setups = itertools.count()  # the runs this process has joined a process group for (see Distributed.said_why_key)


def _store() -> Any:
    """The key-value store the process group was set up with (torchrun's)."""
    from torch.distributed import distributed_c10d

    return distributed_c10d._get_default_store()


def setup(device: torch.device) -> Distributed:
    """Join the torchrun job this process belongs to, on `device`'s kind; a single process otherwise.

    Under torchrun with CUDA each process takes the GPU of its local rank (`--device cuda` means "the GPUs"),
    and NCCL connects them; on CPU, gloo does. A process of the job gets SIGTERM when torchrun ends
    (`stop_with_parent`), so it never trains on alone. An already initialised process group (a Python user's own) is
    used as it is and left to its owner.

    Raises:
        TfmError: a local rank without a GPU of its own, or `--device cuda:N` in a multi-process job.
    """
    found = torchrun_env()
    if found is None or found[2] == 1:
        return Distributed(device=device)
    rank, local_rank, world_size = found
    if not stop_with_parent():  # torchrun is gone already (killed while this process started): stop as it would
        signal.raise_signal(signal.SIGTERM)
    if device.type == "cuda":
        if device.index is not None:
            raise RankError(
                f"--device {device} names one GPU, but each of the {world_size} processes takes its own",
                hint="use --device cuda: process N of each node runs on cuda:N",
            )
        count = torch.cuda.device_count()
        if local_rank >= count:
            raise RankError(
                f"local rank {local_rank} has no GPU of its own: this node has {count}",
                hint=f"start at most {count} processes per node (--nproc-per-node {count})",
            )
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    owns = not dist.is_initialized()
    if owns:
        def say(signum: int) -> None:  # once a node, not once a process
            if local_rank == 0:
                print(f"tfm train: stopped by {signal.Signals(signum).name} while the processes of the job were meeting: "
                      "nothing was trained or written", file=sys.stderr)

        try:
            with ending_on_stop_signals(say):  # gloo's wait for the other processes took no signal (see there)
                dist.init_process_group(backend_for(device), timeout=TIMEOUT)
        except RuntimeError as error:
            if not lost_a_peer(error) or rank - local_rank == 0:  # process 0 on this node: it says why it ended
                raise
            # process 0 is on another node, whose console alone says why it ended: this one said nothing, exit 1
            where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
            raise RankError(  # said once on this node, by its first process (the others exit 1 quietly)
                f"process 0 of the job (on another node, at {where}) went away while the processes were meeting",
                hint="its node's console says why (an error, a stop); start the same command on every node again",
                said_elsewhere=local_rank != 0,
            ) from None
    return Distributed(rank, local_rank, world_size, device, owns, f"tfm/rank-0-said-why/{next(_setups)}")


# What a collective raises when another process of the job has gone (killed, crashed, its machine lost): gloo's
# "Connection reset by peer" / "Connection closed by peer", NCCL's aborted communicator.
_LOST_PEER = ("by peer", "Connection reset", "Connection closed", "Broken pipe", "communicator was aborted", "remote process exited")


def lost_a_peer(error: BaseException) -> bool:
    """Whether `error` is a collective failing because another process of the job is gone."""
    network = getattr(dist, "DistNetworkError", ())
    return isinstance(error, network) or (isinstance(error, RuntimeError) and any(k in str(error) for k in _LOST_PEER))


def resume_command(
    run_dir: str | os.PathLike, environ: Mapping[str, str] | None = None, device: torch.device | None = None
) -> str:
    """`tfm train --resume RUN`, with the processes of the torchrun job this process belongs to, so that the
    resume is exact (the same number of processes): this node's launcher options as `tfm train` was given them
    (`--nproc-per-node N`, and over several nodes `--nnodes M --node-rank R --master-addr HOST ...` or
    `--rdzv-endpoint`: TFM_LAUNCH_OPTIONS, which the launcher sets), else those torchrun's environment tells; and
    `--device` where the run's `device` is not the one `auto` picks (a run on the CPU of a machine with a GPU, or on
    its second GPU)."""
    from tfm_cli.errors import shell_word

    command = f"tfm train --resume {shell_word(run_dir)}"
    found = torchrun_env(environ)
    environ = os.environ if environ is None else environ
    if device is not None:
        auto = "cuda" if torch.cuda.is_available() else "cpu"
        if device.type != auto:
            command += f" --device {device.type}"
        elif (found is None or found[2] == 1) and device.index not in (None, 0):  # (a job's ranks each take their own)
            command += f" --device {device}"
    if found is None or found[2] == 1:
        return command
    if launched := environ.get("TFM_LAUNCH_OPTIONS", ""):  # `tfm train`'s launcher options on this node, as given
        return f"{command} {launched}"
    world_size = found[2]
    per_node = environ.get("LOCAL_WORLD_SIZE", "")
    per_node_n = int(per_node) if per_node.isdigit() and int(per_node) > 0 else world_size
    command += f" --nproc-per-node {per_node_n}"
    if world_size > per_node_n:
        command += f" --nnodes {world_size // per_node_n}"
    return command


def sync_gradients(model: torch.nn.Module, sync: bool):
    """The context of one micro-batch's backward: DDP all-reduces gradients only when `sync` (the last one
    before an optimizer step); the others just accumulate locally (`no_sync`). A no-op for a plain model."""
    no_sync = getattr(model, "no_sync", None)
    return contextlib.nullcontext() if sync or no_sync is None else no_sync()


class RankError(TfmError):
    """A problem of this process alone (no GPU of its own, a peer it lost), which only it can report. Every other
    error of a multi-process job comes from inputs that every process reads alike, and is said by local rank 0.
    `said_elsewhere`: rank 0 has already said, on this node's console, why the job stops; the command line adds
    nothing."""

    def __init__(self, message: str, hint: str | None = None, *, said_elsewhere: bool = False) -> None:
        super().__init__(message, hint)
        self.said_elsewhere = said_elsewhere


# --- Launching: `tfm train --nproc-per-node N` runs torchrun on itself ------------------------------------------


def torchrun_command(
    args: Sequence[str],
    nproc_per_node: int,
    nnodes: int = 1,
    node_rank: int | None = None,
    master_addr: str | None = None,
    master_port: int | None = None,
    rdzv_endpoint: str | None = None,
) -> list[str]:
    """The command line that runs `python -m tfm_cli ARGS` as `nproc_per_node` processes on this node, under
    torchrun (`tfm_cli.torchrun`: torchrun without its traceback after a worker's error or a stop signal).

    One node without an address or port is `--standalone` (torchrun picks a free port, so two jobs on one
    machine do not collide). Several nodes meet either at node 0's `master_addr:master_port` (each node with
    its `node_rank`) or at a c10d rendezvous endpoint (node ranks are then assigned).
    """
    cmd = [sys.executable, "-m", "tfm_cli.torchrun", f"--nproc-per-node={nproc_per_node}", f"--nnodes={nnodes}"]
    if rdzv_endpoint:
        cmd += ["--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}"]
        if node_rank is not None:
            cmd.append(f"--node-rank={node_rank}")
    elif nnodes == 1 and master_addr is None and master_port is None:
        cmd.append("--standalone")
    else:
        cmd += [f"--node-rank={node_rank or 0}"]
        cmd += [f"--master-addr={master_addr}"] if master_addr else []
        cmd += [f"--master-port={master_port}"] if master_port else []
    return [*cmd, "-m", "tfm_cli", *args]


def threads_per_process(nproc_per_node: int, environ: Mapping[str, str] | None = None) -> int | None:
    """torch threads for each of `nproc_per_node` CPU processes sharing this machine's cores: its cores divided
    among them (at least 1); None when OMP_NUM_THREADS is set (the user's choice, which torchrun keeps)."""
    environ = os.environ if environ is None else environ
    if "OMP_NUM_THREADS" in environ:
        return None
    return max(1, torch.get_num_threads() // nproc_per_node)
