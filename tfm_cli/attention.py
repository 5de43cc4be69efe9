"""What the heads attend to, as plain data: attention maps of a real translation, head statistics, word-level
merging, source-target alignment, and the step-by-step numbers of one head for one query.

The model translates through the library `Translator` (or takes a given target, teacher-forced), then runs one
pass through its explicit-math attention path (`Transformer.attention_maps`), which returns the weights of
every layer and head of the three kinds:

    encoder  self-attention over the source        queries: source positions   keys: source positions
    decoder  masked self-attention over the target  queries: target positions   keys: decoder inputs (causal)
    cross    encoder-decoder attention              queries: target positions   keys: source positions

A target position is labelled by the token it predicts (the target pieces, then "</s>"); the decoder reads
"<s>" and the target pieces (`tgt_inputs`), which are the keys of its self-attention. Nothing here draws: the
CLI renders these numbers (tfm_cli/cli/inspect_attn.py) and a Python user gets the same ones.
"""

from __future__ import annotations

import bisect
import math
import operator
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

import torch

from tfm_cli.errors import TfmError
from tfm_cli.model.masks import causal_mask, padding_mask
from tfm_cli.packing import module_view
from tfm_cli.scripts import unspaced
from tfm_cli.sentences import (
    MAX_DEPTH,
    NUMBER_PLACEHOLDER,
    frame,
    in_capitals,
    in_title_case,
    numbers_as_placeholder,
    placeholder_values,
    sentence_case,
    to_translate,
)
from tfm_cli.translator import Translator, check_sentence, check_text

KINDS = ("encoder", "decoder", "cross")
EOS, BOS = "</s>", "<s>"


@dataclass
class AttentionReport:
    """Every attention weight of one sentence pair: `weights[kind]` is a (layers, heads, queries, keys) tensor."""

    source: str
    target: str
    forced_target: bool
    model: str
    src_tokens: list[str]
    tgt_tokens: list[str]
    tgt_inputs: list[str]
    weights: dict[str, torch.Tensor]
    d_k: int
    word_level: bool = False
    # Why the model's translation ended: "eos" (the model predicted "</s>") or "max_len" (it reached the maximum
    # output length and "</s>" was forced there, so the last target row is no prediction); None for a given target.
    stopped: str | None = None
    # For each kind: the (layers, heads, queries, Dh) queries and (layers, heads, keys, Dh) keys and values
    # at each attention, for `explain` (subword level only).
    vectors: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict, repr=False)
    # Word level only: decoder self-attention's first row (layers, heads, keys) without its first piece, the query
    # that sees only "<s>"; None when the first word is one piece (its row is that query's alone). For `head_summary`.
    decoder_first_row: torch.Tensor | None = field(default=None, repr=False)
    # Word level only: for each decoder query word, how many key words the causal mask lets it see (a word's
    # later pieces see the first piece of the word after: `tired` as `▁ti` `red` reads `▁ti`, the start of the
    # key word `tired`); subword level: query i sees keys 0..i
    decoder_words_visible: list[int] | None = None
    # How many sentences `Translator.translate` finds in the source (split_sentences) and translates one by one: more
    # than one, and the model's translation here, of the source whole, is not the one `tfm translate` prints.
    sentences: int = 1
    # For a model that reads numbers as a placeholder: the number (or address) each placeholder piece of the source
    # and of the target stands for, in order, as written (`--token 23` finds the placeholder of 23); else ().
    src_numbers: tuple[str, ...] = ()
    tgt_numbers: tuple[str, ...] = ()

    def decoder_visible(self) -> list[int]:
        """For each decoder self-attention query, the number of keys it may see (the keys after are masked)."""
        if self.decoder_words_visible is not None:
            return self.decoder_words_visible
        return list(range(1, len(self.tgt_tokens) + 1))

    @property
    def n_layers(self) -> dict[str, int]:
        return {"encoder": self.weights["encoder"].size(0), "decoder": self.weights["decoder"].size(0)}

    @property
    def n_heads(self) -> int:
        return self.weights["encoder"].size(1)

    def query_tokens(self, kind: str) -> list[str]:
        return self.src_tokens if kind == "encoder" else self.tgt_tokens

    def key_tokens(self, kind: str) -> list[str]:
        return {"encoder": self.src_tokens, "decoder": self.tgt_inputs, "cross": self.src_tokens}[kind]

    def check(
        self, kind: str | None = None, layer: int | None = None, head: int | None = None, query: int | None = None,
        needs_kind: bool = False,
    ) -> tuple[int | None, int | None, int | None]:
        """Raise ValueError for a kind, layer, head or query (0-based) this report has not; a layer with no kind must
        be one of every kind. A bad one gave empty weights (`to_dict`) or a bare IndexError/KeyError. Returns the
        layer, head and query as plain ints (numpy's and one-element tensors' taken: JSON has neither)."""
        if (kind is not None or needs_kind) and kind not in KINDS:
            raise ValueError(f"kind={kind!r} is not one of: {', '.join(KINDS)}")
        kinds = [kind] if kind is not None else list(KINDS)
        counts = {"encoder": self.n_layers["encoder"], "decoder": self.n_layers["decoder"], "cross": self.n_layers["decoder"]}
        plain: list[int | None] = []
        for name, value, limit in (
            ("layer", layer, min(counts[k] for k in kinds)),
            ("head", head, self.n_heads),
            ("query", query, len(self.query_tokens(kind)) if kind is not None else None),
        ):
            plain.append(value)
            if value is None or limit is None:
                continue
            try:  # an int, numpy's or a one-element integer tensor; not a bool, a float or a string
                index = operator.index(value) if not isinstance(value, bool) else None
            except TypeError:
                index = None
            if index is None:
                raise TypeError(f"{name} must be an int (0-based) or None, not {type(value).__name__}")
            value = plain[-1] = index
            if not 0 <= value < limit:
                raise ValueError(f"{name}={value} is out of range: 0 to {limit - 1} (0-based) for {kind or 'every kind'}")
        return plain[0], plain[1], plain[2]

    def matrix(self, kind: str, layer: int, head: int | None) -> torch.Tensor:
        """(queries, keys) weights of one head, or their mean over heads when `head` is None (0-based)."""
        layer, head, _ = self.check(kind, layer, head)
        w = self.weights[kind][layer]
        return w.mean(dim=0) if head is None else w[head]

    def to_dict(self, decimals: int = 5, kind: str | None = None, layer: int | None = None, head: int | None = None) -> dict[str, Any]:
        """The documented JSON shape: tokens and weights[kind][layer][head][query][key].

        `kind`, `layer` and `head` (0-based; None: all) keep only those weights, as a long sentence's every weight
        is a large document (970 tokens: some 250 MB); the others are null, so that attention[kind][layer][head]
        indexes the same head as in the whole report, and "selection" says what was kept.

        Raises:
            ValueError: a kind, layer or head the report has not (a layer with no kind: one of every kind).
        """
        layer, head, _ = self.check(kind, layer, head)
        attention: dict[str, Any] = {}
        for name in KINDS:
            w = self.weights[name]
            if kind is not None and name != kind:
                attention[name] = None
            elif layer is None and head is None:
                attention[name] = w.double().round(decimals=decimals).tolist()
            else:
                attention[name] = [
                    [w[i, h].double().round(decimals=decimals).tolist() if head in (None, h) else None for h in range(w.size(1))]
                    if layer in (None, i) else None
                    for i in range(w.size(0))
                ]
        return {
            "source": self.source, "target": self.target, "forced_target": self.forced_target, "model": self.model,
            "word_level": self.word_level, "stopped": self.stopped, "sentences": self.sentences,
            "src_tokens": self.src_tokens, "tgt_tokens": self.tgt_tokens, "tgt_inputs": self.tgt_inputs,
            "n_layers": self.n_layers, "n_heads": self.n_heads, "d_k": self.d_k,
            "decoder_visible": self.decoder_visible(),
            "selection": {"kind": kind, "layer": layer, "head": head},
            "attention": attention,
        }


def attention_report(translator: Translator, source: str, target: str | None = None, **decode: Any) -> AttentionReport:
    """Translate `source` (or take `target`, teacher-forced) and collect every attention weight of the model.

    The weights are computed in fp32, whatever autocast the caller is in, on the translation the translator makes
    in its own precision, of the source whole (not split into sentences; a source in capitals or title case, or in a
    frame, is given as `Translator.translate` gives it, unless `verbatim`, and its pieces are shown so, its numbers
    as placeholders for a model that reads them so; a `target` is teacher-forced so too, as the model would write
    it). `decode` are decode settings for that translation (beam,
    greedy, ...), as for `Translator.translate`; with a `target` there is no translation, and they are refused, but
    for `verbatim` (the source and target as written).

    Raises:
        TfmError: an empty source or target, or one longer than the model takes; a source without a letter (it is
            written as it is, without the model) unless `verbatim`; an int8 translator (its weights
            are a quantized copy: load it in another precision); a decode setting out of range, or any given
            with a `target`.
        TypeError: `translator` is not a Translator, `source`/`target` is not a str, or an unknown decode setting.
    """
    if not isinstance(translator, Translator):  # a run's path failed as "'str' object has no attribute 'tokenizer'"
        raise TypeError(f"attention_report() takes a Translator (Translator.load(path)), not {type(translator).__name__}")
    for name, text in (("source", source), ("target", target)):
        if (text is not None or name == "source") and not isinstance(text, str):  # failed inside the tokenizer
            raise TypeError(f"attention_report() takes the {name} as a str, not {type(text).__name__}")
        if text is not None:
            check_text(text, f"the {name}")
            check_sentence(text, f"the {name}")  # as `tfm inspect-attn` refuses them (a target was glued into one)
    unused = sorted(set(decode) - {"verbatim"})  # verbatim says how the source and the target are given
    if target is not None and unused:  # beam=0 or bogus=1 were taken without a word: nothing is decoded
        raise TfmError(
            f"decode settings ({', '.join(unused)}) have no effect with a target: it is teacher-forced, not translated",
            hint="drop them, or drop the target to inspect the model's own translation",
        )
    if translator.precision == "int8":  # the weights shown would be those of the quantized copy
        raise TfmError(
            "attention_report() shows the fp32 model's weights, and this translator's linear layers are int8",
            hint="load it with precision='fp32' (or 'auto'), as `tfm inspect-attn` does",
        )
    tok, model = translator.tokenizer, translator.model
    cfg = model.config
    # what the model is given for it, as `translate` gives it (a sentence in capitals or title case as an ordinary one,
    # without its frame: `sentences.to_translate`): its pieces are the ones shown, and the translation's are of it
    # (checked as translate checks it: unknown names, verbatim="no")
    settings = translator.settings.updated(**decode)
    verbatim = settings.verbatim

    numbers = translator.number_placeholders  # numbers given as placeholders (`sentences.Part.numbers`)
    source_part = to_translate(source, False, tok.word_cost, bool(verbatim), numbers)[0]

    def given(text: str) -> str:  # what the model is given for the source
        return to_translate(text, False, tok.word_cost, bool(verbatim), numbers)[0].given or text

    def as_written_by_the_model(text: str) -> str:
        """A target as the model writes the translation of the source as it is given: without its frame where the
        source's came off, in sentence case where the source was in capitals or title case; else as it is (a
        target in title case beside an ordinary source is the user's to force)."""
        if source_part.prefix or source_part.suffix:
            for _ in range(MAX_DEPTH):
                before, inner, after = frame(text)
                if not (before or after):
                    break
                text = inner
        if (source_part.capitals or source_part.title) and (in_capitals(text) or in_title_case(text)):
            text = sentence_case(text, tok.word_cost)
        return numbers_as_placeholder(text, source_part.numbers) if source_part.numbers else text  # as training gives them

    if not verbatim and to_translate(source, False, tok.word_cost)[0].literal:  # no model makes its translation
        raise TfmError(  # (it showed an empty translation's one row, labelled "the model's translation")
            f"the sentence {source.strip()!r} has no letter: tfm translate writes it as it is, without the model",
            hint="add --verbatim (verbatim=True) to inspect what the model makes of it",
        )
    src_ids = tok.encode(given(source))
    if not src_ids:
        raise TfmError("the sentence to inspect is empty", hint='give a sentence, e.g. tfm inspect-attn "Je suis étudiant."')
    limit = cfg.max_positions - 1
    if len(src_ids) > limit:  # before translating it: a truncated translation of it would be no view of it
        raise TfmError(f"the sentence has {len(src_ids)} tokens; the model takes at most {limit}", hint="inspect a shorter sentence")
    if target is None:
        # the model's translation of the source whole: the maps are of one source and one output
        result = translator.translate(source, **{**decode, "split_sentences": False})
        tgt_ids = [tok.piece_to_id(p) for p in result.tokens]
        target_text, forced, stopped = result.text, False, result.stopped
        tgt_numbers = source_part.numbers or ()  # written into its placeholders in order (`Part.written`)
    else:
        # teacher-forced as the model writes the translation of the source it is given: a target in capitals or in a
        # frame (`"I AM TIRED."`) beside a source so written is forced in sentence case, without its frame
        forced_text = target if verbatim else as_written_by_the_model(target)
        tgt_ids, target_text, forced, stopped = tok.encode(forced_text), target, True, None
        tgt_numbers = () if verbatim else placeholder_values(target, source_part.numbers or ())
        if not tgt_ids:
            raise TfmError("the target is empty", hint="give the target sentence to teacher-force, or none to inspect the model's own translation")
    if len(tgt_ids) > limit:
        raise TfmError(f"the target has {len(tgt_ids)} tokens; the model takes at most {limit}", hint="inspect a shorter sentence")
    device = translator.device
    src = torch.tensor([src_ids + [cfg.eos_id]], device=device)
    tgt_in = torch.tensor([[cfg.bos_id] + tgt_ids], device=device)
    model = module_view(model).eval()  # the same weights without dropout, whatever mode the translator's model is in
    captured = _capture_projections(model)
    try:
        # fp32 even inside a caller's torch.autocast block (it computed them in bf16 there, up to 0.011 apart)
        with torch.no_grad(), torch.autocast(device_type=device.type, enabled=False):
            maps = model.attention_maps(src, tgt_in, padding_mask(src, cfg.pad_id), causal_mask(tgt_in.size(1), device))
    finally:
        for handle in captured.pop("handles"):
            handle.remove()
    pieces = [tok.id_to_piece(i) for i in src_ids]
    out_pieces = [tok.id_to_piece(i) for i in tgt_ids]
    weights = {k: torch.stack([w[0] for w in maps[k]]).float().cpu() for k in KINDS}  # (L, H, Q, K)
    vectors = {k: {n: torch.stack(v).cpu() for n, v in captured[k].items()} for k in KINDS}
    # the sentences `translate` would translate apart (a view of one source needs it whole)
    sentences = len(to_translate(source, True, tok.word_cost, False, numbers)) if settings.split_sentences and not verbatim else 1
    return AttentionReport(
        source, target_text, forced, str(translator.path or "<in memory>"),
        pieces + [EOS], out_pieces + [EOS], [BOS] + out_pieces, weights, cfg.d_k,
        stopped=stopped, vectors=vectors, sentences=sentences,
        src_numbers=_placed(pieces, source_part.numbers or ()), tgt_numbers=_placed(out_pieces, tgt_numbers),
    )


def _placed(pieces: list[str], numbers: tuple[str, ...]) -> tuple[str, ...]:
    """`numbers` cut to the placeholders there are (a translation may have fewer than its source's numbers; one
    more, a number the model made up, is written without one)."""
    return tuple(numbers[: len(placeholder_positions(pieces))])


_PLACEHOLDER_WORD = re.compile(NUMBER_PLACEHOLDER)  # wherever it is, as the translation's numbers are written into it


def placeholder_positions(tokens: list[str]) -> list[int]:
    """The position of the (first) piece of each number placeholder in `tokens`, in order: one piece in a vocabulary
    that learnt it (`▁XNUM`), or several in a small one trained before tfm kept it whole (`▁` `X` `N` `U` `M`: the
    piece of its X)."""
    starts, text = [], ""
    for token in tokens:
        starts.append(len(text))
        text += token.replace("▁", " ") if token not in (BOS, EOS) else " "
    return [bisect.bisect_right(starts, m.start()) - 1 for m in _PLACEHOLDER_WORD.finditer(text)]


def _capture_projections(model) -> dict[str, Any]:
    """Forward hooks that keep each attention's per-head queries, keys and values (for `explain`)."""
    captured: dict[str, Any] = {k: {"q": [], "k": [], "v": []} for k in KINDS}
    handles = []

    def hook(kind: str):
        def keep(module, args, kwargs, output):
            query = args[0]
            memory = args[1] if len(args) > 1 else kwargs.get("memory")
            source = query if memory is None else memory
            captured[kind]["q"].append(module._split(module.w_q(query))[0].detach())  # (H, Q, Dh)
            captured[kind]["k"].append(module._split(module.w_k(source))[0].detach())  # (H, K, Dh)
            captured[kind]["v"].append(module._split(module.w_v(source))[0].detach())

        return keep

    for layer in model.encoder_layers:
        handles.append(layer.self_attn.register_forward_hook(hook("encoder"), with_kwargs=True))
    for layer in model.decoder_layers:
        handles.append(layer.self_attn.register_forward_hook(hook("decoder"), with_kwargs=True))
        handles.append(layer.cross_attn.register_forward_hook(hook("cross"), with_kwargs=True))
    captured["handles"] = handles
    return captured


# --- word level ------------------------------------------------------------------------------------------------


def word_groups(tokens: list[str]) -> list[list[int]]:
    """Positions grouped into words: a piece starting with "▁" starts a word; <s> and </s> stand alone. Scripts
    written without spaces (Chinese, Japanese, Thai...) have no "▁" inside a sentence, so there each subword
    piece is a unit of its own, as is the punctuation after one; the byte-fallback pieces that spell one
    character stay together, and a bare "▁" (before such bytes) belongs to what follows it. Punctuation before or
    after a word (`rouge` `.`, `(` `Bonjour` `)`, `Wow` `!!!`) is a word of its own, as the tokenizers of word aligners
    split it off; inside one (`qu'il`, `C'est-à-dire`) it stays."""
    groups: list[list[int]] = []
    for spaced in _spaced_words(tokens):
        entries = [(positions, text) for positions, text in _characters([tokens[i] for i in spaced])]
        marks = [_is_punctuation(text) for _, text in entries]
        # the run of punctuation (and a bare "▁" before it) that opens the word, and the one that closes it
        lead = 0
        while lead < len(entries) and (marks[lead] or not entries[lead][1].replace("▁", "")):
            lead += 1
        trail = len(entries)
        while trail > lead and marks[trail - 1]:
            trail -= 1
        if lead == len(entries) or not any(marks[:lead]):  # all punctuation (`...`, `▁«`), or no opening mark
            lead = 0
        cuts = [cut for cut in (lead, trail) if 0 < cut < len(entries)]
        for a, b in zip([0, *cuts], [*cuts, len(entries)], strict=True):
            if a < b:
                groups.append([spaced[i] for positions, _ in entries[a:b] for i in positions])
    return groups


def _spaced_words(tokens: list[str]) -> list[list[int]]:
    """Positions grouped as the spaces between words group them (`word_groups` before punctuation comes off)."""
    groups: list[list[int]] = []
    after_special = after_unspaced = after_space = False
    for positions, text in _characters(tokens):
        special = text in (BOS, EOS)
        first = text.lstrip("▁")[:1]
        starts = after_unspaced or text.startswith("▁") or bool(first and unspaced(first))
        if not groups or special or after_special or (starts and not (after_space and not text.startswith("▁"))):
            groups.append(positions)
        else:
            groups[-1].extend(positions)
        after_special, after_unspaced, after_space = special, bool(text) and unspaced(text[-1]), text == "▁"
    return groups


def _byte(piece: str) -> int | None:
    """The value of a byte-fallback piece (`<0xE6>` -> 230), else None."""
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        try:
            return int(piece[3:5], 16)
        except ValueError:
            return None
    return None


def _characters(tokens: list[str]) -> list[tuple[list[int], str]]:
    """The pieces as (positions, text), where the byte-fallback pieces of one UTF-8 character are one entry."""
    out: list[tuple[list[int], str]] = []
    i = 0
    while i < len(tokens):
        lead = _byte(tokens[i])
        run = [i]
        if lead is not None and lead >= 0xC0:  # the lead byte of a 2-, 3- or 4-byte character: gather its tail
            size = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
            while len(run) < size and i + len(run) < len(tokens) and 0x80 <= (_byte(tokens[i + len(run)]) or 0) < 0xC0:
                run.append(i + len(run))
        if lead is None:
            text = tokens[i]
        else:
            text = bytes(_byte(tokens[j]) or 0 for j in run).decode("utf-8", errors="replace")
        out.append((run, text))
        i += len(run)
    return out


def _word_text(tokens: list[str], group: list[int]) -> str:
    """A word's text from its pieces; the byte-fallback pieces (`<0xD7><0xA9>`) of a character the vocabulary
    lacks are read back as that character (`ש`), as the detokenizer does."""
    pieces, raw = [], bytearray()
    for i in group:
        piece = tokens[i]
        value = _byte(piece)
        if value is not None:
            raw.append(value)
            continue
        if raw:
            pieces.append(raw.decode("utf-8", errors="replace"))
            raw.clear()
        pieces.append(piece)
    if raw:
        pieces.append(raw.decode("utf-8", errors="replace"))
    text = "".join(pieces)
    return text if text in (BOS, EOS) else text.replace("▁", " ").strip() or text


def merge_words(report: AttentionReport) -> AttentionReport:
    """The same report over words: weights summed over a word's key pieces, averaged over its query pieces,
    so every row still sums to 1. (Byte-fallback pieces of a word are read back as the characters they spell.)"""
    if report.word_level:
        return report
    src_g, tgt_g, in_g = word_groups(report.src_tokens), word_groups(report.tgt_tokens), word_groups(report.tgt_inputs)
    groups = {"encoder": (src_g, src_g), "decoder": (tgt_g, in_g), "cross": (tgt_g, src_g)}
    weights, first_row = {}, None
    for kind, (queries, keys) in groups.items():
        w = report.weights[kind]
        w = torch.stack([w[..., g].sum(dim=-1) for g in keys], dim=-1)  # sum over each word's key pieces
        weights[kind] = torch.stack([w[..., g, :].mean(dim=-2) for g in queries], dim=-2)  # mean over its queries
        if kind == "decoder" and len(queries[0]) > 1:  # the first word's later pieces see more than "<s>"
            first_row = w[..., queries[0][1:], :].mean(dim=-2)
    return AttentionReport(
        report.source, report.target, report.forced_target, report.model,
        [_word_text(report.src_tokens, g) for g in src_g], [_word_text(report.tgt_tokens, g) for g in tgt_g],
        [_word_text(report.tgt_inputs, g) for g in in_g], weights, report.d_k, word_level=True, stopped=report.stopped,
        sentences=report.sentences, src_numbers=report.src_numbers, tgt_numbers=report.tgt_numbers,
        decoder_first_row=first_row,
        # a key word is visible to a query word when its first piece is read by the query word's last piece
        decoder_words_visible=[sum(k[0] <= q[-1] for k in in_g) for q in tgt_g],
    )


# --- finding a token -------------------------------------------------------------------------------------------


# Apostrophes typed or printed in place of one another (’ from a word processor, ' from a keyboard).
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'"})


def _comparable(text: str) -> str:
    """`text` as --token compares it: without "▁", NFC (the tokens are NFC; a query typed or pasted in NFD is the
    same word), case-folded, with ’ ‘ ʼ read as '."""
    return _folded(unicodedata.normalize("NFC", text.replace("▁", "")).strip()).translate(_APOSTROPHES)


def _folded(text: str) -> str:
    """`text` case-folded, Turkish's dotted and dotless i included: Python folds İ to "i" and a combining dot above
    (U+0307), so "İstanbul" never matched "istanbul" or "ISTANBUL" (the dot goes), and keeps ı, the lower case of
    Turkish I, apart from i, so "kış" never matched "KIŞ" (ı reads as i)."""
    return text.casefold().replace("i\u0307", "i").replace("ı", "i")


def _parts(token: str) -> list[str]:
    """A token's text and its parts split at punctuation: "▁qu'il" -> ["qu'il", "qu", "il"]."""
    text = _comparable(token)
    parts, current = [text], ""
    for ch in text:
        if unicodedata.category(ch).startswith("P"):
            if current:
                parts.append(current)
            current = ""
        else:
            current += ch
    if current and current != text:
        parts.append(current)
    return parts


class AmbiguousToken(TfmError):
    """Digits that are both a number of the sentence and the index of another token (`find_token`)."""


def find_token(tokens: list[str], query: str, inputs: list[str] | None = None, numbers: tuple[str, ...] = ()) -> int:
    """The position of `query` in `tokens`: a 1-based index ("3", or "#3", which is never text), the token's text,
    or a word inside it ("il" finds "▁qu'il"); the first match wins. A word the vocabulary splits into several pieces
    ("été" as "▁ét" "é.") is found at its first piece, when no piece matches by itself; in a script written without
    spaces, any run of its characters is found, at the piece where it starts. Case (Turkish İ included), NFC/NFD
    and ’ versus ' do not matter. A number of the sentence is found as written, also where the model reads it as a
    placeholder (`numbers`: what each placeholder piece stands for, in order); digits that are both a number of the
    sentence and the index of another token are refused as ambiguous (AmbiguousToken). TfmError listing the tokens
    when nothing matches.

    Target positions are labelled by the token each predicts; `inputs` are the tokens they read (`tgt_inputs`),
    so "<s>" finds the first position, the one that reads it."""
    explicit = query.startswith("#") and query[1:].isascii() and query[1:].isdigit()
    if explicit or (query.isascii() and query.isdigit()):  # not '²' (a digit to str.isdigit that int() cannot read)
        digits = query.lstrip("#").lstrip("0")
        index = (int(digits or "0") if len(digits) <= 18 else 0) - 1  # longer is out of range (int() reads 4,300 digits)
        number = None if explicit else _number_at(tokens, query, numbers)
        if number is not None and 0 <= index < len(tokens) and number != index:
            raise AmbiguousToken(
                f"--token {query} is both token {query} ({tokens[index]}) and the number {query} of the sentence "
                f"(token {number + 1}, {tokens[number]})",
                hint=f"give --token '#{index + 1}' for token {index + 1}, or --token '#{number + 1}' for the number",
            )
        if number is not None:
            return number
        if 0 <= index < len(tokens):
            return index
        raise TfmError(f"--token {query} is out of range: the tokens are numbered 1-{len(tokens)}", hint=_listing(tokens))
    if (number := _number_at(tokens, query, numbers)) is not None:
        return number
    wanted = _comparable(query)
    spelled = _spelled_in_bytes(tokens)
    for exact in (True, False):
        for i, token in enumerate(tokens):
            parts = _parts(token)
            if (exact and (parts[0] == wanted or wanted in spelled.get(i, ()))) or (not exact and wanted in parts[1:]):
                return i
    # a word in several pieces: "Prix" as "▁P" "ri" "x"; or as written between spaces, with the punctuation after it
    # that `word_groups` takes off ("rouge." as "▁rouge" ".")
    for group in [*word_groups(tokens), *_spaced_words(tokens)]:
        start = _piece_starting(tokens, group, wanted) if len(group) > 1 and wanted else None
        if start is not None:
            return start
    if (unspaced_at := _unspaced_match(tokens, wanted)) is not None:
        return unspaced_at
    if inputs and wanted == BOS and inputs[0] == BOS:  # no position predicts "<s>": the first one reads it
        return 0
    raise TfmError(f"--token {query!r} is not in the sentence", hint=_listing(tokens))


def _number_at(tokens: list[str], query: str, numbers: tuple[str, ...]) -> int | None:
    """Where the number `query` is: its placeholder piece (the k-th, standing for `numbers[k]`), or the first piece of
    a word that is the number as written (a model that reads digits so); None where the sentence has no such number."""
    for position, value in zip(placeholder_positions(tokens), numbers, strict=False):  # (fewer numbers: made up)
        if value == query.strip():
            return position
    if any(ch.isdigit() for ch in query):  # a whole word of the sentence (`1984`), not a piece of one (its `4`)
        for group in word_groups(tokens):
            if _word_text(tokens, group) == query.strip():
                return next((i for i in group if tokens[i].replace("▁", "")), group[0])  # not a bare "▁" before it
    return None


def _piece_starting(tokens: list[str], group: list[int], wanted: str) -> int | None:
    """The position of the piece of the word at `group` where `wanted` starts, when `wanted` is the whole word or
    one of its parts between punctuation ("animal" in "▁L'" "an" "imal" starts at "an"); else None."""
    spans = [(group[run[0]], _comparable(text)) for run, text in _characters([tokens[i] for i in group])]
    word = "".join(text for _, text in spans)

    def punctuation(k: int) -> bool:
        return unicodedata.category(word[k]).startswith("P")

    at = word.find(wanted)
    while at >= 0:
        end = at + len(wanted)
        if (at == 0 or punctuation(at - 1)) and (end == len(word) or punctuation(end)):  # a whole part of the word
            for position, text in spans:
                if at < len(text):
                    return position
                at -= len(text)
        at = word.find(wanted, at + 1)
    return None


def _unspaced_match(tokens: list[str], wanted: str) -> int | None:
    """In a script written without spaces (Chinese, Japanese, Thai...), where every piece is a unit of its own,
    the piece where `wanted` starts, across pieces ("我喜欢" over "我" "喜欢", "แมว" over "แ" "ม" "ว") or inside one
    ("果" in "苹果"); None when `wanted` has a letter of a spaced script, or no letter at all."""
    letters = [ch for ch in wanted if ch.isalpha()]
    if not letters or not all(unspaced(ch) for ch in letters):
        return None
    spans = [(positions[0], _comparable(text)) for positions, text in _characters(tokens) if text not in (BOS, EOS)]
    at = "".join(text for _, text in spans).find(wanted)
    if at < 0:
        return None
    for position, text in spans:
        if at < len(text):
            return position
        at -= len(text)
    return None


def word_of(tokens: list[str], position: int) -> tuple[str, list[int]]:
    """The word (`word_groups`) that holds `position`: its text and its positions."""
    group = next(group for group in word_groups(tokens) if position in group)
    return _word_text(tokens, group), group


def _spelled_in_bytes(tokens: list[str]) -> dict[int, tuple[str, str]]:
    """For each position where a character spelled in byte tokens starts: that character, and the run of such
    characters from there, lowercased (`<0xE6><0x88><0x91><0xE7><0x9A><0x84>` gives "我", "我的" at its first
    byte and "的", "的" at its fourth), so that --token finds a character the vocabulary lacks by its text."""
    chars = [(positions, text) for positions, text in _characters(tokens) if _byte(tokens[positions[0]]) is not None]
    found: dict[int, tuple[str, str]] = {}
    for n, (positions, text) in enumerate(chars):
        run, last = text, positions[-1]
        for later, later_text in chars[n + 1 :]:
            if later[0] != last + 1:  # another piece between: the run ends
                break
            run, last = run + later_text, later[-1]
        found[positions[0]] = (_folded(text), _folded(run))
    return found


def _listing(tokens: list[str]) -> str:
    return "its tokens are: " + " ".join(f"{i + 1}:{t}" for i, t in enumerate(tokens))


# --- statistics, focus, explanation, alignment -------------------------------------------------------------------


def _is_punctuation(token: str) -> bool:
    text = token.replace("▁", "").strip()
    return bool(text) and all(unicodedata.category(ch).startswith("P") for ch in text)


SUMMARY_FIGURES = ("entropy", "max_weight", "eos_share", "bos_share", "punct_share", "diagonal_distance")


def head_summary(report: AttentionReport) -> list[dict[str, Any]]:
    """For every kind, layer and head: mean entropy of the rows (nats), mean maximum weight, share of attention
    on the end-of-sentence key, on the start-of-sentence key (decoder self-attention's keys begin with "<s>", and
    have no "</s>") and on punctuation keys, and mean distance from the diagonal (in key positions; for
    cross-attention the diagonal runs corner to corner). Queries are averaged with equal weight; in decoder
    self-attention the first query, which sees only "<s>" and so puts all of its weight there whatever the head
    does, is left out (unless it is the only one); over words (`merge_words`), that query is the first word's
    first piece, and the word's other pieces stay in. Of an empty translation, whose decoder self-attention has
    that first query alone, the decoder's figures are None: there is no row to measure."""
    rows = []
    for kind in KINDS:
        w = report.weights[kind]  # (L, H, Q, K)
        keys = report.key_tokens(kind)
        n_q, n_k = w.size(2), w.size(3)
        if kind == "decoder" and n_q == 1 and report.decoder_first_row is None:  # only "<s>" -> "<s>", weight 1
            rows += [
                {"kind": kind, "layer": layer + 1, "head": head + 1, **dict.fromkeys(SUMMARY_FIGURES)}
                for layer in range(w.size(0)) for head in range(w.size(1))
            ]
            continue
        eos = torch.tensor([t == EOS for t in keys])
        bos = torch.tensor([t == BOS for t in keys])
        punct = torch.tensor([_is_punctuation(t) for t in keys])
        q_pos = torch.arange(n_q, dtype=torch.float32)
        if kind == "cross" and n_q > 1:
            q_pos = q_pos * (n_k - 1) / (n_q - 1)
        distance = (torch.arange(n_k, dtype=torch.float32)[None, :] - q_pos[:, None]).abs()  # (Q, K)
        if kind == "decoder" and report.decoder_first_row is not None:  # words: the first word less its first piece
            w = torch.cat([report.decoder_first_row[:, :, None, :], w[:, :, 1:]], dim=2)
        elif kind == "decoder" and n_q > 1:  # the first query's one visible key says nothing of the head
            w, distance = w[:, :, 1:], distance[1:]
        entropy = -(w * w.clamp_min(1e-12).log()).sum(-1).mean(-1)  # (L, H)
        for layer in range(w.size(0)):
            for head in range(w.size(1)):
                m = w[layer, head]
                rows.append({
                    "kind": kind, "layer": layer + 1, "head": head + 1,
                    "entropy": float(entropy[layer, head]),
                    "max_weight": float(m.max(-1).values.mean()),
                    "eos_share": float(m[:, eos].sum(-1).mean()) if eos.any() else 0.0,
                    "bos_share": float(m[:, bos].sum(-1).mean()) if bos.any() else 0.0,
                    "punct_share": float(m[:, punct].sum(-1).mean()) if punct.any() else 0.0,
                    "diagonal_distance": float((m * distance).sum(-1).mean()),
                })
    return rows


def focus(report: AttentionReport, kind: str, query: int) -> dict[str, Any]:
    """Where query position `query` attends in every layer and head of `kind`: the top key and its weight per
    (layer, head), and the mean over heads per layer as a distribution over the keys."""
    _, _, query = report.check(kind, query=query, needs_kind=True)
    w = report.weights[kind][:, :, query, :]  # (L, H, K)
    top_w, top_k = w.max(dim=-1)
    keys = report.key_tokens(kind)
    return {
        "kind": kind, "query": query, "query_token": report.query_tokens(kind)[query], "keys": keys,
        "top": [
            [{"key": int(top_k[i, h]), "token": keys[int(top_k[i, h])], "weight": float(top_w[i, h])} for h in range(w.size(1))]
            for i in range(w.size(0))
        ],
        "layer_means": w.mean(dim=1).tolist(),
    }


def explain(report: AttentionReport, kind: str, layer: int, head: int, query: int) -> dict[str, Any]:
    """One head's attention for one query, step by step as the paper's formula reads: the dot products q.k for
    each key, divided by sqrt(d_k), the softmax, the value vectors' norms, and the weighted sum (0-based indices).
    Keys a causal mask hides are left out, as the model leaves them out."""
    layer, head, query = report.check(kind, layer, head, query, needs_kind=True)
    if report.word_level or kind not in report.vectors:
        raise TfmError("the step-by-step view needs subword tokens", hint="drop --words for --explain")
    vec = report.vectors[kind]
    q = vec["q"][layer, head, query].double()  # (Dh,)
    k = vec["k"][layer, head].double()  # (K, Dh)
    v = vec["v"][layer, head].double()
    visible = k.size(0) if kind != "decoder" else query + 1
    dots = k[:visible] @ q
    scaled = dots / math.sqrt(report.d_k)
    weights = scaled.softmax(dim=0)
    output = (weights[:, None] * v[:visible]).sum(dim=0)
    keys = report.key_tokens(kind)
    return {
        "kind": kind, "layer": layer, "head": head, "query": query, "query_token": report.query_tokens(kind)[query],
        "d_k": report.d_k, "sqrt_d_k": math.sqrt(report.d_k),
        "rows": [
            {"key": j, "token": keys[j], "dot": float(dots[j]), "scaled": float(scaled[j]), "weight": float(weights[j]),
             "value_norm": float(v[j].norm()), "weighted_value_norm": float((weights[j] * v[j]).norm())}
            for j in range(visible)
        ],
        "output_norm": float(output.norm()),
    }


def default_alignment_layer(report: AttentionReport) -> int:
    """The decoder layer alignments are read from by default (0-based): in a decoder of 6 layers or more, the last
    but one, where cross-attention aligns best in trained Transformers of that depth (Garg et al., 2019, layer 5 of
    6); in a shallower one, the last, as the last but one of 2-5 layers is a low layer (measured on the 3-layer
    quickstart model, the 20 hand-aligned dev sentences of docs/alignment.py: layer 3 picks a right source word for
    68% of the target words, layer 2 for 58%, layer 1 for 29%)."""
    n = report.n_layers["decoder"]
    return n - 2 if n >= 6 else n - 1


def alignment(report: AttentionReport, layer: int | None = None, head: int | None = None) -> list[tuple[int, int]]:
    """Pharaoh (source word, target word) pairs, 0-based: each target word aligned to the source word its
    cross-attention weighs most (the mean over heads of `layer` unless `head` is given). "</s>" is left out."""
    layer, head, _ = report.check("cross", layer, head)
    words = merge_words(report)
    layer = default_alignment_layer(words) if layer is None else layer
    m = words.matrix("cross", layer, head)
    src_real = [i for i, t in enumerate(words.src_tokens) if t != EOS]
    pairs = []
    for j, token in enumerate(words.tgt_tokens):
        if token == EOS or not src_real:
            continue
        best = max(src_real, key=lambda i: float(m[j, i]))
        pairs.append((best, j))
    return pairs
