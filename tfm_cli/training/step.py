"""One optimizer step (section 5.3): forward, loss, backward over a group of batches, update. Shared by the
trainer and `tfm bench train`, which times exactly this function as "the model step"."""

from __future__ import annotations

import math

import torch

from tfm_cli.distributed import Distributed, sync_gradients
from tfm_cli.errors import TfmError, human_size
from tfm_cli.model import Transformer
from tfm_cli.training.compiling import check_compile, compile_model, compiler_errors
from tfm_cli.training.loss import label_smoothed_loss, output_loss
from tfm_cli.training.optim import adam, inverse_sqrt_lr


def _build_model(config, device: torch.device | str) -> Transformer:
    """`Transformer(config)` on `device`, or a TfmError when its tensors cannot be made (too large for the memory)."""
    check_fits(config, torch.device(device))
    try:
        return Transformer(config).to(device)
    except (RuntimeError, MemoryError) as err:  # torch.OutOfMemoryError is a RuntimeError
        if isinstance(err.__cause__, KeyboardInterrupt):  # Ctrl-C in a class that torch defines on first use,
            raise err.__cause__ from None  # which Python wraps in "RuntimeError: Error calling __set_name__"
        why = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise _cannot_build(config, str(device), why) from None


def _cannot_build(config, where: str, why: str) -> TfmError:
    return TfmError(
        f"the model (model.d_model={config.d_model}, model.d_ff={config.d_ff}, "
        f"model.max_positions={config.max_positions}, vocabulary {config.vocab_size}) cannot be built on {where}: {why}",
        hint="lower model.d_model, model.d_ff, the layer counts or model.max_positions",
    )


def check_fits(config, device: torch.device) -> None:
    """Refuse, before any tensor is made, a model that cannot train in the memory `device` has in all, whatever its
    batches: fp32 weights, their gradients and Adam's two moments (16 bytes a parameter), and the sinusoid tables
    (4 bytes a value, one a side). `model.max_positions=10**8` took a minute and 13 GB of a 24 GB machine before
    torch's allocator gave up, and `tfm train --dry-run` passed it.

    Raises:
        TfmError: naming the model's sizes, the bytes it needs and those `device` has.
    """
    from tfm_cli.runtime import memory_of

    total = memory_of(device)
    tables = 2 * 4 * config.max_positions * config.d_model if config.positions == "sinusoidal" else 0
    need = 16 * parameter_count(config) + tables
    if total is not None and need > total:
        where = "this machine has" if device.type == "cpu" else f"{device} has"
        what = "its weights, their gradients and Adam's moments" + (" and its position tables" if tables else "")
        raise _cannot_build(config, str(device), f"{what} need {human_size(need)}, more than the {human_size(total)} {where}")


def parameter_count(config) -> int:
    """The number of parameters of `Transformer(config)`, from its shapes (no tensor is made).

    Raises:
        TfmError: a tensor of the model would be too large for torch to size (e.g. model.d_model=10**12).
    """
    largest = config.largest_weight()
    if largest * 8 > torch.iinfo(torch.int64).max:  # bytes of a float64 table (the positions), as torch sizes them
        raise _cannot_build(config, "this machine", f"a tensor of {largest:,} values is beyond what torch can size")
    return config.num_parameters()


def setup_model(config, t, device: torch.device, precision: str):
    """A fresh model on `device` (compiled in place with `t.compile`: training/compiling.py), the paper's Adam
    (fused, `adam`) and a loss scaler (active for fp16 only).

    Args:
        config: the ModelConfig; t: the recipe's `train` section; precision: "fp32", "bf16" or "fp16".

    Raises:
        TfmError: the model does not fit in the memory of `device`, or `t.compile` cannot compile it here.
    """
    if t.compile:  # said before the model is built, as a dry run says it
        check_compile(device)
    model = _build_model(config, device)
    if t.compile:
        compile_model(model)
    optimizer = adam(model.parameters(), t, device, inverse_sqrt_lr(1, config.d_model, t.warmup_steps, t.lr_factor))
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    return model, optimizer, scaler


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
    with compiler_errors():  # (a compiled model is compiled at its first forward and backward)
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

