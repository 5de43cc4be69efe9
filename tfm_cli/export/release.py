"""The release format: a self-contained directory to hand over, loadable by `tfm translate --model DIR`.

    model.safetensors   the exported weights (no optimizer state), fp32 or converted to fp16/bf16; its metadata
                        carries the tfm version, the model config and the tokenizer's hash, as a checkpoint does
    config.json         the ModelConfig
    tokenizer.json      the tokenizer the model was trained with (loading refuses any other: hash check)
    recipe.yaml         the resolved training recipe, when the run has one (its `decode:` section is the default)
    README.md           a model card: the model, the recipe, the corpus and its attribution, the dev scores

The check loads the release back through the same loader users get (`Translator.load(DIR)`) and compares it
with the source weights: logits and translations on the dev sentences.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tfm_cli import __version__
from tfm_cli.checkpoint import LoadedModel, save_weights, weights_state
from tfm_cli.errors import TfmError, shell_word
from tfm_cli.export.common import Check, ExportResult, agreement, max_abs_diff, training_data_lines
from tfm_cli.files import TEXT_ERRORS, json_value
from tfm_cli.runs import FINAL
from tfm_cli.scoring import AUTO, bleu_metric
from tfm_cli.tokenizer import Tokenizer

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


Progress = Callable[[str, int], contextlib.AbstractContextManager[Callable[[int], None] | None]]


def export_release(
    loaded: LoadedModel, out: Path, sources: list[str], dtype: str = "fp32", progress: Progress | None = None
) -> ExportResult:
    """Write a release of `loaded` into the empty directory `out` and verify it.

    Args:
        loaded: the model to release, with its tokenizer and run directory.
        out: an empty directory to write into.
        sources: source sentences the translation check runs on.
        dtype: "fp32" (exact), "fp16" or "bf16" (half the size; the check reports how much changes).
        progress: called with what is translated and how many sentences around each translating (the checks; an
            fp16/bf16 release's scoring of the whole dev set): a context manager yielding a per-batch callback.

    Raises:
        TfmError: an unknown dtype.
    """
    if dtype not in DTYPES:
        raise TfmError(f"unknown release dtype {dtype!r}", hint=f"choose one of: {', '.join(DTYPES)}")
    from tfm_cli.translator import InputTruncatedWarning, Translator

    model, tokenizer, run_dir = loaded.model, loaded.tokenizer, loaded.run_dir
    if (run_dir / "recipe.yaml").is_file():  # read here, so that a broken one is named where it is, not in staging
        from tfm_cli.recipe import load_recipe

        load_recipe(run_dir / "recipe.yaml")
    weights = weights_state(model)
    if dtype == "fp16":  # a weight beyond fp16's range would be released as an infinity
        for name, t in weights.items():
            largest = float(t.abs().max()) if t.is_floating_point() and t.numel() else 0.0
            if largest > torch.finfo(torch.float16).max:
                raise TfmError(
                    f"{name} holds values up to {largest:.4g}, beyond fp16's range (65,504): a fp16 release would "
                    "hold infinities there",
                    hint="use --dtype bf16 (fp32's range, half the size) or fp32",
                )
    state = {name: t.to(DTYPES[dtype]) if t.is_floating_point() else t for name, t in weights.items()}
    save_weights(out / FINAL, state, model.config, tokenizer.sha256, loaded.step, dtype=dtype, source=loaded.path.name)
    (out / "config.json").write_text(json.dumps(model.config.to_dict(), indent=2) + "\n", encoding="utf-8")
    shutil.copyfile(run_dir / "tokenizer.json", out / "tokenizer.json")
    files = [FINAL, "config.json", "tokenizer.json"]
    if (run_dir / "recipe.yaml").is_file():
        shutil.copyfile(run_dir / "recipe.yaml", out / "recipe.yaml")
        files.append("recipe.yaml")

    original = Translator(model, tokenizer, precision="fp32", path=loaded.path, step=loaded.step)
    released = Translator.load(out, device="cpu", precision="fp32")  # the loader users get, hash check included
    settings = _decode_settings(run_dir)
    checks = [_logit_check(model, released.model, dtype)]
    limit = model.config.max_positions - 1
    cut = sum(len(tokenizer.encode(s)) > limit for s in sources)
    with warnings.catch_warnings():  # both sides cut an over-long sentence alike, as tfm translate does: said once
        warnings.simplefilter("ignore", InputTruncatedWarning)
        what = getattr(sources, "what", "dev")
        with _watch(progress, f"check: the source weights translate {what} sentences", len(sources)) as advance:
            expected = original.translate(sources, progress=advance, **settings)
        with _watch(progress, f"check: the {dtype} release translates {what} sentences", len(sources)) as advance:
            got = released.translate(sources, progress=advance, **settings)
        scores = _dev_scores(loaded, released, dtype, progress)
    name = f"translations on {len(sources)} {what} sentences (beam {settings.get('beam', 4)})"
    if dtype == "fp32":
        checks.append(agreement(name, [t.text for t in expected], [t.text for t in got]))
    else:  # rounding the weights may change a few translations: measured and reported, not required
        check = agreement(name, [t.text for t in expected], [t.text for t in got], minimum=0.0)
        checks.append(Check(check.name, check.value, True, "reported"))

    example = next((s for s in sources if 0 < len(s) <= 80 and '"' not in s), "...")
    (out / "README.md").write_text(_model_card(loaded, dtype, scores, example), encoding="utf-8", errors=TEXT_ERRORS)
    files.append("README.md")
    size = (out / FINAL).stat().st_size
    notes = [f"model.safetensors: {size / 2**20:,.1f} MiB ({dtype})", f"translate with: tfm translate --model {shell_word(out)}"]
    if scores and "unscored" in scores:
        notes.append(f"the model card has no dev scores: {scores['unscored']}")
    if cut:
        notes.append(f"{cut} {getattr(sources, 'what', 'dev')} sentences longer than the model takes ({limit} tokens) were cut to it for the checks")
    return ExportResult("release", out, loaded.path, files, checks, notes=notes)


def _watch(progress: Progress | None, what: str, sentences: int) -> contextlib.AbstractContextManager:
    """What `progress(what, sentences)` gives, as a context manager: one (the CLI's bar), or, from a plain callback
    (a `print`, which broke the export at its first translating: "'NoneType' object does not support the context
    manager protocol"), its result as the per-batch function where it is one."""
    if progress is None:
        return contextlib.nullcontext(None)
    given = progress(what, sentences)
    if hasattr(given, "__enter__") and hasattr(given, "__exit__"):
        return given
    return contextlib.nullcontext(given if callable(given) else None)


def _decode_settings(run_dir: Path) -> dict[str, Any]:
    from tfm_cli.translator import DecodeSettings

    d = DecodeSettings.from_run(run_dir)
    return {"beam": d.beam, "alpha": d.alpha, "max_len_offset": d.max_len_offset, "min_len": d.min_len, "split_sentences": d.split_sentences, "verbatim": d.verbatim}


@torch.no_grad()
def _logit_check(reference: torch.nn.Module, released: torch.nn.Module, dtype: str, batches: int = 4) -> Check:
    """Teacher-forced logits of the released weights vs the source weights on random padded batches."""
    from tfm_cli.model.masks import causal_mask

    cfg = reference.config
    gen = torch.Generator().manual_seed(0)
    worst = 0.0
    for b in range(batches):
        # within the position table (a model of max_positions 16 raised a ValueError at the 17-token batch)
        src_len, tgt_len = min(5 + 4 * b, cfg.max_positions), min(3 + 3 * b, cfg.max_positions)
        src = torch.randint(4, cfg.vocab_size, (3, src_len), generator=gen)
        src[1, src_len // 2 :] = cfg.pad_id  # one padded row
        tgt = torch.randint(4, cfg.vocab_size, (3, tgt_len), generator=gen)
        src_mask = (src != cfg.pad_id)[:, None, None, :]
        tgt_mask = causal_mask(tgt_len, src.device)
        diff = max_abs_diff(reference(src, tgt, src_mask, tgt_mask), released(src, tgt, src_mask, tgt_mask))
        worst = diff if math.isnan(diff) else max(worst, diff)  # max(0.0, nan) is 0.0: NaN logits passed as equal
    name = f"logits vs source weights, max |diff| ({batches} random batches)"
    if dtype == "fp32":
        return Check(name, f"{worst:.3g}", worst == 0.0, "== 0 (same weights)")
    return Check(name, f"{worst:.3g}", True, f"reported ({dtype} weights)")


def _dev_scores(loaded: LoadedModel, released, dtype: str, progress: Progress | None = None) -> dict[str, Any] | None:
    """Dev BLEU/chrF for the model card: the run's own final evaluation when the released weights are the run's
    final model in fp32 and the summary is of their step, else a fresh evaluation of the release on the run's dev
    set; None without a dev set, and {"unscored": why} when the run's BLEU tokenizer cannot be set up here. (A
    resume replaces model.safetensors seconds before summary.json: killed between the two, the summary was the
    previous session's, and its scores went onto the card of the newer weights.)"""
    summary = loaded.run_dir / "summary.json"
    if dtype == "fp32" and loaded.path.name == FINAL and summary.is_file():
        try:
            record = json_value(summary.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record = {}
        dev = (record.get("dev") or {}) if isinstance(record, dict) else {}
        if isinstance(dev, dict) and "bleu" in dev and record.get("steps") == loaded.step:
            return {**dev, "how": f"tfm train's final evaluation, {record.get('precision', 'fp32')} arithmetic"}
    pairs, bleu_tokenize = _dev_pairs(loaded.run_dir, loaded.tokenizer)
    if not pairs:
        return None
    if bleu_tokenize != AUTO:  # the run's choice, set up before any translating
        try:
            bleu_metric(bleu_tokenize)
        except TfmError as error:  # MeCab missing here (the run trained where it was): the release stands unscored
            return {"unscored": f"{error}{f' ({error.hint})' if error.hint else ''}"}
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    with _watch(progress, f"model card: the {dtype} release scores the dev set", len(sources)) as advance:
        result = released.score(sources, references, bleu_tokenize, progress=advance, **_decode_settings(loaded.run_dir))
    result.pop("translations")
    return {**result, "how": "evaluated by tfm export on the run's dev set, fp32 arithmetic"}


def _dev_pairs(run_dir: Path, tokenizer: Tokenizer) -> tuple[list[tuple[str, str]], str]:
    """The run's dev pairs and the BLEU tokenizer its training scored them with (none, "auto": no recipe)."""
    from tfm_cli.corpus import read_pairs
    from tfm_cli.recipe import load_recipe

    try:
        recipe = load_recipe(run_dir / "recipe.yaml")
        spec = recipe.data.dev
        # the pairs the run's dev evaluations scored (`load_dev`): a side empty once normalised is left out
        pairs = [(s, t) for _, s, t in read_pairs(spec) if tokenizer.normalize(s) and tokenizer.normalize(t)] if spec else []
        return pairs, recipe.train.bleu_tokenize
    except (TfmError, OSError, ValueError):
        return [], "auto"


def _trained_for(loaded: LoadedModel) -> str:
    """How the model was trained, for the card: its steps, and the model a fine-tuning run started from (the card
    said "trained for 40 steps" of a model fine-tuned for 40 from one of 300)."""
    from tfm_cli.recipe import load_recipe

    steps = f"{loaded.step:,} step{'s' if loaded.step != 1 else ''}"
    try:
        init_from = load_recipe(loaded.run_dir / "recipe.yaml").train.init_from
    except (TfmError, OSError, ValueError):
        init_from = None
    return f"fine-tuned for {steps} from `{init_from}`" if init_from else f"trained for {steps}"


def _model_card(loaded: LoadedModel, dtype: str, scores: dict[str, Any] | None, example: str) -> str:
    cfg = loaded.model.config
    recipe_file = loaded.run_dir / "recipe.yaml"
    recipe_text = recipe_file.read_text(encoding="utf-8") if recipe_file.is_file() else ""
    name = loaded.run_dir.name
    lines = [
        f"# {name}: a Transformer translation model (tfm {__version__})",
        "",
        'An encoder-decoder Transformer ("Attention Is All You Need", Vaswani et al., 2017) trained with `tfm train`.',
        "",
        "## Use",
        "",
        "From the directory that holds this card (or give its path to `--model`):",
        "",
        "```",
        f'tfm translate --model . "{example}"',
        f'tfm inspect-attn --model . "{example}"',
        "```",
        "",
        "```python",
        "from tfm_cli import Translator",
        'translator = Translator.load(".")',
        f'print(translator.translate("{example}"))',
        "```",
        "",
        "## Model",
        "",
        f"- parameters: {loaded.model.num_parameters():,}{' (tied embeddings counted once)' if cfg.tie_embeddings else ''}; "
        f"weights stored as {dtype}",
        f"- {_trained_for(loaded)}; exported from `{loaded.path.name}` of run `{name}`",
        f"- d_model {cfg.d_model}, d_ff {cfg.d_ff}, {cfg.n_heads} head{'s' if cfg.n_heads != 1 else ''}, "
        f"{cfg.n_enc_layers}+{cfg.n_dec_layers} layers, "
        f"{cfg.norm}-norm, {cfg.positions} positions, vocabulary {cfg.vocab_size:,} (joint BPE)",
        f"- tokenizer.json sha256 {loaded.tokenizer.sha256}",
        "",
        "## Data",
        "",
        *training_data_lines(loaded.run_dir),
        "",
        "## Evaluation",
        "",
    ]
    if scores and "unscored" in scores:
        lines.append(f"- not scored on the run's dev set by tfm export: {scores['unscored']}")
    elif scores:
        lines += [
            f"- dev BLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f} on {scores.get('sentences', '?')} sentences "
            f"({scores['how']})",
            f"- sacrebleu signatures: `{scores.get('bleu_signature', '?')}`, `{scores.get('chrf_signature', '?')}`",
        ]
    else:
        lines.append("- no dev set was available to score this model")
    if recipe_text:
        lines += ["", "## Recipe", "", "```yaml", recipe_text.rstrip(), "```"]
    return "\n".join(lines) + "\n"
