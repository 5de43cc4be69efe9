"""`train.compile`: the model compiled by `torch.compile` (TorchDynamo + TorchInductor), and the compiler's own
failures said in one line. TorchInductor builds CPU kernels with a C++ compiler (their source includes Python.h)
and GPU kernels with Triton; both are checked before a run starts."""

from __future__ import annotations

import contextlib
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

from tfm_cli.errors import TfmError


def compile_model(model: nn.Module) -> None:
    """Compile `model` in place (`Module.compile`), so that its parameters, their names and the checkpoints stay the
    model's own. Shapes are dynamic from the start, as each batch has its own (B, S, T): one graph for every batch
    shape (a batch of one sentence, which the compiler treats apart, and eval mode get one more each).

    The compiler's cache is emptied first: it keeps the graphs of every module compiled in the process under one
    limit (8), so the ninth model a Python session trained (a sweep over sizes) ran eager without a word."""
    torch._dynamo.reset()
    model.compile(dynamic=True)


def compile_problem(device: torch.device) -> str | None:
    """Why `torch.compile` cannot compile the model for `device` on this machine, or None."""
    if device.type == "cuda":
        from torch.utils._triton import has_triton

        return None if has_triton() else "TorchInductor needs Triton for CUDA kernels, and it is not installed"
    if device.type != "cpu":
        return None
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        get_cpp_compiler()
    except Exception as err:  # InvalidCxxCompiler, or whatever this torch build raises instead
        found = str(err).strip().splitlines()
        return "TorchInductor builds its CPU kernels with a C++ compiler, and " + (
            f"none works here ({found[0]})" if found else "none works here"
        )
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not headers.is_file():
        return f"TorchInductor's CPU kernels include Python's C headers, and they are not installed ({headers} is missing)"
    return None


def check_compile(device: torch.device) -> None:
    """Refuse `train.compile: true` where the model cannot be compiled, before any work.

    Raises:
        TfmError: naming what is missing (a C++ compiler, Python's headers, Triton) and the way round.
    """
    why = compile_problem(device)
    if why is None:
        return
    if "Python's C headers" in why:
        fix = "install them (e.g. apt-get install python3-dev)"
    elif device.type == "cpu":
        fix = "install g++ (or set CXX to a C++ compiler)"
    else:
        fix = "pip install triton"
    raise TfmError(f"train.compile is true, but {why}", hint=f"{fix}, or train without it: train.compile=false")


@contextlib.contextmanager
def compiler_errors() -> Iterator[None]:
    """A failure of `torch.compile` (TorchDynamo, TorchInductor) while it compiles the model, as one TfmError
    naming `train.compile` and the compiler's own error line, not pages of compiler output; anything else as it is.
    (A model that is not compiled raises no such error.)"""
    try:
        yield
    except Exception as err:
        if not type(err).__module__.startswith(("torch._dynamo", "torch._inductor")):
            raise
        if isinstance(err.__cause__, KeyboardInterrupt):
            raise err.__cause__ from None
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        lines = [line for line in lines if not line.startswith(("Set TORCHDYNAMO", "You can suppress", "import torch._dynamo"))]
        # the C++ compiler's first error (`kernel.cpp:1:10: fatal error: Python.h: No such file or directory`), not
        # its last words ("compilation terminated.")
        errors = [line for line in lines if "error:" in line] or [line for line in lines if "Error:" in line]
        why = errors[0] if errors else lines[-1] if lines else type(err).__name__
        hint = "train without it: train.compile=false"
        if "Python.h" in why:
            hint = "install Python's C headers (e.g. apt-get install python3-dev), or " + hint
        raise TfmError(f"torch.compile could not compile the model (train.compile is true): {why}", hint=hint) from None
