"""`tfm inspect-attn --image FILE`: one kind of attention as a PNG or SVG heatmap, drawn with matplotlib.

`layer` and `head` are 0-based indexes into the report's lists (titles print them 1-based, as the HTML page does):
`layer=None` draws every layer side by side, `head=None` draws the mean over the heads.
"""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path
from typing import Any

from tfm_cli.errors import TfmError, install_hint


def _needs_matplotlib() -> TfmError:
    return TfmError("writing an attention image needs matplotlib", hint=install_hint("plot"))


def check_matplotlib() -> None:
    """Refuse `--image` before anything is written (an `--html` beside it), where matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401 - (the image imports it next)
    except ImportError as err:
        raise _needs_matplotlib() from err

FORMATS = (".png", ".svg")
KINDS = {
    # kind: (title, report key of the query tokens, of the key tokens, n_layers key, axis names)
    "encoder": ("Encoder self-attention", "src_tokens", "src_tokens", "encoder", ("source", "source")),
    "decoder": ("Decoder masked self-attention", "tgt_tokens", "tgt_inputs", "decoder", ("predicts", "reads")),
    "cross": ("Encoder-decoder cross-attention", "tgt_tokens", "src_tokens", "decoder", ("predicts", "source")),
}
MAX_LABEL = 24
MAX_CELLS_INCHES = 60.0  # the longest side of a figure's heatmap cells, all panels together
_MISSING_GLYPH = re.compile(r"Glyph (\d+) .*missing from font\(s\) (.+?)\.?$", re.S)


class ImageOptionError(TfmError, ValueError):
    """A bad file extension, kind, layer or head: a `TfmError` for the CLI, a `ValueError` for Python callers."""


def _short(token: str) -> str:
    return token if len(token) <= MAX_LABEL else token[: MAX_LABEL - 1] + "…"


def _check(report: dict[str, Any], path: Path, kind: str, layer: int | None, head: int | None) -> None:
    if path.suffix.lower() not in FORMATS:
        raise ImageOptionError(
            f"cannot write {path.name!r}: the image format is chosen by the extension, one of "
            f"{', '.join(FORMATS)}",
            hint=f"name the file e.g. {path.stem or 'attention'}.png or {path.stem or 'attention'}.svg",
        )
    if kind not in KINDS:
        raise ImageOptionError(f"unknown attention kind {kind!r}: expected one of {', '.join(KINDS)}")
    n_layers = len(report["attention"][kind])
    if layer is not None and not 0 <= layer < n_layers:
        raise ImageOptionError(f"layer index {layer} is out of range: the {kind} has {n_layers} layers (0-based)")
    if head is not None and not 0 <= head < report["n_heads"]:
        raise ImageOptionError(f"head index {head} is out of range: there are {report['n_heads']} heads (0-based)")


def write_image(report: dict[str, Any], path: Path, kind: str, layer: int | None, head: int | None) -> Path:
    """Write the `kind` ("encoder", "decoder" or "cross") attention heatmap of `report` to `path` (.png or .svg).

    `layer`/`head` are 0-based; None means every layer (a grid) / the mean of the heads. Returns `path`.
    """
    path = Path(path)
    _check(report, path, kind, layer, head)
    check_matplotlib()
    try:
        import matplotlib
        import numpy as np
        from matplotlib.figure import Figure
    except ImportError as err:  # matplotlib (and numpy with it) is the optional [plot] extra
        raise _needs_matplotlib() from err

    title, q_key, k_key, _, (q_name, k_name) = KINDS[kind]
    queries, keys = report[q_key], report[k_key]
    weights = np.asarray(report["attention"][kind], dtype=float)  # layer, head, query, key
    per_head = weights if head is None else weights[:, head : head + 1]
    maps = per_head.mean(axis=1)  # layer, query, key
    layers = list(range(len(maps))) if layer is None else [layer]
    if kind == "decoder":  # the causal mask: future positions shown as masked, not as a weight of 0
        visible = report.get("decoder_visible") or list(range(1, len(queries) + 1))  # word level: see AttentionReport
        future = np.arange(len(keys))[None, :] >= np.asarray(visible)[:, None]
        maps = np.ma.masked_array(maps, mask=np.broadcast_to(future, maps.shape))

    cols = len(layers) if len(layers) <= 3 else math.ceil(math.sqrt(len(layers)))
    rows = math.ceil(len(layers) / cols)
    # Inches per token: 0.26 fits a label beside every row and column. A long sentence gets smaller cells, so
    # that the grid of cells stays within MAX_CELLS_INCHES (9,000 pixels at 150 dpi; 645 tokens on three layers
    # drew a 75,000-pixel-wide canvas and took more than 23 GB), and a label on every `step`-th token only.
    cell = min(0.26, MAX_CELLS_INCHES / max(len(keys) * cols, len(queries) * rows))
    step = math.ceil(0.13 / cell)  # an 8-point label needs about 0.13 inches
    label = 0.085 * max(len(_short(t)) for t in [*queries, *keys]) + 0.5
    panel_w, panel_h = max(2.2, len(keys) * cell) + label, max(2.0, len(queries) * cell) + label
    fig = Figure(figsize=(cols * panel_w + 1.2, rows * panel_h + 0.9), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)

    cmap = matplotlib.colormaps["Blues"].with_extremes(bad="#eef0f3")
    image = None
    for ax, index in zip(axes.flat, layers, strict=False):
        image = ax.imshow(maps[index], cmap=cmap, vmin=0.0, vmax=1.0, aspect="equal", interpolation="nearest")
        # parse_math=False: a token or word such as "$$" is text, not mathtext (a ParseException, or "$x$" in italics)
        ax.set_xticks(range(0, len(keys), step), [_short(t) for t in keys[::step]], rotation=60, ha="right",
                      rotation_mode="anchor", fontsize=8, parse_math=False)
        ax.set_yticks(range(0, len(queries), step), [_short(t) for t in queries[::step]], fontsize=8, parse_math=False)
        ax.set_xlabel(f"key ({k_name})", fontsize=8, color="#5b6575")
        ax.set_ylabel(f"query ({q_name})", fontsize=8, color="#5b6575")
        ax.tick_params(length=0)
        for side in ax.spines.values():
            side.set_visible(False)
        if len(layers) > 1:
            ax.set_title(f"layer {index + 1}", fontsize=9)
    for ax in list(axes.flat)[len(layers) :]:
        ax.set_axis_off()

    n_layers = len(maps)
    where = "all layers" if layer is None else f"layer {layer + 1} of {n_layers}"
    heads = report["n_heads"]
    which = ("its one head" if heads == 1 else f"mean of {heads} heads") if head is None else f"head {head + 1} of {heads}"
    fig.suptitle(f"{title} · {where} · {which}", fontsize=11)
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight")
    from tfm_cli.cli.common import warn, write_output

    suffix = path.suffix.lower().lstrip(".")  # the format: the temporary file written first has another suffix
    with warnings.catch_warnings(record=True) as caught:  # matplotlib warns once per missing glyph, source line and all
        warnings.simplefilter("always")
        written = write_output(path, "--image", lambda tmp: fig.savefig(tmp, format=suffix, dpi=150 if suffix == "png" else None))
    missing: dict[str, str] = {}  # character -> the font(s) that lack it
    for w in caught:
        found = _MISSING_GLYPH.match(str(w.message))
        if found:
            missing.setdefault(chr(int(found.group(1))), found.group(2))
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    if missing:
        chars = " ".join(list(missing)[:12]) + (f" (and {len(missing) - 12:,} more)" if len(missing) > 12 else "")
        warn(
            f"the image's font ({', '.join(sorted(set(missing.values())))}) has no glyph for {chars}: labels holding them "
            f"are drawn with empty boxes in {path}; add a font that has them (e.g. Noto Sans CJK JP) to font.sans-serif "
            "in your matplotlibrc, or see the labels in the --html page"
        )
    return written
