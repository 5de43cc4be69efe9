"""The library front door, `tfm_cli.Translator`: loading, decode-setting precedence, results, streaming, warnings.

A random-weight tiny model with a tokenizer trained in-process is enough here: these tests are about what the
Translator does with a model, not about translation quality (test_e2e.py compares API and CLI on a trained one).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gzip
import itertools
import json
import os
import pickle
import platform
import re
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy
import pytest
import torch
from clitools import tfm

from tfm_cli import DecodeSettings, InputTruncatedWarning, TfmError, Translation, Translator
from tfm_cli.checkpoint import save_weights, weights_state
from tfm_cli.model import ModelConfig, Transformer
from tfm_cli.runs import FINAL
from tfm_cli.tokenizer import train_tokenizer

CORPUS = Path(__file__).resolve().parents[1] / "tfm_cli" / "corpora" / "tatoeba-fr-en" / "train.tsv.gz"
SOURCES = ["Bonjour.", "Je suis là.", "", "Merci beaucoup.", "Il fait beau.", "   ", "Où est la gare ?"]


def _texts(limit: int) -> list[str]:
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in itertools.islice(f, limit)]
    return [s for row in rows for s in row[:2]]


@pytest.fixture(scope="module")
def parts():
    """A tokenizer and a random model (sharpened so that outputs are decisive and differ between inputs)."""
    tok = train_tokenizer(_texts(400), vocab_size=320)
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=tok.vocab_size, d_model=32, d_ff=64, n_heads=2, n_enc_layers=1, n_dec_layers=1,
        max_positions=24, dropout=0.0, tie_embeddings=False,
        pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id,
    )
    model = Transformer(config).eval()
    with torch.no_grad():
        model.generator.weight.mul_(4.0)
    return model, tok


@pytest.fixture(scope="module")
def ending_parts(parts):
    """The same tokenizer with a model whose first choice is always end-of-sentence: without a minimum length
    every output is empty, so min_len decides each output's length exactly."""
    return _constant_parts(parts, favourite=parts[1].eos_id, eos_weight=3.0)


def _run_dir(root: Path, parts, decode: str | None) -> Path:
    """A run directory holding the model, its tokenizer and (optionally) a recipe with a decode: section."""
    model, tok = parts
    root.mkdir(parents=True)
    tok.save(root / "tokenizer.json")
    save_weights(root / FINAL, weights_state(model), model.config, tok.sha256, 7)
    if decode is not None:
        (root / "recipe.yaml").write_text(f"name: api\ndecode:\n{decode}", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def translator(parts) -> Translator:
    model, tok = parts
    return Translator(model, tok, DecodeSettings(max_len_offset=6))


# ---- results -------------------------------------------------------------------------------------------------


def test_one_sentence_gives_a_translation_that_is_a_string(translator: Translator) -> None:
    result = translator.translate("Je suis étudiant.")
    assert isinstance(result, Translation) and isinstance(result, str)
    assert result == result.text and type(result.text) is str
    assert result.source == "Je suis étudiant."
    assert result.tokens and translator.tokenizer.decode([translator.tokenizer.piece_to_id(p) for p in result.tokens]) == result
    assert result.nbest == [result] and result.score < 0 and result.log_prob < 0
    assert result.to_dict() == {
        "source": "Je suis étudiant.", "translation": result.text, "score": result.score, "log_prob": result.log_prob,
        "tokens": result.tokens, "truncated": False, "stopped": result.stopped,
    }
    assert result.stopped in ("eos", "max_len")


def test_a_list_keeps_order_and_empty_lines(translator: Translator) -> None:
    results = translator.translate(SOURCES)
    assert [r.source for r in results] == SOURCES
    assert results[2] == "" and results[2].tokens == [] and results[2].score == 0.0
    assert results[5] == ""  # whitespace only normalises to nothing
    one_by_one = [translator.translate(s) for s in SOURCES]
    assert [r.text for r in results] == [r.text for r in one_by_one]  # batching changes nothing
    assert len({r.text for r in results if r.source.strip()}) > 1  # distinct outputs, so a mix-up would show


def test_progress_counts_every_line(translator: Translator) -> None:
    """Empty lines were never counted: `tfm translate --score`'s bar stopped short of its total."""
    counts: list[int] = []
    translator.translate(SOURCES, progress=counts.append, greedy=True)
    assert sum(counts) == len(SOURCES)
    counts.clear()
    list(translator.translate_stream(SOURCES, chunk_lines=3, progress=counts.append, greedy=True))
    assert sum(counts) == len(SOURCES)
    for given in (5, "bar"):  # failed inside the search, after its first batch: "'int' object is not callable"
        with pytest.raises(TypeError, match=f"progress takes a function .*, not {type(given).__name__}"):
            translator.translate(SOURCES, progress=given)
        with pytest.raises(TypeError, match=f"progress takes a function .*, not {type(given).__name__}"):
            list(translator.translate_stream(SOURCES, progress=given))


def test_n_best(translator: Translator) -> None:
    results = translator.translate(SOURCES, beam=4, n_best=3)
    for r in results:
        assert len(r.nbest) == 3 and r.nbest[0] is r
        if r.source.strip():
            scores = [h.score for h in r.nbest]
            assert scores == sorted(scores, reverse=True)
            assert len({tuple(h.tokens) for h in r.nbest}) == 3
    assert results[0].to_dict(nbest=True)["nbest"][1]["translation"] == results[0].nbest[1].text


def test_results_pickle_with_their_n_best(translator: Translator) -> None:
    result = translator.translate("Bonjour.", n_best=2)
    back = pickle.loads(pickle.dumps(result))
    assert back == result and back.score == result.score and back.tokens == result.tokens
    assert [h.text for h in back.nbest] == [h.text for h in result.nbest] and back.nbest[0] is back


def test_a_translation_is_one_line_whatever_byte_tokens_the_model_emits(parts, tmp_path: Path) -> None:
    """An undertrained model can emit the byte tokens of a newline, CR or tab (byte fallback decodes them as
    such): each translation must still be one line of normalised text, so that output line i is input line i."""
    model, tok = parts
    baseline = Translator(model, tok, DecodeSettings(max_len_offset=6)).translate(SOURCES)
    common = max((t for r in baseline for t in r.tokens), key=lambda t: sum(r.tokens.count(t) for r in baseline))
    swapped = copy.deepcopy(model)
    with torch.no_grad():  # the model's favourite output piece and the newline byte trade places
        a, b = tok.piece_to_id(common), tok.piece_to_id("<0x0A>")
        swapped.generator.weight[[a, b]] = swapped.generator.weight[[b, a]].clone()
    results = Translator(swapped, tok, DecodeSettings(max_len_offset=6)).translate(SOURCES, n_best=2)
    assert any("<0x0A>" in h.tokens for r in results for h in r.nbest)  # the case is really exercised
    for r in results:
        for h in r.nbest:
            assert h.text == tok.normalize(h.text) and "\n" not in h.text, repr(h.text)
    run = _run_dir(tmp_path / "run", (swapped, tok), "  max_len_offset: 6\n")
    stdin = "".join(f"{s}\n" for s in SOURCES)
    assert len(tfm("translate", "--model", str(run), stdin=stdin).stdout.splitlines()) == len(SOURCES)
    lines = tfm("translate", "--model", str(run), "--n-best", "2", stdin=stdin).stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == [str(i // 2 + 1) for i in range(2 * len(SOURCES))]
    # the dev scores during training read the same text: references that are the translations score chrF 100
    # (BLEU would be 0: these garbage outputs have no 4-grams)
    from tfm_cli.recipe import recipe_from_dict
    from tfm_cli.training.evaluation import evaluate, load_dev

    # Greedy, and the swap made on these very sentences, translated together as the evaluation does: the first
    # step where the original model picks its favourite piece, the swapped one picks the newline byte (a lucky
    # swap made on other sentences, or beam search, left it out of these now and then).
    short = [s for s in SOURCES if s.strip() and len(tok.encode(s)) <= 10]  # no cutting, on either path
    greedy = DecodeSettings(max_len_offset=6, greedy=True)
    before = Translator(model, tok, greedy).translate(short)
    favourite = max((t for r in before for t in r.tokens), key=lambda t: sum(r.tokens.count(t) for r in before))
    swapped = copy.deepcopy(model)
    with torch.no_grad():
        a, b = tok.piece_to_id(favourite), tok.piece_to_id("<0x0A>")
        swapped.generator.weight[[a, b]] = swapped.generator.weight[[b, a]].clone()
    alone = Translator(swapped, tok, greedy).translate(short)
    pairs = [(r.source, r.text) for r in alone]
    assert any("<0x0A>" in r.tokens for r in alone)  # the newline byte is in what is scored
    dev = tmp_path / "dev.tsv"
    dev.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    recipe = recipe_from_dict({"name": "x", "decode": {"max_len_offset": 6, "beam": 1}})  # greedy
    scores = evaluate(swapped, tok, load_dev(str(dev), tok, 12), recipe, contextlib.nullcontext)
    assert scores["chrf"] == 100.0 and scores["sentences"] == len(pairs), (pairs, scores)


def test_translate_rejects_non_strings(translator: Translator) -> None:
    with pytest.raises(TypeError, match=r"input line 2 \(item 1 of the list\) is int"):  # as the NUL below is numbered
        translator.translate(["Bonjour.", 3])
    with pytest.raises(TfmError, match=r"input line 2 holds a NUL character"):
        translator.translate(["Bonjour.", "x\x00y"])
    for beam in (0, -1):  # out of range whatever else is given (with greedy=True it was "has no effect")
        with pytest.raises(TfmError, match=rf"decode setting beam={beam} must be >= 1"):
            translator.translate("Bonjour.", beam=beam, greedy=True)
    for given in (b"Bonjour.", None, 3):  # bytes read as a list of ints ("item 0 is int"); None "is not iterable"
        with pytest.raises(TypeError, match=f"takes a string or a list of strings, not {type(given).__name__}"):
            translator.translate(given)
    # a dict was translated by its keys, a set in an order of its own: translation i was not input i's
    for given in ({"Bonjour.": 1, "Merci.": 2}, {"Bonjour.", "Merci."}, frozenset(["Merci."]), {"a": 1}.keys()):
        with pytest.raises(TypeError, match=f"a {type(given).__name__} has no order to give the translations back in"):
            translator.translate(given)
        with pytest.raises(TypeError, match="has no order"):
            list(translator.translate_stream(given))
        with pytest.raises(TypeError, match="score\\(\\)'s sources takes a list of strings in order"):
            translator.score(given, ["Hello."] * len(given))


def test_stream_rejects_a_string_and_lines_that_are_not_text(translator: Translator) -> None:
    """A string is iterable: each of its characters was translated as a line, silently."""
    with pytest.raises(TypeError, match="not a str; for one sentence use translate()"):
        list(translator.translate_stream("Bonjour.\nMerci.\n"))
    with pytest.raises(TypeError, match="line 2 is bytes"):
        list(translator.translate_stream(["Bonjour.\n", b"Merci.\n"]))  # a file opened in binary mode
    for chunk in (0, "100", 1.5, True):  # "100" and 1.5 failed inside the loop with Python's own messages
        with pytest.raises(ValueError, match=re.escape(f"chunk_lines must be an integer >= 1, got {chunk!r}")):
            list(translator.translate_stream(["Bonjour."], chunk_lines=chunk))


def test_stream_checks_its_arguments_at_the_call(translator: Translator) -> None:
    """translate_stream was a generator function: nothing was checked until its results were first read, so
    `results = t.translate_stream(lines, beam=0)` returned, and the error came from wherever `results` was read
    (another function, another thread), after the input had begun to be consumed."""
    lines = iter(["Bonjour.", "Merci."])
    with pytest.raises(TypeError, match="not a str"):
        translator.translate_stream("Bonjour.")
    with pytest.raises(ValueError, match="chunk_lines"):
        translator.translate_stream(lines, chunk_lines=0)
    with pytest.raises(TypeError, match="progress"):
        translator.translate_stream(lines, progress=5)
    with pytest.raises(TfmError, match="beam=0 must be >= 1"):
        translator.translate_stream(lines, beam=0)
    with pytest.raises(TfmError, match="wider than the model's vocabulary"):
        translator.translate_stream(lines, beam=10**6)
    with pytest.raises(TypeError, match="unknown decode setting"):
        translator.translate_stream(lines, num_beams=2)
    assert next(lines) == "Bonjour."  # nothing was read
    assert [r.source for r in translator.translate_stream(["Bonjour.", "Merci."], beam=2)] == ["Bonjour.", "Merci."]


def _other_model(model: Transformer, seed: int) -> Transformer:
    """A model of `model`'s shape with other (random) weights, which translates differently."""
    other = Transformer(model.config).eval()
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.normal_(0, 0.5)
    return other


@pytest.mark.parametrize("greedy", [True, False])
def test_weights_changed_in_place_are_the_ones_translated_with(parts, greedy: bool) -> None:
    """The CPU engine decodes with packed copies of the weights (and a transposed output projection): after
    `t.model.load_state_dict(other)` it went on translating with the old weights, silently."""
    model, tok = parts
    other = _other_model(model, seed=5)
    settings = DecodeSettings(max_len_offset=6, greedy=greedy)
    t = Translator(copy.deepcopy(model), tok, settings, precision="fp32")
    before = t.translate(SOURCES)
    t.model.load_state_dict(other.state_dict())
    expected = Translator(other, tok, settings, precision="fp32").translate(SOURCES)
    assert [r.tokens for r in before] != [r.tokens for r in expected]  # the two models translate differently
    after = t.translate(SOURCES)
    assert [(r.tokens, r.score) for r in after] == [(r.tokens, r.score) for r in expected]


@pytest.mark.parametrize("how", ["assign", "data"])
def test_weights_replaced_by_other_tensors_are_the_ones_translated_with(parts, how: str) -> None:
    """`load_state_dict(..., assign=True)` (and `p.data = x`) put other tensors behind the model's parameters: the
    engine's packed copies kept the old weights, and the translator went on translating with them, silently."""
    model, tok = parts
    other = _other_model(model, seed=6)
    settings = DecodeSettings(max_len_offset=6)
    t = Translator(copy.deepcopy(model), tok, settings, precision="fp32")
    before = t.translate(SOURCES)
    if how == "assign":
        t.model.load_state_dict(copy.deepcopy(other.state_dict()), assign=True)
    else:
        for mine, theirs in zip(t.model.parameters(), other.parameters(), strict=True):
            mine.data = theirs.detach().clone()
    expected = Translator(other, tok, settings, precision="fp32").translate(SOURCES)
    assert [r.tokens for r in before] != [r.tokens for r in expected]
    assert [(r.tokens, r.score) for r in t.translate(SOURCES)] == [(r.tokens, r.score) for r in expected]


@pytest.mark.parametrize("packing", [True, False])
def test_a_model_in_training_keeps_its_mode_and_translates_without_dropout(parts, packing: bool, monkeypatch) -> None:
    """Translator(model, tok) called `model.eval()`: a model given to it in the middle of its training (as the
    README invites, to translate after an optimizer step) went on training without dropout, silently; and one
    set back to train() translated with dropout where the engine runs the model itself (CUDA, no oneDNN: the
    `packing=False` case), a different translation at every call."""
    from tfm_cli.attention import attention_report

    if not packing:
        monkeypatch.setattr("tfm_cli.packing.packing_available", lambda: False)
    model, tok = parts
    dropped = Transformer(dataclasses.replace(model.config, dropout=0.5, attn_dropout=0.5))
    dropped.load_state_dict(model.state_dict())
    settings = DecodeSettings(max_len_offset=6, greedy=True)
    expected = Translator(model, tok, settings, precision="fp32").translate(SOURCES)
    dropped.train()
    t = Translator(dropped, tok, settings, precision="fp32")
    assert dropped.training and all(m.training for m in dropped.modules())  # its training goes on with dropout
    torch.manual_seed(0)
    for _ in range(3):
        assert [(r.tokens, r.score) for r in t.translate(SOURCES)] == [(r.tokens, r.score) for r in expected]
    maps = attention_report(t, "Je suis là.").weights
    plain = attention_report(Translator(model, tok, settings, precision="fp32"), "Je suis là.").weights
    assert all(torch.equal(maps[k], plain[k]) for k in plain)
    assert dropped.training


@pytest.mark.parametrize("engine", ["fp32", "int8", "onnxruntime"])
def test_a_translator_that_has_translated_pickles_and_deep_copies(parts, tmp_path: Path, engine: str) -> None:
    """A fresh Translator pickled, but once it had translated, pickle.dumps and copy.deepcopy failed with torch's
    "NotImplementedError: Cannot access storage of OpaqueTensorImpl" (the CPU engine's packed oneDNN weights);
    one of an ONNX export never did ("cannot pickle ... InferenceSession"). Both are needed to hand a
    translator to a worker process (multiprocessing with spawn) or to copy it."""
    run = _run_dir(tmp_path / "run", parts, None)
    if engine == "onnxruntime":
        pytest.importorskip("onnxruntime")
        from tfm_cli.export import run_export

        run_export("onnx", run, tmp_path / "onnx", verify_lines=0)
        t = Translator.load(tmp_path / "onnx", max_len_offset=6)
    else:
        t = Translator.load(run, device="cpu", precision=engine, max_len_offset=6)
    expected = [(r.text, r.score) for r in t.translate(SOURCES, n_best=2)]
    for other in (pickle.loads(pickle.dumps(t)), copy.deepcopy(t)):
        assert other.engine_name == t.engine_name and other.precision == t.precision and other.settings == t.settings
        assert [(r.text, r.score) for r in other.translate(SOURCES, n_best=2)] == expected
    assert [(r.text, r.score) for r in t.translate(SOURCES, n_best=2)] == expected  # the original still works


def test_a_pickled_onnx_translator_whose_export_was_replaced_is_refused(parts, tmp_path: Path) -> None:
    """A Translator of an ONNX export pickles as the export's path (onnxruntime's sessions cannot be pickled): a
    worker that unpickled it after `tfm export --force` had replaced the export translated with the other model,
    unsaid (24 of 30 sentences differed), while the parent went on with the first. Now it is refused, in one
    line; loaded anew, the new export is used."""
    pytest.importorskip("onnxruntime")
    from tfm_cli.errors import CheckpointError
    from tfm_cli.export import run_export

    model, tok = parts
    run = _run_dir(tmp_path / "run", parts, None)
    run_export("onnx", run, tmp_path / "onnx", verify_lines=0)
    t = Translator.load(tmp_path / "onnx", max_len_offset=6)
    pickled = pickle.dumps(t)
    other = copy.deepcopy(model)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.05 * torch.randn_like(p))
    run2 = _run_dir(tmp_path / "run2", (other, tok), None)
    run_export("onnx", run2, tmp_path / "onnx", verify_lines=0, force=True)
    with pytest.raises(CheckpointError) as caught:
        pickle.loads(pickled)
    assert str(caught.value).startswith(f"{(tmp_path / 'onnx').resolve()} holds another export than the one this engine "
                                        "was pickled from (its encoder.onnx and decoder.onnx changed"), caught.value
    assert "\n" not in str(caught.value) and "Translator.load" in caught.value.hint
    fresh = Translator.load(tmp_path / "onnx", max_len_offset=6)
    assert pickle.loads(pickle.dumps(fresh)).translate(SOURCES) == fresh.translate(SOURCES)


def test_greedy_equals_beam_one(translator: Translator) -> None:
    greedy = translator.translate(SOURCES, greedy=True)
    beam1 = translator.translate(SOURCES, beam=1, alpha=0.0)
    assert [g.text for g in greedy] == [b.text for b in beam1]


def test_a_greedy_score_is_its_log_probability_whatever_the_alpha(translator: Translator) -> None:
    """Greedy search has no length penalty (`--greedy --alpha` is refused), yet its score was divided by the
    settings' one (alpha 0.6 here): -0.63 for a log-probability of -0.85."""
    assert translator.settings.alpha == 0.6
    greedy = translator.translate(SOURCES, greedy=True)
    assert all(g.score == g.log_prob for g in greedy if g)
    assert any(len(g.tokens) > 1 for g in greedy)  # where a length penalty would have changed the score
    beam = translator.translate(SOURCES, beam=2)
    assert any(b.score != b.log_prob for b in beam if b)  # beam search still divides by it


def test_min_len(ending_parts) -> None:
    translator = Translator(*ending_parts, DecodeSettings(max_len_offset=12))
    for greedy in (False, True):
        assert all(r == "" for r in translator.translate(SOURCES, greedy=greedy))
        for min_len in (1, 6):
            results = translator.translate(SOURCES, min_len=min_len, greedy=greedy)
            assert [len(r.tokens) for r in results] == [0 if not s.strip() else min_len for s in SOURCES]


# ---- streaming -----------------------------------------------------------------------------------------------


def test_stream_keeps_order_and_holds_only_a_chunk(translator: Translator) -> None:
    lines = [f"{s}\n" for s in SOURCES * 3]  # 21 lines, newline-terminated like a file
    consumed = 0

    def source():
        nonlocal consumed
        for line in lines:
            consumed += 1
            yield line

    chunk = 4
    for ready in (lambda: True, None):  # read in the caller's thread; read ahead by a thread (the default)
        consumed = 0
        stream = translator.translate_stream(source(), chunk_lines=chunk, ready=ready)
        assert consumed == 0  # lazy: nothing is read before the first result is asked for
        results = []
        for i, result in enumerate(stream):
            if ready is not None:  # when result i comes out, at most the chunk holding line i has been read
                assert consumed <= (i // chunk + 1) * chunk
            else:  # that chunk, at most one more read ahead, and the line the reader holds
                assert consumed <= i + 2 * chunk + 1
            results.append(result)
        assert consumed == len(lines)
        assert [r.source for r in results] == [line.rstrip("\n") for line in lines]
        assert [r.text for r in results] == [r.text for r in translator.translate(SOURCES * 3)]


def test_stream_of_a_slow_iterator_yields_each_line_once_it_has_come(translator: Translator) -> None:
    """Without `ready`, translate_stream waited for `chunk_lines` (2,000) lines before the first translation: a
    service reading a socket or a queue line by line saw nothing for as long. The lines that have come are now
    translated whenever the iterator has nothing more at hand (it is read by a thread), in order, and an error of
    the iterator comes after the translations of the lines before it."""
    given = threading.Event()  # set once the translation of the line before the pause is out
    waited_in_vain = []

    def source():
        yield "Bonjour.\n"
        yield "Merci.\n"
        if not given.wait(20):  # blocks as a socket does until the other side has its answer
            waited_in_vain.append(True)
        yield "Il fait beau.\n"
        raise OSError("connection reset")

    stream = translator.translate_stream(source(), greedy=True)
    first, second = next(stream), next(stream)
    given.set()
    assert not waited_in_vain, "no translation came while the iterator waited"
    third = next(stream)
    with pytest.raises(OSError, match="connection reset"):
        next(stream)
    assert [r.source for r in (first, second, third)] == ["Bonjour.", "Merci.", "Il fait beau."]
    assert [first, second, third] == translator.translate(["Bonjour.", "Merci.", "Il fait beau."], greedy=True)
    blocked = threading.Event()

    def endless():
        yield "Bonjour."
        blocked.wait(20)
        yield from itertools.repeat("Merci.")

    stream = translator.translate_stream(endless(), chunk_lines=3, greedy=True)
    assert next(stream).source == "Bonjour."
    blocked.set()
    assert [next(stream).source for _ in range(5)] == ["Merci."] * 5
    stream.close()  # the reading thread stops, as it does when a consumer breaks out of its loop
    for _ in range(50):
        if not any(t.name == "tfm-translate-stream" for t in threading.enumerate()):
            break
        time.sleep(0.1)
    assert not any(t.name == "tfm-translate-stream" for t in threading.enumerate())


def test_stream_translates_what_was_read_when_the_next_line_would_wait(translator: Translator) -> None:
    """`ready` says whether the next line is there; when it is not, what was read is translated before waiting
    (a co-process got nothing until `chunk_lines` lines had come). Order, and chunk_lines as the bound, stay."""
    lines = [f"{s}\n" for s in SOURCES * 2]
    consumed = 0
    there = set(range(4, 11))  # after reading line N, is line N + 1 there? Lines 4 to 11 came together

    def source():
        nonlocal consumed
        for line in lines:
            consumed += 1
            yield line

    stream = translator.translate_stream(source(), chunk_lines=3, ready=lambda: consumed in there)
    results, read_at = [], []
    for result in stream:
        results.append(result)
        read_at.append(consumed)
    # lines 1-3 one at a time; 4-11 in chunks of at most 3 (4-6, 7-9, 10-11); then 12-14 one at a time again
    assert read_at == [1, 2, 3, 6, 6, 6, 9, 9, 9, 11, 11, 12, 13, 14]
    assert [r.text for r in results] == [r.text for r in translator.translate(SOURCES * 2)]
    with pytest.raises(TypeError, match="ready takes a function .*, not bool"):
        translator.translate_stream(lines, ready=True)


def test_a_service_s_queue_read_by_one_stream_after_another_loses_no_request_with_ready(translator: Translator) -> None:
    """The README's service pattern: requests come on a queue, each session a stream that ends with `break`. With
    the read-ahead thread, the closed stream's thread waited on the queue and took the next session's first request
    and dropped it (as the docstring and README now say); with `ready` the lines are read in the caller's thread, and
    every request is answered, in order, by the session that asked."""
    import queue

    requests: queue.Queue[str] = queue.Queue()

    def session(n: int) -> list[str]:
        answers = []
        for result in translator.translate_stream(iter(requests.get, None), ready=lambda: not requests.empty()):
            answers.append(result.source)
            if len(answers) == n:
                break
        return answers

    for sentences in (SOURCES[:2], SOURCES[2:3], SOURCES[3:6]):
        for sentence in sentences:
            requests.put(sentence)
        assert session(len(sentences)) == list(sentences)
    assert requests.empty()


@pytest.mark.parametrize("ready", [None, lambda: True], ids=["read-ahead", "ready"])
def test_stream_interrupted_mid_chunk_yields_the_lines_done_before_it(translator: Translator, ready) -> None:
    """A KeyboardInterrupt (Ctrl-C; `tfm translate` turns SIGTERM into one) in the middle of a chunk lost every
    translation of that chunk, up to 2,000 lines of work: those of its first lines already done are now yielded,
    in order, before the interrupt goes on."""
    lines = ["Bonjour."] * 6  # one length: batches of one line each (max_tokens=1), in input order
    expected = [r.text for r in translator.translate(lines, greedy=True)]
    batches = 0

    def progress(n: int) -> None:
        nonlocal batches
        batches += 1
        if batches == 3:  # as if Ctrl-C came while the 4th line was being translated
            raise KeyboardInterrupt

    got = []
    with pytest.raises(KeyboardInterrupt):
        for result in translator.translate_stream(lines, greedy=True, max_tokens=1, progress=progress, ready=ready):
            got.append(result.text)
    assert got == expected[:3]


@pytest.mark.parametrize("ready", [None, lambda: True], ids=["read-ahead", "ready"])
def test_stream_yields_the_lines_before_a_bad_one_then_raises(translator: Translator, ready) -> None:
    """With `ready` (as `tfm translate` reads stdin), an error raised by the lines (a line that is not UTF-8) lost
    the lines read before it in the same chunk: `printf 'Il fait beau.\\n\\xff\\n' | tfm translate` printed only
    the error. They are translated and yielded first, as without `ready`."""

    def source():
        yield "Bonjour.\n"
        yield "Merci beaucoup.\n"
        raise TfmError("stdin line 3: invalid UTF-8 at byte 1")

    got = []
    with pytest.raises(TfmError, match="stdin line 3"):
        for result in translator.translate_stream(source(), greedy=True, ready=ready):
            got.append(result.text)
    assert got == [r.text for r in translator.translate(["Bonjour.", "Merci beaucoup."], greedy=True)]


def test_stream_of_a_file(translator: Translator, tmp_path: Path) -> None:
    path = tmp_path / "in.fr"
    path.write_text("Bonjour.\r\n\nMerci beaucoup.\n", encoding="utf-8")
    with open(path, encoding="utf-8", newline="") as f:
        results = list(translator.translate_stream(f, greedy=True))
    assert [r.source for r in results] == ["Bonjour.", "", "Merci beaucoup."]


def test_a_byte_order_mark_is_not_translated_or_scored(translator: Translator, tmp_path: Path) -> None:
    path = tmp_path / "in.fr"
    path.write_text("\ufeffBonjour.\nMerci beaucoup.\n", encoding="utf-8")  # as Notepad saves "UTF-8"
    with open(path, encoding="utf-8") as f:  # the README's example
        first = next(translator.translate_stream(f, greedy=True))
    plain = translator.translate("Bonjour.", greedy=True)
    assert (first.source, first.tokens) == ("Bonjour.", plain.tokens)
    assert translator.translate(["\ufeffBonjour."], greedy=True)[0].tokens == plain.tokens
    hyp = plain.text
    with_bom = translator.score(["Bonjour."], ["\ufeff" + hyp], greedy=True)
    assert hyp and with_bom["chrf"] == translator.score(["Bonjour."], [hyp], greedy=True)["chrf"] == 100.0


def test_a_line_of_invisible_characters_translates_to_an_empty_line(translator: Translator) -> None:
    """Zero-width spaces and joiners, a word joiner, direction marks, a soft hyphen, control characters (BEL,
    ESC, DEL): nothing to translate, as in a blank line (such a line was translated from its byte tokens into a whole sentence). A line with any
    visible character beside them is translated."""
    invisible = ["\u200b", " \u200c\u200d \u2060 ", "\u200e\u200f", "\u00ad", "\ufeff\ufeff", "\x07", "\x1b\x07 \x7f", "\x1b\x1b"]
    sources = ["Bonjour.", *invisible, "Merci.", "Bon\u200bjour."]
    results = translator.translate(sources, greedy=True)
    assert [(r.text, r.tokens) for r in results[1:-2]] == [("", [])] * len(invisible)
    assert results[0].tokens == translator.translate("Bonjour.", greedy=True).tokens and results[0].tokens
    assert results[-2].tokens == translator.translate("Merci.", greedy=True).tokens and results[-2].tokens
    # a zero-width space between visible characters is dropped by the tokenizer (as a line-breaking hint in a
    # word, or Thai's optional word breaks) and the rest translated
    assert results[-1].tokens == results[0].tokens


def test_a_zero_width_no_break_space_is_dropped_with_an_older_tokenizer(parts, tmp_path: Path) -> None:
    """Tokenizers trained before tfm's normaliser dropped U+FEFF anywhere keep it as byte tokens: the Translator
    drops it inside a line too, not only at its start, so such a run translates "Bon\ufeffjour." as "Bonjour."."""
    from tfm_cli.tokenizer import Tokenizer

    model, tok = parts
    tok.save(tmp_path / "tokenizer.json")
    data = json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))
    steps = data["normalizer"]["normalizers"]
    invisible = "\ufeff\u200b\u2060\u00ad\u200e\u200f"  # U+FEFF and the marks dropped with it since
    assert steps[0] == {"type": "Replace", "pattern": {"Regex": f"[{invisible}]"}, "content": ""}
    data["normalizer"]["normalizers"] = steps[1:]  # the normaliser of the older tokenizers
    (tmp_path / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    older = Tokenizer.load(tmp_path / "tokenizer.json")
    assert older.encode("Bon\ufeffjour.") != older.encode("Bonjour.")  # the old normaliser keeps it
    translator = Translator(model, older, DecodeSettings(max_len_offset=6))
    plain = translator.translate("Bonjour.", greedy=True)
    assert translator.translate("Bon\ufeffjour.\ufeff", greedy=True).tokens == plain.tokens


def test_truncation_warns_with_the_line_number(translator: Translator) -> None:
    long = " ".join(["bonjour"] * 60)  # more tokens than max_positions=24 allows
    with pytest.warns(InputTruncatedWarning, match=r"input line 3 has \d+ tokens; the model takes at most 23"):
        results = list(translator.translate_stream(["Bonjour.", "Merci.", long], chunk_lines=2, greedy=True))
    assert [r.truncated for r in results] == [False, False, True]
    # the warning names the caller's line, as Python's own warnings do, however deep the call (it named
    # translator.py for translate_stream, whose generators are deeper than translate())
    for call in (
        lambda: translator.translate(long, greedy=True),
        lambda: list(translator.translate_stream([long], greedy=True)),
        lambda: list(translator.translate_stream([long], ready=lambda: True, greedy=True)),
    ):
        with pytest.warns(InputTruncatedWarning) as caught:
            call()
        assert [w.filename for w in caught] == [__file__]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        translator.translate("Bonjour.")  # a short input warns of nothing


# ---- settings and their precedence ---------------------------------------------------------------------------


def test_paper_defaults_without_a_recipe(parts, tmp_path: Path) -> None:
    t = Translator.load(_run_dir(tmp_path / "run", parts, None), device="cpu")
    assert t.settings == DecodeSettings(beam=4, alpha=0.6, max_len_offset=50, min_len=0, max_tokens=8000)
    assert t.step == 7 and t.path == tmp_path / "run" / FINAL


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_loading_a_model_leaves_the_callers_random_state_alone(parts, tmp_path: Path, precision: str) -> None:
    """A notebook that seeds torch and then loads a model got other random numbers than without the load: building
    the model drew its random initialisation, which the trained weights then replace."""
    run = _run_dir(tmp_path / "run", parts, None)
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    Translator.load(run, device="cpu", precision=precision).translate("Bonjour.")
    assert torch.equal(torch.rand(4), expected)


def test_precedence_call_over_load_over_recipe(ending_parts, tmp_path: Path) -> None:
    run = _run_dir(tmp_path / "run", ending_parts, "  beam: 2\n  alpha: 0.0\n  min_len: 5\n  max_len_offset: 10\n")
    from_recipe = Translator.load(run, device="cpu")
    assert (from_recipe.settings.beam, from_recipe.settings.alpha, from_recipe.settings.min_len) == (2, 0.0, 5)
    assert from_recipe.settings.max_tokens == 8000  # not in the recipe: the recipe's own default
    # The recipe's min_len is really used (this model would otherwise end at once) ...
    assert all(len(r.tokens) == 5 for r in from_recipe.translate(SOURCES) if r.source.strip())
    # ... and its beam of 2 bounds n_best, unless the call raises the beam.
    with pytest.raises(TfmError, match="n_best=3 cannot exceed the beam size 2"):
        from_recipe.translate("Bonjour.", n_best=3)
    assert len(from_recipe.translate("Bonjour.", n_best=3, beam=3).nbest) == 3
    # Settings given to load win over the recipe; the call wins over both; None means "not given".
    loaded = Translator.load(run, device="cpu", beam=3, min_len=0)
    assert (loaded.settings.beam, loaded.settings.min_len, loaded.settings.alpha) == (3, 0, 0.0)
    assert len(loaded.translate("Bonjour.", n_best=3).nbest) == 3
    assert len(loaded.translate("Bonjour.", n_best=1, beam=None).nbest) == 1
    assert all(r == "" for r in loaded.translate(SOURCES))  # load's min_len=0 beat the recipe's 5
    per_call = loaded.translate(SOURCES, min_len=7)
    assert all(len(r.tokens) == 7 for r in per_call if r.source.strip())
    assert loaded.settings.min_len == 0 and all(r == "" for r in loaded.translate(SOURCES))  # defaults kept
    # greedy=True given to load, greedy=False to a call: the recipe's beam (2), not the paper's 4 (it was 4: greedy
    # settings hold no beam, and the recipe's was forgotten); a beam given to load is kept as well
    greedy = Translator.load(run, device="cpu", greedy=True)
    with pytest.raises(TfmError, match="n_best=3 cannot exceed the beam size 2"):
        greedy.translate("Bonjour.", greedy=False, n_best=3)
    assert len(greedy.translate("Bonjour.", greedy=False, n_best=2).nbest) == 2 and greedy.settings.greedy
    assert len(list(greedy.translate_stream(["Bonjour."], greedy=False, n_best=2))[0].nbest) == 2
    assert len(greedy.translate("Bonjour.", greedy=False, beam=3, n_best=3).nbest) == 3  # the call's beam wins


def test_a_beam_for_a_greedy_translator_is_refused_not_ignored(parts, tmp_path: Path) -> None:
    greedy = Translator.load(_run_dir(tmp_path / "run", parts, None), device="cpu", greedy=True)
    with pytest.raises(TfmError, match=r"beam=2 has no effect: these settings decode greedily") as caught:
        greedy.translate("Bonjour.", beam=2)  # was greedy's translation, the beam silently dropped
    assert "greedy=False" in caught.value.hint
    with pytest.raises(TfmError, match="beam=2 has no effect"):
        greedy.score(["Bonjour."], ["Hello."], beam=2)
    beam2 = Translator.load(tmp_path / "run", device="cpu", beam=2)
    assert greedy.translate("Bonjour.", beam=2, greedy=False).score == beam2.translate("Bonjour.").score
    assert greedy.translate("Bonjour.", beam=None) == greedy.translate("Bonjour.")


def test_bad_settings_are_errors(translator: Translator, parts, tmp_path: Path) -> None:
    with pytest.raises(TfmError, match="beam=0 must be >= 1"):
        translator.translate("x", beam=0)
    with pytest.raises(TfmError, match="needs beam search"):
        translator.translate("x", greedy=True, n_best=2)
    with pytest.raises(TypeError, match="unknown decode setting.*bean"):
        translator.translate("x", bean=3)
    # wrong types were torch's errors from deep inside the search ("zeros(): argument 'size' ...", "topk(): ...")
    for given, message in (
        (dict(beam=2.5), "beam=2.5 must be an integer"), (dict(beam="4"), "beam='4' must be an integer"),
        (dict(beam=True), "beam=True must be an integer"), (dict(n_best=1.5), "n_best=1.5 must be an integer"),
        (dict(alpha="0.6"), "alpha='0.6' must be a number"),
    ):
        with pytest.raises(TfmError, match=re.escape(message)):
            translator.translate("Bonjour.", **given)
    assert translator.translate("Bonjour.", beam=numpy.int64(2), alpha=1) == translator.translate("Bonjour.", beam=2, alpha=1.0)
    assert translator.translate("Bonjour.", greedy=numpy.bool_(True)) == translator.translate("Bonjour.", greedy=True)
    assert DecodeSettings(greedy=numpy.bool_(True)).greedy is True  # numpy's bool, as numpy's ints, is taken
    for alpha in (numpy.float64(0.6), numpy.float32(0.5)):  # float64 is a float subclass: it was kept as numpy's
        assert type(DecodeSettings(alpha=alpha).alpha) is float and "numpy" not in repr(DecodeSettings(alpha=alpha))
    with pytest.raises(TfmError, match=re.escape("beam='4' must be an integer")):
        DecodeSettings(beam="4")  # refused when made, not where first used
    with pytest.raises(TfmError, match="cannot exceed the beam size"):
        DecodeSettings(beam=2, n_best=3)
    run = _run_dir(tmp_path / "run", parts, None)
    with pytest.raises(TfmError, match="fp16 needs a CUDA device"):
        Translator.load(run, device="cpu", precision="fp16")
    with pytest.raises(TfmError, match="precision 'fp8' is unknown") as caught:
        Translator.load(run, device="cpu", precision="fp8")
    assert caught.value.hint == "use one of: auto, fp32, bf16, fp16, int8"  # int8 was missing from the choices


def test_precision_auto_follows_the_cpu_and_each_can_be_forced(parts, tmp_path: Path) -> None:
    from tfm_cli.runtime import cpu_has_fast_bf16

    run = _run_dir(tmp_path / "run", parts, None)
    auto = "bf16" if cpu_has_fast_bf16() else "fp32"  # bf16 only where it is faster on this CPU
    assert Translator.load(run, device="cpu").precision == auto
    assert Translator(*parts, precision="auto").precision == auto
    assert Translator.load(run, device="cpu", precision="fp32").precision == "fp32"
    bf16 = Translator.load(run, device="cpu", precision="bf16", max_len_offset=6)
    assert bf16.precision == "bf16"
    results = bf16.translate(SOURCES)
    assert [r.source for r in results] == SOURCES and all(isinstance(r.score, float) for r in results)


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.machine() != "x86_64",
                    reason="reads the x86 flags of /proc/cpuinfo")
def test_native_bf16_is_the_cpus_bf16_instructions_not_any_avx512() -> None:
    """The kernel's own flags are the reference: oneDNN's check says yes on every AVX-512 CPU, and 'auto' chose
    bf16 on a Cascade Lake that emulates it, 3x slower than fp32; and on an Intel CPU AVX512-BF16 pays only with
    AMX (an Emerald Rapids without it ran the quickstart's step at 0.59x fp32 in bf16)."""
    from tfm_cli.runtime import cpu_has_fast_bf16, cpu_has_native_bf16, resolve_precision

    info = Path("/proc/cpuinfo").read_text().splitlines()
    flags = set(next(line for line in info if line.startswith("flags")).split())
    vendor = next(line for line in info if line.startswith("vendor_id")).split(":", 1)[1].strip()
    native = bool({"avx512_bf16", "amx_bf16"} & flags)
    fast = "amx_bf16" in flags or ("avx512_bf16" in flags and vendor != "GenuineIntel")
    assert cpu_has_native_bf16() is native
    assert cpu_has_fast_bf16() is fast
    assert resolve_precision("auto", torch.device("cpu")) == ("bf16" if fast else "fp32")


@pytest.mark.parametrize(("found", "vendor", "native", "fast"), [
    ({"architecture": "x86_64", "avx512_f": True, "avx512_vnni": True, "avx512_bf16": False, "amx_bf16": False},
     "GenuineIntel", False, False),  # Cascade Lake: emulated
    ({"architecture": "x86_64", "avx512_f": True, "avx512_bf16": True, "amx_bf16": False}, "AuthenticAMD", True, True),
    ({"architecture": "x86_64", "avx512_f": True, "avx512_bf16": True, "amx_bf16": False}, "GenuineIntel", True, False),
    ({"architecture": "x86_64", "avx512_f": True, "avx512_bf16": True, "amx_bf16": True}, "GenuineIntel", True, True),
    ({"architecture": "x86_64", "avx512_f": True, "avx512_bf16": False, "amx_bf16": True}, "GenuineIntel", True, True),
    ({"architecture": "x86_64", "avx512_f": True, "avx512_bf16": True, "amx_bf16": False}, None, True, True),
    ({"architecture": "x86_64", "avx2": True}, "AuthenticAMD", False, False),
    ({"architecture": "arm64", "neon": True, "bf16": True}, None, True, True),
    ({"architecture": "arm64", "neon": True, "bf16": False}, None, False, False),
])
def test_native_and_fast_bf16_on_cpus_we_do_not_have(monkeypatch, found: dict, vendor: str | None, native: bool,
                                                     fast: bool) -> None:
    from tfm_cli import runtime

    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: found, raising=False)
    monkeypatch.setattr(runtime, "cpu_vendor", lambda: vendor)
    runtime.cpu_has_native_bf16.cache_clear()
    runtime.cpu_has_fast_bf16.cache_clear()
    try:
        assert runtime.cpu_has_native_bf16() is native
        assert runtime.cpu_has_fast_bf16() is fast
        assert runtime.resolve_precision("auto", torch.device("cpu")) == ("bf16" if fast else "fp32")
    finally:
        runtime.cpu_has_native_bf16.cache_clear()
        runtime.cpu_has_fast_bf16.cache_clear()


_CASCADE_LAKE = "vendor_id\t: GenuineIntel\nflags\t\t: fpu sse avx2 avx512f avx512_vnni\n"
_EMERALD_RAPIDS = "vendor_id\t: GenuineIntel\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_fp16\n"
_SAPPHIRE_RAPIDS = "vendor_id\t: GenuineIntel\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
_GENOA = "vendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2 avx512f avx512_bf16\n"
_GRAVITON3 = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\nCPU implementer\t: 0x41\n"
_GRAVITON2 = "processor\t: 0\nFeatures\t: fp asimd atomics\nCPU implementer\t: 0x41\n"


@pytest.mark.parametrize(("cpuinfo", "machine", "native", "fast"), [
    (_CASCADE_LAKE, "x86_64", False, False),  # oneDNN's check said bf16: emulated, 3x slower than fp32
    (_EMERALD_RAPIDS, "x86_64", True, False),
    (_SAPPHIRE_RAPIDS, "x86_64", True, True),
    (_GENOA, "x86_64", True, True),
    (_GRAVITON3, "aarch64", True, True),
    (_GRAVITON2, "aarch64", False, False),
    (None, "AMD64", False, False),  # Windows: no flags to read; fp32 rather than oneDNN's "every AVX-512 CPU"
    (None, "arm64", True, True),  # macOS: oneDNN reads Arm's BF16 extension (patched to yes here)
])
def test_a_torch_without_get_capabilities_reads_the_kernels_cpu_flags(
    monkeypatch, tmp_path: Path, cpuinfo: str | None, machine: str, native: bool, fast: bool
) -> None:
    import platform

    from tfm_cli import runtime

    monkeypatch.delattr(torch.cpu, "get_capabilities", raising=False)  # as torch 2.2 has it
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True, raising=False)  # every AVX-512
    if cpuinfo is not None:  # else no such file
        (tmp_path / "cpuinfo").write_text(cpuinfo, encoding="ascii")
    monkeypatch.setattr(runtime, "CPUINFO", str(tmp_path / "cpuinfo"))
    monkeypatch.setattr(platform, "machine", lambda: machine)
    for cached in (runtime.cpu_has_native_bf16, runtime.cpu_has_fast_bf16, runtime.cpu_vendor):
        cached.cache_clear()
    try:
        assert runtime.cpu_has_native_bf16() is native
        assert runtime.cpu_has_fast_bf16() is fast
        assert runtime.resolve_precision("auto", torch.device("cpu")) == ("bf16" if fast else "fp32")
    finally:
        for cached in (runtime.cpu_has_native_bf16, runtime.cpu_has_fast_bf16, runtime.cpu_vendor):
            cached.cache_clear()


def test_int8_quantizes_a_copy_and_stays_close_to_fp32(parts, tmp_path: Path) -> None:
    from tfm_cli.quantization import Int8Linear

    model, tok = parts
    before = {k: v.clone() for k, v in model.state_dict().items()}
    int8 = Translator(model, tok, DecodeSettings(max_len_offset=6), precision="int8")
    assert int8.precision == "int8"
    quantized = int8.model
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and sum(isinstance(m, Int8Linear) for m in quantized.modules()) == len(linears)
    assert not any(isinstance(m, torch.nn.Linear) for m in quantized.modules())
    # the model given is left as it was (a copy is quantized)
    assert all(isinstance(m, torch.nn.Linear) for m in linears)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())

    # Teacher-forced logits: int8 weights and activations move them by a little, not by much.
    torch.manual_seed(2)
    src = torch.randint(4, tok.vocab_size, (3, 9))
    tgt = torch.randint(4, tok.vocab_size, (3, 7))
    src_mask = torch.ones(3, 1, 1, 9, dtype=torch.bool)
    tgt_mask = torch.tril(torch.ones(7, 7, dtype=torch.bool))[None, None]
    with torch.no_grad():
        exact = model(src, tgt, src_mask, tgt_mask)
        approx = quantized(src, tgt, src_mask, tgt_mask)
    error = (approx - exact).abs().max() / exact.abs().max()
    assert 0 < error < 0.05, f"relative error {float(error):.4f}"

    results = int8.translate(SOURCES)
    assert [r.source for r in results] == SOURCES and all(isinstance(r.text, str) for r in results)
    assert [r.text for r in results][2] == ""  # empty lines stay empty

    # From the command line, and the engines that cannot take it say so.
    run = _run_dir(tmp_path / "run", parts, None)
    out = tfm("translate", "--model", str(run), "--precision", "int8", "--max-len", "6", "--json", stdin="Bonjour.\n")
    assert json.loads(out.stdout)["source"] == "Bonjour."
    assert Translator.load(run, device="cpu", precision="int8").precision == "int8"


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_the_caller_s_autocast_does_not_change_the_precision(parts, precision: str) -> None:
    """An fp32 (or int8) translator used inside the caller's `torch.autocast` (a notebook cell that also trains or
    evaluates in bf16) searched in bf16: other translations and scores, silently."""
    model, tok = parts
    t = Translator(model, tok, DecodeSettings(max_len_offset=6), precision=precision)
    expected = [(r.text, r.score) for r in t.translate(SOURCES, n_best=2)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = [(r.text, r.score) for r in t.translate(SOURCES, n_best=2)]
        streamed = [(r.text, r.score) for r in t.translate_stream(SOURCES, n_best=2)]
    assert got == expected and streamed == expected


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_int8_quantizes_a_half_precision_model(parts, dtype: torch.dtype) -> None:
    """A model cast to bf16 or fp16 (`model.half()`, as HF users do) given with precision="int8" failed at its
    first translation with torch's "RuntimeError: mixed dtype (CPU): expect parameter to have scalar type of
    Float"; its quantized copy now computes in fp32 around the int8 products, and the model is left as it was."""
    model, tok = parts
    half = copy.deepcopy(model).to(dtype)
    t = Translator(half, tok, DecodeSettings(max_len_offset=6), precision="int8")
    widened = Translator(copy.deepcopy(half).float(), tok, DecodeSettings(max_len_offset=6), precision="int8")
    assert [(r.text, r.score) for r in t.translate(SOURCES)] == [(r.text, r.score) for r in widened.translate(SOURCES)]
    assert next(half.parameters()).dtype == dtype


def test_int8_translation_does_not_depend_on_the_other_sentences_of_its_batch(parts) -> None:
    """int8 quantizes each input row with its own scale (as CTranslate2 does): a hypothesis's numbers, and so a
    sentence's translation and score, do not depend on the values of the other sentences of its batch. torch's
    quantize_dynamic took one scale for the whole input matrix, so a batch-mate moved every other line's result.
    The batch-mates here have the sentence's token count, so the batches have the same shapes and only their
    contents differ (another padded length changes fp32 attention's rounding, which int8 rounding can amplify)."""
    model, tok = parts
    int8 = Translator(model, tok, DecodeSettings(max_len_offset=6), precision="int8")
    layers = [m for m in int8.model.modules() if "Linear" in type(m).__name__]
    torch.manual_seed(3)
    for layer in layers:  # each layer: a row alone and next to a row of much larger values
        n = layer.in_features
        row, loud = torch.randn(1, n), 50 * torch.randn(1, n)
        with torch.no_grad():
            assert torch.equal(layer(row), layer(torch.cat([row, loud]))[:1])
    by_length: dict[int, list[str]] = {}
    for text in _texts(200):
        by_length.setdefault(len(tok.encode(text)), []).append(text)
    group = max((g for n, g in by_length.items() if 4 <= n <= 12), key=len)
    assert len(group) >= 4, by_length  # a sentence and three batch-mates of its length
    sentence, mates = group[0], group[1:4]
    for kw in ({"greedy": True}, {"beam": 3, "n_best": 2}):
        results = [int8.translate([sentence, mate], **kw)[0] for mate in mates]
        for result in results[1:]:
            assert [(h.text, h.score) for h in result.nbest] == [(h.text, h.score) for h in results[0].nbest], kw


def test_a_tokenizer_of_another_size_is_refused(parts) -> None:
    model, _ = parts
    other = train_tokenizer(_texts(2000), vocab_size=500)
    assert other.vocab_size != model.config.vocab_size
    with pytest.raises(TfmError, match="tokenizer has"):
        Translator(model, other)


def test_the_constructor_names_arguments_of_the_wrong_kind(parts, tmp_path: Path) -> None:
    """Translator("runs/tiny") (for Translator.load) failed on `'str' object has no attribute 'config'`; a tokenizer
    path or a dict of settings failed as deep."""
    model, tok = parts
    run = _run_dir(tmp_path / "run", parts, None)
    for given in (str(run), run):
        with pytest.raises(TypeError, match=re.escape(f"to load {str(run)!r} use Translator.load({str(run)!r})")):
            Translator(given, tok)
        # the README's own example, a path alone, failed on Python's "missing 1 required positional argument"
        with pytest.raises(TypeError, match=re.escape(f"to load {str(run)!r} use Translator.load({str(run)!r})")):
            Translator(given)
    with pytest.raises(TypeError, match=r"takes a Tokenizer \(Tokenizer.load\(path\)\), not NoneType"):
        Translator(model)
    with pytest.raises(TypeError, match="takes a Transformer or a decoding engine as its model, not OrderedDict"):
        Translator(model.state_dict(), tok)
    with pytest.raises(TypeError, match=r"takes a Tokenizer \(Tokenizer.load\(path\)\), not PosixPath"):
        Translator(model, run / "tokenizer.json")
    with pytest.raises(TypeError, match="settings as a DecodeSettings .*, not dict"):
        Translator(model, tok, {"beam": 2})
    assert Translator(model, tok, DecodeSettings(beam=2)).settings.beam == 2


def test_a_model_on_the_meta_device_is_refused_in_one_line(parts) -> None:
    """A model built on the meta device (shapes, no values) crashed deep in torch ("unsupported scalarType")."""
    model, tok = parts
    with torch.device("meta"):
        empty = type(model)(model.config)
    with pytest.raises(TfmError, match="the model's weights are on the meta device") as caught:
        Translator(empty, tok)
    assert "load_state_dict" in caught.value.hint


def test_a_device_is_checked_whether_named_or_given_as_a_torch_device(parts, tmp_path: Path, monkeypatch) -> None:
    """torch.device("cuda") skipped the device check: without a GPU it failed deep in torch ("Torch not compiled
    with CUDA enabled"), as train(device=torch.device("cuda")) did; "cuda:abc" and a GPU beyond the machine's
    reached torch too."""
    from tfm_cli import load_recipe, train

    run = _run_dir(tmp_path / "run", parts, None)
    assert Translator.load(run, device=torch.device("cpu")).device == torch.device("cpu")
    for cpu in ("cpu:0", torch.device("cpu", 0)):  # torch's name of the CPU with its index: "unknown device" before
        assert Translator.load(run, device=cpu).device == torch.device("cpu")
    same = [tfm("translate", "--model", str(run), "--device", name, "Bonjour.").stdout for name in ("cpu", "cpu:0")]
    assert same[0] == same[1] != ""  # the command line takes it too
    for bad in ("cuda:abc", "cuda:", "cuda:²", "cpu:1", torch.device("meta")):
        with pytest.raises(TfmError, match="unknown device"):
            Translator.load(run, device=bad)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(TfmError, match="device cuda was asked for but no CUDA GPU is available"):
        Translator.load(run, device=torch.device("cuda"))
    recipe = load_recipe(Path(__file__).resolve().parents[1] / "recipes" / "tiny.yaml")
    with pytest.raises(TfmError, match="device cuda:0 was asked for but no CUDA GPU is available"):
        train(recipe, tmp_path / "train", device=torch.device("cuda", 0))
    assert not (tmp_path / "train").exists()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(TfmError, match=re.escape("device cuda:2 was asked for but this machine has 2 CUDA GPU(s)")):
        Translator.load(run, device=torch.device("cuda", 2))


# ---- engines ---------------------------------------------------------------------------------------------------


class _OtherEngine:
    """An engine that is not the PyTorch one (as the ONNX engine is not): it delegates to a TorchEngine."""

    name = "other"

    def __init__(self, model) -> None:
        from tfm_cli.decoding import TorchEngine

        self._torch = TorchEngine(model)
        self.config, self.device = model.config, self._torch.device
        self.steps = 0

    def start(self, src, src_mask):
        return self._torch.start(src, src_mask)

    def step(self, last, state):
        self.steps += 1
        return self._torch.step(last, state)


def test_any_engine_runs_the_same_search(parts) -> None:
    from tfm_cli.decoding import TorchEngine

    model, tok = parts
    want = Translator(model, tok, DecodeSettings(max_len_offset=6)).translate(SOURCES, n_best=2)
    engine = _OtherEngine(model)
    other = Translator(engine, tok, DecodeSettings(max_len_offset=6), precision="auto")
    got = other.translate(SOURCES, n_best=2)
    assert engine.steps > 0 and (other.engine_name, other.precision) == ("other", "fp32")
    assert [[h.tokens for h in r.nbest] for r in got] == [[h.tokens for h in r.nbest] for r in want]
    assert [r.score for r in got] == [r.score for r in want]
    assert Translator(TorchEngine(model), tok).model is model  # a TorchEngine is the torch engine
    with pytest.raises(TfmError, match="runs on other: it has no PyTorch model"):
        other.model  # noqa: B018
    with pytest.raises(TfmError, match="runs fp32 graphs; precision bf16"):
        Translator(engine, tok, precision="bf16")


def test_engine_choice_is_checked_against_the_model(parts, tmp_path: Path) -> None:
    run = _run_dir(tmp_path / "run", parts, None)
    assert Translator.load(run, engine="torch", device="cpu").engine_name == "torch"
    assert Translator.load(run, device="cpu").engine_name == "torch"  # auto: a run directory is PyTorch
    with pytest.raises(TfmError, match="engine 'tensorrt' is unknown"):
        Translator.load(run, engine="tensorrt")
    with pytest.raises(TfmError, match="holds no ONNX graphs") as caught:
        Translator.load(run, engine="onnxruntime")
    assert "tfm export RUN --format onnx" in caught.value.hint


# ---- the package front -----------------------------------------------------------------------------------------


def test_import_tfm_cli_is_cheap_and_exports_the_api() -> None:
    code = (
        "import sys, tfm_cli\n"
        "print(sorted(m for m in ('torch', 'typer', 'rich', 'yaml', 'tokenizers') if m in sys.modules))\n"
        "from tfm_cli import Translator, load_recipe, train\n"
        "print(callable(Translator.load), callable(load_recipe), callable(train))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["[]", "True True True"]
    import tfm_cli

    for name in tfm_cli.__all__:
        assert getattr(tfm_cli, name) is not None
    with pytest.raises(AttributeError):
        tfm_cli.Nope  # noqa: B018


def test_type_checkers_see_the_api_with_its_types() -> None:
    """`from tfm_cli import Translator` went through the lazy module `__getattr__`, so type checkers and IDEs
    saw every name of the API as Any (mypy: `reveal_type(t.translate("..."))` is Any); the package had no
    py.typed marker (PEP 561), so mypy skipped it altogether; and `translate` was hinted `str | Sequence[str]`
    -> `Translation | list[Translation]`: a generator, which it takes, was a type error, and every caller had
    to cast its result."""
    import ast
    import importlib.resources
    import typing

    import tfm_cli
    from tfm_cli import translator

    assert importlib.resources.files("tfm_cli").joinpath("py.typed").is_file()
    pyproject = (Path(tfm_cli.__file__).parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^tfm_cli = \[.*"py\.typed"', pyproject, re.M)  # shipped in the wheel too
    tree = ast.parse(Path(tfm_cli.__file__).read_text(encoding="utf-8"))
    checked = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    seen = {a.asname: n.module for n in checked.body if isinstance(n, ast.ImportFrom) for a in n.names}
    assert seen == tfm_cli._API  # every lazy name, from the module it is loaded from, re-exported (`X as X`)
    if sys.version_info >= (3, 11):  # typing.get_overloads is 3.11+
        overloads = typing.get_overloads(translator.Translator.translate)
        hints = [typing.get_type_hints(f) for f in overloads]
        assert [(h["text"], h["return"]) for h in hints] == [
            (str, Translation), (Iterable[str], list[Translation]),
        ]
    text_hint = typing.get_type_hints(translator.Translator.translate)["text"]
    assert typing.get_args(text_hint) == (str, Iterable[str])
    # tfm_cli.model's lazy names too: `t.model` was Any (pyright: Unknown) to a type checker
    from tfm_cli import model

    tree = ast.parse(Path(model.__file__).read_text(encoding="utf-8"))
    checked = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    assert {a.asname: n.module for n in checked.body if isinstance(n, ast.ImportFrom) for a in n.names} == model._LAZY
    # paths are any os.PathLike, as the README says and the functions take: `str | Path` refused a PathLike variable
    from tfm_cli.export import run_export

    for function, names in (
        (translator.Translator.load, ("model", "runs_root")), (tfm_cli.load_recipe, ("path",)),
        (tfm_cli.train, ("recipe", "run_dir")), (run_export, ("model", "out", "runs_root")),
    ):
        hints = typing.get_type_hints(function)
        for name in names:
            assert os.PathLike[str] in typing.get_args(hints[name]), (function.__qualname__, name, hints[name])


def _constant_parts(parts, favourite: int, eos_weight: float):
    """The `parts` tokenizer with a model whose choices are the same at every step: `favourite`, then end of sentence
    (its row scaled by `eos_weight` < 3), then the rest."""
    _, tok = parts
    torch.manual_seed(1)
    config = ModelConfig(
        vocab_size=tok.vocab_size, d_model=32, d_ff=64, n_heads=2, n_enc_layers=1, n_dec_layers=1,
        max_positions=24, dropout=0.0, tie_embeddings=False, norm="pre",
        pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id,
    )
    model = Transformer(config).eval()
    with torch.no_grad():
        b = torch.randn(config.d_model)
        model.decoder_norm.weight.zero_()
        model.decoder_norm.bias.copy_(b)
        model.generator.weight[favourite] = 3 * b
        model.generator.weight[tok.eos_id] = eos_weight * b
    return model, tok


def test_unk_never_reaches_the_text(parts, tmp_path: Path) -> None:
    """A model that preferred <unk> translated "Bonjour." to "<unk><unk><unk>..." (12 of them, up to the length
    limit), in the API and in `tfm translate`. The search never outputs <unk> now: here the end of sentence, the
    model's next choice, wins."""
    unk = parts[1].unk_id
    model, tok = _constant_parts(parts, unk, eos_weight=2.9)
    translator = Translator(model, tok, DecodeSettings(max_len_offset=3))
    for settings in ({}, {"greedy": True}, {"beam": 3, "n_best": 3}):
        result = translator.translate("Bonjour.", **settings)
        assert all("<unk>" not in h and "<unk>" not in h.tokens for h in result.nbest), settings
        assert result == "" and result.stopped == "eos", settings
    run = _run_dir(tmp_path / "run", (model, tok), None)
    out = tfm("translate", "--model", str(run), "--device", "cpu", "--json", "--max-len", "3", "Bonjour.").stdout
    record = json.loads(out)
    assert record["translation"] == "" and tok.id_to_piece(unk) not in record["tokens"] and record["stopped"] == "eos"


def test_stopped_tells_a_translation_cut_at_the_maximum_length(parts, tmp_path: Path) -> None:
    """A translation cut at the maximum output length (its </s> forced there) looked like one the model ended, in
    `--json` and in the API. `stopped` says which: "max_len" or "eos", for the n-best entries too."""
    _, tok = parts
    piece = tok.piece_to_id("a")
    runs_on = Translator(*_constant_parts(parts, piece, eos_weight=2.9), DecodeSettings(max_len_offset=3))
    ends = Translator(*_constant_parts(parts, piece, eos_weight=3.1), DecodeSettings(max_len_offset=3))
    for settings in ({}, {"greedy": True}, {"beam": 2, "n_best": 2}):
        cut = runs_on.translate("Bonjour.", **settings)
        assert cut.stopped == "max_len" and len(cut.tokens) == len(tok.encode("Bonjour.")) + 3, settings
        assert cut.to_dict(nbest=True)["stopped"] == "max_len"
        assert [h["stopped"] for h in cut.to_dict(nbest=True)["nbest"]][0] == "max_len"
        done = ends.translate("Bonjour.", **settings)
        assert done == "" and done.stopped == "eos" and done.to_dict()["stopped"] == "eos", settings
    assert runs_on.translate("").stopped == "eos"  # an empty input: nothing cut
    run = _run_dir(tmp_path / "run", _constant_parts(parts, piece, eos_weight=2.9), None)
    args = ["translate", "--model", str(run), "--device", "cpu", "--json", "--max-len", "3"]
    records = [json.loads(line) for line in tfm(*args, "--n-best", "2", "--beam", "2", stdin="Bonjour.\n\n").stdout.splitlines()]
    assert [r["stopped"] for r in records] == ["max_len", "eos"]
    assert records[0]["nbest"][0]["stopped"] == "max_len" and all("stopped" in h for r in records for h in r["nbest"])


def test_translate_says_once_how_many_translations_were_cut_at_the_maximum_length(parts, tmp_path: Path) -> None:
    """`tfm translate` printed translations cut at the maximum output length (the search out of steps before </s>)
    without a word on stderr: only --json's "stopped" told them. It now says it once, at the end, counted and with
    the lines, naming the knob that lengthens them (--max-len; the recipe's decode.max_len_offset); also when
    scoring, where cut translations lower the BLEU. Nothing is said when every translation ended."""
    _, tok = parts
    piece = tok.piece_to_id("a")
    cut = _run_dir(tmp_path / "cut", _constant_parts(parts, piece, eos_weight=2.9), None)
    ends = _run_dir(tmp_path / "ends", _constant_parts(parts, piece, eos_weight=3.1), None)
    base = ["translate", "--device", "cpu", "--max-len", "3"]
    stream = tfm(*base, "--model", str(cut), stdin="Bonjour.\n\nMerci.\nIl fait beau.\n")
    (line,) = [w for w in stream.stderr.splitlines() if "maximum output length" in w]
    assert line.startswith("warning: 3 of 4 translations (lines 1, 3, 4) were cut at the maximum output length (input tokens + 3)")
    assert "raise --max-len (the recipe's decode.max_len_offset)" in line and len(stream.stdout.splitlines()) == 4
    one = tfm(*base, "--model", str(cut), "--beam", "2", "--n-best", "2", "Bonjour.").stderr
    assert "warning: the translation was cut at the maximum output length (input tokens + 3) before the model ended it" in one
    ref = tmp_path / "ref.en"
    ref.write_text("a\nb\n", encoding="utf-8")
    scored = tfm(*base, "--model", str(cut), "--reference", str(ref), "--json", stdin="Bonjour.\nMerci.\n").stderr
    assert "2 of 2 translations (lines 1, 2) were cut" in scored and "--json marks" not in scored
    for run, args in ((ends, ()), (cut, ("--max-len", "30"))):  # 30: past the model's 23 positions
        said = tfm(*base, "--model", str(run), *args, stdin="Bonjour.\nMerci.\n").stderr
        assert ("maximum output length" in said) == (run == cut), said
    capped = tfm(*base, "--model", str(cut), "--max-len", "30", "Bonjour.").stderr
    assert "length (the model's limit of 23 tokens (model.max_positions - 1), which --max-len cannot raise)" in capped
    assert "split such inputs" in capped and "raise --max-len" not in capped


def test_translate_says_which_translations_hold_broken_characters(parts, tmp_path: Path) -> None:
    """A model that spells a script in byte tokens can emit a character's bytes cut short: the text shows U+FFFD
    there, and each such line looked like any other. `tfm translate` says it once at the end, counted, with the
    lines, as it says the cuts at the maximum length; not for a model whose outputs are whole characters."""
    _, tok = parts
    lead = tok.piece_to_id("<0xE5>")  # the first byte of a 3-byte character, again and again: never a character
    broken = _run_dir(tmp_path / "broken", _constant_parts(parts, lead, eos_weight=2.9), None)
    whole = _run_dir(tmp_path / "whole", _constant_parts(parts, tok.piece_to_id("a"), eos_weight=2.9), None)
    base = ["translate", "--device", "cpu", "--max-len", "3"]
    out = tfm(*base, "--model", str(broken), stdin="Bonjour.\n\nMerci.\n")
    assert out.stdout.splitlines()[0] == "\ufffd" * (len(tok.encode("Bonjour.")) + 3)
    (line,) = [w for w in out.stderr.splitlines() if "U+FFFD" in w]
    assert line.startswith("warning: 2 of 3 translations (lines 1, 3) hold byte tokens that make no UTF-8 character")
    one = tfm(*base, "--model", str(broken), "--greedy", "Bonjour.").stderr
    assert "warning: the translation holds byte tokens that make no UTF-8 character" in one
    ref = tmp_path / "ref.en"
    ref.write_text("a\nb\n", encoding="utf-8")
    scored = tfm(*base, "--model", str(broken), "--reference", str(ref), stdin="Bonjour.\nMerci.\n").stderr
    assert "2 of 2 translations (lines 1, 2) hold byte tokens" in scored
    assert "U+FFFD" not in tfm(*base, "--model", str(whole), stdin="Bonjour.\nMerci.\n").stderr


def test_score_and_reference_read_a_dash_from_stdin(parts, tmp_path: Path) -> None:
    """`tfm translate --score -` (the TSV piped in, as sacrebleu reads `-`) said "--score - does not exist", and so
    did `--reference -` with a TEXT, though `-` is stdin for TEXT. Both read stdin now, reported as "stdin"; two
    `-` (stdin read twice) and a `-` at a terminal are refused."""
    run = _run_dir(tmp_path / "run", parts, None)
    base = ["translate", "--model", str(run), "--device", "cpu", "--greedy", "--max-len", "3", "--json"]
    tsv = tmp_path / "dev.tsv"
    tsv.write_text("Bonjour.\tHello.\nMerci.\tThanks.\n", encoding="utf-8")
    src = tmp_path / "src.fr"
    src.write_text("Bonjour.\nMerci.\n", encoding="utf-8")
    from_file = json.loads(tfm(*base, "--score", str(tsv)).stdout)
    piped = json.loads(tfm(*base, "--score", "-", stdin=tsv.read_text(encoding="utf-8")).stdout)
    assert (piped["sources"], piped["references"]) == ("stdin", "stdin")
    assert (piped["bleu"], piped["chrf"], piped["sentences"]) == (from_file["bleu"], from_file["chrf"], 2)
    refs = json.loads(tfm(*base, "--score", str(src), "--score", "-", stdin="Hello.\nThanks.\n").stdout)
    assert (refs["sources"], refs["references"], refs["chrf"]) == (str(src), "stdin", from_file["chrf"])
    one = json.loads(tfm(*base, "--reference", "-", "Bonjour.", stdin="Hello.\n").stdout)
    assert (one["sources"], one["references"], one["sentences"]) == ("TEXT", "stdin", 1)
    twice = tfm(*base, "--score", "-", "--score", "-", stdin=tsv.read_text(encoding="utf-8"), check=False)
    assert twice.returncode == 2 and "stdin can be read once" in twice.stderr and "Traceback" not in twice.stderr


def test_n_best_is_refused_when_scoring(tmp_path: Path) -> None:
    """`--n-best 4 --score dev.tsv --output hyp.en` scored the best translations and wrote only them, without a word
    that --n-best did nothing. It is refused before the model loads (exit 2, one line naming --n-best)."""
    tsv = tmp_path / "dev.tsv"
    tsv.write_text("Bonjour.\tHello.\n", encoding="utf-8")
    for args in (["--score", str(tsv)], ["--reference", str(tsv), "Bonjour."]):
        proc = tfm("translate", "--model", str(tmp_path / "none"), "--n-best", "4", *args, "--output", str(tmp_path / "o"), check=False)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert "--n-best" in proc.stderr and "scores the best translation" in proc.stderr and not (tmp_path / "o").exists()


def test_n_best_keeps_hypotheses_that_spell_the_same_text(parts, tmp_path: Path) -> None:
    """--n-best K can give the same text twice: "a" as a learned piece and as its byte token <0x61> are different
    hypotheses with the same text. They are kept (K lines an input, each with its own score and tokens, as fairseq,
    Marian and CTranslate2 keep them), and the help and README now say so: neither did."""
    _, tok = parts
    model, tok = _constant_parts(parts, tok.piece_to_id("a"), eos_weight=2.9)
    with torch.no_grad():  # the byte token of "a" just behind the piece
        model.generator.weight[tok.piece_to_id("<0x61>")] = model.generator.weight[tok.eos_id] / 2.9 * 2.95
    run = _run_dir(tmp_path / "run", (model, tok), None)
    args = ["translate", "--model", str(run), "--device", "cpu", "--json", "--max-len", "2", "--beam", "2", "--n-best", "2"]
    (record,) = [json.loads(line) for line in tfm(*args, "Bonjour.").stdout.splitlines()]
    first, second = record["nbest"]
    assert first["translation"] == second["translation"] and first["tokens"] != second["tokens"]
    assert first["score"] > second["score"]
    help_text = " ".join(w for w in tfm("translate", "--help").stdout.split() if w != "│")  # the panel's borders
    assert "A text can repeat" in help_text and "both are kept" in help_text
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert "two can spell the same text" in readme


def test_a_model_folder_this_user_may_not_read_is_said_so(parts, tmp_path: Path, monkeypatch) -> None:
    """A run folder of mode 000 was "encoder.onnx: Permission denied", a file the user never named. (The suite may
    run as root, whom no mode stops: the access check is made to answer as it does for any other user.)"""
    import os

    from tfm_cli.errors import CheckpointError

    run = _run_dir(tmp_path / "run", parts, None)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if Path(path) == run else real_access(path, mode, **kw))
    with pytest.raises(CheckpointError, match=f"^model {re.escape(str(run))} is a folder this user may not read") as caught:
        Translator.load(run)
    assert "ls -ld" in caught.value.hint
    monkeypatch.undo()
    assert Translator.load(run).translate("x").text is not None  # (readable: loaded as before)


# ---- numbers -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("numbers", ["placeholders", "as_written"])
def test_numbers_reach_the_model_as_its_config_says(parts, monkeypatch: pytest.MonkeyPatch, numbers: str) -> None:
    """A model that reads numbers as the placeholder is given XNUM for each of a sentence's numbers, and its
    translation is written with the numbers in its placeholders, in order (a placeholder past them dropped); one
    that reads them as written is given the digits. The search here copies what it is given, then adds a
    placeholder of its own: what reaches the model and what comes back are exact."""
    import tfm_cli.translator as translator_module
    from tfm_cli.decoding import Hypothesis

    model, tok = parts
    given: list[str] = []

    def copying_search(engine, sequences, *, into, **_):
        given.extend(tok.decode(seq) for seq in sequences)
        for out, seq in zip(into, sequences, strict=True):
            out.append(Hypothesis(list(seq) + tok.encode(" XNUM"), -1.0, -1.0))
        return into

    monkeypatch.setattr(translator_module, "translate_ids", copying_search)
    reader = Transformer(dataclasses.replace(model.config, numbers=numbers, max_positions=128)).eval()
    lines = ["Le train de 17 h 45 part du quai 3.", "J'ai 2 chats. Tu en as 10 000.", "Bonjour.", "42"]
    out = Translator(reader, tok).translate(lines)
    if numbers == "placeholders":
        assert given == ["Le train de XNUM h XNUM part du quai XNUM.", "J'ai XNUM chats.", "Tu en as XNUM.", "Bonjour."]
        assert [t.text for t in out] == ["Le train de 17 h 45 part du quai 3.", "J'ai 2 chats. Tu en as 10 000.", "Bonjour.", "42"]
    else:
        assert given == ["Le train de 17 h 45 part du quai 3.", "J'ai 2 chats.", "Tu en as 10 000.", "Bonjour."]
        assert [t.text for t in out][:2] == ["Le train de 17 h 45 part du quai 3. XNUM", "J'ai 2 chats. XNUM Tu en as 10 000. XNUM"]


def test_a_translation_that_leaves_out_a_number_says_which(parts, monkeypatch: pytest.MonkeyPatch) -> None:
    """A search that writes one placeholder fewer than it is given: each sentence's last number has no place, and
    `numbers_left_out` names it (a split line's, of each sentence, in order; in --json and each n-best entry);
    a sentence whose numbers all have their place, and a model that reads numbers as written, leave out none."""
    import tfm_cli.translator as translator_module
    from tfm_cli.decoding import Hypothesis

    model, tok = parts
    placeholder = tok.encode(" XNUM")

    def dropping_search(engine, sequences, *, into, n_best=1, **_):
        for out, seq in zip(into, sequences, strict=True):
            seq = list(seq)
            for i in range(len(seq) - len(placeholder), -1, -1):  # the last placeholder taken out
                if seq[i : i + len(placeholder)] == placeholder:
                    seq = seq[:i] + seq[i + len(placeholder) :]
                    break
            out.extend(Hypothesis(seq, -1.0 - k, -1.0 - k) for k in range(n_best))
        return into

    monkeypatch.setattr(translator_module, "translate_ids", dropping_search)
    reader = Transformer(dataclasses.replace(model.config, numbers="placeholders", max_positions=128)).eval()
    translator = Translator(reader, tok)
    lines = ["J'ai 3 chats et 5 chiens.", "Il a 42 ans. Elle en a 40.", "Bonjour.", "42"]
    out = translator.translate(lines)
    assert [t.numbers_left_out for t in out] == [["5"], ["42", "40"], [], []]
    assert [t.numbers_left_out for t in out[1].sentences] == [["42"], ["40"]]
    assert out[0].text == "J'ai 3 chats et chiens."  # (the search's own words: it copies its input)
    record = out[0].to_dict(nbest=True)
    assert record["numbers_left_out"] == ["5"] and record["nbest"][0]["numbers_left_out"] == ["5"]
    assert "numbers_left_out" not in out[2].to_dict(nbest=True)  # only where one is left out
    as_written = Translator(Transformer(dataclasses.replace(model.config, numbers="as_written", max_positions=128)).eval(), tok)
    assert [t.numbers_left_out for t in as_written.translate(lines)] == [[], [], [], []]
