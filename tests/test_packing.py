"""Prepacked linear layers for CPU decoding (tfm_cli/packing.py) against `nn.Linear` and the plain search."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tfm_cli import packing
from tfm_cli.decoding import TorchEngine, translate_ids
from tfm_cli.model import ModelConfig, Transformer
from tfm_cli.packing import PackedLinear, packed_view

needs_onednn = pytest.mark.skipif(not packing.packing_available(), reason="this PyTorch build has no oneDNN kernels")


@pytest.fixture
def packs_fp32(monkeypatch) -> None:
    """fp32 through the packed kernels whatever the CPU (on an Intel CPU tfm leaves fp32 to MKL), so they are tested."""
    monkeypatch.setattr(packing, "fp32_packing_pays", lambda: True)


def small_model(seed: int = 0, **overrides) -> Transformer:
    values = dict(vocab_size=40, d_model=32, d_ff=64, n_heads=4, n_enc_layers=2, n_dec_layers=2, dropout=0.0,
                  max_positions=64)
    values.update(overrides)
    torch.manual_seed(seed)
    return Transformer(ModelConfig(**values)).eval()


@needs_onednn
def test_packed_linear_computes_what_the_linear_layer_computes(packs_fp32) -> None:
    torch.manual_seed(0)
    linear = nn.Linear(48, 80)
    packed = PackedLinear(linear)
    x = torch.randn(3, 7, 48)
    inputs = [x, x.transpose(0, 1), x[:, 2], torch.randn(3, 7, 96)[..., ::2], torch.randn(0, 48)]
    with torch.no_grad():
        for v in inputs:
            got, want = packed(v), linear(v)
            assert got.shape == want.shape and got.dtype == want.dtype
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert packed._packed[torch.float32][1] is not None  # the packed kernel ran, not F.linear
        # bf16 autocast, forced whatever the CPU: packed bf16 where oneDNN runs it natively, F.linear otherwise
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got, want = packed(x), linear(x)
        assert got.dtype == want.dtype == torch.bfloat16
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)


@needs_onednn
def test_with_gradients_it_is_the_linear_layer_and_trains_the_shared_weight() -> None:
    torch.manual_seed(0)
    linear = nn.Linear(16, 8)
    packed = PackedLinear(linear)
    assert packed.weight is linear.weight and packed.bias is linear.bias
    x = torch.randn(4, 16)
    packed(x).square().sum().backward()
    got = (linear.weight.grad.clone(), linear.bias.grad.clone())
    linear.zero_grad()
    linear(x).square().sum().backward()
    assert torch.equal(got[0], linear.weight.grad) and torch.equal(got[1], linear.bias.grad)


@needs_onednn
def test_the_view_shares_parameters_and_leaves_the_model_as_it_was(packs_fp32) -> None:
    model = small_model()
    view = packed_view(model)
    assert view is not model
    assert all(type(m) is not PackedLinear for m in model.modules())
    linears = [n for n, m in model.named_modules() if type(m) is nn.Linear]
    assert linears and all(isinstance(dict(view.named_modules())[n], PackedLinear) for n in linears)
    # the same tensors, not copies: tied embeddings stay tied, and the state dict is the model's
    assert {id(p) for p in view.parameters()} == {id(p) for p in model.parameters()}
    assert view.generator.weight is view.tgt_embed.token.weight is model.src_embed.token.weight
    assert view.state_dict().keys() == model.state_dict().keys()
    src = torch.tensor([[5, 6, 7, 2]])
    tgt = torch.tensor([[1, 8, 9]])
    with torch.no_grad():
        torch.testing.assert_close(view(src, tgt, None, None), model(src, tgt, None, None), rtol=1e-5, atol=1e-5)


def test_nothing_to_pack_gives_the_model_back(monkeypatch) -> None:
    model = small_model()
    monkeypatch.setattr(packing, "packing_available", lambda: False)
    assert packed_view(model) is model
    net = TorchEngine(model).net  # a view in eval mode over the model's own tensors, with nothing packed
    assert not any(isinstance(m, PackedLinear) for m in net.modules())
    assert all(a is b for a, b in zip(net.parameters(), model.parameters(), strict=True))


@needs_onednn
@pytest.mark.parametrize("greedy", [False, True])
def test_packed_decoding_translates_like_the_plain_model(greedy: bool, monkeypatch, packs_fp32) -> None:
    model = small_model(seed=3, vocab_size=60)
    g = torch.Generator().manual_seed(1)
    sequences = [torch.randint(3, 60, (n,), generator=g).tolist() for n in (1, 4, 9, 13, 6, 2, 17, 8)]
    engine = TorchEngine(model)
    assert engine.net is not model and engine.model is model
    packed = translate_ids(engine, sequences, greedy=greedy, n_best=1 if greedy else 3, max_len_offset=10)
    monkeypatch.setattr(packing, "packing_available", lambda: False)
    plain_engine = TorchEngine(model)
    assert not any(isinstance(m, PackedLinear) for m in plain_engine.net.modules())
    plain = translate_ids(plain_engine, sequences, greedy=greedy, n_best=1 if greedy else 3, max_len_offset=10)
    assert [[h.tokens for h in hs] for hs in packed] == [[h.tokens for h in hs] for hs in plain]
    for hs, ps in zip(packed, plain, strict=True):
        for h, p in zip(hs, ps, strict=True):
            assert h.score == pytest.approx(p.score, abs=1e-4)


@needs_onednn
@pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="this PyTorch build has no MKL")
@pytest.mark.parametrize("native_bf16", [False, True])
def test_fp32_stays_with_mkl_on_an_intel_cpu(monkeypatch, native_bf16: bool) -> None:
    """MKL is the faster fp32 kernel on Intel's CPUs (oneDNN's packed one on AMD's): the view packs only bf16 there."""
    model = small_model()
    monkeypatch.setattr(packing, "cpu_vendor", lambda: "GenuineIntel")
    monkeypatch.setattr(packing, "cpu_has_fast_bf16", lambda: native_bf16)
    assert not packing.fp32_packing_pays()
    view = packed_view(model)
    if not native_bf16:  # nothing to pack: the engine decodes the model itself, through F.linear
        assert view is model and not any(isinstance(m, PackedLinear) for m in TorchEngine(model).net.modules())
        return
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        torch.testing.assert_close(view.generator(x), model.generator(x), rtol=0, atol=0)  # F.linear, the same bits
        with torch.autocast("cpu", dtype=torch.bfloat16):
            view.generator(x)
    assert view.generator._packed[torch.float32][1] is None and view.generator._packed[torch.bfloat16][1] is not None


@pytest.mark.parametrize("vendor", ["AuthenticAMD", None])
def test_fp32_is_packed_off_intel(monkeypatch, vendor: str | None) -> None:
    monkeypatch.setattr(packing, "cpu_vendor", lambda: vendor)
    assert packing.fp32_packing_pays()
