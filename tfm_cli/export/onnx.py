"""`tfm export --format onnx`: the model as two ONNX graphs, and `OnnxEngine`, which runs them with onnxruntime.

An export directory holds:

    encoder.onnx     src (B, S) int64, right-padded, each row ending with EOS
                     -> cross_k.i, cross_v.i (B, H, S, Dh) for each decoder layer i: the cross-attention keys and
                        values, computed once per source (nothing else in decoding needs the encoder memory)
    decoder.onnx     one incremental decoder step:
                     last (B, 1) int64, position (1,) int64, src_mask (B, S) bool, cross_k.i, cross_v.i,
                     past_k.i, past_v.i (B, H, t, Dh)
                     -> logits (B, V), present_k.i, present_v.i (B, H, t + 1, Dh)
                     t = 0 at the first step: an empty past (onnxruntime takes zero-length axes)
    config.json      the ModelConfig
    tokenizer.json   the run's tokenizer; onnx.json records its hash, and loading refuses any other
    onnx.json        what the loader checks: format, tokenizer hash, training step, opset
    recipe.yaml      the run's recipe, when it has one: its `decode:` section gives the default decode settings

The graphs are traced from small wrapper modules that reuse the model's own modules (embedding tables, decoder
layers, `LayerCache`); nothing of the model is written twice. Axes B, S and t are dynamic. Weights are fp32 and
embedded in the .onnx files. K/V are one input and output per layer rather than stacked (L, B, H, t, Dh): splitting
and re-stacking the stacks cost onnxruntime 11% of a step (tiny recipe's model, 200 rows, a past of 20, 1 thread).

`OnnxEngine` is one more backend of the search in decoding.py (start a batch, step to the next logits): greedy,
beam and n-best search run on it unchanged, and `Translator.load(EXPORT_DIR)` picks it for an export directory.
"""

from __future__ import annotations

import json
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tfm_cli import __version__
from tfm_cli.checkpoint import LoadedModel
from tfm_cli.errors import CheckpointError, TfmError, shell_word
from tfm_cli.export.common import Check, ExportResult, agreement, max_abs_diff, require
from tfm_cli.files import json_value
from tfm_cli.model import KVCache, LayerCache, ModelConfig, Transformer
from tfm_cli.model.masks import padding_mask
from tfm_cli.tokenizer import Tokenizer

ENCODER, DECODER, MANIFEST = "encoder.onnx", "decoder.onnx", "onnx.json"
GRAPHS = (ENCODER, DECODER)
FORMAT = "tfm-onnx"
DEFAULT_OPSET = 17  # LayerNormalization is one op from 17 on; onnxruntime >= 1.13 runs it
OPSETS = range(14, 22)  # what the TorchScript exporter writes for this model (scaled_dot_product_attention needs 14)
# Graph outputs may differ from PyTorch's by 1e-4 of their largest magnitude (and 1e-4 below magnitude 1). That is
# fp32 rounding, not a bug: on the test suite's trained model PyTorch fp32 itself is 1e-4 off its fp64 result for a
# 60-token source, and onnxruntime is within 6e-5 of PyTorch there.
TOLERANCE = 1e-4


def kv_names(prefix: str, n_layers: int) -> list[str]:
    """prefix_k.0, prefix_v.0, prefix_k.1, ...: one (B, H, length, Dh) tensor per layer, keys then values."""
    return [f"{prefix}_{kv}.{i}" for i in range(n_layers) for kv in "kv"]


def graph_names(n_layers: int) -> dict[str, dict[str, list[str]]]:
    """The inputs and outputs of both graphs, in order."""
    return {
        "encoder": {"inputs": ["src"], "outputs": kv_names("cross", n_layers)},
        "decoder": {
            "inputs": ["last", "position", "src_mask", *kv_names("cross", n_layers), *kv_names("past", n_layers)],
            "outputs": ["logits", *kv_names("present", n_layers)],
        },
    }


def _dynamic_axes(n_layers: int) -> dict[str, dict[int, str]]:
    """Every input's and output's dynamic axes: B, S, and the past t (t + 1 for the present)."""
    axes = {"src": {0: "batch", 1: "src_len"}, "src_mask": {0: "batch", 1: "src_len"}, "last": {0: "batch"}, "logits": {0: "batch"}}
    for prefix, length in (("cross", "src_len"), ("past", "past_len"), ("present", "present_len")):
        axes |= {name: {0: "batch", 2: length} for name in kv_names(prefix, n_layers)}
    return axes


# --- the graphs: wrappers around the model's own modules --------------------------------------------------------


class EncoderGraph(nn.Module):
    """src (B, S) -> each decoder layer's cross-attention keys and values: 2L x (B, H, S, Dh)."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: torch.Tensor) -> tuple[torch.Tensor, ...]:
        src_mask = padding_mask(src, self.model.config.pad_id)  # (B, 1, 1, S)
        memory = self.model.encode(src, src_mask)  # (B, S, D)
        cross = []
        for layer in self.model.decoder_layers:
            # What MultiHeadAttention computes into LayerCache.cross_k/v on the first decoding step.
            attn = layer.cross_attn
            cross += [attn._split(attn.w_k(memory)), attn._split(attn.w_v(memory))]  # (B, H, S, Dh) each
        return tuple(cross)


class DecoderStepGraph(nn.Module):
    """One decoder step over the K/V cache: the new token's logits and the self-attention K/V grown by one."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        last: torch.Tensor,  # (B, 1) the previous token
        position: torch.Tensor,  # (1,) its position index: how many tokens were decoded before it
        src_mask: torch.Tensor,  # (B, S) bool, True = real source token
        *kv: torch.Tensor,  # cross_k.0, cross_v.0, ... (B, H, S, Dh), then past_k.0, past_v.0, ... (B, H, t, Dh)
    ) -> tuple[torch.Tensor, ...]:
        n = len(self.model.decoder_layers)
        cross, past = kv[: 2 * n], kv[2 * n :]
        embed = self.model.tgt_embed
        # Embeddings.forward takes its offset as a Python int, which tracing would freeze into the graph: look up
        # the same tables here with the position as a tensor. (Dropout is the identity in eval mode.)
        x = embed.token(last) * embed.scale  # (B, 1, D)
        x = x + (embed.pe.index_select(0, position) if embed.learned is None else embed.learned(position))
        mask = src_mask[:, None, None, :]  # (B, 1, 1, S)
        present = []
        for i, layer in enumerate(self.model.decoder_layers):
            cache = LayerCache(past[2 * i], past[2 * i + 1], cross[2 * i], cross[2 * i + 1])
            # The memory argument only selects cross-attention: its keys and values come from the cache.
            x, _, _ = layer(x, cross[2 * i], mask, None, cache)
            present += [cache.self_k, cache.self_v]  # (B, H, t + 1, Dh) each
        logits = self.model.generator(self.model.decoder_norm(x))[:, -1]  # (B, V)
        return (logits, *present)


def _example_inputs(config: ModelConfig, batch: int, src_len: int, past: int, seed: int = 0):
    """Random decoder-step inputs: sources with padding, tokens, and 2L random K/V of `past` positions."""
    g = torch.Generator().manual_seed(seed)
    src = random_sources(config, batch, src_len, g)
    last = torch.randint(3, config.vocab_size, (batch, 1), generator=g)
    shape = (batch, config.n_heads, past, config.d_k)
    return src, last, [torch.randn(shape, generator=g) for _ in range(2 * config.n_dec_layers)]


def random_sources(config: ModelConfig, batch: int, length: int, g: torch.Generator) -> torch.Tensor:
    """(B, S) random token ids, each row EOS-terminated and right-padded to S (row 0 fills it)."""
    src = torch.full((batch, length), config.pad_id, dtype=torch.long)
    for row in range(batch):
        n = length if row == 0 else int(torch.randint(1, length + 1, (1,), generator=g))
        src[row, : n - 1] = torch.randint(3, config.vocab_size, (n - 1,), generator=g)
        src[row, n - 1] = config.eos_id
    return src


def _export_graph(module: nn.Module, args: tuple, path: Path, names: dict[str, list[str]], axes, opset: int):
    """Trace `module` with the TorchScript exporter (fast, and exact for this model) into `path`.

    torch's newer dynamo exporter also handles these graphs (the same outputs, the same speed in onnxruntime),
    but takes ~5 s per graph against ~0.3 s; this one warns that it is deprecated, which is noise here.
    """
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the exporter's deprecation notice; tracer notes on constant checks
        torch.onnx.export(
            module, args, str(path), dynamo=False, input_names=names["inputs"], output_names=names["outputs"],
            dynamic_axes={k: v for k, v in axes.items() if k in names["inputs"] + names["outputs"]},
            opset_version=opset, do_constant_folding=True,
        )


# --- export ---------------------------------------------------------------------------------------------------


def export_onnx(loaded: LoadedModel, out: Path, sources: list[str], opset: int | None = None) -> ExportResult:
    """Write the encoder and decoder-step graphs with config, tokenizer and recipe, then check them.

    Checks: the graphs' outputs against the PyTorch model on random padded batches (encoder) and random inputs
    with a non-empty past (decoder step), then beam search with the run's decode settings on `sources` through
    onnxruntime against PyTorch: every translation must be the same.

    Args:
        loaded: the model to export (`tfm_cli.checkpoint.load_model`).
        out: an empty directory to write into.
        sources: sentences to translate for the agreement check.
        opset: ONNX opset version (default 17).

    Raises:
        TfmError: onnx or onnxruntime is not installed (naming the extra), or an opset out of range.
    """
    onnx = require("onnx", "onnx", "the ONNX export")
    require("onnxruntime", "onnx", "the ONNX export")
    opset = DEFAULT_OPSET if opset is None else opset
    if opset not in OPSETS:
        raise TfmError(f"opset {opset} is not supported", hint=f"use {OPSETS.start} to {OPSETS.stop - 1} (default {DEFAULT_OPSET})")
    out = Path(out)
    model = loaded.model.eval()
    config = model.config
    started = time.perf_counter()

    # Trace with sizes that differ from one another and from 0 and 1, so that no axis is taken for another.
    src, last, past = _example_inputs(config, 3, 5, 2)
    encoder, decoder = EncoderGraph(model).eval(), DecoderStepGraph(model).eval()
    with torch.no_grad():
        cross = encoder(src)
    names, axes = graph_names(config.n_dec_layers), _dynamic_axes(config.n_dec_layers)
    _export_graph(encoder, (src,), out / ENCODER, names["encoder"], axes, opset)
    step_args = (last, torch.tensor([2]), src != config.pad_id, *cross, *past)
    _export_graph(decoder, step_args, out / DECODER, names["decoder"], axes, opset)
    for name in GRAPHS:
        graph = onnx.load(str(out / name))
        onnx.checker.check_model(graph)
        _set_metadata(graph, {"tfm_format": FORMAT, "tokenizer_sha256": loaded.tokenizer.sha256,
                              "config": json.dumps(config.to_dict())})
        onnx.save(graph, str(out / name))

    (out / "config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n", encoding="utf-8")
    loaded.tokenizer.save(out / "tokenizer.json")
    files = [ENCODER, DECODER, "config.json", "tokenizer.json"]
    recipe = loaded.run_dir / "recipe.yaml"
    if recipe.is_file():
        shutil.copyfile(recipe, out / "recipe.yaml")
        files.append("recipe.yaml")
    from tfm_cli.translator import DecodeSettings

    settings = DecodeSettings.from_run(loaded.run_dir)
    manifest = {
        "format": FORMAT, "tfm_version": __version__, "opset": opset, "step": loaded.step,
        "source": str(loaded.path), "tokenizer_sha256": loaded.tokenizer.sha256,
        "decode": {"beam": settings.beam, "alpha": settings.alpha, "max_len_offset": settings.max_len_offset,
                   "min_len": settings.min_len, "split_sentences": settings.split_sentences, "verbatim": settings.verbatim},
        **names,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    files.append(MANIFEST)
    # for onnxruntime without tfm: tfm's beam and greedy search in numpy, and what the graphs take and give
    shutil.copyfile(Path(__file__).with_name("onnx_translate.py"), out / "translate.py")
    shutil.copyfile(Path(__file__).parents[1] / "sentences.py", out / "sentences.py")  # translate.py splits lines as tfm does
    (out / "README.md").write_text(_readme(config, opset, settings), encoding="utf-8")
    files += ["translate.py", "sentences.py", "README.md"]
    written = time.perf_counter() - started

    engine = OnnxEngine.open(out, config)
    checks = [
        _check_encoder(model, engine),
        *_check_decoder(model, engine),
        *_check_translations(loaded, engine, sources),
    ]
    size = sum((out / name).stat().st_size for name in GRAPHS) / 2**20
    return ExportResult(
        format="onnx", path=out, source=loaded.path, files=files, checks=checks,
        notes=[
            f"encoder.onnx + decoder.onnx: {size:.1f} MiB, fp32, opset {opset}, written in {written:.1f} s",
            f"translate with onnxruntime: tfm translate --model {shell_word(out)} (engine auto picks onnxruntime for it)",
            f"Python: Translator.load({str(out)!r}), or OnnxEngine.open(...) for the searches in tfm_cli.decoding",
        ],
    )


def _readme(config: ModelConfig, opset: int, settings) -> str:
    """The export's README.md: its files, the two graphs' inputs and outputs, and how a search runs them."""
    layers, heads, dk = config.n_dec_layers, config.n_heads, config.d_k
    last = layers - 1
    return f"""# A tfm model as ONNX graphs

Exported by `tfm export --format onnx` (tfm {__version__}, opset {opset}, fp32): the Transformer split into an
encoder graph and a decoder graph of one step over a key/value cache, as CTranslate2 and Hugging Face's Optimum
split theirs.

| file | what |
| --- | --- |
| encoder.onnx | source ids -> every decoder layer's cross-attention keys and values, computed once a sentence |
| decoder.onnx | one decoding step: the previous token -> the next token's logits, and the cache one position longer |
| config.json | the architecture ({config.n_enc_layers}+{layers} layers, d_model {config.d_model}, {heads} heads, vocabulary {config.vocab_size:,}) |
| tokenizer.json | the tokenizer (Hugging Face `tokenizers`): normalisation, the joint BPE, the byte fallback |
| onnx.json | the graphs' input and output names, and the run's decode settings |
| translate.py | a translator of stdin (beam or greedy search, batched) with onnxruntime, numpy and tokenizers alone (no tfm, no torch) |
| sentences.py | tfm's sentence splitting, which translate.py uses: a line of several sentences is translated a sentence at a time (and one in capitals or in quotes as tfm does{", its numbers given as the placeholders the model copies and written back" if config.reads_placeholders else ""}) |

## Translate

With tfm: `tfm translate --model THIS_FOLDER` (beam search with the run's settings, beam {settings.beam}, alpha
{settings.alpha:g}), or `Translator.load("THIS_FOLDER")` in Python. Without it:

```
pip install onnxruntime numpy tokenizers
python translate.py < source.txt > translations.txt
```

translate.py searches as `tfm translate --model THIS_FOLDER` does, with the same translations: beam search with the
run's beam and length penalty (`--beam K` and `--alpha A` for others, `--greedy` for greedy search), over batches
of sentences of similar length, translating whatever lines have come whenever reading on would wait (a program
that writes a line and waits for its translation gets it). Like tfm, it translates a line of several sentences a sentence at a time (sentences.py) and joins
their translations, as the run's `decode.split_sentences` says ({'on' if settings.split_sentences else 'off'}; `python
translate.py --no-split-sentences` keeps each line whole); a sentence longer than the model takes is cut to its
length, with a warning on stderr, as tfm cuts it. Read it for the whole protocol; in short:

## The graphs

Ids: `<pad>` {config.pad_id}, `<s>` {config.bos_id}, `</s>` {config.eos_id}, `<unk>` 3. B is the batch, S the source
length, t the tokens decoded so far, H = {heads} heads of Dh = {dk}.

- **encoder.onnx**: `src` (B, S) int64, each row the tokenizer's ids of a sentence (`encode(text,
  add_special_tokens=False)`, at most {config.max_positions - 1} of them) followed by `</s>` ({config.eos_id}),
  right-padded with {config.pad_id} -> `cross_k.0`, `cross_v.0`, ... `cross_k.{last}`, `cross_v.{last}`, float32 (B, H, S, Dh).
- **decoder.onnx**: `last` (B, 1) int64, the previous token (`<s>` at the first step); `position` (1,) int64, how
  many tokens came before it (0 at the first step); `src_mask` (B, S) bool, True on the source's tokens (not its
  padding); the encoder's `cross_k.i` / `cross_v.i`; `past_k.i` / `past_v.i` (B, H, t, Dh), the cache (t = 0 at
  the first step: arrays of shape (B, {heads}, 0, {dk})) -> `logits` (B, vocabulary) float32, raw (apply a
  log-softmax for scores), and `present_k.i` / `present_v.i` (B, H, t + 1, Dh), the next step's `past`.

tfm's search never outputs `<pad>`, `<s>` or `<unk>` (their scores -inf), ends a translation at `</s>`, and stops
one at source length + {settings.max_len_offset} tokens (at most {config.max_positions - 1}), where `</s>` is forced.
A beam search reorders `past` along the batch axis as beams are chosen; the cross-attention arrays stay per
sentence.
"""


def _set_metadata(graph, values: dict[str, str]) -> None:
    """Record tfm's facts in the graph's metadata_props, so that a graph copied alone still says what it is."""
    del graph.metadata_props[:]
    for key, value in values.items():
        entry = graph.metadata_props.add()
        entry.key, entry.value = key, value


# --- checks against the PyTorch model -----------------------------------------------------------------------------


@torch.no_grad()
def _reference_cross(model: Transformer, src: torch.Tensor) -> list[torch.Tensor]:
    """Cross-attention K/V as the PyTorch model computes them into its cache on the first decoding step."""
    cfg = model.config
    src_mask = padding_mask(src, cfg.pad_id)
    memory = model.encode(src, src_mask)
    cache = model.new_cache()
    model.decode(torch.full((src.size(0), 1), cfg.bos_id), memory, src_mask, None, cache)
    return [t for c in cache.layers for t in (c.cross_k, c.cross_v)]


class _Worst:
    """The largest |diff| over several comparisons, and the largest |value| of PyTorch's side, which sets the limit."""

    def __init__(self) -> None:
        self.diff = self.scale = 0.0

    def add(self, got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
        for a, b in zip(got, want, strict=True):
            self.diff = max(self.diff, max_abs_diff(a, b))
            self.scale = max(self.scale, float(b.abs().max()) if b.numel() else 0.0)

    def check(self, name: str) -> Check:
        bound = TOLERANCE * max(1.0, self.scale)
        return Check(name, f"{self.diff:.2g}", self.diff <= bound, f"<= {bound:.2g} (1e-4 x max(1, largest |value|))")


def _check_encoder(model: Transformer, engine: OnnxEngine) -> Check:
    cfg, worst = model.config, _Worst()
    g = torch.Generator().manual_seed(1)
    shapes = [(1, 1), (1, 9), (4, 7), (8, 23)]
    for batch, length in shapes:
        src = random_sources(cfg, batch, min(length, cfg.max_positions), g)
        worst.add(engine.encode(src), _reference_cross(model, src))
    return worst.check(f"encoder cross-attention K/V vs PyTorch, max |diff| ({len(shapes)} random padded batches)")


def _check_decoder(model: Transformer, engine: OnnxEngine) -> list[Check]:
    """One step from a random past of t positions, against `Transformer.decode` over a `KVCache`."""
    cfg = model.config
    logits_diff, kv_diff = _Worst(), _Worst()
    cases = [(1, 3, 0), (2, 5, 1), (5, 8, 6), (3, 4, min(17, cfg.max_positions - 1))]
    for seed, (batch, length, t) in enumerate(cases):
        src, last, past = _example_inputs(cfg, batch, min(length, cfg.max_positions), t, seed=seed + 10)
        src_mask = padding_mask(src, cfg.pad_id)
        cache = KVCache([LayerCache(past[2 * i], past[2 * i + 1]) for i in range(cfg.n_dec_layers)], length=t)
        with torch.no_grad():
            memory = model.encode(src, src_mask)
            want_logits = model.decode(last, memory, src_mask, None, cache)[:, -1]
        cross = [x for c in cache.layers for x in (c.cross_k, c.cross_v)]
        logits, present = engine.run_step(last, t, src != cfg.pad_id, cross, past)
        logits_diff.add([logits], [want_logits])
        kv_diff.add(present, [x for c in cache.layers for x in (c.self_k, c.self_v)])
    pasts = ", ".join(str(t) for *_, t in cases)
    return [
        logits_diff.check(f"decoder step logits vs PyTorch, max |diff| (past of {pasts} positions)"),
        kv_diff.check("decoder step present K/V vs PyTorch, max |diff|"),
    ]


def _check_translations(loaded: LoadedModel, engine: OnnxEngine, sources: list[str]) -> list[Check]:
    """Beam search with the run's decode settings on `sources`: onnxruntime must give PyTorch's translations."""
    from tfm_cli.decoding import TorchEngine, translate_ids
    from tfm_cli.translator import DecodeSettings

    tok, cfg = loaded.tokenizer, loaded.model.config
    settings = DecodeSettings.from_run(loaded.run_dir)
    ids = [seq[: cfg.max_positions - 1] for seq in tok.encode_batch(sources)]
    ids = [seq for seq in ids if seq]
    options = dict(beam_size=settings.beam, alpha=settings.alpha, max_len_offset=settings.max_len_offset,
                   min_len=settings.min_len, max_tokens=settings.max_tokens)
    timings, results, threads = {}, {}, torch.get_num_threads()
    for name, backend in (("torch", TorchEngine(loaded.model)), ("onnxruntime", engine)):
        started = time.perf_counter()
        results[name] = [h[0] for h in translate_ids(backend, ids, **options)]
        timings[name] = time.perf_counter() - started

    def pieces(hyps) -> list[str]:
        return [" ".join(tok.id_to_piece(t) for t in h.tokens) for h in hyps]

    score_diff = max((abs(a.score - b.score) for a, b in zip(results["torch"], results["onnxruntime"], strict=True)), default=0.0)
    what = f"beam {settings.beam}, alpha {settings.alpha:g}, {len(ids)} {getattr(sources, 'what', 'dev')} sentences"
    return [
        agreement(f"translations, onnxruntime vs PyTorch ({what})", pieces(results["torch"]), pieces(results["onnxruntime"])),
        Check("translation scores, max |diff|", f"{score_diff:.2g}", score_diff <= 1e-3, "<= 0.001"),
        Check(
            f"beam search time, PyTorch vs onnxruntime ({threads} thread{'s' if threads != 1 else ''})",
            f"{timings['torch']:.2f} s vs {timings['onnxruntime']:.2f} s", True,
        ),
    ]


# --- running the graphs: the search's engine ------------------------------------------------------------------------


class OnnxState:
    """Per-row decoder state of the ONNX engine: source mask, cross K/V (computed once), self-attention K/V.

    Arrays stay torch CPU tensors; onnxruntime reads them as NumPy views, and its outputs become tensors without
    copies. `cross` and `past` hold one (B, H, length, Dh) tensor per layer and kind: k.0, v.0, k.1, ...
    """

    def __init__(self, src_mask: torch.Tensor, cross: list[torch.Tensor], past: list[torch.Tensor]) -> None:
        self.src_mask = src_mask  # (B, S) bool
        self.cross, self.past = cross, past
        self.length = 0  # positions decoded so far: the next token's position index

    def reorder(self, index: torch.Tensor) -> None:
        """Row i becomes old row index[i] (beam search); the beams of a sentence share its source side."""
        self.past = [x.index_select(0, index) for x in self.past]

    def select(self, index: torch.Tensor) -> None:
        """Keep only rows `index` of everything (finished sentences leave the batch)."""
        self.reorder(index)
        self.src_mask = self.src_mask.index_select(0, index)
        self.cross = [x.index_select(0, index) for x in self.cross]


class OnnxEngine:
    """The exported graphs run by onnxruntime, as an engine of the search in `tfm_cli.decoding`.

    Build one with `OnnxEngine.open(EXPORT_DIR)`; `greedy_search`, `beam_search` and `translate_ids` take it in
    place of a `Transformer`. Graphs are fp32; the search's tensors live on the CPU.
    """

    name = "onnxruntime"

    def __init__(self, encoder, decoder, config: ModelConfig) -> None:
        """
        Args:
            encoder, decoder: `onnxruntime.InferenceSession`s of encoder.onnx and decoder.onnx.
            config: the exported model's `ModelConfig`.
        """
        self.encoder, self.decoder, self.config = encoder, decoder, config
        self.device = torch.device("cpu")
        self.providers: list[str] = decoder.get_providers()
        names = graph_names(config.n_dec_layers)["decoder"]
        self._step_inputs = names["inputs"]

    @classmethod
    def open(
        cls, directory: str | Path, config: ModelConfig | None = None, device: str | torch.device = "cpu",
        threads: int | None = None,
    ) -> OnnxEngine:
        """Open the graphs of an export directory.

        Args:
            directory: holds encoder.onnx, decoder.onnx and (unless `config` is given) config.json.
            device: "cpu", "cuda[:N]" (needs onnxruntime-gpu), or "auto" (CUDA when onnxruntime and a GPU have it).
            threads: onnxruntime's intra-op threads (default: torch's, `torch.get_num_threads()`).
        """
        ort = require("onnxruntime", "onnx", "the onnxruntime engine")
        directory = Path(directory)
        if config is None:
            config = _read_config(directory / "config.json")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or torch.get_num_threads()
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # errors only: no notes on stderr about node placement
        providers = _providers(ort, device)
        sessions = [_session(ort, directory / name, options, providers, config) for name in GRAPHS]
        engine = cls(*sessions, config)
        engine._opened = (directory.resolve(), config, device, options.intra_op_num_threads, _fingerprint(directory))
        return engine

    def __reduce__(self):
        """Pickled (and deep-copied) as the export it was opened from, opened again: onnxruntime's sessions
        cannot be pickled (a Translator of an ONNX export failed with "cannot pickle ... InferenceSession")."""
        opened = getattr(self, "_opened", None)
        if opened is None:
            raise TypeError(
                "an OnnxEngine made from sessions cannot be pickled or copied; open it with OnnxEngine.open(EXPORT_DIR) "
                "(or Translator.load(EXPORT_DIR)), which can"
            )
        return (_reopen, opened)

    def encode(self, src: torch.Tensor) -> list[torch.Tensor]:
        """(B, S) source ids -> cross-attention K/V, 2L x (B, H, S, Dh) (k.0, v.0, k.1, ...)."""
        return [torch.from_numpy(x) for x in self.encoder.run(None, {"src": _array(src)})]

    def run_step(
        self, last: torch.Tensor, position: int, src_mask: torch.Tensor, cross: list[torch.Tensor], past: list[torch.Tensor]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One decoder step: (B, 1) tokens, (B, S) mask, 2L cross and past K/V -> (B, V) logits, 2L present K/V."""
        values = [last, torch.tensor([position]), src_mask, *cross, *past]
        logits, *present = self.decoder.run(None, {name: _array(x) for name, x in zip(self._step_inputs, values, strict=True)})
        return torch.from_numpy(logits), [torch.from_numpy(x) for x in present]

    def start(self, src: torch.Tensor, src_mask: torch.Tensor) -> OnnxState:
        """Encode (B, S) sources once; the state holds one row per source."""
        cross = self.encode(src)
        mask = src_mask.reshape(src.size(0), -1).cpu()  # (B, S)
        cfg = self.config
        empty = torch.zeros(mask.size(0), cfg.n_heads, 0, cfg.d_k)  # (B, H, 0, Dh): nothing decoded yet
        return OnnxState(mask, cross, [empty] * len(cross))

    def step(self, last: torch.Tensor, state: OnnxState) -> torch.Tensor:
        """(B,) last tokens -> (B, V) logits; the state's K/V grow by one position."""
        logits, state.past = self.run_step(last[:, None], state.length, state.src_mask, state.cross, state.past)
        state.length += 1
        return logits

    def __repr__(self) -> str:
        return f"OnnxEngine({', '.join(self.providers)})"


def _reopen(
    directory: Path, config: ModelConfig, device: str | torch.device, threads: int, fingerprint: dict[str, str] | None = None
) -> OnnxEngine:
    """`OnnxEngine.open` with the arguments an engine was opened with: how a pickled one comes back. The graphs
    must be the ones it was opened from (`fingerprint`, their SHA-256): a worker process that unpickled a
    Translator after `tfm export --force` had replaced the export translated with the new model, unsaid, while
    the parent went on with the old one."""
    engine = OnnxEngine.open(directory, config, device, threads)
    now = engine._opened[-1]
    changed = [name for name in GRAPHS if fingerprint is not None and fingerprint.get(name) != now.get(name)]
    if changed:
        raise CheckpointError(
            f"{directory} holds another export than the one this engine was pickled from (its {' and '.join(changed)} "
            "changed since it was opened: exported again?)",
            hint="load the export again (Translator.load) to translate with it, in every process, or put back the one it was opened from",
        )
    return engine


def _fingerprint(directory: Path) -> dict[str, str]:
    """The SHA-256 of each graph file of an export, as opened (0.1 s for the quickstart model's 49 MB, about 0.5 s
    for the base model's 250 MB, beside the seconds onnxruntime takes to open them)."""
    import hashlib

    found = {}
    for name in GRAPHS:
        digest = hashlib.sha256()
        with open(directory / name, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        found[name] = digest.hexdigest()
    return found


def _session(ort, path: Path, options, providers: list, config: ModelConfig):
    """An onnxruntime session of one graph, refused in one line when the file is damaged or was exported from
    another model than `config` (the config each graph carries in its metadata): either would fail, or translate
    wrongly, only in the middle of a search."""
    try:
        session = ort.InferenceSession(str(path), options, providers=providers)
    except Exception as err:  # onnxruntime's own types (InvalidProtobuf, InvalidGraph, Fail, ...) derive from Exception
        if not type(err).__module__.startswith("onnxruntime"):
            raise
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(
            f"{path} is not a readable ONNX graph, or is truncated or corrupt ({reason})",
            hint=f"copy the export again, or {_export_again(path.parent)}",
        ) from None
    recorded = session.get_modelmeta().custom_metadata_map.get("config")
    if recorded is not None:
        try:
            theirs = json_value(recorded)
        except ValueError:
            theirs = {}
        ours = config.to_dict()
        differ = [f"{k} {theirs.get(k)} in the graph, {v} in config.json" for k, v in ours.items() if theirs.get(k) != v]
        if differ:
            more = f" and {len(differ) - 2} more" if len(differ) > 2 else ""
            raise CheckpointError(
                f"{path} was exported from another model than its config.json describes ({'; '.join(differ[:2])}{more})",
                hint=f"put back the export's own files together, or {_export_again(path.parent)}",
            )
    # The inputs and outputs the search feeds and reads, by name: the encoder's graph saved as decoder.onnx (files
    # mixed up by hand) was a raw onnxruntime ValueError in the middle of the first search.
    role = "encoder" if path.name == ENCODER else "decoder"
    names = graph_names(config.n_dec_layers)
    has = {"inputs": [i.name for i in session.get_inputs()], "outputs": [o.name for o in session.get_outputs()]}
    if has != names[role]:
        other = "decoder" if role == "encoder" else "encoder"
        looks = f", the {other}'s" if has == names[other] else ""
        raise CheckpointError(
            f"{path} is not the {role} graph of this export: its inputs are {', '.join(has['inputs'][:3])}"
            f"{', ...' if len(has['inputs']) > 3 else ''}{looks}",
            hint=f"put back the export's own files together, or {_export_again(path.parent)}",
        )
    return session


def _array(tensor: torch.Tensor):
    """A NumPy view of a CPU tensor (a copy only when it is not contiguous), as onnxruntime wants it."""
    return tensor.detach().cpu().contiguous().numpy()


def _providers(ort, device: str | torch.device) -> list[str]:
    """onnxruntime execution providers for a device name: CUDA first where asked for (or "auto" and present)."""
    name = str(device)
    cuda = "CUDAExecutionProvider" in ort.get_available_providers()
    if name == "auto":
        name = "cuda" if cuda and torch.cuda.is_available() else "cpu"
    if name in ("cpu", "cpu:0"):
        return ["CPUExecutionProvider"]
    if not name.startswith("cuda"):
        raise TfmError(f"device {name!r} is not a device", hint="use one of: auto, cpu, cuda (or cuda:N)")
    if not cuda:
        raise TfmError(
            f"device {name} was asked for, but this onnxruntime has no CUDA support",
            hint="pip install onnxruntime-gpu, or use --device cpu",
        )
    index = int(name.split(":")[1]) if ":" in name else 0
    return [("CUDAExecutionProvider", {"device_id": index}), "CPUExecutionProvider"]


# --- loading an export ------------------------------------------------------------------------------------------------


def is_onnx_export(path: str | Path) -> bool:
    """True for a directory holding the two graphs and no PyTorch model (what engine "auto" runs with onnxruntime)."""
    path = Path(path)
    return path.is_dir() and all((path / name).is_file() for name in GRAPHS) and not (path / "model.safetensors").is_file()


def has_onnx_graphs(path: str | Path) -> bool:
    path = Path(path)
    return path.is_dir() and all((path / name).is_file() for name in GRAPHS)


@dataclass
class LoadedOnnx:
    """An ONNX export opened for translation, with its tokenizer."""

    engine: OnnxEngine
    tokenizer: Tokenizer
    path: Path  # the export directory
    step: int
    manifest: dict[str, Any]


def load_onnx(path: str | Path, device: str | torch.device = "cpu", threads: int | None = None) -> LoadedOnnx:
    """Open an export directory written by `export_onnx`, checking that its files belong together.

    Raises:
        CheckpointError: a missing file, an unreadable manifest or config, or a tokenizer.json other than the one
            the model was trained with.
    """
    path = Path(path)
    for name in (*GRAPHS, MANIFEST, "config.json", "tokenizer.json"):
        if not (path / name).is_file():
            raise CheckpointError(
                f"{path / name} is missing: {path} is not a complete ONNX export",
                hint=_export_again(path),
            )
    try:
        manifest = json_value((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path / MANIFEST} is not readable JSON ({err})", hint=_export_again(path)) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path / MANIFEST} does not describe a tfm ONNX export", hint=_export_again(path))
    config = _read_config(path / "config.json")
    tokenizer = Tokenizer.load(path / "tokenizer.json")
    expected = manifest.get("tokenizer_sha256")
    if tokenizer.sha256 != expected:
        raise CheckpointError(
            f"{path / 'tokenizer.json'} does not match the exported model "
            f"(tokenizer hash {tokenizer.sha256[:12]}, {MANIFEST} expects {str(expected)[:12]})",
            hint="put back the tokenizer.json this model was trained with",
        )
    if config.vocab_size != tokenizer.vocab_size:
        raise CheckpointError(f"{path / 'tokenizer.json'} has {tokenizer.vocab_size} tokens but the model was built for {config.vocab_size}")
    engine = OnnxEngine.open(path, config, device, threads)
    return LoadedOnnx(engine, tokenizer, path, int(manifest.get("step", 0)), manifest)


def _export_again(directory: Path) -> str:
    """The command that replaces a damaged export in place (without --out and --force, `tfm export RUN --format
    onnx` wrote a new one under exports/ and left this one as it was)."""
    return f"export it again: tfm export RUN --format onnx --out {shell_word(directory)} --force"


def _read_config(path: Path) -> ModelConfig:
    try:
        return ModelConfig.from_dict(json_value(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError) as err:
        raise CheckpointError(f"{path}: not a readable model config ({err})", hint=_export_again(path.parent)) from None
