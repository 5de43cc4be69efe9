"""int8 weights for CPU translation: the model's linear layers in int8, with inputs quantized row by row.

Every `nn.Linear` (attention projections, feed-forward, the output projection) becomes an `Int8Linear`: its weights
in int8 with one scale per output row, and each input row quantized to int8 on the fly with its own scale
(max |x| / 127), multiplied in integers (`torch._int_mm`, exact int32 sums) and scaled back to fp32. Embeddings,
LayerNorm and the softmax stay fp32. This is what CTranslate2's and Marian's `int8` compute types do; decoding a
few sentences at a time is limited by reading weights from memory, which int8 makes four times smaller.

Row by row matters: PyTorch's `quantize_dynamic` (used before) quantizes a weight matrix with one scale and each
input *matrix* with one scale, from the largest value of any row, so a hypothesis's numbers depended on the other
sentences of its batch (and on the padding of the longest source): the same sentence translated alone and in a
batch came out differently (8 of 40 dev sentences, beam 4, next to a long line). Here a row's result is its own.

Measured on the quickstart model, all 2,000 dev sentences, a 2-core AVX-512 CPU, against fp32 with its linear
layers on packed oneDNN weights (packing.py), with the per-matrix kernel this replaced: one thread, beam 4 at 220 vs
137 sentences/s (1.61x), greedy 569 vs 346 (1.64x); two threads 1.22x and 1.48x. BLEU 35.35 vs 35.43 (beam), 29.47
vs 29.81 (greedy). With rows quantized one by one (a 150-step model of the same shape, 200 dev sentences, 2 threads
of a shared 2-core CPU): beam 4 at 249 vs 200 sentences/s (1.25x, as fast as the per-matrix kernel), greedy 743 vs
524 (1.42x, 12% slower than it); 183 and 191 of the 200 translations identical to fp32's (per-matrix: 164 and 181).
"""

from __future__ import annotations

import copy

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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).float()  # (N, in)
        row_scale = rows.abs().amax(dim=1, keepdim=True).clamp(min=torch.finfo(torch.float32).tiny) / 127  # (N, 1)
        q = (rows / row_scale).round().clamp(-127, 127).to(torch.int8)
        out = torch._int_mm(q, self.weight_t).float() * (row_scale * self.scale)  # (N, out)
        if self.bias is not None:
            out = out + self.bias
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
        return int8_linears(copy.deepcopy(model).eval())
