"""tfm: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as a command-line toolkit.

The Python API, shared with the `tfm` command line:

    from tfm_cli import Translator, load_recipe, train
    result = train(load_recipe("recipes/tiny.yaml", ["train.max_steps=200"]), "runs/tiny-short")
    t = Translator.load(result.run_dir)
    print(t.translate("Je suis étudiant."))

Importing this package stays cheap: it loads no torch, typer or rich until one of these names is used (PEP 562).
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and IDEs read (`X as X`: a re-export); at run time `__getattr__` imports
    from tfm_cli.errors import TfmError as TfmError
    from tfm_cli.recipe import Recipe as Recipe
    from tfm_cli.recipe import load_recipe as load_recipe
    from tfm_cli.training import TrainEvents as TrainEvents
    from tfm_cli.training import TrainResult as TrainResult
    from tfm_cli.training import train as train
    from tfm_cli.translator import DecodeSettings as DecodeSettings
    from tfm_cli.translator import InputTruncatedWarning as InputTruncatedWarning
    from tfm_cli.translator import Translation as Translation
    from tfm_cli.translator import Translator as Translator

__version__ = "0.1.0"

# oneDNN keeps a compiled kernel ("primitive") for every matrix-product shape it meets, in two caches of 1,024 each
# (oneDNN's own, and the one of ideep, torch's wrapper), and each holds up to a few MB: translating a stream, whose
# batches come in ever new shapes, grew by ~4 MB a new shape without a ceiling in sight (the quickstart model, beam 4,
# bf16: peak RSS 1.38 GB after 6,000 lines, 1.55 GB for the 2,000 dev sentences; a tiny model 1.7 GB after 200,000
# lines), and training grew with it (2.35 GB after 125 steps). With 128 kernels each, measured on a 2-core AVX-512 CPU:
# the dev set in 789 MB and no slower (15.0 s, against 15.7-17.1 s), training flat at 1.52 GB with steps as fast, and
# the whole quickstart at a 1.8 GB peak instead of 4.5 GB (same losses, same BLEU). Set here, before torch makes its first kernel (the caches read their capacity once); a value set in the
# environment is kept (0 crashes torch 2.13's ideep: do not).
ONEDNN_KERNEL_CACHE = 128
for _name in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"):
    os.environ.setdefault(_name, str(ONEDNN_KERNEL_CACHE))

_API = {
    "Translator": "tfm_cli.translator",
    "Translation": "tfm_cli.translator",
    "DecodeSettings": "tfm_cli.translator",
    "InputTruncatedWarning": "tfm_cli.translator",
    "load_recipe": "tfm_cli.recipe",
    "Recipe": "tfm_cli.recipe",
    "train": "tfm_cli.training",
    "TrainEvents": "tfm_cli.training",
    "TrainResult": "tfm_cli.training",
    "TfmError": "tfm_cli.errors",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'tfm_cli' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
