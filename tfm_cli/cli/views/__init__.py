"""Drawings for the terminal, in plain characters: they read the same at a terminal, in a pipe, in a CI log and
under NO_COLOR. Data comes from the library (`tfm_cli.monitor.read_curves`); nothing here computes a metric.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_EIGHTHS = " ▁▂▃▄▅▆▇█"
_SPARK = "▁▂▃▄▅▆▇█"


def _buckets(xs: Sequence[float], ys: Sequence[float], width: int) -> tuple[list[float], list[float]]:
    """At most `width` points: consecutive points averaged into equal-count buckets (x: the bucket's last)."""
    if len(ys) <= width:
        return list(xs), list(ys)
    out_x, out_y = [], []
    for i in range(width):
        lo, hi = i * len(ys) // width, (i + 1) * len(ys) // width
        out_x.append(xs[hi - 1])
        out_y.append(sum(ys[lo:hi]) / (hi - lo))
    return out_x, out_y


def _number(value: float) -> str:
    return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def bar_chart(label: str, xs: Sequence[float], ys: Sequence[float], height: int = 6, width: int = 60) -> list[str]:
    """A column chart of ys over xs, `height` rows of eighth-blocks, the y range on the left, x range below; one
    point is one line (a chart of it showed its value twice and "step 30 30")."""
    if len(ys) == 1:
        return [f"{label} {_number(ys[0])} at step {xs[0]:,.0f}"]
    xs, ys = _buckets(xs, ys, width)
    low, high = min(ys), max(ys)
    span = (high - low) or 1.0
    levels = [round((y - low) / span * (height * 8 - 1)) + 1 for y in ys]  # 1 .. height*8 eighths
    top, bottom = _number(high), _number(low)
    pad = max(len(label), len(top), len(bottom))
    lines = []
    for row in range(height - 1, -1, -1):  # top row first
        cells = "".join(_EIGHTHS[max(0, min(8, level - row * 8))] for level in levels)
        name = label if row == height - 1 else (top if row == height - 2 else (bottom if row == 0 else ""))
        lines.append(f"{name:>{pad}} │{cells}")
    lines.append(f"{'':>{pad}} └{'─' * len(levels)}")
    first, last = f"step {xs[0]:,.0f}", f"{xs[-1]:,.0f}"
    lines.append(f"{'':>{pad}}  {first}{' ' * max(1, len(levels) - len(first) - len(last))}{last}")
    return lines


def sparkline(values: Sequence[float]) -> str:
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    return "".join(_SPARK[round((v - low) / span * (len(_SPARK) - 1))] for v in values)


def curves_lines(curves: dict[str, Any], width: int = 60) -> list[str]:
    """The training loss as a column chart, dev BLEU and dev loss as sparklines with their values."""
    lines: list[str] = []
    train = curves["train"]
    if train:
        lines += bar_chart("train loss", [r["step"] for r in train], [r["loss"] for r in train], width=width)
    evals = curves["eval"]
    if evals:
        steps = ", ".join(f"{r['step']:,}" for r in evals) if len(evals) <= 6 else f"{evals[0]['step']:,} … {evals[-1]['step']:,}"
        bleu = [r["bleu"] for r in evals]
        loss = [r["loss"] for r in evals]
        n = evals[-1].get("sentences")
        subset = f" on {n:,} dev sentences" if n else ""
        lines.append(
            f"dev BLEU  {sparkline(bleu)}  {_number(bleu[0])} → {_number(bleu[-1])} (best {_number(max(bleu))}) "
            f"at steps {steps}{subset}"
        )
        lines.append(f"dev loss  {sparkline(loss)}  {_number(loss[0])} → {_number(loss[-1])} (best {_number(min(loss))})")
    final = curves["final"]
    if final is not None and "bleu" in final:
        which = "last checkpoint" if (final.get("final_model") or {}).get("chosen") == "last" else "averaged model"
        lines.append(
            f"final     BLEU {final['bleu']:.2f}  chrF {final['chrf']:.2f}  ({which}, {final.get('sentences', 0):,} dev "
            f"sentences, step {final['step']:,})"
        )
    return lines or ["no training records yet"]
