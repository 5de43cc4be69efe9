"""Greedy and beam search against independent references: brute-force enumeration of every output, greedy
search itself (beam 1), decoding each sentence alone, and the length limit."""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
from collections.abc import Callable

import pytest
import torch
from torch.overrides import TorchFunctionMode

from tfm_cli import decoding
from tfm_cli.decoding import (
    UNK_ID,
    Hypothesis,
    Sampling,
    banned_ids,
    beam_search,
    greedy_search,
    length_sorted_batches,
    sample_search,
    translate_ids,
)
from tfm_cli.model import ModelConfig, Transformer
from tfm_cli.model.masks import causal_mask, padding_mask
from tfm_cli.model.transformer import CPU_SHORT_KEYS
from tfm_cli.tokenizer import Tokenizer

PAD, BOS, EOS, UNK = 0, 1, 2, 3




def tiny_model(seed: int, vocab: int = 13, sharpen: float = 1.0, **overrides) -> Transformer:
    """A random tiny model; `sharpen` scales the (untied) output projection to make distributions peakier."""
    values = dict(
        vocab_size=vocab,
        d_model=32,
        d_ff=64,
        n_heads=4,
        n_enc_layers=1,
        n_dec_layers=2,
        dropout=0.0,
        max_positions=64,
        tie_embeddings=False,
    )
    values.update(overrides)
    torch.manual_seed(seed)
    model = Transformer(ModelConfig(**values)).eval()
    with torch.no_grad():
        model.generator.weight.mul_(sharpen)
    return model


def make_src(sequences: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Sources as the decoders expect them: each followed by EOS, right-padded; and their (B, 1, 1, S) mask."""
    width = max(len(s) for s in sequences) + 1
    src = torch.full((len(sequences), width), PAD, dtype=torch.long)
    for row, s in enumerate(sequences):
        src[row, : len(s) + 1] = torch.tensor(s + [EOS])
    return src, padding_mask(src, PAD)


def random_sequences(lengths: list[int], vocab: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (n,), generator=g).tolist() for n in lengths]


def lp(length: int, alpha: float) -> float:
    return ((5 + length) / 6) ** alpha


@torch.no_grad()
def brute_force(
    model: Transformer, source: list[int], max_len: int, alpha: float
) -> dict[tuple[int, ...], float]:
    """Score every output of at most `max_len` real tokens (then EOS) with teacher forcing and no cache.

    log P sums log-softmax over the full vocabulary (pad, BOS and <unk> excluded from the choice, not renormalised),
    EOS included; the score divides it by ((5 + len) / 6)^alpha where len counts EOS.
    """
    src, src_mask = make_src([source])
    memory = model.encode(src, src_mask)
    real = range(UNK + 1, model.config.vocab_size)  # <unk> is never an output
    scores = {}
    for n in range(max_len + 1):
        for seq in itertools.product(real, repeat=n):
            inp = torch.tensor([[BOS, *seq]])
            out = torch.tensor([*seq, EOS])
            logits = model.decode(inp, memory, src_mask, causal_mask(n + 1))[0].float()
            total = float(logits.log_softmax(-1).gather(1, out[:, None]).sum())
            scores[seq] = total / lp(n + 1, alpha)
    return scores


def test_beam_size_one_equals_greedy() -> None:
    model = tiny_model(0, sharpen=2.0)
    sequences = random_sequences([6, 2, 9, 4], 13, seed=1)
    src, src_mask = make_src(sequences)
    greedy = greedy_search(model, src, src_mask, max_len_offset=6)
    beam = beam_search(model, src, src_mask, beam_size=1, alpha=0.0, max_len_offset=6)
    assert len(greedy) == len(beam) == 4
    lengths = set()
    for g, b in zip(greedy, beam, strict=True):
        assert len(g) == len(b) == 1
        assert g[0].tokens == b[0].tokens
        assert g[0].log_prob == pytest.approx(b[0].log_prob, abs=1e-4)
        lengths.add(len(g[0].tokens))
    assert len(lengths) > 1  # some sentences stopped early, so finished rows left the batch mid-search


@pytest.mark.parametrize("bf16", [False, True])
def test_beam_size_one_equals_greedy_where_tokens_tie_exactly(bf16: bool) -> None:
    """Equal log-probabilities (frequent in bf16: the quickstart model gave two tokens -1.1074 each, and 10 of
    200 dev sentences came out otherwise with --beam 1 than --greedy): both searches take the lowest token id.
    Here the token greedy search outputs most gets two copies of its output row with higher ids: whenever it is
    best, all three tie."""
    model = tiny_model(3, vocab=13, sharpen=2.0)
    sequences = random_sequences([6, 2, 9, 4, 7, 3, 5, 8], 13, seed=2)
    src, src_mask = make_src(sequences)
    counts = collections.Counter(t for g in greedy_search(model, src, src_mask, max_len_offset=6) for t in g[0].tokens)
    best = max((t for t in counts if t <= 10), key=counts.__getitem__)
    with torch.no_grad():
        model.generator.weight[best + 1] = model.generator.weight[best]
        model.generator.weight[best + 2] = model.generator.weight[best]
    amp = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with amp:
        greedy = greedy_search(model, src, src_mask, max_len_offset=6)
        beam = beam_search(model, src, src_mask, beam_size=1, alpha=0.0, max_len_offset=6)
        wide = beam_search(model, src, src_mask, beam_size=3, n_best=3, alpha=0.0, max_len_offset=6)
    tokens = [g[0].tokens for g in greedy]
    assert sum(t.count(best) for t in tokens) >= 5  # ties, of which the lowest id was taken
    assert not any(best + 1 in t or best + 2 in t for t in tokens)
    assert [b[0].tokens for b in beam] == tokens
    assert [b[0].log_prob for b in beam] == pytest.approx([g[0].log_prob for g in greedy], abs=1e-4)
    for hyps in wide:  # of equal hypotheses, the one with lower tokens ranks first
        for a, b in itertools.pairwise(hyps):
            assert a.score > b.score or (a.score == b.score and a.tokens < b.tokens)


def test_exhaustive_beam_finds_the_brute_force_best() -> None:
    # vocab 7: pad, bos, eos, unk + 3 real tokens; source of 2 tokens + offset 1 -> at most 3 output tokens (40 outputs)
    model = tiny_model(23, vocab=7, sharpen=3.0)
    source, offset, alpha = [4, 5], 1, 0.6
    expected = brute_force(model, source, max_len=len(source) + offset, alpha=alpha)
    assert len(expected) == 1 + 3 + 9 + 27
    ranked = sorted(expected.items(), key=lambda kv: kv[1], reverse=True)
    assert ranked[0][1] - ranked[1][1] > 0.05  # a clear winner, not a near tie
    assert len(ranked[0][0]) == 3 and len(set(ranked[0][0])) > 1  # and not the trivial empty output
    src, src_mask = make_src([source])
    k = 64  # more beams than outputs: nothing is ever pruned
    (hyps,) = beam_search(model, src, src_mask, beam_size=k, alpha=alpha, max_len_offset=offset, n_best=k)
    assert tuple(hyps[0].tokens) == ranked[0][0]
    assert hyps[0].score == pytest.approx(ranked[0][1], abs=1e-4)
    # Every output was found, each once, with its brute-force score.
    got = {tuple(h.tokens): h.score for h in hyps}
    assert len(got) == len(hyps) == len(expected)
    for seq, score in expected.items():
        assert got[seq] == pytest.approx(score, abs=1e-4), seq
    for h in hyps:
        assert h.score == pytest.approx(h.log_prob / lp(len(h.tokens) + 1, alpha), abs=1e-5)


def test_length_penalty_prefers_longer_outputs_as_alpha_grows() -> None:
    source, offset, k = [3, 5, 4], 0, 64
    src, src_mask = make_src([source])
    found = None
    for seed in range(30):
        model = tiny_model(100 + seed, vocab=6, sharpen=1.5)
        short = beam_search(model, src, src_mask, beam_size=k, alpha=0.0, max_len_offset=offset)[0][0]
        long = beam_search(model, src, src_mask, beam_size=k, alpha=4.0, max_len_offset=offset)[0][0]
        if len(short.tokens) != len(long.tokens):
            found = seed, model, short, long
            break
    assert found is not None, "alpha never changed the chosen length: the length penalty has no effect"
    seed, model, short, long = found
    assert len(long.tokens) > len(short.tokens), f"seed {seed}: a larger alpha chose a shorter output"
    for alpha, hyp in ((0.0, short), (4.0, long)):
        expected = brute_force(model, source, max_len=len(source) + offset, alpha=alpha)
        best = max(expected, key=expected.get)
        assert tuple(hyp.tokens) == best
        assert hyp.score == pytest.approx(expected[best], abs=1e-4)


def test_n_best_sorted_distinct_and_bounded() -> None:
    model = tiny_model(3, sharpen=1.5)
    src, src_mask = make_src(random_sequences([5, 3], 13, seed=4))
    results = beam_search(model, src, src_mask, beam_size=5, alpha=0.6, max_len_offset=4, n_best=3)
    for hyps in results:
        assert 1 <= len(hyps) <= 3
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in hyps}) == len(hyps)
        assert all(PAD not in h.tokens and BOS not in h.tokens and EOS not in h.tokens for h in hyps)
    single = beam_search(model, src, src_mask, beam_size=5, alpha=0.6, max_len_offset=4, n_best=1)
    assert [r[0].tokens for r in results] == [s[0].tokens for s in single]
    with pytest.raises(ValueError):
        beam_search(model, src, src_mask, beam_size=2, n_best=3)


@pytest.mark.parametrize("greedy", [False, True])
def test_batched_decoding_equals_each_sentence_alone(greedy: bool) -> None:
    model = tiny_model(5, sharpen=2.0)
    sequences = random_sequences([4, 9, 1, 6, 3, 7], 13, seed=6)  # not sorted: batching reorders them
    alone = [translate_ids(model, [s], beam_size=3, max_len_offset=5, greedy=greedy)[0] for s in sequences]
    one_batch = translate_ids(model, sequences, beam_size=3, max_len_offset=5, greedy=greedy)
    # A tiny token budget splits the input into several length-sorted batches.
    many_batches = translate_ids(
        model, sequences, beam_size=3, max_len_offset=5, greedy=greedy, max_tokens=12
    )
    assert len(alone) == len(one_batch) == len(many_batches) == len(sequences)
    for a, b, c in zip(alone, one_batch, many_batches, strict=True):
        assert a[0].tokens == b[0].tokens == c[0].tokens
        assert b[0].score == pytest.approx(a[0].score, abs=1e-4)
    assert len({tuple(a[0].tokens) for a in alone}) > 1  # distinct outputs, so a mix-up would show


def never_ending_model(max_positions: int = 64) -> Transformer:
    """An untrained model whose every next-token distribution is the same and puts EOS last.

    Pre-norm with a zero-gain final LayerNorm makes the decoder output the constant vector `b`; the EOS row
    of the output projection is -b, so EOS gets the lowest logit at every step.
    """
    model = tiny_model(7, vocab=8, norm="pre", max_positions=max_positions)
    with torch.no_grad():
        b = torch.randn(model.config.d_model)
        model.decoder_norm.weight.zero_()
        model.decoder_norm.bias.copy_(b)
        model.generator.weight[EOS] = -b
    return model


def test_output_length_capped_at_source_length_plus_offset() -> None:
    model = never_ending_model()
    sequences = random_sequences([5, 2, 8], 8, seed=8)
    offset = 3
    src, src_mask = make_src(sequences)
    for hyps in (
        greedy_search(model, src, src_mask, max_len_offset=offset),
        beam_search(model, src, src_mask, beam_size=3, max_len_offset=offset),
        translate_ids(model, sequences, beam_size=2, max_len_offset=offset),
        translate_ids(model, sequences, max_len_offset=offset, greedy=True),
    ):
        assert [len(h[0].tokens) for h in hyps] == [len(s) + offset for s in sequences]
    # The cap never lets the output outgrow the position table: BOS + tokens <= max_positions.
    model = never_ending_model(max_positions=16)
    (hyps,) = greedy_search(model, *make_src([[3] * 14]), max_len_offset=3)
    assert len(hyps[0].tokens) == 15


# ---- min_len: no end of sentence before that many output tokens -------------------------------------------


def always_ending_model() -> Transformer:
    """An untrained model whose every next-token distribution puts EOS first (the mirror of never_ending_model)."""
    model = tiny_model(11, vocab=8, norm="pre")
    with torch.no_grad():
        b = torch.randn(model.config.d_model)
        model.decoder_norm.weight.zero_()
        model.decoder_norm.bias.copy_(b)
        model.generator.weight[EOS] = 3 * b
    return model


def test_min_len_holds_off_eos_for_greedy_and_beam() -> None:
    model = always_ending_model()
    sequences = random_sequences([5, 2, 8], 8, seed=9)
    src, src_mask = make_src(sequences)
    # Without a minimum the model ends at once: an empty output.
    assert [len(h[0].tokens) for h in greedy_search(model, src, src_mask)] == [0, 0, 0]
    for min_len in (1, 4):
        for hyps in (
            greedy_search(model, src, src_mask, max_len_offset=10, min_len=min_len),
            beam_search(model, src, src_mask, beam_size=3, max_len_offset=10, min_len=min_len, n_best=3),
            translate_ids(model, sequences, beam_size=2, max_len_offset=10, min_len=min_len),
            translate_ids(model, sequences, max_len_offset=10, min_len=min_len, greedy=True),
        ):
            # EOS is the model's first choice, so each output ends exactly when it may.
            assert all(len(h.tokens) == min_len for sentence in hyps for h in sentence)


def test_min_len_yields_to_the_maximum_length() -> None:
    model = always_ending_model()
    sequences = random_sequences([2, 6], 8, seed=10)
    src, src_mask = make_src(sequences)
    for hyps in (
        greedy_search(model, src, src_mask, max_len_offset=1, min_len=50),
        beam_search(model, src, src_mask, beam_size=2, max_len_offset=1, min_len=50),
    ):
        assert [len(h[0].tokens) for h in hyps] == [3, 7]  # source length + 1: the maximum wins
        # cut there, though the model wants to end at that step: min_len forbade it every step before, so the
        # length limit ended these, not the model (beam search called them "eos", and nothing was said)
        assert [h[0].stopped for h in hyps] == ["max_len", "max_len"]
    for hyps in (greedy_search(model, src, src_mask, max_len_offset=1), beam_search(model, src, src_mask, beam_size=2, max_len_offset=1)):
        assert [h[0].stopped for h in hyps] == ["eos", "eos"]  # without min_len: the model ends them at once


@pytest.mark.parametrize("min_len", [1, 2, 3])
def test_beam_with_min_len_finds_the_brute_force_best_among_long_enough_outputs(min_len: int) -> None:
    model = tiny_model(7, vocab=6, sharpen=3.0)
    source, offset, alpha = [4, 5], 1, 0.6
    expected = {
        seq: score
        for seq, score in brute_force(model, source, max_len=len(source) + offset, alpha=alpha).items()
        if len(seq) >= min_len
    }
    src, src_mask = make_src([source])
    k = 64
    (hyps,) = beam_search(
        model, src, src_mask, beam_size=k, alpha=alpha, max_len_offset=offset, n_best=k, min_len=min_len
    )
    best = max(expected, key=expected.get)
    assert tuple(hyps[0].tokens) == best
    assert hyps[0].score == pytest.approx(expected[best], abs=1e-4)
    got = {tuple(h.tokens): h.score for h in hyps}
    assert set(got) == set(expected)  # exactly the outputs of at least min_len tokens, each once
    for seq, score in expected.items():
        assert got[seq] == pytest.approx(score, abs=1e-4), seq


@pytest.mark.parametrize("greedy", [False, True])
def test_search_without_the_cache_gives_the_same_hypotheses(greedy: bool) -> None:
    model = tiny_model(5, sharpen=2.0)
    sequences = random_sequences([4, 9, 1, 6, 3, 7], 13, seed=6)
    cached = translate_ids(model, sequences, beam_size=3, n_best=1 if greedy else 3, max_len_offset=5, greedy=greedy)
    recomputed = translate_ids(
        model, sequences, beam_size=3, n_best=1 if greedy else 3, max_len_offset=5, greedy=greedy, use_cache=False
    )
    for a, b in zip(cached, recomputed, strict=True):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)
    assert len({tuple(a[0].tokens) for a in cached}) > 1


def test_an_empty_batch_gives_no_hypotheses() -> None:
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=20, d_model=8, d_ff=16, n_heads=2, n_enc_layers=1, n_dec_layers=1)).eval()
    src = torch.zeros(0, 3, dtype=torch.long)
    mask = torch.zeros(0, 1, 1, 3, dtype=torch.bool)
    assert beam_search(model, src, mask) == [] and greedy_search(model, src, mask) == []


@pytest.mark.parametrize(("settings", "said"), [
    (dict(beam_size=0), "beam_size >= 1"),
    (dict(beam_size=2, n_best=3), "n_best <= beam_size"),
    (dict(max_tokens=0), "max_tokens >= 1"),
])
def test_translate_ids_refuses_settings_that_cannot_search(settings: dict, said: str) -> None:
    """Said before any batch is cut (beam_size 0 once divided the batch budget by zero)."""
    model = tiny_model(0)
    with pytest.raises(ValueError, match=said):
        translate_ids(model, [[4, 5, 6]], **settings)


class _MarkovEngine:
    """An engine whose next token depends only on the last one (a table of log-probabilities): a peaked model
    with one confident path and weak first tokens that end at once, written out so the right answer is known."""

    class State:
        def reorder(self, index: torch.Tensor) -> None:
            pass

        select = reorder

    def __init__(self, table: torch.Tensor) -> None:
        self.table = table  # (V, V) log-probabilities of the next token given the last
        self.config = ModelConfig(vocab_size=table.size(0), d_model=8, n_heads=2, d_ff=8, n_enc_layers=1, n_dec_layers=1, max_positions=64)
        self.device = torch.device("cpu")

    def start(self, src: torch.Tensor, src_mask: torch.Tensor) -> State:
        return self.State()

    def step(self, last: torch.Tensor, state: State) -> torch.Tensor:
        return self.table[last]


def test_a_confident_path_is_not_lost_to_weak_beams_that_end_first() -> None:
    """Beam 4 stopped a sentence at its first 4 finished hypotheses (fairseq's rule): the weak first tokens end at
    once and filled them while the confident path, far better, was still live, and was thrown away (a copy task's
    beam output scored BLEU 95 where greedy scored 99). Finished ones now must also beat the best live beam."""
    V, good = 15, [4, 5, 6, 7, 8, 9]  # pad, bos, eos, unk; the confident path 4..9 then EOS; weak tokens 10..14
    table = torch.full((V, V), -12.0)
    table[BOS, good[0]] = -0.05
    table[BOS, 10:] = -3.5  # weak first tokens ...
    for a, b in zip(good, [*good[1:], EOS], strict=True):
        table[a, b] = -0.02
        table[a, EOS] = max(float(table[a, EOS]), -6.0)  # ending early is unlikely, and likelier than the rest
    table[10:, EOS] = -0.1  # ... that end at once
    table = table.log_softmax(dim=-1)
    src, src_mask = make_src([[4, 5, 6]])
    for alpha in (0.0, 0.6):
        greedy = greedy_search(_MarkovEngine(table), src, src_mask, max_len_offset=10)[0][0]
        (hyps,) = beam_search(_MarkovEngine(table), src, src_mask, beam_size=4, alpha=alpha, max_len_offset=10, n_best=4)
        assert greedy.tokens == good and hyps[0].tokens == good, (alpha, hyps[0].tokens)
        assert hyps[0].score >= max(h.score for h in hyps) and len(hyps) == 4
        assert hyps[0].log_prob == pytest.approx(float(table[BOS, 4] + sum(table[a, b] for a, b in zip(good, [*good[1:], EOS], strict=True))), abs=1e-5)


def _constant_model(favourite: int, eos_weight: float, vocab: int = 13, max_positions: int = 64) -> Transformer:
    """A model whose next-token distribution is the same at every step: `favourite` first, then EOS (its output row
    scaled by `eos_weight` < 3), then the rest; a pre-norm decoder whose final LayerNorm outputs a constant b."""
    model = tiny_model(1, vocab=vocab, norm="pre", max_positions=max_positions)
    with torch.no_grad():
        b = torch.randn(model.config.d_model)
        model.decoder_norm.weight.zero_()
        model.decoder_norm.bias.copy_(b)
        model.generator.weight[favourite] = 3 * b
        model.generator.weight[EOS] = eos_weight * b
    return model


def _every_search(model: Transformer, sequences: list[list[int]], offset: int) -> dict[str, list[Hypothesis]]:
    """The best hypothesis of each sentence from greedy, beam 1, beam 3 (n-best 3), cached and recomputed."""
    src, src_mask = make_src(sequences)
    out: dict[str, list[Hypothesis]] = {}
    for use_cache in (True, False):
        out[f"greedy {use_cache}"] = [h[0] for h in greedy_search(model, src, src_mask, max_len_offset=offset, use_cache=use_cache)]
        out[f"beam1 {use_cache}"] = [h[0] for h in beam_search(model, src, src_mask, beam_size=1, alpha=0.0, max_len_offset=offset, use_cache=use_cache)]
        beams = beam_search(model, src, src_mask, beam_size=3, max_len_offset=offset, n_best=3, use_cache=use_cache)
        out[f"beam3 {use_cache}"] = [h for hyps in beams for h in hyps]
        out[f"ids {use_cache}"] = [h[0] for h in translate_ids(model, sequences, max_len_offset=offset, greedy=True, use_cache=use_cache)]
    return out


def test_unk_is_never_an_output() -> None:
    """A model whose first choice was <unk> at every step translated every sentence to "<unk><unk>..." up to the
    length limit: <unk> reached the user's text. tfm's tokenizer never produces it (byte fallback), so it means
    nothing in a translation; the search now forbids it, as it forbids <pad> and <s> (Marian without --allow-unk,
    CTranslate2's disable_unk), and the model's next choice (here: the end of sentence) wins."""
    model = _constant_model(UNK, eos_weight=2.9)
    for name, hyps in _every_search(model, [[4, 5, 6], [7, 8]], offset=4).items():
        assert all(UNK not in h.tokens for h in hyps), name
        best = hyps[:: len(hyps) // 2]  # each sentence's best (beam 3 gives its 3 best)
        assert all(h.tokens == [] and h.stopped == "eos" for h in best), name
    assert banned_ids(model.config) == [PAD, BOS, UNK] and UNK_ID == Tokenizer.unk_id  # the tokenizer's layout
    # a model whose special ids sit elsewhere (EOS at 3) keeps its EOS: only an id 3 that is none of them is <unk>
    assert banned_ids(ModelConfig(vocab_size=13, eos_id=3, bos_id=1, pad_id=0)) == [PAD, BOS]
    assert banned_ids(ModelConfig(vocab_size=3)) == [PAD, BOS]


def test_stopped_says_whether_the_model_ended_it_or_the_length_limit_did() -> None:
    """A translation cut at the maximum output length looked like one the model ended (--json, the API): the
    hypothesis now says `stopped`: "max_len" when it has its maximum length (source length + offset, or the
    model's position limit) and its end of sentence was forced, "eos" when the model ended it."""
    sequences, offset = [[4, 5, 6], [7, 8], [9]], 4
    runs_on = _constant_model(5, eos_weight=2.9)  # token 5, token 5, ...: never ends by itself
    for name, hyps in _every_search(runs_on, sequences, offset).items():
        per_sentence = len(hyps) // len(sequences)
        for i, h in enumerate(hyps):
            limit = len(sequences[i // per_sentence]) + offset
            if h.stopped == "max_len":
                assert len(h.tokens) == limit, name
            else:
                assert h.stopped == "eos" and len(h.tokens) < limit, name
        assert [h.stopped for h in hyps[::per_sentence]] == ["max_len"] * len(sequences), name
        assert [h.tokens for h in hyps[::per_sentence]] == [[5] * (len(s) + offset) for s in sequences], name
    # the model's position limit is a maximum length too
    short = _constant_model(5, eos_weight=2.9, max_positions=6)
    (hyp,), = greedy_search(short, *make_src([[4, 5, 6]]), max_len_offset=50)
    assert hyp.stopped == "max_len" and len(hyp.tokens) == 5
    ends = _constant_model(5, eos_weight=3.1)  # the end of sentence first: empty translations, ended by the model
    for name, hyps in _every_search(ends, sequences, offset).items():
        assert hyps[0].tokens == [] and hyps[0].stopped == "eos", name
    # a trained-like model that ends some sentences and runs on in others: both kinds in one batch, each its own
    model = tiny_model(3, sharpen=2.0)
    src_seqs = random_sequences([2, 5, 3, 7, 1, 4], 13, seed=1)
    results = _every_search(model, src_seqs, offset=2)
    greedy = [(h.tokens, h.stopped) for h in results["greedy True"]]
    assert greedy == [(h.tokens, h.stopped) for h in results["beam1 True"]] == [(h.tokens, h.stopped) for h in results["greedy False"]]
    for h, s in zip(results["greedy True"], src_seqs, strict=True):  # cut only at the limit (where EOS may be the
        assert h.stopped == "eos" or len(h.tokens) == len(s) + 2  # model's own choice: the next test)


def test_an_end_the_model_chose_at_the_length_limit_is_not_a_cut() -> None:
    """A translation whose natural length was exactly the limit was reported "max_len" (and `tfm translate` warned
    it was cut, likely incomplete) although the end of sentence forced there was the model's own first choice: the
    same tokens and log-probability as without the limit. Only an end forced against the model's choice is a cut."""
    V, path = 12, [4, 5, 6, 7, 8, 9]  # the model's sure path: these 6 tokens, then EOS
    table = torch.full((V, V), -9.0)
    for a, b in zip([BOS, *path], [*path, EOS], strict=True):
        table[a, b] = -0.01
    table = table.log_softmax(dim=-1)
    src, src_mask = make_src([[4, 5, 6]])  # limit = 3 + offset
    for offset, stopped, tokens in ((10, "eos", path), (3, "eos", path), (2, "max_len", path[:5])):
        found = [greedy_search(_MarkovEngine(table), src, src_mask, max_len_offset=offset)[0][0]]
        found += beam_search(_MarkovEngine(table), src, src_mask, beam_size=3, max_len_offset=offset, n_best=1)[0]
        for h in found:
            assert (h.tokens, h.stopped) == (tokens, stopped), (offset, h)
    unlimited = greedy_search(_MarkovEngine(table), src, src_mask, max_len_offset=10)[0][0]
    at_limit = greedy_search(_MarkovEngine(table), src, src_mask, max_len_offset=3)[0][0]
    assert at_limit.log_prob == unlimited.log_prob  # nothing was forced



def test_a_live_beam_that_a_few_sure_tokens_would_make_best_is_not_dropped() -> None:
    """With alpha > 0 a live beam's score can still rise: each near-certain token costs almost no log-probability
    and lengthens ((5 + |Y|) / 6)^alpha. Beam 2 stopped once its two finished hypotheses beat the best live beam
    scored at its present length (Hugging Face's early_stopping=False) and returned [14] (score -0.90), dropping the
    live beam that ten sure tokens later scores -0.77: the search stops only when no live beam can still rank among
    the finished ones at any length it may reach (tensor2tensor's bound)."""
    V, good = 16, list(range(4, 14))  # pad, bos, eos, unk; a confident path of ten tokens; 14 ends at once
    table = torch.full((V, V), -12.0)
    table[BOS, good[0]], table[BOS, 14], table[BOS, EOS] = -1.9, -1.5, -1.5
    for a, b in zip(good, [*good[1:], EOS], strict=True):
        table[a, b] = 0.0
    table[14, EOS] = 0.0
    table = table.log_softmax(dim=-1)
    src, src_mask = make_src([[3, 4, 5]])
    path = [BOS, *good, EOS]
    expected = float(sum(table[a, b] for a, b in itertools.pairwise(path)))
    (hyps,) = beam_search(_MarkovEngine(table), src, src_mask, beam_size=2, alpha=0.6, max_len_offset=10, n_best=2)
    assert hyps[0].tokens == good, [(h.tokens, h.score) for h in hyps]
    assert hyps[0].score == pytest.approx(expected / lp(len(good) + 1, 0.6), abs=1e-5)
    assert hyps[0].score > hyps[1].score
    # alpha 0: log-probabilities only fall, so the present length already bounds a live beam: a short one wins
    (hyps0,) = beam_search(_MarkovEngine(table), src, src_mask, beam_size=2, alpha=0.0, max_len_offset=10, n_best=2)
    assert hyps0[0].tokens in ([], [14]) and hyps0[0].log_prob > expected


def test_length_sorted_batches_keep_short_and_long_apart() -> None:
    lengths = [200, 129, 128, 5, 130, 128]
    assert length_sorted_batches(lengths, 10**6) == [[0, 4, 1, 2, 5, 3]]
    assert length_sorted_batches(lengths, 10**6, apart=128) == [[0, 4, 1], [2, 5, 3]]
    assert length_sorted_batches(lengths, 400, apart=128) == [[0, 4], [1], [2, 5, 3]]


def test_a_short_sentence_is_never_batched_with_one_past_the_cpu_attention_switch() -> None:
    """On CPU in bf16, attention over at most CPU_SHORT_KEYS keys runs the explicit fp32 formula, over more SDPA's
    kernel. The padded width of a batch decided it for all its sentences: beside one long line, 14 of 300 bf16
    beam translations of a quickstart model changed. Now the short sentences are decoded as they would be
    without the long one, to the last bit."""
    model = tiny_model(5, sharpen=2.0, max_positions=CPU_SHORT_KEYS + 40)
    short = random_sequences([4, 9, 1, 6, 30], 13, seed=6)
    long = random_sequences([CPU_SHORT_KEYS + 10], 13, seed=7)
    bf16 = functools.partial(torch.autocast, "cpu", dtype=torch.bfloat16)
    for greedy in (False, True):
        kw = dict(beam_size=3, max_len_offset=5, greedy=greedy, autocast=bf16)
        alone = translate_ids(model, short, **kw)
        beside = translate_ids(model, [*short[:2], *long, *short[2:]], **kw)
        assert [h[0].score for h in alone] == [h[0].score for h in beside[:2] + beside[3:]]
        assert [h[0].tokens for h in alone] == [h[0].tokens for h in beside[:2] + beside[3:]]


# --- The GPU's way of searching (`host_reads_are_free` False): no more than one read of the device a step --------

_READS = {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero", "masked_select", "unique", "cpu",
          "numpy", "argwhere", "bincount", "equal", "is_nonzero", "unique_consecutive"}


class _DeviceReads(TorchFunctionMode):
    """Counts the calls that read a device tensor into Python, or ask it a size only its values give: on a GPU each
    waits for it (a host synchronisation). Calls of the engine's `step` split the count into steps (`marks`)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []
        self.marks: list[int] = []  # len(reads) when each step began

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        index = args[1] if name in ("__getitem__", "__setitem__") and len(args) > 1 else None
        parts = index if isinstance(index, tuple) else (index,)
        if name in _READS or any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts):
            self.reads.append(name)  # (a boolean index asks how many rows it names)
        elif name == "repeat_interleave" and isinstance(args[1] if len(args) > 1 else None, torch.Tensor) and (
            kwargs.get("output_size") is None
        ):
            self.reads.append(name)  # repeats as a tensor: the output's size is its sum, unless given
        elif name == "where" and len(args) + len(kwargs) == 1:
            self.reads.append(name)  # torch.where(mask): nonzero
        elif name in ("to", "copy_") and any(str(a) == "cpu" for a in [*args[1:], kwargs.get("device")]):
            self.reads.append(name)  # a copy to the host (on the CPU itself, counted as one too)
        return func(*args, **kwargs)

    def per_step(self) -> list[int]:
        """Reads between the start of each step and the start of the next (the last: to the end of the search)."""
        ends = [*self.marks[1:], len(self.reads)]
        return [end - start for start, end in zip(self.marks, ends, strict=True)]


def _searches() -> dict[str, Callable[[Transformer, torch.Tensor, torch.Tensor], list[list[Hypothesis]]]]:
    """Every search, with settings that reach each of its branches: the length limit, min_len, n-best, ties."""
    return {
        "greedy": lambda m, s, k: greedy_search(m, s, k, max_len_offset=3, min_len=2),
        "beam": lambda m, s, k: beam_search(m, s, k, beam_size=4, n_best=3, max_len_offset=3, min_len=2),
        "beam1": lambda m, s, k: beam_search(m, s, k, beam_size=1, max_len_offset=6),
        "sample": lambda m, s, k: sample_search(m, s, k, Sampling(top_k=5, seed=3), n=2, max_len_offset=4, min_len=1),
        "top-p": lambda m, s, k: sample_search(m, s, k, Sampling(top_p=0.9, temperature=1.5, seed=4), n=2, max_len_offset=4),
        "beam-wide": lambda m, s, k: beam_search(m, s, k, beam_size=8, n_best=8, max_len_offset=2),  # 2K > a small V
    }


@pytest.mark.parametrize("search", list(_searches()))
def test_a_search_reads_the_device_once_a_step_the_gpu_way(search: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU each read of a value into Python waits for the GPU, which then idles while Python queues the next
    step: the searches read once a step (which rows ended, and whether the scores were numbers; nothing inside the
    model's step), where they had asked up to 6 questions a step. Counted on the CPU, the GPU's way forced: the
    same hypotheses as the CPU's way, which asks more (its reads cost nothing there, and save work). (A vocabulary
    over top-p's first ranks, TOP_P_FIRST: top-p sampling asked which rows to sort whole, twice a step.)"""
    model = tiny_model(4, vocab=decoding.TOP_P_FIRST + 36, sharpen=2.0)
    src, src_mask = make_src(random_sequences([5, 7, 9, 4, 6, 8, 3], 20, seed=2))
    found, counts = {}, {}
    for gpu_way in (False, True):
        monkeypatch.setattr(decoding, "host_reads_are_free", lambda device, free=not gpu_way: free)
        engine = decoding.as_engine(model)
        counter = _DeviceReads()
        real_step = engine.step

        def step(last: torch.Tensor, state, counter=counter, real_step=real_step) -> torch.Tensor:  # noqa: ANN001
            counter.marks.append(len(counter.reads))
            before = len(counter.reads)
            logits = real_step(last, state)
            assert len(counter.reads) == before, counter.reads[before:]  # the model's step reads nothing
            return logits

        monkeypatch.setattr(engine, "step", step)
        with counter:
            found[gpu_way] = _searches()[search](engine, src, src_mask)
        counts[gpu_way] = counter.per_step()
    assert found[True] == found[False]
    assert len(counts[True]) > 5 and max(counts[True][:-1]) == 1  # the last: the step's read, and the books at the end
    if search.startswith("beam"):
        assert max(counts[False]) > 1  # the counter sees the CPU's questions (top_first's ties, who ends)


@pytest.mark.parametrize("bf16", [False, True])
def test_the_gpu_way_gives_every_search_s_hypotheses(bf16: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU's way (no reads but one a step) and the CPU's give the same hypotheses, scores and stops, on models
    whose searches hit the length limit, min_len, exact ties (bf16) and sentences that end at different steps."""
    sequences = random_sequences([3, 9, 5, 12, 1, 7, 4, 10], 8, seed=5)  # (8: the smallest vocabulary below)
    src, src_mask = make_src(sequences)
    models = [tiny_model(seed, sharpen=sharpen) for seed, sharpen in [(0, 1.0), (1, 3.0), (2, 6.0)]]
    models += [never_ending_model(), always_ending_model(), _constant_model(UNK, eos_weight=2.9)]
    models += [tiny_model(3, vocab=decoding.TOP_P_FIRST + 36, sharpen=1.5)]  # top-p's two tiers on the CPU
    for model, use_cache in itertools.product(models, (True, False)):
        found = {}
        for gpu_way in (False, True):
            monkeypatch.setattr(decoding, "host_reads_are_free", lambda device, free=not gpu_way: free)
            engine = decoding.as_engine(model, use_cache)
            with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
                found[gpu_way] = {name: search(engine, src, src_mask) for name, search in _searches().items()}
                found[gpu_way]["ids"] = translate_ids(engine, sequences, beam_size=3, n_best=2, max_len_offset=2)
        assert found[True] == found[False]


def test_top_first_by_key_takes_what_top_first_takes() -> None:
    """The GPU's top-n (one `topk` of keys that never tie) against the CPU's (`topk`, then whole sorts where equal
    scores straddle the n-th place) and a stable sort of every row: the same scores and columns, best first, the lower
    column first among equal scores, on rows full of ties, -inf, 0.0 and -0.0."""
    generator = torch.Generator().manual_seed(0)
    rows = torch.randint(-6, 1, (300, 40), generator=generator).float() / 4  # few distinct values: ties everywhere
    rows[::7, 5:] = float("-inf")  # rows with fewer finite scores than asked for
    rows[::5, ::3] = -0.0
    rows[1::5] = torch.randn(60, 40, generator=generator)  # rows without ties
    for n in (1, 3, 8, 40):
        by_key, asked = decoding._top_first_by_key(rows, n), decoding.top_first(rows, n)
        sorted_values, sorted_index = rows.sort(dim=1, descending=True, stable=True)
        assert torch.equal(by_key[0], asked[0]) and torch.equal(by_key[0], sorted_values[:, :n])
        finite = sorted_values[:, :n].isfinite()  # (which of equal -inf columns the CPU's way takes is not defined)
        assert torch.equal(by_key[1][finite], asked[1][finite])
        assert torch.equal(by_key[1], sorted_index[:, :n])  # the key's order is the stable sort's, -inf included


class _NoEndEngine:
    """A model's engine whose EOS logit is -inf at every step (which finite weights never give)."""

    def __init__(self, model: Transformer) -> None:
        self.engine = decoding.as_engine(model)
        self.config, self.device = self.engine.config, self.engine.device

    def start(self, src: torch.Tensor, src_mask: torch.Tensor):  # noqa: ANN201
        return self.engine.start(src, src_mask)

    def step(self, last: torch.Tensor, state) -> torch.Tensor:  # noqa: ANN001
        logits = self.engine.step(last, state).clone()
        logits[:, EOS] = float("-inf")
        return logits


def test_a_nan_or_infinite_score_is_refused_the_gpu_way_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check is read with the step's other question on a GPU: the search still stops with NonFiniteOutput. An
    EOS of -inf let no row end even at its length limit: greedy search and sampling ran past their last slot
    (IndexError), beam search returned no hypothesis at all."""
    nan = tiny_model(0)
    with torch.no_grad():
        nan.generator.weight[5, 0] = float("nan")
    src, src_mask = make_src([[4, 5, 6], [7, 8]])
    for gpu_way in (False, True):
        monkeypatch.setattr(decoding, "host_reads_are_free", lambda device, free=not gpu_way: free)
        for model in (nan, _NoEndEngine(tiny_model(1))):
            for search in _searches().values():
                with pytest.raises(decoding.NonFiniteOutput, match=r"not finite numbers \(NaN or infinite\)"):
                    search(model, src, src_mask)


def test_rows_are_split_in_order() -> None:
    """`_split_rows` (the GPU's `nonzero`) keeps each part in row order: an unstable sort reorders equal keys (on the
    CPU too, from a hundred rows), which would give the surviving beams and rows to the wrong sentences."""
    for n in (1, 7, 100, 5000):
        mask = torch.rand(n, generator=torch.Generator().manual_seed(n)) < 0.3
        keep, gone = decoding._split_rows(mask, int(mask.sum()))
        assert torch.equal(keep, (~mask).nonzero().squeeze(1)) and torch.equal(gone, mask.nonzero().squeeze(1))
