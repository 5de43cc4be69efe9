"""Where and how tensors run: device choice, mixed precision, and the CPU allocator.

Shared by training, translation and benchmarks; knows nothing of recipes or the CLI.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import platform
import sys

import torch

from tfm_cli.errors import TfmError
from tfm_cli.precisions import PRECISIONS

DEVICES = ("auto", "cpu", "cuda")


def check_device_name(name: str) -> None:
    """Raise TfmError unless `name` names a device: auto, cpu (or cpu:0), cuda or cuda:N (whether it is there is not
    asked)."""
    index = name[len("cuda:"):] if name.startswith("cuda:") else None
    if name == "cpu:0":  # torch's name of torch.device("cpu", 0): the CPU
        return
    if (name not in DEVICES and index is None) or (index is not None and not (index.isascii() and index.isdigit())):
        raise TfmError(f"unknown device {name!r}", hint=f"use one of: {', '.join(DEVICES)} (or cuda:N)")


def resolve_device(name: str | torch.device) -> torch.device:
    """'auto' -> cuda when available, else cpu; 'cuda' without a GPU is an error, not a silent fallback.

    A torch.device is checked as its name is (torch.device("cuda") without a GPU failed later, deep in torch);
    "cpu:0" (torch's name of torch.device("cpu", 0)) is the CPU."""
    name = str(name) if isinstance(name, torch.device) else name
    if name == "cpu:0":  # refused as an "unknown device", though any torch.device is taken
        name = "cpu"
    check_device_name(name)
    index = name[len("cuda:"):] if name.startswith("cuda:") else None
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise TfmError(f"device {name} was asked for but no CUDA GPU is available", hint="use cpu or auto")
    if index is not None and int(index) >= (count := torch.cuda.device_count()):  # failed at the first tensor moved
        raise TfmError(f"device {name} was asked for but this machine has {count} CUDA GPU(s)",
                       hint=f"use cuda:0 to cuda:{count - 1}, or cuda")
    return torch.device(name)


def memory_of(device: torch.device) -> int | None:
    """The memory, in bytes, that `device` has in all (a GPU's; on CPU the machine's, or the container's limit
    where that is lower); None where it cannot be told."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    sizes = []
    with contextlib.suppress(ValueError, OSError, AttributeError):
        sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):  # cgroup v2, v1
        with contextlib.suppress(OSError, ValueError), open(limit, encoding="ascii") as f:
            value = int(f.read().strip())  # "max" (v2, no limit) is no int
            if 0 < value < 2**60:  # v1 says "no limit" with ~2**63
                sizes.append(value)
    return min(sizes) if sizes else None


@functools.cache
def cpu_has_native_bf16() -> bool:
    """True when this CPU has bf16 arithmetic instructions: AVX512-BF16 or AMX-BF16 on x86, the BF16 extension on
    Arm. Whether they make bf16 faster than fp32 is `cpu_has_fast_bf16`'s question.

    Not oneDNN's own answer (`torch.ops.mkldnn._is_mkldnn_bf16_supported`), which on x86 is true for every AVX-512
    CPU: Skylake-SP and Cascade Lake have AVX-512 but no bf16 arithmetic, and emulate it. On a 2-core Cascade Lake
    (AVX512 with VNNI, no AVX512-BF16) the quickstart's model step ran at 887 target tokens/s in bf16 against 2,771
    in fp32 (`tfm bench train recipes/tiny.yaml train.precision=...`).
    """
    found = _capabilities()
    if found.get("architecture") in ("x86_64", "x86"):
        return bool(found.get("avx512_bf16") or found.get("amx_bf16"))
    if found.get("architecture") in ("arm64", "aarch64"):
        return bool(found.get("bf16"))
    try:  # older torch, or another architecture: oneDNN's check (on Arm it reads the BF16 extension)
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


@functools.cache
def cpu_has_fast_bf16() -> bool:
    """True when bf16 autocast pays off on this CPU, so that precision 'auto' chooses it: AMX-BF16 (Intel's matrix
    tiles), AVX512-BF16 on AMD's CPUs, the BF16 extension on Arm.

    Not every CPU with bf16 instructions: an Intel CPU's AVX512-BF16 without AMX has no more multiplications a
    cycle than its fp32 FMAs, and autocast adds its casts. On a 2-core Intel Xeon of the fifth generation (Emerald
    Rapids, AVX512-BF16 and AVX512-FP16, AMX not exposed by the hypervisor) the quickstart's model step ran at 2,558
    target tokens/s in bf16 against 4,333 in fp32, and the bf16 matrix product peaked at 0.165 TFLOP/s against
    0.323 in fp32 (`tfm bench train recipes/tiny.yaml train.precision=bf16|fp32 --model-step-only`). On a 2-core
    AMD EPYC with AVX512-BF16 the same step ran about 1.4x as fast in bf16 as in fp32.
    """
    if not cpu_has_native_bf16():
        return False
    found = _capabilities()
    if found.get("architecture") in ("x86_64", "x86") and not found.get("amx_bf16"):
        return cpu_vendor() != "GenuineIntel"
    return True


def _capabilities() -> dict:
    """torch's account of the CPU's features (`torch.cpu.get_capabilities`, from torch 2.11, pyproject's floor); for
    an older torch installed anyway (2.10 trains), the same names from the kernel's (`_cpuinfo_capabilities`)."""
    capabilities = getattr(torch.cpu, "get_capabilities", None)
    return capabilities() if capabilities is not None else _cpuinfo_capabilities()


CPUINFO = "/proc/cpuinfo"
_ARCHITECTURES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def _cpuinfo_capabilities() -> dict:
    """The CPU's features as Linux lists them (x86's `flags`: avx512_bf16, amx_bf16; Arm's `Features`: bf16), under
    the names torch's `get_capabilities` gives them. Without them an older torch fell to oneDNN's check, which says
    bf16 on every AVX-512 CPU, and `auto` trained a Cascade Lake in emulated bf16: an x86 CPU whose flags are not
    to be read (no /proc/cpuinfo: Windows, macOS) is one without bf16 here, fp32 being right everywhere; an Arm one
    ({}) is left to oneDNN, which reads Arm's BF16 extension itself."""
    architecture = _ARCHITECTURES.get(platform.machine().lower())
    try:
        with open(CPUINFO, encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if architecture and key.strip() in ("flags", "Features"):
                    return {"architecture": architecture, **dict.fromkeys(value.split(), True)}
    except OSError:
        pass
    return {"architecture": architecture} if architecture == "x86_64" else {}


@functools.cache
def cpu_vendor() -> str | None:
    """The CPU's vendor string ("GenuineIntel", "AuthenticAMD", ...) where the system tells it; None elsewhere."""
    try:
        with open(CPUINFO, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    processor = platform.processor()  # Windows: "Intel64 Family 6 Model 85 Stepping 7, GenuineIntel"
    return next((v for v in ("GenuineIntel", "AuthenticAMD") if v in processor), None)


def resolve_precision(precision: str, device: torch.device, what: str = "precision") -> str:
    """'auto' -> bf16 on CUDA GPUs and on CPUs where it is faster than fp32 (`cpu_has_fast_bf16`), else fp32. fp16 is CUDA-only (loss scaling).
    `what` names where the value came from (`train.precision`, `--precision`) in the errors."""
    if precision not in PRECISIONS:
        raise TfmError(f"{what} {precision!r} is unknown", hint=f"use one of: {', '.join(PRECISIONS)}")
    if precision == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        return "bf16" if cpu_has_fast_bf16() else "fp32"
    if precision == "fp16" and device.type != "cuda":
        raise TfmError(f"{what} fp16 needs a CUDA device, and this runs on {device.type}", hint="use bf16 or fp32 on CPU")
    return precision


def autocast(device: torch.device, precision: str):
    """Autocast context for bf16/fp16 (weights stay fp32; matrix products run in low precision); none for fp32
    and for int8 (quantized weights, tfm_cli/quantization.py)."""
    if precision in ("fp32", "int8"):
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def tune_cpu_allocator() -> bool:
    """Make glibc keep freed memory for reuse instead of handing it back to the kernel after every step.

    By default glibc serves every block above its mmap threshold (dynamic, at most 32 MiB) with a fresh mmap and
    unmaps it on free, so each training step page-faults its large activations back in: a quarter of the CPU time
    went to the kernel. Disabling mmap for large blocks (M_MMAP_MAX=0) and trimming the heap only above 1 GiB keeps
    those pages mapped; training the quickstart model went from 4,733 to 6,309 target tokens/s on our 2-core CPU
    (system time 9.0 s -> 0.9 s over 25 steps), for ~35% more resident memory. It is what LD_PRELOAD=libtcmalloc does (the peers harness measured both), with nothing to install.
    A no-op off glibc. Returns whether it applied.
    """
    mallopt = getattr(_glibc(), "mallopt", None)
    if mallopt is None:
        return False
    m_trim_threshold, m_mmap_max = -1, -4
    return bool(mallopt(m_mmap_max, 0)) and bool(mallopt(m_trim_threshold, 1 << 30))


def release_cpu_memory() -> None:
    """Hand the heap's free pages back to the kernel (glibc malloc_trim); a no-op elsewhere.

    With `tune_cpu_allocator` the heap keeps every freed block, and batches of varying shapes fragment it, so
    resident memory creeps up (to ~8 GB over the quickstart's 1200 steps). Trimming every few dozen steps
    bounds it at the cost of faulting the pages in once more.
    """
    malloc_trim = getattr(_glibc(), "malloc_trim", None)
    if malloc_trim is not None:
        malloc_trim(0)


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library on Linux, loaded once; None elsewhere or when it cannot be loaded."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
