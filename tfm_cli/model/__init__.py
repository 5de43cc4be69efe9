"""The model core: pure PyTorch, no CLI, YAML or tokenizer imports (the layering the README's Architecture section draws).

`ModelConfig` and the masks' names are importable without loading torch's model code until used: the torch
parts load lazily (PEP 562), so `tfm_cli.recipe` can use `tfm_cli.model.config` without importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tfm_cli.model.config import ModelConfig, config_problems

if TYPE_CHECKING:  # what type checkers read (`X as X`: a re-export); at run time `__getattr__` imports them
    from tfm_cli.model.cache import KVCache as KVCache
    from tfm_cli.model.cache import LayerCache as LayerCache
    from tfm_cli.model.masks import causal_mask as causal_mask
    from tfm_cli.model.masks import padding_mask as padding_mask
    from tfm_cli.model.masks import target_mask as target_mask
    from tfm_cli.model.transformer import Transformer as Transformer
    from tfm_cli.model.transformer import attention as attention
    from tfm_cli.model.transformer import sinusoidal_table as sinusoidal_table

_LAZY = {
    "KVCache": "tfm_cli.model.cache",
    "LayerCache": "tfm_cli.model.cache",
    "causal_mask": "tfm_cli.model.masks",
    "padding_mask": "tfm_cli.model.masks",
    "target_mask": "tfm_cli.model.masks",
    "Transformer": "tfm_cli.model.transformer",
    "attention": "tfm_cli.model.transformer",
    "sinusoidal_table": "tfm_cli.model.transformer",
}

__all__ = ["ModelConfig", "config_problems", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tfm_cli.model' has no attribute {name!r}")
