"""Parallel corpora, token-based length-bucketed batching, and the training Batch.

The pipeline is: `tfm_cli.corpus.read_pairs` streams (line_no, src, tgt) from a corpus file (or a pair of
files), `encode_corpus` turns them into one compact `TokenizedCorpus` (flat id buffers + offsets), `token_batches`
groups indices into batches of at most `max_tokens` padded tokens per side, sorted by length like fairseq, and
`make_batch` pads them into a `Batch` (Annotated Transformer: src, tgt_in, tgt_out and their masks).
`BatchStream` repeats this epoch after epoch and can resume at the exact next batch; it pads straight from the
corpus's id buffers with tensor operations (`corpus_batch`), the same batches as `make_batch` at a fraction of
the host time. `tfm_cli.batches.Prefetcher` builds them ahead of the training step, on a background thread on CUDA.
"""

from __future__ import annotations

import hashlib
import random
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import torch

from tfm_cli.corpus import (
    CorpusSpec,
    TsvColumns,
    corpus_parts,
    describe,
    has_text,
    is_mixture,
    read_pairs,
    surely_longer,
)
from tfm_cli.errors import TfmError
from tfm_cli.model.masks import padding_mask, target_mask
from tfm_cli.sentences import with_number_placeholders


class _Encoder(Protocol):
    """What encode_corpus needs from a tokenizer (tfm_cli.tokenizer.Tokenizer has it)."""

    @property
    def vocab_size(self) -> int: ...

    def encode_batch(self, texts: list[str]) -> list[list[int]]: ...


# ---- the tokenized corpus -------------------------------------------------------------------------------


@dataclass
class CorpusStats:
    """What `encode_corpus` did with the pairs it read."""

    read: int  # pairs read from the file(s)
    kept: int  # pairs stored
    skipped_empty: int  # a side was empty after normalisation
    skipped_long: int  # a side had more than max_len - 1 tokens
    columns_warning: str | None = None  # a TSV file with a few lines of more than two columns (`TsvColumns`)


@dataclass
class MixturePart:
    """One corpus of a mixture as `encode_corpus` read it: its place, its file(s), its weight, and its counts
    (its kept pairs follow those of the corpora before it in the `TokenizedCorpus`)."""

    number: int  # its place in data.train's list, 1-based
    name: str  # its file(s) (`corpus.describe`)
    weight: float
    stats: CorpusStats


class TokenizedCorpus:
    """Token ids of a parallel corpus, stored once: a flat id buffer and an offsets buffer per side.

    Ids are uint16 when the vocabulary has at most 65,536 entries (ids up to 65,535), int32 otherwise; offsets are int64.
    `src(i)` and `tgt(i)` return the ids of pair i without BOS/EOS.
    """

    def __init__(
        self,
        src_ids: array,
        src_offsets: array,
        tgt_ids: array,
        tgt_offsets: array,
        stats: CorpusStats | None = None,
        mixture: list[MixturePart] | None = None,
    ) -> None:
        if len(src_offsets) != len(tgt_offsets) or len(src_offsets) == 0:
            raise ValueError(
                "src_offsets and tgt_offsets must have the same length, at least 1 (a leading 0)"
            )
        self._src_ids, self._src_offsets = src_ids, src_offsets
        self._tgt_ids, self._tgt_offsets = tgt_ids, tgt_offsets
        n = len(src_offsets) - 1
        self.stats = (
            stats if stats is not None else CorpusStats(read=n, kept=n, skipped_empty=0, skipped_long=0)
        )
        self.mixture = mixture  # the corpora of a mixture, in order (`epoch_pairs`); None: one corpus
        if mixture is not None and sum(part.stats.kept for part in mixture) != n:
            raise ValueError(f"the mixture's corpora keep {sum(p.stats.kept for p in mixture)} pairs, the corpus {n}")
        self.src_lengths = _diff(src_offsets)
        self.tgt_lengths = _diff(tgt_offsets)
        self._views: tuple[torch.Tensor, ...] | None = None  # see id_tensors()

    @classmethod
    def from_sequences(
        cls, src_seqs: Sequence[Sequence[int]], tgt_seqs: Sequence[Sequence[int]], vocab_size: int = 65536
    ) -> TokenizedCorpus:
        """Build a corpus from lists of ids (handy for tests and small data)."""
        if len(src_seqs) != len(tgt_seqs):
            raise ValueError(f"{len(src_seqs)} source but {len(tgt_seqs)} target sequences")
        code = _id_typecode(vocab_size)
        bufs = [array(code), array("q", [0]), array(code), array("q", [0])]
        for s, t in zip(src_seqs, tgt_seqs, strict=True):
            _append(bufs[0], bufs[1], s)
            _append(bufs[2], bufs[3], t)
        return cls(*bufs)

    def __len__(self) -> int:
        return len(self._src_offsets) - 1

    def src(self, i: int) -> list[int]:
        """Source ids of pair i (no EOS)."""
        return self._slice(self._src_ids, self._src_offsets, i)

    def tgt(self, i: int) -> list[int]:
        """Target ids of pair i (no BOS/EOS)."""
        return self._slice(self._tgt_ids, self._tgt_offsets, i)

    def digest(self) -> str:
        """A hash of the pairs' ids, in order: what a checkpoint saves to tell, at a resume, a corpus file changed in
        place (same path, other pairs), whose batches are no longer those the run trained on."""
        h = hashlib.blake2b(digest_size=16)
        for buffer in (self._src_offsets, self._src_ids, self._tgt_offsets, self._tgt_ids):
            h.update(buffer.typecode.encode())
            h.update(memoryview(buffer).cast("B"))
        if self.mixture is not None and any(part.weight != 1 for part in self.mixture):  # where each corpus starts,
            h.update(repr([part.stats.kept for part in self.mixture]).encode())  # which its weights batch (not alike all 1)
        return h.hexdigest()

    def id_tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(src_ids, src_starts, tgt_ids, tgt_starts): the flat id buffers as 1-D tensors (uint16 or int32) and
        where each pair's ids start in them (int64, N). Views of the buffers, not copies."""
        if self._views is None:
            self._views = (
                *_ids_and_starts(self._src_ids, self._src_offsets),
                *_ids_and_starts(self._tgt_ids, self._tgt_offsets),
            )
        return self._views

    def _slice(self, ids: array, offsets: array, i: int) -> list[int]:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"pair index {i} out of range for a corpus of {n} pairs")
        i %= n
        return ids[offsets[i] : offsets[i + 1]].tolist()

    def __repr__(self) -> str:
        return f"TokenizedCorpus({len(self)} pairs, {self.stats})"


def _id_typecode(vocab_size: int) -> str:
    return "H" if vocab_size <= 1 << 16 else "i"  # uint16 (ids <= 65535) or int32


def _append(ids: array, offsets: array, seq: Sequence[int]) -> None:
    ids.extend(seq)
    offsets.append(len(ids))


def _ids_and_starts(ids: array, offsets: array) -> tuple[torch.Tensor, torch.Tensor]:
    dtype = {"H": torch.uint16, "i": torch.int32}[ids.typecode]
    flat = torch.frombuffer(ids, dtype=dtype) if len(ids) else torch.zeros(1, dtype=dtype)  # no empty buffers
    return flat, torch.frombuffer(offsets, dtype=torch.int64)[:-1]


def _diff(offsets: array) -> torch.Tensor:
    """(N+1,) offsets -> (N,) long lengths."""
    t = torch.frombuffer(offsets, dtype=torch.int64)  # a view of the array; the difference is a new tensor
    return t[1:] - t[:-1]


def encode_corpus(
    spec: CorpusSpec, tokenizer: _Encoder, max_len: int, chunk_size: int = 20000,
    progress: Callable[[int], None] | None = None, numbers: bool = False,
) -> TokenizedCorpus:
    """Read and tokenize a corpus in chunks, keeping only pairs that fit the model.

    Args:
        spec: a corpus spec (see `tfm_cli.corpus.read_pairs`).
        tokenizer: a `tfm_cli.tokenizer.Tokenizer` (anything with `vocab_size` and `encode_batch`).
        max_len: the longest training sequence (`data.max_len`, at most the model's `max_positions`). A side may
            have at most max_len - 1 tokens, leaving room for the EOS (source, tgt_out) or BOS (tgt_in).
        chunk_size: pairs per batched encoder call; bounds the temporary memory.
        progress: called with the number of pairs read so far after each chunk (millions of lines take minutes).
        numbers: each number a pair has on both sides as a placeholder (`sentences.with_number_placeholders`), for
            a model that reads numbers so (`ModelConfig.numbers`).

    Returns:
        The TokenizedCorpus, with `stats` saying how many pairs were read, kept and skipped.

    Raises:
        CorpusError: as `read_pairs`.
        TfmError: max_len < 2 or chunk_size < 1.
    """
    if max_len < 2:
        raise TfmError(f"max_len={max_len} must be at least 2 (one token plus BOS/EOS)")
    if chunk_size < 1:
        raise TfmError(f"chunk_size={chunk_size} must be at least 1")
    code = _id_typecode(tokenizer.vocab_size)
    src_ids, src_offsets = array(code), array("q", [0])
    tgt_ids, tgt_offsets = array(code), array("q", [0])
    stats = CorpusStats(read=0, kept=0, skipped_empty=0, skipped_long=0)
    limit = max_len - 1
    # a side of more characters than `limit` pieces can hold is too long whatever its pieces: skipped unencoded (a
    # 100 MB line took 9.5 GB and 9 minutes to encode, only to be skipped)
    longest = getattr(tokenizer, "longest_piece", None)

    def surely_long(text: str) -> bool:
        return longest is not None and surely_longer(text, limit, longest)

    def flush(srcs: list[str], tgts: list[str]) -> None:
        if longest is not None:
            fits = [not (surely_long(s) or surely_long(t)) for s, t in zip(srcs, tgts, strict=True)]
            if not all(fits):
                for s, t, ok in zip(srcs, tgts, fits, strict=True):
                    if not ok:  # an empty side is said first, as the encoded pair's check says it
                        empty = not has_text(s) or not has_text(t)
                        stats.skipped_empty += empty
                        stats.skipped_long += not empty
                srcs = [s for s, ok in zip(srcs, fits, strict=True) if ok]
                tgts = [t for t, ok in zip(tgts, fits, strict=True) if ok]
        for s, t in zip(tokenizer.encode_batch(srcs), tokenizer.encode_batch(tgts), strict=True):
            if not s or not t:
                stats.skipped_empty += 1
            elif len(s) > limit or len(t) > limit:
                stats.skipped_long += 1
            else:
                _append(src_ids, src_offsets, s)
                _append(tgt_ids, tgt_offsets, t)
                stats.kept += 1

    parts = corpus_parts(spec)
    columns = [TsvColumns() for _ in parts]
    readers = [read_pairs(part.spec, columns=c) for part, c in zip(parts, columns, strict=True)]  # every file checked first
    mixture: list[MixturePart] = []
    for part, pairs, counted in zip(parts, readers, columns, strict=True):
        before = replace(stats)
        srcs: list[str] = []
        tgts: list[str] = []
        for _, src, tgt in pairs:
            stats.read += 1
            if numbers:
                src, tgt = with_number_placeholders(src, tgt)
            srcs.append(src)
            tgts.append(tgt)
            if len(srcs) >= chunk_size:
                flush(srcs, tgts)
                srcs, tgts = [], []
                if progress is not None:
                    progress(stats.read)
        if srcs:
            flush(srcs, tgts)
        mixture.append(MixturePart(part.number, describe(part.spec), part.weight, CorpusStats(
            stats.read - before.read, stats.kept - before.kept, stats.skipped_empty - before.skipped_empty,
            stats.skipped_long - before.skipped_long, counted.warning())))
    if not is_mixture(spec):  # (a mixture's: each corpus's own, in `mixture`)
        stats.columns_warning = mixture[0].stats.columns_warning
    return TokenizedCorpus(src_ids, src_offsets, tgt_ids, tgt_offsets, stats, mixture if is_mixture(spec) else None)


# ---- batches ---------------------------------------------------------------------------------------------


@dataclass
class Batch:
    """One padded batch (the Annotated Transformer's Batch). B = batch size, S/T = source/target length.

    src      (B, S) long  source ids + EOS, right-padded
    tgt_in   (B, T) long  BOS + target ids (decoder input), right-padded; None when translating
    tgt_out  (B, T) long  target ids + EOS (what the decoder must predict), right-padded; None when translating
    src_mask (B, 1, 1, S) bool, True = real key; tgt_mask (B, 1, T, T) bool, causal and padding
    n_src_tokens, n_tgt_tokens: real (non-pad) tokens in src and in tgt_out
    tgt_keep (n_tgt_tokens,) long: the flat positions of tgt_out that are not padding, found on the host when the
        batch is built, so that the loss picks them on the GPU with no host synchronisation; None when translating
    indices: corpus index of each row
    step_tgt_tokens: in multi-process training, where this batch is one rank's share of a global batch, the
        target tokens of the whole global batch (what the loss is divided by); None for a whole batch
    """

    src: torch.Tensor
    tgt_in: torch.Tensor | None
    tgt_out: torch.Tensor | None
    src_mask: torch.Tensor
    tgt_mask: torch.Tensor | None
    n_src_tokens: int
    n_tgt_tokens: int
    indices: list[int]
    step_tgt_tokens: int | None = None
    tgt_keep: torch.Tensor | None = None

    def _map(self, fn) -> Batch:
        """A copy with `fn` applied to every tensor (None stays None)."""
        names = ("src", "tgt_in", "tgt_out", "src_mask", "tgt_mask", "tgt_keep")
        tensors = {name: getattr(self, name) for name in names}
        moved = {name: None if t is None else fn(t) for name, t in tensors.items()}
        return replace(self, **moved, indices=list(self.indices))

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """A copy with every tensor on `device`."""
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> Batch:
        """A copy with every tensor in pinned (page-locked) host memory, so that `.to("cuda", non_blocking=True)`
        is an asynchronous copy that overlaps the GPU's work. Needs CUDA."""
        return self._map(lambda t: t.pin_memory())


# On CUDA the padded lengths S and T of training batches may be rounded up to a multiple of this: 1 (off) for
# now, the measurements of the question below waiting for a GPU session (issue #11). A batch shape
# the GPU has not met before costs kernel selection and planning on its first step; rounding leaves far fewer
# shapes (the tiny recipe's first 200 batches: 13 (S, T) pairs instead of 99, 48 (B, S, T) shapes instead of
# 100, B still varying) for more padded positions (there 28% of them instead of 3%). The extra positions are
# masked like all padding, so the loss is unchanged up to float rounding; dropout draws its masks over the
# padded shape, so the random masks (not their distribution) differ from unrounded batches. The CPU plans
# nothing per shape worth that compute, so CPU batches (and their bit-exact resume) are not rounded. On CUDA it
# is off (1) until a GPU shows that the shapes saved pay for the positions added (about 12% more for the base
# recipe's sentences, 34% for the quickstart's): `make_batch(..., pad_multiple=8)` and BatchStream take it, and
# `token_batches` counts the rounded widths against max_tokens (fewer sentences per batch, never more tokens).
CUDA_PAD_MULTIPLE = 1


def pad_multiple_for(device: torch.device | str) -> int:
    """The multiple that training batches' lengths are padded to on `device`: CUDA_PAD_MULTIPLE on CUDA, else 1."""
    return CUDA_PAD_MULTIPLE if torch.device(device).type == "cuda" else 1


def _round_up(n, multiple: int):
    """`n` (an int or a tensor of them) rounded up to a multiple of `multiple`."""
    return -(-n // multiple) * multiple


def _pad(seqs: list[list[int]], pad_id: int, multiple: int = 1) -> torch.Tensor:
    width = _round_up(max(len(s) for s in seqs), multiple)
    return torch.tensor([s + [pad_id] * (width - len(s)) for s in seqs], dtype=torch.long)


def make_batch(
    src_seqs: Sequence[Sequence[int]],
    tgt_seqs: Sequence[Sequence[int]] | None,
    pad_id: int,
    bos_id: int,
    eos_id: int,
    indices: Sequence[int] | None = None,
    pad_multiple: int = 1,
) -> Batch:
    """Pad token sequences (without specials) into a Batch; `tgt_seqs=None` for translation.

    `pad_multiple` rounds the padded lengths S and T up to a multiple of it (see `pad_multiple_for`).

    Raises:
        ValueError: no sequences, or source and target counts differ.
    """
    if len(src_seqs) == 0:
        raise ValueError("make_batch needs at least one sequence")
    if tgt_seqs is not None and len(tgt_seqs) != len(src_seqs):
        raise ValueError(f"{len(src_seqs)} source but {len(tgt_seqs)} target sequences")
    src = _pad([list(s) + [eos_id] for s in src_seqs], pad_id, pad_multiple)  # (B, S)
    tgt_in = tgt_out = None
    if tgt_seqs is not None:
        tgt_in = _pad([[bos_id, *t] for t in tgt_seqs], pad_id, pad_multiple)  # (B, T)
        tgt_out = _pad([[*t, eos_id] for t in tgt_seqs], pad_id, pad_multiple)  # (B, T)
    return _batch(src, tgt_in, tgt_out, pad_id, list(indices) if indices is not None else list(range(len(src_seqs))))


def _batch(
    src: torch.Tensor, tgt_in: torch.Tensor | None, tgt_out: torch.Tensor | None, pad_id: int, indices: list[int]
) -> Batch:
    """A Batch around padded id tensors: the masks and token counts added."""
    return Batch(
        src=src,
        tgt_in=tgt_in,
        tgt_out=tgt_out,
        src_mask=padding_mask(src, pad_id),  # (B, 1, 1, S)
        tgt_mask=None if tgt_in is None else target_mask(tgt_in, pad_id),  # (B, 1, T, T)
        n_src_tokens=int((src != pad_id).sum()),
        n_tgt_tokens=0 if tgt_out is None else int((tgt_out != pad_id).sum()),
        indices=indices,
        tgt_keep=None if tgt_out is None else non_pad_positions(tgt_out, pad_id),
    )


def non_pad_positions(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(N,) long: the positions in `ids.reshape(-1)` that are not `pad_id`, in order."""
    return (ids.reshape(-1) != pad_id).nonzero().squeeze(1)


def corpus_batch(
    corpus: TokenizedCorpus, indices: Sequence[int], pad_id: int, bos_id: int, eos_id: int, pad_multiple: int = 1
) -> Batch:
    """The training Batch of pairs `indices` of `corpus`: equal to `make_batch` on their ids, tensor for tensor.

    The ids are gathered from the corpus's flat buffers with tensor indexing rather than padded in Python lists:
    a batch of thousands of sentences takes a millisecond or two instead of tens of milliseconds, and the work
    runs outside the GIL, so a prefetching thread does not hold up the training thread.
    """
    if len(indices) == 0:
        raise ValueError("corpus_batch needs at least one pair")
    rows = torch.tensor(list(indices), dtype=torch.long)
    src_ids, src_starts, tgt_ids, tgt_starts = corpus.id_tensors()
    src_len, tgt_len = corpus.src_lengths[rows], corpus.tgt_lengths[rows]  # (B,) without specials
    src_width = _round_up(int(src_len.max()) + 1, pad_multiple)  # + EOS
    tgt_width = _round_up(int(tgt_len.max()) + 1, pad_multiple)  # + BOS on tgt_in, + EOS on tgt_out
    src = _gather_rows(src_ids, src_starts[rows], src_len, src_width, pad_id, after=eos_id)  # (B, S)
    tgt_in = _gather_rows(tgt_ids, tgt_starts[rows], tgt_len, tgt_width, pad_id, before=bos_id)  # (B, T)
    tgt_out = _gather_rows(tgt_ids, tgt_starts[rows], tgt_len, tgt_width, pad_id, after=eos_id)  # (B, T)
    return _batch(src, tgt_in, tgt_out, pad_id, list(indices))


def _gather_rows(
    flat: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor, width: int, pad_id: int,
    before: int | None = None, after: int | None = None,
) -> torch.Tensor:
    """(B, width) long: row b holds `before` (if given), flat[starts[b] : starts[b] + lengths[b]], `after` (if
    given), then `pad_id` up to `width`."""
    shift = int(before is not None)
    pos = torch.arange(width) - shift  # (W,) each column's index within its sentence
    inside = (pos >= 0) & (pos < lengths[:, None])  # (B, W)
    where = (starts[:, None] + pos).clamp_(0, flat.numel() - 1)  # (B, W); outside the sentence: any valid index
    rows = torch.where(inside, flat[where].long(), pad_id)
    if before is not None:
        rows[:, 0] = before
    if after is not None:
        rows[torch.arange(rows.size(0)), lengths + shift] = after
    return rows


def _lengths_array(lengths: torch.Tensor | Sequence[int]) -> np.ndarray:
    array_ = lengths.numpy() if isinstance(lengths, torch.Tensor) else np.asarray(lengths)
    return array_.astype(np.int64).reshape(-1)


def token_batches(
    src_lengths: torch.Tensor | Sequence[int],
    tgt_lengths: torch.Tensor | Sequence[int],
    max_tokens: int,
    seed: int,
    epoch: int,
    shuffle: bool = True,
    pad_multiple: int = 1,
    places: np.ndarray | None = None,
    index: np.ndarray | None = None,
) -> list[list[int]]:
    """Group pair indices into batches of at most `max_tokens` padded tokens per side (fairseq-style buckets).

    Pairs are sorted by (target length, source length), ties broken at random, then cut greedily so that
    batch size * (longest sequence + 1 for BOS/EOS, rounded up to a multiple of `pad_multiple` as the batch
    will be padded) <= max_tokens on each side. A pair that alone exceeds
    max_tokens gets a batch of its own. Finally the order of the batches is shuffled. Both random steps use a
    generator seeded by (seed, epoch): equal arguments give equal batches.

    Args:
        src_lengths, tgt_lengths: (N,) token counts without specials.
        max_tokens: padded-token budget per side.
        seed, epoch: seed the random tie-break and batch shuffle.
        shuffle: False keeps pairs and batches in sorted order, ties by index (for evaluation).
        pad_multiple: the batches' padded lengths will be rounded up to a multiple of it (`pad_multiple_for`).
        places: (N,) numbers in [0, 1) that order pairs of equal lengths in place of the random tie-break: a
            mixture's epoch spreads the copies of a pair evenly among the pairs of its lengths with them
            (`BatchStream.batches`), so that they share a batch only where fewer pairs of those lengths than
            batches' worth lie between them; the batches are cut as full as ever.
        index: (N,) what the batches hold of each pair (a mixture's epoch: its index in the corpus); default, its
            position in the lengths.

    Returns:
        A list of batches, each a list of corpus indices.
    """
    if max_tokens < 1:
        raise TfmError(f"max_tokens={max_tokens} must be positive (try 4096)")
    src_len, tgt_len = _lengths_array(src_lengths), _lengths_array(tgt_lengths)
    if len(src_len) != len(tgt_len):
        raise ValueError(f"{len(src_len)} source but {len(tgt_len)} target lengths")
    rng = random.Random(f"tfm-batches:{seed}:{epoch}")
    order = np.arange(len(src_len))
    if shuffle:
        rng.shuffle(order)  # in place; the stable sort below keeps this random order among equal lengths
    if len(order):  # sort by (tgt, src) as one key (tgt, src + place in [0, 1) for a mixture's epoch)
        key = tgt_len[order] * (int(src_len.max()) + 1) + src_len[order]
        if places is not None:  # (lengths of 4,096 make keys below 2**24: a float64 keeps 28 bits of the place)
            key = key.astype(np.float64)
            key += places[order]
        order = order[np.argsort(key, kind="stable")]

    # + EOS on src and tgt_out, + BOS on tgt_in; the batch from `start` is the longest prefix that fits
    src_width = _round_up(src_len[order] + 1, pad_multiple)  # (elementwise: lengths are tensors here)
    tgt_width = _round_up(tgt_len[order] + 1, pad_multiple)
    held = order if index is None else index[order]  # what a batch holds of each pair, in order
    batches: list[list[int]] = []
    start = 0
    while start < len(order):
        # no batch from `start` holds more pairs than max_tokens // (its first pair's width)
        end = min(len(order), start + max_tokens // max(src_width[start], tgt_width[start]) + 1)
        size = np.arange(1, end - start + 1)
        fits = (size * np.maximum.accumulate(src_width[start:end]) <= max_tokens) & (
            size * np.maximum.accumulate(tgt_width[start:end]) <= max_tokens
        )
        n = max(int(np.count_nonzero(fits)), 1)  # True then False; a pair too long alone gets a batch of its own
        batches.append(held[start : start + n].tolist())
        start += n
    if shuffle:
        rng.shuffle(batches)
    return batches


def epoch_layers(mixture: Sequence[MixturePart], seed: int, epoch: int) -> list[np.ndarray]:
    """The pair indices an epoch of a mixture trains on, in rounds that hold a pair once at most: each corpus's pairs
    in as many rounds as its weight's whole part (weight 2: in the first two), and for the rest of its weight a
    share of its pairs drawn at random, again each epoch, in the round after those (0.5: a random half in the first;
    1.5: all in the first and a random half in the second). The draws come from a generator seeded by (seed, epoch),
    as `token_batches`' is: the same arguments give the same pairs. `BatchStream` spreads a pair's copies (its
    rounds) evenly among the pairs of its lengths (length bucketing puts equal lengths together: in a random order
    among them, the two copies of a pair of weight 2 mostly shared a batch)."""
    rng = random.Random(f"tfm-mixture:{seed}:{epoch}")
    layers: dict[int, list[np.ndarray]] = {}
    start = 0
    for part in mixture:
        n = part.stats.kept
        whole, rest = divmod(part.weight, 1.0)
        for layer in range(int(whole)):
            layers.setdefault(layer, []).append(np.arange(start, start + n))
        if k := round(rest * n):
            layers.setdefault(int(whole), []).append(start + np.sort(np.asarray(rng.sample(range(n), k), dtype=np.int64)))
        start += n
    return [np.concatenate(layers[layer]) for layer in sorted(layers)]


def epoch_pairs(mixture: Sequence[MixturePart], seed: int, epoch: int) -> np.ndarray:
    """Every pair index an epoch of a mixture trains on, as many times as it does (`epoch_layers`, joined)."""
    layers = epoch_layers(mixture, seed, epoch)
    return np.concatenate(layers) if layers else np.zeros(0, dtype=np.int64)


def pairs_taken(n: int, weight: float) -> int:
    """How many pairs an epoch takes of a corpus of `n` pairs and that weight (`epoch_layers`)."""
    whole, rest = divmod(weight, 1.0)
    return int(whole) * n + round(rest * n)


def pairs_an_epoch(mixture: Sequence[MixturePart]) -> list[int]:
    """How many pairs of each corpus of a mixture an epoch trains on (`epoch_layers`)."""
    return [pairs_taken(part.stats.kept, part.weight) for part in mixture]


class BatchStream:
    """Endless training batches, epoch after epoch, resumable at the exact next batch.

    Epoch e uses `token_batches(..., seed, epoch=e)`. `epoch` starts at 1; `position` is the index of the next
    batch within the epoch. `state_dict()` taken after any batch, given to `load_state_dict` of a new stream over
    the same corpus and settings, makes it yield exactly the batches that would have come next.

    In multi-process training every rank builds the same global batches (`max_tokens` is the global budget) and
    yields only its share of each (see `shard`), so the state is the same on every rank.
    """

    def __init__(
        self,
        corpus: TokenizedCorpus,
        max_tokens: int,
        seed: int,
        pad_id: int,
        bos_id: int,
        eos_id: int,
        rank: int = 0,
        world_size: int = 1,
        pad_multiple: int = 1,
    ) -> None:
        if len(corpus) == 0:
            raise TfmError(
                "the training corpus has no pairs left after filtering (check data.max_len and the files)"
            )
        if corpus.mixture is not None and not sum(pairs_an_epoch(corpus.mixture)):
            raise TfmError(
                "the weights of data.train's corpora take no pair into an epoch (each weight times its corpus's pairs "
                "rounds to 0)", hint="raise the weights",
            )
        if max_tokens < 1:
            raise TfmError(f"max_tokens={max_tokens} must be positive (try 4096)")
        if pad_multiple < 1:
            raise ValueError(f"pad_multiple={pad_multiple} must be at least 1")
        self.corpus = corpus
        self.max_tokens = max_tokens
        self.seed = seed
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.rank, self.world_size = rank, world_size
        self.pad_multiple = pad_multiple  # padded lengths are rounded up to a multiple of it (pad_multiple_for)
        self.epoch = 1
        self.position = 0
        self._cache: tuple[int, list[list[int]]] | None = None

    def batches(self, epoch: int | None = None) -> list[list[int]]:
        """The batches (lists of corpus indices) of `epoch` (default: the current one)."""
        epoch = self.epoch if epoch is None else epoch
        if self._cache is None or self._cache[0] != epoch:
            c = self.corpus
            if c.mixture is None or all(part.weight == 1 for part in c.mixture):  # every pair once: as one corpus
                batches = token_batches(
                    c.src_lengths, c.tgt_lengths, self.max_tokens, self.seed, epoch, pad_multiple=self.pad_multiple
                )
            else:  # the epoch's pairs by the weights, batched as one corpus of them, each round after the one before
                layers = epoch_layers(c.mixture, self.seed, epoch)
                pairs = np.concatenate(layers)
                # a pair's copies are its rounds 0..copies-1: each at its own place among the pairs of its lengths,
                # (round + u) / copies with u drawn once a pair, so that they lie evenly apart (in place: an epoch
                # of millions of pairs)
                digest = hashlib.blake2b(f"tfm-mixture-places:{self.seed}:{epoch}".encode(), digest_size=8).digest()
                places = np.random.Generator(np.random.PCG64(int.from_bytes(digest, "little"))).random(len(c))[pairs]
                places += np.repeat(np.arange(len(layers), dtype=np.float64), [len(layer) for layer in layers])
                places /= np.bincount(pairs, minlength=len(c))[pairs]
                del layers
                rows = torch.from_numpy(pairs)
                batches = token_batches(
                    c.src_lengths[rows], c.tgt_lengths[rows], self.max_tokens, self.seed, epoch,
                    pad_multiple=self.pad_multiple, places=places, index=pairs,
                )
            self._cache = (epoch, batches)
        return self._cache[1]

    @property
    def num_batches(self) -> int:
        """Number of batches in the current epoch."""
        return len(self.batches())

    def __iter__(self) -> Iterator[Batch]:
        while True:
            batches = self.batches()
            if self.position >= len(batches):
                self.epoch += 1
                self.position = 0
                continue
            indices = batches[self.position]
            self.position += 1  # before the yield, so state_dict() after receiving a batch points past it
            yield self._make(indices) if self.world_size == 1 else self.shard(indices)

    def _make(self, indices: list[int]) -> Batch:
        return corpus_batch(self.corpus, indices, self.pad_id, self.bos_id, self.eos_id, self.pad_multiple)

    def shard(self, indices: list[int]) -> Batch:
        """This rank's share of the global batch `indices`: every `world_size`-th sentence from the `rank`-th.

        The sentences of a batch are sorted by length, so the strided shares have about the same number of
        tokens and the same padded width. `step_tgt_tokens` counts the target tokens of the whole batch.
        A batch with fewer sentences than ranks leaves some ranks without one: they get a sentence whose
        targets are all padding, which adds nothing to the loss or the gradients but still takes part in the
        gradient all-reduce that every rank must join.
        """
        total = int(self.corpus.tgt_lengths[indices].sum()) + len(indices)  # + EOS on each tgt_out
        share = indices[self.rank :: self.world_size]
        if share:
            return replace(self._make(share), step_tgt_tokens=total)
        idle = self._make(indices[:1])
        return replace(
            idle, tgt_out=torch.full_like(idle.tgt_out, self.pad_id), n_tgt_tokens=0, indices=[], step_tgt_tokens=total,
            tgt_keep=idle.tgt_keep[:0],
        )

    def state_dict(self) -> dict[str, int]:
        """{"epoch", "position"}: where the stream is."""
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue from a `state_dict()`.

        Raises:
            TfmError: the state is malformed or points past the end of its epoch (a different corpus or
                max_tokens than when it was saved).
        """
        try:
            epoch, position = int(state["epoch"]), int(state["position"])
        except (KeyError, TypeError, ValueError) as err:
            raise TfmError(
                f"batch stream state {state!r} is malformed: expected {{'epoch': int, 'position': int}}"
            ) from err
        if epoch < 1 or position < 0:
            raise TfmError(f"batch stream state {state!r} is invalid: epoch must be >= 1 and position >= 0")
        n = len(self.batches(epoch))
        if position > n:
            raise TfmError(
                f"batch stream state {state!r} points past the end of epoch {epoch}, which has {n} batches: "
                "resume with the same corpus, tokenizer, max_len and max_tokens as the saved run"
            )
        self.epoch, self.position = epoch, position
