"""`tfm bench train RECIPE`: training throughput, the model step alone next to the trainer as `tfm train` runs it.

Both phases consume the same batches: the recipe's corpus, tokenised and cut into token-bucketed batches by the
same seeded `BatchStream` the trainer uses, so the first `warmup` optimizer steps are untimed and the next
`steps` are timed in both.

  model step  forward, label-smoothed loss, backward and the optimizer (`training.train_step`, the trainer's own
              code) on batches already on the device: the ceiling of what the trainer can reach. It runs over
              the batches twice and times the second pass, so that it meets no batch shape for the first time
              (the trainer, which runs after it, would otherwise be favoured by the kernels it left planned)
  trainer     `training.train` itself into a scratch run directory (batch building, host-to-device copies,
              logging, allocator trims: everything), timed between the trainer's own step events; it also
              reports the shares of its wall time spent waiting for the next batches (`data_wait_share`) and
              inside its model step (`model_step_share`: the trainer's throughput over its own step's)

The gap between the two is the data path's cost plus the run-to-run spread of step times; the trainer's
`model_step_share` measures the first alone. FLOPs per target token use the analytic count of the model's
matrix products with padding excluded (multiply-add = 2): forward = N_enc [S(8d^2 + 4 d d_ff) + 4 S^2 d]
+ N_dec [T(12 d^2 + 4 d d_ff) + 4 S d^2 + 4 T^2 d + 4 T S d] + 2 T d V per sentence, training = 3 x forward.
MFU is achieved FLOP/s over the measured matrix-multiply peak of this device in the training dtype.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tfm_cli.bench.common import (
    MODEL_SETTINGS,
    environment,
    matmul_peak,
    memory_budget_bytes,
    peak_memory_mb,
    peak_memory_start,
    summarize,
    synchronize,
)
from tfm_cli.corpus import corpus_text, is_mixture
from tfm_cli.data import Batch, BatchStream, encode_corpus, pad_multiple_for
from tfm_cli.errors import TfmError, human_size
from tfm_cli.model import ModelConfig
from tfm_cli.recipe import Recipe, model_config, reads_placeholders
from tfm_cli.runtime import autocast, resolve_precision, tune_cpu_allocator
from tfm_cli.tokenizer import Tokenizer
from tfm_cli.training import TrainEvents, inverse_sqrt_lr, setup_model, train, train_step
from tfm_cli.training.compiling import check_compile

Progress = Callable[[str, int, int], None]  # (phase, done, total)


def sentence_flops(config: ModelConfig, src_len: torch.Tensor, tgt_len: torch.Tensor) -> float:
    """Forward FLOPs of the matrix products for sentences of real lengths S (source) and T (target)."""
    d, f, v = config.d_model, config.d_ff, config.vocab_size
    s, t = src_len.double(), tgt_len.double()
    enc = config.n_enc_layers * (s * (8 * d * d + 4 * d * f) + 4 * s * s * d)
    dec = config.n_dec_layers * (t * (12 * d * d + 4 * d * f) + 4 * s * d * d + 4 * t * t * d + 4 * t * s * d)
    return float((enc + dec + 2 * t * d * v).sum())


def batch_figures(batches: list[Batch], config: ModelConfig) -> dict[str, float]:
    """Target tokens, training FLOPs (3 x forward) and padding share of a list of batches."""
    tokens = flops = padded = real = 0.0
    for b in batches:
        src_len = (b.src != config.pad_id).sum(dim=1).cpu()
        tgt_len = (b.tgt_out != config.pad_id).sum(dim=1).cpu()
        tokens += float(tgt_len.sum())
        flops += 3 * sentence_flops(config, src_len, tgt_len)
        padded += b.src.numel() + b.tgt_out.numel()
        real += float(src_len.sum() + tgt_len.sum())
    return {"tgt_tokens": tokens, "flops": flops, "padding_share": 1 - real / padded if padded else 0.0}


def prepare(
    recipe: Recipe, tokenizer: Tokenizer, n_groups: int, device: torch.device | None = None
) -> tuple[ModelConfig, list[list[Batch]]]:
    """The model config and the first `n_groups` optimizer steps' batches, exactly as the trainer draws them
    (padded as the trainer pads them for `device`)."""
    t = recipe.train
    corpus = encode_corpus(recipe.data.train, tokenizer, recipe.data.max_len, numbers=reads_placeholders(recipe))
    config = model_config(recipe, tokenizer.vocab_size, tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id)
    stream = BatchStream(
        corpus, t.max_tokens, t.seed, tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id,
        pad_multiple=pad_multiple_for(device) if device is not None else 1,
    )
    batches = iter(stream)
    groups = [[next(batches) for _ in range(t.accum_steps)] for _ in range(n_groups)]
    return config, groups


def bench_model_step(
    recipe: Recipe, config: ModelConfig, groups: list[list[Batch]], device: torch.device, precision: str,
    warmup: int, progress: Progress | None = None,
) -> dict[str, Any]:
    """The trainer's optimizer step alone on batches already on the device; the first `warmup` steps untimed."""
    torch.manual_seed(recipe.train.seed)
    model, optimizer, scaler = setup_model(config, recipe.train, device, precision)
    return time_steps("model step", model, optimizer, scaler, recipe, groups, device, precision, warmup, progress)


def time_steps(
    label: str, model, optimizer, scaler, recipe: Recipe, groups: list[list[Batch]], device: torch.device,
    precision: str, warmup: int, progress: Progress | None = None,
) -> dict[str, Any]:
    """Run `training.train_step` over `groups` (moved to the device first) twice, timing the second pass's
    steps after the first `warmup`.

    Any model with tfm's forward(src, tgt_in, src_mask, tgt_mask) -> logits and a `config` can be timed (the
    peers do this): the same batches, loss, schedule, optimizer settings and autocast.
    """
    t = recipe.train
    model.train()
    on_device = [[b.to(device) for b in group] for group in groups]
    amp = lambda: autocast(device, precision)  # noqa: E731
    peak_memory_start(device)
    # Two passes over the same batches, only the second timed: every batch shape has then been seen once, as
    # in whichever phase runs after this one (kernel plans, primitive caches, the allocator's heap), so the
    # order of the phases does not favour the later ones. The trainer phase skips its first `warmup` steps.
    times = []
    passes = [(p, i) for p in (0, 1) for i in range(len(on_device))]
    for done, (timed, i) in enumerate(passes, start=1):
        lr = inverse_sqrt_lr(i + 1, model.config.d_model, t.warmup_steps, t.lr_factor)
        synchronize(device)
        start = time.perf_counter()
        train_step(model, optimizer, scaler, on_device[i], lr, t, amp, device)
        synchronize(device)
        if timed and i >= warmup:
            times.append(time.perf_counter() - start)
        if progress is not None:
            progress(label, done, len(passes))
    return {"step_times": times, **peak_memory_mb(device)}


class _StepClock(TrainEvents):
    """Records when the trainer finishes each step."""

    def __init__(self, total: int, progress: Progress | None) -> None:
        self.times: dict[int, float] = {}
        self.waits: dict[int, float] = {}  # step -> seconds the trainer waited for that step's batches
        self.inside: dict[int, float] = {}  # step -> seconds inside that optimizer step (train_step)
        self.total, self.progress = total, progress

    def start(self, step: int, max_steps: int) -> None:
        self.times[step] = time.perf_counter()

    def step(self, step: int, metrics: dict[str, Any]) -> None:
        self.times[step] = time.perf_counter()
        if "data_wait_s" in metrics:
            self.waits[step], self.inside[step] = metrics["data_wait_s"], metrics["step_s"]
        if self.progress is not None:
            self.progress("trainer", step, self.total)


def bench_trainer(
    recipe: Recipe, tokenizer: Tokenizer, device: torch.device, warmup: int, steps: int,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """`training.train` itself for warmup + steps optimizer steps into a scratch run (no dev set, no eval).

    It logs every step, so that the time it waited for each step's batches (`data_wait_s`) and the time inside
    the step itself (`step_s`) are known per step: their shares of the trainer's wall time need no comparison
    across phases, whose step times vary by tens of percent from run to run on a shared CPU.
    """
    t = dataclasses.replace(  # no time budget: train.max_time would end the run before the steps it times
        recipe.train, max_steps=warmup + steps, max_time=None, save_every=10**9, eval_every=0, keep_last=1,
        average_last=1, log_every=1,
    )
    scratch = Path(tempfile.mkdtemp(prefix="tfm-bench-train-"))
    try:
        tokenizer.save(scratch / "tokenizer.json")  # the same vocabulary as the model-step phase
        run = dataclasses.replace(recipe, train=t, data=dataclasses.replace(recipe.data, dev=None))
        clock = _StepClock(warmup + steps, progress)
        peak_memory_start(device)
        ran = train(run, scratch, device, events=clock)
        memory = peak_memory_mb(device)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if ran.interrupted:  # Ctrl-C: the trainer kept its step in the scratch run and returned; the bench stops too
        raise KeyboardInterrupt
    timed = range(warmup + 1, warmup + steps + 1)
    per_step = [clock.times[i] - clock.times[i - 1] for i in timed]
    # The data path's direct cost, and all the trainer does besides its model step, as shares of its wall time
    wall = sum(per_step)
    waited = sum(clock.waits.get(i, 0.0) for i in timed)
    inside = sum(clock.inside.get(i, 0.0) for i in timed)
    return {"step_times": per_step, "data_wait_share": waited / wall, "model_step_share": inside / wall, **memory}


def _check_scratch_space(params: int) -> None:
    """Raise TfmError when the temporary folder cannot hold the trainer phase's scratch run (one checkpoint kept):
    the trainer's own check said "choose another --out", an option bench train has not, after the model step."""
    from tfm_cli.training.checks import run_files_size

    folder = Path(tempfile.gettempdir())
    need, free = run_files_size(params, keep_last=1), shutil.disk_usage(folder).free
    if free < need:
        raise TfmError(
            f"the trainer phase trains into a scratch run in {folder} (the temporary folder), which has "
            f"{human_size(free)} free, but the checkpoints and weights of this {params:,}-parameter model need about "
            f"{human_size(need)}",
            hint="point TMPDIR at a folder with room (TMPDIR=/big/tmp tfm bench train ...), or give --model-step-only",
        )


def bench_train(
    recipe: Recipe,
    device: torch.device,
    tokenizer: Tokenizer,
    steps: int = 10,
    warmup: int = 3,
    trainer: bool = True,
    compare: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Model step and trainer throughput on the recipe's real batches, with FLOPs, MFU, memory and padding.

    With `compare`, Hugging Face's MarianMT of the same shapes is timed on the same batches (the `bench` extra).
    """
    if steps < 1 or warmup < 0:
        raise ValueError(f"need steps >= 1 and warmup >= 0, got {steps} and {warmup}")
    check_steps_fit(recipe, steps, warmup)
    precision = resolve_precision(recipe.train.precision, device)
    if recipe.train.compile:  # said now, not after the batches are prepared
        check_compile(device)
    if device.type == "cpu":
        tune_cpu_allocator()  # as the trainer does, so that both phases run on the same allocator settings
    config, groups = prepare(recipe, tokenizer, warmup + steps, device)
    if compare:  # no transformers, or a model MarianMT has no equivalent of: said now, not after the measuring
        from tfm_cli.bench.peers import check_marian

        check_marian(config)
    timed = [b for group in groups[warmup:] for b in group]
    figures = batch_figures(timed, config)
    peak = matmul_peak(device, precision)
    params = config.num_parameters()

    if trainer:  # said before the model step is timed, not minutes later by the trainer's own check
        _check_scratch_space(params)
    phases = {"model step": bench_model_step(recipe, config, groups, device, precision, warmup, progress)}
    if trainer:
        phases["trainer"] = bench_trainer(recipe, tokenizer, device, warmup, steps, progress)
    if compare:  # both of Marian's attention implementations: SDPA, its default, is slow in bf16 on CPU
        from tfm_cli.bench.peers import MARIAN_ATTENTION, marian_train_step_times

        for attention in MARIAN_ATTENTION:
            phases[f"hf-marian-{attention} step"] = marian_train_step_times(
                recipe, config, groups, device, precision, warmup, progress, attention
            )

    records = []
    for phase, result in phases.items():
        seconds = sum(result["step_times"])
        stats = summarize(result["step_times"])
        achieved = figures["flops"] / seconds
        records.append({
            "id": f"train/{phase.replace(' ', '-')}",
            "phase": phase,
            "peer": phase.startswith("hf-"),  # not tfm's own figure: the gate lists it, never fails on it
            "tgt_tokens_per_s": figures["tgt_tokens"] / seconds,
            "step_ms": stats["median"] * 1000, "step_min_ms": stats["min"] * 1000, "step_max_ms": stats["max"] * 1000,
            "spread": stats["spread"], "steps": stats["n"],
            "flops_per_s": achieved, "mfu": achieved / peak["flops_per_s"],
            **{k: v for k, v in result.items() if k != "step_times"},
        })
    by_phase = {r["phase"]: r for r in records}
    summary: dict[str, Any] = {
        "flops_per_tgt_token": figures["flops"] / figures["tgt_tokens"],
        "padding_share": figures["padding_share"],
        "tgt_tokens_per_step": figures["tgt_tokens"] / steps,
        "peak_flops_per_s": peak["flops_per_s"],
        "parameters": params,
    }
    if "trainer" in by_phase:
        summary["trainer_vs_model_step"] = by_phase["trainer"]["tgt_tokens_per_s"] / by_phase["model step"]["tgt_tokens_per_s"]
        summary["trainer_data_wait_share"] = by_phase["trainer"]["data_wait_share"]
        summary["trainer_model_step_share"] = by_phase["trainer"]["model_step_share"]
    marian = [r for phase, r in by_phase.items() if phase.startswith("hf-marian")]
    if marian:  # against the faster of Marian's attention implementations, named
        fastest = max(marian, key=lambda r: r["tgt_tokens_per_s"])
        summary["model_step_vs_hf_marian"] = by_phase["model step"]["tgt_tokens_per_s"] / fastest["tgt_tokens_per_s"]
        summary["hf_marian_attention"] = fastest["phase"].removeprefix("hf-marian-").removesuffix(" step")
    settings = {
        "recipe": recipe.name, "steps": steps, "warmup": warmup, "precision": precision,
        "max_tokens": recipe.train.max_tokens, "accum_steps": recipe.train.accum_steps,
        "corpus": corpus_text(recipe.data.train) if is_mixture(recipe.data.train) else str(recipe.data.train),
        "corpus_content": corpus_content(recipe.data.train),
        "max_len": recipe.data.max_len,
        "model": {k: getattr(config, k) for k in MODEL_SETTINGS},
        # what else changes the batches timed (the seed shuffles them) or their cost (dropout masks, clipping)
        "seed": recipe.train.seed, "dropout": config.dropout, "attn_dropout": config.attn_dropout,
        "clip_norm": recipe.train.clip_norm, "compile": recipe.train.compile,
    }
    return {
        "kind": "train", "environment": environment(device, precision), "settings": settings,
        "records": records, "summary": summary,
    }


BATCH_TOKEN_BYTES = 8  # a lower bound per token of max_tokens: one int64 id (a batch holds three such tensors, masks)


def check_steps_fit(recipe: Recipe, steps: int, warmup: int) -> None:
    """Refuse, before any work, more steps than this machine could hold the batches of: every step's batches are
    prepared first, so a huge --steps or --warmup ran for hours and then ran out of memory. The estimate is a
    lower bound (a batch holds several times this), so that no run that fits is refused."""
    t = recipe.train
    need = (warmup + steps) * t.accum_steps * t.max_tokens * BATCH_TOKEN_BYTES
    budget = memory_budget_bytes(torch.device("cpu"))  # the batches are built on the host, whatever the device
    if need > budget:
        gib = 2**30
        raise TfmError(
            f"{warmup:,} warm-up and {steps:,} timed steps of up to {t.max_tokens:,} tokens hold at least "
            f"~{need / gib:,.1f} GiB of batches (all prepared first), more than the {budget / gib:,.1f} GiB a "
            "benchmark may use here",
            hint="lower --steps and --warmup (10 and 3 by default)",
        )


def corpus_content(spec: Any) -> str:
    """What the gate compares of a corpus, whatever path names it: each file's size in bytes and a digest of its
    first and last MiB ("6123010:1f0c9a2b4d6e8f01"; a list's files joined by "+"; a mixture's corpora each in
    parentheses with its weight). The path alone refused the same
    file given another way and passed another corpus under the same relative path."""
    import hashlib

    from tfm_cli.corpus import corpus_files, corpus_parts, resolve_corpus_path

    if len(mixture := corpus_parts(spec)) > 1 or mixture[0].number:  # a mixture: each corpus and its weight
        return "+".join(f"({corpus_content(part.spec)})*{part.weight:g}" for part in mixture)
    parts = []
    for one in corpus_files(spec):
        path = resolve_corpus_path(one)
        size = path.stat().st_size
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            digest.update(f.read(1 << 20))
            if size > 2 << 20:
                f.seek(size - (1 << 20))
            digest.update(f.read(1 << 20))
        parts.append(f"{size}:{digest.hexdigest()[:16]}")
    return "+".join(parts)


def recipe_tokenizer(recipe: Recipe, events: Callable[[str], None] | None = None) -> Tokenizer:
    """The recipe's tokenizer (`tokenizer.path`), else one trained on its corpus as `tfm train` would."""
    if recipe.tokenizer.path:
        return Tokenizer.load(recipe.tokenizer.path)
    from tfm_cli.corpus import describe
    from tfm_cli.tokenizer import train_corpus_tokenizer

    started = time.perf_counter()
    tokenizer = train_corpus_tokenizer(  # the one `tfm train` trains
        recipe.data.train, recipe.tokenizer.vocab_size, recipe.tokenizer.min_frequency,
        numbers=reads_placeholders(recipe), say=events or (lambda _: None),
    )
    if events is not None:
        events(f"tokenizer: trained {tokenizer.vocab_size} tokens on {describe(recipe.data.train)} in {time.perf_counter() - started:.1f}s")
    return tokenizer
