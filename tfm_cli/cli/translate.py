"""`tfm translate [TEXT]`: translate one sentence, or stdin line by line; optionally score against references.

A thin face over `tfm_cli.translator.Translator`: parse options, call it, print.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import typer

from tfm_cli.cli.common import (
    DEVICE_HELP,
    StdinLines,
    check_output_file,
    check_utf8,
    device_name,
    file_path,
    given_path,
    info,
    line_count,
    names_a_file,
    print_json,
    print_table,
    progress_bar,
    reads_from_stdin,
    route_warnings,
    say_which_weights,
    stdin_lines,
    stopped_by_signals,
    typed_command,
    warn,
    write_output,
)
from tfm_cli.errors import TfmError, shell_word
from tfm_cli.precisions import TRANSLATE_PRECISIONS
from tfm_cli.scoring import AUTO, BLEU_TOKENIZERS

ENGINES = ("auto", "torch", "onnxruntime")  # as tfm_cli.translator.ENGINES (imported with torch)


def translate(
    text: str = typer.Argument(None, metavar="TEXT", help="A sentence to translate. Without it (or with -), lines are read from stdin; - at a terminal translates each line typed.", show_default=False),
    model: Path = typer.Option(None, "--model", "-m", parser=given_path, metavar="<path>", help="Run directory, .safetensors checkpoint, release or ONNX export directory (default: the most recent run under runs/).", show_default=False),
    beam: int = typer.Option(None, "--beam", "-b", min=1, help="Beam size (default: the run's recipe, 4).", show_default=False),
    alpha: float = typer.Option(None, "--alpha", callback=lambda v: _alpha(v), help="GNMT length penalty, 0 to 10 (default: the run's recipe, 0.6).", show_default=False),
    max_len: int = typer.Option(None, "--max-len", min=0, help="Output may be at most input length + this many tokens (default: the run's recipe, 50); translations cut there are counted on stderr at the end.", show_default=False),
    greedy: bool = typer.Option(False, "--greedy", help="Greedy decoding instead of beam search."),
    sample: bool = typer.Option(False, "--sample", help="Draw each token from the model's distribution instead of searching: for back-translation (sampled sources train a better model than beam-searched ones, Edunov et al. 2018) or varied translations. With --n-best K, K samples of each input, best first (by log-probability). The same --seed gives the same samples of a line (README)."),
    top_k: int = typer.Option(None, "--top-k", min=0, help="With --sample: draw from the K most probable tokens only (default: 0, all of them; 10 is Edunov et al.'s 'top10').", show_default=False),
    top_p: float = typer.Option(None, "--top-p", callback=lambda v: _top_p(v), help="With --sample: draw from the smallest set of most probable tokens whose probability reaches P, above 0 and at most 1 (nucleus sampling; default: 1, all of them).", show_default=False),
    temperature: float = typer.Option(None, "--temperature", callback=lambda v: _temperature(v), help="With --sample: divide the model's logits by this first (default: 1; below 1 draws closer to greedy search, above 1 more varied).", show_default=False),
    seed: int = typer.Option(None, "--seed", min=0, max=2**64 - 1, help="With --sample: the draws, 0 to 2^64-1 (default: 0). A line gets the same samples from the same seed, model and line number, however it is batched.", show_default=False),
    n_best: int = typer.Option(1, "--n-best", "-n", min=1, help="Print the K best translations of each input, best first, one a line: input line number TAB score TAB translation (--json: an nbest list); with --sample, K samples. A text can repeat: two hypotheses may spell it with different subword tokens (--json shows them); both are kept, as fairseq, Marian and CTranslate2 keep them. Not with --score/--reference, which score the best."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per input line: source, translation, score, log_prob, tokens, truncated, stopped (eos, or max_len: cut at the maximum output length, see --max-len; copied: a line without a letter, written as it is) (and nbest with --n-best, each with its own stopped; sentences, each with its source, for a line translated a sentence at a time)."),
    reference: list[Path] = typer.Option(None, "--reference", "-r", parser=given_path, metavar="<path>", help="Reference translations, one per input line: print BLEU and chrF instead of translations (- reads them from stdin when TEXT is given). Given again, more references: multi-reference BLEU and chrF, as sacrebleu REF1 REF2.", show_default=False),
    score: list[Path] = typer.Option(None, "--score", parser=given_path, metavar="<path>", help="Score on a TSV (source TAB reference), or give --score SRC --score REF (--score REF2 ... for more references): print BLEU and chrF (- reads one from stdin).", show_default=False),
    output: Path = typer.Option(None, "--output", parser=file_path("translations.txt"), metavar="<path>", help="When scoring, also write the translations to this file.", show_default=False),
    bleu_tokenize: str = typer.Option("auto", "--bleu-tokenize", help="When scoring, sacrebleu's BLEU tokenizer: auto (zh for Chinese references, ja-mecab and ko-mecab for Japanese and Korean where MeCab is installed, else char and 13a; char for Thai and other scripts without spaces; else 13a), 13a, intl, zh, char, ja-mecab, ko-mecab, flores101, flores200, none."),
    device: str = typer.Option("auto", "--device", callback=device_name, help=DEVICE_HELP),
    precision: str = typer.Option("auto", "--precision", help="auto (bf16 on CUDA and on CPUs with fast bf16: AMX, AMD's AVX512-BF16, Arm's BF16; else fp32), fp32, bf16, fp16 (CUDA only), or int8 (CPU only: int8 linear layers, translations close to fp32's; faster on large batches, slower than fp32 one sentence at a time on some CPUs: see tfm bench translate)."),
    min_len: int = typer.Option(None, "--min-len", min=0, help="No end of sentence before this many output tokens (default: the run's recipe, 0).", show_default=False),
    batch_tokens: int = typer.Option(None, "--batch-tokens", min=1, help="Source tokens per batch (default: the run's recipe).", show_default=False),
    engine: str = typer.Option("auto", "--engine", help="auto (onnxruntime for an ONNX export directory, else torch), torch, or onnxruntime."),
    verbatim: bool = typer.Option(None, "--verbatim/--no-verbatim", help="Give the model each line exactly as written, as fairseq, Marian and CTranslate2 do: no sentence splitting, no capitals or frames taken off, lines without a letter translated too (default: the run's recipe, decode.verbatim, off).", show_default=False),
    split_sentences: bool = typer.Option(None, "--split-sentences/--no-split-sentences", help="Translate each sentence of a line apart and join their translations on the line (default: the run's recipe, on): a model trained on sentence pairs drops all but the first sentence of a line that holds several. Breaks after . ! ? (and the full stops of Chinese, Japanese, Hindi...) before a capital or a digit, never inside quotes or after an abbreviation or initial; --no-split-sentences translates each line as one sentence. Either way, unless --verbatim, a sentence in capitals or title case or in a frame (a bullet, double quotes, brackets, emoji, markup: <b>...</b>, **...**; an address, @mention or #hashtag at its edges) is translated as an ordinary sentence, without its frame, and written back as it was, and one without a letter is written as it is (README).", show_default=False),
) -> None:
    """Translate with beam search (or greedy, or sampling), from an argument or stdin to stdout, keeping line order.

    Examples:

      tfm translate "Je suis étudiant."

      tfm translate --model runs/tiny < input.fr > output.en

      tfm translate --model exports/tiny-onnx --engine onnxruntime < input.fr

      tfm translate --precision int8 < input.fr      (CPU: int8 linear layers; batches of sentences ran 1.4-1.55x fp32 on an AMD EPYC, about 1.0-1.26x on an Intel Cascade Lake)

      tfm translate --n-best 4 --json "Il fait beau."

      tfm translate --sample --top-k 10 --seed 1 < mono.fr > synthetic.en      (back-translation: one sample a line)

      tfm translate --no-split-sentences < doc.fr      (each line whole, as one sentence)

      tfm translate --score dev.tsv            (BLEU and chrF against the TSV's second column)

      tfm translate --score test.en-zh.tsv --bleu-tokenize zh

      tfm translate --score src.fr --score ref1.en --score ref2.en     (two references a sentence)
    """
    dash = text == "-"
    if dash:  # as for cat, sacrebleu and most of the field's tools: stdin (a terminal too: typed lines)
        text = None
    reference = reference or []  # Click gives () for a multiple option not given
    _check_options(text, beam, alpha, greedy, n_best, score, reference, output, bleu_tokenize, precision, engine)
    _check_sampling(sample, greedy, beam, alpha, top_k=top_k, top_p=top_p, temperature=temperature, seed=seed)
    if verbatim and split_sentences:  # verbatim gives the model each line whole: the splitting asked for would not be done
        raise typer.BadParameter("--split-sentences has no effect with --verbatim, which gives the model each line as written", param_hint="--verbatim")
    reads_stdin = text is None and not score
    if reads_stdin and sys.stdin is None:  # started with stdin closed (<&-)
        raise TfmError("standard input is closed: there is nothing to translate", hint="give a sentence, or pipe lines into stdin")
    if reads_stdin and not dash and sys.stdin.isatty():  # said before the model loads: reading would wait, silently
        if reference:  # it waited for sources typed at the terminal, without a word
            raise typer.BadParameter(
                "--reference scores the sentences read from stdin, and stdin is the terminal: pipe them in "
                f"({typed_command('translate')} < src.fr), or give - to type them (Ctrl-D ends)",
                param_hint="--reference",
            )
        raise typer.BadParameter(
            f"give a sentence, or pipe lines into stdin (e.g. {typed_command('translate')} < input.txt), or give - to type them, "
            "one a line (Ctrl-D ends)",
            param_hint="TEXT",
        )
    for ref in reference if reads_stdin else ():
        if reads_from_stdin(ref):  # /dev/stdin of a `< src` file opens that file again: sources scored against themselves
            raise TfmError(
                f"--reference {ref} is the standard input the sentences to translate are read from",
                hint="give the references a file of their own, e.g. tfm translate --reference ref.en < src.fr",
            )
    for option, files in (("--score", score or []), ("--reference", reference)):
        # `--score -`, as sacrebleu and `tfm translate -` read stdin: it said "--score - does not exist"
        if sum(str(p) == "-" for p in files) > 1:
            raise typer.BadParameter("stdin can be read once: give - to one of them, and files to the others", param_hint=option)
    _check_reference_files(score or [], reference)
    score = [_stdin_file(p, "--score") for p in score or []]
    if text is not None:  # with sources on stdin, a - was refused above
        reference = [_stdin_file(p, "--reference") for p in reference]
    if output is not None:  # before the model loads and the sentences are translated
        check_output_file(output, "--output", inputs=[*score, *reference], reads_stdin=reads_stdin)

    if text is not None:
        if names_a_file(text):  # `tfm translate input.fr` translated the file's name
            raise typer.BadParameter(
                f"{text} is a file, not a sentence: to translate its lines, give them on stdin "
                f"({typed_command('translate', drop=text)} < {shell_word(text)})",
                param_hint="TEXT",
            )
        text = check_utf8(text, "the sentence to translate")
        if (lines := line_count(text)) > 1:  # `tfm translate "$(cat input.fr)"`: glued into one sentence, silently
            raise typer.BadParameter(
                f"TEXT holds {lines} lines, and is one sentence: to translate them one a line, pipe them in "
                f"({typed_command('translate', drop=text)} < input.fr); to translate them as one sentence, join them "
                "(tr '\\r\\n' '  ')",
                param_hint="TEXT",
            )

    written = _Written()
    written.scoring = bool(score or reference)
    # Ctrl-C, SIGTERM (kill, a scheduler) and SIGHUP end with a line saying what was written: the stream's
    # translations are written as they come (a window of about two batches at a time), and those of a window's
    # first lines already translated when the signal came are written before it ends (Translator.translate_stream),
    # so `tfm translate < big > out` stopped after an hour keeps that hour's work.
    with stopped_by_signals(lambda: f"tfm translate: interrupted; {written.say(output)}"):
        from tfm_cli.translator import Translator

        with route_warnings():  # a final model older than the run's newest checkpoint is said
            translator = Translator.load(model, engine=engine, device=device, precision=precision)
        say_which_weights(model, Path(translator.path))
        if output is not None:  # again, now that the model's own files are known: they are inputs too
            check_output_file(
                output, "--output", inputs=[*score, *reference, *translator.files], reads_stdin=reads_stdin
            )
        if beam is None and n_best > translator.settings.beam and not greedy and not sample:  # a --beam given was checked above
            raise typer.BadParameter(
                f"--n-best {n_best} cannot exceed the model's beam size {translator.settings.beam}: widen the beam with it "
                f"(--beam {n_best} --n-best {n_best})",
                param_hint="--n-best",
            )
        settings = dict(
            beam=beam, alpha=alpha, max_len_offset=max_len, min_len=min_len, max_tokens=batch_tokens, greedy=greedy,
            n_best=n_best, split_sentences=split_sentences, verbatim=verbatim, sample=sample, top_k=top_k, top_p=top_p,
            temperature=temperature, seed=seed,
        )
        cuts, broken = _Cuts(translator, max_len, min_len), _Broken()
        from tfm_cli.translator import InputTruncatedWarning

        with route_warnings(at_most={InputTruncatedWarning: TRUNCATED_SHOWN}):
            if score or reference:
                _score(translator, settings, text, score, reference, output, json_out, bleu_tokenize, cuts, broken)
                cuts.say(json_marks=False)  # scoring's --json is the report, not the translations
                broken.say(json_marks=False)
                return
            if text is not None:
                result = translator.translate(text, **settings)
                _emit(result, json_out, n_best, line=1)
                written.lines = 1
                cuts.count(result, 1)
                broken.count(result, 1)
            else:
                _translate_stdin(translator, settings, json_out, n_best, written, cuts, broken)
            cuts.say(json_marks=not json_out)
            broken.say()


def _check_sampling(sample: bool, greedy: bool, beam: int | None, alpha: float | None, **knobs: Any) -> None:
    """--sample's combinations: with a way of searching, refused; its settings without it, refused (they were
    not ignored in silence)."""
    if sample and greedy:
        raise typer.BadParameter("--sample and --greedy are two ways to choose each token: give one", param_hint="--sample")
    if sample and beam is not None:
        raise typer.BadParameter(f"--sample draws each token, without a beam; drop --beam {beam} (or --sample)", param_hint="--beam")
    if sample and alpha is not None:
        raise typer.BadParameter(
            f"--sample scores each sample by its log-probability, without a length penalty; drop --alpha {alpha:g} (or --sample)",
            param_hint="--alpha",
        )
    for name, value in knobs.items():
        if value is not None and not sample:
            option = "--" + name.replace("_", "-")
            raise typer.BadParameter(f"{option} is for sampling: add --sample, or drop {option}", param_hint=option)


def _top_p(value: float | None) -> float | None:
    if value is not None and not 0 < value <= 1:  # (NaN too)
        raise typer.BadParameter(f"{value!r} is not above 0 and at most 1 (1: every token)")
    return value


def _temperature(value: float | None) -> float | None:
    if value is not None and not 0 < value < float("inf"):  # (NaN too)
        raise typer.BadParameter(f"{value!r} is not a number above 0 (1: the model's own distribution)")
    return value


def _say_empty(sources: list[str], streams: list[list[str]], what: str) -> None:
    """Warn of empty references and empty sources among the lines scored (`source<TAB>` in a TSV, a blank line in
    the middle of a file): sacrebleu scores them as they are, each translation of a source against nothing, or
    nothing translated against a reference, where a line was most likely lost; they were scored without a word."""
    for kind, lines in (("references", [n for n, refs in enumerate(zip(*streams, strict=True), 1) if any(not r.strip() for r in refs)]),
                        ("sources", [n for n, src in enumerate(sources, 1) if not src.strip()])):
        if lines:
            shown = ", ".join(map(str, lines[:5])) + (", ..." if len(lines) > 5 else "")
            warn(f"{what}: {len(lines):,} of {len(sources):,} {kind} are empty (line{'s' if len(lines) > 1 else ''} {shown}), "
                 "scored as they are: a line lost from the file?")


def _check_reference_files(score: list[Path], reference: list[Path]) -> None:
    """Refuse references that are the source file (`--score test.fr --score test.fr`: the translations scored
    against their sources, exit 0) or one file given twice (sacrebleu counted it as two references, `nrefs:2`)."""
    from tfm_cli.corpus import same_file

    refs = [("--score", p) for p in score[1:]] + [("--reference", p) for p in reference]
    for option, ref in refs:
        if score and str(ref) != "-" and same_file(score[0], ref):
            raise TfmError(
                f"{option} {ref} is the source file ({score[0]}): the translations would be scored against their sources",
                hint="give the references a file of their own: --score SRC --score REF",
            )
    for i, (option, ref) in enumerate(refs):
        if str(ref) != "-" and any(str(other) != "-" and same_file(ref, other) for _, other in refs[:i]):
            raise TfmError(
                f"{option} {ref} is given twice as references: sacrebleu would count it as two references",
                hint="give each reference file once",
            )


def _check_options(text, beam, alpha, greedy, n_best, score, reference, output, bleu_tokenize, precision, engine) -> None:
    """The options' combinations, refused as usage errors before the model loads (exit status 2)."""
    if greedy and n_best > 1:
        raise typer.BadParameter("--n-best needs beam search or --sample; drop --greedy", param_hint="--n-best")
    if greedy and beam is not None:
        raise typer.BadParameter(f"--greedy decodes without a beam; drop --beam {beam} (or --greedy)", param_hint="--beam")
    if beam is not None and n_best > beam:
        raise typer.BadParameter(f"--n-best {n_best} cannot exceed --beam {beam}", param_hint="--n-best")
    if score and (text is not None or reference):
        extra = " and ".join(w for w, v in (("TEXT", text), ("--reference", reference or None)) if v is not None)
        raise typer.BadParameter(f"--score reads sources and references from its file(s); drop {extra}", param_hint="--score")
    if greedy and alpha is not None:  # ignored without a word: greedy search ranks no hypotheses by length
        raise typer.BadParameter(f"--greedy has no length penalty; drop --alpha {alpha:g} (or --greedy)", param_hint="--alpha")
    if n_best > 1 and (score or reference):  # scored the best and wrote only it to --output, silently
        raise typer.BadParameter(
            f"scoring (--score, --reference) scores the best translation of each input and --output writes only it; "
            f"drop --n-best {n_best}, or translate without scoring to print {n_best} hypotheses an input",
            param_hint="--n-best",
        )
    if output is not None and not (score or reference):
        raise typer.BadParameter("--output is for scoring runs; redirect stdout otherwise", param_hint="--output")
    if output is not None and str(output) == "-":  # it wrote a file named '-' (elsewhere '-' is stdin or stdout)
        raise typer.BadParameter("--output - would write a file named '-': the scores take stdout; give a file name "
                                 "(e.g. --output translations.txt)", param_hint="--output")
    if bleu_tokenize not in BLEU_TOKENIZERS:
        raise typer.BadParameter(f"{bleu_tokenize!r} is not one of: {', '.join(BLEU_TOKENIZERS)}", param_hint="--bleu-tokenize")
    if bleu_tokenize != AUTO and not (score or reference):
        raise typer.BadParameter("--bleu-tokenize is for scoring (--score or --reference)", param_hint="--bleu-tokenize")
    if precision not in TRANSLATE_PRECISIONS:
        raise typer.BadParameter(f"{precision!r} is not one of: {', '.join(TRANSLATE_PRECISIONS)}", param_hint="--precision")
    if engine not in ENGINES:  # (a Literal option said "Value error, 'onnx' is not one of ...", a validator's words)
        raise typer.BadParameter(f"{engine!r} is not one of: {', '.join(ENGINES)}", param_hint="--engine")


def _translate_stdin(
    translator, settings: dict[str, Any], json_out: bool, n_best: int, written: _Written, cuts: _Cuts, broken: _Broken
) -> None:
    """stdin's lines to stdout in order, each result written and flushed as it comes."""
    if sys.stdin.isatty():  # `tfm translate -` at a terminal: each line typed is translated when Enter is pressed
        info("type a sentence and press Enter to translate it; Ctrl-D ends")
    # A live bar only when the translations go to a file and the lines do not come from the keyboard: at a
    # terminal the translations are the progress, and a bar redrawn on the typing line erased what was typed.
    typed = sys.stdin.isatty() or sys.stdout.isatty()
    bar = progress_bar("translate", total=None) if not typed else contextlib.nullcontext()
    # What has been read is translated whenever reading on would wait (StdinLines.ready), and each result is
    # flushed: a co-process that writes a line and waits for its translation gets it, as `tail -f` does; a
    # file piped in is all there, so it is still translated in chunks (translator.CHUNK_LINES lines).
    if StdinLines.usable():
        lines: Any = StdinLines(typed_command("translate"))
        ready = lines.ready
    else:  # no select() on this stdin (Windows): whole chunks, or the end of the input
        lines, ready = stdin_lines(typed_command("translate")), None
    with bar as advance:
        results = translator.translate_stream(lines, progress=advance, ready=ready, **settings)
        for line_no, result in enumerate(results, start=1):
            _emit(result, json_out, n_best, line_no)
            sys.stdout.flush()
            written.lines = line_no
            cuts.count(result, line_no)
            broken.count(result, line_no)


class _Written:
    """How far an interrupted `tfm translate` got, for the line it ends with."""

    def __init__(self) -> None:
        self.lines = 0  # the input lines whose translations were written to stdout
        self.scoring = False

    def say(self, output: Path | None) -> str:
        if self.scoring:  # the scores (and --output, written whole) come once everything is translated
            kept = f"; --output {output} was not written (a file there is as it was)" if output is not None else ""
            return f"nothing was scored{kept}"
        if not self.lines:
            return "no translation was finished before it"
        if self.lines == 1:
            return "the translation of input line 1 was written"
        return f"the translations of input lines 1-{self.lines} were written"


TRUNCATED_SHOWN = 10  # inputs cut to the model's length, said one by one; the rest counted in one line at the end


class _Cuts:
    """The translations cut at the maximum output length (the search ran out of steps before </s>), said once on
    stderr when the command ends, counted, as Marian and fairseq warn: each line of a cut stream looked like any
    other, and `--json`'s "stopped": "max_len" was the only trace. With --n-best, the best hypothesis counts."""

    def __init__(self, translator, max_len: int | None, min_len: int | None) -> None:
        self.offset = max_len if max_len is not None else translator.settings.max_len_offset
        self.min_len = min_len if min_len is not None else translator.settings.min_len
        self.limit = translator.max_source_tokens  # the model's own bound: max_positions - 1 output tokens
        self.total, self.lines, self.at_limit, self.by_min_len = 0, [], 0, 0

    def count(self, result, line: int) -> None:
        self.total += 1
        if result.stopped == "max_len":
            self.lines.append(line)
            self.at_limit += len(result.tokens) >= self.limit
            # the end of sentence was forbidden up to the maximum: the cut is min_len's doing, not a short limit's
            self.by_min_len += len(result.tokens) <= self.min_len

    def say(self, json_marks: bool = True) -> None:
        if not self.lines:
            return
        n = len(self.lines)
        what = _which(self.lines, self.total, "was", "were")
        model_limit = f"the model's limit of {self.limit} tokens (model.max_positions - 1), which --max-len cannot raise"
        if self.by_min_len == n:  # raising --max-len would only let them run on longer
            # (the maximum is the model's own limit where --min-len reaches past it: "input tokens + 100" was said)
            cap = f"the model's limit of {self.limit} tokens" if self.at_limit == n else f"input tokens + {self.offset}"
            warn(
                f"{what} cut at the maximum output length ({cap}) before the model could end "
                f"{'it' if n == 1 else 'them'}: --min-len {self.min_len} forbids the end of sentence until then; lower "
                "--min-len (the recipe's decode.min_len) below the output length you expect"
            )
            return
        if self.at_limit == n:  # the position table ends there: a longer --max-len changes nothing
            where, advice = model_limit, "split such inputs"
        else:
            where = f"input tokens + {self.offset}" + (f"; {self.at_limit} at {model_limit}" if self.at_limit else "")
            advice = "raise --max-len (the recipe's decode.max_len_offset), or the model is undertrained"
        marks = ' (--json marks each "stopped": "max_len")' if json_marks else ""
        warn(f"{what} cut at the maximum output length ({where}) before the model ended {'it' if n == 1 else 'them'}: likely incomplete; {advice}{marks}")


def _which(lines: list[int], total: int, verb: str, verbs: str, shown: int = 5) -> str:
    """The translations a warning is about, with its verb: "the translation was" (one input), "1 of 9
    translations (line 4) was", "3 of 9 translations (lines 1, 4, 7) were" (the first `shown` line numbers)."""
    if total == 1:
        return f"the translation {verb}"
    n = len(lines)
    named = ", ".join(map(str, lines[:shown])) + (", …" if n > shown else "")
    return f"{n} of {total} translations (line{'s' if n > 1 else ''} {named}) {verbs if n > 1 else verb}"


class _Broken:
    """The translations holding byte tokens that make no UTF-8 character (shown as U+FFFD), those left empty for
    an input that is not, and those that leave out a number of their source, said once at the end: a model that
    spells a script byte by byte (a vocabulary too small for it, or a reused tokenizer that lacks it) can emit a
    character's bytes cut short or out of order, a model can end a sentence at once (an input unlike its training
    data), and one that reads numbers as a placeholder can write fewer placeholders than the sentence has numbers
    (`Translation.numbers_left_out`): each line looked like any other."""

    def __init__(self) -> None:
        self.total, self.lines, self.empty = 0, [], []
        self.left_out: list[int] = []  # lines
        self.numbers: list[str] = []  # the numbers those lines left out
        self.several = False  # one of those lines' sentences had other numbers than those left out

    def count(self, result, line: int) -> None:
        from tfm_cli.sentences import count_numbers, without_controls
        from tfm_cli.tokenizer import broken_characters

        self.total += 1
        if broken_characters(result.tokens):
            self.lines.append(line)
        if not result.text and any(c.isalnum() for c in without_controls(result.source)):  # ended at once (an input
            # without a letter or digit, blank, of zero-width characters or of a terminal's escape codes alone, is left
            # empty, as documented; one written as it is is not empty)
            self.empty.append(line)
        if result.numbers_left_out:
            self.left_out.append(line)
            self.numbers.extend(result.numbers_left_out)
            # a sentence of several numbers: the one left out may be another, and one stands in its place
            self.several = self.several or any(
                0 < len(s.numbers_left_out) < count_numbers(s.source) for s in result.sentences
            )

    def say(self, json_marks: bool = True) -> None:
        if self.left_out:
            from tfm_cli.sentences import left_out_words

            n = len(self.numbers)
            shown = ", ".join(self.numbers[:5]) + (", …" if n > 5 else "")
            one = len(self.left_out) == 1
            word, words = left_out_words(self.numbers)
            warn(
                f"{_which(self.left_out, self.total, 'leaves', 'leave')} out {f'a {word}' if n == 1 else f'{n} {words}'} "
                f"of {'its source' if one else 'their sources'} ({shown}): the model wrote fewer "
                + ("number placeholders than the sentence has numbers" if word == "number" else "placeholders than the sentence has numbers and addresses")
                + (", which fill them in order, so one may stand in the place of the one left out" if self.several else "")
                + f"; check {'it' if one else 'those lines'}"
                + (' (--json gives each line\'s "numbers_left_out")' if json_marks else "")
            )
        if self.empty:
            warn(
                f"{_which(self.empty, self.total, 'is', 'are')} empty for an input that is not: the model ended "
                "the sentence at once (an input unlike its training data?); --min-len 1 asks for at least one token"
            )
        if not self.lines:
            return
        warn(
            f"{_which(self.lines, self.total, 'holds', 'hold')} byte tokens that make no UTF-8 character, shown as U+FFFD (\ufffd): the model spells characters "
            "byte by byte where its vocabulary has no piece for them; a larger tokenizer.vocab_size, a tokenizer "
            "trained on this language, or more training"
        )


def _stdin_file(path: Path, option: str) -> Path:
    """`-` as the file that reads standard input (/dev/stdin); any other path as it is."""
    if str(path) != "-":
        return path
    if sys.stdin is None:
        raise TfmError(f"{option} - reads standard input, and it is closed", hint=f"give {option} a file")
    if sys.stdin.isatty():  # reading would wait for lines typed at the terminal, without a word
        raise typer.BadParameter(
            f"- reads standard input, and it is the terminal: pipe the file in ({typed_command('translate')} < FILE)",
            param_hint=option,
        )
    if not Path("/dev/stdin").exists():  # Windows
        raise TfmError(f"{option} - (standard input) cannot be read as a file here", hint=f"give {option} a file")
    return Path("/dev/stdin")


def _reference_lines(path: Path, option: str, sources: list[str], counted: str) -> list[str]:
    """The lines of one reference file, one per source sentence (blank lines at the end of either not counted)."""
    from tfm_cli.corpus import read_lines

    lines = read_lines(path, option=option, keep_bom=True)  # as sacrebleu reads it, for the scores as written
    if len(lines) != len(sources):
        raise TfmError(
            f"{_named(path)} has {len(lines)} line{'' if len(lines) == 1 else 's'} but {counted} {len(sources)} (blank lines at the end of either are not counted)",
            hint="give one reference line per input line",
        )
    return lines


def _named(path: Path) -> str:
    """A scored file as the report names it: `-` (read as /dev/stdin) is "stdin"."""
    return "stdin" if str(path) == "/dev/stdin" else str(path)


def _alpha(value: float | None) -> float | None:
    """--alpha between 0 and 10 (nan and inf included in the refusal: Click's range said 'must be <= 10' of nan)."""
    from tfm_cli.recipe import MAX_ALPHA

    if value is not None and not 0 <= value <= MAX_ALPHA:
        raise typer.BadParameter(f"{value:g} is not a number from 0 to {MAX_ALPHA:g} (the paper uses 0.6)")
    return value


def _emit(result, json_out: bool, n_best: int, line: int) -> None:
    if json_out:
        record = result.to_dict(nbest=n_best > 1)
        entries = [record, *record.get("nbest", [])]
        for h in entries + [s for entry in entries for s in entry.get("sentences", [])]:  # (a split line's sentences)
            h["score"], h["log_prob"] = round(h["score"], 4), round(h["log_prob"], 4)
        print_json(record)
    elif n_best > 1:
        for h in result.nbest:
            sys.stdout.write(f"{line}\t{h.score:.4f}\t{h.text}\n")
    else:
        sys.stdout.write(result.text + "\n")


def _score(
    translator, settings: dict[str, Any], text, score, reference, output, json_out: bool, bleu_tokenize: str,
    cuts: _Cuts, broken: _Broken,
) -> None:
    """Read sources and references, then print the Translator's corpus BLEU/chrF (sacrebleu)."""
    from tfm_cli.corpus import TsvColumns, read_pairs

    if score:
        spec = str(score[0]) if len(score) == 1 else [str(p) for p in score[:2]]
        columns = TsvColumns()  # a tab inside a reference cut it short, and the score was of the cut one, unsaid
        pairs = [(s, t) for _, s, t in read_pairs(spec, once=True, option="--score", columns=columns, target_bom=True)]
        if warning := columns.warning():
            warn(f"--score {warning}")
        sources, what = [s for s, _ in pairs], " ".join(map(_named, score))
        reference_files = [_named(score[0] if len(score) == 1 else score[1]), *map(_named, score[2:])]  # a TSV holds both
        streams = [[t for _, t in pairs]]
        if len(score) > 1:  # blank lines at the end of both files, as read_lines drops them (not scored, not said)
            while sources and not sources[-1] and not streams[0][-1]:
                sources.pop()
                streams[0].pop()
        if len(score) > 2:  # more references: one line per source each, as the second file has
            streams += [_reference_lines(path, "--score", sources, f"{_named(score[0])} has") for path in score[2:]]
        files = {"sources": _named(score[0]), "references": reference_files}
    else:
        sources = [text] if text is not None else [line.rstrip("\r\n") for line in stdin_lines(typed_command("translate"))]
        while sources and not sources[-1]:  # blank lines at the end, as read_lines drops the references'
            sources.pop()
        streams = [_reference_lines(path, "--reference", sources, "the input has") for path in reference]
        what = " ".join(map(_named, reference))
        files = {"sources": "TEXT" if text is not None else "stdin", "references": [_named(p) for p in reference]}
    _say_empty(sources, streams, what)
    references = streams[0] if len(streams) == 1 else [list(refs) for refs in zip(*streams, strict=True)]
    if len(streams) == 1:  # one file: named as before (a string); several: a list
        files["references"] = files["references"][0]
    texts: list[str] = []  # for --output: the translations' text, not the translations (some 5 KB a line)
    count = [0]

    def each(translation) -> None:
        count[0] += 1
        cuts.count(translation, count[0])
        broken.count(translation, count[0])
        if output is not None:
            texts.append(translation.text)

    if bleu_tokenize == AUTO:  # a choice that is not sacrebleu's own (MeCab missing) is said, as training says it
        from tfm_cli.scoring import bleu_tokenize_for, reference_texts

        chosen, why = bleu_tokenize_for(reference_texts(references))
        if "needs MeCab" in why:
            warn(f"BLEU tokenize={chosen}: {why}")
    with progress_bar("translate", total=len(sources)) as advance:
        report = translator.score(sources, references, bleu_tokenize, progress=advance, on_translation=each,
                                  keep_translations=False, **settings)
    if output is not None:  # checked to be possible before the work; written whole or not at all
        text = "".join(t + "\n" for t in texts)
        write_output(output, "--output", lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    report = {**files, "model": str(translator.path), **report}
    if json_out:
        print_json(report)
        return
    print_table(
        f"{translator.path} on {what}",
        ["metric", "score"],
        [("BLEU", report["bleu"]), ("chrF", report["chrf"]), ("sentences", len(sources))],
    )
    info(f"sacrebleu: {report['bleu_signature']} | {report['chrf_signature']}")
    if report["lines_split"]:  # a score to compare with a toolkit that translates lines whole should know
        info(
            f"{report['lines_split']:,} of the {len(sources):,} sources held several sentences and were translated a sentence at a "
            "time (--no-split-sentences translates each whole)"
        )
    if (plain := report.get("as_written")) is not None:
        info(
            f"{plain['references_changed']:,} of the {len(sources) * len(streams):,} references changed when normalised as the "
            f"translations are (NFC, spacing, ’ as ', a byte-order mark dropped); against the references as written, as sacrebleu scores "
            f"the {'files' if len(streams) > 1 else 'file'}: BLEU {plain['bleu']}, chrF {plain['chrf']}"
        )
