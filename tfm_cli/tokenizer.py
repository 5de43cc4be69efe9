"""The joint source/target subword tokenizer (any language pair): train, save, load, encode, decode.

One BPE vocabulary is shared by source and target (paper section 5.1: "a shared source-target vocabulary").
It is built on Hugging Face `tokenizers` and knows nothing of the model. The id layout is fixed:

    0 <pad>   1 <s>   2 </s>   3 <unk>   4..259 <0x00>..<0xFF>   260.. learned BPE pieces

The 256 byte tokens are the byte fallback (as in sentencepiece and Llama): a character that has no piece of its
own is encoded as the tokens of its UTF-8 bytes, so any text round-trips and `<unk>` is never produced. Decoding
reads each run of byte tokens as UTF-8 (a broken character is one U+FFFD, not the whole run).

Text goes through a normaliser first (U+FEFF and the other invisible formatting marks dropped, NFC, ’ and ‘ read as
', every run of whitespace -> one space, both ends stripped), then a
Metaspace pre-tokenizer marks word starts with "▁" (pieces read `▁étudiant`), and a split keeps letters, digits
and punctuation in pieces of their own (`▁étudiant` `.`; see _PRE_TOKEN). The guarantee is
`decode(encode(x)) == normalize(x)` for every string x. "▁" (U+2581) in the input is treated as whitespace,
because the decoder turns it into a space. A saved tokenizer.json holds its own normaliser and pre-tokenizer, so
one trained by an older tfm (which split at whitespace alone) encodes as it did.

The special tokens live in the model vocabulary only; they are not "added tokens", so a literal "<s>" in a
sentence is ordinary text (encoded piece by piece), never the BOS id.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers import Tokenizer as _HFTokenizer

from tfm_cli.corpus import INVISIBLE, CorpusSpec, surely_longer, tokenizer_texts
from tfm_cli.errors import TfmError
from tfm_cli.files import WEIGHT_SUFFIXES, as_path, atomic_write, json_value
from tfm_cli.sentences import NUMBER_PLACEHOLDER

SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
N_SPECIAL = len(SPECIAL_TOKENS)
N_BYTES = 256
FIRST_PIECE_ID = N_SPECIAL + N_BYTES  # 260: the first learned BPE piece
MIN_VOCAB_SIZE = 300
MAX_VOCAB_SIZE = 1_000_000  # as recipe.MAX_VOCAB_SIZE: tokenizers' trainer aborts the process far above it
METASPACE = "\u2581"  # "▁", sentencepiece's word-start mark

# Every character Python's str.split() treats as whitespace (incl. U+00A0, U+202F, U+2009, tabs), plus "▁".
_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000" + METASPACE
)
_BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(N_BYTES)]
_SPACES = re.compile(f"[{_WHITESPACE}]+")
# BPE training slows with the square of a word's length: a corpus line of a million characters without a space (a
# base64 blob, minified JSON) took 108 s to 11 minutes on a 2-core CPU, one of 100,000 3 s. The tokenizer learns from such words in pieces
# of this many characters (encoding is unaffected: it is linear in the length).
MAX_TRAINING_WORD = 256
_LONG_WORD = re.compile(f"[^{_WHITESPACE}]{{{MAX_TRAINING_WORD + 1}}}")


# Typographic single quotes read as the ASCII apostrophe, as Moses' normalize-punctuation.perl reads them for WMT:
# a word processor or a phone types "J’ai" where a keyboard types "J'ai", and a corpus holds mostly one of them
# (the bundled French: 65,423 lines with ' and 705 with ’), so the other was translated as rarer text ("J’ai
# faim." worse than "J'ai faim.": 15 of 29 held-out sentences changed with ’ for '). U+02BC, a letter in some
# orthographies, stays.
_APOSTROPHES = "\u2018\u2019"


_AS_NORMALISED = str.maketrans({**dict.fromkeys(INVISIBLE), **dict.fromkeys(_APOSTROPHES, "'"), METASPACE: " "})


def normalized(text: str) -> str:
    """What the normaliser makes of `text` (`Tokenizer.normalize` of a tokenizer tfm trains), in Python, without
    a tokenizer and faster than one: the sentence the model sees, to compare corpora by (`dev_is_train`)."""
    if text.isascii():  # nothing to drop, compose or replace: only the whitespace
        return " ".join(text.split())
    return " ".join(unicodedata.normalize("NFC", text.translate(_AS_NORMALISED)).split())


def _normalizer() -> normalizers.Normalizer:
    return normalizers.Sequence([
        normalizers.Replace(Regex(f"[{INVISIBLE}]"), ""), normalizers.NFC(),
        normalizers.Replace(Regex(f"[{_APOSTROPHES}]"), "'"),
        normalizers.Replace(Regex(f"[{_WHITESPACE}]+"), " "), normalizers.Strip(),
    ])


# What one pre-token (the unit BPE learns merges within) may hold: a word (letters and combining marks, with the
# zero-width (non-)joiners that Persian and Indic words hold, joined by apostrophes or hyphens: "aujourd'hui",
# "dit-il", "don't"), a number, or a run of anything else (punctuation, symbols, emoji: "...", "?!"), each with
# the "▁" of a preceding space. Letters and punctuation never share a piece, as sentencepiece's split by Unicode
# script keeps them apart: split at whitespace alone, 1,553 of the 7,740 pieces learned for the quickstart's
# vocabulary were words with punctuation attached ("▁revoir." beside "▁revoir", "▁morning." beside "▁morning").
_WORD = "[\\p{L}\\p{M}\u200c\u200d]+"
_PRE_TOKEN = f"{METASPACE}?(?:{_WORD}(?:['\u2019-]{_WORD})*|\\p{{N}}+|[^\\p{{L}}\\p{{M}}\\p{{N}}{METASPACE}]+)|{METASPACE}"


def _pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True),
        pre_tokenizers.Split(Regex(_PRE_TOKEN), behavior="isolated"),
    ])


def _decoder() -> decoders.Decoder:
    # Byte tokens first become characters, then "▁" becomes a space (dropped at the very start).
    return decoders.Sequence([decoders.ByteFallback(), _metaspace_decoder()])


def _metaspace_decoder() -> decoders.Decoder:
    return decoders.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True)


_METASPACE = _metaspace_decoder()


_TOKENIZER_HINT = "give the tokenizer.json of a tfm run (tfm tokenize and tfm train write it)"


class Tokenizer:
    """A trained joint BPE tokenizer with fixed special ids and byte fallback.

    Build one with `train_tokenizer` or `Tokenizer.load`. `encode` adds no special tokens: the data pipeline
    adds BOS/EOS where the model needs them.
    """

    PAD, BOS, EOS, UNK = SPECIAL_TOKENS
    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __init__(self, hf_tokenizer: _HFTokenizer, source: str = "<memory>") -> None:
        """Wrap a Hugging Face tokenizer after checking it has the tfm layout (see `_check_layout`).

        Raises:
            TfmError: the tokenizer does not follow the tfm id layout; `source` names where it came from.
        """
        problem = _check_layout(hf_tokenizer)
        if problem:
            raise TfmError(
                f"{source} is not a tfm tokenizer: {problem}",
                hint="use the tokenizer.json of a tfm run (tfm tokenize and tfm train write it), not another project's",
            )
        self._tk = hf_tokenizer
        self._json = hf_tokenizer.to_str()
        self._sha256 = hashlib.sha256(self._json.encode("utf-8")).hexdigest()
        # encode_batch_fast (tokenizers >= 0.21) skips offset tracking, which we never use.
        self._encode_batch = getattr(hf_tokenizer, "encode_batch_fast", hf_tokenizer.encode_batch)

    # ---- properties -------------------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """Number of ids, specials and byte tokens included."""
        return self._tk.get_vocab_size(with_added_tokens=True)

    @functools.cached_property
    def longest_piece(self) -> int:
        """Characters of normalised text the longest learned piece stands for (its ▁ a space): a text of n of them
        takes at least n / longest_piece tokens, which tells a line far too long for a model without encoding it."""
        return max([len(p) for p, i in self._tk.get_vocab(with_added_tokens=False).items() if i >= FIRST_PIECE_ID] or [1])

    @property
    def sha256(self) -> str:
        """Hex SHA-256 of the tokenizer's JSON text, exactly as `save` writes it (stable across save/load)."""
        return self._sha256

    @property
    def backend(self) -> _HFTokenizer:
        """The underlying `tokenizers.Tokenizer` (read it; changing it breaks `sha256`)."""
        return self._tk

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, sha256={self.sha256[:12]})"

    # ---- persistence ------------------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Tokenizer:
        """Load a tokenizer saved by `save`.

        Raises:
            TfmError: the file is missing, is not a tokenizers JSON file, or does not have the tfm layout.
        """
        given = as_path(path, "Tokenizer.load()", "the tokenizer.json as a path")
        if given is None:
            raise TypeError("Tokenizer.load() takes the path of a tokenizer.json (str or os.PathLike), not None")
        path = Path(given)
        if not path.is_file():
            what = "is a directory, not a file" if path.is_dir() else "does not exist"
            raise TfmError(f"tokenizer file {path} {what}", hint=_TOKENIZER_HINT)
        json_read = False
        try:
            text = path.read_text(encoding="utf-8")
            json_value(text)
            json_read = True
            hf = _HFTokenizer.from_str(text)
        except (
            Exception
        ) as err:  # OSError, UnicodeDecodeError, JSON errors; tokenizers raises plain Exception
            # (a JSON file of another kind: the library's own words, "expected `,` at line 1", read as a syntax error)
            if json_read:
                why = "JSON, but not a tokenizers file"
            elif isinstance(err, OSError):  # "[Errno 13] Permission denied: '...'" repeated the path
                why = err.strerror or str(err)
            elif isinstance(err, UnicodeDecodeError):  # the codec's words named a byte, not the mistake
                weights = path.suffix.lower() in WEIGHT_SUFFIXES
                why = "a model's weights, not a tokenizer" if weights else "not UTF-8 text (a binary file, or text in another encoding)"
            else:
                why = str(err).splitlines()[0] if str(err) else repr(err)
            raise TfmError(f"{path} is not a readable tokenizer file: {why}", hint=_TOKENIZER_HINT) from err
        return cls(hf, source=str(path))

    def write_json(self, path: str | os.PathLike[str]) -> None:
        """Write tokenizer.json's text (the text `sha256` is of) to `path` as it is: `save` makes it atomic and
        synced (`files.atomic_write`); a caller with its own temporary file (`tfm tokenize --out`) writes into that."""
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(self._json)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the tokenizer as JSON, whole or not at all (`files.atomic_write`: a temporary file in the same folder,
        synced, then renamed; an error names this file)."""
        atomic_write(Path(path), self.write_json)

    # ---- text <-> ids -----------------------------------------------------------------------------------

    def normalize(self, text: str) -> str:
        """`text` through the tokenizer's normaliser: what `decode(encode(text))` gives back. For a tokenizer tfm
        trains: invisible characters dropped, NFC, curly apostrophes -> ', whitespace runs -> one space, both ends
        stripped (the module's `normalized` does the same in Python)."""
        return self._tk.normalizer.normalize_str(text)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without BOS/EOS."""
        return self._tk.encode(text, add_special_tokens=False).ids

    def word_cost(self, word: str) -> tuple[int, ...]:
        """How familiar a word is to this vocabulary, lowest first: the number of pieces it is encoded in, then
        their ids (pieces learned earlier, from more frequent pairs, have lower ids). `sentences.sentence_case`
        writes a sentence in capitals with it (`MARIE` -> `Marie` where `▁Marie` is a piece and `▁marie` is not)."""
        ids = self.encode(word)
        return (len(ids), *ids)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Token ids of many texts at once (the batched, multi-threaded encoder)."""
        if isinstance(texts, (str, bytes)):  # encoded character by character
            raise TypeError("encode_batch() takes a list of texts, not one str: use encode() for one")
        return [enc.ids for enc in self._encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids` (a list, or a 1-D tensor). Pad, BOS and EOS are dropped wherever they are: decoding
        does not stop at EOS, so cut the sequence first if that is what you want."""
        drop = (self.pad_id, self.bos_id, self.eos_id)
        ids = ids.tolist() if hasattr(ids, "tolist") else ids  # a tensor or array row
        if isinstance(ids, (str, bytes)):  # "300" decoded its characters' ids
            raise TypeError("decode() takes a sequence of token ids (ints), not a str")
        ids = [int(i) for i in ids]
        bad = next((i for i in ids if not 0 <= i < self.vocab_size), None)
        if bad is not None:  # -1 was an OverflowError, an id past the vocabulary silently nothing
            raise ValueError(f"decode(): token id {bad} is not in this tokenizer's vocabulary (0 to {self.vocab_size - 1})")
        return self._decode([i for i in ids if i not in drop])

    def decode_batch(self, batch: Iterable[Sequence[int]]) -> list[str]:
        """`decode` for each sequence of ids (a list of lists, or a 2-D tensor)."""
        batch = batch.tolist() if hasattr(batch, "tolist") else batch  # a (B, T) tensor
        return [self.decode(ids) for ids in batch]

    def _decode(self, ids: list[int]) -> str:
        """Each run of byte tokens is read as UTF-8, with one U+FFFD for each part that is not a character (as
        `bytes.decode(errors="replace")` gives). Hugging Face's ByteFallback decoder, which tokenizer.json names,
        turns every byte of a run that holds a broken character into U+FFFD: one cut character (a small model's
        slip, or the length limit falling inside it) wiped out the whole run, the characters before and after it
        spelled in bytes too ("参", a cut one, "吅" came out as eight U+FFFD). The runs' text then goes through
        the "▁" -> space step only: through ByteFallback again, text that reads like a byte token ("<0x41>" spelled
        in bytes by a small vocabulary) became the byte it names ("A")."""
        if not any(self.is_byte(i) for i in ids):
            return self._tk.decode(ids, skip_special_tokens=False)
        tokens: list[str] = []
        run = bytearray()
        for i in ids:
            if self.is_byte(i):
                run.append(i - N_SPECIAL)
                continue
            if run:
                tokens.append(run.decode("utf-8", errors="replace"))
                run.clear()
            tokens.append(self._tk.id_to_token(i))
        if run:
            tokens.append(run.decode("utf-8", errors="replace"))
        return _METASPACE.decode(tokens)  # no byte token is left to read

    def decode_as_saved(self, ids: Sequence[int]) -> str:
        """The text tokenizer.json's own decoder gives for `ids` (pad, BOS and EOS dropped), as other tools that
        read the file (transformers, CTranslate2's users) decode: it differs from `decode` only where a run of
        byte tokens is not valid UTF-8 (every byte of such a run becomes U+FFFD)."""
        drop = (self.pad_id, self.bos_id, self.eos_id)
        return self._tk.decode([int(i) for i in ids if int(i) not in drop], skip_special_tokens=False)

    def detokenize(self, ids: Sequence[int]) -> str:
        """The text of a translation: `decode`, then the normaliser (whitespace runs -> one space, ends stripped).
        A model can emit the byte tokens of a newline, tab or CR; the text stays one line, and stays what
        `encode` would read back. Used for `tfm translate` output and for the dev scores during training alike."""
        return self.normalize(self.decode(ids))

    def pieces(self, text: str) -> list[str]:
        """The subword strings of `text` (byte-fallback pieces show as `<0xF0>`)."""
        return self._tk.encode(text, add_special_tokens=False).tokens

    def id_to_piece(self, i: int) -> str:
        """The string of id `i`.

        Raises:
            IndexError: `i` is outside the vocabulary.
        """
        piece = self._tk.id_to_token(int(i)) if 0 <= int(i) < self.vocab_size else None
        if piece is None:
            raise IndexError(f"token id {i} is outside the vocabulary (0..{self.vocab_size - 1})")
        return piece

    def piece_to_id(self, piece: str) -> int | None:
        """The id of a piece string, or None if the vocabulary has no such piece."""
        return self._tk.token_to_id(piece)

    def is_byte(self, i: int) -> bool:
        """True for the 256 byte-fallback ids."""
        return N_SPECIAL <= i < FIRST_PIECE_ID


_BYTE_VALUE = {tok: b for b, tok in enumerate(_BYTE_TOKENS)}


def broken_characters(pieces: Sequence[str]) -> int:
    """How many U+FFFD the decoding of these pieces holds for byte tokens that do not make a UTF-8 character (a
    character cut short, or bytes in an order no character has); 0 when every run of byte tokens is text."""
    broken, run = 0, bytearray()
    for piece in [*pieces, ""]:
        value = _BYTE_VALUE.get(piece)
        if value is not None:
            run.append(value)
            continue
        if run:  # an encoded U+FFFD (EF BF BD) is a character, not a broken one
            broken += run.decode("utf-8", errors="replace").count("\ufffd") - run.count(b"\xef\xbf\xbd")
            run.clear()
    return broken


def _check_layout(hf: _HFTokenizer) -> str | None:
    """Why `hf` is not a tfm tokenizer, or None if it is."""
    try:
        spec = json.loads(hf.to_str())
    except Exception as err:  # pragma: no cover - to_str of a loaded tokenizer does not fail in practice
        return f"cannot serialise it ({err})"
    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        return f"model type is {model.get('type')!r}, expected 'BPE'"
    if not model.get("byte_fallback"):
        return "byte_fallback is off"
    for want, tok in enumerate(SPECIAL_TOKENS):
        got = hf.token_to_id(tok)
        if got != want:  # ("has id None" for a token renamed or gone)
            return f"special token {tok} is {'missing' if got is None else f'id {got}'}, expected at id {want}"
    for b, tok in enumerate(_BYTE_TOKENS):
        if (got := hf.token_to_id(tok)) != N_SPECIAL + b:
            return f"byte token {tok} is {'missing' if got is None else f'id {got}'}, expected at id {N_SPECIAL + b}"
    if spec.get("normalizer") is None or spec.get("pre_tokenizer") is None or spec.get("decoder") is None:
        return "normalizer, pre-tokenizer or decoder missing"
    return None


def train_corpus_tokenizer(
    spec: CorpusSpec, vocab_size: int, min_frequency: int = 2, *, numbers: bool,
    say: Callable[[str], None] = lambda _: None, option: str | None = None,
) -> Tokenizer:
    """The joint tokenizer of the parallel corpus `spec`, as `tfm train` and `tfm tokenize` train it: both sides of
    every pair, read twice (`corpus.tokenizer_texts`, which sends progress lines and warnings to `say`); with
    `numbers` (a model that reads numbers as a placeholder, `ModelConfig.numbers`), each number as the placeholder,
    kept one piece (`train_tokenizer`'s `whole_words`). `option` is the key or option that named the corpus, for
    messages. Raises what `train_tokenizer` and the corpus reader raise."""
    texts = tokenizer_texts(spec, say, option=option, numbers=numbers)
    return train_tokenizer(texts, vocab_size, min_frequency, whole_words=(NUMBER_PLACEHOLDER,) if numbers else ())


def train_tokenizer(
    texts: Iterable[str] | Callable[[], Iterable[str]], vocab_size: int, min_frequency: int = 2,
    whole_words: Sequence[str] = (),
) -> Tokenizer:
    """Train a joint BPE tokenizer with byte fallback on `texts` (streamed, never held in memory).

    The same texts and settings give the same tokenizer, run after run, when `texts` can be read twice (a list, or
    a function that returns a fresh iterator): a first pass chooses the alphabet (below). From a one-shot iterator
    the tokenizer is as good, but where the corpus has more distinct characters than the vocabulary keeps, which
    of the equally rare ones are dropped may differ between runs (the tokenizers library breaks those ties in
    hash order).

    A run of more than MAX_TRAINING_WORD characters without whitespace is learned from in pieces of that length
    (BPE training is quadratic in a word's length).

    Args:
        texts: sentences of both languages (source and target together: the vocabulary is shared).
        vocab_size: total number of ids, including the 4 specials and 256 byte tokens. It is an upper bound:
            a small corpus may stop with fewer merges.
        min_frequency: a pair of pieces is merged only if it occurs at least this often.
        whole_words: words of letters each kept one piece whatever their count, after a space and glued to what
            comes before, as SentencePiece's user-defined symbols (the number placeholder XNUM, which a vocabulary
            of 1,000 cut in five), in place of the last merges learned (none where the vocabulary is all characters).

    Returns:
        The trained Tokenizer.

    Raises:
        TfmError: `vocab_size` < 300 or > 1,000,000, `min_frequency` < 1, or `texts` holds no non-empty sentence.
    """
    if isinstance(texts, (str, bytes)):  # trained on its characters, one "sentence" each
        raise TypeError("train_tokenizer() takes sentences (a list or iterable of str, or a function returning one), not one str")
    for name, value in (("vocab_size", vocab_size), ("min_frequency", min_frequency)):
        if isinstance(value, bool) or not isinstance(value, int):  # "500", 500.5 and NaN failed inside the trainer
            raise TypeError(f"train_tokenizer(): {name} must be an int, not {type(value).__name__} ({value!r})")
    if vocab_size < MIN_VOCAB_SIZE:
        raise TfmError(
            f"vocab_size={vocab_size} is too small: it must be at least {MIN_VOCAB_SIZE} "
            f"({N_SPECIAL} specials + {N_BYTES} byte tokens + some pieces); try 8000"
        )
    if vocab_size > MAX_VOCAB_SIZE:
        raise TfmError(f"vocab_size={vocab_size} is too large: it must be at most {MAX_VOCAB_SIZE:,}; try 8000 to 37000")
    if min_frequency < 1:
        raise TfmError(f"min_frequency={min_frequency} must be at least 1 (try 2)")

    read = texts if callable(texts) else (lambda: texts)
    limit = vocab_size - N_BYTES - N_SPECIAL
    alphabet = _alphabet(read(), limit) if callable(texts) or not isinstance(texts, Iterator) else None
    hf = _HFTokenizer(models.BPE(unk_token=Tokenizer.UNK))
    hf.normalizer = _normalizer()
    hf.pre_tokenizer = _pre_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - N_BYTES,  # the byte tokens are inserted afterwards
        # BPE keeps every character of the corpus in its vocabulary, beyond vocab_size when there are more (a CJK
        # corpus asked for 300 gave 8,262): keep the most frequent ones; the others are spelled with byte tokens.
        # The trainer drops the rarest beyond the limit, ties in hash order; given the `limit` to keep (with the
        # largest count), it drops exactly the others.
        limit_alphabet=limit,
        initial_alphabet=alphabet or [],
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        show_progress=False,
    )
    count = [0]

    def stream() -> Iterator[str]:
        for text in read():
            if text and not text.isspace():
                count[0] += 1
                if _LONG_WORD.search(text) is None:
                    yield text
                else:  # each word on its own (the same pre-tokenized words), the longest cut in pieces
                    for word in _SPACES.split(text):
                        for start in range(0, len(word), MAX_TRAINING_WORD):
                            yield word[start : start + MAX_TRAINING_WORD]

    _stoppable(lambda: hf.train_from_iterator(stream(), trainer=trainer))
    if count[0] == 0:
        raise TfmError("cannot train a tokenizer: the training texts are empty (no non-blank sentence)")
    return Tokenizer(_with_byte_fallback(hf, whole_words, vocab_size))


def _stoppable(work: Callable[[], object]) -> None:
    """Run `work` in a thread of its own and wait for it here, a tenth of a second at a time, so that a stop
    signal's handler (Python runs them in the main thread, between two bytecodes) ends the command at once.

    `tokenizers` learns its merges in Rust, with the GIL released: Ctrl-C or SIGTERM while the main thread was
    inside that call waited for its end, 10-19 s for the bundled corpus and minutes for a large one. Here the
    KeyboardInterrupt is raised in the main thread as soon as the signal comes; the training thread (a daemon,
    whose result nobody waits for any more) ends with the process. An exception of `work` (a bad corpus line, read
    through the iterator it consumes) is raised here as it was raised there.
    """
    failed: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as error:  # noqa: BLE001 (every one is raised again in the caller's thread)
            failed.append(error)

    thread = threading.Thread(target=run, name="tfm-tokenizer-training", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.1)
    if failed:
        raise failed[0]


def _alphabet(texts: Iterable[str], limit: int) -> list[str] | None:
    """The `limit` most frequent characters of `texts` as the trainer sees them (normalised; a space is "▁", and
    every sentence starts with one), ties broken by the character; None when there are no more than `limit`."""
    normalizer, counts = _normalizer(), Counter()
    for text in texts:
        if text and not text.isspace():
            counts.update(normalizer.normalize_str(text).replace(" ", METASPACE))
            counts[METASPACE] += 1
    if len(counts) <= limit:
        return None
    return [c for c, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:limit]]


def _with_byte_fallback(trained: _HFTokenizer, whole_words: Sequence[str] = (), vocab_size: int | None = None) -> _HFTokenizer:
    """Rebuild a trained BPE with the 256 byte tokens inserted after the specials (learned ids shift by 256), and each
    of `whole_words` one piece (`_one_piece`), in at most `vocab_size` ids."""
    model = json.loads(trained.to_str())["model"]
    byte_set = set(_BYTE_TOKENS)
    learned = [
        tok for _, tok in sorted((i, tok) for tok, i in model["vocab"].items() if i >= N_SPECIAL and tok not in byte_set)
    ]  # a learned piece spelled like a byte token (only if the text is full of "<0x41>") is dropped
    kept = set(learned)
    merges = [
        (a, b)
        for a, b in (m.split(" ", 1) if isinstance(m, str) else m for m in model["merges"])
        if a + b in kept and a + b not in byte_set
    ]
    for word in whole_words:
        learned, merges = _one_piece(learned, merges, word, (vocab_size or 10**9) - N_SPECIAL - N_BYTES)
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    vocab.update({tok: N_SPECIAL + b for b, tok in enumerate(_BYTE_TOKENS)})
    vocab.update({tok: FIRST_PIECE_ID + k for k, tok in enumerate(learned)})
    hf = _HFTokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=Tokenizer.UNK, byte_fallback=True))
    hf.normalizer = _normalizer()
    hf.pre_tokenizer = _pre_tokenizer()
    hf.decoder = _decoder()
    return hf


def _one_piece(
    learned: list[str], merges: list[tuple[str, str]], word: str, size: int
) -> tuple[list[str], list[tuple[str, str]]]:
    """`learned` pieces (in id order) and `merges` (in rank order) with `word` one piece wherever it stands: glued to
    what comes before it (`$XNUM`, `XNUM:XNUM`, `我有XNUM个`) and after a space (`▁XNUM`), as SentencePiece's user-defined
    symbols are. The merges that join the pieces each is cut into now are added last, so they change only a word
    cut into those same pieces (and the characters the vocabulary lacks are added). The last merges the trainer
    learned, the least frequent, make room for them within `size` pieces; their products, which no merge before
    them reads, leave the vocabulary. A vocabulary with no room left, all of it characters, is left as it is."""
    for drop in range(len(merges) + 1):
        kept = merges[: len(merges) - drop]
        gone = {a + b for a, b in merges[len(merges) - drop :]}
        pieces = [tok for tok in learned if tok not in gone]
        added: list[str] = []
        joins: list[tuple[str, str]] = []
        for form in (word, "▁" + word):  # the bare word first: the spaced one is then "▁" and it, one join more
            symbols = _segment(form, kept + joins)
            added += [ch for ch in dict.fromkeys(symbols) if ch not in pieces and ch not in added]
            current = symbols[0]
            for symbol in symbols[1:]:
                joins.append((current, symbol))
                current += symbol
                if current not in pieces and current not in added:
                    added.append(current)
        if not added and not joins:
            return learned, merges  # one piece already, both ways
        if len(pieces) + len(added) <= size:
            return pieces + added, kept + joins
    return learned, merges


def _segment(text: str, merges: list[tuple[str, str]]) -> list[str]:
    """`text` cut as BPE cuts it with `merges`: from its characters, the adjacent pair of the lowest rank joined
    first, again and again."""
    rank = {pair: r for r, pair in enumerate(merges)}
    symbols = list(text)
    while len(symbols) > 1:
        best = min(range(len(symbols) - 1), key=lambda i: rank.get((symbols[i], symbols[i + 1]), len(rank)))
        if (symbols[best], symbols[best + 1]) not in rank:
            break
        symbols[best : best + 2] = [symbols[best] + symbols[best + 1]]
    return symbols


def tokenizer_stats(
    tokenizer: Tokenizer, pairs: Iterable[tuple[str, str]], chunk_size: int = 10000, max_len: int | None = None
) -> dict[str, object]:
    """Token counts of a parallel corpus under `tokenizer`.

    Args:
        tokenizer: the tokenizer to measure.
        pairs: (src, tgt) tuples; longer tuples use their last two items, so `read_pairs` output works as is.
        chunk_size: how many pairs to encode per batched call.
        max_len: a recipe's `data.max_len`: a pair with a side of more than max_len - 1 tokens is not measured but
            counted in "skipped_long", as training skips it (`tfm_cli.data.encode_corpus`); None: every pair.

    Returns:
        {"vocab_size", "sentences", "src_tokens": {"mean", "median", "max", "total", "unk_share",
        "byte_fallback_share"}, "tgt_tokens": {...}, "unk_share", "byte_fallback_share"}, and "skipped_long" with a
        `max_len`; the shares at the top are fractions of all src+tgt tokens, those of a side fractions of its tokens.
    """
    hist: dict[str, Counter[int]] = {"src": Counter(), "tgt": Counter()}
    unk: Counter[str] = Counter()
    byte: Counter[str] = Counter()
    n = skipped_long = 0

    def count(side: str, ids: list[int]) -> None:
        hist[side][len(ids)] += 1
        for i in ids:
            if i == Tokenizer.unk_id:
                unk[side] += 1
            elif N_SPECIAL <= i < FIRST_PIECE_ID:
                byte[side] += 1

    def surely_long(text: str) -> bool:  # as `tfm_cli.data.encode_corpus` tells it: skipped unencoded
        return surely_longer(text, max_len - 1, tokenizer.longest_piece)

    def consume(srcs: list[str], tgts: list[str]) -> None:
        nonlocal n, skipped_long
        if max_len is not None:
            fits = [not (surely_long(s) or surely_long(t)) for s, t in zip(srcs, tgts, strict=True)]
            skipped_long += fits.count(False)
            srcs = [s for s, ok in zip(srcs, fits, strict=True) if ok]
            tgts = [t for t, ok in zip(tgts, fits, strict=True) if ok]
        for s, t in zip(tokenizer.encode_batch(srcs), tokenizer.encode_batch(tgts), strict=True):
            if max_len is not None and max(len(s), len(t)) > max_len - 1:  # the </s> (or <s>) takes one
                skipped_long += 1
                continue
            n += 1
            count("src", s)
            count("tgt", t)

    src_buf: list[str] = []
    tgt_buf: list[str] = []
    for pair in pairs:
        src_buf.append(pair[-2])
        tgt_buf.append(pair[-1])
        if len(src_buf) >= chunk_size:
            consume(src_buf, tgt_buf)
            src_buf, tgt_buf = [], []
    if src_buf:
        consume(src_buf, tgt_buf)

    def summary(side: str) -> dict[str, float]:
        h = hist[side]
        count = sum(h.values())
        if count == 0:
            return {"mean": 0.0, "median": 0.0, "max": 0, "total": 0, "unk_share": 0.0, "byte_fallback_share": 0.0}
        tot = sum(k * v for k, v in h.items())
        shares = {"unk_share": unk[side] / tot if tot else 0.0, "byte_fallback_share": byte[side] / tot if tot else 0.0}
        return {"mean": tot / count, "median": _hist_median(h, count), "max": max(h), "total": tot, **shares}

    src, tgt = summary("src"), summary("tgt")
    total = src["total"] + tgt["total"]
    return {
        "vocab_size": tokenizer.vocab_size,
        "sentences": n,
        "src_tokens": src,
        "tgt_tokens": tgt,
        "unk_share": unk.total() / total if total else 0.0,
        "byte_fallback_share": byte.total() / total if total else 0.0,
        **({"skipped_long": skipped_long} if max_len is not None else {}),
    }


def _hist_median(h: Counter[int], count: int) -> float:
    """Median of a length histogram (length -> count) without expanding it."""
    ks = sorted(h)
    lo_rank, hi_rank = (count - 1) // 2, count // 2
    seen, lo = 0, None
    for k in ks:
        seen += h[k]
        if lo is None and seen > lo_rank:
            lo = k
        if seen > hi_rank:
            return (lo + k) / 2
    return float(ks[-1])  # pragma: no cover - unreachable for count >= 1
