"""`tfm bench attention|train|translate`: measure, print a table (or --json), and optionally gate on a baseline.

Each subcommand parses its options, calls `tfm_cli.bench`, and renders: a rich table at a terminal (plain
tab-separated lines when piped), the environment in the title, progress on stderr. With --baseline FILE it then
compares against an earlier --json result and exits 1 naming each figure that regressed beyond --tolerance.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from tfm_cli.cli.common import (
    DEVICE_HELP,
    Command,
    Group,
    device_name,
    err,
    fancy_stderr,
    fancy_stdout,
    given_path,
    info,
    interrupted_status,
    print_json,
    print_table,
    stop_signals,
    warn,
)
from tfm_cli.errors import TfmError

app = typer.Typer(
    cls=Group,
    help="Measure attention across lengths, training and translation throughput; compare with peers; gate CI.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

BASELINE_HELP = "An earlier `--json` result: exit 1 naming every gated figure that got worse by more than --tolerance."
TOLERANCE_HELP = "How much worse a gated figure may get before --baseline fails: a percentage (10%) or a share (0.1)."
COMPARE_HELP = "Also time Hugging Face MarianMT with the same shapes on the same work (needs the bench extra)."
TRANSLATE_COMPARE_HELP = (
    "Also time HF MarianMT (same shapes) and CTranslate2 (these weights, at tfm's --precision where that build has "
    "it, else float32, said) on equal work. "
    "MarianMT needs the bench extra; CTranslate2 is left out, with a note, without the ctranslate2 extra."
)


def _ints(text: str, option: str, example: str) -> list[int]:
    try:
        values = [int(v) for v in text.replace(" ", "").split(",")]  # an empty item ("1,,2") is an error too
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a comma-separated list of integers", param_hint=option) from None
    if not values or min(values) < 1:
        raise typer.BadParameter(f"{text!r}: give positive integers, e.g. {example}", param_hint=option)
    return list(dict.fromkeys(values))  # a value given twice is measured once (two records of one id)


@contextlib.contextmanager
def _stoppable() -> Iterator[None]:
    """SIGTERM (a CI job's timeout, `kill`, `docker stop`) and SIGHUP stop a benchmark as Ctrl-C does: the train
    benchmark's scratch run is removed (a SIGTERM left it in the temporary directory), exit 128 + the signal."""
    received: list[int] = []
    try:
        with stop_signals() as received:
            yield
    except KeyboardInterrupt:
        raise typer.Exit(interrupted_status(received)) from None


@contextlib.contextmanager
def _progress() -> Iterator[Any]:
    """A transient progress line on stderr at a terminal: callback(label, done, total)."""
    if not fancy_stderr():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err,
        transient=True, redirect_stdout=False,  # stdout carries results only
    )
    task = bar.add_task("bench", total=None)
    with bar:
        yield lambda label, done, total: bar.update(task, description=label, completed=done, total=total)


def _bf16_words(native: bool, fast: bool) -> str:
    """How the CPU runs bf16, as a figure's reader needs it: whether it has the instructions, and whether 'auto'
    uses them (an Intel CPU's AVX512-BF16 without AMX is slower than its fp32: `runtime.cpu_has_fast_bf16`)."""
    if not native:
        return "no native bf16"
    return "native bf16" if fast else "native bf16, slower than fp32 without AMX: auto is fp32"


def _environment_line(env: dict[str, Any]) -> str:
    bf16 = _bf16_words(env.get("cpu_native_bf16"), env.get("cpu_fast_bf16", env.get("cpu_native_bf16")))
    where = env["device_name"] if env["device"].startswith("cuda") else f"{env['device_name']} ({env['cpu_capability']}, {bf16})"
    threads = f"{env['threads']} thread{'s' if env['threads'] != 1 else ''}"
    return f"{where}, {threads}, {env['dtype']}, torch {env['torch']}, tfm {env['tfm']}"


def _gate_inputs(baseline: Path | None, tolerance: str, kind: str) -> tuple[dict[str, Any], float] | None:
    """Read --baseline and --tolerance before measuring, so a wrong path fails in a second, not after the run."""
    from tfm_cli.bench.gate import load_baseline, parse_tolerance

    # A bad --tolerance or --baseline is a usage error (exit 2, as a bad --lengths), not exit 1, which a CI job
    # reads as "a figure got worse".
    try:
        share = parse_tolerance(tolerance)  # without --baseline too: a bad value is not silently ignored
    except TfmError as error:
        raise _usage_error(error, "--tolerance", "--tolerance ") from None
    if baseline is None:
        return None
    try:
        data = load_baseline(baseline, kind, _baseline_command(kind))
    except TfmError as error:
        raise _usage_error(error, "--baseline", "baseline ") from None
    if share >= 1 and kind in ("train", "translate"):  # a rate falls by 100% at most
        gated = "the p50 latency alone is gated" if kind == "translate" else "nothing can fail the gate"
        warn(f"--tolerance {tolerance} never fails a throughput figure (a rate can fall by 100% at most): {gated}")
    return data, share


def _baseline_command(kind: str) -> str | None:
    """The benchmark command as typed, less --baseline, --tolerance and --json, with --json: what writes a baseline
    that this command can be gated on (`tfm bench train recipes/tiny.yaml --json`); None when not started as it."""
    import shlex
    import sys

    args = sys.argv[1:]
    if args[:2] != ["bench", kind]:
        return None
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("--baseline", "--tolerance"):
            skip = True
        elif not arg.startswith(("--baseline=", "--tolerance=")) and arg != "--json":
            kept.append(arg)
    return shlex.join(["tfm", *kept, "--json"])


def _usage_error(error: TfmError, option: str, prefix: str) -> typer.BadParameter:
    """`error` about `option`'s value as Click's usage error: "Invalid value for OPTION: ...; HINT", exit 2."""
    said = error.message.removeprefix(prefix)
    return typer.BadParameter(f"{said}; {error.hint}" if error.hint else said, param_hint=option)


def _finish(result: dict[str, Any], json_out: bool, baseline: Path | None, gate_inputs, render) -> None:
    """Print the result (JSON or tables), then apply the gate."""
    gate = None
    if gate_inputs is not None:
        from tfm_cli.bench.gate import compare

        try:
            gate = compare(result, *gate_inputs)
        except TfmError:  # the baseline measured another workload: show what was measured, then say so
            print_json(result) if json_out else render(result)
            raise
        result = {**result, "gate": {"baseline": str(baseline), **gate}}
    if json_out:
        print_json(result)
    else:
        if not fancy_stdout():  # plain tables have no title: say where the figures come from on stderr
            info(f"measured on {_environment_line(result['environment'])}")
        render(result)
    if gate is None:
        return
    if gate["environment_differs"]:
        warn(f"the baseline was measured elsewhere ({', '.join(gate['environment_differs'])} differ): figures may not compare")
    if gate["only_in_baseline"]:
        warn(f"{len(gate['only_in_baseline'])} baseline figure(s) not measured now, e.g. {gate['only_in_baseline'][0]}")
    for r in gate["peers"]:  # context for the figures below: a peer slower by as much means the machine was
        if r["worse"]:
            info(
                f"peer (not gated): {r['id']} {r['figure']}: {r['baseline']:.4g} -> {r['current']:.4g} ({r['change']:+.1%}): "
                "a peer that much worse too points at the machine, not at tfm"
            )
    if gate["regressions"]:
        for r in gate["regressions"]:
            if r["change"] is None:
                err.print(f"[bold red]regression:[/bold red] {r['id']}: was ok, now {r['current']}", soft_wrap=True)
            else:
                err.print(
                    f"[bold red]regression:[/bold red] {r['id']} {r['figure']}: {r['baseline']:.4g} -> {r['current']:.4g} "
                    f"({r['change']:+.1%}, tolerance {_percent(gate['tolerance'])})", soft_wrap=True,
                )
        raise typer.Exit(1)
    if not gate["compared"]:  # a gate that compared nothing must not pass
        if gate["not_ok_in_baseline"]:  # measured on both sides, but the baseline's failed (out of memory, ...)
            raise TfmError(
                f"gate: no figure of {baseline} compares with these: the {len(gate['not_ok_in_baseline'])} record(s) "
                f"measured on both sides have no figure in the baseline (e.g. {gate['not_ok_in_baseline'][0]} is "
                f"not ok there)",
                hint="write a new baseline where these run, or measure what the baseline measured successfully",
            )
        raise TfmError(
            f"gate: no figure of {baseline} was measured now ({len(gate['only_in_baseline'])} in the baseline, "
            f"{len(gate['only_in_current'])} now, none in common)",
            hint="measure what the baseline measured (its lengths, batch sizes, modes), or write a new baseline",
        )
    info(f"gate: {gate['compared']} figure(s) within {_percent(gate['tolerance'])} of {baseline}")


def _percent(share: float) -> str:
    """0.1 -> '10%', 0.005 -> '0.5%': a tolerance as it was given, not rounded to a whole percent."""
    return f"{share * 100:.4g}%"


# ---- attention -------------------------------------------------------------------------------------------------


@app.command("attention", cls=Command)
def attention(
    lengths: str = typer.Option("64,128,256,512,1024,2048,4096", "--lengths", help="Sequence lengths, comma-separated (one that would not fit in memory is skipped, with the reason)."),
    batch: int = typer.Option(2, "--batch", min=1, help="Batch size B."),
    heads: int = typer.Option(8, "--heads", min=1, help="Heads H."),
    d_k: int = typer.Option(64, "--d-k", min=1, help="Per-head width d_k."),
    dtype: str = typer.Option("fp32", "--dtype", help="fp32, bf16 or fp16 (CUDA only)."),
    mask: list[str] = typer.Option(["padding"], "--mask", help="none, padding or causal; repeat for several."),
    impl: list[str] = typer.Option(None, "--impl", help="Implementations to run (default: all this device has); repeat for several.", show_default=False),
    forward_only: bool = typer.Option(False, "--forward-only", help="Time the forward pass only (default: forward, and forward+backward)."),
    repeat: int = typer.Option(5, "--repeat", min=1, help="Timed repetitions per figure (median and spread)."),
    warmup: int = typer.Option(1, "--warmup", min=0, help="Untimed runs first."),
    device: str = typer.Option("auto", "--device", callback=device_name, help=DEVICE_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the result as one JSON document."),
    baseline: Path = typer.Option(None, "--baseline", parser=given_path, metavar="<path>", help=BASELINE_HELP, show_default=False),
    tolerance: str = typer.Option("10%", "--tolerance", help=TOLERANCE_HELP),
) -> None:
    """Attention across sequence lengths: explicit math vs PyTorch SDPA and each of its backends.

    Time, FLOP/s, memory, and the fitted growth exponent of time with L (the paper's O(L^2)), after checking
    every implementation against the formula in float64.

    Examples:

      tfm bench attention

      tfm bench attention --lengths 128,512,2048 --mask causal --dtype bf16 --json > attention.json
    """
    import torch

    from tfm_cli.bench.attention import MASKS, PASSES, bench_attention, implementations
    from tfm_cli.bench.common import DTYPES
    from tfm_cli.runtime import resolve_device

    if dtype not in DTYPES:
        raise typer.BadParameter(f"{dtype!r} is not one of: {', '.join(DTYPES)}", param_hint="--dtype")
    mask, impl = list(dict.fromkeys(mask)), list(dict.fromkeys(impl or [])) or None  # each once
    for m in mask:
        if m not in MASKS:
            raise typer.BadParameter(f"{m!r} is not one of: {', '.join(MASKS)}", param_hint="--mask")
    torch_device = resolve_device(device)
    if dtype == "fp16" and torch_device.type != "cuda":
        raise TfmError("--dtype fp16 needs a CUDA device", hint="use --dtype fp32 or bf16 on CPU")
    available, every = implementations(torch_device), implementations(torch.device("cuda"))
    for name in impl or []:
        if name not in every:
            raise typer.BadParameter(f"{name!r} is not one of: {', '.join(every)}", param_hint="--impl")
        if name not in available:
            raise typer.BadParameter(f"{name!r} runs on CUDA only; on {torch_device.type} choose from: {', '.join(available)}", param_hint="--impl")
    gate_inputs = _gate_inputs(baseline, tolerance, "attention")
    with _stoppable(), _progress() as progress:
        done = [0]
        sizes = _ints(lengths, "--lengths", "64,128,256")
        passes = PASSES[:1] if forward_only else PASSES
        total = len(sizes) * len(passes) * len(mask) * len(impl or available)

        def on_record(record: dict[str, Any]) -> None:
            done[0] += 1
            if progress is not None:
                progress(f"attention {record['impl']} L={record['length']} {record['pass']}", done[0], total)

        def on_start(record: dict[str, Any], expected: tuple[float, int]) -> None:
            seconds, grown_from = expected
            if seconds >= LONG_MEASUREMENT_S:  # said before it starts: a huge length ran for many minutes unsaid
                warn(f"attention {record['impl']} L={record['length']:,} {record['pass']}: about {_duration(seconds)} "
                     f"(its time at L={grown_from:,} grown as L²); Ctrl-C stops it at the end of the call running")

        result = bench_attention(
            torch_device, sizes, batch, heads, d_k, dtype, mask, passes, impl or None, warmup, repeat, on_record,
            on_start,
        )
    _finish(result, json_out, baseline, gate_inputs, _render_attention)
    wrong = [r for r in result["records"] if r["status"] == "wrong"]
    if wrong:  # a kernel that computes something else: its speed is no figure, and a CI step must not pass
        raise TfmError(
            f"{len(wrong)} figure(s) came from an implementation whose output is not attention's, e.g. "
            f"{wrong[0]['id']}: {wrong[0]['reason']}",
            hint="report it with the JSON (`--json`: each record's max_abs_diff), naming the torch version and device",
        )
    if not any(r["status"] == "ok" for r in result["records"]):  # a CI step that measured nothing must not pass
        raise TfmError(
            f"nothing was measured: all {len(result['records'])} figure(s) were skipped or unsupported "
            f"({'each record of the JSON says why' if json_out else 'reasons above'})",
            hint="choose shorter --lengths, a smaller --batch or --heads, or other --impl/--mask/--dtype",
        )


LONG_MEASUREMENT_S = 60.0  # a length expected to take longer is said before it starts


def _duration(seconds: float) -> str:
    """`2 min`, `1 h 5 min`, `45 s`: an estimate's order, not its digits."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def _render_attention(result: dict[str, Any]) -> None:
    s = result["settings"]
    exponents = {(e["impl"], e["mask"], e["pass"]): e["exponent"] for e in result["summary"]["exponents"]}
    lengths = s["lengths"]
    rows = []
    for mask in s["masks"]:
        for pass_name in s["passes"]:
            for impl in s["impls"]:
                cells = []
                for length in lengths:
                    r = next(r for r in result["records"] if (r["impl"], r["mask"], r["pass"], r["length"]) == (impl, mask, pass_name, length))
                    cells.append(f"{r['median_ms']:.3g}" if r["status"] == "ok" else r["status"])
                e = exponents.get((impl, mask, pass_name))
                rows.append((impl, mask, "fwd+bwd" if pass_name == "forward+backward" else "fwd", *cells, f"{e:.2f}" if e is not None else "-"))
    title = (
        f"Attention, median ms (B={s['batch']}, H={s['heads']}, d_k={s['d_k']}) on {_environment_line(result['environment'])}"
    )
    print_table(title, ["impl", "mask", "pass", *[f"L={n}" for n in lengths], "exponent"], rows)
    from tfm_cli.bench.attention import FIT_FROM

    short = sorted({n for e in result["summary"]["exponents"] for n in e["lengths"] if n < FIT_FROM})
    if short:  # `--lengths 1,2` printed -0.05 as any exponent
        info(f"exponents fitted over lengths under {FIT_FROM} ({', '.join(map(str, short))}: fewer than three lengths reach "
             f"it), where fixed costs hide the growth: give --lengths up to 1024 or more for the O(L²) 2")
    rate_rows = []
    longest: dict[tuple[str, str, str], int] = {}  # per impl, mask and pass: a pass skipped at a length the
    for r in result["records"]:  # other pass measured (fwd+bwd needs twice the memory) keeps its own longest
        if r["status"] == "ok":
            key = (r["impl"], r["mask"], r["pass"])
            longest[key] = max(longest.get(key, 0), r["length"])
    for r in result["records"]:
        if r["status"] == "ok" and r["length"] == longest[(r["impl"], r["mask"], r["pass"])]:
            rate_rows.append((r["impl"], r["mask"], r["pass"], r["length"], r["flops_per_s"] / 1e9, r["spread"], r["lxl_matrix_mb"], r.get("peak_allocated_mb", "-")))
    print_table("At the longest length each implementation, mask and pass measured", ["impl", "mask", "pass", "L", "GFLOP/s", "spread", "LxL matrix MB", "peak alloc MB"], rate_rows)
    skipped = sorted((r for r in result["records"] if r["status"] != "ok"), key=lambda r: r["status"] != "wrong")
    for r in skipped[:5]:
        info(f"{r['id']}: {r['status']} ({r.get('reason', '')})")


# ---- train -----------------------------------------------------------------------------------------------------


@app.command("train", cls=Command)
def train(
    recipe: str = typer.Argument(..., help="Recipe YAML, e.g. recipes/tiny.yaml."),
    overrides: list[str] = typer.Argument(None, help="Recipe overrides as dotted.key=value.", show_default=False),
    steps: int = typer.Option(10, "--steps", min=1, help="Timed optimizer steps per phase."),
    warmup: int = typer.Option(3, "--warmup", min=0, help="Untimed optimizer steps first."),
    model_step_only: bool = typer.Option(False, "--model-step-only", help="Skip the trainer phase."),
    compare: bool = typer.Option(False, "--compare", help=COMPARE_HELP),
    device: str = typer.Option("auto", "--device", callback=device_name, help=DEVICE_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the result as one JSON document."),
    baseline: Path = typer.Option(None, "--baseline", parser=given_path, metavar="<path>", help=BASELINE_HELP, show_default=False),
    tolerance: str = typer.Option("10%", "--tolerance", help=TOLERANCE_HELP),
) -> None:
    """Training throughput on a recipe's real batches: the model step alone next to the trainer.

    The trainer is `tfm train` itself (the gap is the data path's cost plus the run-to-run spread of step times); with FLOPs per token, MFU, memory and
    padding share.

    Examples:

      tfm bench train recipes/tiny.yaml

      tfm bench train recipes/base.yaml train.max_tokens=4096 --steps 5 --compare --json
    """
    from tfm_cli.bench.train import bench_train, check_steps_fit, recipe_tokenizer
    from tfm_cli.recipe import load_recipe
    from tfm_cli.runtime import resolve_device
    from tfm_cli.training.checks import with_init_tokenizer

    # a fine-tuning recipe (train.init_from) trains with that model's tokenizer, as `tfm train` does
    resolved = with_init_tokenizer(load_recipe(recipe, list(overrides or [])))
    check_steps_fit(resolved, steps, warmup)  # before a tokenizer is trained on the corpus
    if compare:  # transformers missing: said before the tokenizer's training and the corpus's reading, not after
        from tfm_cli.bench.peers import check_transformers

        check_transformers()
    gate_inputs = _gate_inputs(baseline, tolerance, "train")
    torch_device = resolve_device(device)
    tokenizer = recipe_tokenizer(resolved, info)
    with _stoppable(), _progress() as progress:
        result = bench_train(resolved, torch_device, tokenizer, steps, warmup, not model_step_only, compare, progress)
    over = [f"{r['phase']} {r['mfu']:.0%}" for r in result["records"] if r["mfu"] > 1]
    if over:  # no step beats the peak: the peak was measured while something else used the device
        warn(f"MFU above 100% ({', '.join(over)}): the matmul peak measured first "
             f"({result['summary']['peak_flops_per_s'] / 1e12:.3f} TFLOP/s) was held back by other work on the device; "
             "measure again on a quiet machine")
    _finish(result, json_out, baseline, gate_inputs, _render_train)


def _render_train(result: dict[str, Any]) -> None:
    s, summary = result["settings"], result["summary"]
    rows = []
    for r in result["records"]:
        memory = r.get("peak_allocated_mb", r.get("peak_rss_mb"))
        rows.append((r["phase"], r["tgt_tokens_per_s"], r["step_ms"], r["spread"], r["flops_per_s"] / 1e12, r["mfu"] * 100, memory))
    memory_label = "peak alloc MB" if result["environment"]["device"].startswith("cuda") else "peak RSS MB"
    print_table(
        f"Training, recipe {s['recipe']} ({s['precision']}, {s['steps']} steps after {s['warmup']}) on {_environment_line(result['environment'])}",
        ["phase", "tgt tok/s", "step ms", "spread", "TFLOP/s", "MFU %", memory_label],
        rows,
    )
    facts = [
        ("parameters", summary["parameters"]),
        ("target tokens per step", round(summary["tgt_tokens_per_step"])),
        ("FLOPs per target token", f"{summary['flops_per_tgt_token'] / 1e6:,.1f} M"),
        ("padding share", f"{summary['padding_share']:.1%}"),
        ("matmul peak", f"{summary['peak_flops_per_s'] / 1e12:,.3f} TFLOP/s"),
    ]
    if "trainer_vs_model_step" in summary:
        facts.append(("trainer / model step", f"{summary['trainer_vs_model_step']:.2f}x"))
        facts.append(("trainer inside its model step", f"{summary['trainer_model_step_share']:.2%} of its time"))
        facts.append(("trainer waiting for batches", f"{summary['trainer_data_wait_share']:.2%} of its time"))
    if "model_step_vs_hf_marian" in summary:
        facts.append((f"model step / HF MarianMT ({summary['hf_marian_attention']} attention, the faster)",
                      f"{summary['model_step_vs_hf_marian']:.2f}x"))
    print_table("Summary", ["", "value"], facts)


# ---- translate -------------------------------------------------------------------------------------------------


@app.command("translate", cls=Command)
def translate(
    model: Path = typer.Option(None, "--model", "-m", parser=given_path, metavar="<path>", help="A trained run or .safetensors file (default: random weights of --recipe's shape).", show_default=False),
    recipe: Path = typer.Option(None, "--recipe", parser=given_path, metavar="<path>", help="Random weights with this recipe's model shape and vocabulary size (its tokenizer.path's, if it names one).", show_default=False),
    batch_sizes: str = typer.Option("1,8,32", "--batch-sizes", help="Sentences per batch, comma-separated."),
    sentences: int = typer.Option(64, "--sentences", min=1, help="Sources translated per configuration (a multiple of every batch size)."),
    src_len: int = typer.Option(20, "--src-len", min=1, help="Tokens per source."),
    out_len: int = typer.Option(24, "--out-len", min=1, help="Tokens every output is forced to (min = max length)."),
    beam: int | None = typer.Option(None, "--beam", min=1, show_default=False, help="Beam size for the beam rows (default 4)."),
    greedy_only: bool = typer.Option(False, "--greedy-only", help="Only greedy search."),
    beam_only: bool = typer.Option(False, "--beam-only", help="Only beam search."),
    no_cache: bool = typer.Option(True, "--no-cache/--cache-only", help="--no-cache (the default) times decoding without the K/V cache too, beside the cached search; --cache-only times the cached search alone."),
    compare: bool = typer.Option(False, "--compare", help=TRANSLATE_COMPARE_HELP),
    precision: str = typer.Option("auto", "--precision", help="auto (bf16 on CUDA and on CPUs with fast bf16: AMX, AMD's AVX512-BF16, Arm's BF16; else fp32), fp32, bf16, fp16, or int8 (CPU: int8 linear layers for tfm and both peers)."),
    device: str = typer.Option("auto", "--device", callback=device_name, help=DEVICE_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the result as one JSON document."),
    baseline: Path = typer.Option(None, "--baseline", parser=given_path, metavar="<path>", help=BASELINE_HELP, show_default=False),
    tolerance: str = typer.Option("10%", "--tolerance", help=TOLERANCE_HELP),
) -> None:
    """Translation throughput and latency per batch size: greedy and beam, with and without the K/V cache.

    Equal work: random sources of --src-len tokens, every output forced to --out-len tokens. With --compare,
    Hugging Face MarianMT (random weights, same shapes) and CTranslate2 (this model's weights) run it too.

    Examples:

      tfm bench translate --recipe recipes/base.yaml --compare

      tfm bench translate --model runs/tiny --compare --cache-only --batch-sizes 1,8,32

      tfm bench translate --model runs/tiny --compare --precision int8 --cache-only

      tfm bench translate --model runs/tiny --batch-sizes 1,16 --json > translate.json
    """
    from tfm_cli.bench.translate import bench_translate
    from tfm_cli.precisions import TRANSLATE_PRECISIONS
    from tfm_cli.runtime import resolve_device, resolve_precision
    from tfm_cli.translator import Translator

    if greedy_only and beam_only:
        raise typer.BadParameter("choose --greedy-only or --beam-only, not both", param_hint="--greedy-only")
    if greedy_only and beam is not None:  # it was accepted and ignored (`tfm translate --greedy` refuses --beam too)
        raise typer.BadParameter("--greedy-only measures no beam search: drop --beam", param_hint="--beam")
    beam = 4 if beam is None else beam
    if model is not None and recipe is not None:
        raise typer.BadParameter("--model and --recipe exclude each other: a trained model, or random weights of a recipe's shape", param_hint="--recipe")
    if model is None and recipe is None:
        raise typer.BadParameter("give a trained model (--model RUN) or a recipe for random weights (--recipe FILE)", param_hint="--model")
    if precision not in TRANSLATE_PRECISIONS:
        raise typer.BadParameter(f"{precision!r} is not one of: {', '.join(TRANSLATE_PRECISIONS)}", param_hint="--precision")
    sizes = _ints(batch_sizes, "--batch-sizes", "1,8,32")
    if max(sizes) > sentences:
        raise typer.BadParameter(
            f"a batch of {max(sizes)} sentences needs --sentences {max(sizes)} or more (it is {sentences})", param_hint="--batch-sizes"
        )
    ragged = [n for n in sizes if sentences % n]
    if ragged:  # the last batch would be smaller, and its latency counted as one of the full size
        step = math.lcm(*sizes)
        raise typer.BadParameter(
            f"{sentences} is not a multiple of the batch size {ragged[0]}: its last batch would hold "
            f"{sentences % ragged[0]} sentence(s) and be timed as a batch of {ragged[0]}; use --sentences "
            f"{-(-sentences // step) * step} (a multiple of every batch size)", param_hint="--sentences",
        )
    gate_inputs = _gate_inputs(baseline, tolerance, "translate")
    torch_device = resolve_device(device)
    if model is not None:
        net = Translator.load(model, device=torch_device).model
    else:
        net = _random_model(recipe)
    modes = ("greedy",) if greedy_only else ("beam",) if beam_only else ("beam", "greedy")
    # Limits of the model, not of the option (exit 1, as `tfm translate --beam` says them), named by option:
    limit = net.config.max_positions - 1  # a source ends with </s>, an output starts from <s>
    long = [(option, value) for option, value in (("--src-len", src_len), ("--out-len", out_len)) if value > limit]
    if long:  # both at once (the second was said only once the first was mended)
        said = " and ".join(f"{option} {value}" for option, value in long)
        raise TfmError(
            f"{said} {'is' if len(long) == 1 else 'are'} longer than this model holds: at most {limit} (its "
            f"max_positions={limit + 1}, one of them for the </s> a source ends with, or the <s> an output starts from)",
            hint=f"give {' and '.join(f'{option} {limit}' for option, _ in long)} or less",
        )
    if "beam" in modes and beam > net.config.vocab_size:  # as the Translator: a huge beam failed deep in torch
        raise TfmError(f"--beam {beam} is wider than the model's vocabulary ({net.config.vocab_size:,} tokens)",
                       hint=f"give --beam {net.config.vocab_size:,} or less")
    with _stoppable(), _progress() as progress:
        try:
            result = bench_translate(
                net, torch_device, precision if precision == "int8" else resolve_precision(precision, torch_device),
                sizes,
                sentences, src_len, out_len, modes, beam, (True, False) if no_cache else (True,), compare, progress,
            )
        except ValueError as error:
            raise TfmError(str(error), hint="see `tfm bench translate --help`") from None
    _finish(result, json_out, baseline, gate_inputs, _render_translate)


def _random_model(recipe: Path):
    import torch

    from tfm_cli.model import Transformer
    from tfm_cli.recipe import load_recipe, model_config

    r = load_recipe(recipe)
    vocab, ids = r.tokenizer.vocab_size, (0, 1, 2)
    if r.tokenizer.path:  # the model `tfm train` builds has that tokenizer's vocabulary, not tokenizer.vocab_size
        from tfm_cli.tokenizer import Tokenizer

        tokenizer = Tokenizer.load(r.tokenizer.path)
        vocab, ids = tokenizer.vocab_size, (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id)
    torch.manual_seed(0)
    return Transformer(model_config(r, vocab, *ids))


def _int8_share(engine: dict[str, Any], s: dict[str, Any]) -> str:
    """", 38 of 38 linear layers in int8" for an int8 run whose engine counted them ("" otherwise)."""
    layers = engine.get("linear_layers")
    if s["precision"] != "int8" or not layers:
        return ""
    return f", {layers['int8']} of {layers['int8'] + layers['float']} linear layers in int8"


def _render_translate(result: dict[str, Any]) -> None:
    s = result["settings"]
    rows = [
        (r["engine"], r["mode"], "yes" if r["cache"] else "no", r["batch_size"], r["sentences_per_s"], r["tokens_per_s"],
         r["latency_p50_ms"], r["latency_p95_ms"], r["batches"])
        for r in result["records"]
    ]
    m = s["model"]
    print_table(
        f"Translation, {s['sentences']} sources of {s['src_len']} tokens -> {s['out_len']} tokens, beam {s['beam']}, "
        f"d_model {m['d_model']}, {m['n_enc_layers']}+{m['n_dec_layers']} layers, vocab {m['vocab_size']:,} on "
        f"{_environment_line(result['environment'])}",
        ["engine", "mode", "cache", "batch", "sent/s", "tok/s", "p50 ms", "p95 ms", "batches"],
        rows,
    )
    fewest = min((r["batches"] for r in result["records"]), default=20)
    if fewest < 20:  # the default 64 sentences are two batches of 32: their p95 is nearly the slower of the two
        info(f"p50 and p95 are over the batches each row timed (the last column; {fewest} at the fewest): with fewer "
             "than 20, p95 is close to the slowest of them; --sentences times more")
    ratios = result["summary"]["ratios"]
    if ratios:
        print_table("tfm's sentences/s (with cache) over the other's (above 1x: tfm is faster)", ["against", "mode", "batch", "tfm/against"],
                    [(r["against"], r["mode"], r["batch_size"], f"{r['ratio']:.2f}x") for r in ratios])
    for name, peer in s.get("peers", {}).items():
        what = {"hf-marian": "transformers", "ct2": "CTranslate2"}.get(name, name)
        extra = (
            f", {peer['compute_type']}, {peer['intra_threads']} thread{'s' if peer['intra_threads'] != 1 else ''}"
            if "compute_type" in peer else ""
        )
        info(f"{name}: {what} {peer['version']}{extra}, weights: {peer['weights']}{_int8_share(peer, s)}")
    if s["precision"] == "int8" and "linear_layers" in s:
        info(f"tfm: {_int8_share(s, s).removeprefix(', ')}")
    for note in result["summary"].get("notes", []):
        warn(note)
