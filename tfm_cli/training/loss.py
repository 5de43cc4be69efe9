"""The label-smoothed loss of section 5.4, with the output projection computed in chunks.

`label_smoothed_loss` is the textbook form over full logits (used for models that return logits, such as the
peers of `tfm bench train --compare`); `output_loss` is the same number for tfm's own model, computed together
with the output projection a chunk of target positions at a time, gradients included.
"""

from __future__ import annotations

import torch


def label_smoothed_loss(
    logits: torch.Tensor, target: torch.Tensor, smoothing: float, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Label-smoothed cross-entropy summed over non-padding target tokens.

    The smoothed target puts 1 - eps on the reference token and eps spread uniformly over the vocabulary
    (as `F.cross_entropy(label_smoothing=eps)` does). The paper does not say over which tokens; here, as in
    fairseq, over all V of them, the padding, BOS and UNK tokens that decoding never outputs included (the
    Annotated Transformer leaves out padding). Returns (loss_sum, nll_sum, n_tokens): the NLL without
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

