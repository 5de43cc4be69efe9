#!/usr/bin/env python3
"""Translate with a tfm ONNX export, without tfm or torch: onnxruntime, numpy and Hugging Face tokenizers only.

`tfm export RUN --format onnx` copies this file into the export as translate.py:

    pip install onnxruntime numpy tokenizers
    python translate.py < source.txt > translations.txt
    python translate.py --beam 5 --alpha 1.0 < source.txt    (another beam or length penalty)
    python translate.py --greedy < source.txt                (the most probable token at each step)
    python translate.py --no-split-sentences < source.txt    (each line whole, see below)

One line in, one line out. Beam search over the decoder's key/value cache with the run's beam size and length
penalty (onnx.json's "decode"), as `tfm translate --model EXPORT` searches: the same translations, as the same graphs
run in onnxruntime (where two hypotheses' scores differ in their last bits, another batch's rounding may rank them
otherwise). Sentences of similar length are searched together, a batch of up to BATCH_TOKENS / beam padded source
tokens; what has come is translated whenever reading on would wait, so a program that writes a line and waits for
its translation gets it. For n-best lists, sampling, scoring and GPUs, use tfm itself (`tfm translate --model
EXPORT`, or `Translator.load(EXPORT)` in Python). The folder's README.md describes the two graphs, for a search of
your own.

A line of several sentences is translated a sentence at a time and their translations joined, as tfm does
(sentences.py, beside this file, is tfm's own splitting), unless the run's recipe said `decode.split_sentences:
false` or `--no-split-sentences` is given; a sentence in capitals or in a frame (a list's bullet, double quotes,
brackets, emoji) is translated as tfm translates it, in sentence case and without the frame, and written back, and
one without a letter written as it is, unless the recipe said `decode.verbatim: true` or `--verbatim` is given.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import select
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

if sys.version_info < (3, 10):  # noqa: UP036 (the script runs in the user's Python, not tfm's)
    sys.exit(f"error: translate.py needs Python 3.10 or newer; this is {sys.version.split()[0]}")
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")  # as tfm does: no usage telemetry, nor its warning on a read-only home
try:
    import numpy as np
    import onnxruntime as ort
    from tokenizers import Tokenizer, decoders
except ImportError as missing:  # said in a line, with the fix
    sys.exit(f"error: translate.py needs onnxruntime, numpy and tokenizers ({missing}): pip install onnxruntime numpy tokenizers")

CHUNK_LINES = 2000  # input lines translated together at most (sorted by length into batches)
MAX_LINE_BYTES = 1 << 20  # a line longer than this is no sentence (as tfm translate says)
BATCH_TOKENS = 8000  # padded source tokens a batch times the beam size (tfm translate's --batch-tokens)
UNK = 3  # <unk> in tfm's vocabulary (<pad> 0, <s> 1, </s> 2, <unk> 3, then 256 byte tokens, then the pieces)


class OnnxTranslator:
    """The encoder and decoder-step graphs of an export folder, its tokenizer, and the run's decode settings."""

    def __init__(self, folder: str | Path) -> None:
        folder = Path(folder)
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        manifest = json.loads((folder / "onnx.json").read_text(encoding="utf-8"))
        decode = manifest.get("decode", {})
        self.pad, self.bos, self.eos = config["pad_id"], config["bos_id"], config["eos_id"]
        self.layers, self.heads = config["n_dec_layers"], config["n_heads"]
        self.head_dim = config["d_model"] // config["n_heads"]
        self.max_positions = config["max_positions"]
        self.beam = decode.get("beam", 4)  # hypotheses kept a step
        self.greedy = False  # the most probable token at each step instead (not a beam of 1, which may go on past an end)
        self.alpha = decode.get("alpha", 0.6)  # the length penalty's exponent (GNMT)
        self.max_len_offset = decode.get("max_len_offset", 50)  # output: at most source length + this many tokens
        self.min_len = decode.get("min_len", 0)  # no end before this many tokens
        self.split_sentences = decode.get("split_sentences", True)  # a line's sentences one at a time
        self.verbatim = decode.get("verbatim", False)  # each line as written: no capitals or frames taken off
        self.numbers = config.get("numbers") == "placeholders"  # numbers given as XNUM and written back
        # never outputs: padding, <s>, and <unk> where it is none of those
        self.banned = [self.pad, self.bos] + ([UNK] if UNK not in (self.pad, self.bos, self.eos) else [])
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        # the tokenizer the model was trained with, by the hash the export recorded (of the file as written, or of
        # the JSON the tokenizers library makes of it): another run's would translate into nonsense without a word
        expected = manifest.get("tokenizer_sha256")
        hashes = {hashlib.sha256(data).hexdigest() for data in ((folder / "tokenizer.json").read_bytes(), self.tokenizer.to_str().encode())}
        if expected not in hashes:
            sys.exit(f"error: {folder / 'tokenizer.json'} does not match the exported model (onnx.json expects tokenizer "
                     f"hash {str(expected)[:12]}); put back the tokenizer.json this model was trained with")
        self.byte_of = {self.tokenizer.token_to_id(f"<0x{b:02X}>"): b for b in range(256)}  # the byte fallback's tokens
        self.byte_of.pop(None, None)
        self.metaspace = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
        options = ort.SessionOptions()
        options.log_severity_level = 3
        self.encoder = ort.InferenceSession(str(folder / "encoder.onnx"), options, providers=["CPUExecutionProvider"])
        self.decoder = ort.InferenceSession(str(folder / "decoder.onnx"), options, providers=["CPUExecutionProvider"])

    def translate(self, sentences: list[str], wheres: list[str]) -> list[str]:
        """The translations of `sentences`, in order: batches of similar length, as tfm batches them. `wheres`
        names each one's line for the warning about a sentence longer than the model takes."""
        sources = [self.source(sentence, where) for sentence, where in zip(sentences, wheres, strict=True)]
        out = [""] * len(sources)  # (one with nothing left once normalised stays empty)
        order = sorted((i for i, ids in enumerate(sources) if ids), key=lambda i: len(sources[i]), reverse=True)
        budget = max(BATCH_TOKENS // (1 if self.greedy else self.beam), 1)  # padded source tokens a batch (a beam multiplies its rows)
        while order:
            width = len(sources[order[0]]) + 1  # the longest first: it sets the batch's width
            batch, order = order[: max(1, budget // width)], order[max(1, budget // width) :]
            for i, ids in zip(batch, self.search([sources[i] for i in batch]), strict=True):
                out[i] = self.detokenize(ids)
        return out

    def source(self, sentence: str, where: str) -> list[int]:
        """A sentence's ids: its pieces (the tokenizer normalises as tfm does), cut to what the model takes (said on
        stderr, as tfm says it)."""
        ids, limit = self.tokenizer.encode(sentence, add_special_tokens=False).ids, self.max_positions - 1
        if len(ids) > limit:
            print(f"warning: {where} has {len(ids)} tokens; the model takes at most {limit}, "
                  f"so only its first {limit} tokens were translated", file=sys.stderr, flush=True)
            ids = ids[:limit]
        return ids

    def search(self, sources: list[list[int]]) -> list[list[int]]:
        """One batch: each source's output ids, searched together, a decoder step for all their rows at a time (a
        sentence's beams are rows side by side; a finished sentence leaves the batch)."""
        n, width = len(sources), max(len(ids) for ids in sources) + 1
        src = np.full((n, width), self.pad, dtype=np.int64)  # (B, S): each source, then </s>, right-padded
        for i, ids in enumerate(sources):
            src[i, : len(ids) + 1] = ids + [self.eos]
        cross = self.encoder.run(None, {"src": src})  # cross_k.0, cross_v.0, ...: (B, H, S, Dh), once a sentence
        per_sentence = {"src_mask": src != self.pad}  # True where a source token may be attended to
        for i in range(self.layers):
            per_sentence[f"cross_k.{i}"], per_sentence[f"cross_v.{i}"] = cross[2 * i], cross[2 * i + 1]
        # the longest output before </s>: source length + the offset, within the decoder's positions
        limit = self.max_positions - 1
        max_len = np.array([max(1, min(len(ids) + min(self.max_len_offset, limit), limit)) for ids in sources])
        searches = [_Greedy(self.eos) if self.greedy else _Beam(self.beam, self.alpha, int(m), self.eos) for m in max_len]
        live, rows = list(range(n)), [1] * n  # the sentences still searched, and each one's rows (its beams)
        row_sentence = np.arange(n)  # (R,) each row's sentence
        feeds = dict(per_sentence)
        past = [np.zeros((n, self.heads, 0, self.head_dim), np.float32) for _ in range(2 * self.layers)]
        last, step = [self.bos] * n, 0  # each row's previous token; how many tokens came before it
        while live:
            for i in range(self.layers):
                feeds[f"past_k.{i}"], feeds[f"past_v.{i}"] = past[2 * i], past[2 * i + 1]
            logits, *past = self.decoder.run(
                None, {**feeds, "last": np.array(last, dtype=np.int64)[:, None], "position": np.array([step], dtype=np.int64)}
            )  # logits (R, vocabulary), then present_k.0, present_v.0, ...: the cache one position longer
            log_probs = self.log_probs(logits, step, step >= max_len[row_sentence])
            parents, last, going, first = [], [], [], 0
            for i in live:  # each sentence's rows: its next beams, or done
                chosen = searches[i].advance(log_probs[first : first + rows[i]], step)
                if chosen:
                    parents += [first + beam for beam, _ in chosen]
                    last += [token for _, token in chosen]
                    going.append(i)
                first, rows[i] = first + rows[i], len(chosen)
            live = going
            past = [cache[parents] for cache in past]  # each next row's cache: its parent's
            now = np.repeat(np.array(live, dtype=np.int64), [rows[i] for i in live])
            if not np.array_equal(now, row_sentence):  # the rows' sentences changed: their source and cross K/V too
                row_sentence = now
                feeds = {name: value[row_sentence] for name, value in per_sentence.items()}
            step += 1
        return [search.best() for search in searches]

    def log_probs(self, logits: np.ndarray, step: int, at_max: np.ndarray) -> np.ndarray:
        """(R, V) logits -> float32 log-probabilities of the next token, as tfm scores them: padding, <s> and <unk>
        -inf (not renormalised), no </s> before `min_len` tokens, only </s> in rows at their length limit (`at_max`,
        (R,) bool)."""
        if np.isnan(logits).any():
            sys.exit("error: the model's scores are not numbers (NaN): its weights are damaged; export a sound run again")
        out = logits - logits.max(axis=1, keepdims=True)  # float32, as the graph gives them
        out -= np.log(np.exp(out).sum(axis=1, keepdims=True))
        out[:, self.banned] = -np.inf
        end = out[:, self.eos].copy()
        if step < self.min_len:
            out[:, self.eos] = -np.inf
        if at_max.any():  # the limit wins over min_len: a row at its maximum must end
            out[at_max] = -np.inf
            out[at_max, self.eos] = end[at_max]
        return out

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


def _penalty(length: int, alpha: float) -> float:
    """The GNMT length penalty ((5 + length) / 6) ** alpha (Wu et al., 2016), `length` counting </s>."""
    return ((5.0 + length) / 6.0) ** alpha


def _top(scores: np.ndarray, n: int) -> np.ndarray:
    """The indices of the `n` largest of `scores` (fewer if it is shorter), best first, equal ones lowest index first."""
    if n >= scores.size:
        return np.argsort(-scores, kind="stable")
    kth = scores[np.argpartition(-scores, n - 1)[n - 1]]  # the n-th largest
    above, equal = np.flatnonzero(scores > kth), np.flatnonzero(scores == kth)
    chosen = np.concatenate([above, equal[: n - above.size]])
    return chosen[np.lexsort((chosen, -scores[chosen]))]  # by score, then by index


class _Greedy:
    """Greedy search of one sentence: the most probable token at each step (`tfm translate --greedy`)."""

    def __init__(self, eos: int) -> None:
        self.eos, self.tokens = eos, []

    def advance(self, log_probs: np.ndarray, step: int) -> list[tuple[int, int]]:
        """(1, V) log-probabilities of the next token -> [(row, token)] to go on with, or [] once it ends."""
        token = int(log_probs[0].argmax())  # the first of equal maxima
        if token == self.eos:
            return []
        self.tokens.append(token)
        return [(0, token)]

    def best(self) -> list[int]:
        return self.tokens


class _Beam:
    """Beam search of one sentence with the GNMT length penalty, as tfm's (decoding.py's `beam_search`): each step,
    the 2K best continuations of the K beams (equal scores: the lower beam, then the lower token, first); those that
    end join the finished ones, of which the K best by length-penalised score are kept; the K best that go on are the
    next beams; done when K have finished and no beam, at any length it may still reach, could rank among them."""

    def __init__(self, k: int, alpha: float, max_len: int, eos: int) -> None:
        self.k, self.alpha, self.eos = k, alpha, eos
        self.seqs: list[list[int]] = [[]]  # each beam's tokens
        self.scores = np.zeros(1, np.float32)  # each beam's log-probability
        self.finished: list[tuple[np.float32, float, list[int]]] = []  # (ranking score, log-probability, tokens), best first
        # the penalty at the longest a beam may grow, </s> included (in float32, as tfm computes this one)
        self.bound = (np.float32(5.0 + max_len + 1) / np.float32(6.0)) ** np.float32(alpha)

    def advance(self, log_probs: np.ndarray, step: int) -> list[tuple[int, int]]:
        """(beams, V) log-probabilities of the next token -> [(beam, token)]: the next beams, or [] once done."""
        k, vocab = self.k, log_probs.shape[1]
        candidates = (self.scores[:, None] + log_probs).reshape(-1)  # (beams * V,)
        best = _top(candidates, 2 * k)
        scores, beams, tokens = candidates[best], best // vocab, best % vocab
        # those of the K best that end here are offered to the finished ones, and the K best of all kept (ranked in
        # float32 as tfm ranks them; a stable sort: of equal scores the one held longer, then the lower beam, first)
        penalty = np.float32(_penalty(step + 1, self.alpha))
        offered = [(scores[j] / penalty, float(scores[j]), self.seqs[beams[j]])
                   for j in range(min(k, best.size)) if tokens[j] == self.eos and np.isfinite(scores[j])]
        if offered:
            self.finished = sorted(self.finished + offered, key=lambda h: -h[0])[:k]
        going = [j for j in range(best.size) if tokens[j] != self.eos and np.isfinite(scores[j])][:k]
        # done: nothing to extend, or K finished and the best beam, at its best possible score, not among them
        if not going or (len(self.finished) == k and self.finished[-1][0] >= scores[going[0]] / self.bound):
            return []
        self.seqs = [self.seqs[beams[j]] + [int(tokens[j])] for j in going]
        self.scores = scores[going]
        return [(int(beams[j]), int(tokens[j])) for j in going]

    def best(self) -> list[int]:
        """The best finished hypothesis by its score: the log-probability over the length penalty, </s> counted."""
        if not self.finished:
            return []
        return max(self.finished, key=lambda h: h[1] / _penalty(len(h[2]) + 1, self.alpha))[2]


def _sentences() -> Any:
    """sentences.py, beside this file (loaded by its path: a module of that name elsewhere is not it)."""
    path = Path(__file__).resolve().with_name("sentences.py")
    spec = importlib.util.spec_from_file_location("tfm_export_sentences", path)
    module = importlib.util.module_from_spec(spec)
    sys.dont_write_bytecode = True  # no __pycache__ in the export folder (a later `tfm export --force` replaces it)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Translate stdin to stdout, a line for a line, with this tfm ONNX export (onnxruntime, numpy and "
        "tokenizers; no tfm, no torch).")
    search = parser.add_mutually_exclusive_group()
    search.add_argument("--beam", type=int, metavar="K", help="beam size (default: the run's, in onnx.json)")
    search.add_argument("--greedy", action="store_true", help="the most probable token at each step, instead of beam search")
    parser.add_argument("--alpha", type=float, metavar="A",
                        help="the length penalty's exponent, ((5 + length) / 6) ** A (default: the run's, in onnx.json)")
    parser.add_argument("--no-split-sentences", action="store_true", help="translate each line whole")
    parser.add_argument("--verbatim", action="store_true", help="translate each line as written (no capitals or frames taken off)")
    args = parser.parse_args()
    sys.stdout.reconfigure(encoding="utf-8")  # translations in UTF-8, as every input is read, whatever the locale says
    if args.beam is not None and args.beam < 1:
        parser.error(f"--beam {args.beam} must be at least 1")
    if args.alpha is not None and not 0 <= args.alpha <= 10:  # tfm's bounds: ((5 + length) / 6) ** A stays finite
        parser.error(f"--alpha {args.alpha:g} must be a number between 0 and 10 (the paper: 0.6)")
    if args.greedy and args.alpha is not None:  # as tfm refuses it: greedy search has no length penalty
        parser.error("--alpha has no effect with --greedy (greedy search has no length penalty)")
    sentences = _sentences()
    translator = OnnxTranslator(Path(__file__).resolve().parent)
    translator.greedy, translator.beam = args.greedy, translator.beam if args.beam is None else args.beam
    translator.alpha = translator.alpha if args.alpha is None else args.alpha
    split = translator.split_sentences and not args.no_split_sentences
    verbatim = translator.verbatim or args.verbatim

    def cost(word: str) -> tuple[int, ...]:  # tfm's Tokenizer.word_cost: how familiar a word is to the vocabulary
        ids = translator.tokenizer.encode(word, add_special_tokens=False).ids
        return (len(ids), *ids)

    number = 0  # input lines read so far
    for chunk in _chunks():
        texts = []
        for raw in chunk:  # the lines up to the first that is not text (those before it are still translated)
            problem = _not_text(raw, number + len(texts) + 1)
            if problem:
                break
            texts.append(raw.decode("utf-8").rstrip("\r"))
        # each sentence as the model reads it, and how to write it back
        parts = [sentences.to_translate(text, split, cost, verbatim, translator.numbers) for text in texts]
        given, wheres = [], []
        for i, these in enumerate(parts, start=number + 1):
            given += [part.given for part in these]
            wheres += [f"input line {i}" if len(these) == 1 else f"a sentence of input line {i}"] * len(these)
        done = iter(translator.translate(given, wheres))
        for these in parts:
            number += 1
            translations = [next(done) for _ in these]
            left_out = [n for part, t in zip(these, translations, strict=True) for n in part.left_out(t)]  # no placeholder written for them
            if left_out:  # (said as tfm translate says it: fewer placeholders than numbers, filled in order)
                word, words = sentences.left_out_words(left_out)
                print(f"warning: input line {number}: the translation leaves out {f'a {word}' if len(left_out) == 1 else f'{len(left_out)} {words}'} "
                      f"of the source ({', '.join(left_out)}): the model wrote fewer placeholders than the sentence has {words}",
                      file=sys.stderr, flush=True)
            print(sentences.join_sentences([part.written(t) for part, t in zip(these, translations, strict=True)]))
        sys.stdout.flush()
        if len(texts) < len(chunk):
            sys.exit(f"error: {problem}")


def _chunks() -> Iterator[list[bytes]]:
    """stdin's lines (without their line ends), in chunks of what has come whenever reading on would wait, at
    most CHUNK_LINES: a file piped in is translated in large batches, and a program that writes a line and waits
    for its translation gets it at once, as from `tfm translate`."""
    try:
        fd = sys.stdin.fileno()
        select.select([fd], [], [], 0)
    except (OSError, ValueError, AttributeError):  # no select() on this stdin (Windows): a line at a time
        for line in sys.stdin.buffer:
            yield [line.removesuffix(b"\n")]
        return
    buffer, ended, lines_read, too_long = b"", False, 0, False
    while not ended or buffer:
        # a line at least (waiting for it), then whatever more has come, up to a chunk's worth
        while not ended and (b"\n" not in buffer or select.select([fd], [], [], 0)[0]) and buffer.count(b"\n") < CHUNK_LINES:
            data = os.read(fd, 1 << 16)
            ended, buffer = not data, buffer + data
            too_long = len(buffer) - buffer.rfind(b"\n") - 1 > MAX_LINE_BYTES  # held whole, /dev/zero took all memory
            if too_long:
                break
        lines = buffer.split(b"\n")
        buffer = lines.pop()  # the line being read (all of it at the end of the input)
        if ended and buffer:
            lines.append(buffer)
            buffer = b""
        # a whole line over the limit too (its end may come in the read that took it over), as tfm refuses it
        over = next((i for i, line in enumerate(lines) if len(line) > MAX_LINE_BYTES), None)
        if over is not None:
            lines, too_long = lines[:over], True
        for start in range(0, len(lines), CHUNK_LINES):
            yield lines[start : start + CHUNK_LINES]
        lines_read += len(lines)
        if too_long:  # (the lines before it translated)
            sys.exit(f"error: input line {lines_read + 1} runs over {MAX_LINE_BYTES >> 20} MiB without a line end: "
                     "that is no sentence; give one sentence a line")


def _not_text(raw: bytes, number: int) -> str | None:
    """Why input line `number` cannot be translated (binary data, not UTF-8), or None."""
    if b"\x00" in raw:
        return f"input line {number}: a NUL byte at byte {raw.index(0) + 1}: binary data, not text; pipe in UTF-8 text"
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"input line {number}: invalid UTF-8 at byte {e.start + 1}; re-encode the input as UTF-8 (e.g. iconv -f cp1252 -t utf-8)"
    if b"\r" in raw.removesuffix(b"\r"):  # (a CRLF line end is one)
        return (f"input line {number}: a stray carriage return (\\r) inside the line; make such characters spaces "
                "(e.g. tr '\\r' ' '), as tfm translate refuses it")
    return None

if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # the reader went away (`python translate.py < in | head -1`): end quietly, as the shell says
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (Python's last flush would fail again)
        sys.exit(141)
