"""tfm: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as a command-line toolkit.

Importing this package must stay cheap: it loads no torch, typer or rich.
"""

__version__ = "0.1.0"
