"""int8 weights for CPU translation: the model's linear layers in int8, with inputs quantized row by row.

Every `nn.Linear` (attention projections, feed-forward, the output projection) becomes an `Int8Linear`: its weights
in int8 with one scale per output row, and each input row quantized to int8 on the fly with its own scale
(max |x| / 127), multiplied in integers (`torch._int_mm`, exact int32 sums) and scaled back to fp32. Embeddings,
LayerNorm and the softmax stay fp32. This is what CTranslate2's and Marian's `int8` compute types do; decoding a
few sentences at a time is limited by reading weights from memory, which int8 makes four times smaller.

Row by row matters: PyTorch's `quantize_dynamic` (used before) quantizes each input *matrix* with one scale, from
the largest value of any row, so a hypothesis's numbers depended on the other sentences of its batch (and on the
padding of the longest source): the same sentence came out differently alone and beside others (12 of 42 beam
translations on a 150-step model, next to one long line). Here a row's result is its own; what remains is fp32
attention's rounding at another padded length, which an int8 rounding can amplify (1 of those 42).

Measured side by side (one process, interleaved, median of 3) on a quickstart model (`recipes/tiny.yaml`, 1,200
steps), the first 1,000 dev sentences, a 2-core AMD EPYC with AVX-512 (cpu capability AVX512), against fp32 on packed
oneDNN weights (packing.py); sentences/s, this kernel vs the per-matrix one it replaced: two threads, beam 4 517 vs 578
(fp32 372), greedy 1,120 vs 1,145 (fp32 784); one thread, beam 4 330 vs 360 (fp32 217), greedy 775 vs 921 (fp32 499).
So 1.39-1.55x fp32, 2-16% below the per-matrix kernel (the per-row scaling is a few more passes over the data, which
fbgemm fused). On all 2,000: BLEU 35.06 vs 34.84 (fp32 35.02) with beam 4, 28.41 vs 28.25 (fp32 27.94) greedy; 1,877
and 1,869 of the 2,000 translations identical to fp32's (per-matrix: 1,744 and 1,714).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from tfm_cli.errors import TfmError
from tfm_cli.model import Transformer


class Int8Linear(nn.Module):
    """An `nn.Linear` for inference in int8: weights quantized per output row, inputs per row on the fly.

    y = (round(x / sx) @ round(W / sw)^T) * sx * sw + b, with sx = max|x_row| / 127 and sw = max|W_row| / 127
    (symmetric, no zero point), the product summed exactly in int32. A row's output depends on that row alone.
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach().float()  # (out, in)
        scale = weight.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).tiny) / 127
        self.register_buffer("weight_t", (weight / scale[:, None]).round().clamp(-127, 127).to(torch.int8).t().contiguous())  # (in, out)
        self.register_buffer("scale", scale)  # (out,)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float().clone())

    @classmethod
    def stacked(cls, layers: Sequence[Int8Linear]) -> Int8Linear:
        """One layer computing `layers` (of the same input) at once, their outputs side by side: the same numbers,
        as the scales are per output row and each input row is quantized whatever it is multiplied by."""
        if len({layer.in_features for layer in layers}) != 1 or len({layer.bias is None for layer in layers}) != 1:
            raise ValueError("Int8Linear.stacked needs layers of one input size that all have a bias, or none")
        stacked = cls.__new__(cls)
        nn.Module.__init__(stacked)
        stacked.in_features, stacked.out_features = layers[0].in_features, sum(layer.out_features for layer in layers)
        stacked.register_buffer("weight_t", torch.cat([layer.weight_t for layer in layers], dim=1))  # (in, out)
        stacked.register_buffer("scale", torch.cat([layer.scale for layer in layers]))
        biases = None if layers[0].bias is None else torch.cat([layer.bias for layer in layers])
        stacked.register_buffer("bias", biases)
        return stacked

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # As few passes over the data as the ops allow: at a decoding step's few rows their launches cost more
        # than the integer product itself, and at many rows their memory traffic does.
        rows = x.reshape(-1, self.in_features).float()  # (N, in)
        peak = rows.abs().amax(dim=1, keepdim=True).clamp_(min=torch.finfo(torch.float32).tiny)  # (N, 1)
        q = rows.mul(127 / peak).round_().to(torch.int8)  # |q| <= 127: no clamp needed
        out = torch._int_mm(q, self.weight_t).float().mul_(peak / 127).mul_(self.scale)  # (N, out), exact int32 sums
        if self.bias is not None:  # not addcmul: its vectorised body fuses the multiply-add and its tail does not, so
            out.add_(self.bias)  # a row's numbers would depend on where the row falls in the batch
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def int8_linears(module: nn.Module) -> nn.Module:
    """`module` with each of its `nn.Linear` layers replaced by an `Int8Linear` (in place; returns it)."""
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, Int8Linear(child))
    return module


def linear_layers(module: nn.Module) -> dict[str, int]:
    """How many of `module`'s linear layers run in int8 and how many in floating point: what a bench reports, so
    that an int8 run shows it timed int8 layers."""
    kinds = [type(m) for m in module.modules()]
    return {"int8": kinds.count(Int8Linear), "float": kinds.count(nn.Linear)}


def quantize_int8(model: Transformer) -> Transformer:
    """A copy of `model` for CPU inference whose linear layers run in int8 (the original is left as it was).

    Raises:
        TfmError: the model is not on the CPU, or this PyTorch build has no int8 matrix product on the CPU.
    """
    device = next(model.parameters()).device
    if device.type != "cpu":
        raise TfmError(
            f"int8 runs on the CPU; this model is on {device}",
            hint="use --device cpu with --precision int8, or bf16/fp16 on CUDA",
        )
    if not hasattr(torch, "_int_mm"):
        raise TfmError("this PyTorch build has no int8 matrix product (torch._int_mm)", hint="use --precision fp32")
    with torch.no_grad():
        # in fp32 around the int8 products: a bf16 or fp16 model's norms met the fp32 outputs of the int8 layers
        # ("RuntimeError: mixed dtype (CPU): expect parameter to have scalar type of Float")
        return int8_linears(copy.deepcopy(model).float().eval())
