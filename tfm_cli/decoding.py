"""Search over the decoder's K/V cache: greedy and beam search (paper section 6.1), and sampling, batched over
sentences.

The search is written once, against an `Engine` (start a batch, give the next token's logits): the PyTorch
model is one engine, the exported ONNX graphs run by onnxruntime another (tfm_cli/export/onnx.py).

Beam search keeps `beam_size` live hypotheses per sentence, scores finished ones with the GNMT length penalty
lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al., 2016; the paper uses alpha = 0.6), keeps the `beam_size` best finished
ones, and stops a sentence once it holds `beam_size` finished hypotheses and no live beam could still rank among
them at any length up to the sentence's maximum (tensor2tensor's rule: the best live log-probability over lp at the
maximum length), or at its maximum length, source length + 50 by default. Stopping at the first `beam_size`
finished ones (fairseq's rule) let a peaked model's weak beams end first and throw its best, still live,
hypothesis away; scoring the best live beam at its present length (Hugging Face's early_stopping=False) did the
same with alpha > 0, where a few more near-certain tokens raise a score. Finished sentences leave the batch, so the
rest decode faster.

The search never outputs <pad>, <s> or <unk>. tfm's vocabularies put <unk> at id 3 (tokenizer.py) and never
produce it (byte fallback encodes any text), so a model never sees it as a target and it means nothing in a
translation; as Marian (without --allow-unk) and CTranslate2's `disable_unk`, the search gives it -inf. The
exports are told the same (tfm_cli/export/huggingface.py), so they translate as tfm does.

Sampling (`sample_search`) draws each token from the model's distribution instead, for back-translation, where
sampled sources train a better model than beam-searched ones (Edunov et al., 2018, "Understanding Back-Translation
at Scale"); each sample draws from a random generator of its own, seeded by (seed, sentence, sample), not from one
shared by the batch, so that a sentence's samples do not depend on its batch.

Pure torch: no tokenizer, no CLI. Token ids in, token ids out.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from tfm_cli.errors import TfmError
from tfm_cli.model import KVCache, ModelConfig, Transformer
from tfm_cli.model.masks import causal_mask, padding_mask
from tfm_cli.model.transformer import CPU_SHORT_KEYS
from tfm_cli.packing import autocast_dtype, decoding_view, module_view, tensor_version

UNK_ID = 3  # <unk> in tfm's vocabulary layout (tokenizer.py: 0 <pad>, 1 <s>, 2 </s>, 3 <unk>): never an output
EOS, MAX_LEN = "eos", "max_len"  # why a hypothesis stopped: the model ended it, or it reached its maximum length
COPIED = "copied"  # a sentence without a letter, written as it is: no model made it (`sentences.Part.literal`)


@dataclass
class Hypothesis:
    """One output sequence: `tokens` without BOS/EOS, `score` = log_prob / lp(length), `log_prob` = sum log P.

    `stopped` is "eos" when the model ended it, "max_len" when it reached the maximum output length (source length
    + max_len_offset, or the model's position limit) and its end of sentence was forced there: likely cut short.
    """

    tokens: list[int]
    score: float
    log_prob: float
    stopped: str = EOS


def banned_ids(config: ModelConfig) -> list[int]:
    """Token ids the search never outputs: <pad>, <s>, and <unk> where the vocabulary has one (id 3, when that is
    none of the model's pad, BOS and EOS ids)."""
    ids = [config.pad_id, config.bos_id]
    if UNK_ID < config.vocab_size and UNK_ID not in (config.pad_id, config.bos_id, config.eos_id):
        ids.append(UNK_ID)
    return ids


def length_penalty(length: int | torch.Tensor, alpha: float) -> float | torch.Tensor:
    """GNMT length penalty lp(Y) = (5 + |Y|)^alpha / (5 + 1)^alpha (Wu et al., 2016, section 7); `length` counts
    output tokens including EOS."""
    return ((5.0 + length) / 6.0) ** alpha


def max_output_lengths(src_mask: torch.Tensor, offset: int, limit: int) -> torch.Tensor:
    """Per-sentence maximum number of output tokens before EOS: source length + offset, capped at `limit`.

    The source length excludes the EOS appended to every source; `src_mask` is (B, 1, 1, S).
    """
    src_len = src_mask.reshape(src_mask.size(0), -1).sum(dim=1) - 1
    offset = min(offset, limit)  # a huge offset would overflow int64 (wrapping to a length of 1) or not convert at all
    return (src_len + offset).clamp(min=1, max=limit)


class Engine(Protocol):
    """What a search needs from a model: start decoding a batch of sources, then the next token's logits.

    `TorchEngine` runs the PyTorch `Transformer`; `tfm_cli.export.onnx.OnnxEngine` runs the exported ONNX
    graphs with onnxruntime. The searches below are written once, against this interface.
    """

    config: ModelConfig  # pad/bos/eos ids, vocab_size, max_positions
    device: torch.device

    def start(self, src: torch.Tensor, src_mask: torch.Tensor) -> DecoderState:
        """Encode (B, S) sources; the returned state holds one row per source (beam search's `select` makes the
        beams of a sentence copies of its row)."""
        ...

    def step(self, last: torch.Tensor, state: DecoderState) -> torch.Tensor:
        """(B,) last tokens -> (B, V) logits of the next token; the state advances by one position."""
        ...


class DecoderState(Protocol):
    """Per-row decoder state (K/V cache, encoder memory, source mask). Rows are hypotheses."""

    def reorder(self, index: torch.Tensor) -> None:
        """Row i becomes old row index[i], for the target side only (beams of one sentence share the source)."""
        ...

    def select(self, index: torch.Tensor) -> None:
        """Keep only rows `index` of everything (finished sentences leave the batch)."""
        ...


class Recompute:
    """Decoding without a K/V cache: keeps the tokens generated so far and runs the decoder over the whole
    prefix at every step, which is what each step costs without the cache (O(T^2) per sentence instead of
    O(T)). It answers `reorder` and `select` like `KVCache`, so the searches do not change. For benchmarks
    (`tfm bench translate --no-cache`) and tests: the results are the cached search's, only slower.
    """

    def __init__(self, batch: int, device: torch.device) -> None:
        self.prefix = torch.empty(batch, 0, dtype=torch.long, device=device)  # (B, t) decoder inputs so far

    def reorder(self, index: torch.Tensor) -> None:
        self.prefix = self.prefix.index_select(0, index)

    select = reorder


class TorchState:
    """The PyTorch engine's decoder state: encoder memory and source mask per row, and the K/V cache."""

    def __init__(self, memory: torch.Tensor, src_mask: torch.Tensor, cache: KVCache | Recompute) -> None:
        self.memory, self.src_mask, self.cache = memory, src_mask, cache  # (B, S, D), (B, 1, 1, S)

    def reorder(self, index: torch.Tensor) -> None:
        self.cache.reorder(index)

    def select(self, index: torch.Tensor) -> None:
        self.memory, self.src_mask = self.memory.index_select(0, index), self.src_mask.index_select(0, index)
        self.cache.select(index)


class TorchEngine:
    """The search's view of a PyTorch `Transformer`: over the K/V cache, or recomputing every prefix.

    It decodes through `packing.decoding_view(model)`: the same parameters, with linear layers that run, on the CPU,
    oneDNN's kernels on weights packed once (faster for the few rows of a decoding step, the same function) and
    self-attention's three projections stacked into one product (the same numbers, fewer calls); on CUDA, on
    weights cast once to the autocast dtype (autocast cast them at every step under inference mode), and so is the
    output projection's transposed copy below.
    The packed and stacked weights (taken at their first use) and the output projection below (taken here) are copies, taken
    again when the weights change in place (`load_state_dict`, an optimizer step: their version counters move),
    and built again when a parameter is replaced by another object or given new data (`load_state_dict(...,
    assign=True)`, `p.data = x`). In-place changes through `p.data` (`p.data.mul_(2)`) move no version counter
    and are not seen, nor are those of weights made under `torch.inference_mode` (they have none): change weights
    under `torch.no_grad()` instead. `model` stays the model given, in the mode it
    is in (train or eval): the search runs a view of it in eval mode.
    """

    def __init__(self, model: Transformer, use_cache: bool = True) -> None:
        self.model, self.use_cache = model, use_cache
        self.config = model.config
        self.device = next(model.parameters()).device
        self._view(model)

    def _view(self, model: Transformer) -> None:
        """Build what runs from the model's parameters as they are now (again when they are replaced)."""
        key = _parameters_key(model)
        net = decoding_view(model)
        # What runs is always a view in eval mode (sharing the parameters): searching never applies dropout, and the
        # caller's model keeps its own mode (a model given while it trains was set to eval, silently ending its
        # dropout, and one set back to train decoded with dropout wherever it ran itself: CUDA, int8, no oneDNN).
        self.net = (module_view(model) if net is model else net).eval()
        # Elsewhere, the output projection of a step as x @ W^T with W^T stored contiguous: for the few rows of a
        # decoding step MKL's kernel for that layout is faster than F.linear's and gives the same numbers bit for
        # bit (measured, V = 8,000, d_model = 256, 2 threads of a 2-core AVX-512 CPU: 4 rows 0.74 vs 1.21 ms).
        # (Packed and int8 generators are called as they are.)
        generator = self.net.generator
        self.output_t = generator.weight.detach().t().contiguous() if type(generator) is nn.Linear else None  # (D, V)
        self._output_version = tensor_version(generator.weight) if self.output_t is not None else None
        self._output_casts: dict[torch.dtype, torch.Tensor] = {}  # autocast dtype -> output_t cast to it
        self._parameters = key

    def __getstate__(self) -> dict:
        """Pickled (and deep-copied) as its model: the packed copies of the view are oneDNN tensors that cannot
        be (a used Translator failed to pickle with torch's "Cannot access storage of OpaqueTensorImpl")."""
        return {"model": self.model, "use_cache": self.use_cache}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["model"], state["use_cache"])

    def start(self, src: torch.Tensor, src_mask: torch.Tensor) -> TorchState:
        if _parameters_key(self.model) != self._parameters:
            # a parameter replaced by another object (load_state_dict(assign=True)) or given new data (p.data = x):
            # the view and its packed copies still held the old weights, and translated with them silently
            self._view(self.model)
        memory = self.net.encode(src, src_mask)  # (B, S, D)
        cache = self.net.new_cache() if self.use_cache else Recompute(memory.size(0), src.device)
        return TorchState(memory, src_mask, cache)

    def step(self, last: torch.Tensor, state: TorchState) -> torch.Tensor:
        cache = state.cache
        if isinstance(cache, Recompute):
            cache.prefix = torch.cat([cache.prefix, last[:, None]], dim=1)
            tgt_mask = causal_mask(cache.prefix.size(1), last.device)
            return self.net.decode(cache.prefix, state.memory, state.src_mask, tgt_mask)[:, -1]
        features = self.net.decode(last[:, None], state.memory, state.src_mask, None, cache, features_only=True)
        if self.output_t is None:
            return self.net.generator(features[:, -1])
        weight = self.net.generator.weight
        if tensor_version(weight) != self._output_version:  # changed in place since (load_state_dict): copy again
            self.output_t, self._output_version = weight.detach().t().contiguous(), tensor_version(weight)
            self._output_casts = {}
        dtype = autocast_dtype(features.device.type)
        if dtype is None or dtype == self.output_t.dtype:
            return features[:, -1] @ self.output_t  # (B, V)
        # under autocast: the copy cast once (autocast cast it at every step under inference mode), the same numbers
        if dtype not in self._output_casts:
            self._output_casts[dtype] = self.output_t.to(dtype)
        return features[:, -1].to(dtype) @ self._output_casts[dtype]  # (B, V)


def _parameters_key(model: nn.Module) -> tuple[tuple[int, int], ...]:
    """Which tensors `model`'s parameters are: another object, or new data under the same one, changes it."""
    return tuple((id(p), p.data_ptr()) for p in model.parameters())


def as_engine(model: Transformer | Engine, use_cache: bool = True) -> Engine:
    """A `Transformer` wrapped in a `TorchEngine`; an engine as it is."""
    return TorchEngine(model, use_cache) if isinstance(model, Transformer) else model


class NonFiniteOutput(TfmError):
    """The model gave NaN scores while decoding: no translation can be chosen from them."""


def host_reads_are_free(device: torch.device) -> bool:
    """Whether the search may read a value of `device` into Python at no cost: on the CPU it may; on a GPU a read
    waits until the GPU has run everything queued before it (a host synchronisation), and the GPU then idles while
    Python queues the next work. Where reads cost, the searches read once a step (which rows finished, and whether
    the scores were numbers) and otherwise do a check's work for every row, a no-op for the rows it does not concern.
    (A function of its own so that tests run the GPU's way on the CPU.)"""
    return device.type == "cpu"


def _step_log_probs(
    engine: Engine, last: torch.Tensor, state: DecoderState, at_max: torch.Tensor, limited: bool, ban_eos: bool,
    banned: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(B,) last tokens -> (B, V) fp32 log-probabilities of the next token for each row; (B,) bool: the rows
    whose end was forced, against the model's choice (or forbidden until then, by `min_len`); and a bool scalar on
    the device, True where the scores are not finite numbers (the caller reads it with its own question of the step, then
    raises `NonFiniteOutput`: `raise_if_not_numbers`).

    Padding, BOS and <unk> are never outputs: `banned`, their ids (`banned_ids`) on the search's device, made
    once a search (indexing with a Python list copied it to the GPU at every step, waiting for the GPU each time).
    Rows at their length limit ((B,) bool `at_max`) may only end (EOS); `limited` says whether any row is at its limit,
    as the caller knows without asking the device (it keeps the limits in Python too). With `ban_eos` (fewer than
    `min_len` tokens so far) the other rows may not end. As in fairseq, banned tokens
    get -inf after the log-softmax (no renormalisation), so scores stay log-probabilities of the model and
    comparable with and without `min_len`. A row at its limit whose most probable token was EOS anyway ended as
    the model would have: it is not counted as forced (its hypothesis stopped at "eos", not "max_len").
    """
    cfg = engine.config
    logits = engine.step(last, state).float()  # (B, V)
    log_probs = logits.log_softmax(dim=-1)
    log_probs[:, banned] = float("-inf")  # padding, BOS and <unk> are never outputs
    # A NaN logit makes its whole row NaN (its log-sum-exp is NaN), so one column tells; such rows never finished
    # nor continued, and came out as empty translations. So does an infinite one: +inf makes the row NaN, and an EOS
    # of -inf (which finite logits never give) let no row end, even where its length limit forces the end (greedy
    # search ran past its last slot: an IndexError; beam search returned no hypothesis).
    broken = ~log_probs[:, cfg.eos_id].isfinite().all()
    if not limited:
        if ban_eos:
            log_probs[:, cfg.eos_id] = float("-inf")
        return log_probs, at_max, broken
    # Masks, not indexing by them: a boolean index asks the device how many rows it holds.
    forced = at_max
    if not ban_eos:
        forced = at_max & (log_probs.argmax(dim=-1) != cfg.eos_id)  # the model's choice, before min_len's ban
    # (with min_len not reached every row at its limit is cut there: a beam that had its end forbidden for 50 steps
    # wants it at the limit, and was called ended by the model, "eos", with no word of the cut)
    eos = log_probs[:, cfg.eos_id].clone()
    log_probs.masked_fill_(at_max[:, None], float("-inf"))  # the length limit wins over min_len: a row at its
    log_probs[:, cfg.eos_id] = torch.where(at_max, eos, float("-inf") if ban_eos else eos)  # maximum must end
    return log_probs, forced, broken


def raise_if_not_numbers(broken: bool) -> None:
    """Raise `NonFiniteOutput` if a step's scores were not finite numbers (`_step_log_probs`' flag, read by the caller)."""
    if broken:
        raise NonFiniteOutput(
            "the model's scores are not finite numbers (NaN or infinite): its weights are damaged, or its training diverged",
            hint="restore model.safetensors (e.g. average the run's checkpoints) or train again",
        )


def _split_rows(mask: torch.Tensor, n_true: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(R,) bool, of which `n_true` (read already) are True -> the indices of its False rows and of its True rows,
    each in order, without asking the device again (`nonzero` waits for the GPU to know how many there are)."""
    order = torch.argsort(mask.to(torch.uint8), stable=True)  # False rows first, each part in order
    n_false = mask.numel() - n_true
    return order[:n_false], order[n_false:]


def _hypotheses(
    tokens: torch.Tensor, lengths: torch.Tensor, log_probs: torch.Tensor, forced: torch.Tensor, alpha: float
) -> list[Hypothesis]:
    """Finished hypotheses from tensors: (N, L) tokens of which the first lengths[i] count, (N,) log-probs, (N,)
    bool: whose EOS the length limit forced against the model's choice (stopped "max_len"; else "eos").

    The score divides in Python floats, so it is the same number whichever way the search kept its books.
    """
    out = []
    rows = zip(tokens.tolist(), lengths.tolist(), log_probs.tolist(), forced.tolist(), strict=True)
    for row, n, total, cut in rows:
        stopped = MAX_LEN if cut else EOS
        out.append(Hypothesis(row[:n], total / float(length_penalty(n + 1, alpha)), total, stopped))  # + 1: the EOS
    return out


def _start_search(
    model: Transformer | Engine, src: torch.Tensor, src_mask: torch.Tensor, max_len_offset: int, use_cache: bool
) -> tuple[Engine, DecoderState, torch.Tensor, torch.Tensor]:
    """What greedy and beam search both start from, for (B, S) sources (B > 0).

    Returns the engine; its decoder state after encoding, one row per sentence; each sentence's maximum output
    length, (B,); and the first decoder input, BOS, (B,).
    """
    engine = as_engine(model, use_cache)
    cfg = engine.config
    max_len = max_output_lengths(src_mask, max_len_offset, cfg.max_positions - 1)  # (B,)
    state = engine.start(src, src_mask)
    bos = torch.full((src.size(0),), cfg.bos_id, dtype=torch.long, device=src.device)  # (B,)
    return engine, state, max_len, bos


@torch.inference_mode()
def greedy_search(
    model: Transformer | Engine,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    max_len_offset: int = 50,
    min_len: int = 0,
    use_cache: bool = True,
) -> list[list[Hypothesis]]:
    """Pick the most probable token at every step. Returns one hypothesis per sentence (as a 1-element list), its
    score its log-probability: greedy search has no length penalty.

    The output is at most input length + 50 tokens by default, the paper's limit (section 6.1).

    Args:
        src: (B, S) source ids ending with EOS, right-padded; src_mask: (B, 1, 1, S) bool.
        max_len_offset: output may be at most source length + this many tokens (then EOS is forced).
        min_len: no EOS before this many output tokens (the maximum length still wins where they conflict).
        use_cache: decode over the K/V cache (False recomputes every prefix: the same result, slower); for a
            `Transformer` only: an engine decodes as it was built.
    """
    if src.size(0) == 0:
        return []

    def most_probable(log_probs: torch.Tensor, rows: list[int], step: int) -> torch.Tensor:
        return log_probs.max(dim=-1).indices  # the first of equal maxima

    hyps = _token_by_token(model, src, src_mask, most_probable, None, max_len_offset, min_len, use_cache)
    return [[h] for h in hyps]


@dataclass(frozen=True)
class Sampling:
    """How `sample_search` draws each token, as fairseq's --sampling, CTranslate2's sampling_topk and Hugging
    Face's do_sample do.

    The distribution drawn from is the model's, over the tokens a search may output, with its logits divided by
    `temperature`, then cut to the `top_k` most probable tokens (0: all of them; tokens equal to the k-th stay) and
    to the smallest set of the most probable whose probability reaches `top_p` (nucleus sampling, Holtzman et al.,
    2020; 1: all), in that order, as Hugging Face applies them. A sample is scored by its log-probability under the
    model itself, not under the cut distribution, as greedy search scores its output.

    `seed` (0 to 2**64 - 1) chooses the draws: the same seed, sentence and model give the same samples.
    """

    top_k: int = 0
    top_p: float = 1.0
    temperature: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"need an integer top_k >= 0 (0: all tokens), got {self.top_k!r}")
        if isinstance(self.top_p, bool) or not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise ValueError(f"need 0 < top_p <= 1 (1: all tokens), got {self.top_p!r}")
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)) or not 0 < self.temperature < math.inf:
            raise ValueError(f"need a temperature > 0, got {self.temperature!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**64:
            raise ValueError(f"need an integer seed from 0 to 2**64 - 1, got {self.seed!r}")


def stream_key(*values: int) -> int:
    """A 64-bit number naming a stream of draws, from non-negative integers of any size (a seed, a sentence's
    number, a sample's number): their BLAKE2b hash."""
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in values):
        raise ValueError(f"stream_key takes non-negative integers, got {values}")
    digest = hashlib.blake2b(",".join(map(str, values)).encode("ascii"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def sampling_probs(log_probs: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """(R, V) fp32 log-probabilities -> (R, V) fp32 probabilities (not renormalised after `top_p`'s cut) that
    `Sampling` draws from: temperature, then top-k, then top-p."""
    logits = log_probs.float()
    if sampling.temperature != 1:
        # each row's best at 0 before the division, in float64: a temperature of 1e-300 or 1e300 gives a one-hot or
        # a flat row, where fp32 made every logit -inf or NaN (and the search ran past its length limit)
        best = logits.max(dim=-1, keepdim=True).values
        logits = ((logits - best).double() / sampling.temperature).float()  # (-inf stays -inf)
    if 0 < sampling.top_k < logits.size(-1):
        kth = logits.topk(sampling.top_k, dim=-1).values[:, -1:]  # (R, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.softmax(dim=-1)
    if sampling.top_p < 1:
        probs = _nucleus(probs, sampling.top_p)
    return probs


# Top-p ranks this many tokens first (`top_first`), and sorts a row's whole vocabulary only where they fall short of
# top_p. A nucleus is most often among the first few dozen: the quickstart model's top-p 0.9 sampling of 500 dev
# lines took 2.4 s instead of 4.1 s with every row sorted (greedy search: 1.0 s; 2-core AVX-512 Xeon, fp32, one
# thread). A second tier of 1,024 saved 12% more there, and made a wide nucleus (temperature 2, top-p 0.95) 1.6x slower.
TOP_P_FIRST = 64


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """(R, V) probabilities -> those of each row's nucleus, 0 elsewhere: its tokens ranked by probability (equal
    ones lowest id first), kept while the ones before hold less than `top_p`."""
    if not host_reads_are_free(probs.device):  # a GPU: every row sorted whole, cheap there, where asking which rows
        whole, whole_order = probs.sort(dim=-1, descending=True, stable=True)  # need it would wait for the GPU
        _keep_nucleus(whole, top_p)
        return torch.zeros_like(probs).scatter_(-1, whole_order, whole)
    if TOP_P_FIRST < probs.size(-1):
        ranked, order = top_first(probs, TOP_P_FIRST)  # (R, TOP_P_FIRST)
        short = ranked.sum(dim=-1) < top_p  # the nucleus is not among them
    else:
        ranked, order, short = None, None, torch.ones(probs.size(0), dtype=torch.bool, device=probs.device)
    out = torch.zeros_like(probs)
    rows = short.nonzero().squeeze(1)
    if rows.numel():
        whole, whole_order = probs[rows].sort(dim=-1, descending=True, stable=True)
        _keep_nucleus(whole, top_p)
        out[rows] = out[rows].scatter_(-1, whole_order, whole)
    if ranked is not None:
        rows = (~short).nonzero().squeeze(1)
        ranked = ranked[rows]
        _keep_nucleus(ranked, top_p)
        out[rows] = out[rows].scatter_(-1, order[rows], ranked)
    return out


def _keep_nucleus(ranked: torch.Tensor, top_p: float) -> None:
    """(R, N) probabilities ranked best first -> in place, 0 for each token that the ones before it reach
    `top_p` without (the most probable is always kept: nothing is before it)."""
    before = ranked.cumsum(dim=-1) - ranked  # the probability of the tokens ranked before each
    ranked.masked_fill_(before >= top_p, 0.0)


def race(probs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """(R, V) probabilities (not necessarily summing to 1; overwritten) and (R, V) uniform numbers in [0, 1)
    (overwritten) -> (R,) tokens:
    the exponential race, argmax p_t / E_t with E_t = -log U_t exponential (the Gumbel-max trick written with
    exponentials: token t wins with probability p_t / sum p). A token of probability 0 never wins; equal ones, the
    lowest id."""
    exponential = noise.clamp_min(torch.finfo(noise.dtype).tiny).log_().neg_()  # (U = 0 would make E infinite)
    return probs.div_(exponential).argmax(dim=-1)  # (in place: `probs` are the step's own)


class _Draws:
    """Each row's own random numbers: a torch.Generator per row, seeded by its stream's key (`stream_key` of the
    seed, the sentence's key and the sample's number), giving one uniform number per vocabulary token a step.

    One generator shared by the batch would give a sentence other samples whenever the sentences beside it changed
    (another --batch-tokens, another chunk of a stream, a line more before it). With its own generator a row draws
    the same numbers in any batch, and the race (`race`) changes a token only where two tokens' chances are equal to
    the last bits in which the model's arithmetic differs between batch shapes. The inverse of the distribution
    function, from one number a step, changed a token wherever a number fell that near any boundary between two
    tokens: 1 of 300 dev lines sampled otherwise with --batch-tokens 1. CPU generators are the Mersenne Twister,
    CUDA's Philox: a CPU and a GPU draw different samples (the CPU engines, torch and ONNX, the same).
    """

    def __init__(self, seeds: list[int], vocab: int, device: torch.device) -> None:
        self.vocab, self.device = vocab, device
        self.generators = [torch.Generator(device=device).manual_seed(seed) for seed in seeds]

    def uniforms(self, rows: list[int]) -> torch.Tensor:
        """R row indices -> (R, V) fp32 uniform numbers in [0, 1), the next of each row's stream (a new tensor:
        `race` works in it)."""
        out = torch.empty(len(rows), self.vocab, device=self.device)
        for i, row in enumerate(rows):
            torch.rand(self.vocab, generator=self.generators[row], out=out[i])
        return out


@torch.inference_mode()
def sample_search(
    model: Transformer | Engine,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    sampling: Sampling = Sampling(),
    keys: list[int] | None = None,
    n: int = 1,
    max_len_offset: int = 50,
    min_len: int = 0,
    use_cache: bool = True,
) -> list[list[Hypothesis]]:
    """Draw `n` translations of each sentence, each token from the model's distribution (`Sampling`). Returns
    them per sentence in the order drawn, each scored by its log-probability (as greedy search scores: no length
    penalty); two samples may be the same.

    Args:
        src: (B, S) source ids ending with EOS, right-padded; src_mask: (B, 1, 1, S) bool.
        sampling: temperature, top-k, top-p and seed.
        keys: one non-negative integer per sentence naming its draws (with the seed and the sample's number), so
            a sentence gets the same samples in any batch: the caller's number for it (`Translator` gives its input
            line and sentence). Default: its row in `src`.
        n: samples per sentence.
        max_len_offset, min_len, use_cache: as for `greedy_search`.
    """
    batch = src.size(0)
    if n < 1:
        raise ValueError(f"need n >= 1 samples per sentence, got {n}")
    if keys is not None and len(keys) != batch:
        raise ValueError(f"sample_search needs one key per sentence ({batch}), got {len(keys)}")
    if batch == 0:
        return []
    keys = list(range(batch)) if keys is None else keys
    seeds = [stream_key(sampling.seed, key, j) for key in keys for j in range(n)]  # sentence by sentence, its n samples
    hyps = _draw_rows(as_engine(model, use_cache), src, src_mask, sampling, seeds, [n] * batch, max_len_offset, min_len)
    return [hyps[i * n : (i + 1) * n] for i in range(batch)]


def _draw_rows(
    engine: Engine, src: torch.Tensor, src_mask: torch.Tensor, sampling: Sampling, seeds: list[int], copies: list[int],
    max_len_offset: int, min_len: int,
) -> list[Hypothesis]:
    """Sample one output per row: `copies[i]` rows of sentence i of `src` (the encoder runs once for them), the
    rows' generators seeded by `seeds`."""
    draws = _Draws(seeds, engine.config.vocab_size, src.device)

    def drawn(log_probs: torch.Tensor, rows: list[int], step: int) -> torch.Tensor:
        return race(sampling_probs(log_probs, sampling), draws.uniforms(rows))

    return _token_by_token(engine, src, src_mask, drawn, copies, max_len_offset, min_len, True)


def _token_by_token(
    model: Transformer | Engine,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    pick: Callable[[torch.Tensor, list[int], int], torch.Tensor],
    copies: list[int] | None,
    max_len_offset: int,
    min_len: int,
    use_cache: bool,
) -> list[Hypothesis]:
    """One output per row, a token at a time: greedy search and sampling. The rows are `copies[i]` rows of each
    sentence i, in order (None: one each); the encoder runs once per sentence. `pick((R, V) log-probabilities, R
    rows, step)` chooses each live row's next token, `rows` naming them among all the rows. Returns a hypothesis
    per row, scored by its log-probability."""
    device = src.device
    # max_len: (R,) each row's output limit, kept row for row with the live rows as they finish
    engine, state, max_len, last = _start_search(model, src, src_mask, max_len_offset, use_cache)
    if copies is not None and any(c != 1 for c in copies):
        counts = torch.tensor(copies, device=device)
        each = torch.arange(src.size(0), device=device).repeat_interleave(counts, output_size=sum(copies))  # (R,) each row's sentence
        state.select(each)
        max_len, last = max_len[each], last[each]
    cfg = engine.config
    banned = torch.tensor(banned_ids(cfg), device=device)
    # The live rows and their limits in Python too, row for row with the tensors: read once, kept up to date from
    # the one read a step (which rows ended), so no other question of a step waits for the device.
    live_rows, live_max = list(range(max_len.numel())), max_len.tolist()
    batch = len(live_rows)
    # The books are tensors indexed by row, read once at the end: no per-row Python at each step.
    tokens = torch.zeros(batch, max(live_max) + 1, dtype=torch.long, device=device)
    lengths = torch.zeros(batch, dtype=torch.long, device=device)
    totals = torch.zeros(batch, device=device)  # log-probability of each finished row
    cut = torch.zeros(batch, dtype=torch.bool, device=device)  # whose EOS the length limit forced
    alive = torch.arange(batch, device=device)  # (R_alive,) original index of each live row
    alive_total = torch.zeros(batch, device=device)  # (R_alive,) log-probability of each live row so far
    step = 0
    while live_rows:
        log_probs, forced, broken = _step_log_probs(
            engine, last, state, step >= max_len, step >= min(live_max), step < min_len, banned
        )  # (R_alive, V), (R_alive,), ()
        best = pick(log_probs, live_rows, step)  # (R_alive,)
        alive_total += log_probs.gather(1, best[:, None]).squeeze(1)
        tokens[alive, step] = best
        ended = best == cfg.eos_id
        *ended_now, not_numbers = torch.cat([ended, broken[None]]).tolist()  # the step's one read
        raise_if_not_numbers(not_numbers)
        if any(ended_now):  # finished rows leave every per-row tensor
            keep, gone = _split_rows(ended, sum(ended_now))
            done = alive[gone]
            lengths[done], totals[done], cut[done] = step, alive_total[gone], forced[gone]
            alive, last, alive_total, max_len = alive[keep], best[keep], alive_total[keep], max_len[keep]
            state.select(keep)
            live_rows = [r for r, e in zip(live_rows, ended_now, strict=True) if not e]
            live_max = [m for m, e in zip(live_max, ended_now, strict=True) if not e]
        else:
            last = best
        step += 1
    return _hypotheses(tokens, lengths, totals, cut, alpha=0.0)


@torch.inference_mode()
def beam_search(
    model: Transformer | Engine,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_len_offset: int = 50,
    n_best: int = 1,
    min_len: int = 0,
    use_cache: bool = True,
) -> list[list[Hypothesis]]:
    """Beam search with the GNMT length penalty, batched over sentences and beams, over the K/V cache.

    The defaults are the paper's (section 6.1): beam size 4, alpha 0.6, at most input length + 50 tokens.

    Args:
        src: (B, S) source ids ending with EOS, right-padded; src_mask: (B, 1, 1, S) bool.
        beam_size: live hypotheses per sentence (K).
        alpha: length penalty exponent; 0 ranks by total log-probability.
        max_len_offset: output may be at most source length + this many tokens (then EOS is forced).
        n_best: how many finished hypotheses to return per sentence (at most `beam_size`), best first.
        min_len: no EOS before this many output tokens (the maximum length still wins where they conflict).
        use_cache: decode over the K/V cache (False recomputes every prefix: the same result, slower); for a
            `Transformer` only: an engine decodes as it was built.

    Returns:
        For each sentence, up to `n_best` hypotheses sorted by score, best first.
    """
    if beam_size < 1 or not 1 <= n_best <= beam_size:
        raise ValueError(f"need beam_size >= 1 and 1 <= n_best <= beam_size, got {beam_size} and {n_best}")
    k = beam_size
    n, device = src.size(0), src.device  # n sentences
    if n == 0:
        return []
    # The first step has one hypothesis per sentence (BOS): it runs on n rows, and its K best tokens then
    # become the K beams, whose rows are copies of their sentence's row (the `select` below).
    # max_len: (n,) each sentence's output limit, kept row for row with the live sentences as they finish
    engine, state, max_len, last = _start_search(model, src, src_mask, max_len_offset, use_cache)
    cfg = engine.config
    banned = torch.tensor(banned_ids(cfg), device=device)
    # The live sentences' limits in Python too, row for row with `max_len`: read once, kept up to date from the
    # one read a step (which sentences are done), so no other question of a step waits for the device.
    live_max = max_len.tolist()
    width = max(live_max) + 1  # token slots of a finished hypothesis: the longest output, then EOS
    sentence = torch.arange(n, device=device)  # (live,) original index of each live sentence
    seqs = torch.empty(n, 0, dtype=torch.long, device=device)  # (live * beams, step) generated tokens of each beam
    beam_scores = torch.zeros(n, 1, device=device)  # (live, beams) log-probability of each beam so far
    finished = _Finished(n, k, width, device)
    beam_offsets = torch.arange(k, device=device)  # a beam's row among its sentence's K rows
    step = 0
    while live_max:
        live, beams = len(live_max), beam_scores.size(1)
        at_max = (step >= max_len).repeat_interleave(beams)
        log_probs, forced, broken = _step_log_probs(
            engine, last, state, at_max, step >= min(live_max), step < min_len, banned
        )  # (live*beams, V), (live*beams,), ()
        vocab = log_probs.size(-1)
        candidates = (beam_scores.view(-1, 1) + log_probs).view(live, beams * vocab)
        if candidates.size(1) < 2 * k:  # a vocabulary smaller than 2K on the first step: pad with dead ones
            candidates = F.pad(candidates, (0, 2 * k - candidates.size(1)), value=float("-inf"))
        top_scores, top_index = top_first(candidates, 2 * k)  # (live, 2K), equal scores lowest index first
        # (a padded candidate has score -inf: it never finishes or continues, whichever row it names)
        top_beam, top_token = (top_index // vocab).clamp_(max=beams - 1), top_index % vocab
        is_eos = top_token == cfg.eos_id

        # Hypotheses that end here (EOS among the K best candidates) join the sentence's finished ones, of which
        # the K best by length-penalised score are kept.
        ends = is_eos[:, :k] & top_scores[:, :k].isfinite()  # (live, K)
        # (E,) the live sentences where a hypothesis ends; on a GPU all of them (no read: for a sentence where none
        # ends, adding K hypotheses of score -inf changes nothing)
        ending = ends.any(dim=1).nonzero().squeeze(1) if host_reads_are_free(device) else torch.arange(live, device=device)
        if ending.numel():
            ids = sentence[ending]  # (E,) their original indices
            new_scores = top_scores[ending, :k] / length_penalty(step + 1, alpha)  # (E, K)
            new_scores = new_scores.masked_fill(~ends[ending], float("-inf"))  # only those that end
            new_tokens = torch.zeros(ending.numel(), k, width, dtype=torch.long, device=device)  # (E, K, width)
            new_tokens[:, :, :step] = seqs.view(live, beams, step)[ending[:, None], top_beam[ending, :k]]
            new_cut = forced.view(live, beams)[ending[:, None], top_beam[ending, :k]]  # (E, K) each one's parent row
            finished.add(ids, new_tokens, step, top_scores[ending, :k], new_scores, new_cut)

        # The K best continuations that do not end become the next beams.
        # (a stable sort of the 2K, which are in order already: equal scores keep the lower index first)
        cont_scores, cont_pos = top_scores.masked_fill(is_eos, float("-inf")).sort(dim=1, descending=True, stable=True)
        cont_scores, cont_pos = cont_scores[:, :k].contiguous(), cont_pos[:, :k]  # (live, K)
        # Done: K finished, and no live beam could still rank among them, at any length it may reach. Its
        # log-probability only falls as it grows, and lp grows with the length (alpha >= 0), so the best score a
        # live beam can reach is its log-probability now over lp at the sentence's maximum length (tensor2tensor's
        # bound, the paper's code). Scoring it at its present length instead (Hugging Face's early_stopping=False)
        # stopped while a confident live beam, a few near-certain tokens from a better score, was thrown away.
        worst_kept = finished.scores[sentence][:, -1]  # -inf until K have finished
        done = worst_kept >= cont_scores[:, 0] / length_penalty(max_len + 1, alpha)  # the longest, EOS included
        done |= ~cont_scores[:, 0].isfinite()  # nothing left to extend (e.g. forced EOS at max length)
        # (live * K,) the row each next beam extends, and its new token
        parents = (torch.arange(live, device=device)[:, None] * beams + top_beam.gather(1, cont_pos)).view(-1)
        last = top_token.gather(1, cont_pos).view(-1)
        seqs = torch.cat([seqs.index_select(0, parents), last[:, None]], dim=1)
        if beams == 1:
            state.select(parents)  # the first step: each sentence's one row becomes K rows
        else:
            state.reorder(parents)
        beam_scores = cont_scores

        *done_now, not_numbers = torch.cat([done, broken[None]]).tolist()  # the step's one read
        raise_if_not_numbers(not_numbers)
        if any(done_now):  # finished sentences leave the batch
            keep = _split_rows(done, sum(done_now))[0]
            live_max = [m for m, d in zip(live_max, done_now, strict=True) if not d]
            keep_rows = (keep[:, None] * k + beam_offsets).view(-1)
            sentence, max_len, beam_scores = sentence[keep], max_len[keep], beam_scores[keep]
            seqs, last = seqs[keep_rows], last[keep_rows]
            state.select(keep_rows)
        step += 1
    return finished.hypotheses(alpha, n_best)


def top_first(scores: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The `n` largest of each row of (R, C) `scores` and their column indices, best first, equal scores in the
    order of their index (the lowest first).

    `torch.topk` leaves the order of equal values unspecified, and which of them it takes when they straddle the
    n-th place. Greedy search takes the first of equal maxima (`max`), and beam search must choose as it does, or a
    beam of 1 would translate otherwise than greedy search: in bf16 two tokens' log-probabilities are often exactly
    equal (a step of the quickstart model gave two tokens -1.1074 each, and 10 of 200 dev sentences came out
    differently). Rows where equal values straddle the n-th place (seen by taking one more) are sorted whole; where
    asking the device which rows those are would wait for it (a GPU), the top n are chosen by keys that tie nowhere
    (`_top_first_by_key`), which choose the same.
    """
    if not host_reads_are_free(scores.device):
        return _top_first_by_key(scores, n)
    take = min(n + 1, scores.size(1))
    values, index = scores.topk(take, dim=1)
    index, order = index.sort(dim=1)  # equal values by index, then a stable sort by value
    values, order = values.gather(1, order).sort(dim=1, descending=True, stable=True)
    index = index.gather(1, order)
    if take > n:
        straddle = (values[:, n] == values[:, n - 1]) & values[:, n - 1].isfinite()  # (-inf ones never count)
        if bool(straddle.any()):
            rows = straddle.nonzero().squeeze(1)
            whole_values, whole_index = scores[rows].sort(dim=1, descending=True, stable=True)
            values[rows], index[rows] = whole_values[:, :take], whole_index[:, :take]
    return values[:, :n], index[:, :n]


def _top_first_by_key(scores: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`top_first` in one `topk`, without reading anything into Python: each fp32 score and its column become one
    int64 key, the score's bits in an order-keeping form above, the column reversed below (of equal scores the lower
    column has the larger key), so no two keys are equal and the n largest are the n that `top_first` takes, in its
    order. Five elementwise passes over `scores` in int64 before the `topk`: little on a GPU, but on a 2-core CPU
    7-10 times `top_first`'s time (8 and 32 rows of 32,000 scores, one thread: 1.4 and 7.1 ms against 0.2 and 0.75),
    and there `top_first` asks, at no cost."""
    bits = (scores.float() + 0.0).view(torch.int32).to(torch.int64)  # (+ 0.0: -0.0 becomes 0.0, one key for both)
    ordered = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)  # negative floats count down in their bits: flip them
    columns = torch.arange(scores.size(1) - 1, -1, -1, device=scores.device)  # (C,) C-1 ... 0
    index = ((ordered << 32) + columns).topk(n, dim=1).indices  # (R, n), the keys' order: best first
    return scores.gather(1, index), index


class _Finished:
    """Beam search's finished hypotheses: K slots per sentence holding the K best by length-penalised score.

    The books are tensors indexed by (sentence, slot), read into Python once, at the end.
    """

    def __init__(self, n: int, k: int, width: int, device: torch.device) -> None:
        self.k, self.width = k, width
        self.tokens = torch.zeros(n, k, width, dtype=torch.long, device=device)  # (n, K, width), EOS not kept
        self.lengths = torch.zeros(n, k, dtype=torch.long, device=device)  # (n, K) output tokens before EOS
        self.totals = torch.zeros(n, k, device=device)  # (n, K) log-probabilities
        self.scores = torch.full((n, k), float("-inf"), device=device)  # (n, K) length-penalised; -inf: empty
        self.counts = torch.zeros(n, dtype=torch.long, device=device)  # (n,) slots filled
        self.cut = torch.zeros(n, k, dtype=torch.bool, device=device)  # (n, K) EOS forced by the length limit

    def add(
        self, ids: torch.Tensor, tokens: torch.Tensor, length: int, totals: torch.Tensor, scores: torch.Tensor,
        cut: torch.Tensor,
    ) -> None:
        """Offer sentences `ids` (E,) K new hypotheses each, all `length` tokens long: (E, K, width) tokens, (E, K)
        log-probabilities and length-penalised scores (-inf: no hypothesis), and (E, K) bool: EOS forced by the
        length limit. Each keeps the K best of its 2K."""
        # The K slots already held and the K new ones, side by side: `pick` (E, K) names the K best of the 2K.
        # (a stable sort: of equal scores the one held longer, then the lower beam, stays first)
        kept, pick = torch.cat([self.scores[ids], scores], dim=1).sort(dim=1, descending=True, stable=True)
        kept, pick = kept[:, : self.k], pick[:, : self.k]
        self.tokens[ids] = _pick(self.tokens[ids], tokens, pick)
        self.lengths[ids] = _pick(self.lengths[ids], torch.full_like(pick, length), pick)
        self.totals[ids] = _pick(self.totals[ids], totals, pick)
        self.cut[ids] = _pick(self.cut[ids], cut, pick)
        self.scores[ids] = kept
        self.counts[ids] = kept.isfinite().sum(dim=1)

    def hypotheses(self, alpha: float, n_best: int) -> list[list[Hypothesis]]:
        """For each sentence, its `n_best` best hypotheses, best first."""
        n, k = self.counts.numel(), self.k
        found = _hypotheses(
            self.tokens.view(n * k, self.width), self.lengths.view(-1), self.totals.view(-1), self.cut.view(-1), alpha
        )
        counts = self.counts.tolist()
        return [
            sorted(found[i * k : i * k + counts[i]], key=lambda x: x.score, reverse=True)[:n_best] for i in range(n)
        ]


def _pick(held: torch.Tensor, new: torch.Tensor, pick: torch.Tensor) -> torch.Tensor:
    """(E, K, ...) `held` and (E, K, ...) `new` side by side -> (E, K, ...): the K columns of the 2K that the
    (E, K) indices `pick` name, in their order."""
    both = torch.cat([held, new], dim=1)  # (E, 2K, ...)
    index = pick.view(*pick.shape, *[1] * (both.dim() - 2)).expand(-1, -1, *both.shape[2:])
    return both.gather(1, index)


def length_sorted_batches(lengths: list[int], max_tokens: int, apart: int | None = None) -> list[list[int]]:
    """Indices grouped into batches of similar length with at most `max_tokens` padded tokens each; with `apart`,
    no batch holds lengths on both sides of it (at most `apart`, and more)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        width = lengths[current[0]] if current else lengths[i]  # longest first, so the first sets the width
        crossed = apart is not None and lengths[i] <= apart < width
        if current and ((len(current) + 1) * width > max_tokens or crossed):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


@torch.inference_mode()
def translate_ids(
    model: Transformer | Engine,
    sequences: list[list[int]],
    beam_size: int = 4,
    alpha: float = 0.6,
    max_len_offset: int = 50,
    n_best: int = 1,
    max_tokens: int = 8000,
    greedy: bool = False,
    autocast: Callable[[], contextlib.AbstractContextManager] | None = None,
    on_batch: Callable[[int], None] | None = None,
    min_len: int = 0,
    use_cache: bool = True,
    into: list[list[Hypothesis]] | None = None,
    sampling: Sampling | None = None,
    keys: list[int] | None = None,
) -> list[list[Hypothesis]]:
    """Translate token-id sequences (without EOS), batched by length, results in input order.

    Args:
        model: a `Transformer`, or an `Engine` (e.g. the ONNX one) that the same search runs on.
        sequences: source token ids; each must fit the model (length + 1 <= max_positions).
        beam_size, alpha, n_best: beam search settings (ignored with `greedy`, which returns 1 hypothesis, scored
            by its log-probability: no length penalty).
        sampling: draw the translations (`sample_search`) instead of searching: `n_best` samples of each
            sequence in the order drawn, scored by their log-probability (`beam_size`, `alpha` and `greedy` are not
            used).
        keys: with `sampling`, one non-negative integer per sequence naming its draws (default: its index here).
        max_len_offset: an output has at most (source tokens + this) tokens, then EOS is forced (every search).
        min_len: no EOS before this many output tokens, for every search.
        use_cache: decode over the K/V cache; False recomputes every prefix (to measure what the cache saves).
            For a `Transformer` only: an engine decodes as it was built.
        max_tokens: padded source tokens per batch times the beam size (1 for greedy; for sampling, each sample
            is a row of its own: `n_best` samples of a sentence may take several batches); a sentence longer than
            that gets a batch of its own.
        autocast: a context-manager factory for mixed precision, or None.
        on_batch: called with the number of sentences after each batch (progress display).
        into: a list of one empty list per sequence, filled (and returned) as each batch finishes, so that a
            caller stopped half-way (Ctrl-C: KeyboardInterrupt) still has the sentences already translated.
    """
    engine = as_engine(model, use_cache)
    cfg, device = engine.config, engine.device
    if sampling is not None:
        if n_best < 1:
            raise ValueError(f"need n_best >= 1 samples per sequence, got {n_best}")
        if keys is not None and len(keys) != len(sequences):
            raise ValueError(f"translate_ids(keys=...) needs one key per sequence ({len(sequences)}), got {len(keys)}")
    elif not greedy and (beam_size < 1 or not 1 <= n_best <= beam_size):
        raise ValueError(f"need beam_size >= 1 and 1 <= n_best <= beam_size, got {beam_size} and {n_best}")
    if max_tokens < 1:
        raise ValueError(f"need max_tokens >= 1, got {max_tokens}")
    if into is not None and len(into) != len(sequences):
        raise ValueError(f"translate_ids(into=...) needs one list per sequence ({len(sequences)}), got {len(into)}")
    results: list[list[Hypothesis]] = into if into is not None else [[] for _ in sequences]
    if sampling is not None:
        return _sampled_ids(
            engine, sequences, sampling, keys, n_best, max_tokens, max_len_offset, min_len, autocast, on_batch, results
        )
    lengths = [len(s) + 1 for s in sequences]
    budget = max(max_tokens // (1 if greedy else beam_size), max(lengths, default=1))
    # A sentence of at most CPU_SHORT_KEYS tokens is never batched with a longer one, whose padded width would take
    # its attention (CPU, bf16) from the explicit fp32 formula to SDPA's kernel: 14 of 300 bf16 beam translations
    # changed between alone and all in one batch, each of them beside a 272-token line (2 with the split).
    for indices in length_sorted_batches(lengths, budget, apart=CPU_SHORT_KEYS):
        src, src_mask = _batch([sequences[i] for i in indices], cfg, device)
        with autocast() if autocast is not None else contextlib.nullcontext():
            if greedy:
                hyps = greedy_search(engine, src, src_mask, max_len_offset=max_len_offset, min_len=min_len)
            else:
                hyps = beam_search(
                    engine, src, src_mask, beam_size=beam_size, alpha=alpha, max_len_offset=max_len_offset,
                    n_best=n_best, min_len=min_len,
                )
        for i, h in zip(indices, hyps, strict=True):
            results[i] = h
        if on_batch is not None:
            on_batch(len(indices))
    return results


def _batch(sequences: list[list[int]], cfg: ModelConfig, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-id sequences (without EOS) -> (B, S) sources, each ending with EOS, right-padded, and their mask."""
    width = max(len(s) for s in sequences) + 1
    src = torch.full((len(sequences), width), cfg.pad_id, dtype=torch.long)
    for row, seq in enumerate(sequences):
        src[row, : len(seq) + 1] = torch.tensor(seq + [cfg.eos_id])
    src = src.to(device)  # (B, S)
    return src, padding_mask(src, cfg.pad_id)  # (B, 1, 1, S)


def _sampled_ids(
    engine: Engine, sequences: list[list[int]], sampling: Sampling, keys: list[int] | None, n: int, max_tokens: int,
    max_len_offset: int, min_len: int, autocast: Callable[[], contextlib.AbstractContextManager] | None,
    on_batch: Callable[[int], None] | None, results: list[list[Hypothesis]],
) -> list[list[Hypothesis]]:
    """`translate_ids` with `sampling`: each of a sentence's `n` samples is a row of its own, batched by length
    with the others (`max_tokens` bounds the memory however many samples are asked for), its draws named by the
    sentence's key and its number; a sentence's samples join `results` once all are drawn."""
    items = [(i, j) for i in range(len(sequences)) for j in range(n)]
    lengths = [len(sequences[i]) + 1 for i, _ in items]
    budget = max(max_tokens, max(lengths, default=1))
    drawn: dict[int, list[Hypothesis | None]] = {}  # the sentences part-drawn: their samples so far
    left = [n] * len(sequences)  # samples each sentence still waits for
    for batch in length_sorted_batches(lengths, budget, apart=CPU_SHORT_KEYS):
        # a sentence's samples in a batch are side by side (a stable sort by length): its encoder runs once for them
        sentences = [i for i, _ in itertools.groupby(items[b][0] for b in batch)]
        copies = [len(list(rows)) for _, rows in itertools.groupby(items[b][0] for b in batch)]
        src, src_mask = _batch([sequences[i] for i in sentences], engine.config, engine.device)
        seeds = [stream_key(sampling.seed, stream_key(keys[i] if keys is not None else i, j), 0) for i, j in (items[b] for b in batch)]
        with autocast() if autocast is not None else contextlib.nullcontext():
            hyps = _draw_rows(engine, src, src_mask, sampling, seeds, copies, max_len_offset, min_len)
        done = 0
        for b, h in zip(batch, hyps, strict=True):
            i, j = items[b]
            drawn.setdefault(i, [None] * n)[j] = h
            left[i] -= 1
            if not left[i]:
                results[i] = drawn.pop(i)  # type: ignore[assignment]
                done += 1
        if on_batch is not None and done:
            on_batch(done)
    return results
