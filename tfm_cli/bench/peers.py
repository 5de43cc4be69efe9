"""The peers `tfm bench ... --compare` times next to tfm: Hugging Face's MarianMT with the same shapes.

MarianMT is the paper's architecture as Hugging Face ships it (post-norm, ReLU, sinusoidal positions, embeddings
scaled by sqrt(d_model) and tied with the output projection), so the same ModelConfig gives the same matrix
shapes. Its weights are random: these comparisons are about speed on identical work, not about translations.

- training: the Marian model runs inside tfm's own `train_step` (same batches, same label-smoothed loss, same
  Adam, same autocast), so the only difference is the model's code;
- translation: `generate` with the same beam size and the output forced to the same length
  (min_new_tokens = max_new_tokens), on the same source batches.

Needs the `bench` extra (`pip install "tfm[bench]"`, i.e. transformers); without it a `TfmError` says so.
CTranslate2 joins once tfm can export a model it reads (the export issue).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from tfm_cli.errors import TfmError
from tfm_cli.model import ModelConfig
from tfm_cli.runtime import autocast


def _transformers():
    try:
        import transformers
    except ImportError:
        raise TfmError(
            "--compare needs Hugging Face transformers, which is not installed",
            hint='install the bench extra: pip install -e ".[bench]" (or pip install transformers)',
        ) from None
    return transformers


def marian_model(config: ModelConfig) -> nn.Module:
    """A randomly initialised MarianMTModel with tfm's shapes and special ids."""
    transformers = _transformers()
    if config.norm != "post" or config.positions != "sinusoidal" or not config.tie_embeddings:
        raise TfmError(
            "MarianMT has post-norm, sinusoidal positions and tied embeddings only; this model differs",
            hint="compare with a recipe that keeps the paper's model.norm, model.positions and model.tie_embeddings",
        )
    marian = transformers.MarianConfig(
        vocab_size=config.vocab_size, d_model=config.d_model,
        encoder_layers=config.n_enc_layers, decoder_layers=config.n_dec_layers,
        encoder_attention_heads=config.n_heads, decoder_attention_heads=config.n_heads,
        encoder_ffn_dim=config.d_ff, decoder_ffn_dim=config.d_ff, activation_function="relu",
        dropout=config.dropout, attention_dropout=config.attn_dropout, activation_dropout=0.0,
        max_position_embeddings=config.max_positions, scale_embedding=True,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
        pad_token_id=config.pad_id, bos_token_id=config.bos_id, eos_token_id=config.eos_id,
        decoder_start_token_id=config.bos_id, forced_eos_token_id=None,
    )
    torch.manual_seed(0)
    return transformers.MarianMTModel(marian)


class _MarianAsTfm(nn.Module):
    """MarianMT behind tfm's forward(src, tgt_in, src_mask, tgt_mask) -> logits, so `train_step` can drive it."""

    def __init__(self, marian: nn.Module, config: ModelConfig) -> None:
        super().__init__()
        self.marian, self.config = marian, config

    def forward(self, src, tgt_in, src_mask, tgt_mask):
        return self.marian(
            input_ids=src, attention_mask=(src != self.config.pad_id).long(),
            decoder_input_ids=tgt_in, decoder_attention_mask=(tgt_in != self.config.pad_id).long(),
        ).logits


def marian_train_step_times(recipe, config: ModelConfig, groups, device, precision: str, warmup: int, progress=None):
    """MarianMT's optimizer steps on the same batches through tfm's own `train_step`; first `warmup` untimed."""
    from tfm_cli.bench.train import time_steps

    t = recipe.train
    model = _MarianAsTfm(marian_model(config), config).to(device)
    optimizer = torch.optim.Adam(
        model.parameters(), lr=1e-4, betas=tuple(t.betas), eps=t.eps, weight_decay=t.weight_decay,
        **({"fused": True} if device.type == "cuda" else {}),
    )
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    return time_steps("hf-marian step", model, optimizer, scaler, recipe, groups, device, precision, warmup, progress)


def marian_translator(
    config: ModelConfig, device: torch.device, precision: str, beam: int, out_len: int
) -> Callable[[list[list[int]], str, bool], list[int]]:
    """A function (batch of source ids, mode, use_cache) -> output lengths, running MarianMT's `generate`."""
    model = marian_model(config).to(device).eval()

    @torch.no_grad()
    def run(batch: list[list[int]], mode: str, use_cache: bool):
        width = max(len(s) for s in batch) + 1
        ids = torch.full((len(batch), width), config.pad_id, dtype=torch.long)
        for row, s in enumerate(batch):
            ids[row, : len(s) + 1] = torch.tensor([*s, config.eos_id])
        ids = ids.to(device)
        with autocast(device, precision):
            out = model.generate(
                input_ids=ids, attention_mask=(ids != config.pad_id).long(),
                num_beams=beam if mode == "beam" else 1, do_sample=False, use_cache=use_cache,
                min_new_tokens=out_len, max_new_tokens=out_len,
            )
        return [int((row != config.pad_id).sum()) - 1 for row in out]  # tokens after the decoder start

    return run
