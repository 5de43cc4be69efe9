"""Multi-process training (torchrun, DDP, gloo on CPU): 2 processes give the weights of 1 with the same global batch.

The slow tests train the tiny model of test_e2e.py through the installed `tfm`, once in one process and once with
`--nproc-per-node 2 --device cpu`, from the same tokenizer, and compare the checkpoints at the same step; a 2-process
run is also resumed, and must equal the straight one bit for bit. Every process runs torch on one thread (see
tests/clitools.py). An in-process test drives `train_step` under DDP directly, with SGD so that the comparison is
of the gradients themselves, over a batch too small to give both ranks a sentence.

The key projections' biases (`*.w_k.bias`) are left out of the weight comparisons: softmax over the keys is blind to
a bias added to every key, so their gradient is zero in exact arithmetic and what is computed is rounding noise,
which Adam (eps 1e-9) turns into full-size steps in any run. They change no output; the logits are compared too.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from clitools import has_lines, start_tfm, tfm, tiny_recipe, wait_until

from tfm_cli.checkpoint import load_state
from tfm_cli.data import BatchStream, TokenizedCorpus, make_batch
from tfm_cli.distributed import (
    Distributed,
    sync_gradients,
    threads_per_process,
    torchrun_command,
    torchrun_env,
)
from tfm_cli.model import ModelConfig, Transformer
from tfm_cli.recipe import TrainRecipe
from tfm_cli.training import label_smoothed_loss, output_loss, step_tokens, train_step
from tfm_cli.training.trainer import _load_scaler, _restore_rng, _rng_state, _set_rng_state

REPO = Path(__file__).resolve().parents[1]
CORPORA = REPO / "tfm_cli" / "corpora" / "tatoeba-fr-en"
STEPS = 12
# 1 and 2 processes sum the same gradients in another order, so their weights agree to rounding, until a rounding
# decides something: a ReLU unit whose input is ~0 for some token on or off, which Adam's normalisation (and lr ~0.05)
# then turns into visible steps. Observed on a Cascade Lake, 8 steps with accumulation: 4e-7 apart up to step 5; at
# step 6 one decoder FFN unit's row moved 2e-4 and by step 8 the rest followed: largest difference 2.1e-3, 1.7% of
# the weights over 1e-4, median 3.8e-6, logits 5.7e-3 apart (scale 6). A gradient lost or counted twice moves every
# weight: the same run with half of each step's batches lost was 0.25 apart at most, with 99.7% of the weights over
# 1e-4, a median of 2.2e-2 and logits 2.5 apart. The comparison is of the many (median and share), not of the one.
MEDIAN_TOLERANCE = 1e-5  # of |w1 - w2| over all weights
SHARE_OVER = 1e-4  # at most ...
MAX_SHARE = 0.05  # ... of the weights this far apart
MAX_TOLERANCE = 1e-2  # no weight further (about a fifth of the learning rate at step 8)
LOGITS_TOLERANCE = 5e-2  # absolute, on logits of scale ~6


def ddp_recipe(train: object, steps: int) -> str:
    return tiny_recipe(
        "ddp", data={"train": str(train), "dev": None}, tokenizer={"min_frequency": 2}, model={"dropout": 0.0},
        train={"max_tokens": 512, "max_steps": steps, "warmup_steps": 10, "save_every": 6, "keep_last": 3,
               "average_last": 2, "log_every": 3, "eval_every": 6, "eval_sentences": 5},
        decode={"max_len_offset": 10},
    )


# ---- without processes: the pieces -------------------------------------------------------------------------


def test_a_single_process_is_rank_0_of_1() -> None:
    single = Distributed()
    assert single.is_main and not single.enabled and single.world_size == 1
    model = torch.nn.Linear(2, 2)
    assert single.wrap(model) is model
    assert single.broadcast("x") == "x" and single.sum([1.5, 2.0]) == [1.5, 2.0] and single.gather(3) == [3]
    with sync_gradients(model, sync=False):  # a plain model has no no_sync: nothing to skip
        model(torch.ones(2)).sum().backward()


def test_torchrun_environment() -> None:
    assert torchrun_env({}) is None
    assert torchrun_env({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}) == (3, 1, 4)


def test_torchrun_command() -> None:
    one_node = torchrun_command(["train", "r.yaml"], 2)
    assert one_node[1:] == [
        "-m", "tfm_cli.torchrun", "--nproc-per-node=2", "--nnodes=1", "--standalone", "-m", "tfm_cli", "train", "r.yaml",
    ]
    nodes = torchrun_command(["train"], 8, nnodes=2, node_rank=1, master_addr="10.0.0.1", master_port=29501)
    assert "--node-rank=1" in nodes and "--master-addr=10.0.0.1" in nodes and "--master-port=29501" in nodes
    assert "--standalone" not in nodes
    rdzv = torchrun_command(["train"], 8, nnodes=2, rdzv_endpoint="head:29400")
    assert "--rdzv-backend=c10d" in rdzv and "--rdzv-endpoint=head:29400" in rdzv and "--master-addr" not in " ".join(rdzv)


def test_the_resume_command_gives_the_job_s_processes() -> None:
    """A stopped multi-process run said `tfm train --resume RUN`, which resumes it in one process: allowed, but not
    bit for bit. It now names the job's processes per node (torchrun's LOCAL_WORLD_SIZE), and its nodes."""
    from tfm_cli.distributed import resume_command

    assert resume_command("runs/my run", {}) == "tfm train --resume 'runs/my run'"
    assert resume_command("r", {"RANK": "0", "WORLD_SIZE": "1"}) == "tfm train --resume r"
    job = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    assert resume_command("r", job) == "tfm train --resume r --nproc-per-node 2"
    nodes = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}
    assert resume_command("r", nodes) == "tfm train --resume r --nproc-per-node 4 --nnodes 2"



def test_the_resume_command_names_a_device_that_auto_would_not_pick(monkeypatch) -> None:
    """The hint after a stop said `tfm train --resume RUN` for a run on the CPU of a machine with a GPU (or on its
    second GPU), which `--device auto` resumes elsewhere; the launcher's kill -9 line named --device already."""
    from tfm_cli.distributed import resume_command

    cpu, cuda, second = torch.device("cpu"), torch.device("cuda"), torch.device("cuda", 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resume_command("r", {}, device=cpu) == "tfm train --resume r"  # what auto picks here
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resume_command("r", {}, device=cpu) == "tfm train --resume r --device cpu"
    assert resume_command("r", {}, device=cuda) == "tfm train --resume r"
    assert resume_command("r", {}, device=torch.device("cuda", 0)) == "tfm train --resume r"
    assert resume_command("r", {}, device=second) == "tfm train --resume r --device cuda:1"
    job = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}  # each rank its own GPU
    assert resume_command("r", job, device=second) == "tfm train --resume r --nproc-per-node 2"
    assert resume_command("r", job, device=cpu) == "tfm train --resume r --device cpu --nproc-per-node 2"
    # a node of a multi-node job: its own launcher options, as the launcher hands them on (`--nnodes 2` alone
    # was refused as it stood: it needs the node's rank and the master's address)
    node = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "TFM_LAUNCH_OPTIONS": "--nproc-per-node 4 --nnodes 2 --node-rank 1 --master-addr head --master-port 29500"}
    assert resume_command("r", node) == "tfm train --resume r --nproc-per-node 4 --nnodes 2 --node-rank 1 --master-addr head --master-port 29500"
    assert resume_command("r", {**node, "TFM_LAUNCH_OPTIONS": ""}) == "tfm train --resume r --nproc-per-node 4 --nnodes 2"


def test_threads_are_shared_out_unless_set() -> None:
    assert threads_per_process(2, {"OMP_NUM_THREADS": "3"}) is None
    assert threads_per_process(10_000, {}) == 1
    assert threads_per_process(1, {}) == torch.get_num_threads()


def _corpus() -> TokenizedCorpus:
    """Short pairs, and one so long that its batch holds it alone (fewer sentences than ranks)."""
    g = torch.Generator().manual_seed(0)
    lengths = [int(n) for n in torch.randint(2, 6, (23,), generator=g)] + [18]
    src = [[4 + (i + j) % 20 for j in range(n)] for i, n in enumerate(lengths)]
    tgt = [[5 + (i * 3 + j) % 20 for j in range(n + i % 3)] for i, n in enumerate(lengths)]
    return TokenizedCorpus.from_sequences(src, tgt)


@pytest.mark.parametrize("world_size", [2, 3])
def test_the_shares_of_a_batch_make_up_the_batch(world_size: int) -> None:
    corpus = _corpus()
    whole = BatchStream(corpus, max_tokens=30, seed=1, pad_id=0, bos_id=1, eos_id=2)
    shards = [BatchStream(corpus, 30, 1, 0, 1, 2, rank=r, world_size=world_size) for r in range(world_size)]
    idle = 0
    for batch, *shares in zip(itertools.islice(whole, whole.num_batches), *shards, strict=False):
        assert sorted(i for s in shares for i in s.indices) == sorted(batch.indices)
        assert sum(s.n_tgt_tokens for s in shares) == batch.n_tgt_tokens
        assert {s.step_tgt_tokens for s in shares} == {batch.n_tgt_tokens} and batch.step_tgt_tokens is None
        assert step_tokens(shares[:1]) == step_tokens([batch]) == batch.n_tgt_tokens
        for s in shares:
            if not s.indices:  # a rank without a sentence: one whose targets are all padding
                idle += 1
                assert s.n_tgt_tokens == 0 and bool((s.tgt_out == 0).all()) and s.src.size(0) == 1
    assert idle > 0  # the long pair's batch left a rank idle
    assert [s.state_dict() for s in shards] == [whole.state_dict()] * world_size


def test_an_idle_share_adds_nothing_but_joins_the_backward() -> None:
    corpus = _corpus()
    stream = BatchStream(corpus, 30, 1, 0, 1, 2, rank=1, world_size=2)
    lone = next(i for i, b in enumerate(stream.batches()) if len(b) == 1)
    share = stream.shard(stream.batches()[lone])
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=32, d_model=16, d_ff=32, n_heads=2, n_enc_layers=1, n_dec_layers=1))
    logits = model(share.src, share.tgt_in, share.src_mask, share.tgt_mask)
    loss, nll, n = label_smoothed_loss(logits, share.tgt_out, 0.1, 0)
    loss.backward()
    assert (loss.item(), nll.item(), n) == (0.0, 0.0, 0)
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())
    # the trainer's path: projection and loss over the (here no) non-pad positions found with the batch
    assert share.tgt_keep.numel() == 0
    features = model(share.src, share.tgt_in, share.src_mask, share.tgt_mask, features_only=True)
    loss, nll, n = output_loss(features, model.generator.weight, share.tgt_out, 0.1, 0, share.tgt_keep)
    assert (loss.item(), nll.item(), n) == (0.0, 0.0, 0)


def test_each_rank_resumes_its_own_random_state() -> None:
    torch.manual_seed(1)
    first = _rng_state(torch.device("cpu"))
    torch.manual_seed(2)
    second = _rng_state(torch.device("cpu"))
    _restore_rng({"rng": first, "rng_ranks": [first, second]}, Distributed(rank=1, local_rank=1, world_size=2), seed=0)
    assert torch.equal(torch.get_rng_state(), second["torch"])
    _restore_rng({"rng": first}, Distributed(), seed=0)  # a single-process run's state, as before
    assert torch.equal(torch.get_rng_state(), first["torch"])


def test_a_resume_restores_the_cuda_generator_of_its_own_gpu_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA half of a checkpoint's random state, run on this CPU with torch.cuda's two calls stood in for: the
    state of the GPU the run trains on is saved and set; a checkpoint of earlier code, which held one state per
    visible GPU, gives its GPU's, and one of a GPU not in it (a run of 8 GPUs resumed where 1 is visible failed
    with an IndexError in torch's set_rng_state_all) starts as seeded."""
    saved, set_ = {}, []
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: saved.setdefault("cuda", torch.tensor([7], dtype=torch.uint8)))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: set_.append((state.tolist(), str(device))))
    state = _rng_state(torch.device("cuda:1"))
    assert state["cuda"].tolist() == [7]
    assert "cuda" not in _rng_state(torch.device("cpu"))  # a CPU run saves no GPU's state
    _set_rng_state(state, torch.device("cuda:1"))
    assert set_ == [([7], "cuda:1")]
    per_gpu = [torch.tensor([i], dtype=torch.uint8) for i in range(2)]  # the earlier format, from 2 GPUs
    set_.clear()
    _set_rng_state({**state, "cuda": per_gpu}, torch.device("cuda:1"))
    _set_rng_state({**state, "cuda": per_gpu}, torch.device("cuda:3"))  # not among them: nothing to set, no error
    _set_rng_state({**state, "cuda": per_gpu}, torch.device("cpu"))  # resumed on the CPU: no GPU's state
    assert set_ == [([1], "cuda:1")]


def test_an_fp16_resume_of_a_run_without_a_loss_scale_starts_a_fresh_one() -> None:
    """A bf16 or fp32 checkpoint holds a disabled scaler's state, {}: torch refuses to load that into fp16's enabled
    scaler ("The source state dict is empty"), a traceback on `--resume` with train.precision=fp16."""
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    _load_scaler(scaler, torch.amp.GradScaler("cpu", enabled=False).state_dict())
    assert scaler.is_enabled() and scaler.state_dict()["scale"] == 2.0**16
    _load_scaler(scaler, {**scaler.state_dict(), "scale": 128.0})  # an fp16 run's own scale is taken
    assert scaler.state_dict()["scale"] == 128.0
    off = torch.amp.GradScaler("cpu", enabled=False)  # and an fp16 checkpoint resumed in bf16 drops it
    _load_scaler(off, {**scaler.state_dict(), "scale": 128.0})
    assert off.state_dict() == {}


class _OtherRank:
    """A stand-in for a 2-process job's collectives: `sum` adds what the other rank sends (it was told to stop by
    `signal`, or by nothing)."""

    enabled = True

    def __init__(self, told_by: int | None = None) -> None:
        self.told_by = told_by

    def sum(self, values: list[float]) -> list[float]:
        from tfm_cli.training.stopping import HELD

        return [v + float(sig == self.told_by) for v, sig in zip(values, HELD, strict=True)]


def _signal_self(signum: int) -> None:
    os.kill(os.getpid(), signum)
    for _ in range(1000):  # the handler runs between bytecodes of the main thread
        pass


def test_held_stops_stop_every_rank_at_the_same_point() -> None:
    """Under `tfm train`'s stop_signals, in a multi-process job: a signal is noted, not raised, until `check` (the
    same point on every rank), where a stop any rank was told of raises KeyboardInterrupt through tfm train's
    handler (which records the signal for the exit status); later signals are ignored while the step is saved; a
    signal in an `interruptible` block ends that block at once; one after the last check is delivered at the end;
    a single process is left as it was."""
    # SIGHUP as a terminal leaves it: pytest started under `nohup` inherits it ignored, and stop_signals rightly
    # keeps an ignored SIGHUP ignored (the run must outlive the terminal), so the test below saw no signal at all
    hangup = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        _held_stops_stop_every_rank_at_the_same_point()
    finally:
        signal.signal(signal.SIGHUP, hangup)


def _held_stops_stop_every_rank_at_the_same_point() -> None:
    from tfm_cli.cli.common import stop_signals
    from tfm_cli.training.stopping import HeldStops

    with stop_signals() as received, HeldStops(_OtherRank()) as stops:
        stops.check()  # nobody was told: nothing happens
        _signal_self(signal.SIGTERM)  # arrives mid-step: noted only
        assert stops.received == [signal.SIGTERM] and received == []
        with pytest.raises(KeyboardInterrupt):
            stops.check()
        assert received == [signal.SIGTERM] and stops.agreed
        _signal_self(signal.SIGINT)  # torchrun passes Ctrl-C on again while the checkpoint is saved: ignored

    with stop_signals() as received, HeldStops(_OtherRank(told_by=signal.SIGTERM)) as stops:
        with pytest.raises(KeyboardInterrupt):
            stops.check()  # only the other rank was told: this one stops too, for the same reason
        assert received == [signal.SIGTERM]

    with stop_signals() as received, HeldStops(_OtherRank()) as stops:
        reached = []
        with stops.interruptible():  # rank 0's evaluation, which the other ranks wait for
            _signal_self(signal.SIGHUP)
            reached.append("the rest of the evaluation")
        assert reached == [] and received == []
        with pytest.raises(KeyboardInterrupt):
            stops.check()
        assert received == [signal.SIGHUP]

    with pytest.raises(KeyboardInterrupt), stop_signals() as received, HeldStops(_OtherRank()):
        _signal_self(signal.SIGTERM)  # after the last step's check: delivered as the loop ends
    assert received == [signal.SIGTERM]

    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_signal_in_the_middle_of_swapping_handlers_leaves_none_behind(monkeypatch) -> None:
    """Installing the hold's handlers one by one, a signal landing between two (whose handler raised) left the
    first swapped for good: a later SIGTERM noted by a handler nobody read. The swap is finished, then it raises."""
    from tfm_cli.signals import swap_handlers

    got: list[int] = []

    def raising(signum: int, frame) -> None:
        got.append(signum)
        raise KeyboardInterrupt

    install = signal.signal

    def then_a_signal(sig: int, handler):  # the first install is followed at once by a signal
        before = install(sig, handler)
        if not got:
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.05)  # (Python runs the handler at the next bytecode, wherever it lands)
        return before

    ours = (signal.SIGUSR1, signal.SIGUSR2)
    before = {sig: signal.getsignal(sig) for sig in ours}
    replaced: dict = {}
    monkeypatch.setattr(signal, "signal", then_a_signal)
    try:
        with pytest.raises(KeyboardInterrupt):
            swap_handlers({sig: raising for sig in ours}, replaced)
        assert got == [signal.SIGUSR1]  # handled by the new handler, and the swap went on to the end
        assert replaced == before and all(signal.getsignal(sig) is raising for sig in ours)
    finally:
        monkeypatch.undo()
        swap_handlers(before)
    assert {sig: signal.getsignal(sig) for sig in ours} == before


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_one_process_holds_a_stop_until_the_end_of_the_step(signum: int) -> None:
    """One process: a signal mid-step is noted, not raised where it lands (inside a queue's locking that broke
    tensorboard's writer: the run hung after saving); the end of the step raises it through tfm train's handler
    (which records it for the exit status); a second one while the checkpoint is saved is ignored; in an
    `interruptible` block (the dev decoding) it stops the run at once."""
    from tfm_cli.cli.common import stop_signals
    from tfm_cli.training.stopping import HeldStops

    recorded = [signum] if signum != signal.SIGINT else []  # stop_signals handles SIGTERM and SIGHUP
    said: list[int] = []
    with stop_signals() as received, HeldStops(Distributed(), on_hold=said.append) as stops:
        stops.check()  # no signal: nothing happens
        _signal_self(signum)  # mid-step: noted only, and said at once
        assert stops.received == [signum] and received == [] and said == [signum]
        with pytest.raises(KeyboardInterrupt):
            stops.check()
        assert received == recorded
        _signal_self(signum)  # while the checkpoint is saved: ignored

    with stop_signals() as received, HeldStops(Distributed()) as stops:
        reached = []
        with pytest.raises(KeyboardInterrupt), stops.interruptible():
            _signal_self(signum)
            reached.append("the rest of the decoding")
        assert reached == [] and received == recorded

    with stop_signals() as received, HeldStops(Distributed()) as stops:  # a step too long to wait for
        _signal_self(signum)
        with pytest.raises(KeyboardInterrupt):
            _signal_self(signal.SIGINT)  # Ctrl-C again: at once, reported as the first signal
        assert received == recorded
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_handler_of_another_program_is_left_alone() -> None:
    """A library user's own SIGTERM handler (it logs and goes on) keeps working during training: only the
    handlers that raise KeyboardInterrupt (Python's Ctrl-C, tfm train's) are held."""
    from tfm_cli.signals import held_stop_signals
    from tfm_cli.training.stopping import HeldStops

    logged: list[int] = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: logged.append(signum))
    try:
        with HeldStops(Distributed()) as stops, held_stop_signals():
            _signal_self(signal.SIGTERM)
            assert logged == [signal.SIGTERM] and stops.received == []
            stops.check()
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_stop_signal_during_the_clean_up_after_an_error_does_not_hide_the_error() -> None:
    """torchrun's SIGTERM to the ranks left after one was killed landed in the process group's clean-up, after the
    "lost contact" error: its KeyboardInterrupt replaced that error, said as a stop "outside a training step".
    During that clean-up a stop signal is dropped when an error is on its way out, and passed on otherwise."""
    import tfm_cli.training.trainer as trainer
    from tfm_cli.distributed import RankError
    from tfm_cli.signals import held_stop_signals

    def stopping(signum, frame):
        raise KeyboardInterrupt

    stopping.raises_keyboard_interrupt = True  # as `tfm train`'s handler is marked
    before = signal.signal(signal.SIGTERM, stopping)
    try:
        with held_stop_signals(deliver=False):
            _signal_self(signal.SIGTERM)  # dropped: nothing raised, inside or after
        with pytest.raises(KeyboardInterrupt), held_stop_signals():
            _signal_self(signal.SIGTERM)  # held, then passed on after the block

        class Dist:  # a rank whose peer died: its clean-up is where torchrun's SIGTERM lands
            is_main, owns_group = True, False

            def say_stopping(self) -> None:
                pass

            def cleanup(self) -> None:
                _signal_self(signal.SIGTERM)

        lost = RankError("process 0 of 2 lost contact with another process of the job")
        with pytest.MonkeyPatch.context() as patch:
            for name, value in (("resolve_device", lambda device: device), ("with_init_tokenizer", lambda r, resume: r),
                                ("preflight", lambda *a: None), ("setup_distributed", lambda device: Dist())):
                patch.setattr(trainer, name, value)
            patch.setattr(trainer, "_train", lambda *a: (_ for _ in ()).throw(lost))
            recipe = trainer.load_recipe(Path(__file__).resolve().parents[1] / "recipes" / "tiny.yaml")
            with pytest.raises(RankError, match="lost contact"):
                trainer.train(recipe, Path("run"), device="cpu")
    finally:
        signal.signal(signal.SIGTERM, before)


def test_tensorboard_calls_are_never_interrupted_inside() -> None:
    """A stop signal during a tensorboard call is passed on when the call is done: raised inside the writer's
    queue locking, it left close() waiting two minutes, or for ever."""
    from tfm_cli.cli.common import stop_signals
    from tfm_cli.monitor import TensorBoardLog

    class Writer:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def add_scalar(self, tag: str, value: float, step: int) -> None:
            _signal_self(signal.SIGTERM)
            self.calls.append(tag)

        def flush(self) -> None:
            self.calls.append("flush")

        def close(self) -> None:
            _signal_self(signal.SIGINT)
            self.calls.append("closed")

    writer = Writer()
    board = TensorBoardLog(writer)
    with stop_signals() as received:
        with pytest.raises(KeyboardInterrupt):
            board.train(5, {"loss": 1.5, "ppl": 4.5})
        assert writer.calls == ["train/loss", "train/ppl", "flush"] and received == [signal.SIGTERM]
    with pytest.raises(KeyboardInterrupt):
        board.close()
    assert writer.calls[-1] == "closed" and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_lost_peer_is_told_from_other_errors() -> None:
    from tfm_cli.distributed import lost_a_peer

    gloo = "[../gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:56500: Connection reset by peer."
    assert lost_a_peer(RuntimeError(gloo)) and lost_a_peer(RuntimeError("NCCL communicator was aborted on rank 1"))
    assert not lost_a_peer(RuntimeError("mat1 and mat2 shapes cannot be multiplied")) and not lost_a_peer(ValueError(gloo))


def test_bad_launcher_options_get_one_line(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(ddp_recipe("bundled:tatoeba-fr-en/train.tsv.gz", steps=1), encoding="utf-8")
    cases = [
        (["--nproc-per-node", "0"], "--nproc-per-node"),  # Click's range check; its wording varies
        (["--nproc-per-node", "2", "--dry-run"], "--nproc-per-node starts training with torchrun, which --dry-run does not: drop it"),
        # the options given, not --nproc-per-node where it was not
        (["--node-rank", "5", "--nnodes", "2", "--dry-run"], "--nnodes, --node-rank start training with torchrun, which --dry-run does not: drop them"),
        (["--nproc-per-node", "999", "--device", "cuda"], "more processes than this node's"),
        # on CPU it grew the launcher's memory until it was killed
        (["--nproc-per-node", "9223372036854775807", "--device", "cpu"], "is more processes than this node takes on CPU"),
        (["--nproc-per-node", str(max(len(os.sched_getaffinity(0)), 2) + 1), "--device", "cpu"],
         f"this node takes on CPU (gloo): one a core, {len(os.sched_getaffinity(0))} here, or 2 on any machine"),
        (["--nproc-per-node", "2", "--device", "cuda:1"], "names one GPU"),
        (["--nnodes", "2", "--nproc-per-node", "2"], "--master-addr"),
        # torchrun's ValueError traceback, or a minute of retries and a C++ stack trace, before
        (["--rdzv-endpoint", "node0:abc"], "is not HOST:PORT"),
        (["--rdzv-endpoint", "127.0.0.1:99999"], "is not HOST:PORT"),
        (["--rdzv-endpoint", "no-such-host.invalid:29400"], "cannot be resolved"),
        (["--nnodes", "2", "--node-rank", "1", "--master-addr", "no-such-host.invalid"], "cannot be resolved"),
        (["--master-addr", ""], "is empty"),
        (["--rdzv-endpoint", "localhost:29400", "--master-addr", "localhost"], "not both"),
    ]
    for options, message in cases:
        proc = tfm("train", str(recipe), "--out", str(tmp_path / "run"), *options, check=False)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, (options, proc.stderr)
    assert not (tmp_path / "run").exists()


def test_a_port_already_in_use_is_one_line(tmp_path: Path) -> None:
    """--master-port of a port another program listens on: torchrun's rendezvous failed with a 40-line
    DistNetworkError traceback. Now one Error line naming the port's trouble and what to do; nothing is written."""
    import socket

    recipe = tmp_path / "r.yaml"
    recipe.write_text(ddp_recipe("bundled:tatoeba-fr-en/train.tsv.gz", steps=1), encoding="utf-8")
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = tfm("train", str(recipe), "--out", str(tmp_path / "run"), "--device", "cpu", "--nproc-per-node", "2",
                   "--master-port", str(port), check=False, timeout=180)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "could not meet" in errors[0] and "address already in use" in errors[0], proc.stderr
    assert "--master-port" in proc.stderr
    assert not (tmp_path / "run").exists()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_while_a_process_waits_for_the_others_to_join_ends_at_once(tmp_path: Path, signum: int) -> None:
    """A worker of the job that waits in `init_process_group` for the others (another node's, still reading its
    corpus or never coming: gloo waits up to an hour) took no stop signal: Python's handler runs only when that C++
    wait returns, so a Ctrl-C or SIGTERM did nothing until torchrun killed the worker 30 s later, and nothing was
    said. Here the worker is started as torchrun starts rank 0 of two, and rank 1 never comes."""

    recipe = tmp_path / "r.yaml"
    recipe.write_text(ddp_recipe("bundled:tatoeba-fr-en/train.tsv.gz", steps=1), encoding="utf-8")
    port = _free_port()
    torchrun = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port)}
    proc = start_tfm("train", str(recipe), "--out", str(tmp_path / "run"), "--device", "cpu", env_extra=torchrun)
    # rank 0 holds the job's store on the port, and waits there for rank 1
    err, seconds = _stopped_as_it_waits(proc, port, signum, "rank 0", settle=1)
    assert proc.returncode == 128 + signum, err
    assert seconds < 10, err  # (torchrun's own end of it: 30 s, then SIGKILL)
    name = signal.Signals(signum).name
    assert err.strip().splitlines()[-1] == (
        f"tfm train: stopped by {name} while the processes of the job were meeting: nothing was trained or written"
    ), err
    assert "Traceback" not in err and not (tmp_path / "run").exists(), err


def _connected_to(pid: int, port: int) -> bool:
    """Whether process `pid` holds an established TCP connection to `port` (Linux: /proc/net/tcp*)."""
    try:
        sockets = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    except OSError:
        return False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table, encoding="ascii") as f:
            for line in list(f)[1:]:
                fields = line.split()
                if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[3] == "01" and f"socket:[{fields[9]}]" in sockets:
                    return True
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="tells connections by /proc")
def test_process_0_gone_while_the_processes_meet_is_one_error_line_on_another_node(tmp_path: Path) -> None:
    """Process 0 of the job (another node's) ended while the workers met in `init_process_group`: a worker on this
    node printed c10d's "recvValueWithTimeout failed" and 22 frames of C++, then exited 1 with no word of its own
    (a lost peer while setting up is said by process 0, on its own console). Now this node says what happened, once
    (its first process; the second exits 1 quietly)."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(ddp_recipe("bundled:tatoeba-fr-en/train.tsv.gz", steps=1), encoding="utf-8")
    port = _free_port()
    # as tfm's torchrun starts them: two nodes of two processes (ranks 0, 1 and 2, 3); rank 1 never comes
    job = {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "TORCH_CPP_LOG_LEVEL": "ERROR"}
    first = start_tfm("train", str(recipe), "--out", str(tmp_path / "run0"), "--device", "cpu",
                      env_extra={**job, "RANK": "0", "LOCAL_RANK": "0"})
    others: list = []
    try:
        wait_until(first, lambda: _listening(port), "process 0 never listened", timeout=120)
        for rank in (2, 3):
            others.append(start_tfm("train", str(recipe), "--out", str(tmp_path / "run1"), "--device", "cpu",
                                    env_extra={**job, "RANK": str(rank), "LOCAL_RANK": str(rank - 2)}))
        for proc in others:
            wait_until(proc, lambda proc=proc: _connected_to(proc.pid, port), "a process never met process 0", timeout=120)
        time.sleep(1)
        first.kill()
        errs = [proc.communicate(timeout=60)[1].decode() for proc in others]
    finally:
        for proc in (first, *others):
            if proc.poll() is None:
                proc.kill()
    assert [proc.returncode for proc in others] == [1, 1], errs
    assert errs[0].strip().splitlines() == [
        f"Error: process 0 of the job (on another node, at 127.0.0.1:{port}) went away while the processes were meeting",
        "hint: its node's console says why (an error, a stop); start the same command on every node again",
    ], errs
    assert errs[1].strip() == "", errs
    assert not (tmp_path / "run1").exists()


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="POSIX signals")
def test_a_wakeup_fd_set_before_the_wait_still_gets_its_signals() -> None:
    """The wait's watcher takes the process's wakeup fd for the block: a caller's own (asyncio's signal handling)
    missed the signals that came meanwhile. They are passed on to it; the caller's handler still runs after."""
    import socket

    from tfm_cli.signals import ending_on_stop_signals

    mine, other = socket.socketpair()
    mine.setblocking(False)
    ran: list[int] = []
    handler = signal.signal(signal.SIGUSR1, lambda signum, frame: ran.append(signum))
    before = signal.set_wakeup_fd(mine.fileno())
    try:
        with ending_on_stop_signals(lambda signum: None):
            signal.raise_signal(signal.SIGUSR1)
            other.settimeout(5)
            got = other.recv(16)
        assert got == bytes([signal.SIGUSR1]) and ran == [signal.SIGUSR1]
        assert signal.set_wakeup_fd(before) == mine.fileno()  # the caller's fd is back in place
    finally:
        signal.signal(signal.SIGUSR1, handler)
        mine.close()
        other.close()


def _stopped_as_it_waits(proc, port: int, signum: int, who: str, settle: float) -> tuple[str, float]:
    """Once `proc` listens on `port` (and `settle` seconds more), send it `signum`: its stderr, and the seconds it
    took to end."""
    try:
        wait_until(proc, lambda: _listening(port), f"{who} never listened on its port", timeout=120)
        time.sleep(settle)
        started = time.monotonic()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return err.decode(), time.monotonic() - started


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="tells torchrun's workers by /proc")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_while_waiting_for_the_other_nodes_ends_at_once(tmp_path: Path, signum: int) -> None:
    """Node 0 of two, the other never started: Ctrl-C did nothing for up to 15 minutes (torchrun's main thread
    waits inside the C++ store, where Python's KeyboardInterrupt is not raised), and the port stayed taken; SIGTERM
    ended torchrun there by its default action, which left its log directory in TMPDIR. Said as it waits now, and a
    stop while it waits ends it in seconds, with 128 + the signal, one line, nothing written and nothing left."""
    import socket

    recipe = tmp_path / "r.yaml"
    recipe.write_text(ddp_recipe("bundled:tatoeba-fr-en/train.tsv.gz", steps=1), encoding="utf-8")
    port = _free_port()
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = start_tfm("train", str(recipe), "--out", str(tmp_path / "run"), "--device", "cpu", "--nnodes", "2",
                     "--node-rank", "0", "--master-addr", "127.0.0.1", "--master-port", str(port),
                     env_extra={"TMPDIR": str(scratch)})
    # node 0's torchrun holds the rendezvous store on the port
    err, seconds = _stopped_as_it_waits(proc, port, signum, "node 0", settle=2)  # well inside the store's wait
    assert proc.returncode == 128 + signum, err
    assert seconds < 30, err
    assert f"waiting for all 2 nodes to meet at 127.0.0.1:{port} (up to 15 minutes" in err, err
    name = signal.Signals(signum).name
    assert f"stopped by {name} while waiting for the other nodes of the job: no process had started" in err, err
    assert "Traceback" not in err and not (tmp_path / "run").exists(), err
    assert list(scratch.iterdir()) == [], err
    with socket.socket() as s:  # torchrun is gone: nothing listens on the port (SO_REUSEADDR: closed connections
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # may linger in TIME_WAIT)
        s.bind(("127.0.0.1", port))
        s.listen()


def test_a_node_that_never_came_is_not_blamed_on_the_port(monkeypatch, capsys) -> None:
    """A rendezvous that timed out waiting for a node (15 minutes of silence, then "Timed out ... 1/2 clients
    joined") was given the hint of a port another program holds; it says to start every node now."""
    import sys

    import torch.distributed.run
    from torch.distributed import DistError
    from torch.distributed.elastic.rendezvous.api import RendezvousTimeoutError

    from tfm_cli import torchrun

    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # (main wraps it: put back after)
    # main sets these for torchrun's workers (and takes TFM_TORCHRUN_LOGS away): set and removed here, so that the
    # test process has them back as they were afterwards, whatever main did (a fork server started before compares)
    for name in ("TFM_LAUNCH_OPTIONS", "TFM_PARENT_PID", "TFM_TORCHRUN_LOGS", "TORCH_CPP_LOG_LEVEL"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    for error, said in (
        (DistError("Timed out after 901 seconds waiting for clients. 1/2 clients joined."), "start the same command on every node"),
        (RendezvousTimeoutError(), "start the same command on every node"),
        (DistError("The server socket has failed to listen on any local network address. address already in use"), "the port may be taken"),
    ):
        def fail(argv, error=error):
            raise error

        monkeypatch.setattr(torch.distributed.run, "main", fail)
        monkeypatch.delenv("TFM_PARENT_PID", raising=False)  # (main sets it to itself, for its workers: the next call)
        assert torchrun.main(["--nnodes=2", "--node-rank=0", "-m", "tfm_cli", "train", "r.yaml", "--out", "run"]) == 1
        err = capsys.readouterr().err
        assert err.startswith("Error: the processes of the job could not meet: ") and f"hint: {said}" in err, err


# ---- DDP in-process: train_step over shares equals train_step over the whole batches ---------------------------

WORLD = 2


def _setup_step(rank: int, world_size: int):
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=32, d_model=16, d_ff=32, n_heads=2, n_enc_layers=1, n_dec_layers=1, dropout=0.0))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = torch.amp.GradScaler("cuda", enabled=False)
    stream = BatchStream(_corpus(), 30, 1, 0, 1, 2, rank=rank, world_size=world_size)
    n = stream.num_batches - stream.num_batches % 2
    batches = list(itertools.islice(iter(stream), n))
    groups = [batches[i : i + 2] for i in range(0, n, 2)]  # accumulation over 2 batches, one with a lone pair
    return model, optimizer, scaler, groups


def _step_all(model, optimizer, scaler, groups, dist=None) -> list[tuple[float, float]]:
    from contextlib import nullcontext

    t = TrainRecipe()
    return [train_step(model, optimizer, scaler, g, 0.5, t, nullcontext, torch.device("cpu"), dist) for g in groups]


def _ddp_rank(rank: int, init_file: str, out: str) -> None:
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    dist = Distributed(rank, rank, WORLD, torch.device("cpu"), owns_group=True)
    try:
        model, optimizer, scaler, groups = _setup_step(rank, WORLD)
        sums = _step_all(dist.wrap(model), optimizer, scaler, groups, dist)
        if rank == 0:
            torch.save({"weights": model.state_dict(), "sums": sums}, out)
    finally:
        dist.cleanup()


@pytest.mark.slow
def test_train_step_over_two_ranks_equals_one_process(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    model, optimizer, scaler, groups = _setup_step(0, 1)
    assert any(len(b.indices) == 1 for g in groups for b in g)
    sums = _step_all(model, optimizer, scaler, groups)
    out = tmp_path / "rank0.pt"
    mp.spawn(_ddp_rank, args=(str(tmp_path / "init"), str(out)), nprocs=WORLD)
    ddp = torch.load(out, weights_only=True)
    torch.testing.assert_close(ddp["sums"], sums, rtol=1e-6, atol=1e-5)
    for name, w in model.state_dict().items():
        torch.testing.assert_close(ddp["weights"][name], w, rtol=0, atol=1e-6, msg=name)


def _train_rank(rank: int, port: int, recipe: str, run: str, out: str, fail_at: int = 0) -> None:
    """One rank of a 2-process `train()` (the environment torchrun would give it), the collector off: what still
    holds a DDP wrapper when the process group is destroyed is recorded in `out`-RANK.json. With `fail_at`, every
    rank's step of that number raises RuntimeError after its backward, the DDP wrapper among its frame's locals
    (as an out-of-memory error inside the step does); the error is recorded in `out`-RANK.error."""
    import gc

    from torch.nn.parallel import DistributedDataParallel

    from tfm_cli.training import train, trainer

    if fail_at:
        real_step, steps = trainer.train_step, []

        def failing_step(model, *args, **kwargs):
            result = real_step(model, *args, **kwargs)
            steps.append(1)
            if len(steps) == fail_at:
                raise RuntimeError(f"step {fail_at} failed")
            return result

        trainer.train_step = failing_step

    gc.disable()  # a reference cycle is then freed by nothing: what the collector would free, it frees only now and then
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    real, alive = torch.distributed.destroy_process_group, []

    def destroy(*args, **kwargs):
        alive.append(sum(isinstance(o, DistributedDataParallel) for o in gc.get_objects()))
        real(*args, **kwargs)

    torch.distributed.destroy_process_group = destroy
    try:
        train(recipe, run, device="cpu")
    except RuntimeError as error:
        if not fail_at:
            raise
        Path(f"{out}-{rank}.error").write_text(str(error), encoding="utf-8")
    finally:
        torch.distributed.destroy_process_group = real
        Path(f"{out}-{rank}.json").write_text(json.dumps(alive), encoding="utf-8")


@pytest.mark.skipif(sys.platform == "win32", reason="flock")
def test_a_rank_s_look_at_the_run_lock_is_not_taken_for_a_training(tmp_path: Path) -> None:
    """Every rank asks, before it starts, whether another process trains the run; each asked by taking the
    exclusive lock for a moment, and a rank that asked while its peer held it was told "in use by another process
    right now" (a 2-process test job failed so, once). A question holds a shared lock now, which another question
    does not see; a training's lock is seen as before."""
    import fcntl

    from tfm_cli.files import DirectoryLock
    from tfm_cli.training.checks import _trained_now

    peer = os.open(tmp_path, os.O_RDONLY)
    try:
        fcntl.flock(peer, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a peer's question, in flight
        assert not _trained_now(tmp_path)
        fcntl.flock(peer, fcntl.LOCK_UN)
        training = DirectoryLock(tmp_path)
        assert training.acquire() and _trained_now(tmp_path)
        training.release()
        assert not _trained_now(tmp_path)
    finally:
        os.close(peer)


def _spawn_train(data: dict[str, Path], tmp_path: Path, steps: int, fail_at: int | None = None) -> tuple[Path, Path]:
    """Run `_train_rank` on WORLD spawned processes for `steps` steps (a step failing at `fail_at`, if given);
    returns the run directory and the prefix of the files each rank writes."""
    import socket

    import torch.multiprocessing as mp

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(data["tokenizer"], run / "tokenizer.json")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(ddp_recipe(data["root"] / "train.tsv", steps=steps), encoding="utf-8")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "alive"
    args = (port, str(recipe), str(run), str(out)) + (() if fail_at is None else (fail_at,))
    mp.spawn(_train_rank, args=args, nprocs=WORLD)
    return run, out


@pytest.mark.slow
def test_the_process_group_is_destroyed_with_nothing_holding_it(data: dict[str, Path], tmp_path: Path) -> None:
    """At the end of a 2-process run the DDP wrapper (whose reducer holds the process group) is gone before the
    group is destroyed. The trainer was a reference cycle (a lambda over itself), so the wrapper outlived
    train() and the group's destruction, until some later collection or the interpreter's exit; rank 1 of
    test_a_resume_with_another_number_of_processes_says_it_is_not_exact once in ~20 CI runs died in its exit
    with "terminate called without an active exception" (SIGABRT)."""
    run, out = _spawn_train(data, tmp_path, steps=2)
    assert (run / "model.safetensors").is_file()
    assert [json.loads(Path(f"{out}-{rank}.json").read_text()) for rank in range(WORLD)] == [[0], [0]]


@pytest.mark.slow
def test_a_failed_step_leaves_nothing_holding_the_process_group(data: dict[str, Path], tmp_path: Path) -> None:
    """A step that raises (a CUDA out-of-memory error, a bug) under DDP: the traceback's frames hold the DDP
    wrapper (the step's `model`), and `train()` destroyed the process group while the error was on its way out,
    the wrapper and its gradient reducer still alive, to be freed later, or in the interpreter's exit (the suspected
    cause of a rank's rare SIGABRT, see above). The failed frames' locals are let go of before the group is destroyed."""
    run, out = _spawn_train(data, tmp_path, steps=4, fail_at=2)
    assert [Path(f"{out}-{rank}.error").read_text() for rank in range(WORLD)] == ["step 2 failed"] * WORLD
    assert [json.loads(Path(f"{out}-{rank}.json").read_text()) for rank in range(WORLD)] == [[0], [0]]


# ---- through the CLI: 1 process against 2 ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ddp")
    train, dev = root / "train.tsv", root / "dev.tsv"
    with gzip.open(CORPORA / "train.tsv.gz", "rt", encoding="utf-8") as f:
        train.write_text("".join(itertools.islice(f, 3000)), encoding="utf-8")
    with gzip.open(CORPORA / "dev.tsv.gz", "rt", encoding="utf-8") as f:
        dev.write_text("".join(itertools.islice(f, 20)), encoding="utf-8")
    recipe = root / "ddp.yaml"
    recipe.write_text(ddp_recipe(train, steps=STEPS), encoding="utf-8")
    tokenizer = root / "tokenizer.json"
    tfm("tokenize", str(recipe), "--out", str(tokenizer))
    return {"root": root, "recipe": recipe, "dev": dev, "tokenizer": tokenizer}


def _train(data: dict[str, Path], name: str, *args: str, processes: int = 1, resume: bool = False, **env: str):
    out = data["root"] / name
    if not resume:
        out.mkdir()
        shutil.copy(data["tokenizer"], out / "tokenizer.json")  # the same vocabulary in every run
    start = ["--resume", str(out)] if resume else [str(data["recipe"]), "--out", str(out)]
    launch = ["--nproc-per-node", str(processes)] if processes > 1 else []
    proc = tfm("train", *start, *args, "--device", "cpu", "--json", *launch, env_extra=env)
    return out, proc


@pytest.fixture(scope="module")
def pair(data: dict[str, Path]) -> dict:
    """The same recipe (with periodic evaluation, and a time budget that never runs out) in 1 and 2 processes;
    the 2-process job with a TMPDIR of its own."""
    dev = (f"data.dev={data['dev']}", "train.max_time=1h")
    one, _ = _train(data, "one", *dev)
    scratch = data["root"] / "two-tmp"
    scratch.mkdir()
    two, proc = _train(data, "two", *dev, processes=2, TMPDIR=str(scratch))
    return {"one": one, "two": two, "proc": proc, "tmp": scratch}


def _weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(run / "checkpoints" / f"step-{step:08d}.safetensors"))


def _assert_same_training(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], where: object = None) -> None:
    """The weights of two runs that should differ by rounding alone (see MEDIAN_TOLERANCE)."""
    assert a.keys() == b.keys()
    # Key projections are left out: attention is invariant to adding the same score to every key of a query,
    # so the key bias (and, for nearly constant memory, directions of the key weights) has a true gradient of ~0
    # there, and Adam's normalisation turns rounding noise into drift (2e-4 on cross-attention keys' weights
    # after 8 steps at lr ~0.05). The model's function is compared separately (`_logits`).
    diff = torch.cat([(a[k] - b[k]).abs().flatten() for k in a if ".w_k." not in k])
    median, share, most = float(diff.median()), float((diff > SHARE_OVER).float().mean()), float(diff.max())
    figures = f"{where}: median {median:.1e}, {share:.1%} over {SHARE_OVER}, largest {most:.1e}"
    assert median <= MEDIAN_TOLERANCE and share <= MAX_SHARE and most <= MAX_TOLERANCE, figures


def _logits(weights: dict[str, torch.Tensor], run: Path) -> torch.Tensor:
    config = ModelConfig.from_dict(json.loads((run / "config.json").read_text()))
    model = Transformer(config).eval()
    load_state(model, weights, run)

    batch = make_batch([[40, 50, 60], [70, 80]], [[90, 100], [110, 120, 130]], 0, 1, 2)
    with torch.no_grad():
        return model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.mark.slow
def test_two_processes_train_the_weights_of_one(pair: dict) -> None:
    for step in (6, STEPS):
        one, two = _weights(pair["one"], step), _weights(pair["two"], step)
        _assert_same_training(one, two, f"step {step}")
        torch.testing.assert_close(_logits(two, pair["two"]), _logits(one, pair["one"]), rtol=0, atol=LOGITS_TOLERANCE)


@pytest.mark.slow
def test_only_rank_0_writes_and_reports(pair: dict) -> None:
    one, two = _records(pair["one"]), _records(pair["two"])
    assert [(r["kind"], r["step"]) for r in two] == [(r["kind"], r["step"]) for r in one]  # nothing twice
    assert [(r["kind"], r["step"]) for r in two if r["kind"] != "train"] == [("eval", 6), ("eval", STEPS), ("final", STEPS)]
    for a, b in zip(one, two, strict=True):  # the logged loss is the global batch's, as in one process
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
    names = sorted(p.name for p in (pair["two"] / "checkpoints").iterdir())
    assert names == sorted(p.name for p in (pair["one"] / "checkpoints").iterdir())
    assert not list(pair["two"].glob("**/*.tmp*"))
    summary = json.loads((pair["two"] / "summary.json").read_text())
    assert summary["processes"] == 2 and summary["steps"] == STEPS
    assert json.loads(pair["proc"].stdout)["steps"] == STEPS  # one JSON result on stdout, from rank 0
    assert pair["proc"].stderr.count("train corpus:") == 1 and pair["proc"].stderr.count(f"step {STEPS}/{STEPS}") == 1


@pytest.mark.slow
def test_tfm_train_under_torchrun_leaves_no_log_directory_in_tmpdir(pair: dict) -> None:
    """`tfm train --nproc-per-node` itself (see test_the_launcher_leaves_no_log_directory_behind): no torchelastic
    log directory is left in TMPDIR (torch's own per-user `torchinductor_USER` cache, one for all runs, may be)."""
    assert (pair["two"] / "model.safetensors").is_file()
    assert [p.name for p in pair["tmp"].iterdir() if not p.name.startswith("torchinductor_")] == []


@pytest.mark.slow
def test_a_stop_while_two_processes_train_saves_and_says_nothing_of_a_rendezvous(data: dict[str, Path], tmp_path: Path) -> None:
    """Ctrl-C to `tfm train --nproc-per-node 2` as it trains: the workers save the step they are in and the job
    ends with 130, as ever. torchrun may outlive its saved workers by seconds; that once read as "no process had
    started" (no child process 3 s after the signal), and torchrun was sent SIGTERM as it shut down. The launcher
    tells a started job by the folders torchrun makes in its log directory now; it leaves nothing in TMPDIR."""
    out = tmp_path / "run"
    out.mkdir()
    shutil.copy(data["tokenizer"], out / "tokenizer.json")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = start_tfm("train", str(data["recipe"]), "--out", str(out), "train.max_steps=100000", "--device", "cpu",
                     "--nproc-per-node", "2", env_extra={"TMPDIR": str(scratch)})
    try:
        wait_until(proc, has_lines(out / "metrics.jsonl"), "the job never logged a step", timeout=240)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = err.decode()
    assert proc.returncode == 130, err
    # ("interrupted: saved CHECKPOINT", or "interrupted at step N" where that step's checkpoint was already saved)
    assert "interrupted" in err and f"continue with `tfm train --resume {out} --nproc-per-node 2`" in err, err
    assert "no process had started" not in err and "Traceback" not in err, err
    assert list((out / "checkpoints").glob("step-*.safetensors")) and [p.name for p in scratch.iterdir() if p.name.startswith("tfm-torchrun-")] == [], err


def test_accumulation_over_two_processes(data: dict[str, Path]) -> None:
    """train.accum_steps=2: the first batch of each step skips the all-reduce (no_sync); same weights as 1 process."""
    one, _ = _train(data, "accum-one", "train.accum_steps=2", "train.eval_every=0", "train.max_steps=8", "train.save_every=8")
    two, _ = _train(data, "accum-two", "train.accum_steps=2", "train.eval_every=0", "train.max_steps=8", "train.save_every=8", processes=2)
    _assert_same_training(_weights(one, 8), _weights(two, 8), "step 8")
    torch.testing.assert_close(
        _logits(_weights(two, 8), two), _logits(_weights(one, 8), one), rtol=0, atol=LOGITS_TOLERANCE
    )


@pytest.mark.slow
def test_a_resume_with_another_number_of_processes_says_it_is_not_exact(data: dict[str, Path], pair: dict) -> None:
    """A 2-process run resumed by 1 process (and back): allowed, from the same weights and data position, but the
    README's bit-for-bit resume holds only with the same number of processes. It went on without a word. (A
    resume with the same number says nothing: test_sigterm_to_the_launcher_saves_a_checkpoint.)"""
    run = Path(shutil.copytree(pair["two"], data["root"] / "two-then-one"))
    _, proc = _train(data, run.name, f"train.max_steps={STEPS + 3}", resume=True)
    assert "saved by a run of 2 process(es), resumed with 1" in proc.stderr and "not bit for bit" in proc.stderr
    _, proc = _train(data, run.name, f"train.max_steps={STEPS + 6}", processes=2, resume=True)
    assert "saved by a run of 1 process(es), resumed with 2" in proc.stderr
    assert [r["step"] for r in _records(run) if r["kind"] == "train"] == [3, 6, 9, 12, 15, 18]


def test_the_launcher_passes_on_a_worker_s_exit_status_without_torchrun_s_traceback(tmp_path: Path) -> None:
    """A worker that fails has said why (tfm's one line); torchrun's ChildFailedError traceback is not added."""
    import sys

    script = tmp_path / "fails.py"
    script.write_text("import sys\nprint('Error: what went wrong', file=sys.stderr)\nsys.exit(3)\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "tfm_cli.torchrun", "--nproc-per-node=1", "--standalone", str(script)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 3, proc.stderr
    assert "Error: what went wrong" in proc.stderr
    assert "Traceback" not in proc.stderr and "ChildFailedError" not in proc.stderr


def test_the_launcher_leaves_no_log_directory_behind(tmp_path: Path) -> None:
    """torchrun made a `torchelastic_XXXX` log directory in TMPDIR for every job and never removed it: after the
    test suite /tmp held hundreds. The launcher now gives the job a temporary one and removes it, whether the
    workers succeeded or failed (their exit status still passed on)."""
    import sys

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    for code in (0, 3):
        script = tmp_path / f"exits-{code}.py"
        script.write_text(f"import sys\nsys.exit({code})\n", encoding="utf-8")
        proc = subprocess.run(
            [sys.executable, "-m", "tfm_cli.torchrun", "--nproc-per-node=1", "--standalone", str(script)],
            capture_output=True, text=True, timeout=120, env={**os.environ, "TMPDIR": str(scratch)},
        )
        assert proc.returncode == code, proc.stderr
        assert list(scratch.iterdir()) == [], proc.stderr


def test_torchrun_s_keep_alive_timer_freed_in_its_own_thread_says_nothing() -> None:
    """After a Ctrl-C, torchrun printed now and then "Exception ignored in: <finalize object ...> Traceback ...
    RuntimeError: cannot join current thread": its rendezvous keep-alive timer, in a reference cycle, was freed by
    the garbage collector in the timer's own thread, whose finalizer then joins that thread. Here that happens on
    purpose (the timer's work allocates until the collector runs there): said without the launcher's hook, nothing
    with it, while another object's ignored exception is still reported."""
    import sys
    import textwrap

    code = textwrap.dedent("""\
        import sys, time
        from datetime import timedelta
        from torch.distributed.elastic.rendezvous.utils import _PeriodicTimer
        from tfm_cli.torchrun import _quiet_keep_alive_timer_stop

        def allocate():
            [[i] for i in range(20000)]  # enough objects to start the cyclic collector in the timer's thread

        def timer_freed_in_its_thread():
            timer = _PeriodicTimer(timedelta(seconds=0.001), allocate)
            timer.cycle = timer  # freed by the cyclic collector only, as torchrun's is
            timer.start()
            del timer
            time.sleep(0.5)

        class Loud:
            def __del__(self):
                raise ValueError("another object's error")

        timer_freed_in_its_thread()
        print("hook installed", file=sys.stderr, flush=True)
        _quiet_keep_alive_timer_stop()
        timer_freed_in_its_thread()
        Loud()
        """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    before, after = proc.stderr.split("hook installed\n")
    assert "RuntimeError: cannot join current thread" in before  # the race, reproduced
    assert "cannot join" not in after and "ValueError: another object's error" in after, after


@pytest.mark.slow
def test_a_bad_input_under_two_processes_is_one_line(data: dict[str, Path], pair: dict, tmp_path: Path) -> None:
    """Every process reads the corpora and the run: a line without a tab was said by each process (twice), or,
    where rank 0 alone trained the tokenizer on it, rank 1 added gloo's "Connection closed by peer" traceback; a
    resume that changes the model was said twice too; and torchrun added its own log lines after the worker's.
    Now one Error line (local rank 0's), nothing of torchrun's, no traceback, exit 1."""
    bad = tmp_path / "bad.tsv"
    lines = data["recipe"].parent.joinpath("train.tsv").read_text(encoding="utf-8").splitlines(keepends=True)[:200]
    lines[32] = lines[32].replace("\t", " ")
    bad.write_text("".join(lines), encoding="utf-8")
    with_tokenizer = tmp_path / "with-tokenizer"
    with_tokenizer.mkdir()
    shutil.copy(data["tokenizer"], with_tokenizer / "tokenizer.json")  # both ranks encode the corpus and fail
    resume = Path(shutil.copytree(pair["two"], tmp_path / "resume"))
    runs = [
        ([str(data["recipe"]), f"data.train={bad}", "--out", str(tmp_path / "fresh")], f"{bad}:33: the line has no tab"),
        ([str(data["recipe"]), f"data.train={bad}", "--out", str(with_tokenizer)], f"{bad}:33: the line has no tab"),
        (["--resume", str(resume), "model.d_ff=128", f"train.max_steps={STEPS + 2}"], "--resume cannot change the model"),
    ]
    for args, message in runs:
        proc = tfm("train", *args, "--device", "cpu", "--nproc-per-node", "2", check=False)
        assert proc.returncode == 1, proc.stderr
        assert "Traceback" not in proc.stderr, proc.stderr
        errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and message in errors[0], proc.stderr
        # nor torchrun's own "W... Sending process N closing signal SIGTERM", "E... failed (exitcode: 1) ..."
        assert not [line for line in proc.stderr.splitlines() if re.match(r"[EWI]\d{4} ", line)], proc.stderr


def _start_two_processes(
    data: dict[str, Path], name: str, save_every: int = 100000, env_extra: dict[str, str] | None = None
) -> tuple[subprocess.Popen, Path]:
    """`tfm train --nproc-per-node 2` of the test recipe started with no end in sight, once it has logged a step."""
    out = data["root"] / name
    out.mkdir()
    shutil.copy(data["tokenizer"], out / "tokenizer.json")
    proc = start_tfm("train", str(data["recipe"]), "train.max_steps=100000", f"train.save_every={save_every}",
                     "train.eval_every=0", "--out", str(out), "--device", "cpu", "--nproc-per-node", "2", env_extra=env_extra)
    wait_until(proc, has_lines(out / "metrics.jsonl"), "training never logged a step", timeout=180)
    return proc, out


def _saved_by_every_rank(out: Path) -> int:
    """The step of the run's one checkpoint, after checking that every rank took part in saving it (the state
    holds both ranks' random states, as at a scheduled save: the resume is exact)."""
    saved = sorted((out / "checkpoints").glob("step-*.state.pt"))
    assert len(saved) == 1
    assert len(torch.load(saved[0], weights_only=True)["rng_ranks"]) == 2
    return int(saved[0].name.split("-")[1].split(".")[0])


def test_sigterm_to_the_launcher_saves_a_checkpoint(data: dict[str, Path], pair: dict) -> None:
    """SIGTERM to `tfm train --nproc-per-node 2` (a scheduler's notice, `kill`): passed on through torchrun to
    the workers, which stop after the same step and save it, exit 143, no traceback. Resumed with the same number
    of processes (nothing to say about it), each rank from its own random state and data position, the run's
    weights are those of a straight run, bit for bit: the module's (whose dev evaluations and time budget change no
    weight), or one of its own where the signal came after its last step; its log has no step twice or missing."""
    proc, out = _start_two_processes(data, "terminated")
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    stderr = stderr.decode("utf-8")
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr and "stopped by SIGTERM" in stderr and "--resume" in stderr
    step = _saved_by_every_rank(out)
    end = max(STEPS, step + 2)
    _, resumed_proc = _train(data, out.name, f"train.max_steps={end}", processes=2, resume=True)
    assert "resumed from" in resumed_proc.stderr and f"at step {step}" in resumed_proc.stderr, resumed_proc.stderr
    assert "saved by a run of" not in resumed_proc.stderr  # the same number of processes: exact, nothing to say
    logged = [r["step"] for r in _records(out) if r["kind"] == "train"]
    assert logged == sorted(set(logged)) and set(range(3, end + 1, 3)) <= set(logged), logged
    straight = pair["two"] if end == STEPS else _train(data, "not-terminated", f"train.max_steps={end}", processes=2)[0]
    resumed, expected = _weights(out, end), _weights(straight, end)
    assert all(torch.equal(resumed[k], expected[k]) for k in expected)


@pytest.mark.slow
def test_a_resume_from_an_evaluated_checkpoint_goes_on_in_every_process(data: dict[str, Path], pair: dict) -> None:
    """The newest checkpoint at an evaluation step whose evaluation was done (a crash in the steps after it, or
    a full disk): rank 1, which reads no dev set, took its own BLEU tokenizer (None) for a change of scoring, did
    not read the evaluation's outcome, evaluated again where rank 0 trained on, and both waited in collectives the
    other never joined: the 2-process resume hung for good after "resumed from". It now goes on, exactly."""
    run = Path(shutil.copytree(pair["two"], data["root"] / "evaluated-then-lost"))
    assert (run / "checkpoints" / "step-00000006.evaluated.json").is_file()
    for lost in [*run.glob(f"checkpoints/step-{STEPS:08d}.*"), run / "model.safetensors", run / "summary.json"]:
        lost.unlink()  # as if the run had died between step 6 and its next checkpoint
    proc = tfm("train", "--resume", str(run), "--device", "cpu", "--nproc-per-node", "2", timeout=240)
    assert "resumed from" in proc.stderr and "at step 6" in proc.stderr, proc.stderr
    resumed, expected = _weights(run, STEPS), _weights(pair["two"], STEPS)
    assert all(torch.equal(resumed[k], expected[k]) for k in expected)
    evaluations = [r["step"] for r in _records(run) if r["kind"] == "eval"]
    assert evaluations.count(6) == 1, evaluations  # step 6's evaluation not done again


def test_a_full_disk_under_two_processes_is_one_error_line(data: dict[str, Path], tmp_path: Path) -> None:
    """Rank 0 stops on a disk that filled up while it saved the best model at step 6's evaluation, and says so with
    the resume command; rank 1 then lost contact with it and added its own `Error: process 1 of 2 lost contact
    ...` line and hint. Now rank 0's line is the job's only one, and the resume finishes the run."""
    (tmp_path / "sitecustomize.py").write_text(
        "import errno, os\n"
        "from pathlib import Path\n"
        "if os.environ.get('RANK') == '0':\n"
        "    from tfm_cli.training import evaluation, trainer\n"
        "    save = trainer.save_weights\n"
        "    def full(path, *args, **kwargs):\n"
        "        if Path(path).name == 'best.safetensors':\n"
        "            raise OSError(errno.ENOSPC, 'No space left on device', str(path))\n"
        "        save(path, *args, **kwargs)\n"
        "    trainer.save_weights = evaluation.save_weights = full\n"
    )
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    run = data["root"] / "full-disk"
    run.mkdir()
    shutil.copy(data["tokenizer"], run / "tokenizer.json")
    proc = tfm("train", str(data["recipe"]), f"data.dev={data['dev']}", "--out", str(run), "--device", "cpu",
               "--nproc-per-node", "2", env_extra={"PYTHONPATH": path}, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "best.safetensors could not be written" in errors[0], proc.stderr
    assert proc.stderr.count("hint:") == 1, proc.stderr
    assert f"then continue with `tfm train --resume {run} --nproc-per-node 2`" in proc.stderr, proc.stderr
    assert not (run / "model.safetensors").exists()
    resumed = tfm("train", "--resume", str(run), "--device", "cpu", "--nproc-per-node", "2", timeout=240)
    assert "at step 6" in resumed.stderr and (run / "model.safetensors").is_file(), resumed.stderr


@pytest.mark.parametrize(("signame", "status"), [("SIGINT", 130), ("SIGXCPU", 152)])
def test_ctrl_c_to_the_launcher_alone_stops_the_job(data: dict[str, Path], signame: str, status: int) -> None:
    """SIGINT to `tfm train --nproc-per-node 2` itself (`kill -INT PID`; a terminal's Ctrl-C signals the whole
    group): Python's Ctrl-C handler raised KeyboardInterrupt in tfm alone, which then waited on torchrun while the
    job trained on. Now it is passed on as SIGTERM is: every rank saves the same step, exit 130, no traceback.
    SIGXCPU (a CPU-time limit's notice), passed on as it was, killed torchrun, which handles no such signal: tfm
    returned with the workers still running; they get SIGTERM now and save, exit 152."""
    tmp = data["root"] / f"tmp-{signame}"  # where torchrun keeps its logs while it runs, and removes them
    tmp.mkdir()
    proc, out = _start_two_processes(data, f"{signame}-to-tfm", env_extra={"TMPDIR": str(tmp)})  # (Python's Ctrl-C handler)
    try:
        proc.send_signal(getattr(signal, signame))
        _, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:  # the job trained on: end it (its torchrun gets SIGTERM when tfm ends)
            proc.kill()
            proc.communicate()
    stderr = stderr.decode("utf-8")
    assert proc.returncode == status, stderr
    assert "Traceback" not in stderr and "interrupted: saved" in stderr, stderr
    assert f"continue with `tfm train --resume {out} --nproc-per-node 2`" in stderr  # the same processes: exact
    assert "death signal" not in stderr  # torchrun's "W... Received 2 death signal, shutting down workers"
    _saved_by_every_rank(out)
    assert not list(tmp.glob("tfm-torchrun-*")), "torchrun ended as it does on a stop, its logs removed"


@pytest.mark.skipif(not Path("/proc/self/environ").is_file(), reason="finds the rank's process through /proc (Linux)")
def test_a_stop_signal_to_one_rank_stops_every_rank_after_the_same_step(data: dict[str, Path]) -> None:
    """SIGTERM to rank 1 alone (a signal that reaches the workers one by one, at different moments): the ranks
    agree at the end of a step and all stop after it, instead of rank 1 leaving rank 0 waiting in a collective;
    rank 0 says why and saves the step with every rank, exit 143, no traceback."""
    proc, out = _start_two_processes(data, "one-rank")
    os.kill(_worker(proc.pid, rank=1), signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    stderr = stderr.decode("utf-8")
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr and "stopped by SIGTERM" in stderr and "interrupted: saved" in stderr
    _saved_by_every_rank(out)


@pytest.mark.skipif(not Path("/proc/self/environ").is_file(), reason="finds the rank's process through /proc (Linux)")
@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_a_process_killed_mid_run_is_one_error_line_with_the_resume_command(data: dict[str, Path], rank: int) -> None:
    """kill -9 of one rank (the out-of-memory killer, a lost machine). Of rank 0, the job ended with one line of no
    `Error:` kind, no step and no resume command (rank 1 stops on torchrun's SIGTERM and says nothing); of rank 1,
    rank 0 said "lost contact" only when gloo's error beat torchrun's SIGTERM to it. Now the launcher says it: which
    process died and of what, up to which step the checkpoints are whole, and the resume command with the same
    processes; the job's status is the killed process's (137), and no process of the job is left."""
    proc, out = _start_two_processes(data, f"killed-{rank}", save_every=3)
    # the first log line may come before the first checkpoint (a slow machine): the message then says so instead
    wait_until(proc, lambda: any((out / "checkpoints").glob("*.state.pt")), "no checkpoint was saved", timeout=180)
    workers = [_worker(proc.pid, rank=r) for r in (0, 1)]
    os.kill(workers[rank], signal.SIGKILL)
    _, stderr = proc.communicate(timeout=120)
    stderr = stderr.decode("utf-8")
    assert proc.returncode == 137, stderr
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert errors and errors[-1].startswith(f"Error: process {rank} of the job (pid {workers[rank]}) was killed by SIGKILL"), stderr
    newest = max(int(p.name.split("-")[1].split(".")[0]) for p in (out / "checkpoints").glob("step-*.state.pt"))
    assert f"the checkpoints of {out} (up to step {newest}) are intact" in errors[-1], stderr
    assert stderr.rstrip().endswith(f"hint: continue with `tfm train --resume {out} --nproc-per-node 2 --device cpu`"), stderr
    assert not any(_alive(pid) for pid in workers)


@pytest.mark.skipif(not Path("/proc/self/environ").is_file(), reason="finds the job's processes through /proc (Linux)")
@pytest.mark.parametrize("killed", ["tfm", "tfm and torchrun"])
def test_kill_9_of_the_launcher_leaves_no_worker_training_on(data: dict[str, Path], killed: str) -> None:
    """kill -9 of `tfm train --nproc-per-node 2` (the pid the user sees), or of its whole process group (tfm and
    torchrun): torchrun and the workers went on training in the background to the end, writing the run. Now a
    lost parent is a SIGTERM: the workers save the step, every rank in it, and all of the job's processes end."""
    scratch = data["root"] / f"tmp-{killed.replace(' ', '-')}"  # the job's TMPDIR, where tfm makes torchrun's log folder
    scratch.mkdir()
    proc, out = _start_two_processes(data, f"launcher-killed-{killed.replace(' ', '-')}", env_extra={"TMPDIR": str(scratch)})
    workers = [_worker(proc.pid, rank=r) for r in (0, 1)]
    agent = _parent(workers[0])
    assert agent != proc.pid  # tfm -> torchrun -> workers
    for pid in [proc.pid, agent] if killed == "tfm and torchrun" else [proc.pid]:
        os.kill(pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 120
    while any(_alive(pid) for pid in [agent, *workers]):
        assert time.monotonic() < deadline, f"still running: {[pid for pid in [agent, *workers] if _alive(pid)]}"
        time.sleep(0.2)
    _saved_by_every_rank(out)
    if killed == "tfm":  # torchrun removes the log folder tfm made for it (killed with tfm, neither can: the
        # folder is left in the job's TMPDIR, here the test's own, as torchrun's own `torchelastic_*` ones are)
        assert not [p.name for p in scratch.iterdir() if p.name.startswith("tfm-torchrun-")]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").is_file(), reason="finds the job's processes through /proc (Linux)")
def test_kill_9_of_torchrun_alone_is_one_error_line_with_the_resume_command(data: dict[str, Path]) -> None:
    """kill -9 of the torchrun between `tfm train --nproc-per-node 2` and its workers: tfm exited 247 (its child's
    -9 as an exit status) with no word of its own. Now it waits for the workers to save their step and let go of
    the run, then says what was killed, up to which step the checkpoints are whole and how to resume; exit 137."""
    proc, out = _start_two_processes(data, "torchrun-killed")
    workers = [_worker(proc.pid, rank=r) for r in (0, 1)]
    agent = _parent(workers[0])
    os.kill(agent, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=150)
    stderr = stderr.decode("utf-8")
    assert proc.returncode == 137, stderr
    assert "Traceback" not in stderr
    step = _saved_by_every_rank(out)  # the workers saved the step they were in before tfm spoke
    errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and errors[0].startswith(f"Error: torchrun (pid {agent}), which ran the job's processes"), stderr
    assert f"the checkpoints of {out} (up to step {step}) are intact" in errors[0]
    assert f"hint: continue with `tfm train --resume {out} --nproc-per-node 2 --device cpu`" in stderr


def _parent(pid: int) -> int:
    return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])


def _alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie, ended but not yet reaped by its parent, does not)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _worker(launcher: int, rank: int) -> int:
    """The process id of torchrun's worker `rank` among the launcher's descendants."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (command)": state, parent pid, ...
            parents[int(stat.parent.name)] = int(fields[1])

    def descends(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == launcher:
                return True
        return False

    for pid in filter(descends, parents):
        with contextlib.suppress(OSError):
            if f"RANK={rank}".encode() in (Path("/proc") / str(pid) / "environ").read_bytes().split(b"\0"):
                return pid
    raise AssertionError(f"no worker of rank {rank} under process {launcher}")


@pytest.mark.slow
def test_nodes_started_with_different_settings_are_refused(data: dict[str, Path], tmp_path: Path) -> None:
    """Two nodes (one process each, on this machine) whose commands differ in an override trained a model neither
    recipe describes, without a word, and recipe.yaml said node 0's (`train.lr_factor=2.0` on node 1 alone: its
    weights 99.9% apart from the run's). The processes compare their settings and pairs before the first step."""
    import socket

    for node_1, said in (
        (["train.lr_factor=2.0"], "train.lr_factor is 1.0 in process 0 but 2.0 in process 1"),
        ([f"data.train={tmp_path / 'other.tsv'}"], "process 1 read other pairs from data.train than process 0"),
    ):
        lines = (data["root"] / "train.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
        (tmp_path / "other.tsv").write_text("".join(lines[:-50]), encoding="utf-8")  # its own copy, cut short
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = str(s.getsockname()[1])
        run = tmp_path / f"run-{port}"
        common = ["--device", "cpu", "--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", port,
                  f"tokenizer.path={data['tokenizer']}"]
        nodes = [
            start_tfm("train", str(data["recipe"]), *extra, "--out", str(run), "--node-rank", str(rank), *common)
            for rank, extra in ((0, []), (1, node_1))
        ]
        outputs = [node.communicate(timeout=600) for node in nodes]
        for node, (_, err) in zip(nodes, outputs, strict=True):
            text = err.decode()
            assert node.returncode == 1 and "Traceback" not in text, text
            errors = [line for line in text.splitlines() if line.startswith("Error: ")]
            assert len(errors) == 1 and errors[0].startswith(f"Error: the processes of this job were started with different settings: {said}"), text
        assert not (run / "checkpoints").exists() and not (run / "recipe.yaml").exists()


@pytest.mark.slow
def test_node_1_says_nothing_of_node_0_stopping_in_its_final_phase(data: dict[str, Path], tmp_path: Path) -> None:
    """Node 0 stopped (SIGTERM) while it alone wrote the final model: node 1's torchrun printed c10d's C++ warning
    "recvValueWithTimeout failed ... Exception raised from recvBytes" and 34 stack frames."""
    import socket

    dev = tmp_path / "dev.tsv"  # long enough that the final evaluation is still running when node 0 is stopped
    with gzip.open(CORPORA / "dev.tsv.gz", "rt", encoding="utf-8") as f:
        dev.write_text("".join(itertools.islice(f, 2000)), encoding="utf-8")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    run = tmp_path / "run"
    common = ["train.max_steps=4", "train.save_every=2", "train.eval_every=0", f"data.dev={dev}",
              f"tokenizer.path={data['tokenizer']}", "--out", str(run), "--device", "cpu", "--nnodes", "2",
              "--master-addr", "127.0.0.1", "--master-port", port]
    errs = [tmp_path / "node0.err", tmp_path / "node1.err"]
    nodes = []
    for rank in (0, 1):
        with open(errs[rank], "wb") as err:
            nodes.append(start_tfm("train", str(data["recipe"]), *common, "--node-rank", str(rank),
                                   stdout=subprocess.DEVNULL, stderr=err))
    try:
        wait_until(nodes[0], lambda: "final model: evaluating" in errs[0].read_text(), "node 0 never began its final phase",
                   timeout=300)
        nodes[0].send_signal(signal.SIGTERM)
        assert nodes[0].wait(timeout=120) == 128 + signal.SIGTERM
        nodes[1].wait(timeout=120)
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
    said = errs[1].read_text()
    assert "TCPStore" not in said and "frame #" not in said and "Traceback" not in said, said
