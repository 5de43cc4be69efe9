"""Training (paper section 5): label-smoothed loss, Adam with the warm-up schedule, the loop, evaluation.

`train(recipe, run_dir, ...)` goes recipe -> tokenizer -> token-bucketed batches -> model -> checkpoints, and
reports through a `TrainEvents` object so that the CLI (rich progress) and tests (nothing) can both drive it.
Resume is exact: optimizer, step, RNG states and data position are saved beside each checkpoint.

Under torchrun the same `train()` runs as one rank of a DDP job (see `tfm_cli.distributed`): every rank builds
the same global batches and trains on its share of each, the loss is normalised by the global batch's target
tokens, and rank 0 alone evaluates, writes and reports.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import random
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors.torch import load_file

from tfm_cli import __version__
from tfm_cli.batches import PREFETCH_GROUPS, Prefetcher
from tfm_cli.checkpoint import (
    BEST,
    CHECKPOINTS,
    FINAL,
    atomic_write,
    average_checkpoints,
    checkpoint_path,
    checkpoint_steps,
    load_state,
    prune_checkpoints,
    read_metadata,
    save_weights,
    state_path,
    weights_state,
)
from tfm_cli.data import (
    BatchStream,
    encode_corpus,
    make_batch,
    pad_multiple_for,
    read_pairs,
    resolve_corpus_path,
    token_batches,
)
from tfm_cli.decoding import translate_ids
from tfm_cli.distributed import Distributed, sync_gradients
from tfm_cli.distributed import setup as setup_distributed
from tfm_cli.errors import CheckpointError, CorpusError, TfmError
from tfm_cli.model import Transformer
from tfm_cli.monitor import EarlyStopping, RisingLoss, TensorBoardLog, write_curves_png
from tfm_cli.recipe import (
    ModelRecipe,
    Recipe,
    dump_recipe,
    load_recipe,
    model_config,
    parse_duration,
    recipe_to_dict,
)
from tfm_cli.runtime import (
    autocast,
    release_cpu_memory,
    resolve_device,
    resolve_precision,
    tune_cpu_allocator,
)
from tfm_cli.tokenizer import Tokenizer, train_tokenizer

TRIM_EVERY = 50  # CPU: steps between returning the heap's free pages to the kernel (see runtime.py)
MAX_BAD_STEPS = 5  # this many NaN/infinite losses in a row stop the run (each one alone is skipped)

# --- Section 5.4: label smoothing; section 5.3: the learning-rate schedule --------------------------------------


def label_smoothed_loss(
    logits: torch.Tensor, target: torch.Tensor, smoothing: float, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Label-smoothed cross-entropy summed over non-padding target tokens.

    The smoothed target puts 1 - eps on the reference token and eps spread uniformly over the vocabulary
    (as `F.cross_entropy(label_smoothing=eps)` does). Returns (loss_sum, nll_sum, n_tokens): the NLL without
    smoothing gives the perplexity.

    Args:
        logits: (B, T, V); target: (B, T) ids with `pad_id` where there is no token.
    """
    log_probs = logits.float().log_softmax(dim=-1).view(-1, logits.size(-1))  # (B*T, V)
    target = target.reshape(-1)
    keep = target != pad_id
    log_probs, target = log_probs[keep], target[keep]
    nll = -log_probs.gather(1, target[:, None]).squeeze(1)
    uniform = -log_probs.mean(dim=-1)
    loss = (1.0 - smoothing) * nll + smoothing * uniform
    return loss.sum(), nll.sum(), int(target.numel())


# Logits per chunk of the fused output loss: 8 MiB of fp32 on CPU (the chunk stays in cache), 512 MiB on CUDA.
LOSS_CHUNK_LOGITS = {"cpu": 2**21, "cuda": 2**27}


class _ChunkedOutputLoss(torch.autograd.Function):
    """Output projection + label-smoothed cross-entropy, a chunk of rows at a time, gradients included.

    For each chunk of R target positions: logits = h W^T (R, V) in the compute dtype, log-sum-exp in fp32, the
    loss, and, when a backward will follow, d loss / d logits = softmax(logits) - q with the smoothed target
    q = (1 - eps) onehot + eps / V, from which the chunk's gradients for h and W are taken at once. Only one
    chunk's logits exist at any time, so memory does not grow with tokens x vocabulary (the base recipe's 25k
    tokens x 37k vocabulary would be 3.7 GB of fp32 log-probabilities, plus as much again for their gradient),
    and each chunk is read while it is still in cache. Backward only scales the stored gradients.
    """

    @staticmethod
    def forward(ctx, hidden, weight, target, smoothing: float, rows: int):  # (N, D), (V, D), (N,)
        dtype = hidden.dtype
        with torch.autocast(hidden.device.type, enabled=False):
            w = weight.to(dtype)
            n, vocab = hidden.size(0), w.size(0)
            want_h, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
            grad_h = torch.empty(n, w.size(1), dtype=torch.float32, device=hidden.device) if want_h else None
            grad_w = torch.zeros(w.shape, dtype=torch.float32, device=hidden.device) if want_w else None
            loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
            nll = torch.zeros((), dtype=torch.float32, device=hidden.device)
            for start in range(0, n, rows):
                h, t = hidden[start : start + rows], target[start : start + rows]
                logits = (h @ w.t()).float()  # (R, V)
                logits -= logits.amax(dim=-1, keepdim=True)  # shifted: the largest is 0, exp cannot overflow
                target_logit = logits.gather(1, t[:, None]).squeeze(1)
                mean_logit = logits.mean(dim=-1)
                probs = logits.exp_()  # one exp per logit, for the log-sum-exp and the gradient alike
                total = probs.sum(dim=-1)  # (R,)
                lse = total.log()  # log-sum-exp of the shifted logits
                chunk_nll = lse - target_logit
                uniform = lse - mean_logit  # cross-entropy against the uniform distribution
                loss += ((1.0 - smoothing) * chunk_nll + smoothing * uniform).sum()
                nll += chunk_nll.sum()
                if want_h or want_w:
                    grad = probs.div_(total[:, None]).sub_(smoothing / vocab)  # softmax - eps / V
                    grad[torch.arange(t.numel(), device=t.device), t] -= 1.0 - smoothing
                    grad = grad.to(dtype)
                    if want_h:
                        grad_h[start : start + rows] = grad @ w
                    if want_w:
                        grad_w += (grad.t() @ h).float()
        ctx.save_for_backward(grad_h, grad_w)
        ctx.hidden_dtype = dtype
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss, grad_nll):
        grad_h, grad_w = ctx.saved_tensors
        dh = (grad_h * grad_loss).to(ctx.hidden_dtype) if grad_h is not None else None
        dw = grad_w * grad_loss if grad_w is not None else None
        return dh, dw, None, None, None


def output_loss(
    features: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, smoothing: float, pad_id: int,
    keep: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """`label_smoothed_loss(features @ weight^T, target, ...)` without materialising the logits.

    The output projection and the loss are computed together, in chunks of target positions (see
    `_ChunkedOutputLoss`); padding positions are dropped before the projection. Under autocast the projection
    runs in the autocast dtype, as the model's own `generator` would, and the softmax in fp32.

    Args:
        features: (B, T, D) decoder output, `model(..., features_only=True)`; weight: (V, D) the output
            projection (`model.generator.weight`, tied with the embeddings); target: (B, T) ids.
        keep: the flat positions of `target` that are not padding (`Batch.tgt_keep`), if known: selecting them
            by index needs no host synchronisation on CUDA, where a boolean mask does (its size is data-dependent).

    Returns:
        (loss_sum, nll_sum, n_tokens), as `label_smoothed_loss`.
    """
    if keep is None:
        keep = (target != pad_id).reshape(-1).nonzero().squeeze(1)
    hidden = features.reshape(-1, features.size(-1)).index_select(0, keep)
    target = target.reshape(-1).index_select(0, keep)
    device = features.device.type
    if torch.is_autocast_enabled(device):
        hidden = hidden.to(torch.get_autocast_dtype(device))
    rows = max(16, LOSS_CHUNK_LOGITS.get(device, LOSS_CHUNK_LOGITS["cuda"]) // weight.size(0))
    loss, nll = _ChunkedOutputLoss.apply(hidden, weight, target, smoothing, rows)
    return loss, nll, int(target.numel())


def inverse_sqrt_lr(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), for step >= 1 (equation 3)."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


# --- Reporting ------------------------------------------------------------------------------------------------


class TrainEvents:
    """What the trainer tells the outside world; the CLI overrides these, the defaults say nothing."""

    def message(self, text: str) -> None:
        """A one-line status message (tokenizer trained, corpus read, checkpoint saved...)."""

    def start(self, step: int, max_steps: int) -> None:
        """Training steps begin at `step` (0, or where a resumed run stopped)."""

    def step(self, step: int, metrics: dict[str, Any]) -> None:
        """After every optimizer step; `metrics` holds loss, lr, tokens/s when a log line was due."""

    def evaluation(self, step: int, metrics: dict[str, Any]) -> None:
        """After a dev-set evaluation."""


@dataclass
class TrainResult:
    run_dir: Path
    step: int
    interrupted: bool
    final: dict[str, Any] = field(default_factory=dict)  # dev metrics of the final (averaged) model
    seconds: float = 0.0
    stopped: str = ""  # why training ended before train.max_steps (early stopping, time budget); "" if it reached it


# --- Evaluation -----------------------------------------------------------------------------------------------


@dataclass
class DevSet:
    """The dev corpus: raw pairs for BLEU/chrF references and token ids for the loss."""

    sources: list[str]
    references: list[str]
    src_ids: list[list[int]]
    tgt_ids: list[list[int]]


def load_dev(spec, tokenizer: Tokenizer, max_len: int) -> DevSet:
    pairs = [(s, t) for _, s, t in read_pairs(spec) if s.strip() and t.strip()]
    if not pairs:
        raise TfmError(f"dev corpus {spec} has no usable sentence pairs")
    sources = [s for s, _ in pairs]
    references = [t for _, t in pairs]
    # Sources longer than the model can take are cut (and count against BLEU); dev sets rarely have them.
    src_ids = [ids[: max_len - 1] for ids in tokenizer.encode_batch(sources)]
    tgt_ids = [ids[: max_len - 1] for ids in tokenizer.encode_batch(references)]
    return DevSet(sources, references, src_ids, tgt_ids)


@torch.no_grad()
def dev_loss(model: Transformer, dev: DevSet, max_tokens: int, smoothing: float, amp) -> dict[str, float]:
    """Teacher-forced loss and perplexity on the whole dev set."""
    cfg = model.config
    device = next(model.parameters()).device
    src_len = torch.tensor([len(s) for s in dev.src_ids])
    tgt_len = torch.tensor([len(t) for t in dev.tgt_ids])
    loss_sum = nll_sum = 0.0
    n_tokens = 0
    for indices in token_batches(src_len, tgt_len, max_tokens, seed=0, epoch=0, shuffle=False):
        batch = make_batch(
            [dev.src_ids[i] for i in indices], [dev.tgt_ids[i] for i in indices],
            cfg.pad_id, cfg.bos_id, cfg.eos_id, indices,
        ).to(device)
        with amp():
            features = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask, features_only=True)
            loss, nll, n = output_loss(features, model.generator.weight, batch.tgt_out, smoothing, cfg.pad_id, batch.tgt_keep)
        loss_sum, nll_sum, n_tokens = loss_sum + float(loss), nll_sum + float(nll), n_tokens + n
    return {"loss": loss_sum / n_tokens, "nll": nll_sum / n_tokens, "ppl": math.exp(min(nll_sum / n_tokens, 50))}


def score_translations(hypotheses: list[str], references: list[str]) -> dict[str, Any]:
    """Corpus BLEU and chrF with sacrebleu (default 13a tokenisation), with their signatures."""
    from sacrebleu.metrics import BLEU, CHRF

    bleu, chrf = BLEU(), CHRF()
    b = bleu.corpus_score(hypotheses, [references])
    c = chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": round(b.score, 2),
        "chrf": round(c.score, 2),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def evaluate(
    model: Transformer, tokenizer: Tokenizer, dev: DevSet, recipe: Recipe, amp, sentences: int = 0
) -> dict[str, Any]:
    """Dev loss and perplexity, then BLEU/chrF of beam-search output on the first `sentences` (0 = all)."""
    was_training = model.training
    model.eval()
    metrics: dict[str, Any] = dev_loss(model, dev, recipe.train.max_tokens, recipe.train.label_smoothing, amp)
    n = len(dev.sources) if sentences <= 0 else min(sentences, len(dev.sources))
    d = recipe.decode
    hyps = translate_ids(
        model, dev.src_ids[:n], beam_size=d.beam, alpha=d.alpha, max_len_offset=d.max_len_offset,
        max_tokens=d.max_tokens, autocast=amp, min_len=d.min_len,
    )
    outputs = tokenizer.decode_batch([h[0].tokens if h else [] for h in hyps])
    metrics.update(score_translations(outputs, dev.references[:n]))
    metrics["sentences"] = n
    model.train(was_training)
    return metrics


# --- One optimizer step (section 5.3), shared by the trainer and `tfm bench train` ------------------------------


def setup_model(config, t, device: torch.device, precision: str):
    """A fresh model on `device`, the paper's Adam (fused, `adam`) and a loss scaler (active for fp16 only).

    Args:
        config: the ModelConfig; t: the recipe's `train` section; precision: "fp32", "bf16" or "fp16".
    """
    model = Transformer(config).to(device)
    optimizer = adam(model.parameters(), t, device, inverse_sqrt_lr(1, config.d_model, t.warmup_steps, t.lr_factor))
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    return model, optimizer, scaler


_FUSED_CPU_ADAM = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 4)  # torch 2.4 added it


def adam(params, t, device: torch.device, lr: float) -> torch.optim.Adam:
    """The paper's Adam with the recipe's betas, eps and weight decay; fused (one kernel over all parameters)
    on CUDA and CPU. Inside the quickstart's training step (7.6M parameters, bf16, 2 threads) the CPU update
    takes 7 ms instead of 21 ms with torch's default multi-tensor path: ~1.5% of the step; the same update to
    float rounding (tested against the equations)."""
    fused = {"fused": True} if device.type == "cuda" or (device.type == "cpu" and _FUSED_CPU_ADAM) else {}
    return torch.optim.Adam(params, lr=lr, betas=tuple(t.betas), eps=t.eps, weight_decay=t.weight_decay, **fused)


def train_step(
    model, optimizer, scaler, group, lr: float, t, amp, device: torch.device, dist: Distributed | None = None
) -> tuple[float, float]:
    """Forward, label-smoothed loss, backward over each batch of `group` (gradient accumulation), then one
    optimizer step at learning rate `lr`. Returns the summed loss and NLL over the group's target tokens.

    A NaN or infinite loss skips the update (weights and optimizer state stay as they were); the returned loss
    says so, and the trainer counts it.

    With `dist` (a multi-process job) `model` is wrapped in DistributedDataParallel and each batch is this rank's
    share of a global batch. The loss is divided by the global batch's target tokens and multiplied by the number
    of ranks, because DDP averages the ranks' gradients: the update is the one a single process would make on the
    whole global batch. Gradients are all-reduced on the group's last batch only (`no_sync` on the others), and
    the returned sums are over all ranks, so every rank takes the same NaN decision.

    The batches may be in pinned host memory (the trainer's `Prefetcher` on CUDA): they are copied without
    blocking. The losses are summed on the device; the host waits for the device once, at the end (see below).
    """
    for g in optimizer.param_groups:
        g["lr"] = lr
    inner = getattr(model, "module", model)  # the Transformer inside a DDP wrapper
    pad_id = inner.config.pad_id
    fused = isinstance(inner, Transformer)  # else a peer's model (bench --compare), which returns logits
    n_tokens = step_tokens(group)
    ranks = dist.world_size if dist is not None else 1
    sums = torch.zeros(2, dtype=torch.float64, device=device)  # (loss, nll) of the group, kept on the device
    for i, batch in enumerate(group):
        batch = batch.to(device, non_blocking=True)  # asynchronous from pinned memory; a no-op on the CPU
        with sync_gradients(model, sync=i == len(group) - 1):
            with amp():
                if fused:  # output projection and loss in chunks: no (tokens x vocabulary) logits
                    features = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask, features_only=True)
                    loss, nll, _ = output_loss(
                        features, inner.generator.weight, batch.tgt_out, t.label_smoothing, pad_id, batch.tgt_keep
                    )
                else:
                    logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
                    loss, nll, _ = label_smoothed_loss(logits, batch.tgt_out, t.label_smoothing, pad_id)
            share = loss / n_tokens  # mean over the step's target tokens
            scaler.scale(share * ranks if ranks > 1 else share).backward()
        sums += torch.stack((loss.detach(), nll.detach()))  # float64 sums of the float32 values, as in Python
    # The step's one host synchronisation: whether to update depends on the loss being finite, so its value
    # must reach the host before the optimizer step (the trainer logs the same numbers, no further sync).
    step_loss, step_nll = dist.sum(sums) if ranks > 1 else sums.tolist()
    if not math.isfinite(step_loss):  # a NaN or infinite loss: no update from this step (the caller counts it)
        optimizer.zero_grad(set_to_none=True)
        return step_loss, step_nll
    if t.clip_norm > 0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.clip_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return step_loss, step_nll


def step_tokens(group) -> int:
    """Target tokens of one optimizer step over `group`: of the global batches in multi-process training."""
    return sum(b.n_tgt_tokens if b.step_tgt_tokens is None else b.step_tgt_tokens for b in group)


# --- The training loop ----------------------------------------------------------------------------------------


def _rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _seed_rank(seed: int, dist: Distributed) -> None:
    """Give each rank of a multi-process job its own dropout masks (rank 0 keeps a single process's stream)."""
    if dist.rank > 0:
        torch.manual_seed(seed + dist.rank)
        random.seed(seed + dist.rank)


def _restore_rng(state: dict[str, Any], dist: Distributed, seed: int) -> None:
    """Each rank's RNG states as saved (`rng_ranks`); a run resumed with another number of processes cannot be
    exact anyway: its ranks take rank 0's states and reseed as a fresh start would."""
    ranks = state.get("rng_ranks") or [state["rng"]]
    if len(ranks) == dist.world_size:
        _set_rng_state(ranks[dist.rank])
    else:
        _set_rng_state(state["rng"])
        _seed_rank(seed, dist)


def _share_tokenizer(tokenizer: Tokenizer | None, dist: Distributed) -> Tokenizer:
    """Rank 0's tokenizer on every rank, sent as its JSON text (other nodes need not see the run directory)."""
    if not dist.enabled:
        return tokenizer
    from tokenizers import Tokenizer as HFTokenizer

    text = dist.broadcast(tokenizer.backend.to_str() if tokenizer is not None else None)
    return tokenizer if tokenizer is not None else Tokenizer(HFTokenizer.from_str(text), source="rank 0's tokenizer")


def _prepare_tokenizer(recipe: Recipe, run_dir: Path, events: TrainEvents) -> Tokenizer:
    """The run's tokenizer: kept from an earlier start, copied from tokenizer.path, or trained on the corpus."""
    target = run_dir / "tokenizer.json"
    if target.is_file():
        return Tokenizer.load(target)
    if recipe.tokenizer.path:
        tokenizer = Tokenizer.load(recipe.tokenizer.path)
        tokenizer.save(target)
        events.message(f"tokenizer: {recipe.tokenizer.path} ({tokenizer.vocab_size} tokens)")
        return tokenizer
    started = time.perf_counter()

    def texts() -> Iterator[str]:
        for _, src, tgt in read_pairs(recipe.data.train):
            yield src
            yield tgt

    tokenizer = train_tokenizer(texts(), recipe.tokenizer.vocab_size, recipe.tokenizer.min_frequency)
    tokenizer.save(target)
    events.message(
        f"tokenizer: trained {tokenizer.vocab_size} tokens in {time.perf_counter() - started:.1f}s -> {target}"
    )
    return tokenizer


def preflight(recipe: Recipe, run_dir: Path, resume: bool = False) -> None:
    """Everything a start checks before it writes anything (`tfm train --dry-run` runs it too).

    Raises:
        CheckpointError: `run_dir` already holds a trained run and this is not a resume.
        CorpusError: a corpus file named by the recipe is missing; TfmError: tokenizer.path is missing.
    """
    prior = checkpoint_steps(run_dir)
    if not resume and (prior or (run_dir / FINAL).is_file()):  # refuse before writing anything into the run
        where = f"checkpoints up to step {prior[-1][0]}" if prior else f"a final {FINAL}"
        raise CheckpointError(
            f"{run_dir} already holds a trained run ({where})",
            hint=f"continue it with `tfm train --resume {run_dir}`, or choose another --out",
        )
    old_recipe = run_dir / "recipe.yaml"
    if not resume and not prior and old_recipe.is_file() and not _same_recipe(old_recipe, recipe):
        raise CheckpointError(
            f"{run_dir} already holds another run (its recipe.yaml differs from this one; it has no checkpoint yet)",
            hint="choose another --out, or delete that directory if its run is of no use",
        )
    _check_place(run_dir)
    _check_corpora(recipe)
    if recipe.tokenizer.path and not Path(recipe.tokenizer.path).expanduser().is_file():
        what = "is not a file" if Path(recipe.tokenizer.path).expanduser().exists() else "does not exist"
        raise TfmError(
            f"tokenizer.path: {recipe.tokenizer.path} {what}",
            hint="train one with `tfm tokenize`, or set tokenizer.path: null to train one with the run",
        )


def _check_place(run_dir: Path) -> None:
    """Fail when `run_dir` cannot become a run directory (a file is there, or its place is not writable),
    without creating anything: the probe file is made and removed in the nearest folder that exists."""
    if run_dir.exists() and not run_dir.is_dir():
        raise TfmError(f"{run_dir} exists and is not a directory: it cannot hold the run", hint="choose another --out")
    existing = run_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise NotADirectoryError(20, f"{existing} is not a directory")
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise TfmError(
            f"cannot create the run directory {run_dir}: {err.strerror or err}", hint="choose another --out"
        ) from None


def _same_recipe(path: Path, recipe: Recipe) -> bool:
    """Whether the run's recipe.yaml is what this start would write (a restart of the same run)."""
    try:
        return recipe_to_dict(load_recipe(path)) == recipe_to_dict(_with_absolute_paths(recipe))
    except TfmError:
        return False


def _check_corpora(recipe: Recipe) -> None:
    """Fail before anything is written when a corpus file named by the recipe is missing."""
    for key, spec in (("data.train", recipe.data.train), ("data.dev", recipe.data.dev)):
        for path in [] if spec is None else [spec] if isinstance(spec, str) else spec:
            try:
                resolve_corpus_path(path)
            except CorpusError as err:
                raise CorpusError(f"{key}: {err}") from None


def scan_corpora(recipe: Recipe) -> dict[str, int]:
    """Read every line of the recipe's corpora as a start would (`tfm train --dry-run`): the number of sentence
    pairs in data.train and data.dev; a CorpusError names the first bad file and line."""
    counts = {}
    for key, spec in (("data.train", recipe.data.train), ("data.dev", recipe.data.dev)):
        if spec is not None:
            counts[key] = sum(1 for _ in read_pairs(spec))
    return counts


def _with_absolute_paths(recipe: Recipe) -> Recipe:
    """The recipe with relative corpus and tokenizer paths made absolute (they are relative to the CWD)."""

    def absolute(spec):
        if spec is None:
            return None
        if isinstance(spec, list):
            return [absolute(s) for s in spec]
        return spec if spec.startswith("bundled:") else str(Path(spec).expanduser().resolve())

    data = dataclasses.replace(recipe.data, train=absolute(recipe.data.train), dev=absolute(recipe.data.dev))
    tokenizer = dataclasses.replace(recipe.tokenizer, path=absolute(recipe.tokenizer.path))
    return dataclasses.replace(recipe, data=data, tokenizer=tokenizer)


def _check_room(run_dir: Path, config, t) -> None:
    """Fail before training when checkpoints cannot be written into `run_dir`, or will not fit on its disk.

    A checkpoint holds the fp32 weights and Adam's two moments (about 12 bytes a parameter); the run keeps
    `keep_last` of them, plus the final model and the best one.
    """
    folder = run_dir / CHECKPOINTS
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except OSError as err:
        raise TfmError(
            f"cannot write checkpoints into {folder}: {err.strerror}", hint="choose another --out, or fix that folder's permissions"
        ) from None
    with torch.device("meta"):
        params = Transformer(config).num_parameters()
    need = params * 12 * (t.keep_last + 1) + params * 4 * 2
    free = shutil.disk_usage(folder).free
    if free < need:
        raise TfmError(
            f"{run_dir} has {free / 2**30:.1f} GiB free, but {t.keep_last} checkpoints of this "
            f"{params / 1e6:.1f}M-parameter model and its final and best weights need about {need / 2**30:.1f} GiB",
            hint="free some space, lower train.keep_last, or choose another --out",
        )


def _log(run_dir: Path, record: dict[str, Any]) -> None:
    with open(run_dir / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def train(
    recipe: Recipe | str | Path | None = None,
    run_dir: str | Path | None = None,
    device: str | torch.device = "auto",
    resume: bool = False,
    events: TrainEvents | None = None,
) -> TrainResult:
    """Train `recipe` into `run_dir`; with `resume`, continue from the newest checkpoint there.

    Ctrl-C (KeyboardInterrupt) saves a checkpoint at the last completed step and returns with interrupted=True.

    Started by torchrun (RANK, WORLD_SIZE and LOCAL_RANK set, more than one process), this process is one rank
    of a DDP job: `recipe.train.max_tokens` is then the budget of the global batch that all ranks share, so a
    recipe means the same on 1 or 8 GPUs; rank 0 alone writes the run and reports to `events`.

    Args:
        recipe: a `Recipe` (see `load_recipe`) or the path of a recipe YAML; with `resume` it may be None, and
            the run's own recipe.yaml is used.
        run_dir: where the run goes (default: runs/<recipe name>).
        device: "auto" (CUDA when available), "cpu", "cuda", "cuda:N", or a torch.device. Under torchrun,
            "cuda" means the GPU of this process's local rank.
        resume: continue the run in `run_dir` from its newest checkpoint, exactly.
        events: receives progress (messages, steps, evaluations); the default prints nothing.

    Returns:
        TrainResult: the run directory, the last step, whether it was interrupted, the final dev scores
            (those only on rank 0).

    Raises:
        TfmError: a bad recipe, corpus or device, or a run directory that already holds a run (without resume).
    """
    if recipe is None:
        if not (resume and run_dir is not None):
            raise TfmError("train() needs a recipe, or resume=True with the run_dir to continue")
        recipe = resume_recipe(Path(run_dir), [])
    elif not isinstance(recipe, Recipe):
        recipe = load_recipe(recipe)
    run_dir = Path(run_dir) if run_dir is not None else Path("runs") / recipe.name
    device = device if isinstance(device, torch.device) else resolve_device(device)
    preflight(recipe, run_dir, resume)
    dist = setup_distributed(device)  # one rank of a torchrun job, or a single process
    events = (events or TrainEvents()) if dist.is_main else TrainEvents()  # rank 0 alone reports
    try:
        return _train(recipe, run_dir, resume, events, dist)
    finally:
        dist.cleanup()


def _train(recipe: Recipe, run_dir: Path, resume: bool, events: TrainEvents, dist: Distributed) -> TrainResult:
    """`train()` after the checks: set up, step, evaluate, save (on every rank; rank 0 writes)."""
    t = recipe.train
    device, main = dist.device, dist.is_main
    log = (lambda record: _log(run_dir, record)) if main else (lambda record: None)  # noqa: E731
    step = 0
    if resume:  # read (and refuse) the trainer state before anything in the run is rewritten
        step, weights, state = _resume_point(run_dir, events)
    created, had_tokenizer = not run_dir.exists(), (run_dir / "tokenizer.json").exists()
    if main:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise TfmError(f"cannot create the run directory {run_dir}: {err.strerror}", hint="choose another --out") from None
    started = time.perf_counter()
    if device.type == "cpu":
        tune_cpu_allocator()
    precision = resolve_precision(t.precision, device)
    amp = lambda: autocast(device, precision)  # noqa: E731
    torch.manual_seed(t.seed)
    random.seed(t.seed)

    try:  # read everything before writing the run's files: a bad corpus leaves the run as it was
        tokenizer = _share_tokenizer(_prepare_tokenizer(recipe, run_dir, events) if main else None, dist)
        config = model_config(recipe, tokenizer.vocab_size, tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id)
        read_start = time.perf_counter()
        corpus = encode_corpus(recipe.data.train, tokenizer, recipe.data.max_len)  # every rank encodes it all
        s = corpus.stats
        events.message(
            f"train corpus: {s.kept:,} pairs kept of {s.read:,} read "
            f"({s.skipped_empty:,} with an empty side and {s.skipped_long:,} longer than {recipe.data.max_len} tokens skipped) "
            f"in {time.perf_counter() - read_start:.1f}s"
        )
        if s.kept == 0:
            raise TfmError(f"no usable sentence pairs in {recipe.data.train}", hint="check data.train and data.max_len")
        dev = load_dev(recipe.data.dev, tokenizer, recipe.data.max_len) if recipe.data.dev and main else None
        if resume:
            _check_resumable(run_dir, weights, config, step, t.max_steps)
    except BaseException:
        if main and not had_tokenizer and not resume:  # take back what this start wrote (a tokenizer it trained)
            (run_dir / "tokenizer.json").unlink(missing_ok=True)
        if main and created:
            with contextlib.suppress(OSError):
                run_dir.rmdir()  # only when empty
        raise
    if main:
        _check_room(run_dir, config, t)  # an unwritable or full run directory is said now, not after an hour
        dump_recipe(_with_absolute_paths(recipe), run_dir / "recipe.yaml")  # --resume works from any directory
        atomic_write(run_dir / "config.json", lambda tmp: Path(tmp).write_text(json.dumps(config.to_dict(), indent=2)))
        if not resume:  # a fresh start (preflight let it in: nothing of another run is here) logs afresh
            (run_dir / "metrics.jsonl").unlink(missing_ok=True)

    model, optimizer, scaler = setup_model(config, t, device, precision)
    _seed_rank(t.seed, dist)
    stream = BatchStream(
        corpus, t.max_tokens, t.seed, tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id, dist.rank, dist.world_size,
        pad_multiple=pad_multiple_for(device),
    )
    best_bleu = -1.0
    early = EarlyStopping(t.patience, t.patience_metric)

    if resume:  # every rank loads the same checkpoint
        load_state(model, {k: v.to(device) for k, v in load_file(str(weights)).items()}, weights)
        _load_optimizer(optimizer, state["optimizer"])
        scaler.load_state_dict(state["scaler"])
        stream.load_state_dict(state["stream"])
        _restore_rng(state, dist, t.seed)
        best_bleu = state.get("best_bleu", -1.0)
        if "early_stopping" in state:
            early.load_state_dict(state["early_stopping"])
        events.message(f"resumed from {weights} at step {step}, epoch {stream.epoch}")
    if dist.enabled:
        events.message(f"{dist.world_size} processes (DDP over {dist.device.type}): each trains on its share of every batch")
    step_model = dist.wrap(model)  # DDP in a multi-process job; `model` itself stays what is saved and evaluated
    # purges what a dead attempt logged past `step`
    board = TensorBoardLog.open(run_dir, step) if main else TensorBoardLog(None)
    if board.enabled and not resume:
        board.recipe(yaml.safe_dump(recipe_to_dict(recipe), sort_keys=False, allow_unicode=True), step)

    def save(at_step: int, stream_state: dict[str, int], every_rank: bool = True) -> Path:
        """Checkpoint `at_step`: called on every rank at the same steps (each rank's RNG state is gathered), or,
        with every_rank=False (Ctrl-C, where the ranks are not in step), on rank 0 alone."""
        rng = _rng_state()
        rng_ranks = dist.gather(rng) if dist.enabled and every_rank else None
        path = checkpoint_path(run_dir, at_step)
        if not main:
            return path
        save_weights(path, weights_state(model), config, tokenizer.sha256, at_step, precision=precision)
        state = {
            "step": at_step, "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(),
            "stream": stream_state, "rng": rng, "best_bleu": best_bleu, "tfm_version": __version__,
            "early_stopping": early.state_dict(),
        }
        if rng_ranks is not None:
            state["rng_ranks"] = rng_ranks
        atomic_write(state_path(path), lambda tmp: torch.save(state, tmp))
        prune_checkpoints(run_dir, t.keep_last)
        return path

    model.train()
    # The data path: each step's batches built ahead on a thread (pinned for asynchronous copies on CUDA). From
    # here on the stream runs ahead of training: positions come from `batches.state_dict()`, the consumed ones.
    # On CUDA the next groups are built on a thread while the GPU computes; on CPU the step already uses every
    # core and building a batch costs under 1% of it, so a second thread only competes (measured: trainer /
    # model step 0.90x with it, quickstart recipe, 2-core CPU): there each group is built when it is needed.
    cuda = device.type == "cuda"
    batches = Prefetcher(stream, t.accum_steps, depth=PREFETCH_GROUPS if cuda else 0, pin_memory=cuda, device=device)
    events.start(step, t.max_steps)
    window_tokens, window_start, window_loss, window_nll, window_wait, window_step = 0, time.perf_counter(), 0.0, 0.0, 0.0, 0.0
    interrupted = False
    stopped = ""
    last_saved = step
    budget = parse_duration(t.max_time) if t.max_time else None  # seconds of this invocation, or no limit
    stream_state = batches.state_dict()
    skipped = bad_in_a_row = 0  # steps whose loss was NaN or infinite: in all, and in a row
    rising = RisingLoss()
    try:
        while step < t.max_steps:
            stream_state = batches.state_dict()  # where this step's data starts: saved on Ctrl-C mid-step
            waited = time.perf_counter()
            group = next(batches)  # t.accum_steps batches
            window_wait += time.perf_counter() - waited  # the data path's cost to this thread
            n_tokens = step_tokens(group)
            lr = inverse_sqrt_lr(step + 1, config.d_model, t.warmup_steps, t.lr_factor)
            stepping = time.perf_counter()
            step_loss, step_nll = train_step(step_model, optimizer, scaler, group, lr, t, amp, device, dist)
            window_step += time.perf_counter() - stepping  # the model step itself (it ends synchronised)
            step += 1
            stream_state = batches.state_dict()
            if math.isfinite(step_loss):
                bad_in_a_row = 0
                window_tokens += n_tokens
                window_loss += step_loss
                window_nll += step_nll
            else:  # the update was skipped; a few in a row mean the run has diverged
                skipped += 1
                bad_in_a_row += 1
                log({"kind": "skipped", "step": step, "loss": str(step_loss), "lr": lr})
                events.message(f"step {step}: the loss is {step_loss} at lr {lr:.3g}: update skipped ({skipped} so far)")
                if bad_in_a_row >= MAX_BAD_STEPS:
                    board.close()
                    raise _diverged(run_dir, step, lr, bad_in_a_row)

            metrics: dict[str, Any] = {}
            if (step % t.log_every == 0 or step == t.max_steps) and window_tokens:
                elapsed = time.perf_counter() - window_start
                metrics = {
                    "step": step, "epoch": batches.epoch, "loss": window_loss / window_tokens,
                    "ppl": math.exp(min(window_nll / window_tokens, 50)), "lr": lr,
                    "tgt_tokens_per_s": window_tokens / elapsed, "elapsed_s": time.perf_counter() - started,
                    "data_wait_s": window_wait,  # of the window's wall time, spent waiting for the next batches
                    "step_s": window_step,  # of the window's wall time, spent in the optimizer steps themselves
                }
                if skipped:
                    metrics["skipped_steps"] = skipped
                log({"kind": "train", **metrics})
                board.train(step, metrics)
                warning = rising.update(metrics["loss"], lr)
                if warning:
                    events.message(warning)
                window_tokens, window_start, window_loss, window_nll, window_wait, window_step = 0, time.perf_counter(), 0.0, 0.0, 0.0, 0.0
            events.step(step, metrics)
            if device.type == "cpu" and step % TRIM_EVERY == 0:
                release_cpu_memory()

            if step % t.save_every == 0 or step == t.max_steps:
                save(step, stream_state)
                last_saved = step
            evaluating = bool(recipe.data.dev) and t.eval_every and step % t.eval_every == 0 and step < t.max_steps
            if evaluating and main:  # rank 0 alone evaluates (the weights are the same on every rank)
                result = evaluate(model, tokenizer, dev, recipe, amp, t.eval_sentences)
                log({"kind": "eval", "step": step, **result})
                board.evaluation(step, result)
                events.evaluation(step, result)
                if result["bleu"] > best_bleu:
                    best_bleu = result["bleu"]
                    save_weights(run_dir / BEST, weights_state(model), config, tokenizer.sha256, step, bleu=best_bleu)
                if early.update(step, result):  # patience ran out
                    stopped = early.reason()
            if not stopped and budget is not None and time.perf_counter() - started >= budget:
                stopped = (
                    f"time budget: train.max_time={t.max_time} used up at step {step} "
                    f"of {t.max_steps} ({time.perf_counter() - started:,.0f}s)"
                )
            if dist.enabled and (evaluating or budget is not None):
                stopped = dist.broadcast(stopped)  # rank 0 decides: only it evaluated, and the clocks differ
            if stopped:  # end as a finished run would: checkpoint here, then average and evaluate
                if step > last_saved:
                    save(step, stream_state)
                    last_saved = step
                events.message(stopped)
                break
    except KeyboardInterrupt:
        interrupted = True
        optimizer.zero_grad(set_to_none=True)
        if step > last_saved and main:
            path = save(step, stream_state, every_rank=False)
            events.message(f"interrupted: saved {path}; continue with `tfm train --resume {run_dir}`")
        else:
            events.message(f"interrupted at step {step}; continue with `tfm train --resume {run_dir}`")
        board.close()
        return TrainResult(run_dir, step, True, seconds=time.perf_counter() - started)
    finally:  # the end of training, an error or Ctrl-C: stop the prefetching thread
        batches.close()

    if not main:  # rank 0 writes the final model and the summary; the others are done
        return TrainResult(run_dir, step, interrupted, {}, time.perf_counter() - started, stopped)
    final = finish(run_dir, recipe, model, tokenizer, dev, amp, events, board)
    board.close()
    result = TrainResult(run_dir, step, interrupted, final, time.perf_counter() - started, stopped)
    summary = {
        "recipe": recipe.name, "steps": step, "parameters": model.num_parameters(), "precision": precision,
        "device": str(device), "processes": dist.world_size, "train_seconds": round(result.seconds, 1),
        "tfm_version": __version__, "dev": final, "final_model": final.get("final_model"),
        "stopped": stopped or f"reached train.max_steps={t.max_steps}",
    }
    atomic_write(run_dir / "summary.json", lambda tmp: Path(tmp).write_text(json.dumps(summary, indent=2)))
    png = write_curves_png(run_dir)
    if png is not None:
        events.message(f"curves: {png}")
    return result


def finish(
    run_dir: Path, recipe: Recipe, model: Transformer, tokenizer: Tokenizer, dev, amp, events, board=None
) -> dict:
    """Write the run's final model and evaluate it on all of dev.

    The paper averages the last checkpoints (section 6.1). Early in training, while the loss still falls fast,
    that average can be far worse than the last checkpoint (a 900-step base run averaged to dev BLEU 0.7), so
    with a dev set both are evaluated and the average is kept unless it scores lower BLEU. The choice and both
    scores are returned under "final_model" (and land in summary.json and metrics.jsonl).
    """
    found = checkpoint_steps(run_dir)
    last = [p for _, p in found[-recipe.train.average_last :]]
    step = found[-1][0]
    averaged = average_checkpoints(last)
    if dev is None or len(last) == 1:
        chosen, result, scores = ("average" if len(last) > 1 else "last"), {}, {}
    else:
        device = next(model.parameters()).device
        load_state(model, {k: v.to(device) for k, v in load_file(str(last[-1])).items()}, last[-1])
        last_scores = evaluate(model, tokenizer, dev, recipe, amp, 0)
        load_state(model, {k: v.to(device) for k, v in averaged.items()}, run_dir / FINAL)
        avg_scores = evaluate(model, tokenizer, dev, recipe, amp, 0)
        chosen = "average" if avg_scores["bleu"] >= last_scores["bleu"] else "last"
        scores = {"average": _brief(avg_scores), "last": _brief(last_scores)}
        result = avg_scores if chosen == "average" else last_scores
    names = [p.name for p in last]
    if chosen == "average":
        save_weights(run_dir / FINAL, averaged, model.config, tokenizer.sha256, step, averaged=names)
        what = f"average of {len(last)} checkpoint(s) ({', '.join(names)})"
    else:
        save_weights(run_dir / FINAL, load_file(str(last[-1])), model.config, tokenizer.sha256, step, last=names[-1])
        what = f"the last checkpoint ({names[-1]})"
    if scores:
        a, b = scores["average"], scores["last"]
        why = "the paper's choice" if chosen == "average" else "the average scored lower"
        events.message(
            f"final model: {what}: {why} (dev BLEU: average {a['bleu']:.2f}, last checkpoint {b['bleu']:.2f}) -> {run_dir / FINAL}"
        )
    else:
        events.message(f"final model: {what} -> {run_dir / FINAL}")
    final_model = {"chosen": chosen, "checkpoints": names if chosen == "average" else names[-1:], **scores}
    if dev is None:
        return {"final_model": final_model}
    if not scores:
        device = next(model.parameters()).device
        load_state(model, {k: v.to(device) for k, v in averaged.items()}, run_dir / FINAL)
        result = evaluate(model, tokenizer, dev, recipe, amp, 0)
    result = {**result, "final_model": final_model}
    _log(run_dir, {"kind": "final", "step": step, **result})
    if board is not None:
        board.evaluation(step, result, final=True)
    events.evaluation(step, {**result, "final": True})
    return result


def _brief(scores: dict[str, Any]) -> dict[str, Any]:
    return {k: scores[k] for k in ("bleu", "chrf", "loss", "ppl") if k in scores}


def _resume_point(run_dir: Path, events: TrainEvents) -> tuple[int, Path, dict[str, Any]]:
    """The newest checkpoint that has its trainer state: (step, weights file, trainer state)."""
    found = checkpoint_steps(run_dir)
    if not found:
        raise CheckpointError(f"{run_dir} has no checkpoint to resume from", hint="start it again without --resume")
    # Weights are written before their trainer state: a run killed between the two leaves weights that
    # cannot be resumed exactly, so resume from the newest checkpoint that has both.
    complete = [(s, w) for s, w in found if state_path(w).is_file()]
    if not complete:
        raise CheckpointError(
            f"{run_dir} has no checkpoint with its trainer state ({state_path(found[-1][1]).name} and older are missing)",
            hint="an exact resume needs the .state.pt files; start the run again without --resume",
        )
    step, weights = complete[-1]
    tok_path = run_dir / "tokenizer.json"
    expected = read_metadata(weights).get("tokenizer_sha256")
    if expected and tok_path.is_file() and Tokenizer.load(tok_path).sha256 != expected:
        raise CheckpointError(
            f"{tok_path} does not match {weights} (tokenizer hash differs): the run cannot continue with it",
            hint="put back the tokenizer.json this run was trained with",
        )
    newer = [s for s, _ in found if s > step]
    if newer:
        events.message(
            f"checkpoint(s) at step {', '.join(map(str, newer))} have no trainer state (the run stopped while "
            f"saving): resuming from step {step}; they are rewritten when the run gets there"
        )
    # On the CPU: the RNG states must stay CPU ByteTensors (map_location=cuda broke resume on GPUs), and
    # Optimizer.load_state_dict moves each state tensor to its parameter's device itself.
    return step, weights, load_trainer_state(state_path(weights))


def _load_optimizer(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """Adam's moments and step counts from a checkpoint, under this start's settings: the recipe's betas, eps and
    weight decay (a resume may change them) and the implementation chosen for this device and torch (fused or
    not), where `load_state_dict` alone would bring back the saving run's (a CUDA run's fused flag on a CPU)."""
    fresh = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    groups = [{**old, **now} for old, now in zip(saved["param_groups"], fresh, strict=False)]
    optimizer.load_state_dict({**saved, "param_groups": groups + saved["param_groups"][len(groups):]})


# Model settings that only act in training: a resume may change them; any other changes what the weights mean.
_TRAINING_ONLY = ("dropout", "attn_dropout")
_RECIPE_MODEL_KEYS = {f.name for f in dataclasses.fields(ModelRecipe)}


def _check_resumable(run_dir: Path, weights: Path, config, step: int, max_steps: int) -> None:
    """Refuse a resume, before anything in the run is rewritten, whose overrides change the model the checkpoint
    holds (its shapes, or shape-preserving settings such as model.n_heads or model.norm that would change what
    the weights compute), or whose train.max_steps is already behind the checkpoint."""
    saved = json.loads(read_metadata(weights)["config"])
    changed = [
        f"{'model.' + k if k in _RECIPE_MODEL_KEYS else k} {saved.get(k)!r} -> {v!r}"
        for k, v in config.to_dict().items()
        if k not in _TRAINING_ONLY and k in saved and saved[k] != v
    ]
    if changed:
        raise TfmError(
            f"--resume cannot change the model of {run_dir} ({'; '.join(changed)}): {weights.name} holds the other one",
            hint="drop those overrides to continue the run, or start a new run with them (--out)",
        )
    if step > max_steps:
        raise TfmError(
            f"{run_dir} is already at step {step}, past train.max_steps={max_steps}: there is nothing to train",
            hint=f"raise train.max_steps above {step} to continue it (e.g. train.max_steps={2 * step})",
        )


def _diverged(run_dir: Path, step: int, lr: float, in_a_row: int) -> TfmError:
    """The error that stops a run whose loss stayed NaN or infinite; it names the last good checkpoint."""
    found = [(s, w) for s, w in checkpoint_steps(run_dir) if state_path(w).is_file()]
    kept = f"the last checkpoint ({found[-1][1].name}, step {found[-1][0]}) is intact" if found else "no checkpoint was saved yet"
    return TfmError(
        f"training stopped at step {step}: the loss was NaN or infinite {in_a_row} steps in a row at lr {lr:.3g}; {kept}",
        hint=f"lower the learning rate (train.lr_factor) or lengthen train.warmup_steps, then `tfm train --resume {run_dir} train.lr_factor=...` or start again",
    )


def load_trainer_state(path: Path) -> dict[str, Any]:
    """A checkpoint's trainer state, read without executing code (`torch.load(weights_only=True)`).

    Raises:
        CheckpointError: in one line, for a file that is damaged or holds anything but tensors and plain data
            (a pickle that would run code is refused, never executed).
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # UnpicklingError, RuntimeError, EOFError...: torch's text is many lines long
        why = "is damaged" if isinstance(err, (EOFError, RuntimeError)) and "Unpickl" not in str(err) else "holds more than tensors and plain data (it could run code), so it was not loaded"
        raise CheckpointError(
            f"{path} {why}",
            hint="delete it and its .safetensors to resume from the checkpoint before, or start the run again without --resume",
        ) from None
    if not isinstance(state, dict) or not {"optimizer", "scaler", "stream", "rng"} <= state.keys():
        raise CheckpointError(f"{path} is not a tfm trainer state", hint="delete it and its .safetensors to resume from the checkpoint before")
    return state


def resume_recipe(run_dir: Path, overrides: list[str]) -> Recipe:
    """The recipe a run was started with (its resolved recipe.yaml), with new overrides on top."""
    path = Path(run_dir) / "recipe.yaml"
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: {run_dir} is not a tfm run directory", hint="pass the run's folder, e.g. runs/tiny")
    return load_recipe(path, overrides)
