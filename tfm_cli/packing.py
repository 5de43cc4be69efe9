"""Linear layers with prepacked weights for CPU translation: oneDNN's kernels instead of the BLAS call, and
self-attention's three projections as one.

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

Self-attention projects its input three times (Q, K, V), so a decoding step runs three small products there; the
view stacks the three weights into one layer (`MultiHeadAttention.qkv`), one product of three times the width with
the same numbers (the three results side by side: the quickstart model's 2,000 dev translations and their n-best
scores were byte for byte the same in fp32, bf16 and int8, beam and greedy). Measured side by side in one process
on a 2-core AMD EPYC (AVX-512), 2 threads, quickstart shape, random sources of 20 tokens forced to 24: fp32, one
sentence at a time, greedy 1.05-1.11x as fast, beam 4 1.10-1.21x; beam 4 at 8 sentences a batch 1.05x, greedy at
32 1.03x; int8 1.14x (greedy, one sentence), 1.14x (beam, one) and 1.07x (beam, 32), where each int8 layer also
quantizes its input row by row.

Off the CPU (CUDA) nothing is packed or stacked, but autocast (bf16, fp16) cast every weight again at every
decoding step, under the searches' `torch.inference_mode`, where its cache of casts is off: the view's layers keep
their casts instead (the same numbers).

`decoding_view(model)` is what `decoding.TorchEngine` decodes with: the same parameters (not copied), linear
layers that read a packed (or, off the CPU, cast) copy of their weight when no gradient is wanted, and on the CPU
the stacked projections.
With gradients enabled they are plain `F.linear` over the live parameters, so the view can never train on a
stale copy; a packed or stacked copy is taken from the weights as they are at its first use, and taken again
after they change in place (their version counters move: `load_state_dict`, an optimizer step). A parameter
replaced by another object is not seen: build a new view then.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from tfm_cli.model.transformer import DecoderLayer, EncoderLayer, MultiHeadAttention
from tfm_cli.quantization import Int8Linear
from tfm_cli.runtime import cpu_has_native_bf16, cpu_vendor


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
    under autocast); or several linear layers of the same input stacked into one, their outputs side by side
    (`PackedLinear(w_q, w_k, w_v)`: self-attention's three projections as one product).

    Shares the weights and biases of the layers it was made from. It runs the packed kernel only on the CPU
    without gradients; otherwise it is `F.linear`, and so is a dtype oneDNN cannot run here (bf16 without native
    support) or should not (fp32 on an Intel CPU, where MKL is faster: `fp32_packing_pays`). Stacked layers are
    one `F.linear` over a stacked copy of their weights there (taken again when they change), and with gradients
    over the concatenation of the live parameters. Where it runs `F.linear` under autocast without gradients (on
    CUDA, say), it keeps its weight and bias cast to the autocast dtype from one call to the next (`_cast`):
    autocast itself casts them again at every call under `torch.inference_mode`, where the searches run.
    """

    def __init__(self, *linears: nn.Module) -> None:
        super().__init__()
        if not linears or len({layer.in_features for layer in linears}) != 1:
            raise ValueError("PackedLinear stacks one or more linear layers of the same input size")
        if len({layer.bias is None for layer in linears}) != 1:
            raise ValueError("PackedLinear stacks layers that all have a bias, or none")
        self.in_features = linears[0].in_features
        self.out_features = sum(layer.out_features for layer in linears)
        # The stacked layers as a plain tuple, not submodules: the view's state dict stays the model's.
        self.parts: tuple[nn.Module, ...] | None = None
        if len(linears) == 1:
            self.weight, self.bias = linears[0].weight, linears[0].bias
        else:
            self.parts = tuple(linears)
        self._stacked: tuple[tuple[int, ...], tuple[torch.Tensor, torch.Tensor | None]] | None = None
        # dtype -> (the weights' versions, (packed weight, bias in that dtype) or None where oneDNN cannot run it)
        self._packed: dict[torch.dtype, tuple[tuple[int, ...], tuple[torch.Tensor, torch.Tensor | None] | None]] = {}
        # autocast dtype -> (the weights' versions, (weight, bias) cast to it): for F.linear under autocast
        self._casts: dict[torch.dtype, tuple[tuple[int, ...], tuple[torch.Tensor, torch.Tensor | None]]] = {}

    def _versions(self) -> tuple[int, ...]:
        """The in-place version counters of the weights and biases: they move when the weights are changed in
        place (load_state_dict, an optimizer step), so that a copy of older weights is never used."""
        layers = [self] if self.parts is None else list(self.parts)
        return tuple(-1 if t is None else tensor_version(t) for layer in layers for t in (layer.weight, layer.bias))

    def _live(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The weight and bias as autograd sees them: the parameters, or their concatenation."""
        if self.parts is None:
            return self.weight, self.bias
        bias = None if self.parts[0].bias is None else torch.cat([layer.bias for layer in self.parts])
        return torch.cat([layer.weight for layer in self.parts]), bias

    def _plain(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The weight and bias without gradients: the parameters, or a stacked copy of them, taken again when
        they change in place."""
        if self.parts is None:
            return self.weight, self.bias
        versions = self._versions()
        if self._stacked is None or self._stacked[0] != versions:
            with torch.no_grad():
                weight, bias = self._live()
            self._stacked = (versions, (weight.detach(), None if bias is None else bias.detach()))
        return self._stacked[1]

    def _pack(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        versions = self._versions()
        if dtype not in self._packed or self._packed[dtype][0] != versions:
            packed = None
            pays = (dtype == torch.float32 and fp32_packing_pays()) or (dtype == torch.bfloat16 and cpu_has_native_bf16())
            if pays and packing_available():
                weight, bias = self._plain()
                with torch.no_grad():
                    packed = (
                        torch.ops.mkldnn._reorder_linear_weight(weight.detach().to(dtype)),
                        None if bias is None else bias.detach().to(dtype),
                    )
            self._packed[dtype] = (versions, packed)
        return self._packed[dtype][1]

    def _cast(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The weight and bias without gradients in `dtype`, as autocast casts them (the same numbers), cast once
        and again when they change in place.

        Autocast keeps a cast of a weight for the rest of its region only where the weight requires gradients
        and inference mode is off; under the searches' `torch.inference_mode` it cast every linear layer's weight
        at every decoding step (on CUDA, where no packed copy is made: about 41M values a step for the base model)."""
        versions = self._versions()
        held = self._casts.get(dtype)
        if held is None or held[0] != versions:
            weight, bias = self._plain()
            with torch.no_grad():
                held = (versions, (weight.detach().to(dtype), None if bias is None else bias.detach().to(dtype)))
            self._casts[dtype] = held
        return held[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            return F.linear(x, *self._live())
        weight, bias = self._plain()
        # Under autocast a linear layer computes in the autocast dtype, as F.linear would.
        autocast = autocast_dtype(x.device.type)
        dtype = autocast or x.dtype
        if x.device.type == "cpu" and weight.device.type == "cpu" and dtype in (torch.float32, torch.bfloat16):
            packed = self._pack(dtype)
            if packed is not None:
                return torch.ops.mkldnn._linear_pointwise(x.to(dtype), *packed, "none", [], "")
        if autocast is not None and autocast != weight.dtype and weight.is_floating_point():
            return F.linear(x.to(autocast), *self._cast(autocast))
        return F.linear(x, weight, bias)

    def extra_repr(self) -> str:
        parts = "" if self.parts is None else f", stacking {len(self.parts)} layers"
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self._plain()[1] is not None}{parts}"


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The dtype autocast computes matrix products in on `device_type` now, or None where it is off (or where
    autocast knows no such device: `meta`)."""
    try:
        enabled = torch.is_autocast_enabled(device_type)
    except RuntimeError:  # "unknown device type for autocast"
        return None
    return torch.get_autocast_dtype(device_type) if enabled else None


def module_view(model: nn.Module) -> nn.Module:
    """A copy of `model`'s modules that shares its parameters and buffers (no tensor is copied): the view's
    train/eval flags are its own, so a view can decode in eval mode while `model` trains."""
    shared = {id(t): t for t in (*model.parameters(), *model.buffers())}
    return copy.deepcopy(model, memo=shared)


def decoding_view(model: nn.Module) -> nn.Module:
    """What decoding runs: a copy of `model`'s modules sharing its parameters and buffers. On the CPU its
    `nn.Linear` layers are `PackedLinear` where packing pays, and its self-attention layers compute Q, K and V in
    one product (`MultiHeadAttention.qkv`: a stacked `PackedLinear`, or a stacked `Int8Linear` in an int8 model);
    off the CPU (CUDA) its `nn.Linear` layers but the output projection are `PackedLinear`s that keep their weights
    cast to the autocast dtype from one decoding step to the next (bf16, fp16: the same numbers as autocast's own
    casts; in fp32 `F.linear`, as `nn.Linear`). The output projection stays an `nn.Linear`: `decoding.TorchEngine`
    multiplies by its own transposed copy of the weight, which it keeps cast the same way.

    The model itself is left as it is. Packing applies with oneDNN, on a CPU where it pays for fp32
    (`fp32_packing_pays`) or bf16 (native bf16). Stacking the projections gives the same numbers with fewer
    calls, on any CPU: a decoding step runs three times as many matrix products of a few rows in self-attention
    otherwise (off the CPU it is not done: not measured there). Returns `model` unchanged on a CPU where neither
    applies.
    """
    params = list(model.parameters())
    if not params:
        return model
    if params[0].device.type != "cpu":
        view = module_view(model)
        _wrap_linears(view, keep=getattr(view, "generator", None))
        return view
    pack = packing_available() and (fp32_packing_pays() or cpu_has_native_bf16())
    pack = pack and any(type(m) is nn.Linear for m in model.modules())
    if not pack and not any(_stack(m.w_q, m.w_k, m.w_v) is not None for m in _self_attentions(model)):
        return model
    view = module_view(model)
    if pack:
        _wrap_linears(view)
    for attention in _self_attentions(view):
        attention.qkv = _stack(attention.w_q, attention.w_k, attention.w_v)
    return view


def _wrap_linears(view: nn.Module, keep: nn.Module | None = None) -> None:
    """Every `nn.Linear` of `view` (but `keep`) made a `PackedLinear` of itself, in place."""
    for module in list(view.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear and child is not keep:
                setattr(module, name, PackedLinear(child))


def _self_attentions(model: nn.Module) -> list[MultiHeadAttention]:
    """The self-attention layers of `model`'s encoder and decoder layers (not cross-attention, whose keys and values
    come from the memory), those not stacked yet."""
    layers = [m for m in model.modules() if isinstance(m, (EncoderLayer, DecoderLayer))]
    return [layer.self_attn for layer in layers if layer.self_attn.qkv is None]


def _stack(*layers: nn.Module) -> nn.Module | None:
    """One layer computing `layers` (of the same input) at once, or None where they are of kinds that do not stack."""
    if all(type(layer) is nn.Linear or (type(layer) is PackedLinear and layer.parts is None) for layer in layers):
        return PackedLinear(*layers)
    if all(type(layer) is Int8Linear for layer in layers):
        return Int8Linear.stacked(layers)
    return None
