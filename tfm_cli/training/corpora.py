"""The training corpus as a run reads it: encoded with the run's tokenizer, the pairs over data.max_len left out
(`usable_corpus`, refused when none is left), with a progress line while a large one is read; and what a fresh
start's dry run checks of the corpora once a tokenizer is there (`check_start`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tfm_cli.corpus import PROGRESS_EVERY, describe, now_and_then
from tfm_cli.data import TokenizedCorpus, encode_corpus, pairs_taken
from tfm_cli.errors import TfmError
from tfm_cli.files import home_path
from tfm_cli.recipe import Recipe, reads_placeholders
from tfm_cli.tokenizer import Tokenizer
from tfm_cli.training.checks import foreign_dev, foreign_tokenizer, swapped_dev
from tfm_cli.training.evaluation import load_dev
from tfm_cli.training.events import TrainEvents


def check_start(recipe: Recipe, run_dir: Path, progress: Callable[[int], None] | None = None) -> list[str]:
    """What a fresh start's `--dry-run` can check of the corpora beyond reading them, when the tokenizer is
    already there (tokenizer.path, or one `tfm tokenize` left in the run directory): that some pair fits
    data.max_len, and the warnings a start gives with it (a tokenizer trained on other text, a dev set in
    another language; they were said only once training started). Returns the warnings. `progress` is given
    the pairs tokenized so far, as `encode_corpus` gives it."""
    own = run_dir / "tokenizer.json"
    given = own if own.is_file() else home_path(recipe.tokenizer.path) if recipe.tokenizer.path else None
    if given is None:
        return []
    tok = Tokenizer.load(given)
    corpus = usable_corpus(recipe, tok, progress)
    where = f"{own}" if own.is_file() else f"tokenizer.path {recipe.tokenizer.path}"
    found = [foreign_tokenizer(recipe, corpus, tok, where)]
    if recipe.data.dev:
        dev = load_dev(recipe.data.dev, tok, recipe.model.max_positions, recipe.train.bleu_tokenize, reads_placeholders(recipe))
        found += [foreign_dev(recipe.data.dev, dev, corpus), swapped_dev(recipe.data.dev, dev, corpus)]
    return [warning for warning in found if warning]


def usable_corpus(recipe: Recipe, tok: Tokenizer, progress: Callable[[int], None] | None = None) -> TokenizedCorpus:
    """data.train encoded with `tok`, the pairs longer than data.max_len left out; `progress` as `encode_corpus`'s.

    Raises:
        TfmError: no pair is left (the message says how many were empty and how many too long).
    """
    corpus = encode_corpus(recipe.data.train, tok, recipe.data.max_len, progress=progress, numbers=reads_placeholders(recipe))
    s = corpus.stats
    for part in corpus.mixture or ():  # a corpus of the list that adds nothing, as one alone is refused
        if part.stats.kept == 0:
            p = part.stats
            raise TfmError(
                f"no usable sentence pairs in data.train[{part.number}] ({part.name}): of {p.read:,} read, "
                f"{p.skipped_empty:,} have an empty side and {p.skipped_long:,} a side over "
                f"{in_tokens(recipe.data.max_len - 1)} (data.max_len={recipe.data.max_len} counts the </s>)",
                hint=f"check data.train[{part.number}] (or take it out of the list), and raise data.max_len if the "
                "sentences are longer",
            )
    if s.kept == 0:
        raise TfmError(
            f"no usable sentence pairs in data.train {describe(recipe.data.train)}: of {s.read:,} read, {s.skipped_empty:,} have "
            f"an empty side and {s.skipped_long:,} a side over {in_tokens(recipe.data.max_len - 1)} (data.max_len={recipe.data.max_len} "
            "counts the </s>)",
            hint="check data.train, and raise data.max_len if the sentences are longer",
        )
    return corpus


# an epoch's batches are lists of pair indices, built from arrays of the epoch's pairs: about 120 bytes a pair at
# their peak (6,200,000 pairs: 0.75 GB and 7 s), so 6 GB at most
MAX_EPOCH_PAIRS = 50_000_000


def mixture_text(parts: list[tuple[str, int, float]]) -> str:
    """What an epoch takes of each corpus of a mixture, from (name, pairs, weight): `data.train[1] 1,000 pairs x 2
    = 2,000; data.train[2] 40,000 pairs x 0.5 = 20,000, drawn at random again each epoch`."""
    said = []
    for name, n, weight in parts:
        whole, rest = divmod(weight, 1.0)
        drawn = "" if not rest else f", {round(rest * n):,} of them drawn at random again each epoch" if whole else (
            ", drawn at random again each epoch")
        said.append(f"{name} {n:,} pair{'' if n == 1 else 's'} x {weight:g} = {pairs_taken(n, weight):,}{drawn}")
    return "; ".join(said)


def check_mixture(parts: list[tuple[str, int, float]]) -> list[str]:
    """What an epoch takes of each corpus of a mixture (name, pairs, weight), checked: a TfmError when the weights
    take no pair at all or more than MAX_EPOCH_PAIRS; the warnings of corpora that an epoch takes nothing of (a weight
    times its pairs is rounded to a whole number of them)."""
    taken = [pairs_taken(n, weight) for _, n, weight in parts]
    if not sum(taken):
        raise TfmError(f"data.train's weights take no pair into an epoch: {mixture_text(parts)}",
                       hint="raise the weights (a weight times its corpus's pairs is rounded to a whole number of pairs)")
    if sum(taken) > MAX_EPOCH_PAIRS:
        raise TfmError(
            f"data.train's weights make an epoch of {sum(taken):,} pairs ({mixture_text(parts)}): its batches are "
            f"built in memory, about 120 bytes a pair, so at most {MAX_EPOCH_PAIRS:,}",
            hint="lower the weights (to weigh a corpus more than the others, give the others a weight below 1)",
        )
    return [f"warning: {name}: an epoch takes none of its {n:,} pair{'' if n == 1 else 's'} (weight {weight:g}); raise "
            "its weight, or take it out of data.train" for (name, n, weight), k in zip(parts, taken, strict=True) if not k]


def _kept(corpus: TokenizedCorpus) -> list[tuple[str, int, float]]:
    return [(f"data.train[{part.number}] ({part.name})", part.stats.kept, part.weight) for part in corpus.mixture or ()]


def mixture_said(corpus: TokenizedCorpus) -> list[str]:
    """The start's lines on a mixture: what an epoch takes of each corpus, of the pairs kept, and the warnings of
    `check_mixture` (whose errors it raises)."""
    if corpus.mixture is None:
        return []
    warnings = check_mixture(_kept(corpus))
    return [f"an epoch trains on {mixture_text(_kept(corpus))} (of the pairs kept)", *warnings]


READING_SAID_EVERY = PROGRESS_EVERY  # seconds between two lines while a large corpus is read


def reading_progress(events: TrainEvents) -> Callable[[int], None]:
    """A line every READING_SAID_EVERY seconds while data.train is read and tokenized: 2,000,000 pairs took minutes
    with nothing said, which looks like a hang (the line after it says how many were kept)."""
    said = now_and_then(READING_SAID_EVERY, lambda text, seconds: events.message(f"{text} so far ({seconds:,.0f}s)"))
    return lambda read: said(f"train corpus: {read:,} pairs read and tokenized")


def in_tokens(n: int) -> str:
    """`n` tokens, in words ("1 token", "63 tokens")."""
    return f"{n:,} token{'' if n == 1 else 's'}"
