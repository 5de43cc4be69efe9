"""`tfm translate [TEXT]`: translate one sentence, or stdin line by line; optionally score against references."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from tfm_cli.cli.common import DEVICE_HELP, err, fancy_stderr, info, print_json, print_table, warn
from tfm_cli.errors import TfmError

CHUNK_LINES = 2000  # stdin is translated in chunks of this many lines, so huge inputs stream


def translate(
    text: str = typer.Argument(None, help="A sentence to translate. Without it, lines are read from stdin.", show_default=False),
    model: Path = typer.Option(None, "--model", "-m", help="Run directory or .safetensors checkpoint (default: the most recent run under runs/).", show_default=False),
    beam: int = typer.Option(None, "--beam", "-b", min=1, help="Beam size (default: the run's recipe, 4).", show_default=False),
    alpha: float = typer.Option(None, "--alpha", min=0.0, help="GNMT length penalty (default: the run's recipe, 0.6).", show_default=False),
    max_len: int = typer.Option(None, "--max-len", min=0, help="Output may be at most input length + this many tokens (default: 50).", show_default=False),
    greedy: bool = typer.Option(False, "--greedy", help="Greedy decoding instead of beam search."),
    n_best: int = typer.Option(1, "--n-best", "-n", min=1, help="Print the K best translations of each input, with scores."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per input line: source, translation, score, tokens."),
    reference: Path = typer.Option(None, "--reference", "-r", help="Reference translations, one per input line: print BLEU and chrF instead of translations.", show_default=False),
    score: list[Path] = typer.Option(None, "--score", help="Score on a TSV (source TAB reference), or give --score SRC --score REF: print BLEU and chrF.", show_default=False),
    output: Path = typer.Option(None, "--output", help="When scoring, also write the translations to this file.", show_default=False),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    batch_tokens: int = typer.Option(None, "--batch-tokens", min=1, help="Source tokens per batch (default: the run's recipe).", show_default=False),
) -> None:
    """Translate with beam search (or greedy), from an argument or stdin to stdout, keeping line order.

    Examples:

      tfm translate "Je suis étudiant."

      tfm translate --model runs/tiny < input.fr > output.en

      tfm translate --n-best 4 --json "Il fait beau."

      tfm translate --score dev.tsv            (BLEU and chrF against the TSV's second column)
    """
    if greedy and n_best > 1:
        raise typer.BadParameter("--n-best needs beam search; drop --greedy", param_hint="--n-best")
    if beam is not None and n_best > beam:
        raise typer.BadParameter(f"--n-best {n_best} cannot exceed --beam {beam}", param_hint="--n-best")
    if score and (text is not None or reference is not None):
        raise typer.BadParameter("--score reads sources and references from its file(s); drop TEXT and --reference", param_hint="--score")
    if score and len(score) > 2:
        raise typer.BadParameter("give one TSV, or a source file and a reference file", param_hint="--score")
    if output is not None and not (score or reference):
        raise typer.BadParameter("--output is for scoring runs; redirect stdout otherwise", param_hint="--output")

    from tfm_cli.checkpoint import load_model
    from tfm_cli.runtime import resolve_device

    torch_device = resolve_device(device)
    loaded = load_model(model, torch_device)
    if model is None:
        info(f"using {loaded.path} (the most recent run; choose another with --model)")
    decode = _decode_settings(loaded.run_dir, beam, alpha, max_len, batch_tokens)
    if n_best > decode["beam"] and not greedy:
        raise typer.BadParameter(f"--n-best {n_best} cannot exceed the beam size {decode['beam']}", param_hint="--n-best")
    translator = _Translator(loaded, decode, greedy, n_best)

    if score or reference is not None:
        _score(translator, text, score, reference, output, json_out)
        return
    if text is not None:
        _emit(translator.translate([text], first_line=1)[0], json_out, n_best, line=1)
        return
    if sys.stdin.isatty():
        raise typer.BadParameter("give a sentence, or pipe lines into stdin (e.g. tfm translate < input.txt)", param_hint="TEXT")
    line_no = 0
    for chunk in _stdin_chunks():
        for result in translator.translate(chunk, first_line=line_no + 1):
            line_no += 1
            _emit(result, json_out, n_best, line_no)
        sys.stdout.flush()


def _decode_settings(run_dir: Path, beam, alpha, max_len, batch_tokens) -> dict[str, Any]:
    """Command-line values, else the run's recipe (decode section), else the paper's defaults."""
    settings = {"beam": 4, "alpha": 0.6, "max_len_offset": 50, "max_tokens": 8000}
    recipe_file = run_dir / "recipe.yaml"
    if recipe_file.is_file():
        from tfm_cli.recipe import load_recipe

        d = load_recipe(recipe_file).decode
        settings = {"beam": d.beam, "alpha": d.alpha, "max_len_offset": d.max_len_offset, "max_tokens": d.max_tokens}
    given = {"beam": beam, "alpha": alpha, "max_len_offset": max_len, "max_tokens": batch_tokens}
    settings.update({k: v for k, v in given.items() if v is not None})
    return settings


class _Translator:
    """Text in, hypotheses out: tokenise, cut what the model cannot take, decode, detokenise."""

    def __init__(self, loaded, decode: dict[str, Any], greedy: bool, n_best: int) -> None:
        self.loaded, self.decode, self.greedy, self.n_best = loaded, decode, greedy, n_best
        self.tokenizer = loaded.tokenizer
        self.limit = loaded.model.config.max_positions - 1  # room for the EOS appended to every source

    def translate(self, lines: list[str], first_line: int) -> list[dict[str, Any]]:
        from tfm_cli.decoding import translate_ids

        ids = self.tokenizer.encode_batch(lines)
        for i, seq in enumerate(ids):
            if len(seq) > self.limit:
                warn(
                    f"input line {first_line + i} has {len(seq)} tokens; the model takes at most {self.limit}, "
                    f"so only its first {self.limit} tokens were translated"
                )
                ids[i] = seq[: self.limit]
        todo = [i for i, seq in enumerate(ids) if seq]  # empty lines give empty lines, without the model
        progress = _progress(len(todo)) if len(todo) >= 200 and fancy_stderr() else None
        hyps = translate_ids(
            self.loaded.model, [ids[i] for i in todo], beam_size=self.decode["beam"], alpha=self.decode["alpha"],
            max_len_offset=self.decode["max_len_offset"], n_best=self.n_best, max_tokens=self.decode["max_tokens"],
            greedy=self.greedy, on_batch=progress.advance if progress else None,
        )
        if progress:
            progress.close()
        by_line: dict[int, list] = dict(zip(todo, hyps, strict=True))
        results = []
        for i, line in enumerate(lines):
            nbest = [
                {"translation": self.tokenizer.decode(h.tokens), "score": round(h.score, 4),
                 "tokens": [self.tokenizer.id_to_piece(t) for t in h.tokens]}
                for h in by_line.get(i, [])
            ]
            if not nbest:  # an empty line: as many empty hypotheses as asked for, so output stays aligned
                nbest = [{"translation": "", "score": 0.0, "tokens": []}] * self.n_best
            results.append({"source": line, **nbest[0], "nbest": nbest})
        return results


def _emit(result: dict[str, Any], json_out: bool, n_best: int, line: int) -> None:
    if json_out:
        record = {k: result[k] for k in ("source", "translation", "score", "tokens")}
        if n_best > 1:
            record["nbest"] = result["nbest"]
        print_json(record)
    elif n_best > 1:
        for h in result["nbest"]:
            sys.stdout.write(f"{line}\t{h['score']:.4f}\t{h['translation']}\n")
    else:
        sys.stdout.write(result["translation"] + "\n")


def _stdin_chunks() -> Iterator[list[str]]:
    """Lines of stdin in chunks, decoded strictly as UTF-8 so a bad byte is reported with its line."""
    chunk: list[str] = []
    for number, raw in enumerate(sys.stdin.buffer, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TfmError(
                f"stdin line {number}: invalid UTF-8 at byte {e.start + 1}",
                hint="re-encode the input as UTF-8, e.g. iconv -f latin1 -t utf-8",
            ) from None
        chunk.append(line.rstrip("\r\n"))
        if len(chunk) >= CHUNK_LINES:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _score(translator: _Translator, text, score, reference, output, json_out: bool) -> None:
    """Translate sources and print corpus BLEU/chrF against the references (sacrebleu)."""
    from tfm_cli.data import read_lines, read_pairs
    from tfm_cli.training import score_translations

    if score:
        spec = str(score[0]) if len(score) == 1 else [str(p) for p in score]
        pairs = [(s, t) for _, s, t in read_pairs(spec)]
        sources, references, what = [s for s, _ in pairs], [t for _, t in pairs], " ".join(map(str, score))
    else:
        sources = [text] if text is not None else [line for chunk in _stdin_chunks() for line in chunk]
        references = read_lines(reference)
        what = str(reference)
        if len(references) != len(sources):
            raise TfmError(
                f"{reference} has {len(references)} lines but the input has {len(sources)}",
                hint="give one reference line per input line",
            )
    results = translator.translate(sources, first_line=1)
    hypotheses = [r["translation"] for r in results]
    if output is not None:
        output.write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
    metrics = score_translations(hypotheses, references)
    report = {"references": what, "sentences": len(sources), "model": str(translator.loaded.path), **metrics}
    if json_out:
        print_json(report)
        return
    print_table(
        f"{translator.loaded.path} on {what}",
        ["metric", "score"],
        [("BLEU", metrics["bleu"]), ("chrF", metrics["chrf"]), ("sentences", len(sources))],
    )
    info(f"sacrebleu: {metrics['bleu_signature']} | {metrics['chrf_signature']}")


class _progress:
    """A rich progress bar on stderr over sentences."""

    def __init__(self, total: int) -> None:
        from rich.progress import Progress

        self.bar = Progress(console=err, transient=True)
        self.bar.start()
        self.task = self.bar.add_task("translate", total=total)

    def advance(self, n: int) -> None:
        self.bar.advance(self.task, n)

    def close(self) -> None:
        self.bar.stop()
