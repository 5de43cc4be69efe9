"""Corpus BLEU and chrF with sacrebleu, and the choice of BLEU's tokenizer for the target language.

BLEU counts word n-grams, so it needs the words of the target side: sacrebleu's default `13a` splits on spaces
and punctuation, which is right for languages written with spaces between words and wrong for those written
without them. A Chinese translation scored with `13a` is one "word" per sentence and gets BLEU 0 however good
it is. `auto` (the default everywhere in tfm) looks at the references' script and picks what sacrebleu and WMT
use: `zh` for Chinese (each ideograph a word, 13a for the rest), `ja-mecab` for Japanese and `ko-mecab` for
Korean where MeCab is installed (else `char` and `13a`, said), `char` for Thai, Lao, Khmer and Myanmar, and `13a`
for everything else. The choice is in the signature (`tok:zh`), as sacrebleu prints it, so a score says how it was made.
chrF counts character n-grams and needs no tokenizer.

This module imports sacrebleu only when it scores, and nothing of torch.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from typing import Any

from tfm_cli.errors import TfmError
from tfm_cli.scripts import hangul, script_of

AUTO = "auto"
# sacrebleu's BLEU tokenizers (sacrebleu.metrics.bleu._TOKENIZERS), with auto first
BLEU_TOKENIZERS = (AUTO, "13a", "intl", "zh", "char", "ja-mecab", "ko-mecab", "flores101", "flores200", "none")


def bleu_tokenize_for(references: Sequence[str]) -> tuple[str, str]:
    """`auto`'s choice for these references: (tokenizer, why), e.g. ("zh", "the references are Chinese").

    Decided by units of the references' text: each Han, kana, Thai, Lao, Khmer or Myanmar letter is one, and so
    is each run of other letters (an English word inside Chinese counts once, not once a letter). More than half
    of them Han or kana is Chinese (`zh`), or Japanese when a tenth or more of those are kana; more than half
    Thai, Lao, Khmer or Myanmar is `char`; more than half words of Korean letters is Korean; anything else `13a`.
    Japanese and Korean get sacrebleu's own choice for them (`sacrebleu -l en-ja` and `-l en-ko`), `ja-mecab` and
    `ko-mecab`, where MeCab is installed (`sacrebleu[ja]`, `sacrebleu[ko]`); else `char` for Japanese and `13a`
    for Korean (written with spaces), and `why` says that the score is not the one sacrebleu would give.
    """
    counts: Counter[str] = Counter()
    for line in references:
        previous = None  # the script of the letter before, while in a run of letters
        for ch in line:
            script = script_of(ch) if ch.isalpha() else None
            if script is not None and (script or previous != ""):  # an unspaced letter, or a word's first letter
                counts["hangul" if hangul(ch) else script] += 1
            previous = script
    letters, han, kana, southeast = counts.total(), counts["han"], counts["kana"], counts["southeast-asian"]
    if letters and (han + kana) * 2 > letters:
        if kana * 10 >= han + kana:
            if _can_set_up("ja-mecab"):
                return "ja-mecab", "the references are Japanese"
            return "char", ("the references are Japanese; sacrebleu's own choice, ja-mecab, needs MeCab: pip "
                            "install 'sacrebleu[ja]' (char scores differ)")
        return "zh", "the references are Chinese"
    if letters and southeast * 2 > letters:
        return "char", "the references are written without spaces between words (Thai, Lao, Khmer or Myanmar)"
    if letters and counts["hangul"] * 2 > letters:
        if _can_set_up("ko-mecab"):
            return "ko-mecab", "the references are Korean"
        return "13a", ("the references are Korean; sacrebleu's own choice, ko-mecab, needs MeCab: pip install "
                       "'sacrebleu[ko]' (13a scores differ)")
    return "13a", DEFAULT_WHY


DEFAULT_WHY = "sacrebleu's default"  # `bleu_tokenize_for`'s reason for 13a, which needs no saying


@functools.cache
def _can_set_up(tokenize: str) -> bool:
    """Whether sacrebleu's BLEU tokenizer `tokenize` can be set up here (MeCab and its dictionary installed)."""
    try:
        bleu_metric(tokenize)
    except TfmError:
        return False
    return True


def resolve_bleu_tokenize(tokenize: str, references: Sequence[str]) -> str:
    """`tokenize`, or `auto`'s choice for these references."""
    return bleu_tokenize_for(references)[0] if tokenize == AUTO else tokenize


def bleu_metric(tokenize: str) -> Any:
    """sacrebleu's BLEU with this tokenizer (not `auto`: resolve it first), set up now so that a tokenizer that
    cannot be (MeCab missing, a SentencePiece model that cannot be downloaded) fails before any translating.

    Raises:
        TfmError: an unknown name, or a tokenizer sacrebleu could not set up (the message says why and what to do).
    """
    from sacrebleu.metrics import BLEU

    if tokenize not in BLEU_TOKENIZERS or tokenize == AUTO:
        raise TfmError(f"unknown BLEU tokenizer {tokenize!r}; choose one of: {', '.join(BLEU_TOKENIZERS)}")
    try:
        return BLEU(tokenize=tokenize)
    except (ImportError, OSError, RuntimeError, ValueError, SystemExit) as error:  # sacrebleu's own; a failed download
        # (sacrebleu exits on some download errors)
        needs = {
            "ja-mecab": "pip install 'sacrebleu[ja]'",
            "ko-mecab": "pip install 'sacrebleu[ko]'",
        }.get(tokenize, "its SentencePiece model is downloaded once into ~/.sacrebleu: without internet, use 13a, zh or char")
        reason = " ".join(str(error).split()) or type(error).__name__
        hint = None if "pip install" in reason else needs  # sacrebleu's own message may say it already
        raise TfmError(f"sacrebleu's {tokenize!r} BLEU tokenizer could not be set up: {reason}", hint=hint) from None


# Sentences scored at a time: sacrebleu's corpus_score first extracts the n-grams of every reference and keeps them
# until the end, ~11 KB a sentence pair for BLEU and chrF together (`tfm translate --score` on 100,000 lines peaked at
# 1.9 GB of RSS); a chunk's statistics are summed and the n-grams let go.
SCORE_CHUNK = 5000


References = Sequence[str] | Sequence[Sequence[str]]  # one reference a sentence, or several (a list each)


def reference_streams(references: References) -> list[list[str | None]]:
    """Per-sentence references as sacrebleu takes them: one stream per reference, each with one line per sentence.

    `references` holds one string per sentence, or a list (or tuple) of strings per sentence: several references,
    as WMT's test sets with a second translation, Hugging Face `evaluate` and torchmetrics take them. Sentences may
    have different numbers of references: the missing ones are None, which sacrebleu leaves out (`nrefs:var` in the
    signature).
    """
    per_sentence = [[r] if isinstance(r, str) else list(r) for r in references]
    width = max((len(refs) for refs in per_sentence), default=1)
    return [[refs[k] if k < len(refs) else None for refs in per_sentence] for k in range(width)]


def reference_texts(references: References) -> list[str]:
    """Every reference string, sentence by sentence (for auto's choice of BLEU tokenizer)."""
    return [t for r in references for t in ([r] if isinstance(r, str) else r)]


def _corpus_score(metric, hypotheses: list[str], streams: list[list[str | None]], chunk: int | None = None):
    """`metric.corpus_score(hypotheses, streams)`, the same score, with the memory of `chunk` sentences.

    sacrebleu's BLEU and chrF are functions of the sum of per-sentence statistics (`_aggregate_and_compute` sums
    them): the chunks' sums are summed. A sacrebleu without these methods gets the whole corpus at once."""
    chunk = SCORE_CHUNK if chunk is None else chunk
    extract, compute = getattr(metric, "_extract_corpus_statistics", None), getattr(metric, "_aggregate_and_compute", None)
    if extract is None or compute is None or len(hypotheses) <= chunk:
        return metric.corpus_score(hypotheses, streams)
    metric._check_corpus_score_args(hypotheses, streams)
    total: list[int] | None = None
    for start in range(0, len(hypotheses), chunk):
        stats = extract(hypotheses[start : start + chunk], [s[start : start + chunk] for s in streams])
        part = [sum(column) for column in zip(*stats, strict=True)]
        total = part if total is None else [a + b for a, b in zip(total, part, strict=True)]
    # the signature's nrefs is the last chunk's count: the whole corpus's, as one corpus_score would have it
    counts = {sum(s[i] is not None for s in streams) for i in range(len(hypotheses))}
    metric.num_refs = counts.pop() if len(counts) == 1 else -1
    return compute([total])


def score_translations(
    hypotheses: Sequence[str], references: References, bleu_tokenize: str = AUTO
) -> dict[str, Any]:
    """Corpus BLEU and chrF with sacrebleu, with their signatures and the BLEU tokenizer used.

    `references` holds one reference per hypothesis, or a list of references per hypothesis (multi-reference BLEU
    and chrF: the signatures say `nrefs:2`, or `nrefs:var` where the numbers differ). `bleu_tokenize` is one of
    BLEU_TOKENIZERS; `auto` picks it from the references (`bleu_tokenize_for`). The texts are scored as given:
    normalise the references as the translations were (`Tokenizer.normalize`).
    """
    from sacrebleu.metrics import CHRF

    references = list(references)
    tokenize = resolve_bleu_tokenize(bleu_tokenize, reference_texts(references))
    bleu, chrf = bleu_metric(tokenize), CHRF()
    hypotheses, streams = list(hypotheses), reference_streams(references)
    b, c = _corpus_score(bleu, hypotheses, streams), _corpus_score(chrf, hypotheses, streams)
    return {
        "bleu": round(b.score, 2),
        "chrf": round(c.score, 2),
        "bleu_tokenize": tokenize,
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }
