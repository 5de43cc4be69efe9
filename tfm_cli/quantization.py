"""int8 weights for CPU translation: dynamic quantization of the model's linear layers.

Every `nn.Linear` (attention projections, feed-forward, the output projection) keeps its weights in int8 with
one scale per output row; each input row is quantized to int8 on the fly, multiplied in integers (fbgemm /
oneDNN kernels) and scaled back to fp32. Embeddings, LayerNorm and the softmax stay fp32. This is what
CTranslate2's and Marian's `int8` compute types do; decoding a few sentences at a time is limited by reading
weights from memory, which int8 makes four times smaller.

Measured on the quickstart model, all 2,000 dev sentences, a 2-core AVX-512 CPU, against fp32 with its linear
layers on packed oneDNN weights (packing.py): one thread, beam 4 at 220 vs 137 sentences/s (1.61x), greedy 569
vs 346 (1.64x); two threads 1.22x and 1.48x. BLEU 35.35 vs 35.43 (beam), 29.47 vs 29.81 (greedy).
Translations are not identical to fp32 ones (1,767 of 2,000 beam translations are).
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from tfm_cli.errors import TfmError
from tfm_cli.model import Transformer


def quantize_int8(model: Transformer) -> Transformer:
    """A copy of `model` for CPU inference whose linear layers run in int8 (the original is left as it was).

    Raises:
        TfmError: the model is not on the CPU, or this PyTorch build has no quantized CPU kernels.
    """
    device = next(model.parameters()).device
    if device.type != "cpu":
        raise TfmError(
            f"int8 runs on the CPU; this model is on {device}",
            hint="use --device cpu with --precision int8, or bf16/fp16 on CUDA",
        )
    engines = torch.backends.quantized.supported_engines
    if not any(e in engines for e in ("x86", "fbgemm", "onednn", "qnnpack")):
        raise TfmError("this PyTorch build has no quantized CPU kernels for int8", hint="use --precision fp32")
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():  # torch marks its quantized-tensor API as deprecated: not our users' concern
        warnings.simplefilter("ignore")
        quantized = quantize_dynamic(copy.deepcopy(model).eval(), {nn.Linear}, dtype=torch.qint8)
    return quantized
