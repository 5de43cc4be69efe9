"""Dropout (section 5.4) with a faster keep-mask on CPU; `nn.Dropout` everywhere else.

The paper drops sublayer outputs before the residual sum and the sums of embeddings and positions, at
P_drop = 0.1 for the base model; `transformer.py` places it, this module only draws the masks.
"""

from __future__ import annotations

import math

import torch
from torch import nn

REDUCED = (torch.bfloat16, torch.float16)  # the 16-bit floats (here: whose scale of the survivors is kept in fp32)


class Dropout(nn.Dropout):
    """`nn.Dropout`: each element zeroed with probability p, the rest scaled by 1 / (1 - p).

    On CPU the keep-mask is drawn as 16-bit random integers, four from each 64-bit draw of torch's generator
    (`random_` over the full int64 range, viewed as int16), instead of `bernoulli_` or `torch.rand`: one element
    is dropped when its integer falls in the lowest round(p * 65536) of the 65,536 values, so p is taken to the
    nearest multiple of 2^-16 (0.1 becomes 0.100006) and the survivors are scaled by the exact 1 / (1 - p) of
    that rate (in bf16 and fp16 each product x * 1 / (1 - p) is rounded on its own, the scale is never rounded).
    Measured on a 2-core AVX-512 CPU for the quickstart's (3,400 x 256) bf16 activations: the masked product
    5.5 ms with F.dropout (bernoulli_), 2.9 ms with `torch.rand(...) >= p`, 1.5 ms this way; 17 dropouts run
    per training step. The generator is torch's, so seeds and saved RNG states (exact resume) work
    as for any other draw. Elsewhere F.dropout (fused on CUDA).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x  # the identity (skipping F.dropout's call saves a little at each decoding step)
        if x.device.type != "cpu" or torch.compiler.is_compiling():  # (the compiler draws its own masks)
            return super().forward(x)
        if self.p == 1.0:
            return x * 0.0
        if x.dtype in REDUCED:
            # 1 / (1 - p) in bf16 is 1.109375 for p = 0.1, not 1.111: a mask holding it scaled every kept element
            # down alike, by 0.16%, a bias that no rounding noise averages out. Here x is multiplied by the scale in
            # fp32 arithmetic and each product rounded to bf16 on its own, so activations of varied sizes keep
            # their mean (the errors go both ways; a constant input still rounds alike), then the dropped elements
            # are zeroed: the same draws as the mask below, one pass fewer.
            dropped, scale = _drop_rate(self.p)
            return x.mul(scale).masked_fill_(_uniform16(x.shape, x.device).lt(dropped - 32768), 0)
        return x * keep_mask(x.shape, self.p, x.dtype, x.device)


def _drop_rate(p: float) -> tuple[int, float]:
    """How many of the 65,536 16-bit values drop an element (p to the nearest 2^-16, at most 65,535 of them),
    and 1 / (1 - p) for the rate actually drawn."""
    dropped = min(round(p * 65536), 65535)
    return dropped, 65536 / (65536 - dropped)


def _uniform16(shape: torch.Size, device: torch.device) -> torch.Tensor:
    """Independent uniform int16 values in [-2^15, 2^15) of `shape`, four from each 64-bit draw."""
    n = math.prod(shape)
    bits = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-(2**63), None)  # all 64 bits
    return bits.view(torch.int16)[:n].view(shape)


def keep_mask(shape: torch.Size, p: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A dropout mask of `shape`: 0 with probability p (to the nearest 2^-16), else 1 / (1 - p), in `dtype`."""
    uniform16 = _uniform16(shape, device)  # four independent uniform integers in [-2^15, 2^15)
    dropped, scale = _drop_rate(p)
    return uniform16.ge(dropped - 32768).to(dtype).mul_(scale)  # the lowest `dropped` values drop
