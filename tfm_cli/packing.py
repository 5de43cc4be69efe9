"""Linear layers with prepacked weights for CPU translation: oneDNN's kernels instead of the BLAS call.

On the CPU, `F.linear` multiplies by the weight through the BLAS torch was built with (Intel MKL in the x86 wheels).
Decoding multiplies a few rows (the live hypotheses) by every weight matrix at every step, and there MKL is slow
on some CPUs: measured on a 2-core AMD EPYC (AVX-512), 2 threads, fp32, 4 rows by the quickstart model's
weights: 256 -> 1024 in 60 us, 1024 -> 256 in 80 us, the 256 -> 8,000 output projection in 520 us; the same
products through oneDNN (which torch also ships, and which `torch.compile` uses for frozen CPU weights) with the
weight reordered once into oneDNN's blocked layout take 29, 29 and 106 us. oneDNN has a fixed cost of about 20 us
a call, so tiny products (one row by 256 x 256) are slower, but a whole decoding step is faster at every batch
size measured (quickstart model, 2 threads: beam 4 at 1 / 8 / 32 sentences a batch 1.3 / 1.3 / 1.3x as many
sentences a second in fp32, greedy 1.1 / 1.4 / 1.2x). That is MKL off Intel's CPUs: on an Intel Xeon (Cascade
Lake) MKL was the faster of the two, and fp32 stays with it there (`fp32_packing_pays`).

The results are the same function computed by another kernel: they differ from MKL's in the last bits (max |diff|
about 1e-6 relative), and the quickstart model's 2,000 dev translations were identical both ways, in fp32 and in
bf16, with greedy and beam search.

`packed_view(model)` is what `decoding.TorchEngine` decodes with on the CPU: the same parameters (not copied),
and linear layers that read a packed copy of their weight when no gradient is wanted. With gradients enabled
they are plain `F.linear` over the live parameters, so the view can never train on a stale copy; a packed copy
is taken from the weights as they are at its first use, and taken again after they change in place (their
version counters move: `load_state_dict`, an optimizer step). A parameter replaced by another object is not
seen: build a new view then.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from tfm_cli.runtime import cpu_has_fast_bf16, cpu_vendor


def packing_available() -> bool:
    """Whether this PyTorch build has oneDNN's linear kernels for prepacked weights (the x86 wheels do)."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        return bool(torch.ops.mkldnn._linear_pointwise) and bool(torch.ops.mkldnn._reorder_linear_weight)
    except (AttributeError, RuntimeError):
        return False


def fp32_packing_pays() -> bool:
    """Whether fp32 decoding should run on packed oneDNN weights rather than `F.linear`'s MKL: everywhere but on
    Intel CPUs with an MKL build of torch.

    MKL takes its slow paths off Intel's CPUs: on a 2-core AMD EPYC it took 2-6x as long as packed oneDNN for a
    decoding step's products (module docstring). On Intel's own it is the faster one: on a 2-core Cascade Lake
    Xeon (AVX-512, 2 threads, the quickstart model, fp32) plain `F.linear` translated 500 dev sentences with
    beam 4 in 2.86 s against 3.44 s packed, and one sentence at a time 1.4x (beam 4) and 1.7x (greedy) as fast,
    with the same translations.
    """
    return not (cpu_vendor() == "GenuineIntel" and torch.backends.mkl.is_available())


def tensor_version(tensor: torch.Tensor) -> int:
    """`tensor`'s in-place version counter; -1 for an inference tensor (made under inference_mode), which has none."""
    return -1 if tensor.is_inference() else tensor._version


class PackedLinear(nn.Module):
    """`nn.Linear` whose weight is reordered for oneDNN once per compute dtype, when first needed (fp32; bf16
    under autocast).

    Shares `weight` and `bias` with the layer it was made from. It runs the packed kernel only on the CPU without
    gradients; otherwise it is `F.linear`, and so is a dtype oneDNN cannot run here (bf16 without native support)
    or should not (fp32 on an Intel CPU, where MKL is faster: `fp32_packing_pays`).
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        # dtype -> (the weights' versions, (packed weight, bias in that dtype) or None where oneDNN cannot run it)
        self._packed: dict[torch.dtype, tuple[tuple[int, int], tuple[torch.Tensor, torch.Tensor | None] | None]] = {}

    def _versions(self) -> tuple[int, int]:
        """The in-place version counters of weight and bias: they move when the weights are changed in place
        (load_state_dict, an optimizer step), so that a packed copy of older weights is never used."""
        return tensor_version(self.weight), -1 if self.bias is None else tensor_version(self.bias)

    def _pack(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        versions = self._versions()
        if dtype not in self._packed or self._packed[dtype][0] != versions:
            packed = None
            if (dtype == torch.float32 and fp32_packing_pays()) or (dtype == torch.bfloat16 and cpu_has_fast_bf16()):
                with torch.no_grad():
                    weight = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach().to(dtype))
                    bias = None if self.bias is None else self.bias.detach().to(dtype)
                packed = (weight, bias)
            self._packed[dtype] = (versions, packed)
        return self._packed[dtype][1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu" or self.weight.device.type != "cpu" or torch.is_grad_enabled():
            return F.linear(x, self.weight, self.bias)
        # Under CPU autocast a linear layer computes in the autocast dtype, as F.linear would.
        dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else x.dtype
        packed = self._pack(dtype) if dtype in (torch.float32, torch.bfloat16) else None
        if packed is None:
            return F.linear(x, self.weight, self.bias)
        weight, bias = packed
        return torch.ops.mkldnn._linear_pointwise(x.to(dtype), weight, bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def module_view(model: nn.Module) -> nn.Module:
    """A copy of `model`'s modules that shares its parameters and buffers (no tensor is copied): the view's
    train/eval flags are its own, so a view can decode in eval mode while `model` trains."""
    shared = {id(t): t for t in (*model.parameters(), *model.buffers())}
    return copy.deepcopy(model, memo=shared)


def packed_view(model: nn.Module) -> nn.Module:
    """A copy of `model`'s modules sharing its parameters and buffers, whose `nn.Linear` layers are `PackedLinear`.

    The model itself is left as it is. Returns `model` unchanged where packing does not apply: not on the CPU,
    no linear layer (e.g. int8-quantized ones), a PyTorch without oneDNN, or a CPU where it pays for neither fp32
    (`fp32_packing_pays`) nor bf16 (no native bf16).
    """
    params = list(model.parameters())
    if not params or params[0].device.type != "cpu" or not packing_available():
        return model
    if not (fp32_packing_pays() or cpu_has_fast_bf16()):
        return model
    if not any(type(m) is nn.Linear for m in model.modules()):
        return model
    view = module_view(model)
    for module in list(view.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                setattr(module, name, PackedLinear(child))
    return view
