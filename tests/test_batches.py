"""The training data path: batches padded straight from the corpus buffers equal `make_batch`'s, the prefetching
iterator hands out exactly the plain stream's batches and saves the position of the consumed ones, errors in its
thread surface in the caller, it stops cleanly; padding lengths to a multiple of 8 leaves the loss unchanged;
the step reads the loss back once. A CUDA test (skipped without a GPU) trains on pinned, non-blocking batches."""

from __future__ import annotations

import itertools
import random
import threading
import time
from contextlib import nullcontext

import pytest
import torch

from tfm_cli.batches import Prefetcher
from tfm_cli.data import (
    CUDA_PAD_MULTIPLE,
    Batch,
    BatchStream,
    TokenizedCorpus,
    corpus_batch,
    make_batch,
    pad_multiple_for,
)
from tfm_cli.errors import CorpusError, TfmError
from tfm_cli.model import ModelConfig, Transformer
from tfm_cli.recipe import TrainRecipe
from tfm_cli.training import output_loss, setup_model, train_step

PAD, BOS, EOS = 0, 1, 2
FIELDS = ("src", "tgt_in", "tgt_out", "src_mask", "tgt_mask", "tgt_keep")


def _corpus(n: int = 300, vocab: int = 50, seed: int = 0, big_vocab: bool = False) -> TokenizedCorpus:
    rng = random.Random(seed)
    hi = 70000 if big_vocab else vocab  # ids past 65535 are stored as int32, below as uint16

    def seq() -> list[int]:
        return [rng.randrange(3, hi) for _ in range(rng.randint(1, 20))]

    return TokenizedCorpus.from_sequences([seq() for _ in range(n)], [seq() for _ in range(n)], vocab_size=hi)


def _stream(corpus: TokenizedCorpus, **kw) -> BatchStream:
    return BatchStream(corpus, max_tokens=120, seed=5, pad_id=PAD, bos_id=BOS, eos_id=EOS, **kw)


def _equal(a: Batch, b: Batch) -> bool:
    return (
        all(torch.equal(getattr(a, f), getattr(b, f)) for f in FIELDS)
        and (a.n_src_tokens, a.n_tgt_tokens, a.indices, a.step_tgt_tokens)
        == (b.n_src_tokens, b.n_tgt_tokens, b.indices, b.step_tgt_tokens)
    )


def _groups(stream: BatchStream, size: int, n: int) -> list[list[Batch]]:
    it = iter(stream)
    return [[next(it) for _ in range(size)] for _ in range(n)]


# ---- padding from the corpus buffers ---------------------------------------------------------------------------


@pytest.mark.parametrize("big_vocab", [False, True])
@pytest.mark.parametrize("multiple", [1, 8])
def test_corpus_batch_equals_make_batch(big_vocab: bool, multiple: int) -> None:
    corpus = _corpus(big_vocab=big_vocab)
    rng = random.Random(1)
    for _ in range(20):
        indices = rng.sample(range(len(corpus)), rng.randint(1, 40))
        fast = corpus_batch(corpus, indices, PAD, BOS, EOS, multiple)
        slow = make_batch(
            [corpus.src(i) for i in indices], [corpus.tgt(i) for i in indices], PAD, BOS, EOS, indices, multiple
        )
        assert _equal(fast, slow)
        assert fast.src.dtype == torch.long and fast.src.size(1) % multiple == 0 and fast.tgt_in.size(1) % multiple == 0


def test_the_non_pad_positions_are_found_when_the_batch_is_built() -> None:
    """`Batch.tgt_keep` (host-computed, so the loss needs no boolean mask on the GPU) names exactly the target
    tokens, and the loss over them is the loss over the mask, bit for bit."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=50, d_model=32, d_ff=64, n_heads=4, n_enc_layers=1, n_dec_layers=1))
    corpus = _corpus()
    for multiple in (1, 8):
        b = corpus_batch(corpus, list(range(0, 40, 3)), PAD, BOS, EOS, multiple)
        flat = b.tgt_out.reshape(-1)
        assert b.tgt_keep.tolist() == [i for i, token in enumerate(flat.tolist()) if token != PAD]
        assert b.tgt_keep.numel() == b.n_tgt_tokens
        features = model(b.src, b.tgt_in, b.src_mask, b.tgt_mask, features_only=True)
        with_keep = output_loss(features, model.generator.weight, b.tgt_out, 0.1, PAD, b.tgt_keep)
        without = output_loss(features, model.generator.weight, b.tgt_out, 0.1, PAD)
        assert with_keep[2] == without[2] == b.n_tgt_tokens
        assert torch.equal(with_keep[0], without[0]) and torch.equal(with_keep[1], without[1])


def test_pad_multiple_rounds_lengths_on_cuda_only_and_keeps_the_budget() -> None:
    assert pad_multiple_for("cpu") == 1 and pad_multiple_for(torch.device("cuda", 0)) == CUDA_PAD_MULTIPLE
    corpus = _corpus()
    plain, rounded = _groups(_stream(corpus), 1, 30), _groups(_stream(corpus, pad_multiple=8), 1, 30)
    for [b] in rounded:
        assert b.src.size(1) % 8 == 0 and b.tgt_out.size(1) % 8 == 0
        assert b.src.numel() <= 120 and b.tgt_out.numel() <= 120  # the budget counts the rounded widths
        for row, i in enumerate(b.indices):  # each row is its sentence, then padding
            src = corpus.src(i)
            assert b.src[row, : len(src) + 1].tolist() == [*src, EOS] and (b.src[row, len(src) + 1 :] == PAD).all()
    shapes = lambda groups: {(g[0].src.shape, g[0].tgt_out.shape) for g in groups}  # noqa: E731
    assert len(shapes(rounded)) < len(shapes(plain))


def test_padding_to_a_multiple_of_8_leaves_the_loss_unchanged() -> None:
    """Padding is masked: the same sentences padded to S, T or to multiples of 8 give the same loss (fp32)."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=50, d_model=32, d_ff=64, n_heads=4, n_enc_layers=2, n_dec_layers=2, dropout=0.0))
    model.eval()
    corpus = _corpus()
    indices = list(range(0, 60, 3))
    losses = []
    for multiple in (1, 8):
        b = corpus_batch(corpus, indices, PAD, BOS, EOS, multiple)
        features = model(b.src, b.tgt_in, b.src_mask, b.tgt_mask, features_only=True)
        loss, nll, n = output_loss(features, model.generator.weight, b.tgt_out, 0.1, PAD)
        losses.append((loss.item(), nll.item(), n))
    assert losses[0][2] == losses[1][2]
    assert losses[1][:2] == pytest.approx(losses[0][:2], rel=1e-5)


# ---- the prefetching iterator --------------------------------------------------------------------------------


@pytest.mark.parametrize(("depth", "size"), [(0, 1), (1, 1), (2, 3), (4, 2)])
def test_prefetcher_hands_out_the_plain_streams_batches_and_consumed_position(depth: int, size: int) -> None:
    corpus = _corpus()
    plain_stream = _stream(corpus)
    n = plain_stream.num_batches // size + 5  # into the second epoch
    plain = iter(plain_stream)
    with Prefetcher(_stream(corpus), size, depth=depth) as prefetcher:
        assert prefetcher.state_dict() == {"epoch": 1, "position": 0}
        for _ in range(n):
            group = next(prefetcher)
            expected = [next(plain) for _ in range(size)]
            assert len(group) == size and all(_equal(a, b) for a, b in zip(group, expected, strict=True))
            assert prefetcher.state_dict() == plain_stream.state_dict()  # consumed, not built ahead
        assert prefetcher.epoch == plain_stream.epoch == 2


def test_prefetcher_runs_ahead_but_saves_where_training_is() -> None:
    corpus = _corpus()
    stream = _stream(corpus)
    with Prefetcher(stream, 2, depth=3) as prefetcher:
        next(prefetcher)
        deadline = time.monotonic() + 10
        while stream.position < 2 * 4 and time.monotonic() < deadline:  # 1 handed out, 3 queued
            time.sleep(0.01)
        assert stream.position >= 2 * 4  # the thread built ahead
        assert prefetcher.state_dict() == {"epoch": 1, "position": 2}  # what a checkpoint saves
        state = prefetcher.state_dict()
        expected = [next(prefetcher) for _ in range(3)]
    resumed = _stream(corpus)
    resumed.load_state_dict(state)
    with Prefetcher(resumed, 2) as again:
        got = [next(again) for _ in range(3)]
    assert all(_equal(a, b) for ga, gb in zip(expected, got, strict=True) for a, b in zip(ga, gb, strict=True))


@pytest.mark.parametrize("error", [CorpusError("train.tsv:7: invalid UTF-8 at byte 3 of the line"), TfmError("bad")])
def test_an_error_in_the_thread_is_raised_in_the_caller(error: TfmError, monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _stream(_corpus())
    made = itertools.count()
    make = stream._make

    def failing(indices: list[int]) -> Batch:
        if next(made) == 4:
            raise error
        return make(indices)

    monkeypatch.setattr(stream, "_make", failing)
    prefetcher = Prefetcher(stream, 2, depth=2)
    next(prefetcher), next(prefetcher)  # batches 0-3
    with pytest.raises(type(error)) as raised:
        next(prefetcher)
    assert raised.value is error and str(raised.value) == str(error)
    assert prefetcher.state_dict() == {"epoch": 1, "position": 4}  # the failed group was never handed out
    with pytest.raises(type(error)):
        next(prefetcher)  # and stays failed
    assert not any(t.name == "tfm-prefetch" and t.is_alive() for t in threading.enumerate())


def test_close_stops_a_thread_waiting_on_a_full_queue() -> None:
    prefetcher = Prefetcher(_stream(_corpus()), 1, depth=1)
    next(prefetcher)
    time.sleep(0.2)  # the thread fills the queue and waits to put the next group
    thread = prefetcher._thread
    started = time.monotonic()
    prefetcher.close()
    assert not thread.is_alive() and thread.daemon and time.monotonic() - started < 5
    with pytest.raises(StopIteration):
        next(prefetcher)
    with Prefetcher(_stream(_corpus()), 1) as p:  # a `with` block closes it, also on an exception
        with pytest.raises(KeyboardInterrupt):
            next(p)
            raise KeyboardInterrupt
    assert p._thread is None


# ---- the step: one read of the loss ---------------------------------------------------------------------------


def test_train_step_returns_the_summed_losses_of_its_batches() -> None:
    """The device-side sums equal the float sums the step used to take batch by batch (one sync now)."""
    config = ModelConfig(vocab_size=50, d_model=16, d_ff=32, n_heads=2, n_enc_layers=1, n_dec_layers=1, dropout=0.0)
    t = TrainRecipe(label_smoothing=0.1)
    torch.manual_seed(0)
    model, optimizer, scaler = setup_model(config, t, torch.device("cpu"), "fp32")
    group = _groups(_stream(_corpus()), 3, 1)[0]
    expected_loss = expected_nll = 0.0
    with torch.no_grad():
        for b in group:
            features = model(b.src, b.tgt_in, b.src_mask, b.tgt_mask, features_only=True)
            loss, nll, _ = output_loss(features, model.generator.weight, b.tgt_out, 0.1, PAD)
            expected_loss, expected_nll = expected_loss + float(loss), expected_nll + float(nll)
    got = train_step(model, optimizer, scaler, group, 1e-3, t, nullcontext, torch.device("cpu"))
    assert all(isinstance(x, float) for x in got)
    assert got == pytest.approx((expected_loss, expected_nll), rel=1e-6)


# ---- CUDA: pinned batches, non-blocking copies ------------------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none on this machine)")
def test_pinned_non_blocking_batches_train_on_cuda() -> None:
    device = torch.device("cuda")
    config = ModelConfig(vocab_size=50, d_model=32, d_ff=64, n_heads=4, n_enc_layers=1, n_dec_layers=1, dropout=0.0)
    t = TrainRecipe(label_smoothing=0.1)
    corpus = _corpus()
    results = []
    for pinned in (True, False):
        torch.manual_seed(0)
        model, optimizer, scaler = setup_model(config, t, device, "fp32")
        stream = _stream(corpus, pad_multiple=pad_multiple_for(device))
        with Prefetcher(stream, 2, pin_memory=pinned, device=device) as batches:
            losses = []
            for _ in range(5):
                group = next(batches)
                assert all(b.src.is_pinned() and b.tgt_mask.is_pinned() for b in group) == pinned
                losses.append(train_step(model, optimizer, scaler, group, 1e-3, t, nullcontext, device)[0])
        results.append((losses, [p.detach().cpu() for p in model.parameters()]))
    (pinned_losses, pinned_weights), (plain_losses, plain_weights) = results
    assert all(torch.isfinite(torch.tensor(pinned_losses)))
    assert pinned_losses == pytest.approx(plain_losses, rel=1e-4)
    for a, b in zip(pinned_weights, plain_weights, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
