"""Sampling (`--sample`, `sample=True`): the draws follow the model's distribution (against its softmax and against
teacher-forced log-probabilities), temperature, top-k and top-p cut it as defined, the draws of a sentence do not
depend on its batch, and the settings' combinations are refused as the search's are."""

from __future__ import annotations

import collections
import math

import pytest
import test_translator
import torch
from clitools import tfm
from test_decoding import BOS, EOS, make_src, random_sequences, tiny_model

from tfm_cli import DecodeSettings, TfmError, Translator
from tfm_cli.decoding import (
    Sampling,
    banned_ids,
    greedy_search,
    race,
    sample_search,
    sampling_probs,
    stream_key,
    translate_ids,
)
from tfm_cli.model.masks import causal_mask


def test_stream_keys() -> None:
    assert len({stream_key(0, i, j) for i in range(100) for j in range(10)}) == 1000
    assert stream_key(1, 23) != stream_key(12, 3)  # the values are kept apart
    assert stream_key(5, 2**70) == stream_key(5, 2**70) < 2**64
    with pytest.raises(ValueError, match="non-negative"):
        stream_key(-1)


def test_sampling_probs_cut_as_defined() -> None:
    p = torch.tensor([[0.05, 0.5, 0.15, 0.3]], dtype=torch.float64)
    log_probs = p.log().float()

    def probs(**kw) -> list[float]:
        q = sampling_probs(log_probs, Sampling(**kw))[0]
        return (q / q.sum()).tolist()

    assert probs() == pytest.approx(p[0].tolist(), abs=1e-6)
    assert probs(top_k=2) == pytest.approx([0, 0.5 / 0.8, 0, 0.3 / 0.8], abs=1e-6)
    assert probs(top_k=1) == pytest.approx([0, 1, 0, 0])
    assert probs(top_p=0.79) == pytest.approx([0, 0.5 / 0.8, 0, 0.3 / 0.8], abs=1e-6)  # 0.5 < 0.79: 0.3 too
    assert probs(top_p=0.81) == pytest.approx([0, 0.5 / 0.95, 0.15 / 0.95, 0.3 / 0.95], abs=1e-6)
    assert probs(top_p=0.4) == pytest.approx([0, 1, 0, 0])  # the most probable is always kept
    root = p[0].sqrt() / p[0].sqrt().sum()  # temperature 2: softmax(log p / 2) is proportional to sqrt(p)
    assert probs(temperature=2.0) == pytest.approx(root.tolist(), abs=1e-6)
    # temperature first, then top-k, then top-p: at temperature 2 the top two hold 0.63 of the mass, below 0.7
    hot = root.tolist()
    assert probs(temperature=2.0, top_p=0.7) == pytest.approx(
        [0, hot[1] / (hot[1] + hot[3] + hot[2]), hot[2] / (hot[1] + hot[3] + hot[2]), hot[3] / (hot[1] + hot[3] + hot[2])], abs=1e-6
    )
    # extreme temperatures: a one-hot row and a flat one (fp32 division made every logit -inf or NaN)
    assert probs(temperature=1e-300) == pytest.approx([0, 1, 0, 0])
    assert probs(temperature=1e300) == pytest.approx([0.25] * 4)
    banned = log_probs.clone()
    banned[0, 1] = float("-inf")  # a token the search may not output is never kept
    assert sampling_probs(banned, Sampling(top_k=3))[0, 1] == 0


@pytest.mark.parametrize("spread", [0.5, 3.0, 8.0])
def test_the_nucleus_is_the_one_of_the_whole_sorted_vocabulary(spread: float) -> None:
    """Top-p ranks the first 64, then 1,024 tokens, and sorts a row whole only where those fall short: the same
    nucleus as sorting every row whole (flat rows, peaked rows, and tied probabilities)."""
    torch.manual_seed(1)
    logits = torch.randn(40, 3000) * spread
    logits[:5, :200] = logits[:5, :1]  # ties, straddling any cut
    log_probs = logits.log_softmax(-1)
    for top_p in (0.3, 0.9, 0.999):
        probs = log_probs.softmax(-1)
        ranked, order = probs.sort(dim=-1, descending=True, stable=True)
        ranked = ranked.masked_fill(ranked.cumsum(-1) - ranked >= top_p, 0.0)
        want = torch.zeros_like(probs).scatter_(-1, order, ranked)
        got = sampling_probs(log_probs, Sampling(top_p=top_p))
        assert torch.equal(got > 0, want > 0)
        assert torch.allclose(got, want, rtol=0, atol=1e-7)


def test_the_race_draws_each_token_by_its_probability() -> None:
    probs = torch.tensor([0.0, 0.25, 0.0, 0.5, 0.125, 0.125], dtype=torch.float64) * 3  # (not normalised)
    n = 40000
    noise = torch.rand(n, 6, generator=torch.Generator().manual_seed(0))
    counts = collections.Counter(race(probs.expand(n, -1).clone(), noise).tolist())
    assert set(counts) == {1, 3, 4, 5}  # a token of probability 0 never wins
    for token, p in ((1, 0.25), (3, 0.5), (4, 0.125), (5, 0.125)):
        assert abs(counts[token] / n - p) < 4.5 * math.sqrt(p * (1 - p) / n)
    # a number of 0 (its exponential infinite) loses for a token that must win: the end forced at the limit
    forced = torch.tensor([[0.0, 0.0, 1.0, 0.0]], dtype=torch.float64)
    assert race(forced, torch.zeros(1, 4)).tolist() == [2]


def _teacher_forced(model, source: list[int], tokens: list[int]) -> float:
    """log P of `tokens` then EOS (the model's own EOS log-probability where the length limit forced it, as the
    searches count it), with no cache."""
    src, src_mask = make_src([source])
    memory = model.encode(src, src_mask)
    inp = torch.tensor([[BOS, *tokens]])
    logits = model.decode(inp, memory, src_mask, causal_mask(len(tokens) + 1))[0].float()
    log_probs = logits.log_softmax(-1)
    out = [*tokens, EOS]
    picked = log_probs[torch.arange(len(out)), torch.tensor(out)]
    return float(picked.sum())


@torch.no_grad()
def test_samples_follow_the_model_s_distribution_and_are_scored_by_it() -> None:
    model = tiny_model(4, vocab=13, sharpen=1.5)
    source = [5, 6, 7, 8]
    src, src_mask = make_src([source])
    n = 6000
    hyps = sample_search(model, src, src_mask, Sampling(seed=11), n=n, max_len_offset=3)[0]
    assert len(hyps) == n
    # the first token's frequencies against the model's softmax over the tokens a search may output
    memory = model.encode(src, src_mask)
    first = model.decode(torch.tensor([[BOS]]), memory, src_mask, causal_mask(1))[0, 0].float().log_softmax(-1)
    first[banned_ids(model.config)] = float("-inf")
    p = first.exp() / first.exp().sum()  # drawn among the tokens the search may output (6.6% of the mass is not)
    counts = collections.Counter(h.tokens[0] if h.tokens else EOS for h in hyps)
    for token in range(model.config.vocab_size):
        expected = float(p[token])
        sigma = math.sqrt(max(expected * (1 - expected), 1e-9) / n)
        assert abs(counts[token] / n - expected) < 4.5 * sigma + 1e-3, (token, counts[token] / n, expected)
    assert len(counts) >= 6  # a distribution, not one choice
    # each sample's log-probability is the model's, by teacher forcing
    for h in hyps[:40]:
        assert h.log_prob == pytest.approx(_teacher_forced(model, source, h.tokens), abs=1e-4)
        assert h.score == h.log_prob
    assert {h.stopped for h in hyps} == {"eos", "max_len"}
    assert max(len(h.tokens) for h in hyps) == len(source) + 3  # input tokens + max_len_offset, then EOS is forced


def test_top_k_one_and_a_cold_temperature_are_greedy_search() -> None:
    model = tiny_model(0, sharpen=2.0)
    sequences = random_sequences([6, 2, 9, 4], 13, seed=1)
    src, src_mask = make_src(sequences)
    greedy = [g[0].tokens for g in greedy_search(model, src, src_mask, max_len_offset=6)]
    for sampling in (Sampling(top_k=1, seed=3), Sampling(temperature=1e-3, seed=4), Sampling(top_p=1e-6, seed=5)):
        drawn = sample_search(model, src, src_mask, sampling, n=3, max_len_offset=6)
        assert [[h.tokens for h in hyps] for hyps in drawn] == [[g] * 3 for g in greedy]


def test_a_sentence_s_samples_do_not_depend_on_its_batch() -> None:
    model = tiny_model(2, vocab=13, sharpen=1.0)
    sequences = random_sequences([6, 2, 9, 4, 7, 3], 13, seed=3)
    keys = [40, 41, 42, 43, 44, 45]
    sampling = Sampling(seed=9)
    together = translate_ids(model, sequences, n_best=4, sampling=sampling, keys=keys, max_len_offset=5)
    alone = [translate_ids(model, [s], n_best=4, sampling=sampling, keys=[k], max_len_offset=5)[0] for s, k in zip(sequences, keys, strict=True)]
    finished: list[int] = []  # a sentence's 4 samples take two or more batches of at most 20 tokens
    small = translate_ids(
        model, sequences, n_best=4, sampling=sampling, keys=keys, max_len_offset=5, max_tokens=20, on_batch=finished.append
    )
    assert sum(finished) == 6 and len(finished) >= 6
    want = [[h.tokens for h in hyps] for hyps in together]
    assert [[h.tokens for h in hyps] for hyps in alone] == want
    assert [[h.tokens for h in hyps] for hyps in small] == want
    assert len({tuple(t) for hyps in want for t in hyps}) > 12  # varied samples, not one translation
    # another seed, or another key, draws otherwise; the same ones draw the same again
    other = translate_ids(model, sequences, n_best=4, sampling=Sampling(seed=10), keys=keys, max_len_offset=5)
    assert [[h.tokens for h in hyps] for hyps in other] != want
    moved = translate_ids(model, sequences, n_best=4, sampling=sampling, keys=[k + 1 for k in keys], max_len_offset=5)
    assert [[h.tokens for h in hyps] for hyps in moved] != want
    again = translate_ids(model, sequences, n_best=4, sampling=sampling, keys=keys, max_len_offset=5)
    assert [[h.tokens for h in hyps] for hyps in again] == want


def test_min_len_holds_for_samples() -> None:
    model = tiny_model(1, vocab=13)
    src, src_mask = make_src(random_sequences([3, 5], 13, seed=4))
    for hyps in sample_search(model, src, src_mask, Sampling(seed=2), n=50, min_len=4, max_len_offset=8):
        assert all(len(h.tokens) >= 4 for h in hyps)


def test_sampling_settings_are_checked() -> None:
    for bad in (dict(top_k=-1), dict(top_k=2.0), dict(top_p=0), dict(top_p=1.5), dict(temperature=0),
                dict(temperature=float("nan")), dict(seed=-1), dict(seed=2**64), dict(top_k=True)):
        with pytest.raises(ValueError):
            Sampling(**bad)


# ---- the Translator and the command line ---------------------------------------------------------------------


parts, translator = test_translator.parts, test_translator.translator  # its fixtures: a tokenizer and random model


LINES = ["Bonjour.", "Je suis là.", "", "Merci beaucoup. Il fait beau.", "123", "Où est la gare ?"]


def test_a_line_s_samples_come_from_its_seed_and_number_whatever_the_batching(translator: Translator) -> None:
    want = translator.translate(LINES, sample=True, seed=3, n_best=3)
    for max_tokens in (4, 1000):
        got = translator.translate(LINES, sample=True, seed=3, n_best=3, max_tokens=max_tokens)
        assert [[t.text for t in r.nbest] for r in got] == [[t.text for t in r.nbest] for r in want]
    streamed = list(translator.translate_stream(LINES, chunk_lines=2, sample=True, seed=3, n_best=3))
    assert [[t.text for t in r.nbest] for r in streamed] == [[t.text for t in r.nbest] for r in want]
    assert translator.translate(LINES[0], sample=True, seed=3, n_best=3).nbest == want[0].nbest  # line 1 both ways
    for r in want:  # best first, by log-probability; an empty line and a number are written as they are
        assert len(r.nbest) == 3 and [t.score for t in r.nbest] == sorted((t.score for t in r.nbest), reverse=True)
    assert [t.text for t in want[2].nbest] == ["", "", ""] and [t.text for t in want[4].nbest] == ["123"] * 3
    split = want[3]  # a line of two sentences: each sample joins one sample of each
    assert all(len(t.sentences) == 2 and t.score == pytest.approx(sum(s.score for s in t.sentences)) for t in split.nbest)
    other = translator.translate(LINES, sample=True, seed=4, n_best=3)
    assert [[t.text for t in r.nbest] for r in other] != [[t.text for t in r.nbest] for r in want]
    samples = {t.text for r in want for t in r.nbest if r.source not in ("", "123")}
    assert len(samples) >= 6  # varied, not the beam's few


def test_sampling_settings_of_the_api(translator: Translator) -> None:
    cases = [
        (dict(sample=True, greedy=True), "two ways"),
        (dict(sample=True, beam=3), "beam=3 has no effect with sample=True"),
        (dict(sample=True, alpha=1.0), "alpha=1.0 has no effect with sample=True"),
        (dict(top_k=5), "top_k=5 has no effect without sample=True"),
        (dict(seed=1), "seed=1 has no effect without sample=True"),
        (dict(sample=True, top_p=0.0), "top_p=0.0 must be above 0"),
        (dict(sample=True, temperature=-1.0), "temperature=-1.0 must be a number above 0"),
        (dict(sample=True, seed=2**64), "seed=18446744073709551616 must be from 0"),
        (dict(sample=True, top_k="5"), "top_k='5' must be an integer"),
        (dict(sample="yes"), "sample='yes' must be True or False"),
    ]
    for settings, message in cases:
        with pytest.raises(TfmError, match=message):
            translator.translate("Bonjour.", **settings)
    # n_best is the number of samples, not bounded by the beam
    assert len(translator.translate("Bonjour.", sample=True, n_best=7).nbest) == 7
    # sampling settings, then a greedy call (the sampling knobs go), and greedy settings, then a sampling call
    sampler = Translator(translator.model, translator.tokenizer, DecodeSettings(sample=True, top_k=5, seed=2, max_len_offset=6))
    assert sampler.translate("Bonjour.").text == translator.translate("Bonjour.", sample=True, top_k=5, seed=2).text
    assert sampler.translate("Bonjour.", greedy=True).text == translator.translate("Bonjour.", greedy=True).text
    assert sampler.translate("Bonjour.", sample=False).text == translator.translate("Bonjour.").text
    for call in (dict(beam=2), dict(beam=2, greedy=False)):
        with pytest.raises(TfmError, match="these settings sample") as error:
            sampler.translate("Bonjour.", **call)
        assert "add sample=False" in error.value.hint
    # a temperature near 0 is greedy search, one near infinity draws from every allowed token alike: no crash
    greedy_text = translator.translate(LINES, greedy=True)
    assert [t.text for t in translator.translate(LINES, sample=True, temperature=1e-300)] == [t.text for t in greedy_text]
    flat = translator.translate("Bonjour.", sample=True, temperature=1e300)
    assert len(flat.tokens) <= len(translator.tokenizer.encode("Bonjour.")) + 6 and flat.stopped in ("eos", "max_len")
    greedy = Translator(translator.model, translator.tokenizer, DecodeSettings(greedy=True, max_len_offset=6))
    assert greedy.translate("Bonjour.", sample=True, seed=2, top_k=5).text == sampler.translate("Bonjour.").text
    with pytest.raises(TfmError, match="top_k=5 has no effect without sample=True"):
        DecodeSettings(top_k=5)


def test_cli_sampling(trained) -> None:
    run = str(trained["dir"])
    lines = "".join(s + "\n" for s in trained["sources"][:30])
    one = tfm("translate", "--model", run, "--sample", "--seed", "5", stdin=lines).stdout
    assert one == tfm("translate", "--model", run, "--sample", "--seed", "5", "--batch-tokens", "30", stdin=lines).stdout
    assert len(one.splitlines()) == 30
    beam = tfm("translate", "--model", run, stdin=lines).stdout
    assert one != beam and one != tfm("translate", "--model", run, "--sample", "--seed", "6", stdin=lines).stdout
    nbest = tfm("translate", "--model", run, "--sample", "--top-k", "10", "-n", "5", stdin=lines).stdout.splitlines()
    assert len(nbest) == 150
    for i in range(30):
        rows = [row.split("\t") for row in nbest[5 * i : 5 * i + 5]]
        assert {r[0] for r in rows} == {str(i + 1)}
        scores = [float(r[1]) for r in rows]
        assert scores == sorted(scores, reverse=True)
    first = tfm("translate", "--model", run, "--sample", "--seed", "5", trained["sources"][0]).stdout
    assert first == one.splitlines()[0] + "\n"  # TEXT is line 1, as the first line of stdin is
    refusals = [
        (["--sample", "--greedy"], "--sample and --greedy are two ways"),
        (["--sample", "--beam", "3"], "drop --beam 3"),
        (["--sample", "--alpha", "1"], "drop --alpha 1"),
        (["--top-k", "5"], "--top-k is for sampling: add --sample"),
        (["--temperature", "0.5"], "--temperature is for sampling"),
        (["--seed", "1"], "--seed is for sampling"),
        (["--sample", "--top-p", "0"], "0 is not above 0 and at most 1"),
        (["--sample", "--temperature", "inf"], "inf is not a number above 0"),
        (["--sample", "--top-p", "1.0000001"], "1.0000001 is not above 0 and at most 1"),
        (["--sample", "--seed", "-2"], "--seed"),
    ]
    for args, message in refusals:
        proc = tfm("translate", "--model", run, *args, "Bonjour.", check=False)
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
