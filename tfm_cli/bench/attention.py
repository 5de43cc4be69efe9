"""`tfm bench attention`: scaled dot-product attention over sequence lengths, the O(L^2) of the paper made visible.

Implementations compared on the same (B, H, L, Dh) inputs and mask:
  naive          the explicit formula softmax(Q K^T / sqrt(d_k)) V, as tfm's model runs it when weights are asked
                 for: it materialises the L x L matrix
  tfm            tfm's own fast path (`tfm_cli.model.attention`): what the model runs in training and translation,
                 as it runs it (bf16 and fp16 under autocast; on CPU with at most 128 keys the explicit formula,
                 whose L x L matrix is counted)
  sdpa-math      PyTorch SDPA forced to its math backend (also materialises L x L)
  sdpa-flash     SDPA's FlashAttention backend (on CPU, PyTorch's own fused kernel)
  sdpa-efficient SDPA's memory-efficient backend (CUDA)
  sdpa-cudnn     SDPA's cuDNN backend (CUDA)
A backend that refuses our inputs (e.g. flash with a boolean mask) is recorded as unsupported, with PyTorch's
reason; a length whose L x L matrices would not fit in memory is skipped for the implementations that build them.

FLOPs count the two matrix products of the formula: 4 B H Lq Lk d_k for the forward pass, three times that for
forward + backward (the backward pass has twice the forward's products); a causal mask halves the useful work.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from tfm_cli.bench.common import (
    DTYPES,
    environment,
    fit_exponent,
    memory_budget_bytes,
    peak_memory_mb,
    peak_memory_start,
    summarize,
    time_runs,
)
from tfm_cli.model.dropout import REDUCED
from tfm_cli.model.transformer import CPU_SHORT_KEYS, attention

DEFAULT_LENGTHS = (64, 128, 256, 512, 1024, 2048, 4096)
MASKS = ("none", "padding", "causal")
PASSES = ("forward", "forward+backward")
_BACKENDS = {
    "sdpa-math": SDPBackend.MATH,
    "sdpa-flash": SDPBackend.FLASH_ATTENTION,
    "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
    "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
}
MATERIALISES = {"naive", "sdpa-math"}  # implementations that build the (B, H, L, L) matrix (and `tfm` on short keys)
FIT_FROM = 256  # lengths below this are dominated by launch overheads; the growth exponent is fitted above


def implementations(device: torch.device) -> list[str]:
    """What can run on this device: every SDPA backend on CUDA, math and flash on CPU."""
    cuda_only = {"sdpa-efficient", "sdpa-cudnn"}
    names = ["naive", "tfm", *_BACKENDS]
    return [n for n in names if device.type == "cuda" or n not in cuda_only]


def _attention_fn(impl: str) -> Callable[..., torch.Tensor]:
    if impl == "naive":
        return lambda q, k, v, mask: attention(q, k, v, mask, need_weights=True)[0]
    if impl == "tfm":  # as the model calls it: in bf16 or fp16, under autocast (training, bf16 translation)

        def model_path(q, k, v, mask):
            if q.dtype not in REDUCED:
                return attention(q, k, v, mask)[0]
            with torch.autocast(q.device.type, dtype=q.dtype):
                return attention(q, k, v, mask)[0]

        return model_path
    backend = _BACKENDS[impl]

    def run(q, k, v, mask):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    return run


def make_mask(kind: str, batch: int, length: int, device: torch.device) -> torch.Tensor | None:
    """Boolean, True = may attend, shaped as tfm's model passes it.

    padding: (B, 1, 1, L), every other sentence, the first one included (a batch of one pads too), has its last
    quarter padded; causal: (1, 1, L, L).
    """
    if kind == "none":
        return None
    if kind == "padding":
        mask = torch.ones(batch, 1, 1, length, dtype=torch.bool, device=device)
        mask[::2, ..., length - length // 4 :] = False
        return mask
    if kind == "causal":
        return torch.ones(length, length, dtype=torch.bool, device=device).tril()[None, None]
    raise ValueError(f"unknown mask {kind!r}; use one of {MASKS}")


def attention_flops(batch: int, heads: int, length: int, d_k: int, mask: str, backward: bool) -> float:
    """Useful FLOPs of Q K^T and (weights) V: 4 B H L^2 d_k forward, x3 with backward, /2 when causal."""
    flops = 4.0 * batch * heads * length * length * d_k
    if mask == "causal":
        flops /= 2
    return flops * (3 if backward else 1)


# The largest |output - float64 formula| an implementation may have, by dtype: rounding of inputs of unit scale
# (about 1e-6 in fp32, TF32 matmuls allowed for; fp16 has 11 bits, bf16 8), far below the error of a wrong kernel
# (an output of zeros is ~1 away; a mask ignored, ~0.1-1).
WRONG_ABOVE = {"fp32": 1e-3, "fp16": 1e-2, "bf16": 6e-2}


def matrix_element_bytes(impl: str, dtype: str, device: torch.device, length: int) -> int:
    """Bytes per element of the (B, H, L, L) matrix `impl` builds at this length (0: it builds none). The explicit
    formula asked for weights, and SDPA's math backend, compute it in fp32 whatever the inputs' precision; tfm's
    own path builds it only on CPU in bf16 or fp16 with at most CPU_SHORT_KEYS keys, in bf16 there (autocast)."""
    element = torch.tensor([], dtype=DTYPES[dtype]).element_size()
    if impl in MATERIALISES:
        return max(element, 4)
    if impl == "tfm" and device.type == "cpu" and DTYPES[dtype] in REDUCED and length <= CPU_SHORT_KEYS:
        return element
    return 0


def _needs_bytes(
    impl: str, batch: int, heads: int, length: int, d_k: int, dtype: str, backward: bool, mask: str = "none",
    device: torch.device = torch.device("cpu"),
) -> int:
    """A rough upper bound of the memory one call needs: its inputs and mask, and for the implementations that
    materialise L x L, scores, mask fill, softmax (and their gradients)."""
    element = torch.tensor([], dtype=DTYPES[dtype]).element_size()
    qkv = 4 * batch * heads * length * d_k * element * (2 if backward else 1)
    qkv += length * length if mask == "causal" else batch * length  # the boolean mask
    matrix = batch * heads * length * length * matrix_element_bytes(impl, dtype, device, length)
    return qkv + matrix * (6 if backward else 3)


def bench_attention(
    device: torch.device,
    lengths: Sequence[int] = DEFAULT_LENGTHS,
    batch: int = 2,
    heads: int = 8,
    d_k: int = 64,
    dtype: str = "fp32",
    masks: Sequence[str] = ("padding",),
    passes: Sequence[str] = PASSES,
    impls: Sequence[str] | None = None,
    warmup: int = 1,
    repeat: int = 5,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    on_start: Callable[[dict[str, Any], tuple[float, int]], None] | None = None,
) -> dict[str, Any]:
    """Time every implementation at every length; returns {"kind", "environment", "settings", "records", "summary"}.

    Each record: id, impl, mask, pass, length, status ("ok", "unsupported", "skipped", "wrong"), and for "ok" the
    median / min / max time in ms, the spread, achieved FLOP/s, the L x L matrix's size when the implementation
    builds one, on CUDA the peak memory allocated by the call, and `max_abs_diff`: the largest difference of its
    output from the formula computed in float64 (omitted where that would not fit). An implementation further from
    it than `WRONG_ABOVE` allows for the dtype is "wrong", with its times but no FLOP/s: no figure of it is trusted.
    `on_start(record, (seconds, from_length))` is called before a measurement that an earlier length of the same
    implementation lets `expected_seconds` estimate (a long one can then be said before it starts).
    """
    impls = list(impls) if impls is not None else implementations(device)
    unknown = sorted(set(impls) - set(implementations(device)))
    if unknown:
        raise ValueError(f"unknown or unavailable implementation(s) on {device.type}: {', '.join(unknown)}")
    budget = memory_budget_bytes(device)
    records: list[dict[str, Any]] = []
    generator = torch.Generator(device="cpu").manual_seed(0)
    for mask_kind, length, pass_name in _grid(masks, lengths, passes):
        backward = pass_name == "forward+backward"
        needs = {impl: _needs_bytes(impl, batch, heads, length, d_k, dtype, backward, mask_kind, device) for impl in impls}
        if any(need <= budget for need in needs.values()):  # else not even the inputs fit: every one is skipped
            shape = (batch, heads, length, d_k)
            q, k, v = (torch.randn(shape, generator=generator).to(device, DTYPES[dtype]) for _ in range(3))
            mask = make_mask(mask_kind, batch, length, device)
            reference = _reference(q, k, v, mask, batch, heads, length, d_k, budget)
        for impl in impls:
            record: dict[str, Any] = {
                "id": f"attention/{impl}/{mask_kind}/{pass_name}/L={length}",
                "impl": impl, "mask": mask_kind, "pass": pass_name, "length": length,
                "lxl_matrix_mb": batch * heads * length * length * matrix_element_bytes(impl, dtype, device, length) / 2**20,
            }
            need = needs[impl]
            if need > budget:
                record.update(status="skipped", reason=f"needs ~{need / 2**30:,.1f} GiB of {budget / 2**30:,.1f} GiB")
            else:
                expected = expected_seconds(records, record, warmup, repeat, reference is not None)
                if on_start is not None and expected is not None:
                    on_start(record, expected)
                record.update(_measure(impl, q, k, v, mask, backward, device, warmup, repeat))
                if record["status"] == "ok" and reference is not None:
                    # Right before fast: each implementation's output against the formula in float64.
                    with torch.no_grad():
                        out = _attention_fn(impl)(q, k, v, mask).double()
                    record["max_abs_diff"] = diff = float((out - reference).abs().max())
                    if not diff <= WRONG_ABOVE[dtype]:  # (NaN too) its time is not a figure of attention
                        record.update(status="wrong", reason=(
                            f"its output is {diff:.3g} from the formula computed in float64 (at most "
                            f"{WRONG_ABOVE[dtype]:g} in {dtype})"))
                if record["status"] == "ok":
                    flops = attention_flops(batch, heads, length, d_k, mask_kind, backward)
                    record["flops_per_s"] = flops / (record["median_ms"] / 1000)
            records.append(record)
            if on_record is not None:
                on_record(record)
    settings = {
        "lengths": list(lengths), "batch": batch, "heads": heads, "d_k": d_k, "dtype": dtype,
        "masks": list(masks), "passes": list(passes), "impls": impls, "warmup": warmup, "repeat": repeat,
    }
    return {
        "kind": "attention", "environment": environment(device, dtype), "settings": settings,
        "records": records, "summary": {"exponents": growth_exponents(records)},
    }


def expected_seconds(
    records: Sequence[dict[str, Any]], record: dict[str, Any], warmup: int, repeat: int, checked: bool = True
) -> tuple[float, int] | None:
    """How long measuring `record` (its impl, mask, pass and length) should take, and the length it is grown from:
    the median time of the same implementation's longest shorter length measured, grown as L² (attention's work),
    times its warm-up, timed and (`checked`) checking calls; None before any such length."""
    done = [
        r for r in records
        if r["status"] in ("ok", "wrong") and r["length"] < record["length"]
        and (r["impl"], r["mask"], r["pass"]) == (record["impl"], record["mask"], record["pass"])
    ]
    if not done:
        return None
    last = max(done, key=lambda r: r["length"])
    calls = warmup + repeat + (1 if checked else 0)
    return last["median_ms"] / 1000 * (record["length"] / last["length"]) ** 2 * calls, last["length"]


def _reference(q, k, v, mask, batch: int, heads: int, length: int, d_k: int, budget: int) -> torch.Tensor | None:
    """softmax(Q K^T / sqrt(d_k)) V in float64 on the CPU, when its L x L matrices fit (else None)."""
    if 3 * batch * heads * length * length * 8 > min(budget, 4 * 2**30):
        return None
    q64, k64, v64 = (t.detach().double().cpu() for t in (q, k, v))
    scores = q64 @ k64.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask.cpu(), float("-inf"))
    return (scores.softmax(dim=-1) @ v64).to(q.device)


def _grid(masks: Iterable[str], lengths: Iterable[int], passes: Iterable[str]):
    for mask_kind in masks:
        for length in lengths:
            for pass_name in passes:
                yield mask_kind, length, pass_name


def _measure(impl, q, k, v, mask, backward: bool, device, warmup: int, repeat: int) -> dict[str, Any]:
    fn = _attention_fn(impl)
    if backward:
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))

    def call() -> None:
        out = fn(q, k, v, mask)
        if backward:
            out.backward(torch.ones_like(out))
            q.grad = k.grad = v.grad = None

    try:
        peak_memory_start(device)
        times = time_runs(call, device, warmup, repeat)
    except (RuntimeError, torch.OutOfMemoryError) as error:  # a backend that refuses these inputs, or memory
        if device.type == "cuda":
            torch.cuda.empty_cache()
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        status = "skipped" if isinstance(error, torch.OutOfMemoryError) else "unsupported"
        return {"status": status, "reason": reason[:200]}
    stats = summarize(times)
    result: dict[str, Any] = {
        "status": "ok", "median_ms": stats["median"] * 1000, "min_ms": stats["min"] * 1000,
        "max_ms": stats["max"] * 1000, "spread": stats["spread"], "repeat": stats["n"],
    }
    if device.type == "cuda":
        result.update(peak_memory_mb(device))
    return result


def growth_exponents(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each (impl, mask, pass): the slope of log(time) against log(L) over lengths >= FIT_FROM (or over all
    lengths when fewer than three are that long). 2 is the paper's O(L^2); overheads pull it down at short L."""
    groups: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    for r in records:
        if r["status"] == "ok":
            groups.setdefault((r["impl"], r["mask"], r["pass"]), []).append((r["length"], r["median_ms"]))
    out = []
    for (impl, mask, pass_name), points in groups.items():
        long = [p for p in points if p[0] >= FIT_FROM]
        used = long if len(long) >= 3 else points
        exponent = fit_exponent([p[0] for p in used], [p[1] for p in used])
        if exponent is not None and not math.isnan(exponent):
            out.append({
                "impl": impl, "mask": mask, "pass": pass_name, "exponent": exponent,
                "lengths": [p[0] for p in used],
            })
    return out
