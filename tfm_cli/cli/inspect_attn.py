"""`tfm inspect-attn SENTENCE`: what every head of a trained model attends to, in the terminal.

Parse, call `tfm_cli.attention`, render. Views: a heatmap of one kind/layer/head (default), `--token` (where one
token attends in every layer and head), `--explain` (one head's numbers step by step), `--summary` (statistics
of every head), `--align` (Pharaoh word alignment), `--json`, `--html FILE`, `--image FILE`. Layers and heads
are numbered from 1 here, as a person counts; the JSON keeps 0-based arrays.
"""

from __future__ import annotations

import shutil
import sys
import unicodedata
from pathlib import Path
from typing import Any

import typer

from tfm_cli.cli.common import (
    DEVICE_HELP,
    check_output_file,
    check_utf8,
    device_name,
    fancy_stdout,
    file_path,
    given_path,
    info,
    line_count,
    names_a_file,
    out,
    print_json,
    print_table,
    route_warnings,
    say_which_weights,
    stdin_lines,
    typed_command,
    warn,
)
from tfm_cli.errors import TfmError, shell_word
from tfm_cli.precisions import PRECISIONS

KIND_NAMES = {"encoder": "encoder self-attention", "decoder": "decoder masked self-attention", "cross": "encoder-decoder cross-attention"}
_SHADES = " ·░▒▓█"


def _numbered(what: str, n: int) -> str:
    """`layers 1-6`, or `one layer (1)` where there is one: "the model has heads 1-1" read oddly."""
    return f"{what} 1-{n}" if n > 1 else f"one {what.rstrip('s')} (1)"


def _use(option: str, n: int) -> str:
    """`use --layer 1 to 6`, or `use --layer 1` where 1 is the only one."""
    return f"use {option} 1 to {n}" if n > 1 else f"use {option} 1"


def _precision(value: str) -> str:
    if value == "int8":  # translate's and bench's fifth choice: its weights are a quantized copy
        raise typer.BadParameter("int8 is not offered here: the weights shown are the fp32 model's; use auto, fp32, bf16 or fp16")
    if value not in PRECISIONS:
        raise typer.BadParameter(f"{value!r} is not one of: {', '.join(PRECISIONS)}")
    return value


def inspect_attn(
    sentence: str = typer.Argument(..., metavar="SENTENCE", help="The source sentence to translate and inspect (-: one line from stdin)."),
    model: Path = typer.Option(None, "--model", "-m", parser=given_path, metavar="<path>", help="Run directory, release directory or .safetensors file (default: the most recent run under runs/).", show_default=False),
    target: str = typer.Option(None, "--target", "-t", help="Inspect this target (teacher-forced) instead of the model's translation; given as the model writes (in capitals or a frame: as tfm translate gives the source) unless --verbatim.", show_default=False),
    verbatim: bool = typer.Option(None, "--verbatim/--no-verbatim", help="Give the model the sentence (and --target) exactly as written, as tfm translate --verbatim does, not a sentence in capitals or title case or in a frame as an ordinary one (default: the run's recipe, decode.verbatim, off).", show_default=False),
    kind: str = typer.Option(None, "--kind", "-k", help="encoder, decoder or cross (default: cross; with --token, where the token is; --json: every kind unless given).", show_default=False),
    layer: int = typer.Option(None, "--layer", "-l", min=1, help="Layer, from 1 (default: the last; --json: every layer unless given).", show_default=False),
    head: str = typer.Option(None, "--head", callback=lambda v: _head_word(v), help="Head, from 1, or 'mean' of all heads (the default; --json keeps every head unless a number is given).", show_default=False),
    token: str = typer.Option(None, "--token", help="Focus on one query token: its text (a word inside a piece counts: 'il' finds qu'il; a word in several pieces is found at its first; a number of the sentence by its digits) or its number (#N: never read as text).", show_default=False),
    explain_head: bool = typer.Option(False, "--explain", help="With --token: one head step by step (q.k, /sqrt(d_k), softmax, values); --head N (default: head 1)."),
    summary: bool = typer.Option(False, "--summary", help="Statistics of every head: entropy, maximum, share on </s>, <s> and punctuation, distance from the diagonal."),
    align: bool = typer.Option(False, "--align", help="Print the source-target word alignment from cross-attention (Pharaoh i-j)."),
    words: bool = typer.Option(False, "--words", help="Merge subword pieces into words (keys summed, queries averaged); punctuation before or after a word is a word of its own."),
    numbers: bool = typer.Option(False, "--numbers", help="Print the weights (in %) in the heatmap cells."),
    json_out: bool = typer.Option(False, "--json", help="Print tokens and the weights as JSON: of every kind, layer and head, or of those --kind, --layer and --head give (every weight of a 970-token sentence is some 250 MB)."),
    html: Path = typer.Option(None, "--html", parser=file_path("attention.html"), metavar="<path>", help="Also write a self-contained HTML page to explore every head.", show_default=False),
    image: Path = typer.Option(None, "--image", parser=file_path("attention.png"), metavar="<path>", help="Also write the heatmap as an image (.png or .svg; needs the plot extra).", show_default=False),
    device: str = typer.Option("auto", "--device", callback=device_name, help=DEVICE_HELP),
    precision: str = typer.Option("auto", "--precision", callback=_precision, help="The arithmetic of the translation, as tfm translate's: auto (bf16 on CUDA and on CPUs with fast bf16: AMX, AMD's AVX512-BF16, Arm's BF16; else fp32), fp32, bf16 or fp16 (CUDA only). The weights shown are computed in fp32 on that translation."),
) -> None:
    """Show what every attention head attends to when the model translates SENTENCE.

    Encoder self-attention, decoder masked self-attention and encoder-decoder cross-attention, per layer and
    head: a heatmap, one token's focus, one head step by step, a summary of every head, word alignment.

    Examples:

      tfm inspect-attn "L'animal n'a pas traversé la rue parce qu'il était trop fatigué." --token il

      tfm inspect-attn "Je suis étudiant." --kind encoder --layer 2 --head 3 --numbers

      tfm inspect-attn "Je suis étudiant." --token suis --explain --layer 1 --head 2

      tfm inspect-attn "Il fait beau." --summary --html attention.html
    """
    from tfm_cli.attention import KINDS, attention_report, merge_words
    from tfm_cli.translator import Translator

    if kind is not None and kind not in KINDS:
        raise typer.BadParameter(f"{kind!r} is not one of: {', '.join(KINDS)}", param_hint="--kind")
    head_default = head is None  # the mean of the heads; --explain takes head 1 then
    head = "mean" if head is None else head
    if explain_head and token is None:
        raise typer.BadParameter("--explain explains one query token: add --token", param_hint="--explain")
    if explain_head and words:
        raise typer.BadParameter("--explain works on subword pieces; drop --words", param_hint="--explain")
    if explain_head and head == "mean" and not head_default:  # typed: it explained head 1 without a word
        raise typer.BadParameter("--explain shows one head's numbers, and the mean of the heads has none of its own: "
                                 "give a head number (without --head: head 1)", param_hint="--head")
    if sentence == "-":  # as for tfm translate and cat: stdin, here one sentence
        sentence = _stdin_sentence()
    if names_a_file(sentence):  # `tfm inspect-attn input.fr` inspected the file's name
        raise typer.BadParameter(
            f"{sentence} is a file, not a sentence: to inspect one of its lines, give it on stdin "
            f"(head -n 1 {shell_word(sentence)} | {typed_command('inspect-attn', drop=sentence)} -)",
            param_hint="SENTENCE",
        )
    sentence = check_utf8(sentence, "the sentence to inspect")
    _one_line(sentence, "the sentence to inspect", '"$(sed -n 3p input.fr)"')
    if target is not None:
        target = check_utf8(target, "--target")
        _one_line(target, "--target", '"$(sed -n 3p output.en)"')
    if not sentence.strip():
        raise TfmError("the sentence to inspect is empty", hint='give a sentence, e.g. tfm inspect-attn "Je suis étudiant."')

    for path, option in ((html, "--html"), (image, "--image")):
        if path is not None:
            check_output_file(path, option, example="attention" + (".html" if option == "--html" else ".png"))
    if html is not None and image is not None and html.resolve() == image.resolve():  # one would replace the other
        raise typer.BadParameter(f"--html and --image are the same file, {html}: give each its own", param_hint="--image")
    with route_warnings():  # a final model older than the run's newest checkpoint is said
        # the precision `tfm translate` uses, so that the target inspected is the translation it prints (bf16 and
        # fp32 translate about one sentence in ten of a small model differently); the weights are fp32 either way
        translator = Translator.load(model, device=device, precision=precision)
    say_which_weights(model, Path(translator.path))
    config = translator.model.config  # a layer or head the model has not: said before translating, not after
    if layer is not None and layer > (config.n_enc_layers if kind == "encoder" else config.n_dec_layers if kind else
                                      max(config.n_enc_layers, config.n_dec_layers)):
        _layer(layer, config.n_enc_layers if kind == "encoder" else config.n_dec_layers, kind or "cross")
    _head(head, config.n_heads)
    for path, option in ((html, "--html"), (image, "--image")):
        if path is not None:  # again, now that the model's own files are known: they are inputs too
            check_output_file(path, option, inputs=translator.files)
    report = attention_report(translator, sentence, target, **({} if verbatim is None else {"verbatim": verbatim}))
    if report.stopped == "max_len":  # as likely a sign of an untrained model as of a long sentence: say it
        n = len(report.tgt_tokens) - 1
        warn(
            f"the translation reached the maximum output length ({n:,} token{'s' if n != 1 else ''}) and was cut "
            "there: its last row, </s>, was forced, not predicted (teacher-force a target with --target)"
        )
    if report.sentences > 1 and not report.forced_target:  # it inspected a translation tfm translate never prints
        warn(
            f"the sentence holds {report.sentences} sentences, which tfm translate translates one by one: the translation "
            "inspected is the model's of the whole line at once, as tfm translate --no-split-sentences gives it "
            "(inspect one sentence at a time for the translation tfm translate prints)"
        )
    shown = merge_words(report) if words else report
    given_kind = kind  # --json keeps the kind, layer and head given (the views' defaults aside): all when none is
    if token is not None:
        kind, query = _locate(shown, kind, token)
    kind = kind or "cross"
    layers = shown.n_layers["encoder" if kind == "encoder" else "decoder"]
    layer_index = _layer(layer, layers, kind)
    head_index = _head(head, shown.n_heads)
    decoder_layers = shown.n_layers["decoder"]
    # --align reads cross-attention, whatever --kind says: a layer the decoder has not is refused, but for an encoder
    # layer given with --kind encoder to what takes the kind (--json, --html, --image, --token), where the
    # alignment keeps its default layer, as without --align
    for_the_encoder = given_kind == "encoder" and (json_out or html is not None or image is not None or token is not None)
    if align and layer is not None and layer > decoder_layers and not for_the_encoder:
        raise TfmError(
            f"--layer {layer} is out of range for --align: it reads cross-attention, and the decoder has {_numbered('layers', decoder_layers)}",
            hint=f"{_use('--layer', decoder_layers)} with --align",
        )

    if align and given_kind not in (None, "cross") and not (json_out or html is not None or image is not None or token is not None):
        warn(  # nothing else shown takes the kind: it was dropped without a word
            f"--kind {given_kind} is not used here: --align reads cross-attention (the kind chooses the heatmap's, "
            "--token's, --image's and --html's)"
        )
    chosen = [o for o, v in (("--layer", layer), ("--head", None if head == "mean" else head)) if v is not None]
    # (--explain takes them, with or without the summary beside it)
    # (--html's page opens on them)
    if chosen and not (json_out or align or image is not None or html is not None or explain_head) and (summary or token is not None):
        warn(  # the views shown here take every layer and head: say so rather than drop the choice unseen
            f"{' and '.join(chosen)} {'is' if len(chosen) == 1 else 'are'} not used here: "
            f"{'the summary' if summary else 'the --token table'} shows every layer and head "
            "(they choose the heatmap's, --explain's, --align's and --image's, and the view --html's page opens on)"
        )
    if numbers and (json_out or summary or align or token is not None):  # only the heatmap prints them
        warn("--numbers is not used here: it prints the weights in the heatmap's cells, and no heatmap is drawn "
             f"({'--json holds the weights themselves' if json_out else 'drop --summary, --align and --token for the heatmap'})")
    kept = _json_selection(shown, given_kind, layer, head_index) if json_out else {}
    narrowed = any(v is not None for v in kept.values())
    # Every weight as numbers, made once for the page, the image and the JSON (a long sentence has millions).
    data = shown.to_dict() if (html is not None or image is not None or (json_out and not narrowed)) else None
    if image is not None:  # before anything is written (an --html page was, then the command failed)
        from tfm_cli.cli.views.images import check_matplotlib

        check_matplotlib()
    if html is not None:
        from tfm_cli.cli.views.page import write_html

        # the page opens on the view the terminal shows (--kind, --layer, --head: it opened on encoder layer 1)
        # (and with --token, its row pinned)
        view = {"kind": kind, "layer": layer_index, "head": head_index, "query": query if token is not None else None}
        page = {**data, "view": view}
        if token is not None and not shown.word_level:  # and that token's step by step, in every layer and head
            page["steps"] = _steps(shown, kind, query)
        info(f"wrote {write_html(page, html)}")
    if image is not None:
        from tfm_cli.cli.views.images import write_image

        info(f"wrote {write_image(data, image, kind, layer_index if layer is not None else None, head_index)}")
    if json_out:
        # the alignment of the --layer and --head given, as --align's (a layer only the encoder has: the default)
        aligned = (layer - 1 if layer is not None and layer <= decoder_layers else None, head_index)
        selected = shown.to_dict(**kept) if narrowed else data
        print_json(_json(selected, report, shown, kind, layer_index, head_index, token, query if token else None, explain_head, aligned))
        return
    _header(shown)
    if token is not None:
        _say_pieces(shown, kind, query)
        _say_placeholder(shown, kind, query, token)
    if summary:
        _render_summary(shown)
    if align:  # a layer only the encoder has (--kind encoder --layer N, taken by --token, --html, --image): the default
        _render_alignment(report, layer if layer is not None and layer <= decoder_layers else None, head_index)
    if token is not None and explain_head:
        _render_explain(report, kind, layer_index, 0 if head_index is None else head_index, query)
    elif token is not None:
        _render_focus(shown, kind, query)
    if not (summary or align or token is not None):
        _render_heatmap(shown, kind, layer_index, head_index, numbers)


def _one_line(text: str, what: str, example: str) -> None:
    """Refuse text of several lines (`"$(head -3 input.fr)"`): their line breaks became spaces, and three sentences
    glued together were inspected as one without a word, while stdin with more than one line is refused."""
    if (lines := line_count(text)) > 1:
        raise TfmError(
            f"{what} holds {lines} lines: inspect-attn shows one sentence and its one translation",
            hint=f"give one line, e.g. {example}",
        )


def _stdin_sentence() -> str:
    """The one sentence on stdin (blank lines aside); more than one is refused, as the view is of one sentence."""
    if sys.stdin is None:  # started with stdin closed (<&-)
        raise TfmError("standard input is closed: there is no sentence to inspect", hint='give the sentence, e.g. tfm inspect-attn "Je suis étudiant."')
    if sys.stdin.isatty():
        raise typer.BadParameter(
            f"- reads the sentence from stdin: pipe one in (e.g. head -n 1 input.fr | {typed_command('inspect-attn')})", param_hint="SENTENCE"
        )
    found: list[tuple[int, str]] = []
    for number, line in enumerate(stdin_lines(typed_command("inspect-attn")), start=1):
        line = line.rstrip("\r\n").lstrip("\ufeff")  # a byte-order mark is no part of the sentence shown
        if line.strip():
            found.append((number, line))
        if len(found) > 1:  # said at once, without reading the rest of a long file
            raise TfmError(
                f"stdin holds more than one sentence (lines {found[0][0]} and {found[1][0]}): inspect-attn shows one",
                hint=f"pipe in the one line to inspect, e.g. sed -n 3p input.fr | {typed_command('inspect-attn')}",
            )
    if not found:
        raise TfmError("stdin holds no sentence to inspect", hint=f"pipe in one line, e.g. head -n 1 input.fr | {typed_command('inspect-attn')}")
    return found[0][1]


# ---- parsing the choices ----------------------------------------------------------------------------------------


def _locate(report, kind: str | None, token: str) -> tuple[str, int]:
    """The kind and query position for --token: the given kind's queries, else the source, else the target."""
    from tfm_cli.attention import AmbiguousToken, find_token

    if kind is not None:
        try:
            numbers = report.src_numbers if kind == "encoder" else report.tgt_numbers
            return kind, find_token(report.query_tokens(kind), token, None if kind == "encoder" else report.tgt_inputs, numbers)
        except AmbiguousToken:  # digits that are a number of this side and another token's index
            raise
        except TfmError as error:  # "is not in the sentence" for a source word with --kind cross, which it is
            side, other = ("source", "target") if kind == "encoder" else ("target", "source")
            other_tokens = report.src_tokens if kind != "encoder" else report.tgt_tokens
            other_numbers = report.src_numbers if kind != "encoder" else report.tgt_numbers
            try:
                find_token(other_tokens, token, None if kind != "encoder" else report.tgt_inputs, other_numbers)
            except TfmError:
                raise error from None
            raise TfmError(
                f"--token {token!r} is a {other} token, and --kind {kind}'s queries are the {side}'s tokens",
                hint=f"leave --kind out (or give --kind {'encoder' if other == 'source' else 'cross'}) to take it from the "
                f"{other}; {side} tokens: {' '.join(report.query_tokens(kind))}",
            ) from None
    try:
        return "encoder", find_token(report.src_tokens, token, numbers=report.src_numbers)
    except AmbiguousToken:  # digits that are a number of the source and another token's index
        raise
    except TfmError:
        pass
    try:
        return "cross", find_token(report.tgt_tokens, token, report.tgt_inputs, report.tgt_numbers)
    except AmbiguousToken:
        raise
    except TfmError:
        if token.lstrip("#").isascii() and token.lstrip("#").isdigit():  # a position in neither
            raise TfmError(
                f"--token {token if len(token) <= 20 else f'{token[:8]}... ({len(token):,} digits)'} is out of range: "
                f"the source's tokens are numbered 1-{len(report.src_tokens)}, "
                f"the target's 1-{len(report.tgt_tokens)}",
                hint=f"source tokens: {' '.join(report.src_tokens)} | target tokens: {' '.join(report.tgt_tokens)}",
            ) from None
        # the seeds' "it" is a word of the translation the model may not give ("he"): --target is the way to ask it
        given = "" if report.forced_target else "give the translation to inspect with --target, or a token of these: "
        raise TfmError(
            f"--token {token!r} is in neither the source nor the "
            f"{'target' if report.forced_target else 'translation the model gave'}",
            hint=f"{given}source tokens: {' '.join(report.src_tokens)} | target tokens: {' '.join(report.tgt_tokens)}",
        ) from None


def _say_pieces(report, kind: str, query: int) -> None:
    """Say when the --token found is one piece of a word the vocabulary splits, and which (a query "été" shows
    "▁ét" of "▁ét" "é."): the view is of that piece, not of the word."""
    from tfm_cli.attention import word_of

    if report.word_level:
        return
    tokens = report.query_tokens(kind)
    word, group = word_of(tokens, query)
    if len(group) > 1:
        pieces = " ".join(_label(tokens[i], 24) for i in group)
        info(f"\"{word}\" is {len(group)} pieces here ({pieces}): the view is of its piece {group.index(query) + 1}, "
             f"\"{_label(tokens[query], 24)}\" (query {query + 1}; --words merges a word's pieces)")


def _say_placeholder(report, kind: str, query: int, token: str) -> None:
    """Say when --token found a number as the placeholder the model reads it as (`--token 23` shows "XNUM")."""
    from tfm_cli.attention import placeholder_positions
    from tfm_cli.sentences import NUMBER_PLACEHOLDER

    numbers = report.src_numbers if kind == "encoder" else report.tgt_numbers
    placeholders = placeholder_positions(report.query_tokens(kind))
    # (a word of --words may hold several: `XNUMhXNUM`)
    if any(at == query and value == token.strip() for at, value in zip(placeholders, numbers, strict=False)):
        info(f"the number {token.strip()} is read by the model as the placeholder {NUMBER_PLACEHOLDER} (query {query + 1}), "
             "as it reads every number of a sentence")


def _layer(layer: int | None, layers: int, kind: str) -> int:
    if layer is None:
        return layers - 1
    if not 1 <= layer <= layers:
        stack = "encoder" if kind == "encoder" else "decoder"
        raise TfmError(f"--layer {layer} is out of range: the {stack} has {_numbered('layers', layers)}", hint=_use("--layer", layers))
    return layer - 1


def _head_word(head: str | None) -> str | None:
    """--head's check before the model is read: a number or "mean" (anything else is a usage error, exit 2)."""
    if head is not None and head != "mean" and not (head.isascii() and head.isdigit() and head.lstrip("0")):
        raise typer.BadParameter(f"{head!r} is not a head number: use a number from 1, or mean")
    return head


def _head(head: str, heads: int) -> int | None:
    if head == "mean":
        return None
    if not (head.isascii() and head.isdigit()):  # '²' and '١' are digits to str.isdigit, and int('²') fails
        raise TfmError(f"--head {head!r} is not a head number", hint=f"{_use('--head', heads)}, or --head mean")
    digits = head.lstrip("0")
    number = int(digits or "0") if len(digits) <= 18 else 0  # longer is out of range (int() reads 4,300 digits at most)
    if not 1 <= number <= heads:
        raise TfmError(f"--head {head} is out of range: the model has {_numbered('heads', heads)}", hint=f"{_use('--head', heads)}, or --head mean")
    return number - 1


def _json_selection(report, kind: str | None, layer: int | None, head: int | None) -> dict[str, Any]:
    """The weights --json keeps (0-based, None: all): --kind, --layer and --head as given. A --layer given without
    --kind is kept in every kind, so it must be a layer of both stacks."""
    if layer is not None:
        for stack in ("encoder", "decoder") if kind is None else ("encoder" if kind == "encoder" else "decoder",):
            layers = report.n_layers[stack]
            if layer > layers:
                raise TfmError(
                    f"--layer {layer} is out of range for --json: it keeps that layer of every kind, and the {stack} has {_numbered('layers', layers)}",
                    hint=f"{_use('--layer', layers)}, or choose the kind with --kind",
                )
    return {"kind": kind, "layer": None if layer is None else layer - 1, "head": head}


def _json(data, report, shown, kind, layer, head, token, query, explain_head, aligned) -> dict[str, Any]:
    from tfm_cli.attention import (
        alignment,
        default_alignment_layer,
        explain,
        focus,
        head_summary,
        merge_words,
    )

    data = dict(data)  # `shown.to_dict()`, which the page and the image read as it is
    data["summary"] = head_summary(shown)
    data["alignment"] = " ".join(f"{i}-{j}" for i, j in alignment(report, *aligned))  # the --layer, --head given
    aligned_layer = default_alignment_layer(report) if aligned[0] is None else aligned[0]
    data["alignment_from"] = {"kind": "cross", "layer": aligned_layer, "head": aligned[1]}  # 0-based; head None: mean
    # the words its indices count (src_tokens are subword pieces, and a character of an unspaced script is a word
    # of its own: "東京" is two), without </s>, which no pair holds
    words = merge_words(report)
    data["src_words"], data["tgt_words"] = words.src_tokens[:-1], words.tgt_tokens[:-1]
    if token is not None:
        data["focus"] = focus(shown, kind, query)
        if explain_head:
            data["explain"] = explain(report, kind, layer, 0 if head is None else head, query)
    return data


# ---- views -------------------------------------------------------------------------------------------------------


def _header(report) -> None:
    how = "given target (teacher-forced)" if report.forced_target else "the model's translation"
    shown = _left_to_right_after if sys.stderr.isatty() else str  # the mark for a terminal: not in a log or a pipe
    info(f"source: {shown(report.source)}")
    info(f"target: {shown(report.target)}  ({how})")


def _table(title: str, columns: list[str], rows: list) -> None:
    """A table with its title also when piped (plain tables have none)."""
    if not fancy_stdout():
        print(title)
    print_table(title, columns, rows)


def _label(text: str, width: int) -> str:
    """A token as a label of at most `width` terminal cells (a CJK character takes two, a combining mark none)."""
    from rich.cells import cell_len, set_cell_size

    text = text.replace("▁", "_") if text.startswith("▁") and len(text) == 1 else text.replace("▁", "")
    if text and unicodedata.category(text[0]) in ("Mn", "Mc", "Me"):  # a piece that starts with a combining mark
        text = "◌" + text  # (a Devanagari vowel sign alone) on a dotted circle, as type specimens show them
    text = text if cell_len(text) <= width else set_cell_size(text, width - 1) + "…"
    return _left_to_right_after(text)


def _left_to_right_after(text: str) -> str:
    """`text` and a left-to-right mark (U+200E, no width) after it when it holds a right-to-left letter: a
    terminal that applies the bidirectional algorithm (Konsole, mlterm, macOS Terminal) otherwise carried the
    numbers after an Arabic or Hebrew label into its run, and showed the weights under the wrong keys (`1 قطة  ·
    51 48` as `1 48 51 · قطة`) and each key's number beside another word."""
    if any(unicodedata.bidirectional(ch) in ("R", "AL") for ch in text):
        return text + "\u200e"
    return text


def _wrapped(words: list[str], width: int, sep: str = " ", indent: str = "") -> str:
    """`words` joined by `sep` into lines of at most `width` terminal cells, by cells, not characters (textwrap
    counts a CJK character as one where the terminal gives it two: a legend of Japanese keys ran past the edge and
    the terminal broke its entries); a word wider than a line gets a line of its own."""
    from rich.cells import cell_len

    lines, line = [], ""
    for word in words:
        joined = f"{line}{sep}{word}" if line else word
        if line and cell_len(joined) > width:
            lines.append(line)
            line = indent + word
        else:
            line = joined
    return "\n".join([*lines, line])


def _render_heatmap(report, kind: str, layer: int, head: int | None, numbers: bool) -> None:
    """Queries down, keys across; keys are numbered in the header and listed below, windowed to the width."""
    from rich.cells import cell_len, set_cell_size
    from rich.text import Text

    matrix = report.matrix(kind, layer, head)
    queries, keys = report.query_tokens(kind), report.key_tokens(kind)
    what = f"{KIND_NAMES[kind]}, layer {layer + 1}, {'mean of heads' if head is None else f'head {head + 1}'}"
    # Colour where the terminal has enough of it to tell weights apart; a terminal of 8 or 16 colours (TERM=xterm)
    # drew 0.003 and 0.19 alike: it gets the shade characters, six levels, as a pipe does.
    fancy = fancy_stdout() and out.color_system in ("256", "truecolor")
    label_width = min(16, max(cell_len(_label(t, 16)) for t in queries))
    # a key's number above its column takes its digits and a space: keys 100 and on widen every column by one
    # (3-cell columns under 4-cell numbers drifted right, one cell a key, and ran past the terminal's edge)
    cell = max(4 if numbers else 3, len(str(len(keys))) + 1)
    columns = shutil.get_terminal_size((100, 24)).columns
    per_block = max(4, (columns - label_width - 6) // cell)
    print(_wrapped(f"{what} (rows: queries, columns: keys; row weights sum to 1)".split(" "), columns))
    for start in range(0, len(keys), per_block):
        block = range(start, min(len(keys), start + per_block))
        if len(keys) > per_block:
            print(f"keys {start + 1}-{block[-1] + 1} of {len(keys)}")
        print(" " * (label_width + 5) + "".join(f"{j + 1:>{cell - 1}} " for j in block))
        for i, query in enumerate(queries):
            row_label = f"{i + 1:>3} {set_cell_size(_label(query, label_width), label_width)} "  # by cells, not characters
            if fancy:
                line = Text(row_label)
                for j in block:
                    w = float(matrix[i, j])
                    shade = int(255 - 200 * w)
                    shown = f"{round(100 * w):>{cell - 1}} " if w >= 0.005 else " " * (cell - 2) + "· "  # as when piped
                    body = shown if numbers else " " * cell
                    # the ink set as well as the paper: a dark theme's light default ink vanished on the light cells
                    ink = "rgb(255,255,255)" if shade < 150 else "rgb(0,0,0)"
                    style = f"{ink} on {_paper(w, out.color_system)}" + (" bold" if w > 0.5 else "")
                    line.append(body, style=style)
                out.print(line, soft_wrap=True)
            else:
                cells = []
                for j in block:
                    w = float(matrix[i, j])
                    if numbers:
                        cells.append(f"{round(100 * w):>{cell - 1}} " if w >= 0.005 else " " * (cell - 2) + "· ")
                    else:
                        cells.append(_SHADES[min(5, int(w * 5 + 0.5))] * (cell - 1) + " ")
                print(row_label + "".join(cells))
    entries = [f"{j + 1} {_label(t, 24)}" for j, t in enumerate(keys)]
    print(_wrapped([f"keys: {entries[0]}", *entries[1:]], columns, sep="  ", indent="      "))
    if fancy and not numbers:
        print(f"colours: white 0 to {'black' if out.color_system == '256' else 'dark blue'} 1 (add --numbers for values)")
    elif not numbers:
        shades = [f"'{_SHADES[i]}' ~{i / 5:g}" for i in range(1, 6)]
        print(_wrapped([f"shades: {shades[0]}", *shades[1:-1], f"{shades[-1]} (add --numbers for values)"], columns, sep="  "))


def _paper(w: float, color_system: str | None) -> str:
    """A cell's colour for weight `w`: white to dark blue in true colour; on a terminal of 256 colours, where rich
    puts that blue on the nearest of the 6x6x6 cube's five blues (0.71 and 1.0 alike, 0.10 and 0.30 alike), white to
    black over the palette's 24 greys and white, some twenty levels."""
    shade = int(255 - 200 * w)
    if color_system != "256":
        return f"rgb({shade},{shade},255)"
    if w < 0.02:
        return "color(231)"  # the palette's white: no attention
    grey = 238 - 230 * w  # 238 (the lightest grey) to 8 (the darkest)
    return f"color({232 + max(0, min(23, round((grey - 8) / 10)))})"


def _render_focus(report, kind: str, query: int) -> None:
    from tfm_cli.attention import focus

    data = focus(report, kind, query)
    token = _label(data["query_token"], 30)
    heads = len(data["top"][0])
    rows = []
    for i, per_head in enumerate(data["top"]):
        means = data["layer_means"][i]
        best = max(range(len(means)), key=means.__getitem__)
        rows.append((
            str(i + 1), *[f"{_label(x['token'], 14)} {x['weight']:.2f}" for x in per_head],
            f"{_label(data['keys'][best], 14)} {means[best]:.2f}",
        ))
    _table(
        f"Where \"{token}\" (query {query + 1}) attends in {KIND_NAMES[kind]}: the top key of each layer and head",
        ["layer", *[f"head {h + 1}" for h in range(heads)], "mean of heads"], rows,
    )
    print("mean over heads, each layer's three strongest keys:")
    for i, means in enumerate(data["layer_means"]):
        top = sorted(range(len(means)), key=lambda j: -means[j])[:3]
        bars = "   ".join(f"{_label(data['keys'][j], 14)} {'█' * max(1, round(means[j] * 20))} {means[j]:.2f}" for j in top)
        print(f"  layer {i + 1}: {bars}")


def _steps(report, kind: str, query: int) -> dict[str, Any]:
    """--explain's numbers for one query in every layer and head of `kind`, for the page: [q·k, q·k / sqrt(d_k),
    softmax] for each key the query sees, under "layer,head" (0-based)."""
    from tfm_cli.attention import explain

    layers = report.n_layers["encoder" if kind == "encoder" else "decoder"]
    heads = {
        f"{layer},{head}": [
            [round(r["dot"], 4), round(r["scaled"], 4), round(r["weight"], 5)]
            for r in explain(report, kind, layer, head, query)["rows"]
        ]
        for layer in range(layers)
        for head in range(report.n_heads)
    }
    return {"kind": kind, "query": query, "d_k": report.d_k, "heads": heads}


def _render_explain(report, kind: str, layer: int, head: int, query: int) -> None:
    from tfm_cli.attention import explain

    data = explain(report, kind, layer, head, query)
    rows = [
        (str(r["key"] + 1), _label(r["token"], 18), f"{r['dot']:.2f}", f"{r['scaled']:.2f}", f"{r['weight']:.4f}",
         f"{r['value_norm']:.2f}", f"{r['weighted_value_norm']:.3f}")
        for r in data["rows"]
    ]
    token = _label(data["query_token"], 30)
    _table(
        f"{KIND_NAMES[kind]}, layer {layer + 1}, head {head + 1}, query {query + 1} \"{token}\": "
        f"softmax(q·k / sqrt(d_k)) with d_k = {data['d_k']}, sqrt(d_k) = {data['sqrt_d_k']:.2f}",
        ["key", "token", "q·k", "/ sqrt(d_k)", "softmax", "|v|", "|weight × v|"], rows,
    )
    best = max(data["rows"], key=lambda r: r["weight"])
    print(
        f"output = sum of weight × v over the {len(rows)} keys: |output| = {data['output_norm']:.3f}; "
        f"\"{_label(best['token'], 20)}\" takes {best['weight']:.0%} of the attention "
        f"({best['dot']:.1f} / {data['sqrt_d_k']:.2f} = {best['scaled']:.2f} before the softmax)"
    )


def _render_summary(report) -> None:
    from tfm_cli.attention import head_summary

    rows = head_summary(report)
    table = []
    for r in rows:
        if r["entropy"] is None:  # decoder self-attention of an empty translation: its one row sees only <s>
            table.append((r["kind"], r["layer"], r["head"], *["-"] * 6, "no row: the translation is empty"))
            continue
        notes = []
        if r["max_weight"] > 0.9:
            notes.append("sharp")
        if r["eos_share"] > 0.5:
            notes.append("rests on </s>")
        if r["bos_share"] > 0.5:
            notes.append("rests on <s>")
        if r["diagonal_distance"] < 0.5:
            notes.append("diagonal")
        if r["punct_share"] > 0.5:
            notes.append("punctuation")
        table.append((
            r["kind"], r["layer"], r["head"], f"{r['entropy']:.2f}", f"{r['max_weight']:.2f}", f"{r['eos_share']:.0%}", f"{r['bos_share']:.0%}",
            f"{r['punct_share']:.0%}", f"{r['diagonal_distance']:.2f}", ", ".join(notes),
        ))
    first = "the first word's first piece" if report.word_level else "the first query"
    _table(
        "Every head: mean row entropy (nats; 0 = one key), mean maximum weight, share on </s>, on <s> (decoder "
        "self-attention's first key) and on punctuation, mean distance from the diagonal (positions); decoder rows "
        f"leave out {first}, which sees only <s>",
        ["kind", "layer", "head", "entropy", "max", "</s>", "<s>", "punct", "diagonal", "notes"], table,
    )
    for kind in ("encoder", "decoder", "cross"):
        mine = [r for r in rows if r["kind"] == kind and r["entropy"] is not None]
        if not mine:
            info(f"{kind}: no row to measure (the translation is empty: its one query sees only <s>)")
            continue
        sharp = min(mine, key=lambda r: r["entropy"])
        broad = max(mine, key=lambda r: r["entropy"])
        info(
            f"{kind}: sharpest head {sharp['layer']}.{sharp['head']} (entropy {sharp['entropy']:.2f}), "
            f"broadest {broad['layer']}.{broad['head']} (entropy {broad['entropy']:.2f})"
        )


def _render_alignment(report, layer: int | None, head: int | None) -> None:
    from tfm_cli.attention import alignment, default_alignment_layer, merge_words

    words = merge_words(report)
    layer_index = default_alignment_layer(words) if layer is None else layer - 1
    pairs = alignment(report, layer_index, head)
    print(" ".join(f"{i}-{j}" for i, j in pairs))
    which = "mean of heads" if head is None else f"head {head + 1}"
    info(f"alignment (Pharaoh source-target word indices, from 0) from cross-attention layer {layer_index + 1}, {which}:")
    for i, j in pairs:
        info(f"  {words.tgt_tokens[j]}  <-  {words.src_tokens[i]}")
