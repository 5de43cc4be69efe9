"""The peers `tfm bench ... --compare` times next to tfm: Hugging Face's MarianMT with the same shapes, and
CTranslate2 running the very model being benchmarked.

MarianMT is the paper's architecture as Hugging Face ships it (post-norm, ReLU, sinusoidal positions, embeddings
scaled by sqrt(d_model), tied with the output projection or, as tfm can, untied), so the same ModelConfig gives the same matrix
shapes. Its weights are random: these comparisons are about speed on identical work, not about translations.

- training: the Marian model runs inside tfm's own `train_step` (same batches, same label-smoothed loss, same
  Adam, same autocast), so the difference is the model's code and its loss (tfm's output projection and loss in
  chunks, over the target tokens only; Marian's logits of every position through the textbook loss), timed with
  each of Marian's two attention implementations (SDPA, its default, is slow in bf16 on CPU: its plain "eager"
  one ran the tiny recipe's step 1.46x faster on an AVX-512 AMD EPYC), and compared with the faster;
- translation: `generate` with the same beam size and the output forced to the same length
  (min_new_tokens = max_new_tokens), on the same source batches, its weights cast once to bf16/fp16.

CTranslate2 (translation only) gets the benchmarked model itself, trained or random: written through the
huggingface export's exact mapping into a temporary directory, converted by CTranslate2's own converter into
another, and loaded (both directories are gone once the translator holds the weights). Ids become token strings
through placeholder pieces ("t5"), since CTranslate2 reads strings; its search is forced to the same length
(min_decoding_length = max_decoding_length) and bans what tfm's bans (<tfm_pad>, <s>).

Needs the `bench` extra (`pip install -e ".[bench]"`, i.e. transformers); without it a `TfmError` says so. A peer
that cannot run a comparison here (ctranslate2 not installed, a model it has no equivalent of, no CUDA in its
build) raises `PeerUnavailable`: the benchmark leaves it out with the message as a note.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from tfm_cli.decoding import banned_ids
from tfm_cli.errors import TfmError, install_hint
from tfm_cli.model import ModelConfig, Transformer
from tfm_cli.runtime import autocast

Translate = Callable[[list[list[int]], str, bool], list[int]]  # (batch of source ids, mode, use_cache) -> lengths
CT2_COMPUTE_TYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "int8": "int8"}  # tfm -> CT2


class PeerUnavailable(TfmError):
    """A peer that cannot run this comparison here: not installed, no equivalent of the model, no such device.
    `bench_translate` leaves it out and reports the message as a note; elsewhere it is an ordinary `TfmError`."""


class Peer(NamedTuple):
    """A peer ready to be timed: its `run`, what it runs with (versions, compute type, threads), and notes
    on where its arithmetic differs from tfm's."""

    run: Translate
    settings: dict[str, Any]
    notes: list[str]


def _transformers():
    try:
        import transformers
    except ImportError:
        raise TfmError(
            "--compare needs Hugging Face transformers, which is not installed",
            hint=install_hint("bench"),
        ) from None
    return transformers


def check_transformers() -> None:
    """Raise TfmError when transformers, which --compare times, is not installed (said before any set-up)."""
    _transformers()


def check_marian(config: ModelConfig):
    """The transformers module, once sure that MarianMT has an equivalent of `config`.

    Raises:
        PeerUnavailable: the model is pre-norm or has learned positions.
        TfmError: transformers is not installed.
    """
    transformers = _transformers()
    if config.norm != "post" or config.positions != "sinusoidal":
        raise PeerUnavailable(
            "MarianMT has post-norm and sinusoidal positions only; this model differs",
            hint="compare with a recipe that keeps the paper's model.norm and model.positions",
        )
    return transformers


MARIAN_ATTENTION = ("sdpa", "eager")  # Hugging Face's default, and its plain matmul-softmax-matmul


def marian_model(config: ModelConfig, attention: str = "sdpa") -> nn.Module:
    """A randomly initialised MarianMTModel with tfm's shapes and special ids, its attention computed by
    `attention` (transformers' `attn_implementation`: "sdpa", its default, or "eager")."""
    transformers = check_marian(config)
    marian = transformers.MarianConfig(
        attn_implementation=attention,
        vocab_size=config.vocab_size, d_model=config.d_model,
        encoder_layers=config.n_enc_layers, decoder_layers=config.n_dec_layers,
        encoder_attention_heads=config.n_heads, decoder_attention_heads=config.n_heads,
        encoder_ffn_dim=config.d_ff, decoder_ffn_dim=config.d_ff, activation_function="relu",
        dropout=config.dropout, attention_dropout=config.attn_dropout, activation_dropout=0.0,
        max_position_embeddings=config.max_positions, scale_embedding=True,
        # untied (tie_embeddings: false): three matrices, as tfm's source, target and output ones
        share_encoder_decoder_embeddings=config.tie_embeddings, tie_word_embeddings=config.tie_embeddings,
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


def marian_train_step_times(
    recipe, config: ModelConfig, groups, device, precision: str, warmup: int, progress=None, attention: str = "sdpa"
):
    """MarianMT's optimizer steps on the same batches through tfm's own `train_step`; first `warmup` untimed.
    `attention`: its attention implementation (`marian_model`), which the phase's name ends with."""
    from tfm_cli.bench.train import time_steps
    from tfm_cli.training import adam

    t = recipe.train
    model = _MarianAsTfm(marian_model(config, attention), config).to(device)
    optimizer = adam(model.parameters(), t, device, lr=1e-4)  # tfm's own optimizer, fused as tfm's is
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    phase = f"hf-marian-{attention} step"
    return time_steps(phase, model, optimizer, scaler, recipe, groups, device, precision, warmup, progress)


def marian_translator(
    config: ModelConfig, device: torch.device, precision: str, beam: int, out_len: int
) -> tuple[Translate, nn.Module]:
    """A function (batch of source ids, mode, use_cache) -> output lengths, running MarianMT's `generate`; and the
    model it runs."""
    model = marian_model(config).to(device).eval()
    if precision in ("bf16", "fp16"):  # weights cast once, as a user of `generate` casts them (under autocast alone,
        # each call, i.e. each batch, cast them again: 35-56 ms of the base model's, against one cast for tfm's engine)
        model = model.to(torch.bfloat16 if precision == "bf16" else torch.float16)
        precision = "fp32"  # no autocast around a model already in that precision
    if precision == "int8":  # the same int8 linear layers as tfm's (CPU): weights per row, inputs per row
        from tfm_cli.quantization import int8_linears

        if device.type != "cpu":
            raise PeerUnavailable("int8 runs on the CPU only")
        with torch.no_grad():
            model = int8_linears(model)
        precision = "fp32"  # no autocast around int8 layers

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

    return run, model


def marian_peer(config: ModelConfig, device: torch.device, precision: str, beam: int, out_len: int) -> Peer:
    """`marian_translator` as a `Peer`, with the transformers version it ran.

    Raises:
        PeerUnavailable: MarianMT has no model of this shape (pre-norm, learned positions).
        TfmError: transformers is not installed.
    """
    from tfm_cli.quantization import linear_layers

    run, model = marian_translator(config, device, precision, beam, out_len)
    settings = {"version": _transformers().__version__, "weights": "random, same shapes", "linear_layers": linear_layers(model)}
    return Peer(run, settings, [])


def _ctranslate2(config: ModelConfig, device: torch.device):
    """The ctranslate2 module, once it is sure it can run a model with `config` on `device`.

    Raises:
        PeerUnavailable: the huggingface export has no equivalent of the model (the reason first: installing
            ctranslate2 would not help), ctranslate2 is not installed, or its build sees no CUDA device.
    """
    from tfm_cli.export.huggingface import unsupported

    reason = unsupported(config)
    if reason:
        raise PeerUnavailable(
            "CTranslate2 gets tfm models through the huggingface export, which has no equivalent of this one "
            f"({reason})"
        )
    try:
        import ctranslate2
    except ImportError:
        raise PeerUnavailable(
            "ctranslate2 is not installed", hint=install_hint("ctranslate2")
        ) from None
    if device.type == "cuda" and ctranslate2.get_cuda_device_count() == 0:
        raise PeerUnavailable(f"this CTranslate2 {ctranslate2.__version__} build sees no CUDA device")
    return ctranslate2


def ct2_compute_type(device: torch.device, precision: str) -> tuple[str, str | None]:
    """CTranslate2's compute type for tfm's `precision` on `device`, and a note when it cannot be the same.

    fp32 -> float32, bf16 -> bfloat16, fp16 -> float16 where this CTranslate2 build supports it on the device
    (`ctranslate2.get_supported_compute_types`); else float32, and the note says so (CPU builds often have
    float32 and int8 only).
    """
    import ctranslate2

    want = CT2_COMPUTE_TYPES[precision]
    supported = ctranslate2.get_supported_compute_types(device.type)
    if want in supported:
        return want, None
    return "float32", (
        f"ct2 runs float32 while tfm runs {precision}: CTranslate2 {ctranslate2.__version__} has no {want} on "
        f"this {device.type} (it has {', '.join(sorted(supported))})"
    )


def ct2_model(model: Transformer, device: torch.device, compute_type: str = "float32", threads: int | None = None):
    """A `ctranslate2.Translator` computing `model`'s function, and the token string of each of its ids.

    The model goes through the huggingface export's mapping (exact, see `tfm_cli.export.huggingface`) into a
    temporary directory, CTranslate2's converter turns that into a CTranslate2 model in another, and the
    translator loads it; both directories are deleted before this returns (the translator holds the weights).
    Ids are named by `placeholder_tokenizer` ("t5", with </s> at eos_id and <tfm_pad>, <s> at pad_id, bos_id).

    Args:
        model: the tfm model, on any device (it is not changed).
        device: where CTranslate2 runs (cpu, or a CUDA device).
        compute_type: CTranslate2's compute type (see `ct2_compute_type`).
        threads: CPU threads within a batch (intra_threads); default `torch.get_num_threads()`.

    Returns:
        (translator, pieces) with pieces[i] the string of id i.

    Raises:
        PeerUnavailable: ctranslate2 is not installed, the export cannot write the model (pre-norm, learned
            positions), or this CTranslate2 build has no CUDA while `device` is a GPU.
        TfmError: transformers is not installed (the export and the converter need it).
    """
    from tfm_cli.export import huggingface as hf_export

    ctranslate2 = _ctranslate2(model.config, device)
    index = (device.index if device.index is not None else torch.cuda.current_device()) if device.type == "cuda" else 0
    tokenizer = hf_export.placeholder_tokenizer(model.config)
    with tempfile.TemporaryDirectory(prefix="tfm-bench-ct2-") as tmp:
        hf_export.save_marian(hf_export.build_marian(model), tokenizer, Path(tmp) / "hf")
        hf_export.convert_to_ctranslate2(Path(tmp) / "hf", Path(tmp) / "ct2")
        translator = ctranslate2.Translator(
            str(Path(tmp) / "ct2"), device=device.type, device_index=index, compute_type=compute_type,
            intra_threads=threads or torch.get_num_threads(), inter_threads=1,
        )
    return translator, tokenizer.convert_ids_to_tokens(list(range(model.config.vocab_size)))


def ct2_translator(model: Transformer, device: torch.device, precision: str, beam: int, out_len: int) -> Peer:
    """CTranslate2 translating with `model`'s own weights (`ct2_model`), as a `Peer` whose run is
    (batch, mode, use_cache) -> output lengths.

    Threads: `torch.get_num_threads()` within a batch, one batch at a time (inter_threads=1), as tfm runs.
    CTranslate2 always decodes with its cache: `use_cache` is ignored. With min_decoding_length =
    max_decoding_length = out_len it decodes out_len steps and returns out_len tokens and no </s> (min counts
    the tokens before </s>, max counts </s> too), as `generate` does with min_new_tokens = max_new_tokens.

    Raises:
        PeerUnavailable: see `ct2_model`.
        TfmError: transformers is not installed.
    """
    ctranslate2 = _ctranslate2(model.config, device)
    compute_type, note = ct2_compute_type(device, precision)
    threads = torch.get_num_threads()
    translator, pieces = ct2_model(model, device, compute_type, threads)
    config = model.config
    eos, banned = pieces[config.eos_id], [[pieces[i]] for i in banned_ids(config)]  # what tfm's search bans

    def run(batch: list[list[int]], mode: str, use_cache: bool) -> list[int]:
        results = translator.translate_batch(
            [[pieces[i] for i in s] + [eos] for s in batch],  # tfm reads every source with </s> at the end
            beam_size=beam if mode == "beam" else 1, min_decoding_length=out_len, max_decoding_length=out_len,
            suppress_sequences=banned,
        )
        return [len(r.hypotheses[0]) for r in results]

    settings = {
        "version": ctranslate2.__version__, "compute_type": getattr(translator, "compute_type", compute_type),
        "device": str(device), "intra_threads": threads, "inter_threads": 1,
        "weights": "the benchmarked model, converted",
    }
    return Peer(run, settings, [note] if note else [])
