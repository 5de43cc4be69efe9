"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), section 3, built bottom-up: from
attention to the layers and stacks, then the whole model of Figure 1.

3.2   scaled dot-product attention and multi-head attention (fused SDPA, or explicit math when weights are wanted)
3.3   position-wise feed-forward network
3.4   embeddings scaled by sqrt(d_model), shared with the output projection
3.5   sinusoidal positional encoding (learned positions as an option)
3.1   encoder and decoder stacks, residual + LayerNorm around every sublayer (post-norm; pre-norm as an option)
5.4   dropout on sublayer outputs and on embeddings + positions (`Dropout`, in dropout.py: a faster CPU mask)

Shape legend: B batch, S source length, T target length, D d_model, H heads, Dh = d_k = D / H, F d_ff, V vocab.
Masks are bool, True = may attend, shaped to broadcast to (B, H, queries, keys); see masks.py.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from tfm_cli.model.cache import KVCache, LayerCache
from tfm_cli.model.config import ModelConfig
from tfm_cli.model.dropout import REDUCED, Dropout

# Attention weights of one layer, (B, H, queries, keys), or None when they were not asked for.
AttnWeights = torch.Tensor | None

# On CPU in bf16 or fp16, with at most this many keys (NMT sentences), the explicit formula beats SDPA's kernels:
# forward + backward of the quickstart's three attentions under autocast took 21-25 ms, against 39 ms for SDPA's
# math kernel (which builds a float mask) and 142 ms for its fused one (2-core AVX-512 CPU, native bf16; the
# training step 6% faster than with the math kernel). fp32 keeps SDPA, whose fused CPU kernel is fastest there.
CPU_SHORT_KEYS = 128


# --- 3.2.1 Scaled dot-product attention ----------------------------------------------------------------------


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
) -> tuple[torch.Tensor, AttnWeights]:
    """softmax(Q K^T / sqrt(d_k)) V over (B, H, Tq, Dh) queries and (B, H, Tk, Dh) keys/values.

    The fast path is `F.scaled_dot_product_attention` (fused kernels, FlashAttention on CUDA), which never
    materialises the Tq x Tk matrix. The explicit formula runs instead when the (B, H, Tq, Tk) weights are asked
    for (`need_weights`: inspection; computed in fp32 on any device, then returned, like the output, in the input's
    precision), and on CPU in bf16 or fp16 with at most `CPU_SHORT_KEYS` keys, where it is faster. Both paths
    compute the same function.
    """
    short_on_cpu = q.device.type == "cpu" and q.dtype in REDUCED and k.size(-2) <= CPU_SHORT_KEYS
    if not need_weights and not short_on_cpu:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p), None
    dtype = q.dtype
    # The weights asked for: in fp32 whatever autocast says. Else as autocast makes it (bf16 products, accumulated
    # in fp32; fp32 copies would be cast straight back, 1-2% of a step for the same numbers), or fp32 without it.
    with torch.autocast(q.device.type, enabled=False) if need_weights else contextlib.nullcontext():
        if dtype in REDUCED and (need_weights or not torch.is_autocast_enabled(q.device.type)):
            q, k, v = q.float(), k.float(), v.float()
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, Tq, Tk)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(dim=-1)
        out = F.dropout(weights, p=dropout_p) @ v  # (B, H, Tq, Dh)
    return out.to(dtype), weights.to(dtype) if need_weights else None


# --- 3.2.2 Multi-head attention --------------------------------------------------------------------------------


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    The h per-head projections are packed into one D x D matrix each; heads are a reshape. Each of the four
    projections has a bias, which the paper's formula does not write (fairseq, the Annotated Transformer and
    `nn.MultiheadAttention` add one too); the biases start at zero.

    `qkv` is None here: self-attention projects Q, K and V with `w_q`, `w_k` and `w_v` one by one. A view made
    for decoding (`tfm_cli.packing.decoding_view`) may set it to a module computing the three at once from the
    same weights side by side, (B, T, D) -> (B, T, 3D): one matrix product per step instead of three, with the
    same numbers.
    """

    def __init__(self, d_model: int, n_heads: int, attn_dropout: float = 0.0) -> None:
        super().__init__()
        self.n_heads, self.d_k = n_heads, d_model // n_heads
        self.attn_dropout = attn_dropout
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.qkv: nn.Module | None = None

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape  # (B, T, D) -> (B, H, T, Dh)
        return x.view(b, t, self.n_heads, self.d_k).transpose(1, 2)

    def forward(
        self,
        query: torch.Tensor,
        memory: torch.Tensor | None,
        mask: torch.Tensor | None,
        cache: LayerCache | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, AttnWeights]:
        """Self-attention when `memory` is None, else cross-attention to `memory` (keys and values).

        Args:
            query: (B, Tq, D) the sequence that asks.
            memory: (B, S, D) encoder output for cross-attention, or None for self-attention.
            mask: bool, broadcastable to (B, H, Tq, Tk); True = may attend.
            cache: this layer's K/V cache during incremental decoding (self: append; cross: compute once).
            need_weights: also return the (B, H, Tq, Tk) attention weights (explicit-math path).
        """
        if memory is None:  # self-attention: queries, keys and values all from `query`
            if self.qkv is not None:
                q, k, v = (self._split(x) for x in self.qkv(query).chunk(3, dim=-1))  # (B, H, Tq, Dh) each
            else:
                q, k, v = (self._split(w(query)) for w in (self.w_q, self.w_k, self.w_v))  # (B, H, Tq, Dh) each
            if cache is not None:
                k, v = cache.append_self(k, v)  # (B, H, t, Dh): all positions decoded so far
        else:
            q = self._split(self.w_q(query))  # (B, H, Tq, Dh)
            if cache is not None and cache.cross_k is not None:
                k, v = cache.cross_k, cache.cross_v  # memory does not change while decoding
            else:
                k, v = self._split(self.w_k(memory)), self._split(self.w_v(memory))  # (B, H, S, Dh)
                if cache is not None:
                    cache.cross_k, cache.cross_v = k, v
        dropout_p = self.attn_dropout if self.training else 0.0
        out, weights = attention(q, k, v, mask, dropout_p, need_weights)
        b, _, t, _ = out.shape
        out = out.transpose(1, 2).reshape(b, t, self.n_heads * self.d_k)  # concatenate heads: (B, Tq, D)
        return self.w_o(out), weights


# --- 3.3 Position-wise feed-forward network ------------------------------------------------------------------


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to each position separately (D -> F -> D)."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(F.relu(self.w_1(x)))


# --- 3.4-3.5 Embeddings and positional encoding ------------------------------------------------------------------


def sinusoidal_table(max_positions: int, d_model: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)); (L, D)."""
    pos = torch.arange(max_positions, dtype=torch.float64)[:, None]  # (L, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (D/2,)
    angle = pos / torch.pow(10000.0, two_i / d_model)  # (L, D/2)
    table = torch.empty(max_positions, d_model, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return table.float()


class Embeddings(nn.Module):
    """Token embedding times sqrt(d_model) (section 3.4), plus positions (3.5), then dropout (5.4)."""

    def __init__(self, token: nn.Embedding, config: ModelConfig) -> None:
        super().__init__()
        self.token = token  # may be shared between encoder, decoder and the output projection
        self.scale = math.sqrt(config.d_model)
        if config.positions == "sinusoidal":
            # A fixed function of the position: a buffer, not saved in checkpoints (recomputed from the config).
            self.register_buffer("pe", sinusoidal_table(config.max_positions, config.d_model), persistent=False)
            self.learned = None
        else:
            self.learned = nn.Embedding(config.max_positions, config.d_model)
        self.dropout = Dropout(config.dropout)
        self.max_positions = config.max_positions

    def forward(self, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """(B, L) ids of positions offset..offset+L-1 -> (B, L, D)."""
        length = ids.size(1)
        if offset + length > self.max_positions:
            raise ValueError(
                f"sequence of {offset + length} positions exceeds max_positions={self.max_positions}"
            )
        x = self.token(ids) * self.scale
        if self.learned is None:
            x = x + self.pe[offset : offset + length].to(x.dtype)
        else:
            x = x + self.learned(torch.arange(offset, offset + length, device=ids.device))
        return self.dropout(x)


# --- 3.1 Encoder and decoder layers and stacks ----------------------------------------------------------------


class SublayerConnection(nn.Module):
    """Residual connection and LayerNorm around one sublayer, with dropout on its output (section 5.4).

    post-norm (the paper): LayerNorm(x + Dropout(Sublayer(x)))
    pre-norm (option):     x + Dropout(Sublayer(LayerNorm(x)))   (the stack then ends with a final LayerNorm)
    """

    def __init__(self, d_model: int, dropout: float, pre_norm: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
        self.pre_norm = pre_norm

    def forward(
        self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], tuple[torch.Tensor, AttnWeights]]
    ) -> tuple[torch.Tensor, AttnWeights]:
        """(B, L, D) -> (B, L, D); `sublayer` maps (B, L, D) to (B, L, D) and its attention weights (or None)."""
        if self.pre_norm:
            out, weights = sublayer(self.norm(x))
            return x + self.dropout(out), weights
        out, weights = sublayer(x)
        return self.norm(x + self.dropout(out)), weights


class EncoderLayer(nn.Module):
    """Self-attention over the source, then the feed-forward network."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        pre = config.norm == "pre"
        self.self_attn = MultiHeadAttention(config.d_model, config.n_heads, config.attn_dropout)
        self.ffn = FeedForward(config.d_model, config.d_ff)
        self.sub_attn = SublayerConnection(config.d_model, config.dropout, pre)
        self.sub_ffn = SublayerConnection(config.d_model, config.dropout, pre)

    def forward(
        self, x: torch.Tensor, src_mask: torch.Tensor | None, need_weights: bool = False
    ) -> tuple[torch.Tensor, AttnWeights]:
        x, weights = self.sub_attn(x, lambda h: self.self_attn(h, None, src_mask, need_weights=need_weights))
        x, _ = self.sub_ffn(x, lambda h: (self.ffn(h), None))
        return x, weights


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder memory, then the feed-forward network."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        pre = config.norm == "pre"
        self.self_attn = MultiHeadAttention(config.d_model, config.n_heads, config.attn_dropout)
        self.cross_attn = MultiHeadAttention(config.d_model, config.n_heads, config.attn_dropout)
        self.ffn = FeedForward(config.d_model, config.d_ff)
        self.sub_self = SublayerConnection(config.d_model, config.dropout, pre)
        self.sub_cross = SublayerConnection(config.d_model, config.dropout, pre)
        self.sub_ffn = SublayerConnection(config.d_model, config.dropout, pre)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None,
        tgt_mask: torch.Tensor | None,
        cache: LayerCache | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, AttnWeights, AttnWeights]:
        x, self_w = self.sub_self(x, lambda h: self.self_attn(h, None, tgt_mask, cache, need_weights))
        x, cross_w = self.sub_cross(x, lambda h: self.cross_attn(h, memory, src_mask, cache, need_weights))
        x, _ = self.sub_ffn(x, lambda h: (self.ffn(h), None))
        return x, self_w, cross_w


# --- Figure 1: the whole model ---------------------------------------------------------------------------------


class Transformer(nn.Module):
    """Encoder-decoder Transformer: `encode(src) -> memory`, `decode(tgt, memory) -> logits`.

    The loss is not here (see training/loss.py); neither are search strategies (decoding.py).
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        d, v = config.d_model, config.vocab_size
        src_token = nn.Embedding(v, d, padding_idx=config.pad_id)
        # Section 3.4: one weight matrix for both embeddings and the pre-softmax projection (shared BPE vocabulary).
        tgt_token = src_token if config.tie_embeddings else nn.Embedding(v, d, padding_idx=config.pad_id)
        self.src_embed = Embeddings(src_token, config)
        self.tgt_embed = Embeddings(tgt_token, config)
        self.encoder_layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.n_enc_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_dec_layers))
        # Pre-norm leaves the residual stream unnormalised: each stack ends with a LayerNorm.
        pre = config.norm == "pre"
        self.encoder_norm = nn.LayerNorm(d) if pre else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d) if pre else nn.Identity()
        # logits = x W_E^T when tied (3.4); no bias, tied or not, so the two differ only in the matrix
        self.generator = nn.Linear(d, v, bias=False)
        self._init_weights()
        if config.tie_embeddings:
            self.generator.weight = tgt_token.weight

    def _init_weights(self) -> None:
        """Xavier-uniform for projections (Annotated Transformer), zero biases; token embeddings N(0, d^-0.5) so
        that embedding * sqrt(d_model) has unit scale like the positional encoding (fairseq), the padding row 0 (it
        stays 0 in untied embeddings; tied, the output projection's label smoothing trains it like every row).
        Learned positions keep `nn.Embedding`'s N(0, 1), the same unit scale; LayerNorms start as the identity."""
        for name, p in self.named_parameters():
            if p.dim() > 1 and "embed" not in name:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        for emb in {id(m): m for m in (self.src_embed.token, self.tgt_embed.token)}.values():
            nn.init.normal_(emb.weight, mean=0.0, std=self.config.d_model**-0.5)
            with torch.no_grad():
                emb.weight[self.config.pad_id].zero_()

    def encode(
        self, src: torch.Tensor, src_mask: torch.Tensor | None, need_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, list[AttnWeights]]:
        """(B, S) source ids -> (B, S, D) memory; with `need_weights`, also each layer's (B, H, S, S) weights."""
        x = self.src_embed(src)  # (B, S, D)
        weights: list[AttnWeights] = []
        for layer in self.encoder_layers:
            x, w = layer(x, src_mask, need_weights)
            weights.append(w)
        memory = self.encoder_norm(x)
        return (memory, weights) if need_weights else memory

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None,
        tgt_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
        features_only: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, list[AttnWeights], list[AttnWeights]]:
        """(B, T) target ids (shifted right) -> (B, T, V) logits.

        With a `cache`, `tgt` holds only the new positions; their position indices start at `cache.length`,
        and the cache grows by T. For one new token `tgt_mask` may be None (it sees every cached position);
        for several, pass a (1, 1, T, cache.length + T) mask (keys: the cached positions, then the new ones)
        that keeps them causal among themselves.
        With `need_weights`, also returns per-layer self-attention and cross-attention weights.
        With `features_only`, returns the (B, T, D) decoder output before the output projection instead of
        logits (as fairseq's decoders do): training computes the projection and the loss together, in chunks.
        """
        offset = cache.length if cache is not None else 0
        x = self.tgt_embed(tgt, offset)  # (B, T, D)
        self_ws: list[AttnWeights] = []
        cross_ws: list[AttnWeights] = []
        for i, layer in enumerate(self.decoder_layers):
            layer_cache = cache.layers[i] if cache is not None else None
            x, self_w, cross_w = layer(x, memory, src_mask, tgt_mask, layer_cache, need_weights)
            self_ws.append(self_w)
            cross_ws.append(cross_w)
        if cache is not None:
            cache.length += tgt.size(1)
        x = self.decoder_norm(x)
        out = x if features_only else self.generator(x)  # (B, T, D) or (B, T, V)
        return (out, self_ws, cross_ws) if need_weights else out

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_mask: torch.Tensor | None,
        tgt_mask: torch.Tensor | None,
        features_only: bool = False,
    ) -> torch.Tensor:
        """Teacher forcing: (B, S) source and (B, T) shifted target -> (B, T, V) logits, or with
        `features_only` the (B, T, D) decoder output that the output projection (`generator`) would take."""
        memory = self.encode(src, src_mask)
        return self.decode(tgt, memory, src_mask, tgt_mask, features_only=features_only)

    def attention_maps(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_mask: torch.Tensor | None,
        tgt_mask: torch.Tensor | None,
    ) -> dict[str, list[torch.Tensor]]:
        """Every layer's attention weights for one teacher-forced pass, through the explicit-math path.

        Returns {"encoder": [(B, H, S, S)] * N_enc, "decoder": [(B, H, T, T)] * N_dec, "cross": [(B, H, T, S)] * N_dec}.
        """
        memory, enc_ws = self.encode(src, src_mask, need_weights=True)
        _, self_ws, cross_ws = self.decode(tgt, memory, src_mask, tgt_mask, need_weights=True)
        return {"encoder": enc_ws, "decoder": self_ws, "cross": cross_ws}

    def new_cache(self) -> KVCache:
        return KVCache.empty(len(self.decoder_layers))

    def num_parameters(self) -> int:
        """Distinct parameters, all of them trained (tied weights counted once)."""
        return sum(p.numel() for p in self.parameters())
