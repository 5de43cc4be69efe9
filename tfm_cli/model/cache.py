"""The decoder's key/value cache for incremental decoding (paper section 3.2.3: the decoder is auto-regressive).

At inference the decoder produces one token at a time. Recomputing every past position at every step costs
O(T^2) projections; keeping each layer's keys and values avoids that:

- self-attention K/V grow by one position per step (the new token's projections are appended);
- cross-attention K/V depend only on the encoder memory, so they are computed once per source.

The cache is an explicit argument of `Transformer.decode` (never hidden module state). Beam search reorders the
self-attention part by beam index after each step; the cross-attention part is identical for all beams of one
sentence, so it only needs selecting when finished sentences leave the batch.

Shapes: B batch (sentences x beams), H heads, t positions so far, S source length, Dh = d_k.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class LayerCache:
    """Keys and values of one decoder layer."""

    self_k: torch.Tensor | None = None  # (B, H, t, Dh), grows along t
    self_v: torch.Tensor | None = None  # (B, H, t, Dh)
    cross_k: torch.Tensor | None = None  # (B, H, S, Dh), computed once from the memory
    cross_v: torch.Tensor | None = None  # (B, H, S, Dh)

    def append_self(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new positions' (B, H, t_new, Dh) keys/values; return the full (B, H, t, Dh) tensors."""
        if self.self_k is None:
            self.self_k, self.self_v = k, v
        else:
            self.self_k = torch.cat([self.self_k, k], dim=2)
            self.self_v = torch.cat([self.self_v, v], dim=2)
        return self.self_k, self.self_v


@dataclass
class KVCache:
    """Per-layer K/V of a decoder stack, plus how many target positions have been decoded."""

    layers: list[LayerCache] = field(default_factory=list)
    length: int = 0  # target positions already in the cache; the next token's position index

    @classmethod
    def empty(cls, n_layers: int) -> KVCache:
        return cls(layers=[LayerCache() for _ in range(n_layers)])

    def reorder(self, index: torch.Tensor) -> None:
        """Keep/duplicate hypotheses: row i of the new cache is row index[i] of the old (beam search).

        Only self-attention K/V are touched: cross-attention K/V are the same for every beam of a sentence, and
        `index` must keep each row within its own sentence's beams.
        """
        for layer in self.layers:
            if layer.self_k is not None:
                layer.self_k = layer.self_k.index_select(0, index)
                layer.self_v = layer.self_v.index_select(0, index)

    def select(self, index: torch.Tensor) -> None:
        """Keep rows `index` of everything, cross-attention included, in that order: finished sentences leave the
        batch, surviving beams are reordered, and on the first beam step each sentence's row is repeated K times."""
        for layer in self.layers:
            for name in ("self_k", "self_v", "cross_k", "cross_v"):
                value = getattr(layer, name)
                if value is not None:
                    setattr(layer, name, value.index_select(0, index))
