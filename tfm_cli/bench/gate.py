"""The CI gate: compare a benchmark result with a baseline result of the same kind and name each regression.

Records are matched by their `id`. For each kind a few figures are gated, each with the direction that is
better: attention time (lower), training target tokens/s (higher), translation sentences/s (higher) and median
batch latency (lower). A figure regresses when it is worse than the baseline by more than the tolerance; a
record that the baseline measured but that now fails (unsupported, skipped) regresses too. Records that only
one side has are listed, not failed: a different set of lengths or batch sizes is a different question; but a
gate that compares no figure at all fails (the CLI), and so does a baseline of another workload (another batch,
width, model shape or variant, precision, sentence length limit or output length: `WORKLOAD`), whose figures answer another question under the
same ids. The peers' records (`"peer": true`: HF MarianMT, CTranslate2, measured by `--compare`) are compared
and listed but never fail the gate: their speed is not this project's to regress, and a peer that got as much
slower as tfm says the machine did.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tfm_cli.errors import TfmError, shell_word
from tfm_cli.files import json_value

GATED: dict[str, dict[str, str]] = {
    "attention": {"median_ms": "lower"},
    "train": {"tgt_tokens_per_s": "higher"},
    "translate": {"sentences_per_s": "higher", "latency_p50_ms": "lower"},
}
EXACTLY = 1e-9  # relative changes this close to the tolerance are at it (0.3 -> 0.33 is +10.000000000000009%)
_ENVIRONMENT_KEYS = ("device_name", "cpu_capability", "threads", "dtype", "torch")
WORKLOAD: dict[str, tuple[str, ...]] = {  # the settings that change what a record's figures measure
    "attention": ("batch", "heads", "d_k", "dtype"),
    "train": (
        "model", "max_tokens", "accum_steps", "precision", "corpus", "corpus_content", "max_len",
        "steps", "warmup", "seed", "dropout", "attn_dropout", "clip_norm",  # which batches are timed, and their cost
        "compile",  # (train.compile: a baseline written before it was recorded ran without)
    ),
    "translate": ("model", "sentences", "src_len", "out_len", "beam", "precision"),
}


def parse_tolerance(text: str) -> float:
    """'10%' or '0.1' -> 0.1."""
    value = text.strip()
    try:
        tolerance = float(value[:-1]) / 100 if value.endswith("%") else float(value)
    except ValueError:
        raise TfmError(f"--tolerance {text!r} is not a number", hint="write it as 10% or 0.1") from None
    if not math.isfinite(tolerance):  # "inf" was told to write "inf%"
        raise TfmError(f"--tolerance {text!r} is not a finite number", hint="write it as 10% or 0.1")
    if not value.endswith("%") and tolerance > 1:  # `--tolerance 5` meant 5%, not a gate that passes 6x slower
        raise TfmError(
            f"--tolerance {text!r} is a share of {tolerance:.0%}: a number without % is a share (0.1 = 10%)",
            hint=f"write {value}% for {value} percent" + (f" (or {tolerance:.0%} if you mean it)" if tolerance <= 10 else ""),
        )
    if not 0 <= tolerance <= 10:
        raise TfmError(
            f"--tolerance {text!r} is out of range: from 0% to 1000% (without %: a share from 0 to 1)",
            hint="write a percentage with its sign, e.g. 10% (or the share 0.1)",
        )
    return tolerance


WRITES: dict[str, str] = {  # how a baseline of each kind is written, where the command typed is not known
    "attention": "tfm bench attention --json",
    "train": "tfm bench train RECIPE --json",
    "translate": "tfm bench translate --model RUN --json",
}


def load_baseline(path: Path, kind: str | None = None, command: str | None = None) -> dict[str, Any]:
    """A result written by `tfm bench KIND --json`; TfmError naming the file if it is not one, or (with `kind`) if
    it is a result of another kind. The hints say how to write one: `command` (the benchmark command that gates,
    without --baseline; `tfm bench KIND ... --json` otherwise) redirected into a file."""
    def write(into: str | Path, again: bool = False) -> str:
        writes = command or (WRITES[kind] if kind in WRITES else "tfm bench attention|train|translate ... --json")
        return f"write {'the baseline again' if again else 'one'} with `{writes} > {shell_word(into)}`"

    try:
        data = json_value(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TfmError(f"baseline {path} does not exist", hint=write(path)) from None
    except (OSError, ValueError) as error:  # (UnicodeDecodeError and JSON errors are ValueErrors)
        raise TfmError(f"baseline {path} is not a JSON file ({error})", hint=write(f"{kind or 'bench'}-baseline.json")) from None
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str) or data["kind"] not in GATED or not isinstance(data.get("records"), list):
        raise TfmError(
            f"baseline {path} is not a tfm bench result (no kind and records)",
            hint=write(f"{kind or 'bench'}-baseline.json"),
        )
    if kind is not None and data["kind"] != kind:  # its records' ids and figures answer another benchmark
        raise TfmError(
            f"baseline {path} is a result of `tfm bench {data['kind']}`, not of `tfm bench {kind}`: it can only gate "
            f"`tfm bench {data['kind']}`",
            hint=f"write {'an' if kind[0] in 'aeiou' else 'a'} {kind} baseline with `{command or WRITES[kind]} > {kind}-baseline.json`",
        )
    for key in ("settings", "environment"):  # read by the gate after the measuring: a list or null failed there
        if key in data and not isinstance(data[key], dict):
            raise TfmError(
                f"baseline {path}: its \"{key}\" is {json.dumps(data[key])[:40]}, not an object",
                hint=write(path, again=True),
            )
    workload = WORKLOAD[data["kind"]]
    if not any(key in (data.get("settings") or {}) for key in workload):  # cut short, or trimmed by hand
        raise TfmError(
            f"baseline {path} does not say what it measured (no \"settings\" with {', '.join(workload)}): the gate "
            "could not tell a baseline of another workload from one of this",
            hint=write(path, again=True),
        )
    seen: dict[str, int] = {}
    for i, record in enumerate(data["records"], start=1):  # checked before anything is measured
        problem = _record_problem(record, data["kind"])
        if problem is None and record["id"] in seen:  # one of the two would be compared, the other never
            problem = f"repeats the id {record['id']} of record {seen[record['id']]}"
        if problem:
            raise TfmError(f"baseline {path}: record {i} {problem}", hint=write(path, again=True))
        seen[record["id"]] = i
    return data


def _record_problem(record: Any, kind: str) -> str | None:
    """What makes a baseline record unusable by the gate (edited by hand, cut short), or None."""
    if not isinstance(record, dict):
        return f"is a {type(record).__name__}, not an object"
    if not isinstance(record.get("id"), str):
        return "has no id"
    if record.get("status", "ok") != "ok":
        return None
    for figure in GATED[kind]:
        value = record.get(figure)
        if value is None:  # the gate would skip it without a word, and CI would no longer gate that figure
            return f"({record['id']}) has no {figure}: every record measured has it"
        number = value if isinstance(value, float) else _as_float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(number) or number <= 0:
            shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:20]}... ({len(repr(value))} digits)"
            return f"({record['id']}) has {figure}={shown}: a figure is a positive number (such a one could never regress)"
    return None


def _as_float(value: Any) -> float:
    """A JSON number as a float; an integer too large for one (10**400) as infinity, not an OverflowError."""
    try:
        return float(value)
    except (OverflowError, TypeError, ValueError):
        return math.inf if isinstance(value, int) else math.nan


def _changes(key: str, before: Any, now: Any) -> list[str]:
    """How a workload setting changed ("out_len 24 -> 4"), or []. Of a dict (the model's settings) each key the
    baseline has is compared on its own ("model.norm 'post' -> 'pre'"), so that a baseline written before a key
    was added still compares on the ones it names."""
    if isinstance(before, dict) and isinstance(now, dict):
        return [f"{key}.{k} {v!r} -> {now.get(k)!r}" for k, v in before.items() if k not in now or now[k] != v]
    return [f"{key} {before!r} -> {now!r}"] if before != now else []


def compare(current: dict[str, Any], baseline: dict[str, Any], tolerance: float) -> dict[str, Any]:
    """Regressions of `current` against `baseline` beyond `tolerance` (a share: 0.1 = 10%).

    Returns {"tolerance", "compared", "regressions": [{id, figure, baseline, current, change}], "peers": [the same,
    with "worse" (beyond the tolerance), for every figure of a peer's record: context, never a failure], "only_in_baseline",
    "only_in_current", "not_ok_in_baseline" (ids on both sides whose baseline record failed), "environment_differs":
    [keys]}; `change` is the relative change (+ = larger).
    """
    kind = current["kind"]
    if baseline["kind"] != kind:
        raise TfmError(
            f"the baseline is a benchmark of {baseline['kind']}, this is one of {kind}",
            hint=f"compare with a baseline written by `{WRITES[kind]} > {kind}-baseline.json`",
        )
    before_settings, now_settings = baseline.get("settings") or {}, current.get("settings") or {}
    if kind == "train" and "compile" not in before_settings and "model" in before_settings:
        before_settings = {**before_settings, "compile": False}  # written before train.compile was recorded
    keys = WORKLOAD[kind]
    if kind == "translate" and not all("beam" in s.get("modes", ("beam",)) for s in (before_settings, now_settings)):
        keys = tuple(k for k in keys if k != "beam")  # one side measured greedy search only: no beam width in it
    if "corpus_content" in before_settings:  # the corpus by what it holds; its path (as typed) only in older baselines
        keys = tuple(k for k in keys if k != "corpus")
    differs = [
        change for key in keys if key in before_settings
        for change in _changes(key, before_settings[key], now_settings.get(key))
    ]
    if differs:
        raise TfmError(
            f"the baseline measured another workload ({'; '.join(differs)}): its figures do not compare with these",
            hint="measure with the baseline's settings (its \"settings\" in the JSON), or write a new baseline",
        )
    old = {r["id"]: r for r in baseline["records"]}
    new = {r["id"]: r for r in current["records"]}
    regressions, peers, compared = [], [], 0
    for rid, before in old.items():
        after = new.get(rid)
        if after is None or before.get("status", "ok") != "ok":
            continue
        peer = bool(after.get("peer"))  # marked on the current side: a baseline written before the mark still compares
        if after.get("status", "ok") != "ok" and not peer:
            regressions.append({"id": rid, "figure": "status", "baseline": "ok", "current": after.get("status"), "change": None})
            continue
        for figure, better in GATED[kind].items():
            if before.get(figure) is None or after.get(figure) is None:
                continue
            b, a = float(before[figure]), float(after[figure])
            change = (a - b) / b if b else 0.0
            # "beyond the tolerance": a change of exactly 10% passes a 10% gate, whatever the figures' rounding
            worse = change < -tolerance - EXACTLY if better == "higher" else change > tolerance + EXACTLY
            entry = {"id": rid, "figure": figure, "baseline": b, "current": a, "change": change}
            if peer:
                peers.append({**entry, "worse": worse})
                continue
            compared += 1
            if worse:
                regressions.append(entry)
    env_old, env_new = baseline.get("environment", {}), current.get("environment", {})
    return {
        "tolerance": tolerance,
        "compared": compared,
        "regressions": regressions,
        "peers": peers,
        "only_in_baseline": sorted(set(old) - set(new)),
        "only_in_current": sorted(set(new) - set(old)),
        "not_ok_in_baseline": sorted(rid for rid, r in old.items() if rid in new and r.get("status", "ok") != "ok"),
        "environment_differs": [k for k in _ENVIRONMENT_KEYS if env_old.get(k) != env_new.get(k)],
    }
