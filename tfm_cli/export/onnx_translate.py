#!/usr/bin/env python3
"""Translate with a tfm ONNX export, without tfm or torch: onnxruntime, numpy and Hugging Face tokenizers only.

`tfm export RUN --format onnx` copies this file into the export as translate.py:

    pip install onnxruntime numpy tokenizers
    python translate.py < source.txt > translations.txt
    python translate.py --no-split-sentences < source.txt    (each line whole, see below)

One line in, one line out. Greedy search over the decoder's key/value cache, as `tfm translate --greedy --model
EXPORT` searches (the same translations: the same graphs run in onnxruntime); for beam search, n-best lists and
batches, use tfm itself (`tfm translate --model EXPORT`, or `Translator.load(EXPORT)` in Python). The folder's
README.md describes the two graphs, for a search of your own.

A line of several sentences is translated a sentence at a time and their translations joined, as tfm does
(sentences.py, beside this file, is tfm's own splitting), unless the run's recipe said `decode.split_sentences:
false` or `--no-split-sentences` is given; a sentence in capitals or in a frame (a list's bullet, double quotes,
brackets, emoji) is translated as tfm translates it, in sentence case and without the frame, and written back, and
one without a letter written as it is, unless the recipe said `decode.verbatim: true` or `--verbatim` is given.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer, decoders

UNK = 3  # <unk> in tfm's vocabulary (<pad> 0, <s> 1, </s> 2, <unk> 3, then 256 byte tokens, then the pieces)


class GreedyTranslator:
    """The encoder and decoder-step graphs of an export folder, and its tokenizer."""

    def __init__(self, folder: str | Path) -> None:
        folder = Path(folder)
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        decode = json.loads((folder / "onnx.json").read_text(encoding="utf-8")).get("decode", {})
        self.pad, self.bos, self.eos = config["pad_id"], config["bos_id"], config["eos_id"]
        self.layers, self.heads = config["n_dec_layers"], config["n_heads"]
        self.head_dim = config["d_model"] // config["n_heads"]
        self.max_positions = config["max_positions"]
        self.max_len_offset = decode.get("max_len_offset", 50)  # output: at most source length + this many tokens
        self.min_len = decode.get("min_len", 0)  # no end before this many tokens
        self.split_sentences = decode.get("split_sentences", True)  # a line's sentences one at a time
        self.verbatim = decode.get("verbatim", False)  # each line as written: no capitals or frames taken off
        self.numbers = config.get("numbers") == "placeholders"  # numbers given as XNUM and written back
        # never outputs: padding, <s>, and <unk> where it is none of those
        self.banned = [self.pad, self.bos] + ([UNK] if UNK not in (self.pad, self.bos, self.eos) else [])
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.byte_of = {self.tokenizer.token_to_id(f"<0x{b:02X}>"): b for b in range(256)}  # the byte fallback's tokens
        self.byte_of.pop(None, None)
        self.metaspace = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
        options = ort.SessionOptions()
        options.log_severity_level = 3
        self.encoder = ort.InferenceSession(str(folder / "encoder.onnx"), options, providers=["CPUExecutionProvider"])
        self.decoder = ort.InferenceSession(str(folder / "decoder.onnx"), options, providers=["CPUExecutionProvider"])

    def translate(self, sentence: str, where: str = "the input") -> str:
        # the source: its pieces (the tokenizer normalises as tfm does), cut to what the model takes (said on stderr,
        # as tfm says it: `where` names the line), then </s>
        ids, limit = self.tokenizer.encode(sentence, add_special_tokens=False).ids, self.max_positions - 1
        if len(ids) > limit:
            print(f"warning: {where} has {len(ids)} tokens; the model takes at most {limit}, "
                  f"so only its first {limit} tokens were translated", file=sys.stderr, flush=True)
            ids = ids[:limit]
        if not ids:  # nothing left once normalised: nothing to translate
            return ""
        src = np.array([ids + [self.eos]], dtype=np.int64)  # (batch 1, source length)
        cross = self.encoder.run(None, {"src": src})  # cross_k.0, cross_v.0, ...: (1, heads, source length, head dim)
        feeds = {"src_mask": src != self.pad}  # True where a source token may be attended to
        for i in range(self.layers):
            feeds[f"cross_k.{i}"], feeds[f"cross_v.{i}"] = cross[2 * i], cross[2 * i + 1]
        past = [np.zeros((1, self.heads, 0, self.head_dim), np.float32) for _ in range(2 * self.layers)]
        max_len = max(1, min(len(ids) + min(self.max_len_offset, self.max_positions - 1), self.max_positions - 1))
        out, last = [], self.bos
        for position in range(max_len + 1):  # `position`: how many tokens came before `last` (<s> is at 0)
            for i in range(self.layers):
                feeds[f"past_k.{i}"], feeds[f"past_v.{i}"] = past[2 * i], past[2 * i + 1]
            logits, *past = self.decoder.run(
                None, {**feeds, "last": np.array([[last]], dtype=np.int64), "position": np.array([position], dtype=np.int64)}
            )  # logits (1, vocabulary), then present_k.0, present_v.0, ...: the cache one position longer
            scores = logits[0].astype(np.float64)
            scores[self.banned] = -np.inf
            if position < self.min_len and position < max_len:
                scores[self.eos] = -np.inf
            token = self.eos if position == max_len else int(scores.argmax())  # at the limit: the end
            if token == self.eos:
                break
            out.append(token)
            last = token
        return self.detokenize(out)

    def detokenize(self, ids: list[int]) -> str:
        """The text of output ids, as tfm makes it: each run of byte tokens read as UTF-8 (a cut character is one
        U+FFFD; the tokenizer's own decoder made every byte of such a run one), the pieces joined ("▁" a space),
        then normalised as a source is (a newline or tab a byte token spelled becomes a space: one line out)."""
        if not any(i in self.byte_of for i in ids):
            text = self.tokenizer.decode(ids, skip_special_tokens=False)
        else:
            pieces, run = [], bytearray()
            for i in ids:
                if i in self.byte_of:
                    run.append(self.byte_of[i])
                    continue
                if run:
                    pieces.append(run.decode("utf-8", errors="replace"))
                    run.clear()
                pieces.append(self.tokenizer.id_to_token(i))
            if run:
                pieces.append(run.decode("utf-8", errors="replace"))
            text = self.metaspace.decode(pieces)
        return self.tokenizer.normalizer.normalize_str(text)


def _sentences() -> Any:
    """sentences.py, beside this file (loaded by its path: a module of that name elsewhere is not it)."""
    path = Path(__file__).resolve().with_name("sentences.py")
    spec = importlib.util.spec_from_file_location("tfm_export_sentences", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    sentences = _sentences()
    options = sys.argv[1:]
    if any(o not in ("--no-split-sentences", "--verbatim") for o in options):
        sys.exit(f"usage: python {sys.argv[0]} [--no-split-sentences] [--verbatim] < source.txt > translations.txt")
    translator = GreedyTranslator(Path(__file__).resolve().parent)
    split = translator.split_sentences and "--no-split-sentences" not in options
    verbatim = translator.verbatim or "--verbatim" in options

    def cost(word: str) -> tuple[int, ...]:  # tfm's Tokenizer.word_cost: how familiar a word is to the vocabulary
        ids = translator.tokenizer.encode(word, add_special_tokens=False).ids
        return (len(ids), *ids)

    for number, line in enumerate(sys.stdin.buffer, start=1):
        text = line.decode("utf-8").rstrip("\n").rstrip("\r")
        parts = sentences.to_translate(text, split, cost, verbatim, translator.numbers)  # each sentence as the model reads it, and how to write it back
        where = f"input line {number}" if len(parts) == 1 else f"a sentence of input line {number}"
        translations = [translator.translate(part.given, where) for part in parts]
        left_out = [n for part, t in zip(parts, translations, strict=True) for n in part.left_out(t)]  # no placeholder written for them
        if left_out:  # (said as tfm translate says it: fewer placeholders than numbers, filled in order)
            word, words = sentences.left_out_words(left_out)
            print(f"warning: input line {number}: the translation leaves out {f'a {word}' if len(left_out) == 1 else f'{len(left_out)} {words}'} "
                  f"of the source ({', '.join(left_out)}): the model wrote fewer placeholders than the sentence has {words}",
                  file=sys.stderr, flush=True)
        print(sentences.join_sentences([part.written(t) for part, t in zip(parts, translations, strict=True)]), flush=True)


if __name__ == "__main__":
    main()
