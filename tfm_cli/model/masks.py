"""Attention masks (paper section 3.2.3): padding masks for keys and the decoder's causal mask.

Convention (the same as `F.scaled_dot_product_attention`): a bool mask, True = this query may attend to this key.
Padding masks cover keys only (broadcast over heads and queries) and the causal mask always keeps the diagonal, so
no softmax row is ever fully masked as long as each sequence holds a real token, and each target starts with one
(BOS): a padded query position then still sees real keys (its output is never used).
"""

from __future__ import annotations

import torch


def padding_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(B, L) token ids -> (B, 1, 1, L) bool, True where the key is a real token."""
    return (ids != pad_id)[:, None, None, :]


def causal_mask(length: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(1, 1, L, L) bool lower-triangular mask: position i may attend to positions <= i (no look-ahead)."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()[None, None]


def target_mask(tgt: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(B, T) decoder input ids -> (B, 1, T, T) bool: causal and key padding combined."""
    return padding_mask(tgt, pad_id) & causal_mask(tgt.size(1), tgt.device)
