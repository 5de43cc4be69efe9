"""The huggingface format: a MarianMT directory that `transformers` loads and CTranslate2 converts, computing
exactly the function of the PyTorch model it came from.

    config.json, generation_config.json, model.safetensors    MarianMTModel.from_pretrained(DIR)
    tokenizer.json, tokenizer_config.json                    AutoTokenizer.from_pretrained(DIR)
    README.md                                                what it is, how to load it and save it again, its data

Marian (transformers' `modeling_marian.py`) is the paper's post-norm Transformer, as ours is: the same sublayers
with biases, ReLU, LayerNorm after each residual, embeddings scaled by sqrt(d_model), sinusoidal positions from 0,
no LayerNorm on the embeddings and none at the end of the stacks. The names map one to one
(w_q/w_k/w_v/w_o -> q/k/v/out_proj, w_1/w_2 -> fc1/fc2, sub_attn|sub_self.norm -> self_attn_layer_norm,
sub_cross.norm -> encoder_attn_layer_norm, sub_ffn.norm -> final_layer_norm, generator -> lm_head). Three things
differ, and each is mapped exactly rather than approximated:

1. Positions. Our table interleaves (dim 2i = sin, 2i+1 = cos of the i-th frequency 10000^(-2i/D)); Marian's
   puts the D/2 sines first and the D/2 cosines second, with the same frequencies. So Marian's table is ours with
   its columns permuted by P = [0, 2, 4, ..., 1, 3, 5, ...]. We permute the residual dimension of the whole model
   by P: the columns of the embeddings and of the output projection, the input columns of every Linear that reads
   the residual stream (q/k/v, fc1), the output rows and biases of every Linear that writes it (out_proj, fc2),
   and the LayerNorm weights and biases. This is exact: a LayerNorm's mean and variance do not depend on the
   order of the dimensions, x W^T with x and the columns of W permuted alike is the same number, and the heads
   (the split of q/k/v/out_proj's other side) are untouched. The permuted model adds Marian's table where ours
   added ours, and computes the same function in permuted coordinates.

2. The decoder's first input. Our decoder starts from the embedding of <s>. CTranslate2's Marian converter
   declares `start_from_zero_embedding` (Marian-NMT starts from a zero vector), so a converted model would start
   from 0 + position 0. The export therefore starts the decoder from a token whose embedding row is all zero and
   folds sqrt(d_model) * E[<s>] into row 0 of the decoder's position table: position 0 of the decoder only ever
   holds the start token, so every other position is untouched, and transformers and CTranslate2 both compute
   E[<s>] * sqrt(d_model) + PE[0] there, to the bit. (Starting from <s> instead is exact in transformers, but
   CTranslate2 then translates every sentence differently.) transformers 5 never writes the position tables
   (`_keys_to_ignore_on_save`) and rebuilds a missing one; the export writes both, and from_pretrained loads them.

3. The vocabulary. Marian's convention (and CTranslate2's converter, which drops the last row of every
   vocabulary matrix) wants <pad> as the LAST id, with a zero embedding, as the decoder start. The export keeps our
   V ids unchanged, renames our id 0 (<pad>, never an output: our search bans it) to <tfm_pad>, and appends id V
   = <pad>: zero embedding row, zero output row and a logit bias of -1000 (`PAD_LOGIT_BIAS`). Its probability
   is exactly 0 (exp underflows in fp32 and fp64 alike), so softmax over V + 1 logits equals ours over V, and beam
   scores are the same log-probabilities as tfm's. The bias is finite so that a label-smoothed loss over the V + 1
   log-probabilities (a fine-tuning `Seq2SeqTrainer(label_smoothing_factor=...)`) stays finite: -inf made it inf.
   It adds eps * (1000 + log-sum-exp) / (V + 1) to such a loss (0.013 for eps 0.1, V 8,000), with no gradient
   through the bias, which Marian keeps as a buffer.

The tokenizer is our tokenizer.json with that one rename, the new <pad> and a post-processor that appends </s>
(our model reads every source with </s> at the end). Special tokens in the text are split like any other text
(`split_special_tokens`), as tfm does. tfm's search never outputs <unk> (byte fallback
makes it absent from the training targets, so it means nothing in a translation), and the export says the same:
the generation config suppresses it, and the CTranslate2 notes pass `["<unk>"]` in `suppress_sequences`. The
generation config gives transformers' `generate` our search: start
from <pad>, stop at </s>, never output <tfm_pad>, <s>, <unk> or <pad>, EOS forced at the position limit, beam size and
alpha from the run's recipe, and transformers' stopping rule (`early_stopping=False`: a sentence ends when its best
live beam, scored at its present length, would not rank among its finished ones). tfm's rule scores it at the
sentence's maximum length (`early_stopping="never"`), but transformers takes that length from `max_length`, one
for the batch, which the config can only set to the position table's end: every batch then ran to max_positions
tokens; with `max_new_tokens` set to tfm's limit a caller can ask for it. Greedy decoding reproduces tfm's; beam search may differ in a few sentences because
transformers' length penalty (score / length^alpha) is not GNMT's (score / ((5 + length) / 6)^alpha) and its
forced EOS at the length limit costs nothing (log-probability 0; tfm counts the model's), and the per-sentence limit "source length + max_len_offset" has no equivalent there (pass max_new_tokens).

Checks: teacher-forced logits on random padded batches in fp64 (the mapping: only float64 rounding may remain)
and fp32 (what users run); the exported tokenizer's ids against tfm's; greedy translations of the dev sentences
with `generate`; and, when `ctranslate2` is installed, the same translations from the model CTranslate2's
converter makes of the directory.

`tfm bench translate --compare` writes the same directory (`save_marian`, with `placeholder_tokenizer` when the
model has no tokenizer) to time CTranslate2 on the very weights it benchmarks.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from tfm_cli.checkpoint import LoadedModel
from tfm_cli.decoding import UNK_ID as DECODING_UNK
from tfm_cli.decoding import banned_ids
from tfm_cli.errors import TfmError
from tfm_cli.export.common import (
    Check,
    ExportResult,
    agreement,
    max_abs_diff,
    pseudo_sentences,
    require,
    training_data_lines,
)
from tfm_cli.files import TEXT_ERRORS, WRITE_ERRNOS, write_failure
from tfm_cli.model import ModelConfig, Transformer
from tfm_cli.model.masks import causal_mask
from tfm_cli.model.transformer import sinusoidal_table
from tfm_cli.tokenizer import Tokenizer

EXPORT_PAD = "<pad>"  # the export's pad and decoder start: id V, the last one, with a zero embedding
RENAMED_PAD = "<tfm_pad>"  # our id 0 in the export: still there (ids unchanged), never input nor output
# The export's <pad> logit bias: exp(-1000 - anything) is 0 in fp32 and fp64, yet -log p stays finite for a
# label-smoothed loss (-inf made a fine-tuning Trainer's loss inf)
PAD_LOGIT_BIAS = -1000.0
LOGIT_LIMIT = 1e-4  # teacher-forced logits, fp32: max |HF - tfm| allowed
_BATCH = 64  # sentences per generate / translate_batch call in the checks

_HINT = "use --format onnx or --format release, which export every tfm model"


# --- what maps ---------------------------------------------------------------------------------------------------


def unsupported(config: ModelConfig) -> str | None:
    """Why a model with `config` has no exact MarianMT equivalent, or None if it has one."""
    if config.norm != "post":
        return (
            f"model.norm={config.norm}: MarianMT's layers are post-norm (LayerNorm after each residual) "
            "and its stacks have no final LayerNorm"
        )
    if config.positions != "sinusoidal":
        return f"model.positions={config.positions}: MarianMT has sinusoidal positions only"
    return None


def residual_permutation(d_model: int) -> torch.Tensor:
    """P with Marian's (half-split) sinusoid table == ours (interleaved)[:, P]: the even dims, then the odd ones."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def marian_config(config: ModelConfig) -> dict[str, Any]:
    """MarianConfig keyword arguments for our model config (vocabulary V + 1: the export's <pad> is id V)."""
    v = config.vocab_size + 1
    return {
        "vocab_size": v, "decoder_vocab_size": v, "d_model": config.d_model,
        "encoder_layers": config.n_enc_layers, "decoder_layers": config.n_dec_layers,
        "encoder_attention_heads": config.n_heads, "decoder_attention_heads": config.n_heads,
        "encoder_ffn_dim": config.d_ff, "decoder_ffn_dim": config.d_ff,
        "max_position_embeddings": config.max_positions, "activation_function": "relu", "scale_embedding": True,
        "dropout": config.dropout, "attention_dropout": config.attn_dropout, "activation_dropout": 0.0,
        "pad_token_id": config.vocab_size, "decoder_start_token_id": config.vocab_size,
        "bos_token_id": config.bos_id, "eos_token_id": config.eos_id, "forced_eos_token_id": config.eos_id,
        "share_encoder_decoder_embeddings": config.tie_embeddings, "tie_word_embeddings": config.tie_embeddings,
        "architectures": ["MarianMTModel"],
    }


@torch.no_grad()
def marian_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """MarianMTModel tensors computing `model`'s function (see the module docstring), keyed by transformers' names.

    Holds every name a MarianMTModel may have (`model.shared` only exists when embeddings are shared); the
    caller keeps those its model has. Tensors are fp32, on the CPU, contiguous and new (the model, on whatever
    device it is, is not changed).

    Raises:
        TfmError: the model has no exact Marian equivalent (see `unsupported`).
    """
    config = model.config
    reason = unsupported(config)
    if reason:
        raise TfmError(f"cannot export to huggingface: {reason}", hint=_HINT)
    p = residual_permutation(config.d_model)
    scale = math.sqrt(config.d_model)

    def f32(w: torch.Tensor) -> torch.Tensor:  # fp32 on the CPU (a model benchmarked on a GPU lives there)
        return w.detach().float().cpu()

    def cols(w: torch.Tensor) -> torch.Tensor:  # a Linear reading the residual stream: (out, D) -> (out, D)[:, P]
        return f32(w)[:, p].contiguous()

    def rows(w: torch.Tensor) -> torch.Tensor:  # a Linear writing it, or a LayerNorm: (D, ...) -> [P]
        return f32(w)[p].contiguous()

    def vocab(w: torch.Tensor) -> torch.Tensor:  # (V, D) embedding or output matrix -> (V + 1, D), row V = 0
        return torch.cat([cols(w), torch.zeros(1, config.d_model)])

    state: dict[str, torch.Tensor] = {}

    def attention(prefix: str, mha) -> None:
        for ours, theirs in (("w_q", "q_proj"), ("w_k", "k_proj"), ("w_v", "v_proj")):
            state[f"{prefix}.{theirs}.weight"] = cols(getattr(mha, ours).weight)
            state[f"{prefix}.{theirs}.bias"] = f32(getattr(mha, ours).bias).clone()  # head side
        state[f"{prefix}.out_proj.weight"] = rows(mha.w_o.weight)
        state[f"{prefix}.out_proj.bias"] = rows(mha.w_o.bias)

    def norm(prefix: str, ln: torch.nn.LayerNorm) -> None:
        state[f"{prefix}.weight"], state[f"{prefix}.bias"] = rows(ln.weight), rows(ln.bias)

    def ffn(prefix: str, layer) -> None:
        state[f"{prefix}.fc1.weight"] = cols(layer.ffn.w_1.weight)
        state[f"{prefix}.fc1.bias"] = f32(layer.ffn.w_1.bias).clone()  # the d_ff side: not permuted
        state[f"{prefix}.fc2.weight"] = rows(layer.ffn.w_2.weight)
        state[f"{prefix}.fc2.bias"] = rows(layer.ffn.w_2.bias)

    for i, layer in enumerate(model.encoder_layers):
        pre = f"model.encoder.layers.{i}"
        attention(f"{pre}.self_attn", layer.self_attn)
        norm(f"{pre}.self_attn_layer_norm", layer.sub_attn.norm)
        ffn(pre, layer)
        norm(f"{pre}.final_layer_norm", layer.sub_ffn.norm)
    for i, layer in enumerate(model.decoder_layers):
        pre = f"model.decoder.layers.{i}"
        attention(f"{pre}.self_attn", layer.self_attn)
        norm(f"{pre}.self_attn_layer_norm", layer.sub_self.norm)
        attention(f"{pre}.encoder_attn", layer.cross_attn)
        norm(f"{pre}.encoder_attn_layer_norm", layer.sub_cross.norm)
        ffn(pre, layer)
        norm(f"{pre}.final_layer_norm", layer.sub_ffn.norm)

    src_emb, tgt_emb = model.src_embed.token.weight, model.tgt_embed.token.weight
    state["model.encoder.embed_tokens.weight"] = vocab(src_emb)
    state["model.decoder.embed_tokens.weight"] = vocab(tgt_emb)  # row V (the start token) is zero
    state["lm_head.weight"] = vocab(model.generator.weight)
    if config.tie_embeddings:
        state["model.shared.weight"] = state["model.encoder.embed_tokens.weight"]
    bias = torch.zeros(1, config.vocab_size + 1)
    bias[0, config.vocab_size] = PAD_LOGIT_BIAS  # the export's <pad> is never an output: probability exactly 0
    state["final_logits_bias"] = bias

    # Positions: our sinusoids with the permuted columns, which are Marian's own table. The decoder's row 0 also
    # carries the start embedding, computed as our Embeddings computes it (fp32 product, then + PE[0]).
    table = sinusoidal_table(config.max_positions, config.d_model)  # (L, D) fp32, interleaved
    state["model.encoder.embed_positions.weight"] = table[:, p].contiguous()
    decoder_table = table.clone()
    decoder_table[0] = f32(tgt_emb)[config.bos_id] * scale + table[0]
    state["model.decoder.embed_positions.weight"] = decoder_table[:, p].contiguous()
    return state


def build_marian(model: Transformer):
    """A `transformers.MarianMTModel` (eval mode, fp32, CPU) that computes `model`'s function.

    Raises:
        TfmError: transformers is not installed, or the model has no exact Marian equivalent.
    """
    transformers = require("transformers", "huggingface", "the huggingface export")
    state = marian_state_dict(model)
    with _quiet(transformers):
        hf = transformers.MarianMTModel(transformers.MarianConfig(**marian_config(model.config)))
    own = hf.state_dict()
    missing = sorted(set(own) - set(state))
    if missing:  # a transformers version with other tensor names: fail loudly, never half-initialised
        raise TfmError(
            f"this transformers version's MarianMTModel has tensors the export does not know: {', '.join(missing[:3])}",
            hint=f"report it with `pip show transformers` (installed: {transformers.__version__})",
        )
    hf.load_state_dict({name: state[name] for name in own}, strict=True)
    # transformers leaves the position tables out of checkpoints and rebuilds them; ours must be saved.
    hf._keys_to_ignore_on_save = set()
    return hf.eval()


def build_tokenizer(tokenizer: Tokenizer, config: ModelConfig):
    """A `transformers.PreTrainedTokenizerFast` with our pieces and ids, <tfm_pad> for our id 0, <pad> = id V,
    and </s> appended to every encoded text.

    Raises:
        TfmError: transformers is not installed, or the tokenizer's special ids are not the model's.
    """
    transformers = require("transformers", "huggingface", "the huggingface export")
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import processors

    if (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id) != (config.pad_id, config.bos_id, config.eos_id):
        raise TfmError(
            f"the model's special ids (pad {config.pad_id}, bos {config.bos_id}, eos {config.eos_id}) are not the "
            f"tokenizer's ({tokenizer.pad_id}, {tokenizer.bos_id}, {tokenizer.eos_id})",
            hint="export the run with the tokenizer it was trained with",
        )
    spec = json.loads(tokenizer.backend.to_str())
    vocab = spec["model"]["vocab"]
    pad = tokenizer.id_to_piece(config.pad_id)
    vocab[RENAMED_PAD] = vocab.pop(pad)
    vocab[EXPORT_PAD] = config.vocab_size
    for added in spec.get("added_tokens") or []:  # none in tfm tokenizers; kept consistent if there are
        if added.get("content") == pad:
            added["content"] = RENAMED_PAD
    backend = HFTokenizer.from_str(json.dumps(spec, ensure_ascii=False))
    eos = tokenizer.id_to_piece(config.eos_id)
    backend.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", pair=f"$A $B {eos}", special_tokens=[(eos, config.eos_id)]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=tokenizer.id_to_piece(config.bos_id), eos_token=eos, unk_token=tokenizer.id_to_piece(tokenizer.unk_id),
        pad_token=EXPORT_PAD, padding_side="right",
        model_max_length=config.max_positions,  # source tokens + </s>
        split_special_tokens=True,  # a literal "<s>" in a sentence is text, as in tfm
        clean_up_tokenization_spaces=False,
    )


def placeholder_tokenizer(config: ModelConfig):
    """A `transformers.PreTrainedTokenizerFast` for a model that has no tokenizer (random weights): id i is the
    piece "t<i>", but for the special pieces the export's tokenizer has at the same ids (<tfm_pad>, <s>, </s>,
    <unk>, and <pad> = id V). The pieces name ids, nothing more: enough for CTranslate2, which reads token
    strings, and for its converter, which takes the vocabulary and the special tokens from a tokenizer.

    Raises:
        TfmError: transformers is not installed.
    """
    transformers = require("transformers", "huggingface", "the huggingface export")
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models

    pieces = [f"t{i}" for i in range(config.vocab_size)]
    pieces[config.pad_id], pieces[config.bos_id], pieces[config.eos_id] = RENAMED_PAD, Tokenizer.BOS, Tokenizer.EOS
    if Tokenizer.unk_id < config.vocab_size and Tokenizer.unk_id not in (config.pad_id, config.bos_id, config.eos_id):
        pieces[Tokenizer.unk_id] = Tokenizer.UNK
    vocab = {piece: i for i, piece in enumerate(pieces)}
    vocab[EXPORT_PAD] = config.vocab_size
    unk = Tokenizer.UNK if Tokenizer.UNK in vocab else EXPORT_PAD
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=HFTokenizer(models.WordLevel(vocab=vocab, unk_token=unk)),
        bos_token=Tokenizer.BOS, eos_token=Tokenizer.EOS, unk_token=unk, pad_token=EXPORT_PAD,
        model_max_length=config.max_positions,
    )


def save_marian(hf_model, hf_tokenizer, out: Path) -> None:
    """Write a model from `build_marian` and a tokenizer from `build_tokenizer` (or `placeholder_tokenizer`)
    into the directory `out`: what `from_pretrained` and CTranslate2's converter read. No checks: see
    `export_huggingface` for the export that verifies itself."""
    transformers = require("transformers", "huggingface", "the huggingface export")
    out = Path(out)
    with _quiet(transformers):
        hf_model.save_pretrained(out)
        hf_tokenizer.save_pretrained(out)
    _name_tokenizer_class(out / "tokenizer_config.json")


def convert_to_ctranslate2(hf_dir: Path, out: Path) -> Path:
    """Convert a directory `save_marian` wrote into a CTranslate2 model directory `out` with CTranslate2's own
    converter (what `ct2-transformers-converter --model HF_DIR --output_dir OUT` does), quietly.

    Raises:
        TfmError: ctranslate2 or transformers is not installed.
    """
    converters = require("ctranslate2.converters", "ctranslate2", "the CTranslate2 conversion")
    with _quiet(_transformers()):
        converters.TransformersConverter(str(hf_dir)).convert(str(out), force=True)
    return Path(out)


def ct2_length_offset(max_len_offset: int) -> int:
    """What CTranslate2's max_decoding_length adds to len(tokens) for tfm's limit.

    tokens are the source's pieces and </s>; tfm outputs at most the pieces + max_len_offset tokens, then </s>.
    CTranslate2's maximum counts the tokens it outputs, </s> included when it ends before it: a hypothesis that
    reaches it has that many tokens and no </s>, which is the text tfm gives with its forced </s>.
    """
    return max_len_offset - 1


def _signed(n: int) -> str:
    """'+ 49', '- 1': a term added to a length in the notes' formulas."""
    return f"{'-' if n < 0 else '+'} {abs(n)}"


def ct2_suppress_sequences(config: ModelConfig) -> list[list[str]]:
    """CTranslate2's `suppress_sequences` for what tfm's search never outputs: <tfm_pad>, <s> and <unk>."""
    names = {config.pad_id: RENAMED_PAD, config.bos_id: Tokenizer.BOS, DECODING_UNK: Tokenizer.UNK}
    return [[names[i]] for i in banned_ids(config)]


def generation_config(config: ModelConfig, beam: int, alpha: float):
    """transformers' GenerationConfig for our search (see the module docstring for what differs)."""
    transformers = require("transformers", "huggingface", "the huggingface export")
    start = config.vocab_size
    return transformers.GenerationConfig(
        decoder_start_token_id=start, bos_token_id=config.bos_id, eos_token_id=config.eos_id, pad_token_id=start,
        forced_eos_token_id=config.eos_id,  # at max_length the last token is </s>, as tfm forces it
        suppress_tokens=[*banned_ids(config), start],  # never outputs (<tfm_pad>, <s>, <unk>), as in tfm's search
        num_beams=beam, do_sample=False,
        max_length=config.max_positions + 1,  # the start token + at most max_positions - 1 tokens + </s>
        # Beam settings only with a beam: transformers refuses to save a config of num_beams=1 that sets them (a
        # recipe's decode.beam: 1). The stopping rule is transformers' own (the best live beam scored at its present
        # length). Its "never" (tfm's bound: the best live beam scored at the longest length) takes that length from
        # max_length, one for the whole batch and here the position table's end: every batch then ran to
        # max_positions tokens (1,024: 16x slower on short sentences). Pass early_stopping="never" with
        # max_new_tokens (tfm's limit) for tfm's rule.
        **({"length_penalty": alpha, "early_stopping": False} if beam > 1 else {}),
    )


# --- the export --------------------------------------------------------------------------------------------------


def export_huggingface(loaded: LoadedModel, out: Path, sources: list[str]) -> ExportResult:
    """Write `loaded` as a MarianMT directory into the empty directory `out`, then verify it.

    Args:
        loaded: the model to export, with its tokenizer and run directory.
        out: an empty directory to write into.
        sources: source sentences for the translation checks.

    Returns:
        The files written, the checks (logits, greedy translations with transformers and, when installed,
        CTranslate2) and notes on how to load it.

    Raises:
        TfmError: transformers is not installed, or the model has no exact MarianMT equivalent (pre-norm,
            learned positions).
    """
    model, tokenizer, config = loaded.model.eval(), loaded.tokenizer, loaded.model.config
    reason = unsupported(config)  # before asking for transformers: installing it would not help
    if reason:
        raise TfmError(f"cannot export to huggingface: {reason}", hint=_HINT)
    transformers = require("transformers", "huggingface", "the huggingface export")
    from tfm_cli.translator import DecodeSettings

    settings = DecodeSettings.from_run(loaded.run_dir)
    hf_model = build_marian(model)
    hf_model.generation_config = generation_config(config, settings.beam, settings.alpha)
    hf_tokenizer = build_tokenizer(tokenizer, config)
    out = Path(out)
    save_marian(hf_model, hf_tokenizer, out)
    (out / "README.md").write_text(_readme(loaded, settings), encoding="utf-8", errors=TEXT_ERRORS)
    # how tfm translate gives a line to the model (sentences, frames, capitals, numbers), for the README's translate()
    shutil.copyfile(Path(__file__).parents[1] / "sentences.py", out / "sentences.py")

    # Verify what a user gets: the directory loaded back, offline.
    with _quiet(transformers):
        hf_model = transformers.MarianMTModel.from_pretrained(out).eval()
        hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    checks = _check_logits(model, hf_model)
    origin = getattr(sources, "what", "dev")  # dev, training or made-up: the checks' names say which
    ids, kept = _encodable(tokenizer, sources, config.max_positions - 1)
    left_out, made_up = len(sources) - len(kept), not kept
    if made_up:  # every dev sentence is longer than the model takes (a small max_positions): made-up ones that fit
        sources = pseudo_sentences(tokenizer, len(sources), longest=min(20, (config.max_positions - 1) // 2))
        ids, kept = _encodable(tokenizer, sources, config.max_positions - 1)
    texts = [sources[i] for i in kept]
    limits = [max(1, min(len(seq) + settings.max_len_offset, config.max_positions - 1)) for seq in ids]
    checks.append(_check_tokenizer(hf_tokenizer, texts, ids, config.eos_id))
    expected = _tfm_greedy(model, tokenizer, ids, settings.max_len_offset)
    got = _hf_greedy(hf_model, hf_tokenizer, texts, limits, config.eos_id)
    what = f"{len(texts)} {'made-up' if made_up else origin} sentences"
    checks.append(agreement(f"greedy translations, transformers generate vs tfm ({what})", expected, got))

    notes = [
        f"Python: MarianMTModel.from_pretrained('{out}'), AutoTokenizer.from_pretrained('{out}'), then "
        "model.generate(**tokenizer(sentences, return_tensors='pt', padding=True, truncation=True))",
        "CTranslate2: ct2-transformers-converter --model DIR --output_dir DIR-ct2, then "
        f"ctranslate2.Translator('DIR-ct2').translate_batch(tokens, beam_size={settings.beam}, "
        f"length_penalty={settings.alpha:g}, suppress_sequences={ct2_suppress_sequences(config)}, "
        f"min_decoding_length=0, max_decoding_length=min(L {_signed(ct2_length_offset(settings.max_len_offset))}, "
        f"{config.max_positions - 1})) with tokens = tokenizer.convert_ids_to_tokens(tokenizer(sentence).input_ids) "
        "and L the batch's longest len(tokens), </s> included: tfm's limit (the source's pieces + "
        f"{settings.max_len_offset} tokens, then </s>; CTranslate2's maximum counts the tokens it outputs, and one that "
        "reaches it has no </s>; its own default is beam 2, length penalty 1 and 256 tokens, and a translation that "
        "never ends runs on to the limit); the limit is the batch's, so cut each output to its own "
        f"len(tokens) {_signed(ct2_length_offset(settings.max_len_offset))} tokens (greedy: then tfm's translations exactly)",
        "commands: tfm export RUN --format huggingface --out DIR; "
        "ct2-transformers-converter --model DIR --output_dir DIR-ct2",
        "lines: tfm translate splits a line into sentences and takes frames, capitals (and numbers) off before the model "
        "sees it; the README.md's translate() does the same with the sentences.py beside it",
        "greedy decoding of the sentences so given reproduces tfm's; beam search may differ in a few sentences: transformers divides by "
        f"length^{settings.alpha:g}, tfm by the GNMT penalty ((5 + length) / 6)^{settings.alpha:g}; and a hypothesis "
        "that reaches the length limit gets its forced </s> free in transformers, where tfm counts its log-probability",
        "saving it again from transformers (save_pretrained, push_to_hub): set model._keys_to_ignore_on_save = None "
        "first, or the decoder's position table, which holds tfm's <s> embedding, is left out (see its README.md)",
    ]
    if config.reads_placeholders:
        notes.append(
            "numbers: the model reads each number in digits as the placeholder XNUM and copies it: give "
            "it sentences so and put the numbers back in its output, as its README.md's translate() does (tfm translate does it)"
        )
    if left_out:
        notes.append(
            f"{left_out} empty or over-long {origin} sentences left out of the checks"
            + (f"; none was left, so they ran on {len(texts)} made-up sentences of learned pieces" if made_up else "")
        )
    if importlib.util.find_spec("ctranslate2") is None:
        notes.append("ctranslate2 is not installed: the CTranslate2 conversion was not checked (pip install ctranslate2)")
    else:
        checks.append(_check_ctranslate2(out, hf_tokenizer, texts, limits, config, expected, what))
    files = sorted(p.name for p in out.iterdir() if p.is_file())
    return ExportResult("huggingface", out, loaded.path, files, checks, notes)


# --- checks ------------------------------------------------------------------------------------------------------


@torch.no_grad()
def _check_logits(model: Transformer, hf_model, batches: int = 4, seed: int = 0) -> list[Check]:
    """Teacher-forced logits of both models on random padded batches (random sources, random target prefixes).

    Two checks. In fp64 the mapping itself is measured: an exact mapping leaves only float64 rounding (~1e-12).
    In fp32, what users run, rounding in either model is larger than any mapping error could hide behind (tfm's
    own fp32 logits sit up to ~1e-4 from its fp64 ones on a trained model), so the limit is 1e-4 or, for a model
    whose fp32 rounding is larger, twice tfm's own fp32-vs-fp64 difference. Both models are back in fp32 after.
    """
    config = model.config
    v = start = config.vocab_size  # the export's <pad>: decoder start, and the extra logit
    g = torch.Generator().manual_seed(seed)
    longest = min(24, config.max_positions - 1)
    cases = []
    for b in range(batches):
        n = 3 + b
        src_lens = torch.randint(1, longest + 1, (n,), generator=g)
        src_lens[0] = longest  # one full-width row, the others padded
        src = torch.full((n, longest + 1), config.pad_id, dtype=torch.long)
        for row, length in enumerate(src_lens.tolist()):
            src[row, :length] = torch.randint(3, v, (length,), generator=g)  # any id but pad, <s>, </s>
            src[row, length] = config.eos_id
        t = int(torch.randint(1, min(16, config.max_positions) + 1, (1,), generator=g))
        tgt = torch.randint(3, v, (n, t), generator=g)
        tgt[:, 0] = config.bos_id
        cases.append((src, tgt))

    def run(dtype: torch.dtype) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        model.to(dtype)
        hf_model.to(dtype)
        ours, theirs = [], []
        for src, tgt in cases:
            src_mask = (src != config.pad_id)[:, None, None, :]
            ours.append(model(src, tgt, src_mask, causal_mask(tgt.size(1), src.device)))  # (B, T, V)
            hf_tgt = tgt.clone()
            hf_tgt[:, 0] = start  # the export starts the decoder from <pad> (<s> lives in decoder position 0)
            theirs.append(hf_model(
                input_ids=src.masked_fill(src == config.pad_id, start),
                attention_mask=(src != config.pad_id).long(),
                decoder_input_ids=hf_tgt,
            ).logits)  # (B, T, V + 1)
        return ours, theirs

    positions = hf_model.model.decoder.embed_positions.weight
    saved_row = positions[0].clone()
    try:
        ours32, theirs32 = run(torch.float32)
        # The folded row (start embedding + PE[0]) is stored as the fp32 sum, bit-exact with tfm in fp32; for
        # the fp64 pass it is summed again in fp64, as tfm in fp64 sums it.
        model.double()
        emb = model.tgt_embed
        fold = emb.token.weight[config.bos_id] * emb.scale + emb.pe[0]
        positions.data = positions.data.double()
        positions[0] = fold[residual_permutation(config.d_model)]
        ours64, theirs64 = run(torch.float64)
    finally:
        model.float()
        hf_model.float()
        positions[0] = saved_row
    exact = max(max_abs_diff(o, h[..., :v]) for o, h in zip(ours64, theirs64, strict=True))
    fp32 = max(max_abs_diff(o, h[..., :v]) for o, h in zip(ours32, theirs32, strict=True))
    own = max(max_abs_diff(o, o64) for o, o64 in zip(ours32, ours64, strict=True))
    never = all(bool((h.softmax(dim=-1)[..., v] == 0).all()) for h in theirs32 + theirs64)  # <pad>: probability 0
    limit32 = max(LOGIT_LIMIT, 2 * own)
    name = f"teacher-forced logits, max |diff| ({batches} random padded batches"
    pad_note = "" if never else " (the <pad> probability is not 0)"
    return [
        Check(f"{name}, fp64: the mapping)", f"{exact:.1e}{pad_note}", exact <= 1e-9 and never, "<= 1e-9"),
        Check(
            f"{name}, fp32)", f"{fp32:.1e} (tfm fp32 vs fp64: {own:.1e})", fp32 <= limit32,
            f"<= {LOGIT_LIMIT:g}, or 2x tfm's own fp32 error",
        ),
    ]


def _check_tokenizer(hf_tokenizer, texts: list[str], ids: list[list[int]], eos_id: int) -> Check:
    """The exported tokenizer gives tfm's ids plus </s> for every sentence."""
    got = hf_tokenizer(texts)["input_ids"] if texts else []
    want = [seq + [eos_id] for seq in ids]
    same = sum(a == b for a, b in zip(want, got, strict=True))
    first = next((i for i, (a, b) in enumerate(zip(want, got, strict=True)) if a != b), None)
    value = f"{same}/{len(texts)} identical" + (f" (first difference: {texts[first]!r})" if first is not None else "")
    return Check("source token ids, exported tokenizer vs tfm (+ </s>)", value, same == len(texts), "all identical")


def _check_ctranslate2(
    out: Path, hf_tokenizer, texts: list[str], limits: list[int], config: ModelConfig, expected: list[str], what: str
) -> Check:
    """Convert the directory with CTranslate2's converter (into a temporary directory), translate greedily on CPU;
    `what` names the sentences in the check's name."""
    import ctranslate2

    name = f"greedy translations, CTranslate2 {ctranslate2.__version__} (converted from the export) vs tfm"
    ban = ct2_suppress_sequences(config)
    with _scratch_for_ctranslate2() as tmp, _quiet(_transformers()):
        try:
            convert_to_ctranslate2(out, tmp / "ct2")
        except Exception as error:
            failure = write_failure(error, tmp / "ct2")
            if failure is None or failure.errno not in WRITE_ERRNOS:
                raise
            raise _scratch_error(failure.strerror) from error
        translator = ctranslate2.Translator(
            str(tmp / "ct2"), device="cpu", compute_type="float32", intra_threads=torch.get_num_threads()
        )
        tokens = [hf_tokenizer.convert_ids_to_tokens(seq) for seq in hf_tokenizer(texts)["input_ids"]] if texts else []
        got: list[str] = []
        for chunk in range(0, len(texts), _BATCH):
            part = slice(chunk, chunk + _BATCH)
            # the notes' limit: the batch's longest len(tokens) + ct2_length_offset (= tfm's limit: CTranslate2's
            # counts the output tokens, and one that reaches it has no </s>), each output cut at its own
            results = translator.translate_batch(
                tokens[part], beam_size=1, max_decoding_length=max(limits[part]), suppress_sequences=ban,
                min_decoding_length=0,  # its default is 1: tfm (min_len 0) may end at once with an empty translation
            )
            for result, limit in zip(results, limits[part], strict=True):
                out_ids = hf_tokenizer.convert_tokens_to_ids(result.hypotheses[0])
                got.append(hf_tokenizer.decode(_cut(out_ids, config.eos_id, limit), skip_special_tokens=True))
        del translator
    return agreement(f"{name} ({what})", expected, got)


@contextlib.contextmanager
def _scratch_for_ctranslate2() -> Iterator[Path]:
    """A temporary folder for the CTranslate2 check's conversion (in TMPDIR, not beside --out): a TMPDIR that is
    full or not writable is said as such, not blamed on --out."""
    try:
        tmp = tempfile.TemporaryDirectory(prefix="tfm-ct2-")
    except OSError as error:
        raise _scratch_error(error.strerror or str(error)) from None
    with tmp as name:
        yield Path(name)


def _scratch_error(why: str) -> TfmError:
    try:
        where = f"the temporary folder {tempfile.gettempdir()}"
    except OSError:  # no usable one at all: TMPDIR, TEMP, TMP, /tmp, ... all refused
        where = "a temporary folder (none of TMPDIR, /tmp, /var/tmp is usable)"
    return TfmError(
        f"the CTranslate2 check could not convert the export in {where}: {why}; nothing was exported",
        hint="free some space there or set TMPDIR to a folder with room (the check needs about the export's size)",
    )


def _encodable(tokenizer: Tokenizer, sources: list[str], limit: int) -> tuple[list[list[int]], list[int]]:
    """tfm token ids of the sources the checks use (non-empty, not longer than the model takes) and their indices."""
    ids, kept = [], []
    for i, seq in enumerate(tokenizer.encode_batch(sources)):
        if 0 < len(seq) <= limit:
            ids.append(seq)
            kept.append(i)
    return ids, kept


def _tfm_greedy(model: Transformer, tokenizer: Tokenizer, ids: list[list[int]], max_len_offset: int) -> list[str]:
    from tfm_cli.decoding import translate_ids

    hyps = translate_ids(model, ids, greedy=True, max_len_offset=max_len_offset)
    return [tokenizer.decode_as_saved(h[0].tokens) for h in hyps]  # as the exported tokenizer.json decodes


@torch.no_grad()
def _hf_greedy(hf_model, hf_tokenizer, texts: list[str], limits: list[int], eos_id: int) -> list[str]:
    """transformers' greedy `generate`, batched by length; each output cut at tfm's per-sentence length limit.

    generate takes one max_new_tokens per batch, tfm a limit per sentence (source length + max_len_offset):
    greedy choices do not depend on the limit, so generating up to the batch's largest and cutting each output
    at its own limit gives exactly what tfm's search gives (it forces </s> there).
    """
    order = sorted(range(len(texts)), key=lambda i: limits[i])
    got = [""] * len(texts)
    for chunk in range(0, len(order), _BATCH):
        part = order[chunk : chunk + _BATCH]
        batch = hf_tokenizer([texts[i] for i in part], return_tensors="pt", padding=True)
        longest = max(limits[i] for i in part)
        with _quiet(_transformers()):  # it warns that max_new_tokens overrides the config's max_length
            outputs = hf_model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=longest + 1)
        for i, row in zip(part, outputs.tolist(), strict=True):
            got[i] = hf_tokenizer.decode(_cut(row[1:], eos_id, limits[i]), skip_special_tokens=True)
    return got


def _cut(ids: list[int], eos_id: int, limit: int) -> list[int]:
    """Output ids up to (not including) the first </s>, at most `limit` of them."""
    if eos_id in ids:
        ids = ids[: ids.index(eos_id)]
    return ids[:limit]


# --- helpers -----------------------------------------------------------------------------------------------------


def _transformers():
    return require("transformers", "huggingface", "the huggingface export")


@contextlib.contextmanager
def _quiet(transformers) -> Iterator[None]:
    """Silence transformers' info and progress output (load reports, shard progress bars) for a while."""
    logging = transformers.utils.logging
    level = logging.get_verbosity()
    bars = logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(level)
        if bars:
            logging.enable_progress_bar()


def _name_tokenizer_class(path: Path) -> None:
    """transformers 5 records its new class name, TokenizersBackend; PreTrainedTokenizerFast is the same class
    under the name transformers 4 knows too (AutoTokenizer resolves either)."""
    config = json.loads(path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _numbers_note(config) -> str:
    """What the README says of a model that reads numbers as the placeholder (`ModelConfig.numbers`), or ""."""
    if not config.reads_placeholders:
        return ""
    return """Numbers: the model was trained to read each number written in digits as the placeholder `XNUM`, which it copies
into its translation: give it each sentence so, with each telephone number or numeric date (`06 12 34 56 78`,
`14-07-2023`, `12/05/2024`: one placeholder) and each web or e-mail address inside it so too (not the digits of a
mention, a hashtag or a name with `_`: `@tom2000`, `#JO2024`, `notes_2023.txt`), and put them back into its
output's placeholders in the order they came, as `tfm translate` does for each sentence of a line. Given the
digits, it mistranslates most numbers, and garbles most addresses. `translate()` above does it with sentences.py;
these lines do it alone, for a sentence:

```python
import re
NUMBER = re.compile(r"(?<![0-9])(?<![0-9][.,])(?:[0-9]{1,3}(?:[ \\u00a0\\u202f][0-9]{3})+(?![0-9])|[0-9]+)(?:[.,][0-9]+)*(?![0-9]|[.,][0-9])")
ADDRESS = re.compile(r"(?:(?<![A-Za-z])[A-Za-z][A-Za-z0-9+.-]{0,31}://|www\\.)\\S+"
                     r"|(?:mailto:[\\w.+-]+|(?<![\\w.+-])[\\w.+-]+)@[\\w-]+(?:\\.[\\w-]+)+")  # its digits stay
RUN = re.compile(r"(?<![\\w+.,(/-])(?:\\+?[0-9]{1,4}|\\([0-9]{1,4}\\))(?:[ \\u00a0./-]?\\([0-9]{1,4}\\)|(?:[ \\u00a0./-]|(?<=\\)))"
                 r"[0-9]{1,4}){2,}(?![0-9]|[ \\u00a0.,/-]\\(?[0-9])")  # 06 12 34 56 78, (555) 123-4567, 14-07-2023

def word(c):  # a character of a word of a script with case, digits and _ included
    return c == "_" or c.isdigit() or c.isupper() or c.islower()

def ends_a_word(a):  # digits of a mention's or hashtag's word, or of one with a _ (@tom2000, notes_2023): a name's
    i, j = a, a
    while i > max(a - 64, 0) and word(sentence[i - 1]):
        i -= 1
    while j < min(a + 64, len(sentence)) and word(sentence[j]):
        j += 1
    token = sentence[i:j]  # (a hashtag has a letter: #12345 is a number)
    return "_" in token or (i > 0 and (sentence[i - 1] == "@" or sentence[i - 1] == "#" and any(c.isalpha() for c in token)))

taken = []
for m in ADDRESS.finditer(sentence):  # without the punctuation after it (a bracket it opens stays)
    a, b = m.span()
    while b > a and (sentence[b - 1] in ".,;:!?…\\"'»”’>" or sentence[b - 1] in ")]}" and sentence.count(
            sentence[b - 1], a, b) > sentence.count("([{"[")]}".index(sentence[b - 1])], a, b)):
        b -= 1
    taken.append((a, b))
runs = [m.span() for m in RUN.finditer(sentence) if sum(c.isdigit() for c in m.group()) >= 7]
numbers = [m.span() for m in NUMBER.finditer(sentence) if not ends_a_word(m.start())]
for a, b in sorted(runs + numbers, key=lambda span: (span[0], -span[1])):
    if not any(a < y and x < b for x, y in taken):  # of overlapping ones, the first, then the longer
        taken.append((a, b))
found = [] if "XNUM" in sentence else sorted(taken)
values = [sentence[a:b] for a, b in found]  # 3, 10.000, 3,14, 10 000, the 80 of 80kg, https://..., tom@example.com
given = sentence
for a, b in reversed(found):
    given = given[:a] + "XNUM" + given[b:]
# ... translate `given` ..., then put this sentence's numbers back in order (a placeholder past them is left out,
# with the space before it or the mark joining it to the one before: XNUM:XNUM of one number is that number):
seen = []
def put(found):
    if found.group(1) is None:  # a mark between two placeholders
        return found.group() if len(seen) < len(values) else ""
    seen.append(found)
    return found.group(1) + values[len(seen) - 1] if len(seen) <= len(values) else ""
if "XNUM" not in sentence and "XNUM" in translation:
    translation = re.sub(r"(?<=XNUM)[:.,/-](?=XNUM)|( ?)XNUM", put, translation).strip()
```

"""


def _lines_note(config, settings) -> str:
    """What the README says of giving the model lines as `tfm translate` does, with the sentences.py beside it."""
    numbers = ", and gives each number as the placeholder the model learned to copy" if config.reads_placeholders else ""
    return f"""## Lines as `tfm translate` gives them

`tfm translate` does not give the model a line as it is: it splits the line into sentences, takes a list's bullet,
quotes, brackets and emoji off a sentence and writes them back around its translation, gives a sentence written in
capitals or title case in sentence case and writes its translation so, writes a line without a letter as it
is{numbers}. The model learned from such sentences: given a line as it is, it may translate its first sentence
only, or garble one in capitals. `sentences.py`, beside this README (tfm's own, with no dependencies), does it:

```python
import sys
sys.path.insert(0, "DIR")  # this folder, for sentences.py
import sentences

def cost(text):  # its pieces (how familiar a word is to the vocabulary, for a sentence in capitals)
    ids = tokenizer(text, add_special_tokens=False).input_ids
    return (len(ids), *ids)

def translate(lines, **options):  # options: generate's, e.g. num_beams=1
    parts = [sentences.to_translate(line, {settings.split_sentences}, cost, {settings.verbatim}, {config.reads_placeholders}) for line in lines]
    given = [part.given for these in parts for part in these if cost(part.given)[0]]  # (the others: nothing to translate)
    # tfm's length limit: each sentence's pieces + {settings.max_len_offset} tokens (then </s>), at most {config.max_positions - 1}
    limits = [min(min(cost(text)[0], {config.max_positions - 1}) + {min(settings.max_len_offset, config.max_positions - 1)}, {config.max_positions - 1}) for text in given]
    batch = tokenizer(given, return_tensors="pt", padding=True, truncation=True)
    # (max_length=None: the saved config's, the position table's end, is not a limit here; transformers warns without it)
    outputs = model.generate(**batch, max_new_tokens=max(limits) + 1, max_length=None, **options) if given else []
    texts = tokenizer.batch_decode([ids[1 : 1 + limit] for ids, limit in zip(outputs, limits)], skip_special_tokens=True)
    done = iter(" ".join(text.split()) for text in texts)
    return [sentences.join_sentences([part.written(next(done) if cost(part.given)[0] else "") for part in these])
            for these in parts]
```

`translate(lines, num_beams=1)` gives the lines of `tfm translate --greedy --precision fp32` (the arguments
above are the run's `decode.split_sentences`, `decode.verbatim` and how the model reads numbers; each output is
cut at its own sentence's limit, as `generate`'s is one for the batch). With the saved config's beam search, a few
lines differ, as said below.

"""


def _readme(loaded: LoadedModel, settings) -> str:
    config = loaded.model.config
    beam, alpha, max_len_offset = settings.beam, settings.alpha, settings.max_len_offset
    data = "\n".join(training_data_lines(loaded.run_dir))
    return f"""# {loaded.run_dir.name} (tfm, MarianMT format)

A Transformer trained with tfm (post-norm, d_model {config.d_model}, {config.n_enc_layers}+{config.n_dec_layers} layers,
{config.vocab_size} joint BPE ids, step {loaded.step}), written as a MarianMT model that computes exactly the function of
the tfm weights `{loaded.path.name}`. Load it offline:

```python
from transformers import AutoTokenizer, MarianMTModel
tokenizer = AutoTokenizer.from_pretrained("DIR")
model = MarianMTModel.from_pretrained("DIR")
batch = tokenizer(["..."], return_tensors="pt", padding=True, truncation=True)
print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))
```

{_lines_note(config, settings)}{_numbers_note(config)}`batch_decode` keeps the spaces of `▁` tokens in a row (an undertrained model emits them); `tfm translate` writes a
run of spaces as one and strips the ends: `" ".join(text.split())` gives its line.

`truncation=True` cuts a sentence longer than the encoder's {config.max_positions} positions to its first
{config.max_positions - 1} pieces and `</s>`, as `tfm translate` cuts it (with a warning); without it such a sentence
ends in an `IndexError`. For CTranslate2, cut `tokens` (below) the same way.

`generate` uses beam {beam} by default (`num_beams=1` for greedy, which gives tfm's greedy translations); its
length penalty (score / length^{alpha:g}) is not tfm's GNMT penalty, and a hypothesis that reaches the length limit
gets its forced `</s>` free (tfm counts its log-probability), so a few beam translations may differ.
Set `max_new_tokens` for a length limit (tfm stops at source length + max_len_offset), with `max_length=None`
(else transformers warns at each call that it overrides the saved `max_length`). tfm gives an empty or
blank line an empty translation without decoding it; `generate` translates its lone `</s>` into some sentence:
leave such lines out. The saved config ends a
beam search by transformers' rule (`early_stopping=False`: the best live beam scored at its present length);
tfm scores it at the longest length it may reach, which is `early_stopping="never"` with `max_new_tokens` set to
tfm's limit. Without `max_new_tokens`, "never" takes the position table's end ({config.max_positions}) as that
length and runs every batch to {config.max_positions} tokens.

Vocabulary: tfm's ids, with id 0 renamed `{RENAMED_PAD}` (unused) and `{EXPORT_PAD}` appended as id {config.vocab_size},
the decoder's start token (zero embedding, as in OPUS-MT); tfm's `<s>` embedding is folded into decoder position 0.

CTranslate2: `ct2-transformers-converter --model DIR --output_dir DIR-ct2`; pass `beam_size={beam}` and
`length_penalty={alpha:g}` (the recipe's; CTranslate2's defaults are 2 and 1; its length penalty is transformers'
length^alpha, not GNMT's), `suppress_sequences={json.dumps(ct2_suppress_sequences(config), ensure_ascii=False)}` to `translate_batch` to forbid what tfm's search forbids (`<unk>` included: tfm never outputs it; the generation config suppresses it for `generate` too),
`min_decoding_length=0` (its default is 1) to allow what it allows: an empty translation, and
`max_decoding_length` = the batch's longest `len(tokens)` (`</s>` included) {_signed(ct2_length_offset(max_len_offset))}: tfm outputs at most the source's pieces +
{max_len_offset} tokens, then `</s>`; CTranslate2's maximum counts the tokens it outputs, and one that reaches it has no `</s>`. A
translation that never ends otherwise runs on to the limit, which is the batch's: cut each output to its own
`len(tokens) {_signed(ct2_length_offset(max_len_offset))}` tokens (greedy decoding then gives tfm's translations exactly). At most `max_decoding_length={config.max_positions - 1}`: the decoder has {config.max_positions} positions (the start token takes
the first), and past them CTranslate2's default limit of 256 ends in "No position encodings are defined for
positions >= {config.max_positions}" where a translation runs on.

## Saving it again

transformers leaves MarianMT's position tables out of what it saves (`save_pretrained`, `push_to_hub`, a
`Trainer`'s checkpoints) and rebuilds the standard sinusoids when it loads a model without them. Row 0 of this
model's decoder table is not the standard one (it holds tfm's `<s>` embedding), so a model saved that way loads
without an error and translates differently. Keep the tables whenever you save it:

```python
model._keys_to_ignore_on_save = None  # keep both position tables in model.safetensors
model.save_pretrained("DIR2")
tokenizer.save_pretrained("DIR2")
```

## Data

{data}
"""
