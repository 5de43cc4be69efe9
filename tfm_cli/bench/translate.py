"""`tfm bench translate`: translation throughput and latency, greedy and beam, with and without the K/V cache.

Equal work is compared: every source has `src_len` random token ids and every output is forced to exactly
`out_len` tokens (min_len = max length: no end-of-sentence before, nothing after), so the figures do not depend
on what a model happens to say, and a trained model and random weights of the same shape cost the same.
Sentences are cut into batches of `batch_size` in order (every batch full: `sentences` must be a multiple of
it); one batch is translated untimed first (warm-up), then each batch is timed on its own (device synchronised),
giving latency percentiles per batch and throughput over the whole set. tfm's search decodes one more step than the output length: the forced end-of-sentence (the peers,
MarianMT's `generate` and CTranslate2, stop after out_len steps without one).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from tfm_cli.bench.common import (
    MODEL_SETTINGS,
    environment,
    memory_budget_bytes,
    percentile,
    summarize,
    synchronize,
)
from tfm_cli.bench.peers import Translate
from tfm_cli.decoding import TorchEngine, translate_ids
from tfm_cli.model import Transformer
from tfm_cli.quantization import linear_layers, quantize_int8
from tfm_cli.runtime import autocast

Progress = Callable[[str, int, int], None]  # (what, done, total)
MODES = ("beam", "greedy")


def random_sources(model: Transformer, count: int, length: int, seed: int = 0) -> list[list[int]]:
    """`count` sources of `length` ids drawn from the vocabulary's ordinary tokens (specials excluded)."""
    cfg = model.config
    specials = {cfg.pad_id, cfg.bos_id, cfg.eos_id}
    low = max(specials) + 1
    if low >= cfg.vocab_size:
        raise ValueError(f"vocabulary of {cfg.vocab_size} has no ordinary tokens")
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, cfg.vocab_size, (count, length), generator=g).tolist()


SOURCE_TOKEN_BYTES = 44  # a source token held as a Python int in a list (and, briefly, in an int64 tensor)


def _check_memory(
    model: Transformer, device: torch.device, sentences: int, src_len: int, out_len: int, batch_sizes: Sequence[int],
    rows_per_sentence: int,
) -> None:
    """Refuse, before any work, sources or a batch that could not fit (it was an allocation failure deep in torch,
    or an integer overflow): a rough upper bound of the sources held in memory, and per batch of the search's
    K/V cache, encoder output and fp32 scores over the vocabulary (twice: logits and log-probabilities)."""
    budget = memory_budget_bytes(device)
    gib = 2**30
    held = sentences * src_len * SOURCE_TOKEN_BYTES
    if held > budget:
        raise ValueError(
            f"{sentences:,} sources of {src_len} tokens need ~{held / gib:,.1f} GiB of memory, more than the "
            f"{budget / gib:,.1f} GiB a benchmark may use here; lower --sentences"
        )
    cfg = model.config
    for size in batch_sizes:
        rows = size * rows_per_sentence
        cache = 2 * cfg.n_dec_layers * rows * (out_len + 1 + src_len) * cfg.d_model
        need = 4 * (cache + size * src_len * cfg.d_model * 2 + 2 * rows * cfg.vocab_size)
        if need > budget:
            raise ValueError(
                f"a batch of {size:,} sentences ({rows:,} hypotheses) needs ~{need / gib:,.1f} GiB for its K/V cache and "
                f"scores, more than the {budget / gib:,.1f} GiB a benchmark may use here; lower --batch-sizes"
            )


def bench_translate(
    model: Transformer,
    device: torch.device,
    precision: str = "fp32",
    batch_sizes: Sequence[int] = (1, 8, 32),
    sentences: int = 64,
    src_len: int = 20,
    out_len: int = 24,
    modes: Sequence[str] = MODES,
    beam: int = 4,
    cache: Sequence[bool] = (True, False),
    compare: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Sentences/s, generated tokens/s and per-batch latency p50/p95 for each (engine, mode, cache, batch size).

    Every engine's warm-up batch is checked to produce exactly `out_len` tokens per sentence (equal work).

    With `compare`, two peers run the same batches, with their cache: Hugging Face MarianMT's `generate` with
    the same shapes and random weights ("hf-marian", the `bench` extra), and CTranslate2 with this model's own
    weights converted through the huggingface export ("ct2", the `ctranslate2` extra; float32 on CPU unless it
    supports the precision, see `peers.ct2_compute_type`). The summary gives tfm's throughput over each for
    every mode and batch size. A peer that cannot run here (ctranslate2 not installed, a model MarianMT has no
    equivalent of) is left out, and `summary.notes` says why; the peers' versions and settings are in
    `settings.peers`, their versions also in the environment.

    Raises:
        ValueError: lengths the model cannot hold, a beam wider than the vocabulary, an unknown mode, or a number
            of sentences that some batch size does not divide.
        TfmError: `compare` without transformers installed.
    """
    if src_len + 1 > model.config.max_positions or out_len + 1 > model.config.max_positions:
        raise ValueError(f"src_len and out_len must stay below the model's max_positions={model.config.max_positions}")
    ragged = [size for size in batch_sizes if sentences % size]
    if ragged:  # a smaller last batch would be timed as one of the full size (its latency, p50 and p95)
        raise ValueError(f"sentences={sentences} is not a multiple of the batch size {ragged[0]}")
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ValueError(f"unknown mode(s) {bad}; use {MODES}")
    if "beam" in modes and beam > model.config.vocab_size:  # as the Translator: a huge beam failed deep in torch
        raise ValueError(f"beam={beam} is wider than the model's vocabulary ({model.config.vocab_size:,} tokens)")
    _check_memory(model, device, sentences, src_len, out_len, batch_sizes, beam if "beam" in modes else 1)
    model = model.to(device).eval()
    sources = random_sources(model, sentences, src_len)
    amp = (lambda: autocast(device, precision)) if precision not in ("fp32", "int8") else None
    tfm_model = model
    if precision == "int8":  # int8 linear layers (CPU); the peers get their int8 too
        tfm_model = quantize_int8(model)
    engines_by_cache = {cache: TorchEngine(tfm_model, cache) for cache in (True, False)}  # built once, as Translator does

    def tfm(batch: list[list[int]], mode: str, use_cache: bool) -> list[int]:
        hyps = translate_ids(
            engines_by_cache[use_cache], batch, beam_size=beam, alpha=0.6, max_len_offset=out_len - src_len, min_len=out_len,  # max = min = out_len
            max_tokens=10**9, greedy=mode == "greedy", autocast=amp, use_cache=use_cache,
        )
        return [len(h[0].tokens) for h in hyps]

    engines: list[tuple[str, Translate]] = [("tfm", tfm)]
    peers: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    if compare:
        from tfm_cli.bench.peers import PeerUnavailable, ct2_translator, marian_peer

        for name, make in (
            ("hf-marian", lambda: marian_peer(model.config, device, precision, beam, out_len)),
            ("ct2", lambda: ct2_translator(model, device, precision, beam, out_len)),
        ):
            if progress is not None:  # CTranslate2 converts the model first: seconds for the base model
                progress(f"{name}: loading", 0, 1)
            try:
                peer = make()
            except PeerUnavailable as error:
                notes.append(f"{name} left out: {error}" + (f" ({error.hint})" if error.hint else ""))
                continue
            engines.append((name, peer.run))
            peers[name] = peer.settings
            notes.extend(peer.notes)

    records = []
    for engine, run in engines:
        for mode in modes:
            for use_cache in cache if engine == "tfm" else (True,):
                for size in batch_sizes:
                    label = f"{engine} {mode} {'cache' if use_cache else 'no-cache'} batch {size}"
                    record = _measure(run, sources, out_len, size, mode, use_cache, device, progress, label)
                    record.update(
                        id=f"translate/{engine}/{mode}/{'cache' if use_cache else 'no-cache'}/batch={size}",
                        engine=engine, peer=engine != "tfm", mode=mode, cache=use_cache, batch_size=size,
                    )
                    records.append(record)
    settings = {
        "sentences": sentences, "src_len": src_len, "out_len": out_len, "beam": beam, "modes": list(modes),
        "batch_sizes": list(batch_sizes), "precision": precision,
        "model": {k: getattr(model.config, k) for k in MODEL_SETTINGS},
        "linear_layers": linear_layers(tfm_model),  # tfm's, int8 and floating point: what it timed
        "peers": peers,
    }
    env = environment(device, precision)
    if "ct2" in peers:
        env["ctranslate2"] = peers["ct2"]["version"]
        env["ctranslate2_compute_type"] = peers["ct2"]["compute_type"]
    if "hf-marian" in peers:
        env["transformers"] = peers["hf-marian"]["version"]
    return {
        "kind": "translate", "environment": env, "settings": settings,
        "records": records, "summary": {"ratios": _ratios(records), "notes": notes},
    }


def _measure(
    run, sources, out_len: int, size: int, mode: str, use_cache: bool, device, progress, label: str
) -> dict[str, Any]:
    batches = [sources[i : i + size] for i in range(0, len(sources), size)]
    lengths = run(batches[0], mode, use_cache)  # warm-up (kernels, allocator), and a check of equal work
    if set(lengths) != {out_len}:
        raise RuntimeError(f"{label}: outputs of {sorted(set(lengths))} tokens, not the forced {out_len}")
    times = []
    for i, batch in enumerate(batches):
        synchronize(device)
        start = time.perf_counter()
        run(batch, mode, use_cache)
        synchronize(device)
        times.append(time.perf_counter() - start)
        if progress is not None:
            progress(label, i + 1, len(batches))
    total = sum(times)
    stats = summarize(times)
    return {
        "sentences_per_s": len(sources) / total,
        "tokens_per_s": len(sources) * out_len / total,  # generated tokens
        "latency_p50_ms": percentile(times, 50) * 1000,
        "latency_p95_ms": percentile(times, 95) * 1000,
        "spread": stats["spread"],
        "batches": len(batches),
    }


def _ratios(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """tfm with cache over each other engine and over tfm without cache, per mode and batch size."""
    def key(r):
        return (r["mode"], r["batch_size"])

    tfm = {key(r): r for r in records if r["engine"] == "tfm" and r["cache"]}
    out = []
    for r in records:
        base = tfm.get(key(r))
        if base is None or r is base:
            continue
        against = r["engine"] if r["engine"] != "tfm" else "tfm without cache"
        out.append({
            "mode": r["mode"], "batch_size": r["batch_size"], "against": against,
            "ratio": base["sentences_per_s"] / r["sentences_per_s"],
        })
    return out
