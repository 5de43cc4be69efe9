"""Corpus reading, error messages, tokenized storage, token-based batching and the resumable batch stream."""

from __future__ import annotations

import functools
import gzip
import inspect
import itertools
import os
import random
import re
from collections import Counter
from pathlib import Path

import pytest
import torch

import tfm_cli
from tfm_cli.corpus import read_pairs, resolve_corpus_path
from tfm_cli.data import Batch, BatchStream, TokenizedCorpus, encode_corpus, make_batch, token_batches
from tfm_cli.errors import CorpusError, TfmError
from tfm_cli.tokenizer import Tokenizer, train_tokenizer

DEV = "bundled:tatoeba-fr-en/dev.tsv.gz"
TRAIN = "bundled:tatoeba-fr-en/train.tsv.gz"
PAD, BOS, EOS = 0, 1, 2


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    pairs = itertools.islice(read_pairs(TRAIN), 20000)
    return train_tokenizer((s for _, src, tgt in pairs for s in (src, tgt)), vocab_size=2000)


@pytest.fixture(scope="module")
def dev_corpus(tok: Tokenizer) -> TokenizedCorpus:
    return encode_corpus(DEV, tok, max_len=64)


def write(path: Path, data: bytes | str, gz: bool = False) -> Path:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


# ---- reading ---------------------------------------------------------------------------------------------


def test_bundled_dev_resolves_and_reads_2000_pairs() -> None:
    path = resolve_corpus_path(DEV)
    assert path == Path(tfm_cli.__file__).parent / "corpora" / "tatoeba-fr-en" / "dev.tsv.gz"
    pairs = list(read_pairs(DEV))
    assert len(pairs) == 2000
    assert [p[0] for p in pairs[:3]] == [1, 2, 3]
    assert all(src and tgt for _, src, tgt in pairs)


def test_read_pairs_streams(tmp_path: Path) -> None:
    # The first pairs come out before the bad third line is even read.
    path = write(tmp_path / "c.tsv", "a\tA\nb\tB\nno tab here\n")
    stream = read_pairs(path)
    assert inspect.isgenerator(stream)
    assert next(stream) == (1, "a", "A")
    assert next(stream) == (2, "b", "B")
    with pytest.raises(CorpusError, match=r"c\.tsv:3: "):
        next(stream)


def test_plain_and_gzip_tsv_read_the_same(tmp_path: Path) -> None:
    text = "Va !\tGo.\r\nBonjour.\tHello.\tCK (attribution)\n\tEmpty source.\nFin.\tEnd.\n\n"
    plain = write(tmp_path / "c.tsv", text)
    zipped = write(tmp_path / "c.txt", text, gz=True)  # no .gz suffix: detected by magic bytes
    expected = [
        (1, "Va !", "Go."),  # CR stripped
        (2, "Bonjour.", "Hello."),  # third column ignored
        (3, "", "Empty source."),  # yielded; encode_corpus skips it
        (4, "Fin.", "End."),  # the blank last line is tolerated
    ]
    assert list(read_pairs(plain)) == expected
    assert list(read_pairs(str(zipped))) == expected


def test_pair_of_plain_files(tmp_path: Path) -> None:
    src = write(tmp_path / "train.fr", "Bonjour.\nMerci.\n")
    tgt = write(tmp_path / "train.en.gz", "Hello.\nThanks.\n\n", gz=True)
    assert list(read_pairs([str(src), str(tgt)])) == [(1, "Bonjour.", "Hello."), (2, "Merci.", "Thanks.")]
    assert list(read_pairs((src, tgt))) == list(read_pairs([src, tgt]))


def test_error_no_tab(tmp_path: Path) -> None:
    path = write(tmp_path / "c.tsv", "a\tA\nb  B\n")
    with pytest.raises(
        CorpusError, match=r"c\.tsv:2: the line has no tab: each line must be source<TAB>target"
    ):
        list(read_pairs(path))
    blank_inside = write(tmp_path / "d.tsv", "a\tA\n\nb\tB\n")
    with pytest.raises(CorpusError, match=r"d\.tsv:2: the line is blank"):
        list(read_pairs(blank_inside))


def test_byte_order_marks_of_concatenated_files_are_not_text(tmp_path: Path) -> None:
    """`cat a.tsv b.tsv`, both saved with a UTF-8 BOM: the second one starts line 3; it was kept as a U+FEFF
    character at the start of that source sentence (a piece the tokenizer learned)."""
    part = "\ufeffa\tA\nb\tB\n".encode()
    tsv = write(tmp_path / "c.tsv", part + part)
    assert [(s, t) for _, s, t in read_pairs(tsv)] == [("a", "A"), ("b", "B")] * 2
    src, tgt = write(tmp_path / "s.txt", "\ufeffa\nb\n\ufeffa\n".encode()), write(tmp_path / "t.txt", "\ufeffA\nB\n\ufeffA\n".encode())
    assert [(s, t) for _, s, t in read_pairs([src, tgt])] == [("a", "A"), ("b", "B"), ("a", "A")]


def test_no_tab_says_how_to_give_two_files_where_they_were_given(tmp_path: Path) -> None:
    """One sentence per line: a recipe gives two files as a list, a command line as its option twice."""
    path = write(tmp_path / "c.txt", "a\nb\n")
    with pytest.raises(CorpusError) as err:
        list(read_pairs(path))
    assert str(err.value).endswith("for one sentence per line, give [source_file, target_file])")
    with pytest.raises(CorpusError) as err:
        list(read_pairs(path, once=True, option="--score"))
    assert str(err.value).endswith("for one sentence per line, give --score SOURCE_FILE --score TARGET_FILE)")


@pytest.mark.parametrize("gz", [False, True])
def test_error_invalid_utf8(tmp_path: Path, gz: bool) -> None:
    path = write(tmp_path / "c.tsv", b"ok\tOK\nd\xe9j\xe0\tal\xff\n", gz=gz)
    with pytest.raises(CorpusError) as info:
        list(read_pairs(path))
    msg = str(info.value)
    assert f"{path}:2: invalid UTF-8 at byte 2 of the line" in msg
    assert "re-encode the file as UTF-8" in msg and "iconv -f cp1252 -t utf-8" in msg


def test_damaged_gzip_is_named_as_damage_not_as_an_encoding(tmp_path: Path) -> None:
    """Damage inside a gzip stream decompresses to bytes that are not UTF-8 long before the CRC at the end is read;
    the message said to re-encode the file (with iconv, which would keep the damage) instead of that it is damaged."""
    import gzip as gzip_module

    # What damage looks like from inside: a line of bytes that are not UTF-8, and a CRC at the end that fails.
    data = bytearray(gzip_module.compress(b"ok\tOK\nd\xe9j\xe0\tal\xff\n" + b"a\tb\n" * 1000))
    data[-8] ^= 0xFF  # the CRC-32 of the trailer
    path = write(tmp_path / "c.tsv.gz", bytes(data))
    with pytest.raises(CorpusError) as info:
        list(read_pairs(path))
    msg = str(info.value)
    assert msg.startswith(f"{path}: the compressed data is damaged") and "iconv" not in msg, msg
    assert f"gzip -t {path}" in msg


def test_error_mismatched_line_counts(tmp_path: Path) -> None:
    src = write(tmp_path / "s.txt", "".join(f"s{i}\n" for i in range(10)))
    tgt = write(tmp_path / "t.txt", "".join(f"t{i}\n" for i in range(9)))
    with pytest.raises(CorpusError) as info:
        list(read_pairs([src, tgt]))
    msg = str(info.value)
    assert f"{src} has 10 lines but {tgt} has 9: the source and target files must be line-aligned" in msg
    assert f"{src}:10 has no counterpart" in msg
    with pytest.raises(CorpusError, match=r"t\.txt has 9 lines but .*s\.txt has 10"):
        list(read_pairs([tgt, src]))  # roles swapped: the target file is now the longer one
    # the trailing blank line is not a line of its own
    write(tmp_path / "t.txt", "".join(f"t{i}\n" for i in range(10)) + "\n")
    assert len(list(read_pairs([src, tgt]))) == 10


def test_a_pipe_or_a_directory_is_named_as_such(tmp_path: Path) -> None:
    """`--corpus /dev/stdin` or `<(zcat c.tsv.gz)` was 'is not a file (a directory?)'."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(CorpusError, match=r"pipe is a pipe or a device, not a file: a corpus is read more than once"):
        read_pairs(fifo)
    with pytest.raises(CorpusError, match=r"^--corpus \S*pipe is a pipe or a device"):  # named as every --corpus message
        read_pairs(fifo, option="--corpus")
    with pytest.raises(CorpusError, match=r"is not a file but a directory: give the path of a \.tsv or \.txt file"):
        read_pairs([tmp_path, fifo])


@pytest.mark.parametrize("side", ["source", "target"])
def test_an_empty_last_sentence_on_one_side_is_a_line(tmp_path: Path, side: str) -> None:
    """Two files of 3 lines each (`wc -l`), the last sentence empty on one side: aligned, the empty pair yielded
    (encode_corpus skips it); it was refused as "has 2 lines but ... has 3"."""
    full, short = "Bonjour.\nMerci.\nSalut.\n", "Hello.\nThanks.\n\n"
    src = write(tmp_path / "c.fr", short if side == "source" else full)
    tgt = write(tmp_path / "c.en", full if side == "source" else short)
    pairs = list(read_pairs([src, tgt]))
    assert len(pairs) == 3 and pairs[2][0] == 3 and "" in pairs[2][1:]
    write(tmp_path / "c.en", "Hello.\n\n\nNo counterpart.\n")  # blank lines before a sentence are lines too
    write(tmp_path / "c.fr", full)
    with pytest.raises(CorpusError, match=r"c\.fr has 3 lines but .*c\.en has 4: .*c\.en:4 has no counterpart"):
        list(read_pairs([src, tgt]))


def test_error_empty_corpus(tmp_path: Path) -> None:
    empty = write(tmp_path / "empty.tsv", "")
    with pytest.raises(CorpusError, match=r"empty\.tsv contains no sentence pairs"):
        list(read_pairs(empty))
    blank = write(tmp_path / "blank.tsv.gz", "\n\n", gz=True)
    with pytest.raises(CorpusError, match=r"blank\.tsv\.gz contains no sentence pairs"):
        list(read_pairs(blank))
    a, b = write(tmp_path / "a.txt", ""), write(tmp_path / "b.txt", "")
    with pytest.raises(CorpusError, match="contain no sentence pairs"):
        list(read_pairs([a, b]))


def test_error_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match=r"corpus file .*nowhere\.tsv does not exist.*data\.train"):
        read_pairs(str(tmp_path / "nowhere.tsv"))  # at the call, before any line is read
    with pytest.raises(CorpusError, match=r"nowhere\.en does not exist"):
        read_pairs([write(tmp_path / "ok.fr", "Oui.\n"), tmp_path / "nowhere.en"])
    with pytest.raises(
        CorpusError, match=r"bundled:tatoeba-fr-en/nope\.tsv\.gz does not exist.*dev\.tsv\.gz"
    ):
        resolve_corpus_path("bundled:tatoeba-fr-en/nope.tsv.gz")
    with pytest.raises(CorpusError, match="is not a file"):
        resolve_corpus_path(str(tmp_path))
    with pytest.raises(TfmError, match="not a corpus spec"):
        list(read_pairs(["a", "b", "c"]))


def test_error_truncated_gzip(tmp_path: Path) -> None:
    data = gzip.compress(b"a\tA\n" * 1000)
    path = write(tmp_path / "cut.tsv.gz", data[: len(data) // 2])
    with pytest.raises(CorpusError, match=r"cut\.tsv\.gz: cannot read the file"):
        list(read_pairs(path))


def test_error_unreadable_file_says_permission(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file the user may not read is said to be that (with the chmod), not asked whether it is complete."""
    path = write(tmp_path / "locked.tsv", b"a\tA\n")
    if os.geteuid() != 0:  # root reads a mode-000 file: there the open is made to fail as it would for a user
        path.chmod(0)
    else:

        def denied(file, *args, **kwargs):
            raise PermissionError(13, "Permission denied", str(file))

        monkeypatch.setattr("tfm_cli.corpus.open", denied, raising=False)
    with pytest.raises(CorpusError) as err:
        list(read_pairs(path))
    assert str(err.value) == f"{path}: permission denied: make the file readable (chmod +r {path}) or run tfm as a user who may read it"
    # a start's check of the recipe's corpora adds no hint of another kind ("give a file of source<TAB>target lines")
    from tfm_cli.recipe import load_recipe
    from tfm_cli.training.checks import _check_corpora

    recipe = load_recipe(Path(__file__).parents[1] / "recipes" / "tiny.yaml", [f"data.train={path}", "data.dev=null"])
    with pytest.raises(CorpusError) as err:
        _check_corpora(recipe)
    assert str(err.value).startswith(f"data.train: {path}: permission denied") and not err.value.hint, err.value.hint


# ---- encoding --------------------------------------------------------------------------------------------


def test_encode_corpus_skips_and_counts(tok: Tokenizer, tmp_path: Path) -> None:
    long_fr = " ".join(["étudiant"] * 20)
    lines = [
        "Bonjour.\tHello.",
        "\tNo source.",  # empty source
        "Rien.\t \u00a0 ",  # target empty after normalisation
        f"{long_fr}\tShort.",  # source too long
        "Court.\t" + " ".join(["student"] * 20),  # target too long
        "Merci !\tThanks!",
    ]
    path = write(tmp_path / "c.tsv", "\n".join(lines) + "\n")
    corpus = encode_corpus(path, tok, max_len=16, chunk_size=2)
    assert (corpus.stats.read, corpus.stats.kept) == (6, 2)
    assert (corpus.stats.skipped_empty, corpus.stats.skipped_long) == (2, 2)
    assert len(corpus) == 2
    assert corpus.src(0) == tok.encode("Bonjour.") and corpus.tgt(0) == tok.encode("Hello.")
    assert corpus.src(1) == tok.encode("Merci !") and corpus.tgt(-1) == tok.encode("Thanks!")
    assert corpus.src_lengths.tolist() == [len(tok.encode("Bonjour.")), len(tok.encode("Merci !"))]
    assert corpus.tgt_lengths.tolist() == [len(tok.encode("Hello.")), len(tok.encode("Thanks!"))]
    with pytest.raises(IndexError):
        corpus.src(2)


def test_a_side_too_long_for_any_pieces_is_skipped_unencoded(tok: Tokenizer, tmp_path: Path, monkeypatch) -> None:
    """One line of 100 MB took 9.5 GB and 9 minutes to encode, only to be skipped as too long. A side with more
    characters than max_len - 1 of the tokenizer's longest pieces could hold is skipped unencoded now; the kept
    pairs and the counts are those of encoding everything (sides that are long only before normalising, runs of
    spaces or combining marks that NFC composes, are encoded and judged on their tokens)."""
    import unicodedata

    limit = 15 * tok.longest_piece  # max_len 16
    lines = [
        "Bonjour.\tHello.",
        "x" * (limit * 5) + "\tA long one.",  # too long whatever its pieces
        "Court.\t" + "word " * limit,  # too long on its tokens
        "Oui" + " " * (limit * 6) + ".\tYes.",  # long only before its spaces become one
        "Merci" + "\u200b" * (limit * 6) + " !\tThanks!",  # long only before its invisible marks go
        unicodedata.normalize("NFD", "\u1f8f") * (limit + 1) + "\tA.",  # 4 code points each, 1 once composed
        "\tNo source.",
        "\u200b\t" + "x" * (limit * 5),  # an empty side beside a long one: empty, as encoding says it
    ]
    path = write(tmp_path / "c.tsv", "\n".join(lines) + "\n")
    encoded: list[str] = []
    real = tok.encode_batch
    monkeypatch.setattr(tok, "encode_batch", lambda texts: (encoded.extend(texts), real(texts))[1])
    quick = encode_corpus(path, tok, max_len=16, chunk_size=3)
    assert encoded and not any(text.startswith("xxx") for text in encoded)  # the x line was never encoded

    class EveryLine:  # the same tokenizer, without `longest_piece`: every side encoded
        vocab_size = tok.vocab_size
        encode_batch = staticmethod(real)

    whole = encode_corpus(path, EveryLine(), max_len=16, chunk_size=3)
    # kept: Bonjour, Oui and Merci; too long: the x and the composed lines unencoded, the words on their tokens
    assert quick.stats == whole.stats and (quick.stats.kept, quick.stats.skipped_long, quick.stats.skipped_empty) == (3, 3, 2)
    assert lines[5].split("\t")[0] not in encoded
    assert [quick.src(i) for i in range(len(quick))] == [whole.src(i) for i in range(len(whole))]
    assert [quick.tgt(i) for i in range(len(quick))] == [whole.tgt(i) for i in range(len(whole))]


def test_encode_corpus_length_limit_is_max_len_minus_one(tok: Tokenizer, tmp_path: Path) -> None:
    text = "Je suis étudiant 😀"
    n = len(tok.encode(text))
    path = write(tmp_path / "c.tsv", f"{text}\tok\n")
    assert encode_corpus(path, tok, max_len=n + 1).stats.kept == 1  # n tokens + EOS fit
    assert encode_corpus(path, tok, max_len=n).stats.skipped_long == 1


def test_encoded_ids_are_stored_once_compactly(dev_corpus: TokenizedCorpus, tok: Tokenizer) -> None:
    assert dev_corpus.stats.kept == len(dev_corpus) == 2000
    assert dev_corpus._src_ids.typecode == "H"  # uint16 for a vocabulary under 65,536
    n_ids = int(dev_corpus.src_lengths.sum() + dev_corpus.tgt_lengths.sum())
    assert len(dev_corpus._src_ids) + len(dev_corpus._tgt_ids) == n_ids
    first = next(read_pairs(DEV))
    assert dev_corpus.src(0) == tok.encode(first[1])


# ---- batches ---------------------------------------------------------------------------------------------


def test_make_batch_layout_and_masks() -> None:
    batch = make_batch([[5, 6, 7], [8]], [[9, 10], [11, 12, 13]], PAD, BOS, EOS, indices=[4, 2])
    assert batch.src.tolist() == [[5, 6, 7, EOS], [8, EOS, PAD, PAD]]
    assert batch.tgt_in.tolist() == [[BOS, 9, 10, PAD], [BOS, 11, 12, 13]]
    assert batch.tgt_out.tolist() == [[9, 10, EOS, PAD], [11, 12, 13, EOS]]
    assert batch.src.dtype == batch.tgt_in.dtype == batch.tgt_out.dtype == torch.long
    assert batch.src_mask.shape == (2, 1, 1, 4) and batch.src_mask.dtype == torch.bool
    assert batch.src_mask[:, 0, 0].tolist() == [[True] * 4, [True, True, False, False]]
    assert batch.tgt_mask.shape == (2, 1, 4, 4) and batch.tgt_mask.dtype == torch.bool
    assert batch.tgt_mask[0, 0].int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0]]
    assert batch.tgt_mask[1, 0].int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    assert (batch.n_src_tokens, batch.n_tgt_tokens) == (6, 7)
    assert batch.indices == [4, 2]

    moved = batch.to("cpu")
    assert isinstance(moved, Batch) and moved is not batch
    assert torch.equal(moved.tgt_mask, batch.tgt_mask) and moved.indices == batch.indices


def test_make_batch_for_translation() -> None:
    batch = make_batch([[5], [6, 7]], None, PAD, BOS, EOS)
    assert batch.tgt_in is None and batch.tgt_out is None and batch.tgt_mask is None
    assert batch.n_tgt_tokens == 0 and batch.indices == [0, 1]
    assert batch.src.tolist() == [[5, EOS, PAD], [6, 7, EOS]]
    assert batch.to("cpu").tgt_mask is None


def _check_partition(batches: list[list[int]], n: int) -> None:
    assert sorted(i for b in batches for i in b) == list(range(n))


def test_token_batches_respect_budget_and_cover_everything(dev_corpus: TokenizedCorpus) -> None:
    src, tgt = dev_corpus.src_lengths, dev_corpus.tgt_lengths
    batches = token_batches(src, tgt, max_tokens=300, seed=1, epoch=1)
    _check_partition(batches, len(dev_corpus))
    for b in batches:
        assert len(b) * (int(src[b].max()) + 1) <= 300
        assert len(b) * (int(tgt[b].max()) + 1) <= 300
    assert token_batches(src, tgt, 300, seed=1, epoch=1) == batches  # deterministic
    assert token_batches(src, tgt, 300, seed=1, epoch=2) != batches  # a new order each epoch
    assert token_batches(src, tgt, 300, seed=2, epoch=1) != batches


def test_token_batches_sorted_for_evaluation() -> None:
    src, tgt = [3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]
    batches = token_batches(src, tgt, max_tokens=20, seed=0, epoch=1, shuffle=False)
    flat = [i for b in batches for i in b]
    assert flat == sorted(range(8), key=lambda i: (tgt[i], src[i], i))
    assert token_batches(src, tgt, 20, seed=5, epoch=9, shuffle=False) == batches


def _reference_batches(src: list[int], tgt: list[int], max_tokens: int, seed: int, epoch: int) -> list[list[int]]:
    """token_batches as its docstring says, one pair at a time in plain Python (how tfm 0.x computed them)."""
    rng = random.Random(f"tfm-batches:{seed}:{epoch}")
    order = list(range(len(src)))
    rng.shuffle(order)
    order.sort(key=lambda i: (tgt[i], src[i]))
    batches: list[list[int]] = []
    for i in order:
        grown = [*batches[-1], i] if batches else [i]
        if batches and all(len(grown) * (max(lens[j] for j in grown) + 1) <= max_tokens for lens in (src, tgt)):
            batches[-1] = grown
        else:
            batches.append([i])
    rng.shuffle(batches)
    return batches


@pytest.mark.parametrize("case", range(40))
def test_token_batches_match_a_plain_reference(case: int) -> None:
    # the same batches as ever, so a run started by an earlier tfm resumes on the batches it would have seen
    r = random.Random(case)
    n, longest = r.choice([1, 2, 7, 300]), r.choice([0, 2, 40, 400])
    src, tgt = [r.randint(0, longest) for _ in range(n)], [r.randint(0, longest) for _ in range(n)]
    max_tokens, seed, epoch = r.choice([1, 3, 64, 500, 4096]), r.randint(0, 99), r.randint(1, 9)
    expected = _reference_batches(src, tgt, max_tokens, seed, epoch)
    assert token_batches(src, tgt, max_tokens, seed, epoch) == expected
    assert token_batches(torch.tensor(src, dtype=torch.int32), torch.tensor(tgt), max_tokens, seed, epoch) == expected


def test_token_batches_oversized_pair_gets_its_own_batch() -> None:
    batches = token_batches([2, 2, 50, 2], [2, 2, 3, 2], max_tokens=12, seed=0, epoch=1)
    _check_partition(batches, 4)
    assert [2] in batches
    assert all(len(b) <= 4 for b in batches)  # 4 * (2 + 1) = 12
    assert token_batches([], [], 10, 0, 1) == []
    with pytest.raises(TfmError, match="max_tokens=0"):
        token_batches([1], [1], 0, 0, 1)


def test_batch_stream_epochs_cover_every_pair_once(dev_corpus: TokenizedCorpus) -> None:
    stream = BatchStream(dev_corpus, max_tokens=400, seed=3, pad_id=PAD, bos_id=BOS, eos_id=EOS)
    assert (stream.epoch, stream.position) == (1, 0)
    n = stream.num_batches
    it = iter(stream)
    seen = Counter(i for b in itertools.islice(it, n) for i in b.indices)
    assert seen == Counter(range(len(dev_corpus)))
    assert stream.state_dict() == {"epoch": 1, "position": n}
    batch = next(it)
    assert stream.state_dict() == {"epoch": 2, "position": 1}
    # rows hold the stored ids
    i = batch.indices[0]
    src = dev_corpus.src(i)
    assert batch.src[0, : len(src) + 1].tolist() == [*src, EOS]
    assert batch.tgt_in[0, 0].item() == BOS
    assert batch.n_tgt_tokens == int(dev_corpus.tgt_lengths[batch.indices].sum()) + len(batch.indices)


def _same(a: Batch, b: Batch) -> bool:
    return a.indices == b.indices and torch.equal(a.src, b.src) and torch.equal(a.tgt_out, b.tgt_out)


@pytest.mark.parametrize("consumed", [0, 7, 40])  # 40 crosses into epoch 2
def test_batch_stream_resumes_exactly(dev_corpus: TokenizedCorpus, consumed: int) -> None:
    def new() -> BatchStream:
        return BatchStream(dev_corpus, max_tokens=1500, seed=11, pad_id=PAD, bos_id=BOS, eos_id=EOS)

    first = new()
    assert first.num_batches < 40
    it = iter(first)
    for _ in range(consumed):
        next(it)
    state = first.state_dict()
    expected = list(itertools.islice(it, 8))

    resumed = new()
    resumed.load_state_dict(dict(state))
    got = list(itertools.islice(iter(resumed), 8))
    assert all(_same(a, b) for a, b in zip(expected, got, strict=True))
    assert resumed.state_dict() == first.state_dict()


def test_batch_stream_state_errors(dev_corpus: TokenizedCorpus) -> None:
    stream = BatchStream(dev_corpus, max_tokens=600, seed=0, pad_id=PAD, bos_id=BOS, eos_id=EOS)
    with pytest.raises(TfmError, match="malformed"):
        stream.load_state_dict({"epoch": 1})
    with pytest.raises(TfmError, match="points past the end of epoch 1"):
        stream.load_state_dict({"epoch": 1, "position": 10**6})
    empty = TokenizedCorpus.from_sequences([], [])
    with pytest.raises(TfmError, match="no pairs"):
        BatchStream(empty, max_tokens=600, seed=0, pad_id=PAD, bos_id=BOS, eos_id=EOS)


def test_batches_decode_back_to_the_corpus(tok: Tokenizer, dev_corpus: TokenizedCorpus) -> None:
    batch = make_batch(
        [dev_corpus.src(i) for i in range(3)], [dev_corpus.tgt(i) for i in range(3)], PAD, BOS, EOS, [0, 1, 2]
    )
    pairs = list(itertools.islice(read_pairs(DEV), 3))
    assert tok.decode_batch(batch.src) == [tok.normalize(src) for _, src, _ in pairs]  # a (B, S) tensor
    assert tok.decode(batch.tgt_in[1]) == tok.decode(batch.tgt_out[1]) == tok.normalize(pairs[1][2])


def test_reading_a_corpus_reports_its_progress(tok: Tokenizer) -> None:
    """A corpus is read and tokenized a chunk at a time; each chunk says how many pairs were read so far, so that
    millions of lines (minutes, with nothing said before: it looked like a hang) can be said as they go."""
    said: list[int] = []
    corpus = encode_corpus(DEV, tok, max_len=64, chunk_size=600, progress=said.append)
    assert said == [600, 1200, 1800] and corpus.stats.read == 2000  # the rest is said by the line after reading


def test_training_says_how_far_reading_a_large_corpus_has_come(tok: Tokenizer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from clitools import tiny_recipe

    import tfm_cli.training.corpora as corpora
    import tfm_cli.training.trainer as trainer
    from tfm_cli.recipe import load_recipe

    corpus = write(tmp_path / "train.tsv", "".join(f"{s}\t{t}\n" for _, s, t in itertools.islice(read_pairs(TRAIN), 1500)))
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(tiny_recipe("reading", data={"train": str(corpus), "dev": None}, train={"max_steps": 1, "save_every": 1}), encoding="utf-8")
    monkeypatch.setattr(corpora, "READING_SAID_EVERY", 0.0)
    monkeypatch.setattr(corpora, "encode_corpus", functools.partial(encode_corpus, chunk_size=500))

    class Events(trainer.TrainEvents):
        def __init__(self) -> None:
            self.said: list[str] = []

        def message(self, text: str) -> None:
            self.said.append(text)

    events = Events()
    trainer.train(load_recipe(recipe), tmp_path / "run", device="cpu", events=events)
    reading = [line for line in events.said if "pairs read and tokenized so far" in line]
    assert [line.split(" pairs")[0] for line in reading] == ["train corpus: 500", "train corpus: 1,000", "train corpus: 1,500"]
    assert events.said.index(reading[-1]) < next(i for i, line in enumerate(events.said) if "pairs kept of 1,500 read" in line)


def test_the_dry_run_says_how_far_reading_a_large_corpus_has_come(tmp_path: Path) -> None:
    """`tfm train --dry-run` read 2,000,000 lines for minutes with nothing said; every 100,000 pairs it can say so."""
    from tfm_cli.recipe import recipe_from_dict
    from tfm_cli.training import scan_corpora

    line = "Je suis là.\tI am here.\n"
    corpus = write(tmp_path / "train.tsv.gz", line * 250_000, gz=True)
    said: list[tuple[str, int]] = []
    counts = scan_corpora(recipe_from_dict({"name": "x", "data": {"train": str(corpus), "dev": None}}), [], lambda k, n: said.append((k, n)))
    assert counts == {"data.train": 250_000} and said == [("data.train", 100_000), ("data.train", 200_000)]


def test_training_a_tokenizer_says_how_far_each_pass_has_come(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`tfm tokenize` (and `tfm train` training its tokenizer) read 2,000,000 pairs twice for two minutes with nothing
    said: a line every PROGRESS_EVERY seconds names the pass and the pairs read."""
    import tfm_cli.corpus as corpus

    monkeypatch.setattr(corpus, "PROGRESS_EVERY", 0.0)
    path = write(tmp_path / "train.tsv", "Un.\tOne.\nDeux.\tTwo.\nTrois.\tThree.\n")
    said: list[str] = []
    texts = corpus.tokenizer_texts(str(path), said.append)
    assert list(texts()) == ["Un.", "One.", "Deux.", "Two.", "Trois.", "Three."]
    assert list(texts()) == ["Un.", "One.", "Deux.", "Two.", "Trois.", "Three."]  # read anew
    assert [re.sub(r" \(\d+s\)$", "", line) for line in said] == [
        *(f"tokenizer: {n} pairs read for its alphabet (pass 1 of 2) so far" for n in (1, 2, 3)),
        *(f"tokenizer: {n} pairs read for its pieces (pass 2 of 2) so far" for n in (1, 2, 3)),
    ]
    said.clear()
    tok = train_tokenizer(corpus.tokenizer_texts(str(path), said.append), vocab_size=300)
    assert tok.vocab_size > 260 and len(said) == 6 and said[-1].startswith("tokenizer: 3 pairs read for its pieces")


def test_a_sentencepiece_corpus_is_said_after_its_first_pairs(tmp_path: Path) -> None:
    """The warning of a corpus cut into SentencePiece's pieces came after the whole first pass (150 s of a
    1,000,000-line corpus) and named the option, not the file: it comes after the first 1,000 pairs now."""
    from tfm_cli.corpus import SPM_SAMPLE, tokenizer_texts

    corpus = tmp_path / "spm.tsv"
    corpus.write_text("▁Je ▁suis .\t▁I ▁am .\n" * (3 * SPM_SAMPLE), encoding="utf-8")
    said: list[str] = []
    texts = tokenizer_texts(str(corpus), said.append, option="--corpus")()
    for _ in range(2 * SPM_SAMPLE - 1):  # both sides of the first SPM_SAMPLE pairs, all but the last
        next(texts)
    assert not said
    next(texts)
    next(texts)  # the generator resumes after the last pair of the sample: the warning, before the next pair
    assert said == [said[0]] and said[0].startswith(f"warning: --corpus {corpus}: 100% of its first 1,000 pairs hold ▁")
    list(texts)
    assert len(said) == 1  # once
    plain = tmp_path / "plain.tsv"
    plain.write_text("Je suis .\tI am .\n" * 20, encoding="utf-8")
    said.clear()
    list(tokenizer_texts(str(plain), said.append)())
    assert said == []


def test_text_that_starts_as_a_binary_format_does_is_text(tmp_path: Path) -> None:
    """A PDF or a GIF is named for what it is (`_not_text`); a sentence that starts with those letters is not one."""
    corpus = write(tmp_path / "c.tsv", "GIF89a is a format.\tGIF89a est un format.\n%PDF-1.4 files.\tDes fichiers.\n")
    assert [(s, t) for _, s, t in read_pairs(corpus)] == [
        ("GIF89a is a format.", "GIF89a est un format."), ("%PDF-1.4 files.", "Des fichiers.")]
    # valid UTF-8 with control characters (a model's output spelled in byte tokens) is text too
    odd = "a\x01b\x02c\x03d\x04e\x05f\x06g\x07h"
    corpus = write(tmp_path / "d.tsv", f"{odd}\tx\n")
    assert [(s, t) for _, s, t in read_pairs(corpus)] == [(odd, "x")]


def test_numbers_on_both_sides_train_as_the_placeholder(tok: Tokenizer, tmp_path: Path) -> None:
    """With `numbers` (a model that reads numbers as the placeholder) each number a pair has on both sides is
    encoded as the placeholder; the tokenizer tfm trains for such a model is trained on the pairs so (it learns
    `▁XNUM` as a piece: the quickstart's has it), and one for a model that reads them as written on the digits."""
    from tfm_cli.corpus import tokenizer_texts

    lines = ["J'ai 3 chats et 12 chiens.\tI have twelve dogs and 3 cats.", "Bonjour.\tHello.", "En 2019.\tIn 2019."]
    path = write(tmp_path / "c.tsv", "\n".join(lines) + "\n")
    given = encode_corpus(path, tok, max_len=64, numbers=True)
    assert [given.src(0), given.tgt(0)] == [tok.encode("J'ai XNUM chats et 12 chiens."), tok.encode("I have twelve dogs and XNUM cats.")]
    assert [given.src(1), given.tgt(1), given.src(2), given.tgt(2)] == [tok.encode(t) for t in ("Bonjour.", "Hello.", "En XNUM.", "In XNUM.")]
    as_written = encode_corpus(path, tok, max_len=64)
    assert [as_written.src(2), as_written.tgt(2)] == [tok.encode("En 2019."), tok.encode("In 2019.")]
    texts = list(tokenizer_texts(path, lambda _: None)())
    assert texts[:2] == ["J'ai XNUM chats et 12 chiens.", "I have twelve dogs and XNUM cats."] and texts[4:] == ["En XNUM.", "In XNUM."]
    assert list(tokenizer_texts(path, lambda _: None, numbers=False)())[4:] == ["En 2019.", "In 2019."]
