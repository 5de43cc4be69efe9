"""Prepacked linear layers for CPU decoding (tfm_cli/packing.py) against `nn.Linear` and the plain search."""

from __future__ import annotations

import collections
import os
import subprocess
import sys

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from tfm_cli import packing
from tfm_cli.decoding import TorchEngine, translate_ids
from tfm_cli.model import ModelConfig, Transformer
from tfm_cli.model.transformer import MultiHeadAttention
from tfm_cli.packing import PackedLinear, decoding_view, packing_available
from tfm_cli.quantization import Int8Linear, quantize_int8

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
    view = decoding_view(model)
    assert view is not model
    assert all(type(m) is not PackedLinear for m in model.modules())
    assert all(m.qkv is None for m in model.modules() if isinstance(m, MultiHeadAttention))
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


def test_without_onednn_nothing_is_packed_and_self_attention_is_still_stacked(monkeypatch) -> None:
    model = small_model()
    monkeypatch.setattr(packing, "packing_available", lambda: False)
    view = decoding_view(model)
    assert view is not model and not any(type(m) is PackedLinear and m.parts is None for m in view.modules())
    attentions = [layer.self_attn for layer in (*view.encoder_layers, *view.decoder_layers)]
    assert len(attentions) == 4
    for m in attentions:
        assert type(m.qkv) is PackedLinear and [type(p) for p in m.qkv.parts] == [nn.Linear] * 3
        assert m.qkv.parts[0] is m.w_q and m.qkv.parts[2] is m.w_v
    assert all(layer.cross_attn.qkv is None for layer in view.decoder_layers)  # its keys and values are the memory's
    net = TorchEngine(model).net  # a view in eval mode over the model's own tensors
    assert all(a is b for a, b in zip(net.parameters(), model.parameters(), strict=True))
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        q, k, v = net.decoder_layers[0].self_attn.qkv(x).chunk(3, dim=-1)
        want = [layer(x) for layer in (model.decoder_layers[0].self_attn.w_q, model.decoder_layers[0].self_attn.w_k,
                                       model.decoder_layers[0].self_attn.w_v)]
    assert all(torch.equal(a, b) for a, b in zip((q, k, v), want, strict=True))


@pytest.mark.parametrize("pack", [False, True])
def test_stacked_layers_compute_the_layers_side_by_side_and_follow_their_weights(pack: bool, monkeypatch) -> None:
    """One product of the three weights stacked gives each layer's numbers (to the last bits: another product's
    blocking), trains the shared weights with gradients, and a change of the weights in place is seen (the stacked
    copy is taken again)."""
    if pack and not packing.packing_available():
        pytest.skip("this PyTorch build has no oneDNN kernels")
    monkeypatch.setattr(packing, "fp32_packing_pays", lambda: pack)
    torch.manual_seed(0)
    layers = [nn.Linear(48, 80) for _ in range(3)]
    stacked = PackedLinear(*layers)
    assert (stacked.in_features, stacked.out_features) == (48, 240)
    x = torch.randn(3, 7, 48)
    for v in (x, x.transpose(0, 1), x[:, 2], torch.randn(1, 48), torch.randn(0, 48)):
        with torch.no_grad():
            got, want = stacked(v), torch.cat([layer(v) for layer in layers], dim=-1)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert (stacked._packed[torch.float32][1] is not None) == pack  # which kernel ran
    with torch.no_grad():
        layers[1].load_state_dict(nn.Linear(48, 80).state_dict())  # in place: the version counters move
        torch.testing.assert_close(stacked(x), torch.cat([layer(x) for layer in layers], dim=-1), rtol=1e-6, atol=1e-6)
    stacked(x).square().sum().backward()
    got = [(layer.weight.grad.clone(), layer.bias.grad.clone()) for layer in layers]
    for layer in layers:
        layer.zero_grad()
    torch.cat([layer(x) for layer in layers], dim=-1).square().sum().backward()
    for (gw, gb), layer in zip(got, layers, strict=True):
        torch.testing.assert_close(gw, layer.weight.grad, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(gb, layer.bias.grad, rtol=1e-5, atol=1e-5)


def test_stacked_int8_layers_give_the_int8_layers_numbers_bit_for_bit() -> None:
    if not hasattr(torch, "_int_mm"):
        pytest.skip("this PyTorch build has no int8 matrix product")
    model = quantize_int8(small_model(seed=4))
    view = decoding_view(model)
    attn = view.decoder_layers[1].self_attn
    assert type(attn.qkv) is Int8Linear and attn.qkv.out_features == 3 * 32
    x = torch.randn(5, 3, 32)
    with torch.no_grad():
        got = attn.qkv(x)
        want = torch.cat([attn.w_q(x), attn.w_k(x), attn.w_v(x)], dim=-1)
    assert torch.equal(got, want)


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
    assert not any(type(m) is PackedLinear and m.parts is None for m in plain_engine.net.modules())
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
    monkeypatch.setattr(packing, "cpu_has_native_bf16", lambda: native_bf16)
    assert not packing.fp32_packing_pays()
    view = decoding_view(model)
    if not native_bf16:  # nothing to pack: the layers stay nn.Linear (F.linear), self-attention stacked
        net = TorchEngine(model).net
        assert type(net.generator) is nn.Linear and not any(type(m) is PackedLinear and m.parts is None for m in net.modules())
        with torch.no_grad():
            net.decoder_layers[0].self_attn.qkv(torch.randn(2, 32))
        assert net.decoder_layers[0].self_attn.qkv._packed[torch.float32][1] is None  # MKL's F.linear, stacked
        return
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        torch.testing.assert_close(view.generator(x), model.generator(x), rtol=0, atol=0)  # F.linear, the same bits
        with torch.autocast("cpu", dtype=torch.bfloat16):
            view.generator(x)
    assert view.generator._packed[torch.float32][1] is None and view.generator._packed[torch.bfloat16][1] is not None


class WeightCasts(TorchDispatchMode):
    """Counts the dtype casts that run under it of the tensors whose data starts at one of `addresses`: in all
    (`count`), and the most of any one of them (`most`)."""

    def __init__(self, addresses: set[int]) -> None:
        super().__init__()
        self.addresses, self.each = addresses, collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten._to_copy.default, torch.ops.aten.to.dtype) and args[0].data_ptr() in self.addresses:
            self.each[args[0].data_ptr()] += 1
        return func(*args, **(kwargs or {}))

    @property
    def count(self) -> int:
        return sum(self.each.values())

    @property
    def most(self) -> int:
        return max(self.each.values(), default=0)


def test_unpacked_under_autocast_the_weights_are_cast_once_not_at_every_call(monkeypatch) -> None:
    """Where no packed kernel runs (CUDA; here a CPU with packing turned off), a linear layer under autocast and
    inference mode (the searches') computed on weights autocast cast again at every call: PackedLinear keeps the
    cast, the same numbers, and casts again only when the weights change."""
    monkeypatch.setattr(packing, "packing_available", lambda: False)
    torch.manual_seed(0)
    linear = nn.Linear(48, 80)
    packed = PackedLinear(linear)
    x = torch.randn(5, 48)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        plain_casts, own_casts = WeightCasts({linear.weight.data_ptr()}), WeightCasts({linear.weight.data_ptr()})
        with plain_casts:
            want = [linear(x) for _ in range(3)]
        with own_casts:
            got = [packed(x) for _ in range(3)]
    assert plain_casts.count == 3 and own_casts.count == 1  # autocast's three; one here
    assert all(g.dtype == torch.bfloat16 and torch.equal(g, w) for g, w in zip(got, want, strict=True))
    with torch.no_grad():
        linear.weight.add_(1.0)  # in place: the version counter moves, and the cast is taken again
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(packed(x), linear(x))
        with torch.autocast("cpu", enabled=False):
            assert packed(x).dtype == torch.float32 and torch.equal(packed(x), linear(x))  # fp32: F.linear as it was


def test_off_the_cpu_the_view_keeps_casts_and_stacks_nothing() -> None:
    """A model on another device (here PyTorch's `meta`, which holds no data, for CUDA's place): every linear layer
    of the view but the output projection is a PackedLinear of its own (the cast kept from step to step), none
    stacked, the model untouched. (The engine multiplies by its own copy of the output projection's weight.)"""
    model = small_model().to("meta")
    view = decoding_view(model)
    assert view is not model and all(type(m) is not PackedLinear for m in model.modules())
    linears = [n for n, m in model.named_modules() if type(m) is nn.Linear and n != "generator"]
    assert linears and all(type(dict(view.named_modules())[n]) is PackedLinear for n in linears)
    assert type(view.generator) is nn.Linear
    assert all(m.qkv is None for m in view.modules() if isinstance(m, MultiHeadAttention))
    assert all(a is b for a, b in zip(view.parameters(), model.parameters(), strict=True))


@pytest.mark.parametrize("greedy", [False, True])
def test_a_view_of_kept_casts_translates_as_the_model_under_autocast(greedy: bool, monkeypatch) -> None:
    """The search in bf16 over the view that runs off the CPU (every linear layer keeping its cast, the engine's
    copy of the output projection too), forced here on the CPU with packing off: the same hypotheses and scores as
    the model itself under autocast, with each weight cast once in the search where autocast cast it at every step."""
    monkeypatch.setattr(packing, "packing_available", lambda: False)
    model = small_model(seed=5, vocab_size=60, n_dec_layers=3)
    g = torch.Generator().manual_seed(2)
    sequences = [torch.randint(3, 60, (n,), generator=g).tolist() for n in (1, 4, 9, 13, 6, 2, 17, 8)]

    def kept_casts(m: nn.Module) -> nn.Module:  # what decoding_view makes off the CPU
        view = packing.module_view(m)
        packing._wrap_linears(view, keep=view.generator)
        return view

    def search(engine: TorchEngine) -> tuple[list, WeightCasts]:
        weights = {p.data_ptr() for p in model.parameters() if p.dim() == 2} | {engine.output_t.data_ptr()}
        casts = WeightCasts(weights)
        with casts, torch.autocast("cpu", dtype=torch.bfloat16):
            found = translate_ids(engine, sequences, greedy=greedy, n_best=1 if greedy else 3, max_len_offset=20)
        return [[(h.tokens, h.score) for h in hs] for hs in found], casts

    monkeypatch.setattr("tfm_cli.decoding.decoding_view", packing.module_view)
    plain, plain_casts = search(TorchEngine(model))
    monkeypatch.setattr("tfm_cli.decoding.decoding_view", kept_casts)
    kept, kept_casts_made = search(TorchEngine(model))
    assert kept == plain
    assert kept_casts_made.most == 1 and plain_casts.most > 10  # each weight (and the output copy) once a search,
    assert plain_casts.count > 10 * kept_casts_made.count  # where autocast cast it at every step


@pytest.mark.parametrize("vendor", ["AuthenticAMD", None])
def test_fp32_is_packed_off_intel(monkeypatch, vendor: str | None) -> None:
    monkeypatch.setattr(packing, "cpu_vendor", lambda: vendor)
    assert packing.fp32_packing_pays()


@pytest.mark.parametrize("int8", [False, True])
@pytest.mark.parametrize("greedy", [False, True])
def test_the_decoding_view_translates_as_the_model_itself(greedy: bool, int8: bool, monkeypatch) -> None:
    """The search over the view (packed where it pays, Q, K and V stacked) against the model itself: the same
    hypotheses."""
    if int8 and not hasattr(torch, "_int_mm"):
        pytest.skip("this PyTorch build has no int8 matrix product")
    model = small_model(seed=5, vocab_size=60, n_dec_layers=3)
    model = quantize_int8(model) if int8 else model
    g = torch.Generator().manual_seed(2)
    sequences = [torch.randint(3, 60, (n,), generator=g).tolist() for n in (1, 4, 9, 13, 6, 2, 17, 8)]
    fast = translate_ids(TorchEngine(model), sequences, greedy=greedy, n_best=1 if greedy else 3, max_len_offset=20)
    assert any(m.qkv is not None for m in TorchEngine(model).net.modules() if isinstance(m, MultiHeadAttention))
    monkeypatch.setattr("tfm_cli.decoding.decoding_view", lambda m: m)
    engine = TorchEngine(model)
    assert all(m.qkv is None for m in engine.net.modules() if isinstance(m, MultiHeadAttention))
    plain = translate_ids(engine, sequences, greedy=greedy, n_best=1 if greedy else 3, max_len_offset=20)
    assert [[h.tokens for h in hs] for hs in fast] == [[h.tokens for h in hs] for hs in plain]
    for hs, ps in zip(fast, plain, strict=True):
        for h, p in zip(hs, ps, strict=True):
            assert h.score == pytest.approx(p.score, abs=1e-5)


_SHAPES = """
import torch
import tfm_cli  # as every tfm command and the API start
def rss():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS")) // 1024
# what PackedLinear runs on the CPU (on any CPU: it chooses MKL for fp32 on Intel's)
weights = [torch.ops.mkldnn._reorder_linear_weight(torch.randn(n, k)) for n, k in ((1024, 256), (256, 1024))]
def layers(x):
    for w in weights:
        x = torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")
    return x
with torch.no_grad():
    layers(torch.randn(1, 256))
    start = rss()
    for rows in range(1, 601):  # a decoding stream's batches: ever new numbers of rows
        layers(torch.randn(rows, 256))
print(rss() - start)
"""


@pytest.mark.skipif(not packing_available() or not sys.platform.startswith("linux"), reason="needs oneDNN's packed kernels and /proc")
def test_kernels_for_ever_new_shapes_take_bounded_memory() -> None:
    """oneDNN keeps a kernel for every product shape it meets, 1,024 in each of two caches, each up to a few MB:
    `tfm translate` on a stream grew without a ceiling in sight (a tiny model: 1.7 GB after 200,000 lines; the
    quickstart model 1.38 GB after 6,000). Importing tfm_cli bounds both caches (128 kernels), unless the
    environment sets them."""
    env = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")}
    said = subprocess.run(
        [sys.executable, "-c", "import os, tfm_cli; print(os.environ['ONEDNN_PRIMITIVE_CACHE_CAPACITY'], os.environ['LRU_CACHE_CAPACITY'])"],
        env={**env, "LRU_CACHE_CAPACITY": "7"}, capture_output=True, text=True, check=True,
    ).stdout.split()
    assert said == ["128", "7"]  # the default, and what the environment chose

    def growth(extra: dict[str, str]) -> int:
        proc = subprocess.run([sys.executable, "-c", _SHAPES], env={**env, **extra}, capture_output=True, text=True, check=True)
        return int(proc.stdout)

    bounded = growth({})
    unbounded = growth({"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "1024", "LRU_CACHE_CAPACITY": "1024"})  # torch's defaults
    assert bounded * 2 < unbounded, (bounded, unbounded)  # measured: 146 MB against 677 MB for 600 shapes
