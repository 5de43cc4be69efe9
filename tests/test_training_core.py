"""Training core and checkpoints: the label-smoothed loss against F.cross_entropy, the warm-up schedule against
equation 3 of the paper, and checkpoint save/load/average round trips (with a tokenizer trained in-process)."""

from __future__ import annotations

import contextlib
import copy
import gzip
import itertools
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from tfm_cli import __version__
from tfm_cli.checkpoint import (
    average_checkpoints,
    load_model,
    load_state,
    read_metadata,
    save_weights,
    weights_state,
)
from tfm_cli.errors import CheckpointError
from tfm_cli.model import ModelConfig, Transformer
from tfm_cli.model.dropout import Dropout
from tfm_cli.model.masks import padding_mask, target_mask
from tfm_cli.recipe import TrainRecipe
from tfm_cli.runs import FINAL, checkpoint_path
from tfm_cli.tokenizer import Tokenizer, train_tokenizer
from tfm_cli.training import (
    inverse_sqrt_lr,
    label_smoothed_loss,
    load_optimizer_state,
    output_loss,
    setup_model,
)

CORPUS = Path(__file__).resolve().parents[1] / "tfm_cli" / "corpora" / "tatoeba-fr-en" / "train.tsv.gz"




# --- Section 5.4: label smoothing ---------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_label_smoothed_loss_matches_cross_entropy(eps: float) -> None:
    g = torch.Generator().manual_seed(0)
    b, t, v, pad = 3, 5, 11, 0
    logits = torch.randn(b, t, v, generator=g) * 3
    target = torch.randint(1, v, (b, t), generator=g)
    target[0, 3:] = pad
    target[2, 1:] = pad
    loss, nll, n_tokens = label_smoothed_loss(logits, target, eps, pad)
    flat_logits, flat_target = logits.view(-1, v), target.view(-1)
    expected = F.cross_entropy(
        flat_logits, flat_target, label_smoothing=eps, ignore_index=pad, reduction="sum"
    )
    expected_nll = F.cross_entropy(flat_logits, flat_target, ignore_index=pad, reduction="sum")
    torch.testing.assert_close(loss, expected, atol=1e-4, rtol=1e-6)
    torch.testing.assert_close(nll, expected_nll, atol=1e-4, rtol=1e-6)
    assert n_tokens == int((target != pad).sum()) == 3 + 5 + 1
    # Padding contributes nothing: changing the logits there changes neither sum.
    noisy = logits.clone()
    noisy[target == pad] += 100 * torch.randn(int((target == pad).sum()), v, generator=g)
    loss2, nll2, _ = label_smoothed_loss(noisy, target, eps, pad)
    torch.testing.assert_close((loss2, nll2), (loss, nll))


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_chunked_output_loss_equals_projection_then_cross_entropy(eps: float, monkeypatch) -> None:
    """`output_loss` (projection + loss in chunks, gradients taken in the forward pass) against F.linear followed by
    F.cross_entropy with autograd: the same sums and the same gradients for the features and the weight."""
    import tfm_cli.training as training

    g = torch.Generator().manual_seed(0)
    b, t, d, v, pad = 4, 6, 16, 37, 0
    monkeypatch.setitem(training.LOSS_CHUNK_LOGITS, "cpu", 5 * v)  # 5 rows a chunk: several chunks, a short last
    features = torch.randn(b, t, d, generator=g, requires_grad=True)
    weight = (torch.randn(v, d, generator=g) * 0.5).requires_grad_()
    target = torch.randint(1, v, (b, t), generator=g)
    target[1, 2:] = pad
    target[3, 4:] = pad
    loss, nll, n = output_loss(features, weight, target, eps, pad)
    logits = F.linear(features, weight).view(-1, v)
    ref = F.cross_entropy(logits, target.view(-1), label_smoothing=eps, ignore_index=pad, reduction="sum")
    ref_nll = F.cross_entropy(logits, target.view(-1), ignore_index=pad, reduction="sum")
    assert n == int((target != pad).sum())
    torch.testing.assert_close((loss, nll), (ref, ref_nll))
    scale = 0.37  # the trainer scales the summed loss (1 / tokens, the fp16 loss scale)
    got = torch.autograd.grad(loss * scale, (features, weight))
    want = torch.autograd.grad(ref * scale, (features, weight))
    torch.testing.assert_close(got, want)
    assert got[0][1, 2:].abs().max() == 0  # padding positions get no gradient

    # Without gradients (evaluation) the sums are the same, and the NLL is never differentiable.
    with torch.no_grad():
        torch.testing.assert_close(output_loss(features, weight, target, eps, pad)[:2], (ref, ref_nll))
    assert not nll.requires_grad

    # Under bf16 autocast the projection runs in bf16 as the model's generator would, the softmax in fp32.
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss16, _, _ = output_loss(features, weight, target, eps, pad)
        logits16 = F.linear(features, weight).float().view(-1, v)
    ref16 = F.cross_entropy(logits16, target.view(-1), label_smoothing=eps, ignore_index=pad, reduction="sum")
    torch.testing.assert_close(loss16, ref16, rtol=1e-3, atol=1e-2)
    grad16 = torch.autograd.grad(loss16, weight)[0]
    torch.testing.assert_close(grad16, want[1] / scale, rtol=0.05, atol=0.05)


def test_the_model_features_are_what_the_generator_projects() -> None:
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=29, d_model=16, d_ff=32, n_heads=2, n_enc_layers=1, n_dec_layers=2, dropout=0.0)
    model = Transformer(config).eval()
    src, tgt = torch.randint(4, 29, (2, 5)), torch.randint(4, 29, (2, 4))
    src_mask, tgt_mask = padding_mask(src, 0), target_mask(tgt, 0)
    features = model(src, tgt, src_mask, tgt_mask, features_only=True)
    assert features.shape == (2, 4, 16)
    torch.testing.assert_close(model.generator(features), model(src, tgt, src_mask, tgt_mask))


def test_cpu_dropout_keeps_the_rate_the_scale_and_the_gradient() -> None:
    torch.manual_seed(0)
    drop = Dropout(0.1)
    x = torch.ones(1000, 1000, requires_grad=True)
    y = drop(x)
    kept = y != 0
    assert abs(1 - float(kept.float().mean()) - 0.1) < 0.002  # 1M draws: the standard error is 0.0003
    torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / 0.9))  # survivors scaled by 1 / (1 - p)
    (grad,) = torch.autograd.grad(y.sum(), x)
    torch.testing.assert_close(grad, kept.float() / 0.9)  # the gradient goes through the same mask
    lanes = kept.view(-1, 4).float().mean(dim=0)  # four 16-bit draws share each 64-bit one: each lane is fair
    assert float((1 - lanes - 0.1).abs().max()) < 0.003
    both = (~kept[:, :-1] & ~kept[:, 1:]).float().mean()  # neighbours drop independently: p^2
    assert abs(float(both) - 0.01) < 0.001
    bf16 = drop(torch.ones(100, 100, dtype=torch.bfloat16))
    assert bf16.dtype == torch.bfloat16
    drop.eval()
    assert torch.equal(drop(x), x)  # evaluation: the identity
    assert torch.equal(Dropout(0.0).train()(x), x)
    assert float(Dropout(1.0).train()(x).detach().abs().sum()) == 0


@pytest.mark.parametrize("p", [0.3, 0.5, 0.9])
def test_cpu_dropout_is_unbiased_at_other_rates(p: float) -> None:
    torch.manual_seed(1)
    y = Dropout(p).train()(torch.ones(2000, 1000))
    assert abs(float((y == 0).float().mean()) - p) < 0.002  # 2M draws: the standard error is at most 0.00035
    assert abs(float(y.mean()) - 1.0) < 0.01  # E[y] = x: the scale matches the rate drawn


def test_label_smoothed_loss_uses_its_pad_id() -> None:
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 4, 7, generator=g)
    target = torch.tensor([[3, 4, 5, 5], [6, 5, 5, 5]])  # 5 plays the role of padding here
    loss, nll, n_tokens = label_smoothed_loss(logits, target, 0.1, pad_id=5)
    assert n_tokens == 3
    expected = F.cross_entropy(
        logits.view(-1, 7), target.view(-1), label_smoothing=0.1, ignore_index=5, reduction="sum"
    )
    torch.testing.assert_close(loss, expected, atol=1e-4, rtol=1e-6)


# --- Section 5.3: the learning-rate schedule (equation 3) ---------------------------------------------------


@pytest.mark.parametrize("d_model,warmup,factor", [(512, 4000, 1.0), (64, 100, 2.0)])
def test_inverse_sqrt_lr_matches_equation_3(d_model: int, warmup: int, factor: float) -> None:
    for step in (1, 2, warmup // 3, warmup - 1, warmup, warmup + 1, 5 * warmup, 100 * warmup):
        expected = factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert inverse_sqrt_lr(step, d_model, warmup, factor) == pytest.approx(expected, rel=1e-12)
    # Linear warm-up, then decay proportional to 1/sqrt(step).
    assert inverse_sqrt_lr(warmup // 2, d_model, warmup, factor) == pytest.approx(
        inverse_sqrt_lr(warmup // 4, d_model, warmup, factor) * 2, rel=1e-9
    )
    assert inverse_sqrt_lr(16 * warmup, d_model, warmup, factor) == pytest.approx(
        inverse_sqrt_lr(4 * warmup, d_model, warmup, factor) / 2, rel=1e-9
    )
    steps = range(1, 3 * warmup)
    rates = [inverse_sqrt_lr(s, d_model, warmup, factor) for s in steps]
    assert steps[max(range(len(rates)), key=rates.__getitem__)] == warmup
    assert max(rates) == pytest.approx(factor / math.sqrt(d_model * warmup), rel=1e-12)


def test_adam_is_the_papers_update_and_takes_older_states() -> None:
    """setup_model's Adam (fused on CPU) against equation-by-equation Adam (Kingma & Ba, Algorithm 1; section 5.3's
    beta1 0.9, beta2 0.98, eps 1e-9); and a state saved by torch's default Adam (checkpoints of earlier
    versions) continues in it as it would have in the default one, under the resuming recipe's settings."""
    config = ModelConfig(vocab_size=40, d_model=16, d_ff=32, n_heads=2, n_enc_layers=1, n_dec_layers=1, dropout=0.0)
    t = TrainRecipe()
    torch.manual_seed(0)
    model, optimizer, _ = setup_model(config, t, torch.device("cpu"), "fp32")
    torch_version = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    assert optimizer.defaults["fused"] or torch_version < (2, 4)  # the fused CPU kernel (torch 2.4+) is what is checked
    params = list(model.parameters())
    reference = [p.detach().clone() for p in params]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    (b1, b2), eps, lr = t.betas, t.eps, 1e-3
    g = torch.Generator().manual_seed(1)
    for step in range(1, 6):
        grads = [torch.randn(p.shape, generator=g) * 10.0**-step for p in params]  # shrinking: eps and bias matter
        for p, grad in zip(params, grads, strict=True):
            p.grad = grad.clone()
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
        for i, grad in enumerate(grads):
            m[i] = b1 * m[i] + (1 - b1) * grad
            v[i] = b2 * v[i] + (1 - b2) * grad * grad
            m_hat, v_hat = m[i] / (1 - b1**step), v[i] / (1 - b2**step)
            reference[i] = reference[i] - lr * m_hat / (v_hat.sqrt() + eps)
    for got, expected in zip(params, reference, strict=True):
        torch.testing.assert_close(got.detach(), expected, rtol=1e-5, atol=1e-7)

    # a state saved by torch's default multi-tensor Adam (the checkpoints of earlier versions) is continued by the
    # fused one, under this start's settings (a resume may change train.eps), not the saving run's
    old_model = copy.deepcopy(model)
    old = torch.optim.Adam(old_model.parameters(), lr=lr, betas=tuple(t.betas), eps=t.eps, foreach=True)
    for _ in range(2):
        for p in old_model.parameters():
            p.grad = torch.randn(p.shape, generator=g) * 1e-3
        old.step()
    saved = copy.deepcopy(old.state_dict())
    t_new = TrainRecipe(eps=1e-6)
    new_model, new, _ = setup_model(config, t_new, torch.device("cpu"), "fp32")
    new_model.load_state_dict(old_model.state_dict())
    load_optimizer_state(new, saved)
    assert new.param_groups[0]["eps"] == 1e-6 and new.param_groups[0]["fused"] == optimizer.defaults["fused"]
    for group in old.param_groups:
        group["eps"] = 1e-6
    grads = [torch.randn(p.shape, generator=g) * 1e-3 for p in params]
    for net, opt in ((old_model, old), (new_model, new)):
        for p, grad in zip(net.parameters(), grads, strict=True):
            p.grad = grad.clone()
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
    for a, b in zip(old_model.parameters(), new_model.parameters(), strict=True):
        torch.testing.assert_close(b.detach(), a.detach(), rtol=1e-5, atol=1e-7)
    assert new.state_dict()["state"][0]["step"] == 3


# --- Checkpoints ------------------------------------------------------------------------------------------------


def corpus_sentences(start: int, pairs: int) -> list[str]:
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in itertools.islice(f, start, start + pairs)]
    return [s for row in rows for s in row[:2]]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return train_tokenizer(corpus_sentences(0, 25), vocab_size=300)


def tiny_config(vocab_size: int, **overrides) -> ModelConfig:
    values = dict(
        vocab_size=vocab_size,
        d_model=32,
        d_ff=48,
        n_heads=4,
        n_enc_layers=1,
        n_dec_layers=2,
        dropout=0.0,
        max_positions=32,
    )
    values.update(overrides)
    return ModelConfig(**values)


def random_model(config: ModelConfig, seed: int) -> Transformer:
    """A model with every parameter random (LayerNorms included), so that any tensor not restored shows."""
    torch.manual_seed(seed)
    model = Transformer(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    return model


def outputs(model: Transformer) -> torch.Tensor:
    g = torch.Generator().manual_seed(123)
    v = model.config.vocab_size
    src = torch.randint(3, v, (2, 6), generator=g)
    src[1, 4:] = 0
    tgt = torch.randint(3, v, (2, 5), generator=g)
    tgt[:, 0] = 1
    with torch.no_grad():
        return model(src, tgt, padding_mask(src, 0), target_mask(tgt, 0))


def assert_same_state(a: nn.Module, b: nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


@pytest.mark.parametrize("tie", [True, False])
def test_weights_round_trip(tmp_path: Path, tie: bool) -> None:
    config = tiny_config(50, tie_embeddings=tie)
    model = random_model(config, 0)
    path = tmp_path / "w.safetensors"
    save_weights(path, weights_state(model), config, "ab" * 32, 1234)
    state = load_file(str(path))
    if tie:  # tied tensors are stored once
        assert "src_embed.token.weight" in state
        assert "tgt_embed.token.weight" not in state and "generator.weight" not in state
    fresh = random_model(config, 1)
    assert not torch.equal(fresh.encoder_layers[0].ffn.w_1.weight, model.encoder_layers[0].ffn.w_1.weight)
    load_state(fresh, state, path)
    assert_same_state(model, fresh)
    torch.testing.assert_close(outputs(fresh), outputs(model), atol=0, rtol=0)
    w = fresh.src_embed.token.weight
    if tie:
        assert fresh.tgt_embed.token.weight is w and fresh.generator.weight is w
    else:
        assert fresh.generator.weight.data_ptr() != w.data_ptr()
    metadata = read_metadata(path)
    assert json.loads(metadata["config"]) == config.to_dict()
    assert ModelConfig.from_dict(json.loads(metadata["config"])) == config
    assert metadata["tokenizer_sha256"] == "ab" * 32
    assert metadata["step"] == "1234"
    assert metadata["tfm_version"] == __version__


def test_load_state_rejects_weights_of_another_shape(tmp_path: Path) -> None:
    small = random_model(tiny_config(50, n_dec_layers=1), 0)
    big = random_model(tiny_config(50, n_dec_layers=2), 1)
    with pytest.raises(CheckpointError, match="does not fit"):
        load_state(big, weights_state(small), "small.safetensors")


def make_run(run_dir: Path, tokenizer: Tokenizer, seed: int = 0, step: int = 10) -> Transformer:
    config = tiny_config(tokenizer.vocab_size)
    model = random_model(config, seed)
    save_weights(run_dir / FINAL, weights_state(model), config, tokenizer.sha256, step)
    tokenizer.save(run_dir / "tokenizer.json")
    return model


def test_load_model_from_run_directory(tmp_path: Path, tokenizer: Tokenizer) -> None:
    model = make_run(tmp_path, tokenizer)
    loaded = load_model(tmp_path)
    assert loaded.path == tmp_path / FINAL and loaded.run_dir == tmp_path and loaded.step == 10
    assert loaded.tokenizer.sha256 == tokenizer.sha256
    assert loaded.model.config == model.config
    assert not loaded.model.training
    assert_same_state(model, loaded.model)
    torch.testing.assert_close(outputs(loaded.model), outputs(model), atol=0, rtol=0)


def test_load_model_picks_newest_periodic_checkpoint(tmp_path: Path, tokenizer: Tokenizer) -> None:
    config = tiny_config(tokenizer.vocab_size)
    old, new = random_model(config, 0), random_model(config, 1)
    save_weights(checkpoint_path(tmp_path, 900), weights_state(new), config, tokenizer.sha256, 900)
    save_weights(checkpoint_path(tmp_path, 80), weights_state(old), config, tokenizer.sha256, 80)
    tokenizer.save(tmp_path / "tokenizer.json")
    loaded = load_model(tmp_path)  # step 900 > 80, although 80 was written last
    assert loaded.step == 900 and loaded.run_dir == tmp_path
    assert_same_state(new, loaded.model)


def test_load_model_rejects_another_tokenizer(tmp_path: Path, tokenizer: Tokenizer) -> None:
    make_run(tmp_path, tokenizer)
    other = train_tokenizer(corpus_sentences(500, 25), vocab_size=300)
    assert other.sha256 != tokenizer.sha256
    other.save(tmp_path / "tokenizer.json")
    with pytest.raises(CheckpointError, match="does not match") as err:
        load_model(tmp_path)
    assert err.value.hint


def test_load_model_rejects_vocab_mismatch(tmp_path: Path, tokenizer: Tokenizer) -> None:
    config = tiny_config(tokenizer.vocab_size + 7)
    # the tokenizer's own hash, as with a hand-edited config: the hash check passes, the sizes do not
    save_weights(tmp_path / FINAL, weights_state(random_model(config, 0)), config, tokenizer.sha256, 1)
    tokenizer.save(tmp_path / "tokenizer.json")
    with pytest.raises(CheckpointError, match=f"has {tokenizer.vocab_size} tokens but .* was trained with {tokenizer.vocab_size + 7}"):
        load_model(tmp_path)
    save_weights(tmp_path / FINAL, weights_state(random_model(config, 0)), config, "", 1)  # no hash: not tfm's
    with pytest.raises(CheckpointError, match="has no tfm metadata"):
        load_model(tmp_path)


def test_load_model_missing_pieces(tmp_path: Path, tokenizer: Tokenizer) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError) as err:
        load_model(empty)
    assert str(empty) in str(err.value) and FINAL in str(err.value)
    assert err.value.hint and "tfm train" in err.value.hint
    with pytest.raises(CheckpointError, match="does not exist"):
        load_model(tmp_path / "nowhere")
    no_tok = tmp_path / "no-tokenizer"
    make_run(no_tok, tokenizer)
    (no_tok / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match="tokenizer.json is missing"):
        load_model(no_tok)
    foreign = tmp_path / "foreign.safetensors"
    save_file({"w": torch.zeros(2)}, str(foreign))  # a valid safetensors file, but not written by tfm
    with pytest.raises(CheckpointError, match="no tfm metadata"):
        load_model(foreign)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        load_model(junk)


def test_average_checkpoints_is_the_mean(tmp_path: Path) -> None:
    config = tiny_config(40)
    a, b = random_model(config, 0), random_model(config, 1)
    paths = [tmp_path / "a.safetensors", tmp_path / "b.safetensors"]
    for model, path in zip((a, b), paths, strict=True):
        save_weights(path, weights_state(model), config, "", 1)
    averaged = average_checkpoints(paths)
    sa, sb = weights_state(a), weights_state(b)
    assert averaged.keys() == sa.keys()
    for name in sa:
        assert averaged[name].dtype == sa[name].dtype
        torch.testing.assert_close(averaged[name], (sa[name] + sb[name]) / 2, atol=1e-7, rtol=0)
    mean = random_model(config, 2)
    load_state(mean, averaged, "averaged")
    assert mean.generator.weight is mean.src_embed.token.weight
    torch.testing.assert_close(mean.generator.weight, (a.generator.weight + b.generator.weight) / 2)
    with pytest.raises(CheckpointError):
        average_checkpoints([])
    other = tmp_path / "other.safetensors"
    save_weights(other, weights_state(random_model(tiny_config(40, d_ff=16), 3)), config, "", 1)
    with pytest.raises(CheckpointError, match="different"):
        average_checkpoints([paths[0], other])


@pytest.mark.parametrize(("with_dev", "last_wins"), [(False, False), (True, False), (True, True)])
def test_finish_leaves_the_final_model_in_the_model(tmp_path: Path, monkeypatch, with_dev: bool, last_wins: bool) -> None:
    """When the last checkpoint won over the average, the model still held the average it was evaluated with last,
    not the final model written: the two must be one, whichever won (and with no dev set to choose)."""
    import tfm_cli.training.evaluation as evaluation
    from tfm_cli.recipe import recipe_from_dict

    config = tiny_config(40)
    checkpoints = [random_model(config, seed) for seed in range(3)]
    for step, model in enumerate(checkpoints, start=1):
        path = checkpoint_path(tmp_path, step)
        path.parent.mkdir(exist_ok=True)
        save_weights(path, weights_state(model), config, "", step)
    bleu = iter([30.0, 20.0] if last_wins else [20.0, 30.0])  # the last checkpoint is evaluated first, then the average
    monkeypatch.setattr(evaluation, "evaluate", lambda *args, **kwargs: {"bleu": next(bleu)})
    events = type("Events", (), {"message": lambda self, text: None, "evaluation": lambda self, step, scores: None})()
    dev = type("Dev", (), {"sources": ["a", "b"]})() if with_dev else None
    tok = type("Tok", (), {"sha256": ""})()
    model = random_model(config, 9)  # the weights training ended with, in the trainer
    recipe = recipe_from_dict({"name": "x", "train": {"average_last": 3}})
    result = evaluation.finish(tmp_path, recipe, model, tok, dev, contextlib.nullcontext, events)
    assert result["final_model"]["chosen"] == ("last" if last_wins else "average")
    final = load_file(str(tmp_path / FINAL))
    for name, tensor in weights_state(model).items():
        assert torch.equal(tensor, final[name]), name


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_cpu_dropout_in_bf16_keeps_the_scale(p: float) -> None:
    """In bf16, 1 / (1 - p) rounds to 1.109375 for p = 0.1: a mask holding it scaled every kept activation down by
    0.16% alike (training saw sublayer outputs 0.9984 times what evaluation sees). The kept elements must be their
    inputs times 1 / (1 - p), each rounded on its own, so that the ratio is right on average."""
    torch.manual_seed(2)
    x = torch.randn(2000, 1000).bfloat16().requires_grad_()
    y = Dropout(p).train()(x)
    kept = y != 0
    scale = 1 / (1 - p)
    ratio = float((y[kept].double() / x[kept].double()).mean().detach())
    assert abs(ratio / scale - 1) < 2e-4, ratio  # 1.8M elements; the bias was 1.6e-3 for p = 0.1
    assert abs(float(kept.float().mean()) - (1 - p)) < 0.002
    (grad,) = torch.autograd.grad((y.float() * 3).sum(), x)
    torch.testing.assert_close(grad.float(), kept.float() * 3 * scale, rtol=4e-3, atol=0)  # the same mask and scale
