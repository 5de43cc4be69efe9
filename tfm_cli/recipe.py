"""Recipes: everything a training run needs, as typed dataclasses read from YAML.

A recipe file maps straight onto `Recipe` (sections `data`, `tokenizer`, `model`, `train`, `decode`); the
defaults are the paper's base model (Vaswani et al. 2017, Table 3). `load_recipe` reads the YAML, applies
`dotted.key=value` overrides from the command line, converts and validates, and raises one `RecipeError`
listing every problem at once. Each problem line names the dotted key, the bad value, the rule and the fix.

Pure Python (yaml + stdlib): no torch, typer or rich, so the CLI can validate a recipe cheaply.
Corpus paths are only checked to be non-empty strings here; the data layer resolves and reads them.
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import json
import math
import os
import re
import reprlib
import shlex
import types
import typing
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tfm_cli.corpus import corpus_files, corpus_text, is_mixture, map_files
from tfm_cli.errors import CorpusError, RecipeError, RecipeNotFoundError, TfmError, shell_word
from tfm_cli.files import free_name, missing
from tfm_cli.model.config import ModelConfig, config_problems
from tfm_cli.precisions import PRECISIONS
from tfm_cli.scoring import BLEU_TOKENIZERS

PATIENCE_METRICS = ("bleu", "loss")  # dev metrics early stopping can watch
# 256 byte tokens for the byte-level fallback + 4 specials (pad, bos, eos, unk), with some room for merges.
MIN_VOCAB_SIZE = 300
MAX_VOCAB_SIZE = 1_000_000  # the largest NMT vocabularies (NLLB, mBART) hold ~250k; tokenizers aborts far above
MAX_ALPHA = 10.0  # GNMT's length penalty exponent: the paper uses 0.6, and ((5 + |Y|) / 6)^alpha must stay finite
MAX_INT = 2**63 - 1  # the largest 64-bit integer: what torch and the trainer state hold
_NAME_RE = re.compile(r"[A-Za-z0-9._-]+")


# ------------------------------------------------------------------------------------------------------------
# Schema
# ------------------------------------------------------------------------------------------------------------


@dataclass
class DataRecipe:
    """Parallel corpora. A path is one TSV file (source TAB target, may be .gz, .xz or .bz2) or [source_file, target_file].

    `bundled:NAME/FILE` names a corpus shipped inside the package.
    """

    # training pairs; or several corpora, each trained on `weight` times an epoch (2: each pair twice; 0.5: a random
    # half, drawn again each epoch): [{path: train.tsv, weight: 2}, {path: [bt.fr, bt.en]}] (weight 1 if not given)
    train: str | list[str] | list[dict[str, Any]] = "bundled:tatoeba-fr-en/train.tsv.gz"
    dev: str | list[str] | None = "bundled:tatoeba-fr-en/dev.tsv.gz"  # dev pairs for evaluation; null = none
    max_len: int = 256  # pairs with more than max_len - 1 tokens on either side (max_len with </s>) are skipped (and counted)


@dataclass
class TokenizerRecipe:
    """The shared source/target subword tokenizer."""

    path: str | None = None  # an existing tokenizer.json to use; null = train one into the run directory
    vocab_size: int = 37000  # size of the vocabulary to train (the paper's shared EN-DE BPE has ~37000)
    min_frequency: int = 2  # a merge must occur at least this often in the training corpus


@dataclass
class ModelRecipe:
    """Model shapes: exactly `ModelConfig` minus what the tokenizer fixes (vocab_size and the special ids)."""

    d_model: int = 512  # width of every sublayer output and of the embeddings
    d_ff: int = 2048  # inner width of the position-wise feed-forward network
    n_heads: int = 8  # h; each head has d_k = d_v = d_model / h
    n_enc_layers: int = 6  # N for the encoder stack
    n_dec_layers: int = 6  # N for the decoder stack
    dropout: float = 0.1  # P_drop on sublayer outputs and on embeddings + positions
    attn_dropout: float = 0.0  # dropout on attention weights (not in the paper)
    norm: str = "post"  # "post" (the paper: LayerNorm(x + Sublayer(x))) or "pre"
    positions: str = "sinusoidal"  # "sinusoidal" (section 3.5) or "learned"
    max_positions: int = 1024  # longest sequence the position table covers
    tie_embeddings: bool = True  # share source/target embeddings and the output projection (section 3.4)
    # "placeholders": each number in digits (telephone number, numeric date, web or e-mail address) that a pair has
    # on both sides is trained as the placeholder XNUM, which the model learns to copy, and tfm translate gives it
    # them so and writes them back as they were; "as_written":
    # digits as they are (a model trained on a corpus where numbers are rare mistranslates them); null: as the model
    # a run goes on from reads them (train.init_from, a resumed run), else placeholders
    numbers: str | None = None


@dataclass
class TrainRecipe:
    """Optimiser and schedule (paper section 5.3), regularisation (5.4), logging, evaluation, checkpoints."""

    max_tokens: int = 25000  # tokens per batch on each side (source and target, padding included)
    accum_steps: int = 1  # batches per optimizer step (gradient accumulation)
    max_steps: int = 100000  # optimizer steps
    max_time: str | None = None  # training time budget, all sessions (first step to last), e.g. "15m", "2h"; null = none (fairseq --stop-time-hours)
    warmup_steps: int = 4000  # linear warmup of the learning rate, then inverse square root decay
    lr_factor: float = 1.0  # multiplies the paper's schedule d_model^-0.5 * min(step^-0.5, step*warmup^-1.5)
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])  # Adam beta1, beta2
    eps: float = 1e-9  # Adam epsilon
    weight_decay: float = 0.0  # L2 penalty added to the gradient (torch Adam's weight_decay); the paper uses none
    label_smoothing: float = 0.1  # epsilon_ls of section 5.4
    clip_norm: float = 0.0  # max gradient norm; 0 = no clipping
    precision: str = "auto"  # auto | fp32 | bf16 | fp16 (auto: bf16 where the device runs it fast, else fp32)
    compile: bool = False  # torch.compile the model (TorchInductor kernels, dynamic shapes); its first steps wait while it compiles
    seed: int = 1  # seeds python, torch and batch shuffling
    log_every: int = 100  # steps between progress/metrics lines
    eval_every: int = 5000  # steps between dev evaluations (loss, perplexity, BLEU, chrF); 0 = at the end
    eval_sentences: int = 500  # dev sentences decoded for BLEU/chrF at periodic evals (final: all); 0 = all
    bleu_tokenize: str = "auto"  # sacrebleu's BLEU tokenizer (13a, zh, char, intl, ja-mecab, ...); auto: by the dev references' script
    save_every: int = 1500  # steps between checkpoints (~10 minutes at the paper's 0.4 s/step, section 6.1)
    keep_last: int = 5  # checkpoints kept on disk
    # checkpoints averaged into the final model (paper base: 5); 1 = no averaging. With a dev set the average is
    # kept unless the last checkpoint alone scores a higher BLEU (early in training it can score far lower)
    average_last: int = 5
    patience: int = 0  # early stopping: stop after this many dev evaluations without a better score; 0 = off
    patience_metric: str = "bleu"  # what early stopping watches: "bleu" (higher is better) or "loss" (lower)
    # fine-tuning: a trained model to start from (a run directory or a .safetensors file), its tokenizer taken
    # with it; a fresh optimizer and learning-rate schedule from step 0. The model section must match its shape
    # (dropout may differ). null = random initialisation (fairseq --restore-file with --reset-optimizer, Marian
    # --pretrained-model, OpenNMT-py -train_from with -reset_optim all)
    init_from: str | None = None


@dataclass
class DecodeRecipe:
    """Beam search defaults for evaluation and `tfm translate` (paper section 6.1)."""

    beam: int = 4  # beam size
    alpha: float = 0.6  # GNMT length penalty exponent; 0 = no length normalisation
    max_len_offset: int = 50  # max output length = source length + this
    min_len: int = 0  # no end-of-sentence before this many output tokens (0 = no minimum)
    max_tokens: int = 8000  # padded source tokens per translation batch, divided by the beam size
    split_sentences: bool = True  # translate each sentence of a line apart (a model of sentence pairs drops the rest)
    verbatim: bool = False  # give the model each line exactly as written: no splitting, no capitals or frames taken off


@dataclass
class Recipe:
    """A whole training recipe; `name` names the run directory runs/<name>/."""

    name: str = ""  # run name: letters, digits, '.', '_', '-' (required by validation)
    description: str = ""  # free text, e.g. where the numbers come from
    data: DataRecipe = field(default_factory=DataRecipe)
    tokenizer: TokenizerRecipe = field(default_factory=TokenizerRecipe)
    model: ModelRecipe = field(default_factory=ModelRecipe)
    train: TrainRecipe = field(default_factory=TrainRecipe)
    decode: DecodeRecipe = field(default_factory=DecodeRecipe)


SECTIONS: dict[str, type] = {
    "data": DataRecipe,
    "tokenizer": TokenizerRecipe,
    "model": ModelRecipe,
    "train": TrainRecipe,
    "decode": DecodeRecipe,
}
SCALARS: tuple[str, ...] = ("name", "description")  # top-level keys that hold a value, not a section
TOP_LEVEL_KEYS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Recipe))


def _section_fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def recipe_keys() -> list[str]:
    """Every settable dotted key (`name`, `description`, `model.d_model`, ...), e.g. for shell completion."""
    keys = list(SCALARS)
    for section, cls in SECTIONS.items():
        keys += [f"{section}.{name}" for name in _section_fields(cls)]
    return keys


# ------------------------------------------------------------------------------------------------------------
# Types: each field's annotation reduced to a "kind" that the checker and the converter understand
# ------------------------------------------------------------------------------------------------------------


def _kind(hint: Any) -> str:
    """int | float | bool | str | str? | path | path? | corpora | floats."""
    if hint in (int, float, bool, str):
        return hint.__name__
    origin = typing.get_origin(hint)
    if origin is list and typing.get_args(hint) == (float,):
        return "floats"
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        optional = "?" if type(None) in args else ""
        rest = tuple(a for a in args if a is not type(None))
        if rest == (str,):
            return "str" + optional
        if set(rest) == {str, list[str]}:
            return "path" + optional
        if set(rest) == {str, list[str], list[dict[str, Any]]}:
            return "corpora"  # a path, or a mixture of corpora with weights
    raise TypeError(f"recipe field type {hint!r} is not supported")  # a bug in this file, not a user error


_KINDS: dict[str, dict[str, str]] = {
    section: {name: _kind(hint) for name, hint in typing.get_type_hints(cls).items()}
    for section, cls in SECTIONS.items()
}
_KINDS[""] = {name: _kind(typing.get_type_hints(Recipe)[name]) for name in SCALARS}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_finite(v: Any) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:  # an int too large for a float
        return False


def _to_float(v: Any) -> Any:
    """Int -> float; a string float() reads -> float (PyYAML reads `1e-9` as a string); else unchanged."""
    if _is_number(v):
        try:
            return float(v)
        except OverflowError:  # an int too large for a float
            return math.inf
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


class OldYamlInt(str):
    """An integer written `010` or `1:30`: YAML 1.1 (PyYAML) reads the first as octal (8) and the second as base 60
    (90), YAML 1.2 and every other config format as 10 and as text. Kept as written, so that it is not silently
    another number: an integer field refuses it (naming `yaml_1_1`, what PyYAML would have made of it), other
    fields take it as the text it is (a name, a path, a duration, a float)."""

    yaml_1_1: int


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    digits = loader.construct_scalar(node).replace("_", "").lstrip("+-")
    value = loader.construct_yaml_int(node)
    if ":" in digits or (len(digits) > 1 and digits[0] == "0" and digits[1] not in "bx"):
        text = OldYamlInt(loader.construct_scalar(node))
        text.yaml_1_1 = value
        return text
    return value


def _plain(value: Any) -> Any:
    """`OldYamlInt`s as plain strings, the items of a list too (the recipe's values must dump back to YAML). Only
    one level: a list inside a list is wrong in every field, and walking it could take forever (a YAML alias
    bomb: ten lines of `&a [*b, *b, ...]` are a billion items, which the loader shares by reference)."""
    if isinstance(value, OldYamlInt):
        return str(value)
    return [str(v) if isinstance(v, OldYamlInt) else v for v in value] if isinstance(value, list) else value


def _convert(value: Any, kind: str) -> Any:
    if kind == "int":
        return value  # an OldYamlInt stays one: _type_problem explains it
    if kind == "corpora" and is_mixture(value) and len(value) <= MAX_CORPORA:  # each corpus's own values, one level each
        return [_corpus_as_read(item) if isinstance(item, dict) else item for item in value]
    value = _plain(value)
    if kind == "float":
        return _to_float(value)
    if kind == "floats" and isinstance(value, list):
        return [_to_float(v) for v in value]
    return value


_REPR = reprlib.Repr()  # (keyword arguments need Python 3.12)
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 1, 6, 6, 80, 80, 5000


def _shown(value: Any) -> str:
    """repr(value), shortened: a huge list (or a YAML alias bomb, 9^9 strings) would make one endless error line."""
    return _REPR.repr(value)


def _yaml_text(value: Any) -> str:
    """A value as it was written in YAML (null, true, 3, 'text', 2024-01-01), not as Python shows it (None, True,
    datetime.date(2024, 1, 1))."""
    if value is None:
        return "null (empty)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (datetime.date, datetime.datetime)):
        return f"{value.isoformat()} (a date to YAML)"
    return _shown(value)


def _key_text(key: Any) -> str:
    """A mapping key as it was written: YAML reads `null:`, `true:`, `3:` or `2024-01-01:` as other types."""
    return key if isinstance(key, str) else _yaml_text(key).replace("null (empty)", "null")


def _whole_number(value: Any) -> int | None:
    """The integer a float or a number written as text (`1e3`, which YAML 1.1 reads as a string) stands for, if
    it is a whole number within a 64-bit integer; else None."""
    if isinstance(value, bool) or _is_int(value):
        return None
    try:
        number = float(value) if isinstance(value, (str, float)) else None
    except ValueError:
        return None
    if number is None or not math.isfinite(number) or not number.is_integer() or abs(number) > MAX_INT:
        return None
    return int(number)


def _type_problem(key: str, value: Any, kind: str) -> str | None:
    """The problem line when `value` does not have the field's type, else None."""
    bad = f"{key}={_yaml_text(value)}"
    if kind == "int" and isinstance(value, OldYamlInt):
        if ":" in value:
            return f"{key}={value} is a base-60 number to YAML 1.1 ({value.yaml_1_1}): write {value.yaml_1_1}"
        decimal = int(value.replace("_", ""))
        return (f"{key}={value} has a leading zero, which makes it octal to YAML 1.1 ({value.yaml_1_1}): write "
                f"{decimal} without the zero (or {value.yaml_1_1} if octal was meant)")
    if kind == "int":
        if (whole := _whole_number(value)) is not None:  # 1e3 (a string to YAML 1.1), 2000.0: said how
            return f"{key}={_shown(value)} must be an integer: write {whole}"
        if not _is_int(value):
            return f"{bad} must be an integer"
        # torch takes seeds, steps and sizes as 64-bit integers (a larger seed raised an OverflowError)
        return None if value <= MAX_INT else f"{bad} must be at most {MAX_INT:,} (a 64-bit integer)"
    if kind == "float":
        if not _is_number(value):
            return f"{bad} must be a number"
        return None if _is_finite(value) else f"{bad} must be a finite number"
    if kind == "bool":
        return None if isinstance(value, bool) else f"{bad} must be true or false"
    if kind in ("str", "str?"):
        if isinstance(value, str) or (kind == "str?" and value is None):
            return None
        if key == "train.max_time" and _is_number(value) and not isinstance(value, bool):  # quoting it is not enough
            if not _is_finite(value) or value <= 0:  # ".nan" was told to write "nanm"
                return f"{bad} must be a positive time budget with a unit, e.g. 90s, 15m, 2h or 1h30m (or null for no time limit)"
            return f"{bad} needs a unit: write e.g. {value}m for minutes, {value}s or {value}h (or null for no time limit)"
        quote = (" (YAML 1.1 reads yes, no, on, off, true and false as booleans: put it in quotes)" if isinstance(value, bool)
                 else " (put it in quotes)" if isinstance(value, (int, float, datetime.date)) else "")
        if isinstance(value, (dict, list)):  # `description: [draft]`, or `description=a: b` on the command line
            quote = f" (YAML reads {'[...]' if isinstance(value, list) else 'a: b'} as {_a(value)}: put it in quotes)"
        return f"{bad} must be a string{' or null' if kind == 'str?' else ''}{quote}"
    if kind in ("path", "path?"):
        if isinstance(value, str) or (kind == "path?" and value is None):
            return None
        if isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value):
            return None
        null = " (or null for none)" if kind == "path?" else ""
        if is_mixture(value):  # `data.dev: [{path: a.tsv}]`
            null += f" ({key} is one corpus: a list of corpora with weights is for data.train)"
        colon = ""
        if isinstance(value, dict) and len(value) == 1 and None in value.values():  # `bundled:` read as a mapping
            word = next(iter(value))
            colon = (
                f" (YAML reads '{word}:' as a mapping; name a bundled corpus in full, e.g. "
                "bundled:tatoeba-fr-en/train.tsv.gz, and put a path that ends in ':' in quotes)"
            )
        return (
            f"{bad} must be one TSV file path or a list of exactly 2 paths [source_file, target_file]{null}{colon}"
        )
    if kind == "floats":
        if isinstance(value, list) and all(_is_number(v) and _is_finite(v) for v in value):
            return None
        return f"{bad} must be a list of numbers"
    raise AssertionError(kind)


# ------------------------------------------------------------------------------------------------------------
# Validation
# ------------------------------------------------------------------------------------------------------------

# Single-field range rules, checked once the field has the right type: key -> (ok, rule and fix).
_POSITIVE = (lambda v: v >= 1, "must be a positive integer")
_NON_NEGATIVE = (lambda v: v >= 0, "must be >= 0")
_RULES: dict[str, tuple[typing.Callable[[Any], bool], str]] = {
    "data.max_len": (lambda v: v >= 2, "must be at least 2 (one token plus BOS/EOS)"),
    "tokenizer.path": (
        lambda v: v is None or v.strip() != "",
        "must be a tokenizer.json path, or null to train one",
    ),
    "train.init_from": (
        lambda v: v is None or v.strip() != "",
        "must be a trained model to start from (a run directory or a .safetensors file), or null",
    ),
    "tokenizer.vocab_size": (
        lambda v: MIN_VOCAB_SIZE <= v <= MAX_VOCAB_SIZE,
        f"must be between {MIN_VOCAB_SIZE} (the byte fallback needs 256 byte tokens + 4 special tokens, plus room "
        f"for merges) and {MAX_VOCAB_SIZE:,}; e.g. 8000 for a small corpus, 37000 for the paper's",
    ),
    "tokenizer.min_frequency": _POSITIVE,
    "train.max_tokens": _POSITIVE,
    "train.accum_steps": _POSITIVE,
    "train.max_steps": _POSITIVE,
    "train.warmup_steps": (
        lambda v: v >= 1,
        "must be >= 1 (the schedule divides by it; the paper uses 4000)",
    ),
    "train.lr_factor": (lambda v: v > 0, "must be > 0 (1.0 = the paper's schedule)"),
    "train.betas": (
        lambda v: len(v) == 2 and all(0.0 <= b < 1.0 for b in v),
        "must be two numbers in [0, 1), e.g. [0.9, 0.98]",
    ),
    "train.eps": (lambda v: v > 0, "must be > 0 (the paper uses 1e-9)"),
    "train.weight_decay": _NON_NEGATIVE,
    "train.label_smoothing": (lambda v: 0.0 <= v < 1.0, "must be in [0, 1) (the paper uses 0.1)"),
    "train.clip_norm": (lambda v: v >= 0, "must be >= 0 (0 = no clipping)"),
    "train.precision": (lambda v: v in PRECISIONS, f"must be one of: {', '.join(PRECISIONS)}"),
    "train.seed": _NON_NEGATIVE,
    "train.log_every": _POSITIVE,
    "train.eval_every": (lambda v: v >= 0, "must be >= 0 (0 = evaluate only at the end)"),
    "train.eval_sentences": (lambda v: v >= 0, "must be >= 0 (0 = all dev sentences)"),
    "train.bleu_tokenize": (lambda v: v in BLEU_TOKENIZERS, f"must be one of: {', '.join(BLEU_TOKENIZERS)}"),
    "train.save_every": _POSITIVE,
    "train.patience": (lambda v: v >= 0, "must be >= 0 (0 = no early stopping)"),
    "train.max_time": (
        lambda v: v is None or parse_duration(v) is not None,
        "is not a positive duration: write e.g. 90s, 15m, 2h or 1h30m (or null for no time limit)",
    ),
    "train.patience_metric": (lambda v: v in PATIENCE_METRICS, f"must be one of: {', '.join(PATIENCE_METRICS)}"),
    "train.keep_last": _POSITIVE,
    "train.average_last": (lambda v: v >= 1, "must be a positive integer (1 = no averaging)"),
    "decode.beam": _POSITIVE,
    "decode.alpha": (
        lambda v: 0 <= v <= MAX_ALPHA,
        f"must be between 0 and {MAX_ALPHA:g} (0 = no length penalty; the paper uses 0.6)",
    ),
    "decode.max_len_offset": _NON_NEGATIVE,
    "decode.min_len": _NON_NEGATIVE,
    "decode.max_tokens": _POSITIVE,
}


_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")


def parse_duration(text: str) -> float | None:
    """'90s', '15m', '2h', '1h30m', '0.5h' -> seconds (> 0); None if `text` is not such a duration."""
    match = _DURATION.fullmatch(text.strip().lower()) if isinstance(text, str) else None
    if match is None or not any(match.groups()):
        return None
    hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    return total if total > 0 else None


def _path_problem(key: str, value: Any) -> str | None:
    paths = value if isinstance(value, list) else [value]
    if any(p is not None and not p.strip() for p in paths):
        return f"{key}={_shown(value)} must name a file: a path may not be empty"
    return None


MAX_CORPORA = 1000  # corpora in one mixture: a bound on what validation walks (a YAML alias bomb is billions)
MIXTURE_KEYS = ("path", "weight")
MAX_WEIGHT = 1000  # times an epoch trains on one corpus's pairs
_MIXTURE_KNOWN_AS = {  # other toolkits' names for a corpus's keys (OpenNMT-py's data: corpus_1: {path_src, path_tgt})
    "path_src": "path: [SOURCE_FILE, TARGET_FILE] (the two files of a corpus go in one list)",
    "path_tgt": "path: [SOURCE_FILE, TARGET_FILE] (the two files of a corpus go in one list)",
    "src": "path: [SOURCE_FILE, TARGET_FILE] (the two files of a corpus go in one list)",
    "tgt": "path: [SOURCE_FILE, TARGET_FILE] (the two files of a corpus go in one list)",
    "file": "path", "paths": "path", "corpus": "path",
    "weights": "weight", "ratio": "weight", "upsample": "weight", "upsample_primary": "weight",
}
_WEIGHT_RULE = "must be a number above 0: the times an epoch trains on the corpus's pairs (2: each twice; 0.5: a random half)"


def _corpus_as_read(item: dict[str, Any]) -> dict[str, Any]:
    """One corpus of a list as the recipe keeps it: its path a path, its weight a number (a whole one as written,
    1 where none is given: recipe.yaml records it, and `{path: a.tsv}` is `{path: a.tsv, weight: 1}`)."""
    corpus = {k: _convert(v, "path") if k == "path" else v for k, v in item.items()}
    weight = corpus.get("weight", 1)
    corpus["weight"] = weight if _is_int(weight) else _convert(weight, "float")
    return corpus


def _corpus_as_written(item: typing.Mapping[str, Any]) -> dict[str, Any]:
    """One corpus of a list set in code as a recipe file holds it (`_corpus_as_read`): a `Path` as its text, the
    weight 1 where none is given."""
    corpus = {k: _as_written(v, "path" if k == "path" else "float") for k, v in item.items()}
    corpus.setdefault("weight", 1)
    return corpus


def _mixture_problems(key: str, value: list[Any]) -> list[str]:
    """The problems of a list of corpora (`data.train: [{path: a.tsv, weight: 2}, {path: [b.fr, b.en]}]`), one a line,
    each naming the corpus by its place (`data.train[2].weight`)."""
    if len(value) > MAX_CORPORA:
        return [f"{key} lists {len(value):,} corpora: at most {MAX_CORPORA:,} (join small files with cat)"]
    found: list[str] = []
    for n, item in enumerate(value, start=1):
        where = f"{key}[{n}]"
        if not isinstance(item, dict):
            found.append(f"{where}={_yaml_text(item)} must be a corpus written as the others of {key} are, "
                         f"{{path: CORPUS, weight: W}} (e.g. {{path: {_yaml_text(item) if isinstance(item, str) else 'train.tsv'}}})")
            continue
        for name in item:
            if name not in MIXTURE_KEYS:
                known = _MIXTURE_KNOWN_AS.get(str(name).lower())
                close = difflib.get_close_matches(str(name), MIXTURE_KEYS, n=1)
                fix = f"write {known}" if known and " " in known else f"did you mean {where}.{known or close[0]}?" if (
                    known or close) else f"a corpus has {' and '.join(MIXTURE_KEYS)}"
                found.append(f"{where}.{_key_text(name)} is not a key of a corpus; {fix}")
        if "path" not in item:
            found.append(f"{where} needs a path: a TSV file or [source_file, target_file], e.g. {{path: train.tsv, weight: 1}}")
        else:
            path = item["path"]
            found += [p for p in (_type_problem(f"{where}.path", path, "path") or _path_problem(f"{where}.path", path),) if p]
        if "weight" in item:
            weight = item["weight"]
            if not _is_number(weight) or not _is_finite(weight) or weight <= 0:
                found.append(f"{where}.weight={_yaml_text(weight)} {_WEIGHT_RULE}")
            elif weight > MAX_WEIGHT:  # an epoch's pairs are held as indices: 1e9 of them took all the memory
                found.append(f"{where}.weight={_yaml_text(weight)} must be at most {MAX_WEIGHT:,}: an epoch would hold its "
                             "pairs that many times; to weigh a corpus more, give the others a weight below 1")
    return found


def _name_problem(name: str) -> str | None:
    where = "it names runs/<name>/"
    if not name:
        return f"name={name!r} must be a non-empty run name ({where}), e.g. name: base"
    if name in (".", ".."):  # it uses only the characters allowed, and names no folder of its own
        where = "runs/ itself" if name == "." else "no folder inside runs/"
        return f"name={name!r} names no run folder of its own (runs/{name}/ is {where}): use a letter or digit, e.g. name: base"
    if not _NAME_RE.fullmatch(name):
        ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()  # étude -> etude
        fix = re.sub(r"[^A-Za-z0-9._-]+", "-", ascii_name).strip("-.") or "run"
        return f"name={name!r} may only use ASCII letters, digits, '.', '_' and '-' ({where}); try {fix!r}"
    return None


def _validate(recipe: Recipe, skip: set[str]) -> list[str]:
    """Type, range and cross-field checks; keys in `skip` were already reported and are not checked again."""
    problems: list[str] = []
    good: dict[str, Any] = {}  # dotted key -> value, for the keys whose type is right

    for name in SCALARS:
        value = getattr(recipe, name)
        if name in skip:
            continue
        problem = _type_problem(name, value, _KINDS[""][name])
        if problem is None and name == "name":
            problem = _name_problem(value)
        if problem:
            problems.append(problem)
        else:
            good[name] = value

    for section, cls in SECTIONS.items():
        obj = getattr(recipe, section)
        if section not in skip and not isinstance(obj, cls):  # a Recipe changed in code: `r.train = None` or a dict
            problems.append(f"{section}={_shown(obj)} must be a {cls.__name__} (tfm_cli.recipe), not {_a(obj)}")
            continue
        for name, kind in _KINDS[section].items():
            key = f"{section}.{name}"
            if key in skip or section in skip:
                continue
            value = getattr(obj, name)
            if kind == "corpora" and is_mixture(value):  # several corpora: a problem a line, each named
                found = _mixture_problems(key, value)
                problems += found
                if not found:
                    good[key] = value
                continue
            problem = _type_problem(key, value, "path" if kind == "corpora" else kind)
            if problem is not None and kind == "corpora" and "[source_file, target_file]" in problem:
                problem = problem.replace("[source_file, target_file]", "[source_file, target_file], or a list of "
                                          "corpora [{path: CORPUS, weight: W}, ...]", 1)
                if isinstance(value, dict) and "path" in value:  # one corpus written as a mapping: a list of it
                    problem += " (a list of corpora is a list, even of one: put [ ] around it)"
            if problem is None and kind.startswith(("path", "corpora")):
                problem = _path_problem(key, value)
            if problem is None and key in _RULES:
                ok, rule = _RULES[key]
                if not ok(value):
                    problem = f"{key}={_shown(value)} {rule}"
            if problem:
                problems.append(problem)
            else:
                good[key] = value
        if section == "model":
            # Shape rules live with ModelConfig; pass only well-typed values so nothing is reported twice.
            values = {name: good[f"model.{name}"] for name in _KINDS["model"] if good.get(f"model.{name}") is not None}
            problems += config_problems(values, prefix="model.")

    # Cross-field rules, only between values that passed their own checks.
    keep, average = good.get("train.keep_last"), good.get("train.average_last")
    if keep is not None and average is not None and average > keep:
        problems.append(
            f"train.average_last={average} must be at most train.keep_last={keep} "
            f"(raise train.keep_last to {average}, or lower train.average_last to {keep})"
        )
    max_len, max_positions = good.get("data.max_len"), good.get("model.max_positions")
    if (
        max_len is not None
        and max_positions is not None
        and max_positions >= 1
        and max_len > max_positions
    ):  # data.max_len counts the </s>: a source is its tokens and </s>, a decoder input <s> and its tokens
        problems.append(
            f"data.max_len={max_len} must be at most model.max_positions={max_positions} (a training side takes "
            f"data.max_len positions, its </s> or <s> included); lower data.max_len or raise model.max_positions to {max_len}"
        )
    patience = good.get("train.patience")
    if patience:  # early stopping needs dev scores to watch, at regular steps
        if "data.dev" in good and good["data.dev"] is None:
            problems.append(
                f"train.patience={patience} needs a dev set to watch, but data.dev is null "
                "(give data.dev, or set train.patience=0)"
            )
        if good.get("train.eval_every") == 0:
            problems.append(
                f"train.patience={patience} needs periodic evaluation, but train.eval_every=0 evaluates only at "
                "the end (set train.eval_every, e.g. to train.save_every, or train.patience=0)"
            )
    beam, vocab = good.get("decode.beam"), good.get("tokenizer.vocab_size")
    if beam is not None and vocab is not None and beam > vocab:  # the dev evaluation would fail after training
        problems.append(
            f"decode.beam={beam} is wider than tokenizer.vocab_size={vocab}: a beam holds at most one hypothesis "
            "per token (the paper's beam is 4); lower decode.beam"
        )
    max_tokens = good.get("train.max_tokens")
    if max_len is not None and max_tokens is not None and max_len > max_tokens:
        problems.append(
            f"data.max_len={max_len} must be at most train.max_tokens={max_tokens} (a batch must hold the "
            f"longest pair); lower data.max_len or raise train.max_tokens to {max_len}"
        )
    return problems


def validate_recipe(recipe: Recipe) -> list[str]:
    """Check a recipe's types, ranges and cross-field rules.

    Args:
        recipe: a `Recipe`, e.g. built in code or returned by `recipe_from_dict`. Values set in code are read as
            `recipe_as_written` gives them (a `Path` as its text, a tuple as a list).

    Returns:
        One line per problem (empty when the recipe is valid), each naming the dotted key, the bad value,
        the rule and the fix.
    """
    return _set_in_code_unknown(recipe) + _validate(recipe_as_written(recipe), set())


def _set_in_code_unknown(recipe: Recipe) -> list[str]:
    """The attributes set in code that are no recipe key (`recipe.train.max_step = 3`): the dataclasses take any
    attribute, and the run trained on with train.max_steps as it was, without a word; a file's key is named so."""
    found = [_unknown_key(name) for name in vars(recipe) if name not in TOP_LEVEL_KEYS] if hasattr(recipe, "__dict__") else []
    for section, cls in SECTIONS.items():
        part = getattr(recipe, section, None)
        if isinstance(part, cls) and hasattr(part, "__dict__"):
            found += [_unknown_key(f"{section}.{name}") for name in vars(part) if name not in _section_fields(cls)]
    return found


def _as_written(value: Any, kind: str) -> Any:
    def one(v: Any) -> Any:
        if type(v).__module__ == "numpy" and hasattr(v, "item"):  # numpy.int64(512) -> 512, numpy.bool_ -> bool
            v = v.item()
        return os.fspath(v) if kind.startswith(("path", "corpora")) and isinstance(v, os.PathLike) else v

    if kind == "corpora" and is_mixture(value) and len(value) <= MAX_CORPORA:  # each corpus a mapping, its path a path
        return [_corpus_as_written(item) if isinstance(item, typing.Mapping) else one(item) for item in value]
    if isinstance(value, (list, tuple)) and kind in ("path", "path?", "corpora", "floats"):  # one level, as _plain
        return [one(v) for v in value]
    return one(value)


def recipe_as_written(recipe: Recipe) -> Recipe:
    """A copy of `recipe` whose values set in code are as a YAML file holds them: a `pathlib.Path` as its text, a
    tuple of two paths or of `betas` as a list, numpy's numbers as Python's. `data.train=Path(...)` and
    `train.betas=(0.9, 0.98)` were refused as not paths or not a list. Other values are left as they are, for
    `validate_recipe` to name."""
    copy = dataclasses.replace(recipe)
    for name in SCALARS:
        setattr(copy, name, _as_written(getattr(recipe, name), _KINDS[""][name]))
    for section, cls in SECTIONS.items():
        part = getattr(recipe, section)
        if isinstance(part, cls):  # anything else (None, another section's class) is validate_recipe's to name
            kinds = _KINDS[section]
            setattr(copy, section, dataclasses.replace(part, **{n: _as_written(getattr(part, n), k) for n, k in kinds.items()}))
    return copy


# ------------------------------------------------------------------------------------------------------------
# Unknown keys and overrides
# ------------------------------------------------------------------------------------------------------------


def _a(value: Any) -> str:
    """'a list', 'a string', ... for messages about a value of the wrong shape."""
    if value is None:
        return "null"
    names = {
        list: "a list",
        dict: "a mapping",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }
    return names.get(type(value), f"a {type(value).__name__}")


def _elsewhere(name: str, not_in: str = "") -> str | None:
    """`train.max_tokens or decode.max_tokens`: the keys of that exact name in the sections other than `not_in`."""
    found = [f"{s}.{name}" for s, cls in SECTIONS.items() if s != not_in and name in _section_fields(cls)]
    return " or ".join(found) or None


# Names other toolkits give to what a recipe sets otherwise (fairseq, OpenNMT-py, Marian, Hugging Face): pointed to
# the key that means it, not to a look-alike of another meaning (`train.epochs` was "did you mean train.eps?", Adam's
# epsilon, which `train.eps=3` then set).
_SCHEDULE = "train.lr_factor (the paper's schedule: lr_factor * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5))"
_OUTPUT_LENGTH = "decode.max_len_offset (an output may be at most its source's length + this many tokens; the paper's 50)"
_KNOWN_AS = {
    name: key
    for names, key in (
        (("lr", "learning_rate"), _SCHEDULE),
        (("batch_size", "max_batch_size"), "train.max_tokens (batches are counted in tokens per step, padding included)"),
        (("epochs", "max_epochs", "max_epoch"), "train.max_steps or train.max_time (training is counted in optimizer steps)"),
        (("max_update", "max_step", "train_steps"), "train.max_steps"),
        (("max_length", "max_seq_len", "max_source_length", "max_target_length", "max_src_len", "max_tgt_len"),
         "data.max_len (the longest sentence trained on, in tokens)"),
        (("max_source_positions",), "model.max_positions"),
        (("grad_clip", "clip_grad_norm", "max_grad_norm"), "train.clip_norm"),
        (("fp16", "bf16", "amp"), "train.precision (auto, fp32, bf16 or fp16)"),
        (("warmup", "warmup_updates"), "train.warmup_steps"),
        (("beam_size", "num_beams"), "decode.beam"),
        (("lenpen", "length_penalty"), "decode.alpha (the GNMT length penalty)"),
        (("update_freq", "accum_count", "gradient_accumulation_steps"), "train.accum_steps"),
        (("restore_file", "train_from", "pretrained_model", "load_model", "init_checkpoint"),
         "train.init_from (fine-tuning: a trained run to start from, with a fresh optimizer and schedule)"),
        (("valid_steps", "eval_steps", "validate_interval_updates", "valid_freq", "validation_freq", "eval_interval",
          "validation_steps", "valid_every"), "train.eval_every (steps between two dev evaluations)"),
        (("save_interval_updates", "save_checkpoint_steps", "save_steps", "save_freq", "save_interval", "checkpoint_every"),
         "train.save_every (steps between two checkpoints)"),
        (("keep_checkpoint", "keep_interval_updates", "save_total_limit", "keep_last_checkpoints"), "train.keep_last"),
        (("embed_dim", "hidden_size", "word_vec_size", "rnn_size", "encoder_embed_dim", "decoder_embed_dim", "dim_emb",
          "emb_dim", "model_dim", "dmodel"), "model.d_model (the width of the embeddings and of every layer)"),
        (("transformer_ff", "encoder_ffn_embed_dim", "decoder_ffn_embed_dim", "ffn_dim", "ff_dim", "intermediate_size",
          "transformer_dim_ffn", "dim_ffn", "dff"), "model.d_ff (the inner width of the feed-forward layers)"),
        (("heads", "encoder_attention_heads", "decoder_attention_heads", "transformer_heads", "num_attention_heads",
          "num_heads", "attention_heads", "nheads"), "model.n_heads"),
        (("layers", "num_layers", "enc_layers", "encoder_layers", "transformer_enc_depth", "num_encoder_layers",
          "encoder_layer_count"), "model.n_enc_layers (and model.n_dec_layers for the decoder)"),
        (("dec_layers", "decoder_layers", "transformer_dec_depth", "num_decoder_layers"), "model.n_dec_layers"),
        (("valid", "validation", "valid_sets", "valid_data", "valid_src", "dev_set", "valid_path", "eval_data",
          "validation_file"), "data.dev (a TSV file, or [source_file, target_file])"),
        (("train_sets", "train_data", "train_src", "training_data", "train_path", "train_file"),
         "data.train (a TSV file, or [source_file, target_file])"),
        (("bpe_size", "src_vocab_size", "tgt_vocab_size", "num_merges", "sentencepiece_vocab_size"),
         "tokenizer.vocab_size (one joint BPE vocabulary for both languages)"),
        (("share_all_embeddings", "share_embeddings", "tied_embeddings_all", "share_decoder_input_output_embed"),
         "model.tie_embeddings"),
        (("dropout_rate", "hidden_dropout_prob"), "model.dropout (residual and embedding dropout, as in the paper)"),
        (("attention_dropout", "attention_probs_dropout_prob", "dropout_attn"), "model.attn_dropout (dropout on the attention weights)"),
        (("seed_value", "random_seed"), "train.seed"),
        (("max_new_tokens", "max_decoding_length", "max_len_b", "max_output_length", "max_length_factor"), _OUTPUT_LENGTH),
        (("stop_time_hours", "stop_time", "max_time_hours", "time_limit"), "train.max_time (a time budget: 90s, 15m, 2h)"),
        (("early_stopping", "early_stopping_criteria", "early_stopping_patience", "early_stop", "patience_steps"),
         "train.patience (dev evaluations in a row without a better score before the run stops; train.patience_metric: "
         "bleu or loss)"),
        (("log_interval", "report_every", "logging_steps", "disp_freq", "log_every_n_steps"), "train.log_every"),
        (("normalize_before", "encoder_normalize_before", "decoder_normalize_before", "pre_norm", "layer_norm_first"),
         "model.norm (pre, or post: the paper's, the default)"),
    )
    for name in names
}
# Inside decode, the names of a length are of the output's (Hugging Face's max_length, fairseq's max_len_b), not of
# the training sentences' (data.max_len, what a bare max_length points to); and Hugging Face's early_stopping is its
# beam search's, which tfm's always does.
_KNOWN_IN_DECODE = {
    **dict.fromkeys(("max_len", "max_length", "max_seq_len", "max_output_len", "max_target_length", "max_tgt_len"),
                    f"tfm's is {_OUTPUT_LENGTH}"),
    "early_stopping": "tfm has no such setting: its beam search always stops a sentence once no live hypothesis can "
    "beat the finished ones at any length it may reach (tensor2tensor's bound)",
}


def _unknown_key(dotted: str) -> str:
    """`x.y is not a recipe key; did you mean x.z?` (or the valid keys when nothing is close). A key of another
    section (`train.beam`, or `max_steps` at the top level) is pointed there, not to a look-alike (train.betas)."""
    if "\ufeff" in dotted:  # a byte-order mark inside the file, where two saved with one were joined (cat a b)
        return (f"{dotted.replace(chr(0xFEFF), '')} is written after an invisible byte-order mark (U+FEFF), as where two "
                "files saved with one were joined: delete that character (the line's first)")
    parts = dotted.split(".")
    head = f"{dotted} is not a recipe key"
    if not dotted.isascii():  # `train.max_stеps` with a Cyrillic е: "did you mean train.max_steps?" looked the same
        odd = next(ch for ch in dotted if not ch.isascii())
        head += f" (its {odd!r} is U+{ord(odd):04X} {unicodedata.name(odd, 'a character')}, not an ASCII letter)"
    folded = ".".join(p.casefold().replace("-", "_") for p in parts)  # TRAIN.MAX_STEPS, train.max-steps
    if folded != dotted and (folded in TOP_LEVEL_KEYS or folded in recipe_keys()):
        return f"{head}; did you mean {folded}? (keys are lower case, words joined by '_')"
    if len(parts) == 1 and (other := _elsewhere(parts[0])):
        return f"{head}; did you mean {other}?"
    last = parts[-1].casefold().replace("-", "_")
    if len(parts) == 2 and parts[0] == "decode" and last in _KNOWN_IN_DECODE:
        return f"{head}; {_KNOWN_IN_DECODE[last]}"
    if len(parts) <= 2 and last in _KNOWN_AS:
        return f"{head}; tfm's is {_KNOWN_AS[last]}"
    if parts[0] not in TOP_LEVEL_KEYS:
        close = difflib.get_close_matches(parts[0], TOP_LEVEL_KEYS, n=1)
        if close:
            guess = ".".join([close[0], *parts[1:]]) if close[0] in SECTIONS else close[0]
            return f"{head}; did you mean {guess}?"
        return f"{head}; valid top-level keys: {', '.join(TOP_LEVEL_KEYS)}"
    section = parts[0]
    if section in SCALARS:
        return f"{head}; {section} takes a single value, e.g. {section}=..."
    names = _section_fields(SECTIONS[section])
    if len(parts) == 2 and parts[1] in names:  # a literal dotted key in YAML, e.g. `train.max_steps: 5`
        return f"{head} at the top level; nest it: {section}: {{{parts[1]}: ...}}"
    if len(parts) > 2 and parts[1] in names:  # a.b.c where a.b is a leaf
        return f"{head}; {section}.{parts[1]} takes a single value, e.g. {section}.{parts[1]}=..."
    if len(parts) == 2 and (other := _elsewhere(parts[1], not_in=section)):
        return f"{head}; did you mean {other}?"
    close = difflib.get_close_matches(parts[1] if len(parts) > 1 else "", names, n=1)
    if close:
        return f"{head}; did you mean {section}.{close[0]}?"
    return f"{head}; valid keys in {section}: {', '.join(names)}"


def _override_problem(text: str) -> str:
    return f"override {text!r} must look like key=value (e.g. train.max_steps=2000)"


def parse_override(text: str) -> tuple[str, Any]:
    """Split `dotted.key=value` and parse the value as YAML (`true`, `3`, `0.1`, `[a, b]`, `null` all work).

    The key is not checked against the schema here; `load_recipe` does that.

    Args:
        text: one command-line override, e.g. "train.max_steps=2000".

    Returns:
        (dotted_key, value), e.g. ("train.max_steps", 2000).

    Raises:
        RecipeError: the text has no `=`, an empty key, or a value that is not valid YAML.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")) or any(c.isspace() for c in key):
        raise RecipeError("override", [_override_problem(text)])
    if any("\udc80" <= c <= "\udcff" for c in text):  # bytes of the command line that are not UTF-8: quoting won't help
        raise RecipeError(
            "override",
            [f"override {_shown(text)} holds bytes that are not UTF-8 (a file name in another encoding?): "
             "give it a UTF-8 name (mv) or a link with one (ln -s)"],
        )
    if "\n" in raw or "\r" in raw:  # YAML folds a line break into a space: data.train was another file, silently
        raise RecipeError(
            "override",
            [f"override {_shown(text)} holds a line break, which YAML reads as a space (a file name with one, or the "
             "output of a command?): give the value without it (rename such a file: mv)"],
        )
    try:
        value = yaml.load(raw, Loader=_UniqueKeyLoader)  # a SafeLoader subclass, as a recipe file is read
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise RecipeError(
            "override", [f"override {_shown(text)} has a value that is not valid YAML ({problem}); quote it"]
        ) from None
    except ValueError as err:  # an integer of more digits than int() reads (4,300)
        raise RecipeError(
            "override", [f"override {_shown(text)} has a number too long to read ({str(err).split(';')[0]})"]
        ) from None
    except RecursionError:  # [[[[... deeper than Python's recursion limit: PyYAML's reader recurses
        raise RecipeError("override", [f"override {_shown(text)} has a value nested too deeply to read"]) from None
    if not raw.strip():  # `data.dev=$DEV` with DEV unset: the dev set was dropped without a word (read as null)
        section, _, name = key.rpartition(".")
        nullable = _KINDS.get(section, {}).get(name, "").endswith("?")  # `name=null` was offered, then refused
        raise RecipeError(
            "override",
            [f"override {_shown(text)} has no value (an unset shell variable?): give one"
             + (f", or {key}=null for none" if nullable else "")],
        )
    if value is None and raw.lstrip().startswith("#"):  # `data.train=#1.tsv` read as a comment: null, silently
        raise RecipeError(
            "override",
            [f"override {_shown(text)}: YAML reads a value starting with '#' as a comment (null); quote the value: "
             f"'{key}=\"{raw.strip()}\"'"],
        )
    if re.search(r"\s#", raw) and "#" not in _yaml_text(value):  # `description=run #3` became "run"
        fix = f"quote the value: '{key}=\"{raw.strip()}\"'" if isinstance(value, str) else f"leave the comment out: {key}={_yaml_text(value)}"
        raise RecipeError(
            "override", [f"override {_shown(text)}: YAML reads ' #' and what follows as a comment ({key}={_yaml_text(value)}); {fix}"],
        )
    return key, value


def _spaced_overrides(overrides: list[str], problems: list[str]) -> list[str]:
    """The overrides, less those split by spaces around '=' (`train.max_steps = 10` is three shell words, each of
    them a malformed override), which are reported once each, with the override as it must be written."""
    kept: list[str] = []
    i = 0
    while i < len(overrides):
        text, rest = overrides[i], overrides[i + 1 :]
        words = []
        if "=" not in text and rest and rest[0] == "=" and len(rest) > 1 and "=" not in rest[1]:
            words = [text, "=", rest[1]]  # key = value
        elif "=" not in text and rest and rest[0].startswith("=") and rest[0] != "=":
            words = [text, rest[0]]  # key =value
        elif text.endswith("=") and text.count("=") == 1 and rest and "=" not in rest[0]:
            words = [text, rest[0]]  # key= value
        if words and text.strip():
            joined = "".join(w.strip() for w in words)
            problems.append(
                f"override {' '.join(words)!r} is {len(words)} words: write it without spaces around '=', {joined} "
                "(quote a value with spaces: 'key=a b')"
            )
            i += len(words)
            continue
        kept.append(text)
        i += 1
    return kept


def _apply_overrides(
    raw: dict[str, Any], sections: dict[str, dict[str, Any] | None], overrides: Sequence[str]
) -> tuple[list[str], dict[str, str]]:
    """Set each override's leaf in `raw` / `sections` (a None section is broken and already reported).

    Returns the overrides' own problems (each naming its override) and, for each key set, the override that set
    it last (`{"train.max_steps": "train.max_steps=abc"}`), so that a value's problem found later is blamed on the
    override, not on the recipe file."""
    problems: list[str] = []
    set_by: dict[str, str] = {}
    overrides = list(overrides)
    given = _spaced_overrides(overrides, problems)
    for at, text in enumerate(given):
        try:
            key, value = parse_override(text)
        except RecipeError as err:
            problems += err.problems
            continue
        parts = key.split(".")
        if len(parts) == 1 and parts[0] in SCALARS:
            raw[parts[0]] = value
            set_by[key] = text
        elif len(parts) == 1 and parts[0] in SECTIONS:
            example = _section_fields(SECTIONS[parts[0]])[0]
            problems.append(
                f"override {text!r} must set one key inside {parts[0]}, e.g. {parts[0]}.{example}=..."
            )
        elif len(parts) == 2 and parts[0] in SECTIONS and parts[1] in _section_fields(SECTIONS[parts[0]]):
            target = sections[parts[0]]
            if target is not None:
                target[parts[1]] = value
                set_by[key] = text
        elif corpus := _CORPUS_KEY.fullmatch(key):  # data.train[2].weight=3: one corpus of a mixture
            later = next((t for t in given[at + 1 :] if t.partition("=")[0].strip() == "data.train"), None)
            problem = (f"it comes before {_shown(later)}, which sets data.train anew: put it after that one" if later
                       else _set_corpus(sections["data"], int(corpus[1]), corpus[2], value) if sections["data"] is not None
                       else None)
            if problem:
                problems.append(f"override {_shown(text)}: {problem}")
            else:
                set_by[key] = text
        else:
            problems.append(f"override {_shown(text)}: {_unknown_key(key)}")
    return problems, set_by


_CORPUS_KEY = re.compile(r"data\.train\[(\d+)\]\.([^.\s]+)")


def _set_corpus(data: dict[str, Any], number: int, name: str, value: Any) -> str | None:
    """Set `name` of the `number`-th corpus (1-based) of data.train's list, in a copy of that list; else what is
    wrong (no such key of a corpus, no such corpus, or data.train is one corpus, not a list)."""
    if name not in MIXTURE_KEYS:
        close = difflib.get_close_matches(name, MIXTURE_KEYS, n=1)
        return (f"{name} is not a key of a corpus; did you mean data.train[{number}].{close[0]}?" if close
                else f"a corpus of data.train has {' and '.join(MIXTURE_KEYS)}")
    corpora = data.get("train", DataRecipe.train)
    if not is_mixture(corpora) or not all(isinstance(item, dict) for item in corpora):
        return (f"data.train is one corpus ({_yaml_text(corpora)}), not a list of corpora: give the whole list, e.g. "
                "data.train=[{path: a.tsv, weight: 2}, {path: b.tsv}]")
    if number == 0:  # counted from 0, as Python would: not a corpus to add
        return (f"data.train[0]: the corpora of data.train are counted from 1 (data.train[1] to "
                f"data.train[{len(corpora)}]), in the order the list gives them")
    if not 1 <= number <= len(corpora):
        return (f"data.train lists {len(corpora)} corpor{'a' if len(corpora) > 1 else 'us'} (data.train[1] to "
                f"data.train[{len(corpora)}]): to add one, give the whole list")
    corpora = [dict(item) for item in corpora]  # the recipe's own list is left as it was read
    corpora[number - 1][name] = value
    data["train"] = corpora
    return None


def _blamed_on_overrides(problem: str, set_by: dict[str, str]) -> str | None:
    """`problem` (a value's type, range or cross-field rule) with the overrides that set the keys it names put in
    front (`override 'train.max_steps=abc': train.max_steps='abc' must be an integer`), or None when it names no
    key an override set (the value is the recipe file's)."""
    keys = [key for key in set_by if re.search(rf"(?<![\w.]){re.escape(key)}(=| is |\[\d+\])", problem)]  # data.train[2]...
    texts = [set_by[key] for key in keys if not any(k.startswith(f"{key}[") for k in keys)]  # the corpus's own, if set
    if not texts:
        return None
    return f"override{'s' if len(texts) > 1 else ''} {', '.join(_shown(t) for t in texts)}: {problem}"


# ------------------------------------------------------------------------------------------------------------
# Building a Recipe from plain data
# ------------------------------------------------------------------------------------------------------------


def _build(data: Any, overrides: Sequence[str]) -> tuple[Recipe | None, list[str], list[bool]]:
    """The recipe, its problems and, for each problem, whether an override (not the data) is to blame."""
    if not isinstance(data, dict):
        return None, [
            f"the top level must be a mapping of recipe keys ({', '.join(TOP_LEVEL_KEYS)}), not {_a(data)}"
        ], [False]
    problems: list[str] = []
    skip: set[str] = set()
    raw: dict[str, Any] = {}
    sections: dict[str, dict[str, Any] | None] = {}

    for key, value in data.items():
        if key in SECTIONS:
            continue
        if key in SCALARS:
            raw[key] = value
        else:
            problems.append(_unknown_key(_key_text(key)))
    for section, cls in SECTIONS.items():
        value = data.get(section)
        if value is None:  # absent, or `model:` with nothing under it: all defaults
            sections[section] = {}
        elif isinstance(value, dict):
            sections[section] = {}
            names = _section_fields(cls)
            for key, v in value.items():
                if key in names:
                    sections[section][key] = v
                else:
                    problems.append(_unknown_key(f"{section}.{_key_text(key)}"))
        else:
            problems.append(f"{section} must be a mapping of keys, not {_a(value)}")
            sections[section] = None
            skip.add(section)

    override_problems, set_by = _apply_overrides(raw, sections, overrides)

    if "name" not in raw:
        problems.append("name is missing: every recipe needs a name (it names runs/<name>/), e.g. name: base")
        skip.add("name")
    built = {}
    for section, cls in SECTIONS.items():
        values = sections[section] or {}
        kinds = _KINDS[section]
        built[section] = cls(**{k: _convert(v, kinds[k]) for k, v in values.items()})
    description = raw.get("description")  # `description:` left blank (a template's) is no description
    recipe = Recipe(name=_plain(raw.get("name", "")), description=_plain("" if description is None else description), **built)
    blamed = [False] * len(problems) + [True] * len(override_problems)
    problems += override_problems
    for problem in _validate(recipe, skip):
        on_overrides = _blamed_on_overrides(problem, set_by)
        problems.append(on_overrides or problem)
        blamed.append(on_overrides is not None)
    return recipe, problems, blamed


def recipe_from_dict(data: dict[str, Any], source: str = "<recipe>", overrides: Sequence[str] = ()) -> Recipe:
    """Build and validate a recipe from plain data (as YAML would give it).

    Missing keys take the paper-base defaults, except `name`, which is required.

    Args:
        data: the top-level mapping.
        source: what to call the data in the error (a file name).
        overrides: `dotted.key=value` strings applied on top of `data`.

    Returns:
        The validated `Recipe` (float fields hold floats even when written as ints or as `1e-9`).

    Raises:
        RecipeError: listing every problem: unknown keys, wrong types, out-of-range values, bad overrides. A
            problem with a value an override set starts with that override (`override 'train.max_steps=abc': ...`)
            and is flagged in `from_overrides`.
    """
    _check_overrides(overrides, "recipe_from_dict()")
    recipe, problems, blamed = _build(data, overrides)
    if problems or recipe is None:
        raise RecipeError(source, problems, from_overrides=blamed)
    return recipe


def _check_overrides(overrides: object, who: str) -> None:
    """A list of `key=value` strings: a bare string was taken character by character (15 nonsense problems for
    "train.max_steps=5"), and None or a number failed deep inside."""
    if isinstance(overrides, str) or not isinstance(overrides, (list, tuple)):
        raise TypeError(
            f"{who} takes overrides as a list of 'key=value' strings (e.g. ['train.max_steps=2000']), not "
            f"{type(overrides).__name__}"
        )
    for i, item in enumerate(overrides):
        if not isinstance(item, str):
            raise TypeError(f"{who}: override {i + 1} is {type(item).__name__}, not a 'key=value' string")


def recipe_to_dict(recipe: Recipe) -> dict[str, Any]:
    """Plain nested dict (fields in schema order) that `recipe_from_dict` turns back into an equal recipe."""
    return dataclasses.asdict(recipe)


# ------------------------------------------------------------------------------------------------------------
# Files
# ------------------------------------------------------------------------------------------------------------


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (PyYAML would silently keep the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: merged by the base constructor, and
                continue  # the keys written beside it override the merged ones (they are not duplicates)
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key; the base constructor reports it
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (each key may appear once in a mapping)",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def _not_found(path: Path, source: str) -> RecipeNotFoundError:
    """`recipe X does not exist`, with a close name, the recipes beside it or a recipe to start from as the hint."""
    said = f"recipe {source} {missing(path)}"
    if "=" in path.name and "." in path.name.split("=")[0]:  # `tfm train train.max_steps=3`: the recipe left out
        return RecipeNotFoundError(
            source, f"{said}: it looks like an override (key=value), and overrides follow a recipe "
            f"(e.g. recipes/tiny.yaml {path.name})"
        )
    shipped = bundled_recipes()
    if source.startswith("bundled:"):
        close = difflib.get_close_matches(source, shipped, n=1)
        return RecipeNotFoundError(
            source, f"tfm ships no recipe {source}",
            hint=f"did you mean {close[0]}?" if close else f"the recipes it ships: {', '.join(shipped)}",
        )
    parent = path.parent if str(path.parent) else Path(".")
    if parent.is_dir():
        siblings = sorted(p.name for p in parent.glob("*.y*ml"))
        close = difflib.get_close_matches(path.name, siblings, n=1)
        if close:
            return RecipeNotFoundError(source, said, hint=f"did you mean {parent / close[0]}?")
        if siblings:
            return RecipeNotFoundError(source, said, hint=f"the recipes in {parent}: {', '.join(siblings)}")
    if f"bundled:{path.name}" in shipped:  # `recipes/tiny.yaml` of the README, outside a checkout (an installed tfm)
        return RecipeNotFoundError(
            source, said, hint=f"tfm ships that recipe as bundled:{path.name} (its recipes: {', '.join(shipped)})"
        )
    return RecipeNotFoundError(
        source, said, hint=f"check the path; give a recipe file, or one tfm ships: {', '.join(shipped)}"
    )


def _utf16(data: bytes) -> tuple[str, str] | None:
    """How `data` shows itself as UTF-16 (Windows editors save so), and iconv's name of its encoding; or None."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "it starts with a UTF-16 byte-order mark", "utf-16"
    code = utf16_without_mark(data)
    return ("a NUL byte beside each of its letters", code) if code else None


def utf16_without_mark(data: bytes) -> str | None:
    """iconv's name of the UTF-16 that `data` (the start of a file or stream, no byte-order mark) reads as, going by
    its NUL bytes beside each Latin letter ("utf-16le" or "utf-16be"), or None."""
    head = data[:200]
    for zeros, letters, code in ((head[1::2], head[0::2], "utf-16le"), (head[0::2], head[1::2], "utf-16be")):  # iconv's utf-16 without a mark: BE
        # (and bytes that are not NUL between them: a run of NUL bytes, /dev/zero, is binary data)
        if len(head) >= 4 and zeros.count(0) > len(head) / 4 and len(letters) - letters.count(0) > len(head) / 4:
            return code
    return None


def _read_yaml(path: Path, source: str) -> Any:
    if not path.exists():
        raise _not_found(path, source)
    if path.is_dir():
        inside = sorted(p.name for p in path.glob("*.y*ml"))
        hint = f"; pass a recipe file such as {path / inside[0]}" if inside else ""
        raise RecipeError(source, [f"is a directory, not a recipe file{hint}"])
    try:
        data = path.read_bytes()
        if data.startswith(b"\x1f\x8b"):  # "bad byte 0x8b at line 1, column 2"
            plain_path = path.with_name(path.name.removesuffix(".gz"))
            if plain_path == path or plain_path.exists():  # never over a file that is there
                plain_path = free_name(path, "plain-" + plain_path.name)
            plain = shlex.quote(str(plain_path))
            raise RecipeError(source, [f"is gzip-compressed, not YAML text: decompress it first (gunzip -c {shlex.quote(str(path))} > {plain})"])
        if utf16 := _utf16(data):  # "bad byte 0xff at line 1, column 1", or with no byte-order mark "control
            # character 0x00, which YAML does not allow": both true, neither saying what the file is
            how, code = utf16
            raise RecipeError(source, [f"is UTF-16 text ({how}), not UTF-8: save it as UTF-8 (e.g. iconv -f {code} "
                                       f"-t utf-8 {shlex.quote(str(path))} > {shlex.quote(str(free_name(path, 'utf8-' + path.name)))})"])
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise RecipeError(
            source, [f"is not UTF-8 text (bad byte {data[err.start]:#04x} at line {line}, column {column}); save it as UTF-8"]
        ) from None
    except OSError as err:
        raise RecipeError(source, [f"cannot be read: {err.strerror or err}"]) from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = err.problem or err.context or "syntax error"
        if err.context and err.problem:
            context = err.context
            start = err.context_mark
            if start is not None and mark is not None and start.line != mark.line:  # e.g. where a quote opened
                context += f" at line {start.line + 1}, column {start.column + 1}"
            what = f"{err.problem} ({context})"
        raise RecipeError(source, [f"invalid YAML{where}: {what}{_yaml_advice(err, text)}"]) from None
    except yaml.reader.ReaderError as err:  # a character YAML does not allow, e.g. a NUL byte
        line = text.count("\n", 0, err.position) + 1
        raise RecipeError(
            source, [f"invalid YAML at line {line}: control character {err.character:#04x}, which YAML does not allow"]
        ) from None
    except yaml.YAMLError as err:
        raise RecipeError(source, [f"invalid YAML: {str(err).splitlines()[0]}"]) from None
    except ValueError as err:  # an integer of more digits than int() reads (4,300), e.g. max_steps: 999...9
        long = re.search(r"[0-9_]{4300,}", text)
        where = f" at line {text.count(chr(10), 0, long.start()) + 1}" if long else ""
        raise RecipeError(source, [f"invalid YAML{where}: a number too long to read ({str(err).split(';')[0]})"]) from None
    except RecursionError:  # [[[[... a few hundred levels deep: PyYAML's reader recurses (a recipe is 3 levels deep)
        raise RecipeError(source, ["invalid YAML: nested too deeply to read (a recipe's keys are at most 3 levels deep)"]) from None


def _yaml_advice(err: yaml.MarkedYAMLError, text: str) -> str:
    """What to change for the YAML errors that a recipe's author meets most, whose wording does not say it: a tab,
    and a second `: ` on a line (`description: Tatoeba: small`), which is either a value to quote or a key indented
    deeper than the keys beside it."""
    mark = err.problem_mark
    if mark is None:
        return ""
    lines = text.splitlines()
    line = lines[mark.line] if mark.line < len(lines) else ""
    if line[mark.column : mark.column + 1] == "\t":
        return "; use spaces, not tabs (YAML does not allow a tab there)"
    if err.problem == "mapping values are not allowed here":
        if re.search(r":(\s|$)", line[: mark.column]):  # `key: text: more`: the value holds ': '
            key, _, value = line.partition(":")
            key, value = key.strip(), value.split(" #")[0].strip()
            if key in SECTIONS:  # `train: max_steps: 5`
                return f"; a section's keys go on the lines below it, indented (or inline: {key}: {{{value}}})"
            return f"; a value that holds ': ' must be in quotes, e.g. {key}: {json.dumps(value, ensure_ascii=False)}"
        return "; this key is indented more than the keys above it: line the keys of one section up"
    return ""


BUNDLED_RECIPES = Path(__file__).parent / "recipes"  # the shipped recipes (the checkout's recipes/ links here)


def bundled_recipes() -> list[str]:
    """The recipes tfm ships, as a recipe argument names them: `bundled:tiny.yaml`, ..."""
    return [f"bundled:{p.name}" for p in sorted(BUNDLED_RECIPES.glob("*.yaml"))]


def recipe_path(path: str | os.PathLike) -> Path:
    """The file a recipe argument names: a path, or `bundled:NAME.yaml`, one the package ships (so that an
    installed tfm trains outside a checkout of its repository, whose recipes/ holds the same files)."""
    text = os.fspath(path)
    if isinstance(text, str) and text.startswith("bundled:"):
        return BUNDLED_RECIPES / text.removeprefix("bundled:")
    return Path(path)


def check_paths_beside(recipe_file: str | os.PathLike[str], recipe: Recipe, overridden: set[str] = frozenset(),
                       keys: Sequence[str] | None = None) -> None:
    """A relative corpus or tokenizer path is read from the current directory (as fairseq, OpenNMT-py and JoeyNMT
    read theirs), not from the recipe's folder: `tfm train configs/mine.yaml` with `train: train.tsv` meant the
    file beside the recipe, and was told only that train.tsv does not exist. `overridden`: the keys the command
    line gave (their paths are its own); `keys`: those looked at (None: all; `tfm tokenize` reads data.train alone).

    Raises:
        CorpusError, TfmError: the path, where it is read from, and the path to write in the recipe.
    """
    recipe_file = recipe_path(recipe_file)
    folder = recipe_file.parent
    try:
        if folder.resolve() == Path.cwd().resolve():
            return
    except OSError:
        return

    def only_beside(text: str) -> bool:  # a relative path missing here that names a file (or run) beside the recipe
        path = Path(text)
        if text.startswith(("bundled:", "~")) or path.is_absolute() or path.exists():
            return False
        return (folder / path).is_file() or (text == recipe.train.init_from and (folder / path).is_dir())

    def written(text: str) -> str:
        return os.path.relpath(folder / text) if only_beside(text) else text

    specs = [("data.train", recipe.data.train), ("data.dev", recipe.data.dev), ("tokenizer.path", recipe.tokenizer.path),
             ("train.init_from", recipe.train.init_from)]
    for key, spec in specs:
        if key in overridden or (keys is not None and key not in keys):  # (the command line's own path: "write it
            # in the recipe" would be the wrong fix)
            continue
        for text in corpus_files(spec):
            if not only_beside(text):
                continue
            value = corpus_text(map_files(spec, written))
            error = CorpusError if key.startswith("data.") else TfmError
            raise error(
                f"{key}: {text} does not exist in the current directory ({Path.cwd()}): relative paths in a recipe "
                f"are read from the directory you run tfm in, not from the recipe's folder ({folder})",
                hint=f"it is there beside the recipe: write {key.split('.')[1]}: {value} (or an absolute path) in "
                f"{shell_word(recipe_file)}, or run tfm from {shell_word(folder)}",
            )


def load_recipe(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> Recipe:
    """Read a YAML recipe, apply overrides, convert to dataclasses and validate.

    Args:
        path: the recipe file, or `bundled:NAME.yaml` for one tfm ships (`bundled_recipes()`).
        overrides: `dotted.key=value` strings from the command line, e.g. ["train.max_steps=2000"];
            each value is parsed as YAML, later ones win.

    Returns:
        The validated `Recipe`.

    Raises:
        RecipeError: naming the file; for a file that is missing, a directory, unreadable, not valid YAML
            (with line and column) or not a mapping, else listing every problem in the recipe and overrides.
        TfmError: `path` is empty.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"load_recipe() takes the recipe's path (str or os.PathLike), not {type(path).__name__}")
    _check_overrides(overrides, "load_recipe()")
    source = str(path)
    if not source.strip():  # Path("") is the current directory
        raise TfmError("the recipe path is empty (an unset shell variable?): give a recipe file such as recipes/tiny.yaml")
    data = _read_yaml(recipe_path(path), source)
    if data is None:
        raise RecipeError(source, ["is empty; a recipe needs at least `name:` (see recipes/base.yaml)"])
    return recipe_from_dict(data, source, overrides)


def recipe_text(recipe: Recipe) -> str:
    """The recipe as YAML (schema order) that `load_recipe` reads back to an equal `Recipe`."""
    return yaml.safe_dump(recipe_to_dict(recipe), sort_keys=False, allow_unicode=True, default_flow_style=None)


def dump_recipe(recipe: Recipe, path: str | Path) -> None:
    """Write `recipe_text(recipe)` to `path`, whole or not at all (a full disk leaves the old file)."""
    from tfm_cli.files import TEXT_ERRORS, atomic_write

    text = recipe_text(recipe)
    atomic_write(Path(path), lambda tmp: Path(tmp).write_text(text, encoding="utf-8", errors=TEXT_ERRORS))  # its paths


def model_config(recipe: Recipe, vocab_size: int, pad_id: int, bos_id: int, eos_id: int) -> ModelConfig:
    """The `ModelConfig` for a recipe's model once the tokenizer has fixed the vocabulary and special ids.

    Raises:
        ValueError: the combination is invalid (e.g. a special id outside the vocabulary).
    """
    model = dataclasses.asdict(recipe.model)
    model["numbers"] = model["numbers"] or NEW_MODEL_NUMBERS  # (null: a new model's, where no model said otherwise)
    return ModelConfig(vocab_size=vocab_size, pad_id=pad_id, bos_id=bos_id, eos_id=eos_id, **model)


NEW_MODEL_NUMBERS = "placeholders"  # how a new model reads numbers (model.numbers: null)


def reads_placeholders(recipe: Recipe) -> bool:
    """Whether the recipe's model reads numbers as the placeholder (model.numbers; null: a new model's way), which
    its training pairs then give it (`sentences.with_number_placeholders`)."""
    return (recipe.model.numbers or NEW_MODEL_NUMBERS) == "placeholders"


def with_numbers_of(recipe: Recipe, numbers: str) -> Recipe:
    """`recipe` with model.numbers set to `numbers` (how the model a run goes on from reads them) where it is null."""
    if recipe.model.numbers is not None:
        return recipe
    return dataclasses.replace(recipe, model=dataclasses.replace(recipe.model, numbers=numbers))
