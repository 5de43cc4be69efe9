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
