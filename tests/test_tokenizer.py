"""The joint BPE tokenizer: fixed id layout, exact round trip through byte fallback, save/load, errors."""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers, trainers

from tfm_cli.errors import TfmError
from tfm_cli.tokenizer import MAX_TRAINING_WORD, Tokenizer, tokenizer_stats, train_tokenizer

CORPORA = Path(__file__).resolve().parents[1] / "tfm_cli" / "corpora" / "tatoeba-fr-en"


def _bundled_pairs(name: str, limit: int | None = None) -> list[tuple[str, str]]:
    with gzip.open(CORPORA / name, "rt", encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in itertools.islice(f, limit)]
    return [(r[0], r[1]) for r in rows]


def _texts(pairs: list[tuple[str, str]]) -> list[str]:
    return [s for pair in pairs for s in pair]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return train_tokenizer(_texts(_bundled_pairs("train.tsv.gz", 20000)), vocab_size=2000)


def test_id_layout(tok: Tokenizer) -> None:
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert [tok.id_to_piece(i) for i in range(4)] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert [tok.id_to_piece(4 + b) for b in (0, 0x41, 0xFF)] == ["<0x00>", "<0x41>", "<0xFF>"]
    assert tok.id_to_piece(260) not in {"<pad>", "<s>", "</s>", "<unk>"}
    assert 300 < tok.vocab_size <= 2000
    with pytest.raises(IndexError):
        tok.id_to_piece(tok.vocab_size)


@pytest.mark.parametrize(
    "text",
    [
        "Je suis étudiant.",
        "Va !",
        "Va\u202f!",  # French narrow no-break space before "!"
        "C’est l'été, n’est-ce pas ?",
        "Emoji 😀🎉 and Cyrillic Привет, CJK 你好世界, Greek λόγος.",
        "  leading,\ttabs\u00a0and\u2009thin  spaces  ",
        "\u0065\u0301 decomposed é",  # NFC composes it
        "<s> </s> <pad> <unk> are plain text here",
        "a\u2581b",  # the metaspace mark itself counts as whitespace
        "می\u200cخواهم 👨\u200d👩\u200d👧! l'été, dit-il... (3.14)",
        "\x07bell and \u200bzero width",
        "",
        "   ",
    ],
)
def test_round_trip_is_exact(tok: Tokenizer, text: str) -> None:
    ids = tok.encode(text)
    assert tok.decode(ids) == tok.normalize(text)
    assert tok.unk_id not in ids


def test_normalize(tok: Tokenizer) -> None:
    assert tok.normalize("  Va\u202f!\t\u00a0Cours\u2009! \n") == "Va ! Cours !"
    assert tok.normalize("e\u0301") == "é"
    assert tok.normalize("   ") == ""
    assert tok.encode("   ") == []
    # a byte-order mark mid-text (files joined with `cat`) is dropped, as one at the start of a file is
    assert tok.normalize("\ufeffJe suis.\n\ufeff Tu es.") == "Je suis. Tu es."
    assert tok.encode("\ufeffVa !") == tok.encode("Va !")
    # so are the invisible marks that only shape how text is shown (a zero-width space or a soft hyphen inside a
    # word was encoded as byte pieces: "tr<ZWSP>ès" translated as another word); the joiners stay
    for mark in ("\u200b", "\u2060", "\u00ad", "\u200e", "\u200f"):
        assert tok.normalize(f"Tom est tr{mark}ès fatigué.{mark}") == "Tom est très fatigué."
        assert tok.encode(f"tr{mark}ès") == tok.encode("très")
    assert tok.normalize("\u200c\u200d") == "\u200c\u200d"


def test_normalized_in_python_is_the_tokenizer_s_normaliser(tok: Tokenizer) -> None:
    """`normalized` (Python, no tokenizer: how corpora are compared) gives what the tokenizer's normaliser gives."""
    from tfm_cli.tokenizer import normalized

    texts = [
        "  Va\u202f!\t\u00a0Cours\u2009! \n", "e\u0301te\u0301", "\ufeffJ\u2019ai fini.\u2028\u200b", "l\u2018\u00e9t\u00e9\u00ad",
        "a\u2581b\u2581\u2581c", "\u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd", "\u0915\u093c\u093f", "\u200c\u200d", "\x1c\x1fx\x85y",
        "\uff21\uff22 \u00c5\u212b", "\u1100\u1161\u11a8", "\U0001f468\u200d\U0001f469", "\x07\x1b[0m", "",
    ]
    rng = random.Random(0)
    alphabet = "ae\u0301\u0308\u0327 \t\u00a0\u2019'\u00ad\u200b\u2581\u3000\u0915\u093cxyz.,"
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20))) for _ in range(2000)]
    assert [normalized(t) for t in texts] == [tok.normalize(t) for t in texts]


def test_detokenize_gives_one_normalised_line_whatever_the_ids(tok: Tokenizer) -> None:
    """A model may emit any ids: the byte tokens of a newline or tab, or of a decomposed accent. `decode` gives
    those bytes back; `detokenize` (what translations and dev scores read) gives the text `encode` would read."""
    piece = tok.piece_to_id
    ids = [*tok.encode("Il"), piece("<0x0A>"), piece("<0x09>"), *tok.encode("est"), piece("▁"), piece("<0x65>"),
           piece("<0xCC>"), piece("<0x81>")]
    assert tok.decode(ids) == "Il\n\t est e\u0301"
    assert tok.detokenize(ids) == "Il est é" == tok.normalize(tok.decode(ids))
    assert tok.detokenize([tok.bos_id, tok.eos_id]) == ""


def test_pieces_read_well_and_unseen_characters_fall_back_to_bytes(tok: Tokenizer) -> None:
    assert tok.pieces("Je suis")[0] == "▁Je"
    assert tok.pieces("😀") == ["▁", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>"]
    ids = tok.encode("😀")
    assert all(tok.is_byte(i) for i in ids[1:])


def test_a_broken_character_spelled_in_bytes_spoils_only_itself(tok: Tokenizer) -> None:
    """A run of byte tokens is read as UTF-8 would read it: a character cut short (a small model's slip, or the
    length limit inside it) is one U+FFFD, and the characters spelled in bytes beside it stay. Hugging Face's
    ByteFallback decoder turned the whole run into U+FFFD ("参", a cut character, "吅": eight of them); that is
    still what `decode_as_saved` gives, as tools reading tokenizer.json decode."""
    from tfm_cli.tokenizer import broken_characters

    def spelled(raw: bytes) -> list[int]:
        return [tok.piece_to_id(f"<0x{b:02X}>") for b in raw]

    cases = [
        "参".encode() + "吅".encode()[:2] + "吅".encode(),  # a cut character between two whole ones
        "日本".encode() + b"\xe6",  # cut at the end, as a length limit cuts
        b"\xbf" + "é".encode(),  # a continuation byte with no start
        "�".encode() + b"\xff",  # an encoded U+FFFD is a character; 0xFF never is
        "😀".encode(),  # whole
    ]
    for raw in cases:
        ids = [tok.piece_to_id("▁Je"), tok.piece_to_id("▁")] + spelled(raw) + [tok.piece_to_id("▁suis")]
        want = "Je " + raw.decode("utf-8", errors="replace") + " suis"  # Python's own UTF-8 decoder as reference
        assert tok.decode(ids) == tok.detokenize(ids) == want, raw
        assert tok.decode_batch([ids, ids[2:]]) == [want, want[3:]]
        pieces = [tok.id_to_piece(i) for i in ids]
        assert broken_characters(pieces) == want.count("\ufffd") - raw.count("�".encode()), raw
        hf = tok.backend.decode(ids, skip_special_tokens=False)  # tokenizer.json's decoder
        assert tok.decode_as_saved(ids) == hf
        assert (hf == want) == (broken_characters(pieces) == 0), raw  # they differ only where a character is broken
    assert tok.decode(spelled("参".encode() + "吅".encode()[:2] + "吅".encode())) == "参�吅"
    assert broken_characters(["▁", "<0xE5>", "▁a", "<0x8F>"]) == 2  # a word between: two runs, each broken
    assert broken_characters(tok.pieces("Je suis étudiant. 😀 你好")) == 0


def _mixed(pieces: list[str]) -> list[str]:
    """The pieces that hold both a letter and punctuation."""
    return [p for p in pieces if any(c.isalpha() for c in p) and any(c in ".,!?;:«»\"()" for c in p)]


def test_text_that_reads_like_a_byte_token_round_trips() -> None:
    """A vocabulary with no pieces for '<', '0', 'x', digits and '>' spells "<0x41>" in byte tokens; decoding once
    turned that run's text into the byte it names ("A", and "<0xE9>" into U+FFFD)."""
    tok = train_tokenizer(["le chat dort sur le tapis", "un chien court dans la rue"] * 20, vocab_size=300)
    text = "Tapez <0x41> puis <0xE9>, ou <0x3C0x41>."
    ids = tok.encode(text)
    assert sum(tok.is_byte(i) for i in ids) > 20  # the characters are spelled in bytes here
    assert tok.decode(ids) == tok.detokenize(ids) == text
    assert tok.decode(tok.encode("<0x41>")) == "<0x41>"


def test_words_and_punctuation_never_share_a_piece(tok: Tokenizer) -> None:
    """A word is learned without the punctuation that follows it ("matin." is "matin" then "."), as
    sentencepiece splits by script; apostrophes and hyphens inside a word stay in it."""
    vocabulary = [tok.id_to_piece(i) for i in range(260, tok.vocab_size)]
    assert _mixed(vocabulary) == []
    assert tok.pieces("Je suis là.")[-2:] == ["▁là", "."]
    assert tok.pieces("Où est la gare ?")[-1] == "▁?"
    pre = tok.backend.pre_tokenizer.pre_tokenize_str
    assert [w for w, _ in pre(tok.normalize("Aujourd'hui, dit-il, j’ai 25 ans... «Oui» 你好，世界。"))] == [
        "▁Aujourd'hui", ",", "▁dit-il", ",", "▁j'ai", "▁25", "▁ans", "...", "▁«", "Oui", "»", "▁你好", "，", "世界", "。",
    ]
    # a Persian word keeps its zero-width non-joiner, a family emoji its zero-width joiners
    assert [w for w, _ in pre(tok.normalize("می\u200cخواهم 👨\u200d👩\u200d👧!"))] == [
        "▁می\u200cخواهم", "▁👨\u200d👩\u200d👧!",
    ]


def test_a_tokenizer_saved_before_punctuation_was_split_encodes_as_it_did(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A run's tokenizer.json carries its own pre-tokenizer: one trained when tfm split at whitespace alone
    (pieces such as "▁là." were learned) keeps encoding that way, so its model sees the pieces it was trained on."""
    import tfm_cli.tokenizer as tokenizer_module

    with monkeypatch.context() as m:
        m.setattr(
            tokenizer_module, "_pre_tokenizer",
            lambda: pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True),
        )
        train_tokenizer(_texts(_bundled_pairs("train.tsv.gz", 20000)), vocab_size=2000).save(tmp_path / "tokenizer.json")
    old = Tokenizer.load(tmp_path / "tokenizer.json")
    learned = _mixed([old.id_to_piece(i) for i in range(260, old.vocab_size)])
    assert "▁là." in learned and len(learned) > 100
    assert old.pieces("Je suis là.")[-1] == "▁là."
    assert old.decode(old.encode("Je suis là.")) == "Je suis là."
    assert train_tokenizer(["Je suis là."] * 5, vocab_size=300).pieces("Je suis là.")[-1] == "."  # trained anew


def test_typographic_apostrophes_read_as_the_keyboard_s(tok: Tokenizer, tmp_path: Path) -> None:
    """"J’ai" (a phone, a word processor) and "J'ai" (a keyboard) are one text to the model, as Moses'
    normalize-punctuation makes them: the bundled French has ' in 65,423 lines and ’ in 705, so a sentence typed
    with ’ was translated as rarer text. A tokenizer.json saved before keeps its own normaliser (its model learned
    ’ as it is); U+02BC, a letter in some orthographies, is not touched."""
    for typed in ("J’ai faim, c’est ‘vrai’.", "J'ai faim, c'est 'vrai'."):
        assert tok.normalize(typed) == "J'ai faim, c'est 'vrai'."
        assert tok.encode(typed) == tok.encode("J'ai faim, c'est 'vrai'.")
    assert tok.normalize("сімʼя") == "сімʼя"
    tok.save(tmp_path / "tokenizer.json")
    data = json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))
    steps = data["normalizer"]["normalizers"]
    assert steps[2] == {"type": "Replace", "pattern": {"Regex": "[\u2018\u2019]"}, "content": "'"}
    data["normalizer"]["normalizers"] = steps[:2] + steps[3:]  # the normaliser of the older tokenizers
    (tmp_path / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    older = Tokenizer.load(tmp_path / "tokenizer.json")
    assert older.normalize("J’ai faim.") == "J’ai faim." and older.decode(older.encode("J’ai faim.")) == "J’ai faim."


def test_round_trip_on_the_whole_bundled_dev_set(tok: Tokenizer) -> None:
    pairs = _bundled_pairs("dev.tsv.gz")
    assert len(pairs) == 2000
    texts = _texts(pairs)
    ids = tok.encode_batch(texts)
    assert ids[:50] == [tok.encode(t) for t in texts[:50]]  # the batched encoder agrees with encode
    assert tok.decode_batch(ids) == [tok.normalize(t) for t in texts]
    assert all(tok.unk_id not in seq for seq in ids)


def test_decode_drops_pad_bos_eos_without_stopping(tok: Tokenizer) -> None:
    a, b = tok.encode("Bonjour."), tok.encode("Merci.")
    assert tok.decode([tok.bos_id, *a, tok.eos_id, tok.pad_id, tok.pad_id]) == "Bonjour."
    assert tok.decode([*a, tok.eos_id, *b]) == "Bonjour. Merci."
    assert tok.decode_batch([[tok.bos_id, *a, tok.eos_id], b]) == ["Bonjour.", "Merci."]
    for bad in (-1, tok.vocab_size):  # checked as decode checks them (decode_batch gave "" or an OverflowError)
        with pytest.raises(ValueError, match=f"token id {bad} is not in this tokenizer's vocabulary"):
            tok.decode_batch([a, [*b, bad]])


def test_save_load_keeps_everything(tok: Tokenizer, tmp_path: Path) -> None:
    path = tmp_path / "run" / "tokenizer.json"
    tok.save(path)
    assert [p.name for p in path.parent.iterdir()] == ["tokenizer.json"]  # no temporary file left
    assert tok.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    loaded = Tokenizer.load(path)
    assert loaded.sha256 == tok.sha256
    assert loaded.vocab_size == tok.vocab_size
    text = "Où est la gare ? 😀"
    assert loaded.encode(text) == tok.encode(text)
    assert loaded.decode(loaded.encode(text)) == text
    loaded.save(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == path.read_bytes()


def test_load_missing_file_names_it(tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    with pytest.raises(TfmError, match="nope.json does not exist"):
        Tokenizer.load(path)


def test_load_rejects_garbage_and_foreign_tokenizers(tok: Tokenizer, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json", encoding="utf-8")
    with pytest.raises(TfmError, match="garbage.json is not a readable tokenizer"):
        Tokenizer.load(garbage)
    # a JSON file of another kind: the library's "expected `,` or `}` at line 1 column 5" read as a syntax error
    other = tmp_path / "other.json"
    other.write_text('{"a": 1}', encoding="utf-8")
    with pytest.raises(TfmError, match="other.json is not a readable tokenizer file: JSON, but not a tokenizers file$"):
        Tokenizer.load(other)
    # weights or another binary file given as the tokenizer: the codec's "can't decode byte 0xd0 in position 0"
    weights, binary = tmp_path / "model.safetensors", tmp_path / "tok.bin"
    for path in (weights, binary):
        path.write_bytes(b"\xd0\x00\xff" * 10)
    with pytest.raises(TfmError, match="model.safetensors is not a readable tokenizer file: a model's weights, not a tokenizer$") as caught:
        Tokenizer.load(weights)
    assert caught.value.hint == "give the tokenizer.json of a tfm run (tfm tokenize and tfm train write it)"
    with pytest.raises(TfmError, match=r"tok.bin is not a readable tokenizer file: a model's weights, not a tokenizer$"):
        Tokenizer.load(binary)
    latin1 = tmp_path / "tok.json"
    latin1.write_bytes('{"é": 1}'.encode("latin-1"))
    with pytest.raises(TfmError, match=r"tok.json is not a readable tokenizer file: not UTF-8 text \(a binary file, or text in another encoding\)$"):
        Tokenizer.load(latin1)

    # Our own file with <pad> and <unk> swapped: wrong special ids.
    spec = json.loads(tok.backend.to_str())
    vocab = spec["model"]["vocab"]
    vocab["<pad>"], vocab["<unk>"] = vocab["<unk>"], vocab["<pad>"]
    swapped = tmp_path / "swapped.json"
    swapped.write_text(json.dumps(spec), encoding="utf-8")
    with pytest.raises(TfmError, match=r"swapped\.json is not a tfm tokenizer: special token <pad> is id 3, expected at id 0"):
        Tokenizer.load(swapped)
    vocab["<pad>"], vocab["<p>"] = vocab.pop("<unk>"), vocab["<pad>"]  # <pad> put back, <unk> renamed: "has id None"
    swapped.write_text(json.dumps(spec), encoding="utf-8")
    with pytest.raises(TfmError, match=r"swapped\.json is not a tfm tokenizer: special token <unk> is missing, expected at id 3"):
        Tokenizer.load(swapped)

    # Another project's BPE tokenizer: no byte fallback, specials in another order.
    foreign = HFTokenizer(models.BPE(unk_token="<unk>"))
    foreign.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(
        vocab_size=100, special_tokens=["<unk>", "<pad>", "<s>", "</s>"], show_progress=False
    )
    foreign.train_from_iterator(["le chat est noir", "the cat is black"] * 10, trainer=trainer)
    path = tmp_path / "foreign.json"
    foreign.save(str(path))
    with pytest.raises(TfmError, match=r"foreign\.json is not a tfm tokenizer"):
        Tokenizer.load(path)


def test_train_errors() -> None:
    with pytest.raises(TfmError, match="empty"):
        train_tokenizer([], vocab_size=1000)
    with pytest.raises(TfmError, match="empty"):
        train_tokenizer(iter(["", "  "]), vocab_size=1000)
    with pytest.raises(TfmError, match="vocab_size=299 is too small"):
        train_tokenizer(["a b c"], vocab_size=299)


def test_training_streams_and_is_deterministic() -> None:
    pairs = _bundled_pairs("train.tsv.gz", 3000)
    first = train_tokenizer((t for t in _texts(pairs)), vocab_size=600)
    second = train_tokenizer(iter(_texts(pairs)), vocab_size=600)
    assert first.sha256 == second.sha256
    assert first.vocab_size == 600


def test_a_line_of_a_million_characters_without_a_space_trains_in_pieces() -> None:
    """One such line (a base64 blob in a web-crawled corpus) held BPE training for 11 minutes: its cost grows with
    the square of a word's length. Words longer than MAX_TRAINING_WORD are learned from in pieces of that length;
    the other words of the line, and every other line, train as they did."""
    texts = _texts(_bundled_pairs("train.tsv.gz", 3000))
    rng = random.Random(0)
    blob = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789+/=") for _ in range(1_000_000))
    tok = train_tokenizer(texts + [f"data: {blob} end"], vocab_size=600)
    n = MAX_TRAINING_WORD
    pieces = train_tokenizer(texts + ["data:", *(blob[i : i + n] for i in range(0, len(blob), n)), "end"], vocab_size=600)
    assert tok.sha256 == pieces.sha256
    assert tok.decode(tok.encode(blob)) == blob  # encoding is whole, as ever


def test_tokenizer_stats(tok: Tokenizer) -> None:
    pairs = [("Bonjour.", "Hello."), ("Va !", "Go."), ("😀", "😀 !")]
    stats = tokenizer_stats(tok, pairs)
    assert stats["sentences"] == 3
    assert stats["vocab_size"] == tok.vocab_size
    src_lens = [len(tok.encode(s)) for s, _ in pairs]
    assert stats["src_tokens"]["max"] == max(src_lens)
    assert stats["src_tokens"]["median"] == sorted(src_lens)[1]
    assert stats["src_tokens"]["mean"] == pytest.approx(sum(src_lens) / 3)
    assert stats["unk_share"] == 0.0
    total = stats["src_tokens"]["total"] + stats["tgt_tokens"]["total"]
    assert stats["byte_fallback_share"] == pytest.approx(8 / total)  # two emoji, 4 bytes each
    # and each side's own (the table showed the whole corpus's share under "source")
    one_sided = tokenizer_stats(tok, [("Bonjour.", "😀 😀"), ("Va !", "Go.")])
    src, tgt = one_sided["src_tokens"], one_sided["tgt_tokens"]
    assert src["byte_fallback_share"] == 0.0 and tgt["byte_fallback_share"] == pytest.approx(8 / tgt["total"])
    assert src["unk_share"] == tgt["unk_share"] == 0.0
    # (line_no, src, tgt) triples from read_pairs are accepted as well
    assert tokenizer_stats(tok, [(1, s, t) for s, t in pairs]) == stats


def test_library_layer_imports() -> None:
    code = (
        "import sys, tfm_cli.tokenizer; "
        "bad = [m for m in ('torch', 'typer', 'rich') if m in sys.modules]; "
        "assert not bad, bad; "
        "import tfm_cli.corpus, tfm_cli.runs; "
        "bad = [m for m in ('torch', 'typer', 'rich') if m in sys.modules]; "
        "assert not bad, bad; "
        "import tfm_cli.data; "
        "bad = [m for m in ('typer', 'rich') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# `tfm tokenize ARGS` through the entry point in a fresh interpreter; the last stderr line says whether torch loaded
_WITHOUT_TORCH = (
    "import atexit, sys\n"
    "atexit.register(lambda: print('torch loaded:', 'torch' in sys.modules, file=sys.stderr))\n"
    "from tfm_cli.cli.app import main\n"
    "sys.argv = ['tfm', 'tokenize', *sys.argv[1:]]\n"
    "main()\n"
)


def test_tokenize_command_never_loads_torch(tmp_path: Path) -> None:
    """Training a tokenizer (from a corpus and from a recipe) and encoding with one (a file, a run, the newest run)
    is plain Python and `tokenizers`: the command starts without PyTorch's seconds of import."""
    corpus = tmp_path / "c.tsv"
    corpus.write_text("".join(f"phrase numéro {i} ici .\tsentence number {i} here .\n" for i in range(300)), encoding="utf-8")
    (tmp_path / "r.yaml").write_text(f"name: r\ndata:\n  train: {corpus}\n  dev: {corpus}\n", encoding="utf-8")
    calls = [
        ["--corpus", str(corpus), "--vocab-size", "300", "--out", "tok.json"],
        ["r.yaml", "tokenizer.vocab_size=300"],  # -> runs/r/tokenizer.json
        ["--tokenizer", "tok.json", "--encode", "phrase numéro 7"],
        ["--encode", "phrase numéro 7"],  # the newest run's (runs/r)
    ]
    for args in calls:
        done = subprocess.run(
            [sys.executable, "-c", _WITHOUT_TORCH, *args], cwd=tmp_path, capture_output=True, text=True, encoding="utf-8"
        )
        assert done.returncode == 0, (args, done.stderr)
        assert done.stderr.splitlines()[-1] == "torch loaded: False", (args, done.stderr)
    assert (tmp_path / "runs" / "r" / "tokenizer.json").is_file()
    assert "decoded: phrase numéro 7" in done.stderr


def test_saved_json_has_no_added_tokens(tok: Tokenizer, tmp_path: Path) -> None:
    # Specials live only in the model vocabulary, so "<s>" typed in a sentence is never the BOS id.
    tok.save(tmp_path / "t.json")
    spec = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))
    assert spec["added_tokens"] == []
    assert spec["model"]["byte_fallback"] is True
    assert tok.bos_id not in tok.encode("<s>")


def test_vocab_size_is_an_upper_bound_even_for_a_large_alphabet(tmp_path: Path) -> None:
    """BPE keeps every character it sees: 1,000 sentences of random CJK characters asked for 300 tokens gave a
    vocabulary of ~9,000 (and a model to match), silently. The rarest characters are now spelled in bytes."""
    import random

    rng = random.Random(0)
    texts = ["".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(10)) for _ in range(1000)]
    for size in (300, 1000):
        tok = train_tokenizer(texts, vocab_size=size, min_frequency=1)
        assert tok.vocab_size == size
        assert all(tok.decode(tok.encode(t)) == t for t in texts[:50])
    corpus = tmp_path / "cjk.tsv"
    corpus.write_text("".join(f"{a}\t{b}\n" for a, b in zip(texts[::2], texts[1::2], strict=True)), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "tfm_cli", "tokenize", "--corpus", str(corpus), "--vocab-size", "300", "--out",
         str(tmp_path / "tok.json"), "--json"], capture_output=True, text=True, check=True,
    )
    assert json.loads(proc.stdout)["vocab_size"] == 300 and json.loads(proc.stdout)["unk_share"] == 0.0
    # most characters spelled in bytes: said (84% of a side's tokens went by in the table without a word)
    stats = json.loads(proc.stdout)
    for side, key in (("source", "src_tokens"), ("target", "tgt_tokens")):
        share = stats[key]["byte_fallback_share"]
        assert share > 0.5 and f"warning: {share:.1%} of the {side} tokens are byte fallback" in proc.stderr, proc.stderr
    assert "a larger --vocab-size keeps them whole (than 300;" in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "tfm_cli", "tokenize", "--corpus", str(corpus), "--vocab-size", "12000",
         "--min-frequency", "1", "--out", str(tmp_path / "whole.json")], capture_output=True, text=True, check=True,
    )
    assert "byte fallback" not in proc.stderr, proc.stderr  # every character has a piece


def test_the_same_corpus_gives_the_same_tokenizer_in_every_process(tmp_path: Path) -> None:
    """A corpus with more distinct characters than the vocabulary keeps (here 400 sentence pairs for 320 tokens):
    the tokenizers library dropped the equally rare ones in hash order, which differs from process to process, so
    `tfm tokenize` (and so `tfm train`) wrote another tokenizer each time. The alphabet is now chosen by count,
    then by character."""
    pairs = _bundled_pairs("train.tsv.gz", 400)
    corpus = tmp_path / "small.tsv"
    corpus.write_text("".join(f"{a}\t{b}\n" for a, b in pairs), encoding="utf-8")
    made = []
    for i in range(4):  # separate processes: a hash seed each
        out = tmp_path / f"tok{i}.json"
        subprocess.run(
            [sys.executable, "-m", "tfm_cli", "tokenize", "--corpus", str(corpus), "--vocab-size", "320", "--out",
             str(out)], capture_output=True, text=True, check=True,
        )
        made.append(out.read_bytes())
    assert len(set(made)) == 1
    from_the_api = train_tokenizer(_texts(pairs), vocab_size=320)
    assert from_the_api.sha256 == Tokenizer.load(tmp_path / "tok0.json").sha256


def test_the_api_refuses_a_str_where_it_takes_many(tok: Tokenizer) -> None:
    """A str where a list is meant was taken character by character: `train_tokenizer("Bonjour le monde", 500)`
    trained on letters, `encode_batch("abc")` encoded three texts, `decode("300")` gave '<unk>'. Ids outside the
    vocabulary were an OverflowError (-1) or silently nothing (10**6); a vocab_size of "500" failed inside."""
    with pytest.raises(TypeError, match="not one str"):
        train_tokenizer("Bonjour le monde", 500)
    for bad in ("500", 500.5, float("nan"), True):
        with pytest.raises(TypeError, match="vocab_size must be an int"):
            train_tokenizer(["Bonjour le monde"], bad)
    with pytest.raises(TypeError, match="use encode\\(\\) for one"):
        tok.encode_batch("abc")
    with pytest.raises(TypeError, match="not a str"):
        tok.decode("300")
    for bad in (-1, tok.vocab_size, 10**6):
        with pytest.raises(ValueError, match=f"token id {bad} is not in this tokenizer's vocabulary"):
            tok.decode([5, bad])
    ids = tok.encode("Bonjour le monde")
    assert tok.decode(ids) == "Bonjour le monde" and tok.encode_batch(["Bonjour le monde"]) == [ids]


def test_a_stop_signal_ends_the_tokenizer_training_at_once() -> None:
    """`tokenizers` trains in Rust with the GIL released, and Python runs a signal's handler only when the main
    thread is back in Python: Ctrl-C during the merges waited for their end (10-19 s on the bundled corpus, minutes
    on a large one). The training runs in a thread of its own now, waited for a tenth of a second at a time. Here
    `zlib.compress`, which also works with the GIL released and no look at signals, stands in for it."""
    import os
    import signal
    import threading
    import time
    import zlib

    from tfm_cli.tokenizer import _stoppable

    data = os.urandom(40_000_000)
    started = time.monotonic()
    zlib.compress(data, 9)
    alone = time.monotonic() - started  # what a Ctrl-C inside the call would have waited for
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            _stoppable(lambda: zlib.compress(data, 9))
        assert time.monotonic() - started < min(1.0, alone * 0.8), alone
    finally:
        signal.signal(signal.SIGINT, previous)
    with pytest.raises(ZeroDivisionError):  # the work's own exception, in the caller's thread
        _stoppable(lambda: 1 / 0)


def test_the_head_of_a_line_far_too_long_encodes_to_the_same_first_tokens(tok: Tokenizer) -> None:
    """A dev line of 32 MB was encoded whole to keep the model's first 255 tokens (5.2 GB, 31 s): only a start
    that surely holds more than them is encoded now, ended at a space, and its first tokens are the line's."""
    from tfm_cli.corpus import head_for

    longest = tok.longest_piece
    texts = {
        "words": "Bonjour tout le monde, comment allez-vous ? " * 4000,
        "no spaces": "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(40_000)),
        "runs of spaces": ("a" + " " * 5000) * 200 + "fin",  # a million characters, 200 tokens: not cut
        "one long word": "x" * 100_000,
        "short": "Bonjour.",
    }
    for name, text in texts.items():
        head = head_for(text, 64, longest)
        assert text.startswith(head), name
        assert tok.encode(head)[:64] == tok.encode(text)[:64], name
        assert len(head) < len(text) or name in ("short", "runs of spaces"), name
    assert head_for(texts["short"], 64, longest) == "Bonjour."


def test_a_whole_word_is_one_piece_in_a_small_vocabulary() -> None:
    """A model that reads numbers as the placeholder XNUM had it cut in five pieces (`▁` `X` `N` `U` `M`) by a
    vocabulary of 1,000 trained on the whole bundled corpus: five tokens a number, and room for a broken one. With
    `whole_words` it is one piece, in place of the last merges learned, within the same vocabulary size."""
    from tfm_cli.sentences import with_number_placeholders

    pairs = _bundled_pairs("train.tsv.gz", 20000)
    texts = [s for pair in pairs for s in with_number_placeholders(*pair)]
    assert sum("XNUM" in t for t in texts) > 20  # the placeholder is in the texts, though not often enough
    plain = train_tokenizer(texts, vocab_size=600)
    assert len(plain.pieces("J'ai XNUM ans.")) > len(plain.pieces("J'ai ans.")) + 1  # else this test shows nothing
    whole = train_tokenizer(texts, vocab_size=600, whole_words=("XNUM",))
    assert whole.pieces("J'ai XNUM ans.")[1] == "▁XNUM" and whole.vocab_size == plain.vocab_size == 600
    assert whole.decode(whole.encode("Il a XNUM ans et XNUM chats.")) == "Il a XNUM ans et XNUM chats."
    # glued to what comes before it too, as the placeholder step writes `15h30`, `(3)`, `3-4`, `$5`, `我有3个`
    for text in ("à XNUMhXNUM", "(XNUM)", "XNUM-XNUM", "$XNUM", "我有XNUM个", "XNUMXNUM"):
        assert whole.pieces(text).count("XNUM") + whole.pieces(text).count("▁XNUM") == text.count("XNUM"), whole.pieces(text)
        assert whole.decode(whole.encode(text)) == whole.normalize(text)
    # only what held the merges given up, or started as XNUM does, is cut otherwise: most of the corpus is not
    dev = _texts(_bundled_pairs("dev.tsv.gz", 500))
    changed = [t for t in dev if whole.pieces(t) != plain.pieces(t)]
    assert len(changed) < len(dev) // 5, changed[:5]
    for text in dev:  # and every text still round-trips
        assert whole.decode(whole.encode(text)) == whole.normalize(text)
    # a vocabulary where it is already one piece is left as it was
    big = train_tokenizer(texts, vocab_size=2000)
    assert big.pieces("XNUM") == ["▁XNUM"]
    assert train_tokenizer(texts, vocab_size=2000, whole_words=("XNUM",)).backend.to_str() == big.backend.to_str()


def test_bpe_segmentation_by_hand_is_the_tokenizers_own() -> None:
    """`_segment`, the cut `whole_words` joins, is BPE's: the same pieces as the tokenizers library gives with the
    same merges, for words of the corpus and made-up ones."""
    from tfm_cli.tokenizer import _segment

    tok = train_tokenizer(_texts(_bundled_pairs("train.tsv.gz", 3000)), vocab_size=700)
    model = json.loads(tok.backend.to_str())["model"]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    hf = models.BPE(vocab=model["vocab"], merges=merges, unk_token="<unk>")
    words = ["▁" + w for w in ("maison", "anticonstitutionnellement", "NUM", "Marie", "qu'il", "étudiant", "zzzq", "Tom")]
    known = [w for w in words if all(ch in model["vocab"] for ch in w)]  # (an unknown character is <unk> to BPE alone)
    assert len(known) >= 6, known
    for word in known:
        assert _segment(word, merges) == [t.value for t in hf.tokenize(word)], word
