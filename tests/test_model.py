"""The model core against independent references: explicit math, torch.nn layers with copied weights,
the paper's formulas, brute-force re-decoding without the cache, and the layering rule (no CLI imports)."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
from torch import nn

from tfm_cli.model import ModelConfig, Transformer, attention, sinusoidal_table
from tfm_cli.model.masks import causal_mask, padding_mask, target_mask
from tfm_cli.model.transformer import DecoderLayer, EncoderLayer

PAD, BOS, EOS = 0, 1, 2




def tiny_config(**overrides) -> ModelConfig:
    values = dict(
        vocab_size=23,
        d_model=32,
        d_ff=64,
        n_heads=4,
        n_enc_layers=2,
        n_dec_layers=2,
        dropout=0.0,
        max_positions=64,
    )
    values.update(overrides)
    return ModelConfig(**values)


def tiny_model(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(tiny_config(**overrides)).eval()
    # LayerNorms start at weight 1, bias 0: randomise them so that copying or ignoring them would show.
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0.0, 0.1)
    return model


def random_ids(batch: int, lengths: list[int], vocab: int, seed: int) -> torch.Tensor:
    """Right-padded (B, max(lengths)) ids drawn from the real tokens 3..vocab-1, EOS-free."""
    g = torch.Generator().manual_seed(seed)
    out = torch.full((batch, max(lengths)), PAD, dtype=torch.long)
    for row, n in enumerate(lengths):
        out[row, :n] = torch.randint(3, vocab, (n,), generator=g)
    return out


def batch_inputs(seed: int = 0, vocab: int = 23):
    src = random_ids(3, [7, 4, 2], vocab, seed)
    tgt = random_ids(3, [5, 6, 3], vocab, seed + 1)
    tgt[:, 0] = BOS
    return src, tgt, padding_mask(src, PAD), target_mask(tgt, PAD)


# --- Attention: SDPA path == explicit math == a formula written here ----------------------------------------


def reference_attention(q, k, v, mask):
    """softmax(Q K^T / sqrt(d_k)) V with masked keys removed, one (batch, head, query) row at a time."""
    b, h, tq, dh = q.shape
    out = torch.zeros(b, h, tq, v.size(-1), dtype=torch.float64)
    mask = (
        torch.ones(b, h, tq, k.size(2), dtype=torch.bool)
        if mask is None
        else mask.expand(b, h, tq, k.size(2))
    )
    for i in range(b):
        for j in range(h):
            for t in range(tq):
                allowed = mask[i, j, t].nonzero().squeeze(1)
                scores = torch.tensor(
                    [
                        float(q[i, j, t].double() @ k[i, j, s].double()) / math.sqrt(dh)
                        for s in allowed.tolist()
                    ],
                    dtype=torch.float64,
                )
                w = torch.exp(scores - scores.max())
                w = w / w.sum()
                out[i, j, t] = (w[:, None] * v[i, j, allowed].double()).sum(0)
    return out


@pytest.mark.parametrize("kind", ["padding", "causal", "target", "cross", "none"])
def test_sdpa_equals_explicit_math_and_reference(kind: str) -> None:
    torch.manual_seed(1)
    b, h, dh = 2, 3, 8
    ids = random_ids(b, [6, 3], 11, seed=2)
    tq, tk = (4, 6) if kind == "cross" else (6, 6)
    q, k, v = torch.randn(b, h, tq, dh), torch.randn(b, h, tk, dh), torch.randn(b, h, tk, dh)
    mask = {
        "padding": padding_mask(ids, PAD),
        "causal": causal_mask(6),
        "target": target_mask(ids, PAD),
        "cross": padding_mask(ids, PAD),
        "none": None,
    }[kind]
    fast, no_weights = attention(q, k, v, mask, need_weights=False)
    slow, weights = attention(q, k, v, mask, need_weights=True)
    assert no_weights is None
    assert weights.shape == (b, h, tq, tk)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=0)
    ref = reference_attention(q, k, v, mask)
    torch.testing.assert_close(slow.double(), ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(fast.double(), ref, atol=1e-5, rtol=0)
    # The weights are a distribution over the allowed keys only.
    torch.testing.assert_close(weights.sum(-1), torch.ones(b, h, tq), atol=1e-6, rtol=0)
    if mask is not None:
        assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_model_weights_path_equals_fast_path(norm: str) -> None:
    model = tiny_model(3, norm=norm)
    src, tgt, src_mask, tgt_mask = batch_inputs(4)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        memory_w, enc_ws = model.encode(src, src_mask, need_weights=True)
        logits = model.decode(tgt, memory, src_mask, tgt_mask)
        logits_w, self_ws, cross_ws = model.decode(tgt, memory, src_mask, tgt_mask, need_weights=True)
    torch.testing.assert_close(memory, memory_w, atol=1e-5, rtol=0)
    torch.testing.assert_close(logits, logits_w, atol=1e-5, rtol=0)
    b, s, t, h = src.size(0), src.size(1), tgt.size(1), model.config.n_heads
    assert [w.shape for w in enc_ws] == [(b, h, s, s)] * model.config.n_enc_layers
    assert [w.shape for w in self_ws] == [(b, h, t, t)] * model.config.n_dec_layers
    assert [w.shape for w in cross_ws] == [(b, h, t, s)] * model.config.n_dec_layers


# --- Layers == torch.nn reference layers with copied weights ------------------------------------------------


def copy_attention(ours, theirs: nn.MultiheadAttention) -> None:
    theirs.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
    theirs.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
    theirs.out_proj.weight.copy_(ours.w_o.weight)
    theirs.out_proj.bias.copy_(ours.w_o.bias)


def copy_linear_norm(src: nn.Module, dst: nn.Module) -> None:
    dst.weight.copy_(src.weight)
    dst.bias.copy_(src.bias)


def randomise(module: nn.Module, seed: int) -> None:
    """Random weights and biases everywhere (LayerNorm gains around 1), so that a skipped copy shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.add_(1.0)


def torch_layer(cls: type, cfg: ModelConfig, norm: str) -> nn.Module:
    """The torch.nn reference layer with our shapes: ReLU, no dropout, batch first, post- or pre-norm."""
    return cls(
        cfg.d_model, cfg.n_heads, cfg.d_ff, dropout=0.0, activation="relu", batch_first=True, norm_first=norm == "pre"
    ).eval()


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_encoder_layer_matches_torch_nn(norm: str) -> None:
    cfg = tiny_config(norm=norm)
    ours = EncoderLayer(cfg).eval()
    randomise(ours, 5)
    ref = torch_layer(nn.TransformerEncoderLayer, cfg, norm)
    with torch.no_grad():
        copy_attention(ours.self_attn, ref.self_attn)
        copy_linear_norm(ours.ffn.w_1, ref.linear1)
        copy_linear_norm(ours.ffn.w_2, ref.linear2)
        copy_linear_norm(ours.sub_attn.norm, ref.norm1)
        copy_linear_norm(ours.sub_ffn.norm, ref.norm2)
    ids = random_ids(3, [7, 4, 2], 23, seed=6)
    x = torch.randn(3, 7, cfg.d_model, generator=torch.Generator().manual_seed(7))
    mask = padding_mask(ids, PAD)
    with torch.no_grad():
        out, _ = ours(x, mask)
        expected = ref(x, src_key_padding_mask=ids == PAD)
    real = ids != PAD
    torch.testing.assert_close(out[real], expected[real], atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_decoder_layer_matches_torch_nn(norm: str) -> None:
    cfg = tiny_config(norm=norm)
    ours = DecoderLayer(cfg).eval()
    randomise(ours, 8)
    ref = torch_layer(nn.TransformerDecoderLayer, cfg, norm)
    with torch.no_grad():
        copy_attention(ours.self_attn, ref.self_attn)
        copy_attention(ours.cross_attn, ref.multihead_attn)
        copy_linear_norm(ours.ffn.w_1, ref.linear1)
        copy_linear_norm(ours.ffn.w_2, ref.linear2)
        copy_linear_norm(ours.sub_self.norm, ref.norm1)
        copy_linear_norm(ours.sub_cross.norm, ref.norm2)
        copy_linear_norm(ours.sub_ffn.norm, ref.norm3)
    src = random_ids(3, [7, 4, 2], 23, seed=9)
    tgt = random_ids(3, [5, 6, 3], 23, seed=10)
    g = torch.Generator().manual_seed(11)
    memory = torch.randn(3, 7, cfg.d_model, generator=g)
    x = torch.randn(3, 6, cfg.d_model, generator=g)
    with torch.no_grad():
        out, _, _ = ours(x, memory, padding_mask(src, PAD), target_mask(tgt, PAD))
        expected = ref(
            x,
            memory,
            tgt_mask=~causal_mask(6)[0, 0],  # nn: True = NOT allowed
            tgt_key_padding_mask=tgt == PAD,
            memory_key_padding_mask=src == PAD,
        )
    real = tgt != PAD
    torch.testing.assert_close(out[real], expected[real], atol=1e-5, rtol=0)


# --- Positions and embeddings (sections 3.4, 3.5) -----------------------------------------------------------


def test_sinusoidal_table_matches_paper_formula() -> None:
    length, d = 50, 16
    table = sinusoidal_table(length, d)
    assert table.shape == (length, d)
    for pos in (0, 1, 7, 49):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_embeddings_scaled_by_sqrt_d_model(positions: str) -> None:
    model = tiny_model(12, positions=positions)
    ids = torch.tensor([[5, 9, 3, 17]])
    d = model.config.d_model
    if positions == "sinusoidal":
        pe = torch.tensor(
            [
                [
                    math.sin(p / 10000 ** (2 * (j // 2) / d))
                    if j % 2 == 0
                    else math.cos(p / 10000 ** (2 * (j // 2) / d))
                    for j in range(d)
                ]
                for p in range(2, 6)
            ]
        )
    else:
        pe = model.src_embed.learned.weight[2:6]
    with torch.no_grad():
        got = model.src_embed(ids, offset=2)
    expected = model.src_embed.token.weight[ids] * math.sqrt(d) + pe
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_positions_beyond_the_table_are_an_error() -> None:
    model = tiny_model(12, max_positions=8)
    with torch.no_grad():
        assert model.encode(torch.full((1, 8), 5), None).shape == (1, 8, 32)
        with pytest.raises(ValueError, match="max_positions=8"):
            model.encode(torch.full((1, 9), 5), None)


def test_tied_embeddings_share_one_tensor() -> None:
    tied = tiny_model(13, tie_embeddings=True)
    w = tied.src_embed.token.weight
    assert tied.tgt_embed.token.weight is w and tied.generator.weight is w
    with torch.no_grad():
        w[5, 0] += 1.0
    assert tied.generator.weight[5, 0] == w[5, 0] == tied.tgt_embed.token.weight[5, 0]
    untied = tiny_model(13, tie_embeddings=False)
    ptrs = {
        untied.src_embed.token.weight.data_ptr(),
        untied.tgt_embed.token.weight.data_ptr(),
        untied.generator.weight.data_ptr(),
    }
    assert len(ptrs) == 3
    v, d = untied.config.vocab_size, untied.config.d_model
    assert untied.num_parameters() - tied.num_parameters() == 2 * v * d


# --- Masks ------------------------------------------------------------------------------------------------------


def test_mask_truth_tables() -> None:
    ids = torch.tensor([[5, 6, 2, 0], [7, 2, 0, 0]])
    assert padding_mask(ids, 0).tolist() == [[[[True, True, True, False]]], [[[True, True, False, False]]]]
    assert padding_mask(ids, 0).dtype == torch.bool
    assert causal_mask(3).tolist() == [[[[True, False, False], [True, True, False], [True, True, True]]]]
    tgt = torch.tensor([[1, 5, 0], [1, 6, 7]])
    assert target_mask(tgt, 0).tolist() == [
        [[[True, False, False], [True, True, False], [True, True, False]]],
        [[[True, False, False], [True, True, False], [True, True, True]]],
    ]


def test_padded_source_gets_no_attention() -> None:
    model = tiny_model(14)
    src, tgt, src_mask, tgt_mask = batch_inputs(15)
    with torch.no_grad():
        maps = model.attention_maps(src, tgt, src_mask, tgt_mask)
    pad_keys = (src == PAD)[:, None, None, :]  # (B, 1, 1, S)
    assert pad_keys.any()
    for name in ("encoder", "cross"):
        assert len(maps[name]) == 2
        for w in maps[name]:
            assert (w.masked_select(pad_keys.expand_as(w)) == 0).all(), name
            torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-6, rtol=0)
    future = ~tgt_mask.expand_as(maps["decoder"][0])
    for w in maps["decoder"]:
        assert (w.masked_select(future) == 0).all()


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_padding_content_does_not_leak(norm: str) -> None:
    model = tiny_model(16, norm=norm)
    src, tgt, src_mask, tgt_mask = batch_inputs(17)
    garbage = src.clone()
    garbage[src == PAD] = 11  # a real token id, but the mask still says "padding"
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        memory_g = model.encode(garbage, src_mask)
        logits = model.decode(tgt, memory, src_mask, tgt_mask)
        logits_g = model.decode(tgt, memory_g, src_mask, tgt_mask)
    real_src, real_tgt = src != PAD, tgt != PAD
    assert not torch.equal(memory[~real_src], memory_g[~real_src])  # the padded rows themselves did change
    torch.testing.assert_close(memory[real_src], memory_g[real_src], atol=1e-6, rtol=0)
    torch.testing.assert_close(logits[real_tgt], logits_g[real_tgt], atol=1e-6, rtol=0)


# --- Incremental decoding over the cache == re-decoding the whole prefix ----------------------------------------


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_cached_decoding_equals_full_redecoding(norm: str, positions: str) -> None:
    model = tiny_model(18, norm=norm, positions=positions)
    src = random_ids(3, [7, 4, 2], 23, seed=19)
    src_mask = padding_mask(src, PAD)
    steps = 8
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        cache = model.new_cache()
        cached_tokens = torch.full((3, 1), BOS)
        cached_logits = []
        for _ in range(steps):
            logits = model.decode(cached_tokens[:, -1:], memory, src_mask, None, cache)[:, -1]
            cached_logits.append(logits)
            cached_tokens = torch.cat([cached_tokens, logits.argmax(-1, keepdim=True)], dim=1)
        assert cache.length == steps
        full_tokens = torch.full((3, 1), BOS)
        full_logits = []
        for _ in range(steps):
            t = full_tokens.size(1)
            logits = model.decode(full_tokens, memory, src_mask, causal_mask(t))[:, -1]
            full_logits.append(logits)
            full_tokens = torch.cat([full_tokens, logits.argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(cached_tokens, full_tokens)
    for a, b in zip(cached_logits, full_logits, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_cache_prefill_then_steps_equals_full_decoding() -> None:
    """Several positions into an empty cache at once (with the causal mask), then one at a time."""
    model = tiny_model(20, positions="learned")
    src = random_ids(2, [6, 3], 23, seed=21)
    src_mask = padding_mask(src, PAD)
    tgt = random_ids(2, [7, 7], 23, seed=22)
    tgt[:, 0] = BOS
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        full = model.decode(tgt, memory, src_mask, causal_mask(7))
        cache = model.new_cache()
        parts = [model.decode(tgt[:, :3], memory, src_mask, causal_mask(3), cache)]
        parts += [model.decode(tgt[:, t : t + 1], memory, src_mask, None, cache) for t in range(3, 7)]
    assert cache.length == 7
    assert all(layer.self_k.shape[2] == 7 for layer in cache.layers)
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-5, rtol=0)


# --- Layering, size and config checks -------------------------------------------------------------------------


def test_model_package_and_search_import_no_cli_recipe_or_tokenizer_libraries() -> None:
    """The model core and the search over it (decoding, and the runtime and packing it uses) stand on torch
    alone (HOUSE_STYLE 1): the search once loaded yaml and the recipe layer for one tuple of precision names."""
    code = (
        "import sys, tfm_cli.model, tfm_cli.decoding\n"
        "tfm_cli.model.Transformer, tfm_cli.model.KVCache, tfm_cli.model.padding_mask\n"
        "print(sorted(m for m in ('typer', 'rich', 'yaml', 'tokenizers', 'sacrebleu', 'tfm_cli.recipe')"
        " if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def meta_param_count(config: ModelConfig) -> int:
    with torch.device("meta"):
        return Transformer(config).num_parameters()


@pytest.mark.parametrize(
    "options",
    [{}, {"tie_embeddings": False}, {"positions": "learned"}, {"norm": "pre"},
     {"n_enc_layers": 3, "n_dec_layers": 1, "tie_embeddings": False, "positions": "learned", "norm": "pre"}],
)
def test_the_config_counts_the_built_model_s_parameters(options: dict) -> None:
    """ModelConfig.num_parameters (what `tfm train` reports and sizes its disk check by, without building the
    model) against the parameters the built model holds, tied matrices counted once."""
    shape = {"vocab_size": 53, "d_model": 24, "d_ff": 40, "n_heads": 3, "n_enc_layers": 2, "n_dec_layers": 2}
    config = ModelConfig(**{**shape, "max_positions": 19, **options})
    model = Transformer(config)
    assert config.num_parameters() == model.num_parameters() == sum(p.numel() for p in model.parameters())
    largest = max(t.numel() for t in [*model.parameters(), *model.buffers()])
    assert config.largest_weight() == largest


def test_parameter_counts_match_the_paper() -> None:
    base = meta_param_count(ModelConfig())
    print(f"\nbase Transformer parameters: {base:,} (paper: 65M)")
    assert abs(base - 65e6) / 65e6 < 0.05
    # Independent count: embeddings (tied, once) + 6 encoder layers + 6 decoder layers, no biases on the output.
    d, f, v = 512, 2048, 37000
    attn, ffn, ln = 4 * (d * d + d), d * f + f + f * d + d, 2 * d
    assert base == v * d + 6 * (attn + ffn + 2 * ln) + 6 * (2 * attn + ffn + 3 * ln)
    big = meta_param_count(ModelConfig(d_model=1024, d_ff=4096, n_heads=16))
    print(f"big Transformer parameters: {big:,} (paper: 213M)")
    assert abs(big - 213e6) / 213e6 < 0.05


def test_config_rejects_d_model_not_divisible_by_heads() -> None:
    with pytest.raises(ValueError) as err:
        ModelConfig(d_model=510, n_heads=8)
    message = str(err.value)
    assert "d_model=510" in message and "n_heads=8" in message and "divisible" in message


@pytest.mark.parametrize("ids", [dict(pad_id=2, eos_id=2), dict(pad_id=1, bos_id=1), dict(bos_id=2, eos_id=2)])
def test_config_rejects_special_ids_that_coincide(ids: dict) -> None:
    """EOS as padding would be masked out of every source and banned from every output (decoding then failed)."""
    with pytest.raises(ValueError, match="pad_id, bos_id and eos_id must differ"):
        ModelConfig(vocab_size=20, **ids)


@pytest.mark.parametrize("length", [16, 200])  # below and above the CPU short-sequence kernel switch (128 keys)
def test_bf16_attention_matches_explicit_math_on_cpu(length: int) -> None:
    """Reduced precision on CPU takes the explicit formula for short keys (fp32 without autocast) and SDPA's fused
    kernel for long keys: both the function of fp64 math on the same bf16 inputs."""
    g = torch.Generator().manual_seed(length)
    q, k, v = (torch.randn(2, 4, length, 32, generator=g) for _ in range(3))
    mask = torch.ones(2, 1, 1, length, dtype=torch.bool)
    mask[0, ..., length // 2 :] = False  # the first sequence is half padding
    fast, weights = attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask)
    assert weights is None and fast.dtype == torch.bfloat16
    q64, k64, v64 = (t.bfloat16().double() for t in (q, k, v))
    scores = (q64 @ k64.transpose(-2, -1) / math.sqrt(32)).masked_fill(~mask, float("-inf"))
    reference = scores.softmax(dim=-1) @ v64
    assert torch.allclose(fast.double(), reference, atol=3e-2), (fast.double() - reference).abs().max()
    # the weights asked for (inspect-attn) come from the same fp32 formula, at any length: in bf16 beyond 128 keys
    # they were computed in bf16, 5x further from exact than the fast path
    out, weights = attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask, need_weights=True)
    assert (out.double() - reference).abs().max() <= (fast.double() - reference).abs().max() + 1e-9
    assert (weights.double() - scores.softmax(dim=-1)).abs().max() < 4e-3  # the bf16 rounding of a weight in [0, 1]


def test_attention_weights_asked_for_under_autocast_are_computed_in_fp32() -> None:
    """Under CPU autocast (training, bf16 translation) `q.float() @ k.float().T` is cast back to bf16: the weights
    asked for (inspection, `explain`) were bf16 products and a bf16 softmax while the docstring said fp32. They
    are the fp32 formula rounded once to bf16 now, bit for bit; the fast path keeps autocast's bf16 products."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (2 * torch.randn(2, 4, 20, 32, generator=g).bfloat16() for _ in range(3))
    mask = torch.ones(2, 1, 1, 20, dtype=torch.bool)
    mask[1, ..., 12:] = False
    scores = (q.float() @ k.float().transpose(-2, -1) / math.sqrt(32)).masked_fill(~mask, float("-inf"))
    exact = scores.softmax(dim=-1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, weights = attention(q, k, v, mask, need_weights=True)
        fast, _ = attention(q, k, v, mask)
    assert torch.equal(weights, exact.bfloat16()) and torch.equal(out, (exact @ v.float()).bfloat16())
    with torch.autocast("cpu", dtype=torch.bfloat16):  # what autocast makes of the formula: bf16 products
        s = (q @ k.transpose(-2, -1) / math.sqrt(32)).masked_fill(~mask, float("-inf"))
        assert torch.equal(fast, s.softmax(dim=-1) @ v)


def test_short_bf16_attention_on_cpu_rounds_only_its_output() -> None:
    """The fp32 explicit formula for short keys in bf16 on CPU: the output is the fp64 result rounded once to bf16
    (a bf16 product of the scores would be off by up to 1/128 of each score, before the softmax), and so are the
    gradients of q, k and v, with padding and the causal mask."""
    g = torch.Generator().manual_seed(7)
    q, k, v = (3 * torch.randn(3, 4, 9, 16, generator=g) for _ in range(3))
    mask = torch.ones(9, 9, dtype=torch.bool).tril()[None, None] & torch.ones(3, 1, 1, 9, dtype=torch.bool)
    mask[1, ..., 6:] = False
    q, k, v = (t.bfloat16().requires_grad_() for t in (q, k, v))
    out, _ = attention(q, k, v, mask)
    grad_out = torch.randn(out.shape, generator=g).bfloat16()
    out.backward(grad_out)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    scores = (q64 @ k64.transpose(-2, -1) / 4).masked_fill(~mask, float("-inf"))
    reference = scores.softmax(dim=-1) @ v64
    reference.backward(grad_out.double())
    # fp32 inside: the only rounding that shows is bf16's own (half a unit in the last place; one allowed for fp32)
    assert ((out.double() - reference).abs() <= reference.abs() * 2**-8).all()
    for got, want in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        assert got.dtype == torch.bfloat16
        assert torch.allclose(got.double(), want, rtol=2**-7, atol=1e-5), (got.double() - want).abs().max()
