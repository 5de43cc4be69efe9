"""The front door: load a trained model and turn text into translations.

`Translator` is what CTranslate2's `Translator`, Hugging Face's `pipeline` and fairseq's hub interface are to
those projects: the one way from text to text. It owns loading and validating the model with its tokenizer,
the decode settings and their precedence, cutting inputs the model cannot take (with a warning), batching by
length, greedy / beam / n-best search (decoding.py), detokenisation, and scoring against references. The CLI's
`tfm translate` and every later command go through it; Python users get exactly the same translations.

The search runs on an engine: the PyTorch model (a run directory, a release, a .safetensors file), or the ONNX
graphs of `tfm export --format onnx` run by onnxruntime (an export directory). `Translator.load` picks the engine
from what the directory holds; the translations are the same either way.

    from tfm_cli import Translator
    t = Translator.load("runs/tiny")                    # PyTorch; Translator.load("exports/tiny-onnx") runs onnxruntime
    t.translate("Je suis étudiant.")                    # -> "I'm a student."
    t.translate(["Où est la gare ?", ""], n_best=2)     # a list, in input order; empty lines stay empty
    for result in t.translate_stream(open("big.fr")):   # bounded memory, input order
        print(result)

Decode settings, most specific first: a keyword argument of the call, then those given to `Translator.load`
(or the constructor), then the run's recipe (`decode:` section), then the paper (beam 4, alpha 0.6, +50).
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import math
import numbers
import os
import sys
import threading
import unicodedata
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from queue import Empty, Full, Queue
from typing import Any, NamedTuple, overload

import torch

from tfm_cli.checkpoint import load_model
from tfm_cli.corpus import line_count
from tfm_cli.decoding import (
    COPIED,
    EOS,
    MAX_LEN,
    Engine,
    Hypothesis,
    NonFiniteOutput,
    Sampling,
    TorchEngine,
    as_engine,
    stream_key,
    translate_ids,
)
from tfm_cli.errors import CheckpointError, TfmError
from tfm_cli.files import as_path
from tfm_cli.model import Transformer
from tfm_cli.precisions import TRANSLATE_PRECISIONS
from tfm_cli.recipe import MAX_ALPHA, DecodeRecipe
from tfm_cli.runs import BEST, CHECKPOINTS, CURVES_PNG, EXPORT_INFO, FINAL, TENSORBOARD_DIR
from tfm_cli.runtime import autocast, resolve_device, resolve_precision
from tfm_cli.sentences import Part, join_sentences, to_translate
from tfm_cli.tokenizer import Tokenizer

CHUNK_LINES = 2000  # translate_stream reads and translates this many lines at a time
# score() translates this many at a time: sorted by length over 2,000 lines, 10,000 dev lines took 15% longer than
# sorted over all of them (greedy, the quickstart model); over 10,000 as long, with the results of 10,000 held
SCORE_CHUNK_LINES = 10000
# translate_stream yields a chunk's translations in windows of about this many full batches (of decode.max_tokens)
STREAM_WINDOW_BATCHES = 2
ENGINES = ("auto", "torch", "onnxruntime")  # auto: onnxruntime for an ONNX export directory, else torch

# precision="auto" is bf16 on CUDA and on CPUs with fast bf16 (`runtime.cpu_has_fast_bf16`), fp32 elsewhere: the
# rule training uses. Measured for translation on the quickstart model, all 2,000 dev sentences, 2-core AMD EPYC
# with AVX512-BF16, 2 threads: beam 4 at 274 sentences/s in bf16 vs 237 in fp32 (1.15x), BLEU 35.58 vs 35.43,
# 1,906 translations identical; greedy 1.20x, BLEU 29.65 vs 29.81. Without native bf16 it is emulated and slow;
# on an Intel CPU's AVX512-BF16 without AMX it ran at 0.58-0.69x fp32 (README).


class InputTruncatedWarning(UserWarning):
    """An input had more tokens than the model takes; only its first tokens were translated."""


def _caller_stacklevel() -> int:
    """`warnings.warn`'s stacklevel, for its caller, of the first frame outside this package: the user's line,
    however deep the call that warns (translate(), or translate_stream()'s generators: a fixed stacklevel=4 named
    a line of translator.py for those)."""
    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    return level


PAPER = DecodeRecipe()  # the paper's settings (section 6.1): a recipe's `decode:` defaults, and the API's
DEFAULT_BEAM = PAPER.beam


@dataclass(frozen=True)
class DecodeSettings:
    """How to search. Field names are the recipe's `decode:` keys plus `greedy` and `n_best`.

    Attributes:
        beam: beam size K (paper: 4).
        alpha: GNMT length penalty exponent (paper: 0.6); 0 ranks by total log-probability.
        max_len_offset: an output has at most (input tokens + this) tokens (paper: 50).
        min_len: no end-of-sentence before this many output tokens (fairseq --min-len, HF min_new_tokens).
        max_tokens: padded source tokens per batch (beam search divides it by the beam size).
        greedy: pick the most probable token at every step instead of beam search.
        n_best: how many hypotheses to return per input (beam search: at most `beam`; sampling: how many samples;
            not with greedy search).
        sample: draw each token from the model's distribution instead of searching (`decoding.Sampling`): for
            back-translation, or varied translations; the `n_best` samples of an input come best first.
        top_k: with `sample`, draw from the k most probable tokens only (0: from all).
        top_p: with `sample`, draw from the smallest set of most probable tokens whose probability reaches p
            (nucleus sampling; 1: from all).
        temperature: with `sample`, divide the logits by this first (below 1: closer to greedy search; above:
            more varied).
        seed: with `sample`, chooses the draws (0 to 2**64 - 1): an input gets the same samples from the same seed,
            whatever else is translated beside it, as long as it keeps its line number (its place among the inputs
            of a call, from 1).
        split_sentences: translate each sentence of an input apart and join their translations (`tfm_cli.sentences`):
            a model trained on sentence pairs drops all but the first sentence of an input that holds several.
        verbatim: give the model each input exactly as written. Without it (the default) a sentence written in
            capitals is translated in sentence case and its translation written in capitals, one inside a frame (a
            list's bullet or number, quotes or brackets around it, emoji) without it and its translation written
            inside it, and one without a letter (a number, punctuation, emoji) is written as it is
            (`tfm_cli.sentences.to_translate`); with it, no sentence splitting either.
    """

    beam: int = PAPER.beam
    alpha: float = PAPER.alpha
    max_len_offset: int = PAPER.max_len_offset
    min_len: int = PAPER.min_len
    max_tokens: int = PAPER.max_tokens
    greedy: bool = False
    n_best: int = 1
    split_sentences: bool = True
    verbatim: bool = False
    sample: bool = False
    top_k: int = 0
    top_p: float = 1.0
    temperature: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        # checked when made: DecodeSettings(beam="4") was taken, and failed only where it was first used
        for name in ("greedy", "split_sentences", "verbatim", "sample"):
            value = getattr(self, name)
            if type(value).__module__ == "numpy" and type(value).__name__ in ("bool_", "bool"):
                object.__setattr__(self, name, bool(value))  # numpy's bool, as numpy's ints are taken
        # numpy's numbers as Python's (beam=np.int64(3) was kept as it was: not JSON, and shown as np.int64(3))
        for name in ("beam", "max_len_offset", "min_len", "max_tokens", "n_best", "top_k", "seed"):
            value = getattr(self, name)
            if isinstance(value, numbers.Integral) and not isinstance(value, bool) and type(value) is not int:
                object.__setattr__(self, name, int(value))
        for name in ("alpha", "top_p", "temperature"):
            value = getattr(self, name)
            if isinstance(value, numbers.Real) and not isinstance(value, bool) and type(value) not in (float, int):
                object.__setattr__(self, name, float(value))  # (numpy's float64 is a float subclass: kept as it was)
        self.check()

    def updated(self, **given: Any) -> DecodeSettings:
        """A copy with the given values that are not None; unknown names are an error."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(given) - names)
        if unknown:
            raise TypeError(f"unknown decode setting(s): {', '.join(unknown)} (known: {', '.join(sorted(names))})")
        beam = given.get("beam")
        if beam is not None and not (isinstance(beam, numbers.Integral) and not isinstance(beam, bool) and beam >= 1):
            # beam=0 is out of range, with greedy=True too (it was "has no effect"): said so when made (check)
            return dataclasses.replace(self, **{k: v for k, v in given.items() if v is not None})
        if given.get("greedy") and given.get("beam") is not None:  # as the CLI refuses --greedy --beam K
            raise TfmError(
                f"decode setting beam={given['beam']!r} has no effect with greedy=True",
                hint="give greedy=True or a beam size, not both",
            )
        if self.greedy is True and given.get("greedy") is None and given.get("beam") is not None:
            # greedy=True given earlier (to load): the beam would be ignored without a word, as n_best is refused
            raise TfmError(
                f"decode setting beam={given['beam']!r} has no effect: these settings decode greedily (greedy=True)",
                hint="add greedy=False to search with a beam",
            )
        if given.get("sample") and given.get("greedy"):
            raise TfmError(
                "decode settings sample=True and greedy=True are two ways to choose each token",
                hint="give one of them",
            )
        if given.get("sample") and given.get("beam") is not None:
            raise TfmError(
                f"decode setting beam={given['beam']!r} has no effect with sample=True (it draws each token)",
                hint="give sample=True or a beam size, not both",
            )
        sampling = given.get("sample") or (self.sample is True and given.get("sample") is None and not given.get("greedy"))
        if sampling and given.get("beam") is not None and not given.get("greedy"):  # greedy=False: still sampling
            raise TfmError(
                f"decode setting beam={given['beam']!r} has no effect: these settings sample (sample=True)",
                hint="add sample=False to search with a beam",
            )
        alpha = given.get("alpha")
        is_number = isinstance(alpha, numbers.Real) and not isinstance(alpha, bool)  # (else its type is said)
        if is_number and sampling:  # sampling ranks no hypotheses by length either
            raise TfmError(
                f"decode setting alpha={alpha!r} has no effect with sample=True (samples are scored by their log-probability)",
                hint="give sample=True or a length penalty, not both" if given.get("sample") else "add sample=False to search with a beam",
            )
        if is_number and (given.get("greedy") or (self.greedy is True and given.get("greedy") is None)):
            # as the CLI refuses --greedy --alpha: greedy search ranks no hypotheses by length
            raise TfmError(
                f"decode setting alpha={given['alpha']!r} has no effect with greedy=True (it ranks no hypotheses by length)",
                hint="give greedy=True or a length penalty, not both" if given.get("greedy") else "add greedy=False to search with a beam",
            )
        values = {k: v for k, v in given.items() if v is not None}
        # one way to choose tokens replaces the other: greedy=True on sampling settings samples no more, and
        # sample=True on greedy ones (Translator.load(greedy=True), then translate(..., sample=True)) samples
        if values.get("greedy") is True and "sample" not in values:
            values["sample"] = False
        if values.get("sample") is True and "greedy" not in values:
            values["greedy"] = False
        if values.get("sample", self.sample) is not True:  # the sampling settings go with sampling
            values.update({name: value for name, value in _SAMPLING_DEFAULTS.items() if name not in values})
        if (values.get("greedy", self.greedy) is True or values.get("sample", self.sample) is True) and "beam" not in values:
            values["beam"] = DEFAULT_BEAM  # greedy search and sampling take no beam: the one of the settings before goes
        return dataclasses.replace(self, **values)  # checked when made

    def check(self) -> None:
        """Raise TfmError naming the first setting of the wrong type or out of range."""
        for name in ("beam", "max_len_offset", "min_len", "max_tokens", "n_best", "top_k", "seed"):  # 2.5 or "4" failed deep in torch
            value = getattr(self, name)
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                raise TfmError(f"decode setting {name}={value!r} must be an integer", hint="see `tfm translate --help` for each setting")
        for name in ("alpha", "top_p", "temperature"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Real) or isinstance(value, bool):
                raise TfmError(f"decode setting {name}={value!r} must be a number", hint="see `tfm translate --help` for each setting")
        for name in ("greedy", "split_sentences", "verbatim", "sample"):  # greedy="false" would be true
            if not isinstance(getattr(self, name), bool):
                raise TfmError(f"decode setting {name}={getattr(self, name)!r} must be True or False", hint="see `tfm translate --help` for each setting")
        rules = [
            (self.beam >= 1, f"beam={self.beam} must be >= 1"),
            (0 <= self.alpha <= MAX_ALPHA, f"alpha={self.alpha} must be a number between 0 and {MAX_ALPHA:g}"),
            (self.max_len_offset >= 0, f"max_len_offset={self.max_len_offset} must be >= 0"),
            (self.min_len >= 0, f"min_len={self.min_len} must be >= 0"),
            (self.max_tokens >= 1, f"max_tokens={self.max_tokens} must be >= 1"),
            (self.n_best >= 1, f"n_best={self.n_best} must be >= 1"),
            (not (self.greedy and self.n_best > 1), f"n_best={self.n_best} needs beam search or sampling, not greedy"),
            # DecodeSettings(greedy=True, beam=3) decoded greedily, the beam ignored (translate() refused the pair)
            (not (self.greedy and self.beam != DEFAULT_BEAM), f"beam={self.beam} has no effect with greedy=True"),
            (not (self.greedy and self.sample), "sample=True and greedy=True are two ways to choose each token: give one"),
            (not (self.sample and self.beam != DEFAULT_BEAM), f"beam={self.beam} has no effect with sample=True"),
            (self.greedy or self.sample or self.n_best <= self.beam, f"n_best={self.n_best} cannot exceed the beam size {self.beam}"),
            (self.top_k >= 0, f"top_k={self.top_k} must be >= 0 (0: every token)"),
            (0 < self.top_p <= 1, f"top_p={self.top_p} must be above 0 and at most 1 (1: every token)"),
            (0 < self.temperature < math.inf, f"temperature={self.temperature} must be a number above 0"),
            (0 <= self.seed < 2**64, f"seed={self.seed} must be from 0 to 2**64 - 1"),
        ]
        if not self.sample:  # said, not ignored: top_k=10 without sample=True would search with the beam unsaid
            rules += [
                (getattr(self, name) == default, f"{name}={getattr(self, name)!r} has no effect without sample=True")
                for name, default in _SAMPLING_DEFAULTS.items()
            ]
        for ok, message in rules:
            if not ok:
                raise TfmError(f"decode setting {message}", hint="see `tfm translate --help` for each setting")

    @classmethod
    def from_run(cls, run_dir: Path | None) -> DecodeSettings:
        """The run's recipe `decode:` section when it has one, else the paper's settings."""
        recipe_file = Path(run_dir) / "recipe.yaml" if run_dir is not None else None
        if recipe_file is None or not recipe_file.is_file():
            return cls()
        from tfm_cli.errors import RecipeError
        from tfm_cli.recipe import load_recipe

        try:
            d = load_recipe(recipe_file).decode
        except RecipeError as err:  # good weights, and the run's decoding settings unreadable: said, with the way out
            if err.hint is None:
                err.hint = ("the decoding settings (decode:) are read from it: fix it, or move it away to decode with "
                            "the paper's (beam 4, alpha 0.6, up to input length + 50)")
            raise
        return cls(
            beam=d.beam, alpha=d.alpha, max_len_offset=d.max_len_offset, min_len=d.min_len, max_tokens=d.max_tokens,
            split_sentences=d.split_sentences, verbatim=d.verbatim,
        )



_SAMPLING_DEFAULTS = {"top_k": 0, "top_p": 1.0, "temperature": 1.0, "seed": 0}  # what sample=False leaves them at


@dataclass(frozen=True)
class _End:
    """The end of `translate_stream`'s read-ahead: the input's end (`error` None) or what stopped it."""

    error: BaseException | None


def _score_inputs(sources: Any, references: Any, bleu_tokenize: Any) -> tuple[list[str], list[Any]]:
    """`Translator.score`'s sources and references as lists, once their types and counts and the name of its BLEU
    tokenizer are checked (the texts themselves are checked by the caller, numbered as it reads them)."""
    from tfm_cli.scoring import BLEU_TOKENIZERS

    for name, given in (("sources", sources), ("references", references)):
        if isinstance(given, (str, bytes, bytearray)) or not isinstance(given, Iterable):  # a str: one per character
            raise TypeError(f"score() takes lists of sentences; {name} is a {type(given).__name__}")
        _check_ordered(given, f"score()'s {name}")
    sources, references = list(sources), list(references)
    bad = next((i for i, line in enumerate(sources) if not isinstance(line, str)), None)
    if bad is not None:
        raise TypeError(f"score() takes strings; sources item {bad} (counted from 0) is {type(sources[bad]).__name__}")
    for i, refs in enumerate(references):
        if isinstance(refs, str):
            continue
        if not isinstance(refs, (list, tuple)):
            raise TypeError(
                f"score() takes a string or a list of strings per source; references item {i} (counted from 0) is {type(refs).__name__}"
            )
        if not refs:
            raise TfmError(f"references item {i} (counted from 0) is an empty list", hint="give each source at least one reference")
        wrong = next((r for r in refs if not isinstance(r, str)), None)
        if wrong is not None:
            raise TypeError(f"score() takes strings; references item {i} (counted from 0) holds a {type(wrong).__name__}")
    if not sources and not references:  # sacrebleu has no score for an empty corpus (it raised IndexError)
        raise TfmError("nothing to score: no source sentences and no references", hint="give at least one sentence")
    if len(sources) != len(references):
        raise TfmError(
            f"{len(references)} references for {len(sources)} sources",
            hint="give exactly one reference (or one list of references) per source sentence",
        )
    if not isinstance(bleu_tokenize, str) or bleu_tokenize not in BLEU_TOKENIZERS:
        raise TfmError(f"bleu_tokenize={bleu_tokenize!r} is not one of: {', '.join(BLEU_TOKENIZERS)}")
    return sources, references


def _check_ordered(given: Any, what: str) -> None:
    """Refuse a set or a mapping: its order is not the caller's, so translation i could not be matched to input i
    (a dict would be translated by its keys)."""
    if isinstance(given, (AbstractSet, Mapping)):
        raise TypeError(f"{what} takes a list of strings in order; a {type(given).__name__} has no order to give the "
                        "translations back in (pass a list)")
    if getattr(given, "ndim", None) == 0:  # numpy's 0-d array says it is iterable, then fails: "iteration over a 0-d array"
        raise TypeError(f"{what} takes a string or a list of strings; a 0-d {type(given).__name__} holds one value "
                        "(pass str(value), or value.item())")


def _check_progress(progress: Any) -> None:
    """Refuse a `progress` that cannot be called: 5 failed with "'int' object is not callable" from inside the
    search, once its first batch had been translated."""
    if progress is not None and not callable(progress):
        raise TypeError(f"progress takes a function called with the number of inputs finished, not {type(progress).__name__}")


def _line(line: Any, number: int) -> str:
    """One line of `translate_stream`'s input without its line end."""
    if not isinstance(line, str):
        raise TypeError(f"translate_stream() takes lines of text; line {number} is {type(line).__name__}")
    return line.rstrip("\r\n")


class Translation(str):
    """One translation: the text itself (a `str`, so it prints and compares as text) with what came with it.

    Attributes:
        source: the input line.
        score: log-probability divided by the GNMT length penalty (higher is better); with greedy search, which
            has no length penalty, the log-probability itself; 0.0 for an empty input and for one written as it is
            (no letter to translate: `sentences.Part.literal`).
        log_prob: total log-probability of the output, end-of-sentence included.
        tokens: the output's subword pieces.
        nbest: the best hypotheses, best first (this one is `nbest[0]`); each is a `Translation`.
        truncated: the input was longer than the model takes, so only its first tokens were translated.
        stopped: "eos" when the model ended the translation, "max_len" when it reached the maximum output length
            (input tokens + max_len_offset, or the model's limit) and was cut there: likely incomplete; "copied"
            for an input written as it is, without the model (no letter to translate: `sentences.Part.literal`).
        sentences: for an input translated a sentence at a time (`split_sentences`), the best translation of each
            of its sentences, in order (their texts joined are this text; their scores and log-probabilities summed
            are this one's, their tokens in a row are its tokens); else `[self]`.
        numbers_left_out: for a model that reads numbers as a placeholder (`ModelConfig.numbers`), the source's
            numbers (and telephone numbers, numeric dates, web and e-mail addresses, given so too) that this
            translation has no place for: the model wrote fewer placeholders than the sentence has numbers. A sentence's numbers fill its placeholders in order, so these are its last ones, though
            the model may have left out another (and then one is in the wrong place): check such a translation.
            Empty where every number has its place, and for a model that reads numbers as written.
    """

    source: str
    score: float
    log_prob: float
    tokens: list[str]
    nbest: list[Translation]
    truncated: bool
    stopped: str
    sentences: list[Translation]
    numbers_left_out: list[str]

    def __new__(
        cls,
        text: str = "",
        source: str = "",
        score: float = 0.0,
        log_prob: float = 0.0,
        tokens: Sequence[str] = (),
        nbest: Sequence[Translation] | None = None,
        truncated: bool = False,
        stopped: str = "eos",
        numbers_left_out: Sequence[str] = (),
    ) -> Translation:
        self = super().__new__(cls, text)
        self.source, self.score, self.log_prob = source, float(score), float(log_prob)
        self.tokens, self.truncated, self.stopped = list(tokens), truncated, stopped
        self.nbest = list(nbest) if nbest is not None else [self]
        self.sentences = [self]
        self.numbers_left_out = list(numbers_left_out)
        return self

    @property
    def text(self) -> str:
        """The translation as a plain `str`."""
        return str.__str__(self)

    def to_dict(self, nbest: bool = False) -> dict[str, Any]:
        """Plain data for JSON: source, translation, score, log_prob, tokens, truncated, stopped (and the n-best
        list, each with its translation, score, log_prob, tokens and stopped, when asked); for an input translated
        a sentence at a time, `sentences` (in each n-best entry too): each sentence's source, translation, score,
        log_prob, tokens, truncated and stopped; `numbers_left_out` (here, in an n-best entry and in a sentence's)
        where it is not empty."""
        record: dict[str, Any] = {
            "source": self.source, "translation": self.text, "score": self.score, "log_prob": self.log_prob,
            "tokens": self.tokens, "truncated": self.truncated, "stopped": self.stopped, **self._left_out_dict(),
        }
        if nbest:
            record["nbest"] = [
                {"translation": h.text, "score": h.score, "log_prob": h.log_prob, "tokens": h.tokens, "stopped": h.stopped,
                 **h._left_out_dict(), **h._sentences_dict()}
                for h in self.nbest
            ]
        record.update(self._sentences_dict())
        return record

    def _left_out_dict(self) -> dict[str, Any]:
        return {"numbers_left_out": self.numbers_left_out} if self.numbers_left_out else {}

    def _sentences_dict(self) -> dict[str, Any]:
        """{"sentences": [...]} for an input translated a sentence at a time, else {}."""
        if len(self.sentences) == 1:
            return {}
        keys = ("source", "translation", "score", "log_prob", "tokens", "truncated", "stopped", "numbers_left_out")
        return {"sentences": [{key: value for key, value in s.to_dict().items() if key in keys} for s in self.sentences]}

    def __repr__(self) -> str:
        return f"Translation({self.text!r}, score={self.score:.4f})"


def _run_files(run_dir: Path) -> list[Path]:
    """The files of the run (or release) a model was loaded from that an output must not replace: what it was
    loaded with, and what the run saved beside it (other weights, checkpoints, metrics, summary, curves; a
    release's model card)."""
    names = ("tokenizer.json", "recipe.yaml", "config.json", FINAL, BEST, "metrics.jsonl", "summary.json", CURVES_PNG)
    files = [run_dir / name for name in names]
    if (run_dir / EXPORT_INFO).is_file():  # a release: its model card and its record of the export
        files += [run_dir / EXPORT_INFO, run_dir / "README.md"]
    for folder in (CHECKPOINTS, TENSORBOARD_DIR):
        if (run_dir / folder).is_dir():
            files += sorted(p for p in (run_dir / folder).rglob("*") if p.is_file())
    return files


class Translator:
    """A loaded model and tokenizer that translate text, in order, with the paper's beam search by default.

    Build one with `Translator.load(path)`, or directly from a model (or an engine) and tokenizer already in memory.
    """

    def __init__(
        self,
        model: Transformer | Engine,
        tokenizer: Tokenizer | None = None,  # required; a default only so that Translator("runs/tiny") reaches the check below
        settings: DecodeSettings | None = None,
        precision: str = "fp32",
        path: Path | None = None,
        step: int = 0,
    ) -> None:
        """
        Args:
            model: a Transformer whose vocabulary is the tokenizer's, or a decoding engine
                such as `tfm_cli.export.onnx.OnnxEngine`. A Transformer keeps its train/eval mode (one given
                while it trains goes on training with dropout); the search always runs it in eval mode.
            tokenizer: the tokenizer it was trained with.
            settings: default decode settings (the paper's when None).
            precision: "auto" (bf16 on CUDA and on CPUs where bf16 is faster than fp32, else fp32), "fp32", "bf16" or "fp16"
                (CUDA only): autocast for the search; or "int8" (CPU only): a copy of the model whose linear
                layers are quantized, inputs row by row (tfm_cli/quantization.py). The onnxruntime engine runs fp32
                only ("auto" is fp32).
            path: the weights file (or export directory) it came from, for messages and reports.
            step: the training step of those weights.
        """
        if isinstance(model, (str, os.PathLike)):  # Translator("runs/tiny") failed on `'str' object has no attribute 'config'`
            raise TypeError(f"Translator() takes a model in memory; to load {str(model)!r} use Translator.load({str(model)!r})")
        if not isinstance(model, Transformer) and not all(hasattr(model, a) for a in ("config", "device", "start", "step")):
            raise TypeError(f"Translator() takes a Transformer or a decoding engine as its model, not {type(model).__name__}")
        if not isinstance(tokenizer, Tokenizer):
            raise TypeError(f"Translator() takes a Tokenizer (Tokenizer.load(path)), not {type(tokenizer).__name__}")
        if settings is not None and not isinstance(settings, DecodeSettings):  # a dict failed on `.check()`
            raise TypeError(
                f"Translator() takes settings as a DecodeSettings (or None), not {type(settings).__name__}; "
                "DecodeSettings(**values), or give them to translate() as keywords"
            )
        _check_precision(precision)
        if isinstance(model, Transformer) and any(p.is_meta for p in model.parameters()):  # failed deep in torch
            raise TfmError(
                "the model's weights are on the meta device: it has shapes but no values",
                hint="build it on the CPU or a GPU and load its weights (load_state_dict), or Translator.load a run",
            )
        if isinstance(model, Transformer) and precision == "int8":
            from tfm_cli.quantization import quantize_int8

            model = quantize_int8(model)
        engine = as_engine(model)  # a TorchEngine decodes in eval mode; `model` keeps its own
        config = engine.config
        if config.vocab_size != tokenizer.vocab_size:
            raise TfmError(
                f"the tokenizer has {tokenizer.vocab_size} tokens but the model was built for {config.vocab_size}",
                hint="use the tokenizer.json the model was trained with",
            )
        self.engine = engine
        self.engine_name = "torch" if isinstance(engine, TorchEngine) else getattr(engine, "name", type(engine).__name__)
        self.tokenizer = tokenizer
        self.device = engine.device
        self.path, self.step = path, step
        self.files: list[Path] = []  # what `load` read (weights, tokenizer, recipe): outputs must not replace them
        if isinstance(engine, TorchEngine):
            # int8: the weights are quantized (above) and the search runs without autocast
            self.precision = "int8" if precision == "int8" else resolve_precision(precision, self.device)
        elif precision in ("auto", "fp32"):
            self.precision = "fp32"  # exported graphs are fp32
        else:
            raise TfmError(
                f"the {self.engine_name} engine runs fp32 graphs; precision {precision} is not available for it",
                hint="use --precision fp32 (precision=\"fp32\" in Python), or translate with the PyTorch weights of the "
                "run it was exported from",
            )
        self.settings = settings if settings is not None else DecodeSettings()
        self.settings.check()
        self._check_beam(self.settings)
        # The beam a call's greedy=False searches with when these settings are greedy (`load` sets the recipe's)
        self._beam = DEFAULT_BEAM if self.settings.greedy else self.settings.beam
        # Room for the end-of-sentence token appended to every source.
        self.max_source_tokens = config.max_positions - 1
        self.number_placeholders = bool(getattr(config, "reads_placeholders", False))  # (`Part.numbers`)

    @property
    def model(self) -> Transformer:
        """The PyTorch model (the torch engine only; an ONNX export has none).

        Raises:
            TfmError: the translator runs on another engine.
        """
        if isinstance(self.engine, TorchEngine):
            return self.engine.model
        where = self.path if self.path is not None else "this translator"
        raise TfmError(
            f"{where} runs on {self.engine_name}: it has no PyTorch model",
            hint="use the run directory the export came from (its PyTorch weights) for this",
        )

    @classmethod
    def load(
        cls,
        model: str | os.PathLike[str] | None = None,
        *,
        engine: str = "auto",
        device: str | torch.device = "auto",
        precision: str = "auto",
        runs_root: str | os.PathLike[str] = "runs",
        **settings: Any,
    ) -> Translator:
        """Load a run directory (its final model, else its best, else its newest checkpoint), a .safetensors file,
        or an ONNX export directory (`tfm export --format onnx`).

        Args:
            model: a run or export directory, a .safetensors file written by tfm, or None for the newest run under
                `runs_root`.
            engine: "auto" (onnxruntime for a directory holding encoder.onnx and decoder.onnx but no
                model.safetensors, else torch), "torch", or "onnxruntime" (needs the `onnx` extra).
            device: "auto" (CUDA when available), "cpu", "cuda" or "cuda:N".
            precision: "auto" (bf16 on CUDA and on CPUs where bf16 is faster than fp32, else fp32), "fp32", "bf16", "fp16"
                (CUDA only) or "int8" (CPU only: int8 linear layers); onnxruntime: fp32.
            **settings: default decode settings (see `DecodeSettings`); they win over the run's recipe.

        Raises:
            TfmError: a missing or corrupt model, a tokenizer that does not match it, an engine that cannot run
                what `model` holds, a bad device or setting.
        """
        model = as_path(model, "Translator.load()", "the model as a path")
        if not isinstance(device, (str, torch.device)):
            raise TypeError(f"device must be a string such as 'cpu', 'cuda' or 'cuda:1', or a torch.device, not {type(device).__name__}")
        if engine not in ENGINES:
            raise TfmError(f"engine {engine!r} is unknown", hint=f"use one of: {', '.join(ENGINES)}")
        _check_precision(precision)  # before the weights are read
        if model is not None and Path(model).is_dir() and not os.access(model, os.R_OK | os.X_OK):
            # (it named encoder.onnx, a file the user never gave, as the one it could not read)
            raise CheckpointError(
                f"model {model} is a folder this user may not read (permission denied)",
                hint="check its permissions (ls -ld), or give a run directory you can read",
            )
        from tfm_cli.export.onnx import has_onnx_graphs, is_onnx_export

        if engine == "auto":
            engine = "onnxruntime" if model is not None and is_onnx_export(model) else "torch"
        if engine == "onnxruntime":
            if model is None or not has_onnx_graphs(model):
                raise TfmError(
                    f"{model if model is not None else 'the newest run'} holds no ONNX graphs (encoder.onnx, decoder.onnx)",
                    hint="export them with `tfm export RUN --format onnx` and load the export directory",
                )
            from tfm_cli.export.onnx import load_onnx

            export = load_onnx(model, device)
            run_settings = DecodeSettings.from_run(export.path)
            translator = cls(export.engine, export.tokenizer, run_settings.updated(**settings), precision, export.path, export.step)
            translator._remember_beam(run_settings)
            translator.files = sorted(p for p in export.path.iterdir() if p.is_file())
            return translator
        if model is not None and is_onnx_export(model):
            raise TfmError(
                f"{model} is an ONNX export: it holds no PyTorch weights for the torch engine",
                hint="translate it with --engine onnxruntime or auto (engine=\"onnxruntime\" in Python), or load the run "
                "directory it came from",
            )
        torch_device = resolve_device(device)
        loaded = load_model(model, torch_device, runs_root)
        run_settings = DecodeSettings.from_run(loaded.run_dir)
        translator = cls(loaded.model, loaded.tokenizer, run_settings.updated(**settings), precision, loaded.path, loaded.step)
        translator._remember_beam(run_settings)
        translator.files = [loaded.path, *_run_files(loaded.run_dir)]
        return translator

    # --- translating ------------------------------------------------------------------------------------------

    # One overload per kind of input, so that a type checker knows `translate("...")` is a Translation and
    # `translate([...])` a list (the union made every caller cast). A str is also an Iterable[str]: the first wins.
    @overload
    def translate(  # type: ignore[overload-overlap]
        self, text: str, *, progress: Callable[[int], None] | None = None, **settings: Any
    ) -> Translation: ...

    @overload
    def translate(
        self, text: Iterable[str], *, progress: Callable[[int], None] | None = None, **settings: Any
    ) -> list[Translation]: ...

    def translate(
        self,
        text: str | Iterable[str],
        *,
        progress: Callable[[int], None] | None = None,
        **settings: Any,
    ) -> Translation | list[Translation]:
        """Translate one sentence (returns a `Translation`) or several (returns a list, in input order).

        Args:
            text: a sentence, or an ordered iterable of sentences (a list, a tuple, a generator); empty ones give
                empty translations without the model.
            progress: called with the number of inputs (lines) finished after each batch.
            **settings: decode settings for this call (beam, alpha, max_len_offset, min_len, max_tokens, greedy,
                n_best, split_sentences, verbatim, sample, top_k, top_p, temperature, seed: `DecodeSettings`); None
                leaves a setting at the translator's default.

        Returns:
            A `Translation` for a string; for several, a list of them in input order.

        Raises:
            TypeError: `text` is neither a string nor an ordered iterable of strings (bytes, a set, a dict, an
                item that is not a str), an unknown setting, a `progress` that is not callable.
            TfmError: a decode setting of the wrong type or out of range, an input that is not valid text.

        Warns:
            InputTruncatedWarning: for each input longer than the model takes (it is cut to `max_source_tokens`).
        """
        _check_progress(progress)
        if isinstance(text, str):
            return self._translate_lines([text], 1, self._call_settings(settings), progress)[0]
        if isinstance(text, (bytes, bytearray)) or not isinstance(text, Iterable):  # bytes would read as ints
            raise TypeError(f"translate() takes a string or a list of strings, not {type(text).__name__}")
        _check_ordered(text, "translate()")
        lines = list(text)
        bad = next((i for i, line in enumerate(lines) if not isinstance(line, str)), None)
        if bad is not None:
            # numbered as every other message of a list's lines is (a NUL, several lines, a cut): "input line 2"
            raise TypeError(f"translate() takes strings; input line {bad + 1} (item {bad} of the list) is {type(lines[bad]).__name__}")
        return self._translate_lines(lines, 1, self._call_settings(settings), progress)

    def translate_stream(
        self,
        lines: Iterable[str],
        *,
        chunk_lines: int = CHUNK_LINES,
        progress: Callable[[int], None] | None = None,
        ready: Callable[[], bool] | None = None,
        **settings: Any,
    ) -> Iterator[Translation]:
        """Translate an iterable of lines (a file, stdin, a generator) lazily, yielding results in input order.

        At most `chunk_lines` lines are translated at a time, so memory stays bounded however long the input is.
        Trailing newlines are stripped from each line. The arguments and settings are checked at the call, before
        any line is read; a line that is not text is named when it is reached, after the lines before it are
        yielded, and so is an error raised by `lines` itself.

        By default (`ready=None`) the lines are read ahead by a background thread, at most `chunk_lines` ahead of
        the translating: whenever it has nothing more at hand, the lines that have come are translated and yielded
        rather than waited on. So a slow iterator (a socket, a queue) gets each line's translation as soon as the
        line is there, not once `chunk_lines` lines have come, while an input that is all there (a file, a list) is
        still translated in chunks of up to `chunk_lines` lines. `lines` is iterated from that thread only.
        Closing the results early (`break`, `.close()`) ends the thread when `lines` next gives it a line or ends:
        a thread that waits on an empty queue or a quiet socket takes the line that comes next and drops it, and
        until then holds `lines` (a generator resumed meanwhile raises "generator already executing"). A source that
        outlives the stream (a service's queue or socket, read by one stream after another) gives `ready` instead,
        so that no line is read that is not translated.

        `ready`, when given, replaces the thread: it is asked after each line read whether the next one can be had
        without waiting; when it says no, the lines read so far are translated and yielded before the next is read
        (`tfm translate` asks `select()` on stdin). `ready=lambda: True` reads in the caller's thread and ends a
        chunk only at `chunk_lines` lines or the end of the input.

        Raises:
            TypeError: `lines` is a string or not iterable, a line is not a string, `progress` or `ready` is not
                callable.
            ValueError: `chunk_lines` is not an integer >= 1.
            TfmError: a decode setting of the wrong type or out of range.
        """
        if not isinstance(chunk_lines, numbers.Integral) or isinstance(chunk_lines, bool) or chunk_lines < 1:
            # "x" and 1.5 failed inside the loop ("'<' not supported ...", "Stop argument for islice() ...")
            raise ValueError(f"chunk_lines must be an integer >= 1, got {chunk_lines!r}")
        if isinstance(lines, (str, bytes, bytearray)) or not isinstance(lines, Iterable):  # iterated, it would translate each character as a line
            raise TypeError(
                f"translate_stream() takes an iterable of lines (a file, a list), not a {type(lines).__name__}; "
                "for one sentence use translate(), for a text with newlines translate(text.splitlines())"
            )
        _check_ordered(lines, "translate_stream()")
        _check_progress(progress)
        if ready is not None and not callable(ready):
            raise TypeError(f"ready takes a function that says whether the next line can be read without waiting, not {type(ready).__name__}")
        decode = self._call_settings(settings)
        self._check_beam(decode)
        # checked above, at the call: a generator function checked nothing until its first next(), so a bad
        # setting surfaced wherever the results were first read
        return self._stream(lines, chunk_lines, decode, progress, ready)

    def _stream(
        self,
        lines: Iterable[str],
        chunk_lines: int,
        decode: DecodeSettings,
        progress: Callable[[int], None] | None,
        ready: Callable[[], bool] | None,
    ) -> Iterator[Translation]:
        if ready is None:
            yield from self._stream_read_ahead(lines, chunk_lines, decode, progress)
            return
        source = (_line(line, number) for number, line in enumerate(lines, start=1))
        first, error = 1, None
        while error is None:
            chunk = []  # up to chunk_lines, but no waiting for a line while those read are untranslated
            try:
                for line in source:
                    chunk.append(line)
                    if len(chunk) >= chunk_lines or not ready():
                        break
            except Exception as stop:  # a bad line (or a read that failed): raised after the lines before it
                error = stop
            if not chunk:
                break
            yield from self._translated(chunk, first, decode, progress)
            first += len(chunk)
        if error is not None:
            raise error

    def _translated(
        self, chunk: list[str], first: int, decode: DecodeSettings, progress: Callable[[int], None] | None
    ) -> Iterator[Translation]:
        """A chunk's translations, in order, yielded a window at a time: a window is enough lines for about
        STREAM_WINDOW_BATCHES full batches, sorted by length within it as a whole chunk was. Interrupted
        (KeyboardInterrupt: Ctrl-C, or the SIGTERM that `tfm translate` turns into one) part-way through a window,
        it yields those of the window's first lines already translated, then lets the interrupt go on.

        A chunk (2,000 lines for `tfm translate`) was translated whole before its first line came out, its batches
        longest first: `tfm translate < big > out` stopped after ten minutes had nothing of the chunk it was on
        in `out` (a `kill -9` still loses the window being translated), where sed or awk would have written every
        line done."""
        lines, sentences = self._encoded(chunk, first, decode)
        size = [sum(len(s.ids) + 1 for s in these if s.ids) for these in sentences]  # (+ 1: the end of sentence)
        budget = STREAM_WINDOW_BATCHES * max(decode.max_tokens // _rows(decode), 1)
        start = 0
        while start < len(lines):
            end, tokens = start, 0
            while end < len(lines) and (end == start or tokens + size[end] <= budget):
                tokens += size[end]
                end += 1
            finished: list[Translation] = []
            try:
                results = self._search(lines[start:end], sentences[start:end], decode, progress, finished, first + start)
            except KeyboardInterrupt:
                yield from finished
                raise
            yield from results
            start = end

    def _stream_read_ahead(
        self,
        lines: Iterable[str],
        chunk_lines: int,
        decode: DecodeSettings,
        progress: Callable[[int], None] | None,
    ) -> Iterator[Translation]:
        """`_stream` without `ready`: a thread reads `lines` into a queue of at most `chunk_lines` entries; a chunk
        is what the queue holds when the first line of it has come (up to `chunk_lines`). Without it a service
        reading a socket line by line waited for 2,000 lines before its first translation."""
        queue: Queue[tuple[int, Any] | _End] = Queue(maxsize=chunk_lines)
        stop = threading.Event()

        def put(item: tuple[int, Any] | _End) -> bool:
            while not stop.is_set():  # the consumer may be gone (a `break`, an error): give up then
                try:
                    queue.put(item, timeout=0.1)
                    return True
                except Full:
                    continue
            return False

        def read() -> None:
            try:
                for number, line in enumerate(lines, start=1):
                    if not put((number, line)):
                        return
            except BaseException as error:  # raised where the results are read, after the lines before it
                put(_End(error))
                return
            put(_End(None))

        reader = threading.Thread(target=read, name="tfm-translate-stream", daemon=True)
        reader.start()
        first, end = 1, None
        try:
            while end is None:
                chunk: list[str] = []
                item = queue.get()  # nothing to translate: wait for a line
                while True:
                    if isinstance(item, _End):
                        end = item
                        break
                    number, line = item
                    try:
                        chunk.append(_line(line, number))
                    except TypeError as error:
                        end = _End(error)
                        break
                    if len(chunk) >= chunk_lines:
                        break
                    try:
                        item = queue.get_nowait()
                    except Empty:  # the iterator has nothing more at hand: translate what came
                        break
                if chunk:
                    yield from self._translated(chunk, first, decode, progress)
                    first += len(chunk)
            if end.error is not None:
                raise end.error
        finally:
            stop.set()

    def score(
        self,
        sources: Iterable[str],
        references: Iterable[str] | Iterable[Sequence[str]],
        bleu_tokenize: str = "auto",
        *,
        progress: Callable[[int], None] | None = None,
        on_translation: Callable[[Translation], None] | None = None,
        keep_translations: bool = True,
        **settings: Any,
    ) -> dict[str, Any]:
        """Translate `sources` and score them against `references` with sacrebleu (corpus BLEU and chrF).

        The sources are translated `SCORE_CHUNK_LINES` (10,000) at a time, each chunk sorted by length into batches
        (as `translate` sorts a list), so memory stays bounded. `on_translation` is called with each translation, in order, as it
        comes; with `keep_translations=False` they are not kept for the result (no "translations": 60,000 scored
        lines kept some 5 KB each), only their text for the scores.

        `references` holds one reference per source, or a list (or tuple) of references per source: BLEU and
        chrF against several references, as sacrebleu scores `REF1 REF2` (`nrefs:2` in the signatures, `nrefs:var`
        where sources have different numbers of them). The references are normalised as the translations are
        (NFC, whitespace runs to one space, ends stripped, and ’ as ' by a tokenizer that reads it so). Where that
        changed any reference, the scores against the references as written, what sacrebleu gives on the
        reference files, come too (`as_written`). `bleu_tokenize` is sacrebleu's BLEU tokenizer
        (`tfm_cli.scoring.BLEU_TOKENIZERS`); `auto` picks it from the references' script: `zh` for Chinese,
        `char` for Japanese, Thai and other scripts written without spaces, else `13a`. `settings` are decode
        settings, as for `translate`.

        Returns:
            {"sentences", "bleu", "chrf", "bleu_tokenize", "bleu_signature", "chrf_signature", "lines_split",
            "translations"} ("lines_split": the sources translated a sentence at a time, `split_sentences`;
            "translations" only with `keep_translations`),
            and "as_written": {"bleu", "chrf", "references_changed"} where normalising changed a reference
            (`references_changed` counts reference strings, all references of a source included). BLEU and chrF
            are rounded to 2 decimals, as `tfm translate --score` and the training's evaluations give them.

        Raises:
            TypeError: `sources` or `references` is not a list (or other iterable) of strings, or a source's
                references are not a list or tuple of strings.
            TfmError: no sentences at all, not one reference (or list of them) per source, an empty list of
                references, or a BLEU tokenizer that sacrebleu cannot set up (checked before anything is
                translated).
        """
        from tfm_cli.scoring import bleu_metric, reference_texts, resolve_bleu_tokenize, score_translations

        sources, references = _score_inputs(sources, references, bleu_tokenize)
        for number, refs in enumerate(references, start=1):  # numbered by source, its references each checked
            for reference in [refs] if isinstance(refs, str) else refs:
                check_text(reference, f"reference {number}", "decode the references as UTF-8 strictly, or drop the bad characters")
        written = references
        references = [self._normalized(r) if isinstance(r, str) else [self._normalized(t) for t in r] for r in written]
        tokenize = resolve_bleu_tokenize(bleu_tokenize, reference_texts(references))
        bleu_metric(tokenize)  # MeCab missing: said before the translating, not after
        _check_progress(progress)
        if on_translation is not None and not callable(on_translation):
            raise TypeError(f"on_translation takes a function called with each Translation, not {type(on_translation).__name__}")
        if not isinstance(keep_translations, bool):  # keep_translations="no" would keep them
            raise TypeError(f"keep_translations must be True or False, not {type(keep_translations).__name__}")
        decode = self._call_settings(settings)
        self._check_beam(decode)
        # every source checked before any is translated, as one call did (the chunks below met the line at 2,051 late)
        _check_sentences([_without_bom(line) for line in sources], 1)
        _check_text(sources, "input line", 1)
        translations: list[Translation] = []
        hypotheses: list[str] = []
        split = 0
        for first in range(0, len(sources), SCORE_CHUNK_LINES):  # a chunk at a time, sorted by length: bounded memory
            for translation in self._translate_lines(sources[first : first + SCORE_CHUNK_LINES], first + 1, decode, progress):
                hypotheses.append(translation.text)
                split += len(translation.sentences) > 1
                if on_translation is not None:
                    on_translation(translation)
                if keep_translations:
                    translations.append(translation)
        metrics = score_translations(hypotheses, references, tokenize)
        changed = sum(a != b for a, b in zip(reference_texts(written), reference_texts(references), strict=True))
        if changed:  # a published score is sacrebleu's on the file: say what that gives too
            plain = score_translations(hypotheses, written, tokenize)
            metrics["as_written"] = {"bleu": plain["bleu"], "chrf": plain["chrf"], "references_changed": changed}
        return {
            "sentences": len(sources), **metrics, "lines_split": split,
            **({"translations": translations} if keep_translations else {}),
        }

    def _normalized(self, reference: str) -> str:
        """A reference as the translations are written (`Tokenizer.normalize`), a byte-order mark dropped."""
        return self.tokenizer.normalize(_without_bom(reference))

    def _translate_lines(
        self, lines: list[str], first_line: int, decode: DecodeSettings, progress: Callable[[int], None] | None
    ) -> list[Translation]:
        """Split into sentences, tokenise, cut what the model cannot take, search, detokenise, join; `first_line`
        numbers the warnings."""
        lines, sentences = self._encoded(lines, first_line, decode)
        return self._search(lines, sentences, decode, progress, first_line=first_line)

    def _encoded(self, lines: list[str], first_line: int, decode: DecodeSettings) -> tuple[list[str], list[list[_Sentence]]]:
        """`lines` without byte-order marks, and the sentences of each to translate (the line itself, unless
        `decode.split_sentences` finds several in it), their token ids (of what the model is given for each:
        `sentences.to_translate`) cut to what the model takes (warned, numbered from `first_line`); none for an
        empty line or one of invisible characters."""
        self._check_beam(decode)
        lines = [_without_bom(line) for line in lines]
        _check_sentences(lines, first_line)
        parts = [
            to_translate(line, decode.split_sentences, self.tokenizer.word_cost, decode.verbatim, self.number_placeholders)
            for line in lines
        ]
        try:
            ids = iter(self.tokenizer.encode_batch([part.given for line_parts in parts for part in line_parts]))
        except TypeError:  # the tokenizer takes only text that UTF-8 can encode
            _check_text(lines, "input line", first_line)
            raise
        limit = self.max_source_tokens
        sentences: list[list[_Sentence]] = []
        for number, line_parts in enumerate(parts, start=first_line):
            these = []
            for part in line_parts:
                seq = next(ids)
                if part.literal:  # no letter to translate: written as it is
                    these.append(_Sentence(part, [], False))
                    continue
                if not seq or _invisible(part.given):  # only zero-width and direction marks: nothing to translate
                    continue
                if len(seq) > limit:
                    what = f"input line {number}" if len(line_parts) == 1 else f"a sentence of input line {number}"
                    warnings.warn(
                        f"{what} has {len(seq)} tokens; the model takes at most {limit}, "
                        f"so only its first {limit} tokens were translated",
                        InputTruncatedWarning,
                        stacklevel=_caller_stacklevel(),
                    )
                these.append(_Sentence(part, seq[:limit], len(seq) > limit))
            sentences.append(these)
        return lines, sentences

    def _search(
        self,
        lines: list[str],
        sentences: list[list[_Sentence]],
        decode: DecodeSettings,
        progress: Callable[[int], None] | None,
        finished: list[Translation] | None = None,
        first_line: int = 1,
    ) -> list[Translation]:
        """The translations of `lines`, from their `sentences` (`_encoded`), in order; `first_line` is the number
        of the first among all the inputs (a sampled sentence's draws are named by its line and place in it).

        `progress` is called with the number of lines finished after each batch. `finished`, when given, receives
        on a KeyboardInterrupt during the search (Ctrl-C, or a SIGTERM that `tfm translate` turns into one) the
        translations of the lines already done, from the first line up to the first one not done, before the
        interrupt goes on: batches run by length, not in line order.
        """
        todo = [(i, j) for i, these in enumerate(sentences) for j, s in enumerate(these) if s.ids]  # (not literal ones)
        hyps: list[list[Hypothesis]] = [[] for _ in todo]
        searched = [any(s.ids for s in these) for these in sentences]
        several = len(todo) > sum(searched)  # some line was split
        on_batch = _lines_progress([i for i, _ in todo], hyps, progress) if several and progress is not None else progress
        try:
            translate_ids(
                self.engine, [sentences[i][j].ids for i, j in todo], beam_size=decode.beam, alpha=decode.alpha,
                max_len_offset=decode.max_len_offset, min_len=decode.min_len, n_best=decode.n_best,
                max_tokens=decode.max_tokens, greedy=decode.greedy, on_batch=on_batch,
                autocast=self._autocast, into=hyps, sampling=_sampling(decode),
                keys=[stream_key(first_line + i, j) for i, j in todo] if decode.sample else None,
            )
        except NonFiniteOutput as err:  # named with the model it came from
            raise TfmError(f"{self.path or 'the model'}: {err}", hint=err.hint) from None
        except KeyboardInterrupt:
            if finished is not None:
                by_line = _by_line(todo, hyps)
                done = next((i for i, these in enumerate(sentences) if not all(by_line.get(i, []))), len(lines))
                finished.extend(self._results(lines[:done], sentences[:done], by_line, decode))
            raise
        empty = searched.count(False)
        if progress is not None and empty:  # the lines with nothing to search are finished too: a bar reaches its total
            progress(empty)
        return self._results(lines, sentences, _by_line(todo, hyps), decode)

    def _results(
        self, lines: list[str], sentences: list[list[_Sentence]], by_line: dict[int, list[list[Hypothesis]]],
        decode: DecodeSettings,
    ) -> list[Translation]:
        """The Translations of `lines` from the hypotheses of each of their sentences (`by_line`, by line index)."""
        results = []
        for i, line in enumerate(lines):
            found = iter(by_line.get(i, []))
            options = [  # each sentence's hypotheses, best first; a literal one as it is written
                [self._translation(h, s) for h in next(found)] if s.ids else [Translation(s.part.written(""), s.part.text, stopped=COPIED)]
                for s in sentences[i]
            ]
            if not options:  # an empty line: as many empty hypotheses as asked for, so output stays aligned
                nbest = [Translation("", line) for _ in range(decode.n_best)]
            elif len(options) == 1:
                nbest = options[0]
                for t in nbest:
                    t.source = line  # (a line whose other sentences were nothing to translate)
                if decode.sample:  # drawn in turn: best first, as beam search gives them
                    nbest = sorted(nbest, key=lambda t: t.score, reverse=True)
            elif decode.sample:
                # a line's k-th sample is the k-th drawn of each of its sentences (a sentence written as it is, in
                # each): joined in the order drawn, not ranked first, so each is a sample of the line; best first
                drawn = zip(*[o * decode.n_best if len(o) == 1 else o for o in options], strict=True)
                nbest = sorted((_joined(line, c) for c in drawn), key=lambda t: t.score, reverse=True)
            else:
                nbest = [_joined(line, combination) for combination in _best_combinations(options, decode.n_best)]
            if not any(s.ids for s in sentences[i]):  # written as it is, as many times as asked for: aligned
                nbest = [Translation(nbest[0].text, line, stopped=nbest[0].stopped) for _ in range(decode.n_best)]
            best = nbest[0]
            best.nbest = nbest
            results.append(best)
        return results

    def _translation(self, h: Hypothesis, sentence: _Sentence) -> Translation:
        """One hypothesis as text (detokenized: one line of text, even where the model emitted the byte tokens of
        a newline; written as the sentence is: `Part.written`)."""
        text = self.tokenizer.detokenize(h.tokens)
        return Translation(
            sentence.part.written(text), sentence.part.text, h.score, h.log_prob,
            [self.tokenizer.id_to_piece(t) for t in h.tokens], truncated=sentence.truncated, stopped=h.stopped,
            numbers_left_out=sentence.part.left_out(text),
        )

    def _autocast(self) -> contextlib.AbstractContextManager:
        """The precision of the search, whatever the caller's context: fp32 and int8 searches turn off an
        autocast the caller is in (`with torch.autocast("cpu", dtype=torch.bfloat16): t.translate(...)` changed
        an fp32 translator's translations, silently); bf16 and fp16 enter their own."""
        if self.precision in ("fp32", "int8"):
            return torch.autocast(device_type=self.device.type, enabled=False)
        return autocast(self.device, self.precision)

    def _remember_beam(self, run_settings: DecodeSettings) -> None:
        """Keep the run's beam (its recipe's decode.beam) for calls that turn greedy settings back to beam search:
        `load(greedy=True)` then `translate(..., greedy=False)` searched with beam 4 whatever the recipe said, as
        greedy settings hold no beam of their own."""
        if not (self.settings.greedy or self.settings.sample):
            self._beam = self.settings.beam
        elif not (run_settings.greedy or run_settings.sample):
            self._beam = run_settings.beam

    def _call_settings(self, given: dict[str, Any]) -> DecodeSettings:
        """The settings of one call: these, updated with the call's keywords; greedy=False (sample=False) without
        a beam on greedy (sampling) settings searches with the beam they were loaded with (`_remember_beam`)."""
        back_to_beam = (self.settings.greedy and given.get("greedy") is False and not given.get("sample")) or (
            self.settings.sample and given.get("sample") is False and not given.get("greedy")
        )
        if back_to_beam and given.get("beam") is None:
            given = {**given, "beam": self._beam}
        return self.settings.updated(**given)

    def _check_beam(self, decode: DecodeSettings) -> None:
        """A beam wider than the vocabulary cannot be filled (its first step has one candidate per token), and a
        huge one failed deep in torch (an integer overflow, or an allocation of terabytes)."""
        vocab = self.engine.config.vocab_size
        if not (decode.greedy or decode.sample) and decode.beam > vocab:
            raise TfmError(
                f"decode setting beam={decode.beam} is wider than the model's vocabulary ({vocab:,} tokens)",
                hint=f"use a beam of at most {vocab:,} (the paper's is 4)",
            )

    def __repr__(self) -> str:
        where = self.path if self.path is not None else "<in memory>"
        return f"Translator({where}, engine={self.engine_name}, device={self.device}, precision={self.precision}, {self.settings})"


class _Sentence(NamedTuple):
    """One sentence of an input line (the whole line unless it was split), as the search takes it."""

    part: Part  # the sentence as written, what the model is given, how its translation is written
    ids: list[int]  # of what the model is given, cut to what the model takes
    truncated: bool  # it was cut


def _by_line(todo: list[tuple[int, int]], hyps: list[list[Hypothesis]]) -> dict[int, list[list[Hypothesis]]]:
    """The hypotheses of each line's sentences, in order, by line index, from those of the (line, sentence) pairs
    in `todo`."""
    by_line: dict[int, list[list[Hypothesis]]] = {}
    for (i, _), h in zip(todo, hyps, strict=True):
        by_line.setdefault(i, []).append(h)
    return by_line


def _lines_progress(owners: list[int], hyps: list[list[Hypothesis]], progress: Callable[[int], None]) -> Callable[[int], None]:
    """An `on_batch` for the search of sentences that reports lines to `progress`: a line is finished when the
    last of its sentences (`owners` gives each sentence's line) has its hypotheses in `hyps`."""
    left = Counter(owners)
    pending = list(range(len(owners)))

    def on_batch(_: int) -> None:
        nonlocal pending
        finished, waiting = 0, []
        for k in pending:
            if hyps[k]:
                left[owners[k]] -= 1
                finished += left[owners[k]] == 0
            else:
                waiting.append(k)
        pending = waiting
        if finished:
            progress(finished)

    return on_batch


def _rows(decode: DecodeSettings) -> int:
    """Decoder rows per sentence: the beam, one for greedy search, one per sample."""
    return decode.n_best if decode.sample else 1 if decode.greedy else decode.beam


def _sampling(decode: DecodeSettings) -> Sampling | None:
    """The search's sampling settings, None unless `decode.sample`."""
    if not decode.sample:
        return None
    return Sampling(top_k=decode.top_k, top_p=float(decode.top_p), temperature=float(decode.temperature), seed=decode.seed)


def _best_combinations(options: list[list[Translation]], k: int) -> list[tuple[Translation, ...]]:
    """The `k` best ways to choose one hypothesis per sentence (`options`, each best first), ranked by the sum of
    their scores: the k best sums of n sorted lists, taken lazily from a heap of index tuples."""
    def total(index: tuple[int, ...]) -> float:
        return sum(options[n][j].score for n, j in enumerate(index))

    first = (0,) * len(options)
    heap, seen, best = [(-total(first), first)], {first}, []
    while heap and len(best) < k:
        _, index = heapq.heappop(heap)
        best.append(tuple(options[n][j] for n, j in enumerate(index)))
        for n in range(len(index)):
            if index[n] + 1 < len(options[n]):
                following = index[:n] + (index[n] + 1,) + index[n + 1 :]
                if following not in seen:
                    seen.add(following)
                    heapq.heappush(heap, (-total(following), following))
    return best


def _joined(line: str, parts: tuple[Translation, ...]) -> Translation:
    """The translation of `line` from those of its sentences: texts joined, scores, log-probabilities and tokens
    added up, cut or stopped at the maximum length where one of them was."""
    joined = Translation(
        join_sentences([p.text for p in parts]), line, sum(p.score for p in parts), sum(p.log_prob for p in parts),
        [piece for p in parts for piece in p.tokens], truncated=any(p.truncated for p in parts),
        # cut at the maximum length where one was; else ended by the model where it made one; else copied, all of it
        stopped=MAX_LEN if any(p.stopped == MAX_LEN for p in parts) else EOS if any(p.stopped == EOS for p in parts) else COPIED,
        numbers_left_out=[n for p in parts for n in p.numbers_left_out],
    )
    joined.sentences = list(parts)
    return joined


def _check_precision(precision: Any) -> None:
    """Raise TfmError for a precision that is none of `TRANSLATE_PRECISIONS` (the runtime's list has no int8)."""
    if not isinstance(precision, str) or precision not in TRANSLATE_PRECISIONS:
        raise TfmError(f"precision {precision!r} is unknown", hint=f"use one of: {', '.join(TRANSLATE_PRECISIONS)}")


def _without_bom(line: str) -> str:
    """`line` without U+FEFF. At its start it is a byte-order mark: a file written with one (Windows Notepad,
    Excel's "UTF-8" CSV) and read with encoding="utf-8" starts its first line with it, which is no part of the
    sentence (the tokenizer would make subword bytes of it, changing that line's translation, and a reference's
    first word); elsewhere it is the deprecated zero-width no-break space. Tokenizers trained by tfm drop it in
    their normaliser; this also covers those of runs trained before they did."""
    return line.replace("\ufeff", "") if "\ufeff" in line else line


_NOTHING_SHOWN = ("Cf", "Cc")


def _invisible(line: str) -> bool:
    """Whether `line` holds nothing but white space, invisible format characters (Unicode category Cf: zero-width
    space and joiners, word joiner, direction marks, soft hyphen) and control characters (Cc: BEL, ESC, DEL). Such
    a line translates to an empty line, as a blank one does, instead of to whatever the model makes of a few byte
    tokens (a BEL alone came out as "See it."). Thai's zero-width spaces between words are untouched: a line with
    any visible character is translated whole."""
    text = line.strip()
    if not text or unicodedata.category(text[0]) not in _NOTHING_SHOWN:  # the common case: the first character
        return False
    return all(c.isspace() or unicodedata.category(c) in _NOTHING_SHOWN for c in text)


def _check_sentences(lines: Sequence[str], first: int) -> None:
    """Raise TfmError naming the first of `lines` (numbered from `first`) that holds a NUL character or a line break
    inside it, as the command line refuses them: `translate("Merci.\\nSalut.")` gave one translation of the two
    lines glued together, and a NUL (binary data) a translation of nothing in it."""
    for number, line in enumerate(lines, start=first):
        check_sentence(line, f"input line {number}")


def check_sentence(text: str, what: str) -> None:
    """Raise TfmError when `text` (named `what`) holds a NUL character or several lines: no one sentence."""
    if "\x00" in text:
        raise TfmError(
            f"{what} holds a NUL character (at character {text.index(chr(0)) + 1}): binary data, not text",
            hint="give text, one sentence per string",
        )
    if ("\n" in text or "\r" in text) and line_count(text) > 1:
        raise TfmError(
            f"{what} holds several lines: a sentence per string, or they are translated as one",
            hint="for each line its translation: translate(text.splitlines()); for one sentence, join them with spaces",
        )


def _check_text(lines: Sequence[str], what: str, first: int) -> None:
    """Raise TfmError naming the first of `lines` (numbered from `first`) that UTF-8 cannot encode."""
    for number, line in enumerate(lines, start=first):
        check_text(line, f"{what} {number}", f"decode the {what.split()[0]}s as UTF-8 strictly, or drop the bad characters")


def check_text(text: str, what: str, hint: str = "decode it as UTF-8 strictly, or drop the bad characters") -> None:
    """Raise TfmError when UTF-8 cannot encode `text` (named `what`): a lone surrogate, as undecodable bytes read
    with errors='surrogateescape' leave (the tokenizer takes none)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise TfmError(
            f"{what} is not valid text: {text[e.start]!r} at character {e.start + 1} is a lone surrogate "
            "(undecodable bytes read with errors='surrogateescape'?)",
            hint=hint,
        ) from None
