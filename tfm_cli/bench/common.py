"""What every benchmark shares: the environment it ran in, timing done right, statistics, the matmul peak.

Timing: warm-up runs first (kernel selection, allocator, caches), then each repetition is timed on its own
with the device synchronised before and after (CUDA launches are asynchronous), and figures are medians with
their spread, never a single run. Nothing here draws: results are plain dicts for the CLI to render.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from tfm_cli import __version__
from tfm_cli.runtime import cpu_has_fast_bf16, cpu_has_native_bf16

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# The model's settings in a train or translate result: its shape and the variant of the architecture (pre-norm,
# learned positions and untied embeddings cost differently), which the gate checks a baseline against
MODEL_SETTINGS = (
    "d_model", "d_ff", "n_heads", "n_enc_layers", "n_dec_layers", "vocab_size", "norm", "positions", "tie_embeddings",
)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_runs(fn: Callable[[], Any], device: torch.device, warmup: int, repeat: int) -> list[float]:
    """Seconds of each of `repeat` calls of `fn` after `warmup` untimed ones, device synchronised around each."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return times


def summarize(values: Sequence[float]) -> dict[str, float]:
    """Median, min, max and the spread (max - min) / median of repeated measurements."""
    median = statistics.median(values)
    return {
        "median": median,
        "min": min(values),
        "max": max(values),
        "spread": (max(values) - min(values)) / median if median else 0.0,
        "n": len(values),
    }


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation between closest ranks."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def fit_exponent(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """The slope of log(y) against log(x) by least squares: y ~ x^slope. None with fewer than 2 points."""
    points = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
    if len(points) < 2:
        return None
    mx = sum(p[0] for p in points) / len(points)
    my = sum(p[1] for p in points) / len(points)
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx == 0:
        return None
    return sum((p[0] - mx) * (p[1] - my) for p in points) / sxx


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo on Linux, else what platform says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: torch.device, dtype: str) -> dict[str, Any]:
    """Where a figure was measured: versions, device, CPU capability, bf16 instructions and whether they pay (as
    'auto' judges), threads, dtype."""
    env: dict[str, Any] = {
        "tfm": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name(),
        "cpu": cpu_name(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_native_bf16": cpu_has_native_bf16(),
        "cpu_fast_bf16": cpu_has_fast_bf16(),  # what precision 'auto' chooses bf16 by
        "cpu_cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "dtype": dtype,
    }
    if device.type == "cuda":
        env["cuda"] = torch.version.cuda
        env["gpu_memory_gb"] = round(torch.cuda.get_device_properties(device).total_memory / 2**30, 1)
    return env


def matmul_peak(device: torch.device, dtype: str, sizes: Sequence[int] = (1024, 2048), repeat: int = 5) -> dict[str, Any]:
    """The best median rate of square matrix products in `dtype`: the ceiling that MFU is a share of."""
    best, per_size = 0.0, {}
    for n in sizes:
        a = torch.randn(n, n, device=device, dtype=DTYPES[dtype])
        b = torch.randn(n, n, device=device, dtype=DTYPES[dtype])
        median = summarize(time_runs(lambda a=a, b=b: a @ b, device, warmup=2, repeat=repeat))["median"]
        rate = 2 * n**3 / median
        per_size[str(n)] = rate
        best = max(best, rate)
    return {"flops_per_s": best, "dtype": dtype, "by_size": per_size}


def peak_memory_start(device: torch.device) -> None:
    """Start a new peak: CUDA's peak allocated, or on Linux the process's peak resident set (reset to the
    current one, so that a phase is not charged with an earlier phase's peak)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    with contextlib.suppress(OSError):  # Linux only; elsewhere the peak is the process's since it started
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")  # resets the peak resident set (VmHWM) to the current one


def peak_memory_mb(device: torch.device) -> dict[str, float]:
    """CUDA: peak allocated since `peak_memory_start`. CPU: the peak resident set since `peak_memory_start` on
    Linux, else the process's peak resident set since it started."""
    if device.type == "cuda":
        return {"peak_allocated_mb": torch.cuda.max_memory_allocated(device) / 2**20}
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            peak_kb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError, IndexError):
        peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_rss_mb": peak_kb / 1024}


def memory_budget_bytes(device: torch.device) -> int:
    """Memory a benchmark may plan to use: free GPU memory, or half of this machine's physical memory."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * 0.8)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30
