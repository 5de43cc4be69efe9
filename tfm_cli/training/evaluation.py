"""Evaluation: dev loss and perplexity, BLEU and chrF of beam-search output (sacrebleu), and the choice of the
run's final model between the average of the last checkpoints (the paper, section 6.1) and the last one."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tfm_cli.checkpoint import average_checkpoints, load_state, read_weights, save_weights
from tfm_cli.corpus import TsvColumns, head_for, read_pairs
from tfm_cli.data import make_batch, token_batches
from tfm_cli.decoding import translate_ids
from tfm_cli.errors import TfmError
from tfm_cli.model import Transformer
from tfm_cli.monitor import append_metrics, perplexity
from tfm_cli.recipe import (
    Recipe,
)
from tfm_cli.runs import FINAL, checkpoint_steps
from tfm_cli.scoring import AUTO, bleu_metric, bleu_tokenize_for, score_translations
from tfm_cli.sentences import Part, join_sentences, to_translate, with_number_placeholders
from tfm_cli.tokenizer import Tokenizer
from tfm_cli.training.compiling import compiler_errors
from tfm_cli.training.loss import output_loss


@dataclass
class DevSet:
    """The dev corpus: sources, BLEU/chrF references (normalised as translations are), token ids for the loss,
    and the BLEU tokenizer every evaluation of the run uses (`bleu_why`: why `auto` chose it, or "")."""

    sources: list[str]
    references: list[str]
    src_ids: list[list[int]]
    tgt_ids: list[list[int]]
    bleu_tokenize: str = "13a"
    bleu_why: str = ""
    skipped_empty: int = 0  # pairs of the file left out: a side empty once normalised
    columns_warning: str | None = None  # a TSV file with a few lines of more than two columns (`TsvColumns`)
    # The references as the file has them, where normalising changed any (else None): what sacrebleu scores on the
    # file. The translations are normalised text (’ as ', NFC), so a file full of ’ scores lower as written (141 of
    # 400 French references with ’: BLEU 23.72 normalised, 20.53 as written), and a published figure is that one.
    written: list[str] | None = None
    cut_warning: str | None = None  # sources longer than the model takes (cut, as `tfm translate` cuts them)
    _given: dict[tuple[bool, bool, bool], list[list[tuple[list[int], Part]]]] = field(default_factory=dict, repr=False, compare=False)

    def sentence_ids(
        self, tokenizer: Tokenizer, max_positions: int, split: bool, verbatim: bool = False, numbers: bool = False
    ) -> list[list[tuple[list[int], Part]]]:
        """What `tfm translate` searches for each source (`sentences.to_translate`): the token ids of what the model
        is given for each of its sentences (with `split`, `decode.split_sentences`; else the source whole; with
        `verbatim`, the source as written; with `numbers`, its numbers as the placeholder), with the sentence's
        `Part`, which writes its translation as the sentence is written (no ids for one written as it is, without the model: `Part.literal`)."""
        if (split, verbatim, numbers) not in self._given:
            given = self._given[split, verbatim, numbers] = []
            for source, ids in zip(self.sources, self.src_ids, strict=True):
                parts = to_translate(source, split, tokenizer.word_cost, verbatim, numbers)
                if parts in ([Part(source, source)], [Part(source, source, numbers=())]):  # the source whole, as read
                    given.append([(ids, parts[0])])
                    continue
                heads = [head_for(part.given, max_positions, tokenizer.longest_piece) for part in parts]
                given.append([
                    ([] if part.literal else seq[: max_positions - 1], part)
                    for seq, part in zip(tokenizer.encode_batch(heads), parts, strict=True) if seq or part.literal
                ])
        return self._given[split, verbatim, numbers]

    def references_changed(self, n: int | None = None) -> int:
        """How many of the first `n` (all) references normalising changed."""
        if self.written is None:
            return 0
        return sum(a != b for a, b in zip(self.written[:n], self.references[:n], strict=True))


def load_dev(spec, tokenizer: Tokenizer, max_positions: int, bleu_tokenize: str = AUTO, numbers: bool = False) -> DevSet:
    """Read the dev corpus; `bleu_tokenize` (`auto`: chosen here, once, from all the references) is set up now,
    so that one that cannot be (MeCab missing) fails before training, not at the first evaluation.

    `max_positions` is the model's (`model.max_positions`): a dev sentence is cut only where the model cannot
    take it, as `tfm translate` cuts it, not at `data.max_len`, which filters the training pairs alone; so the
    dev BLEU is the score of the text `tfm translate` prints for the same sources. With `numbers` (a model that
    reads numbers as placeholders), the token ids of the loss are of the pairs as training gives them
    (`sentences.with_number_placeholders`)."""
    # References normalised as the translations are (NFC, one space): an NFD reference would never match the
    # model's NFC output. A side empty once normalised (only whitespace, '▁' and invisible characters) is skipped, as in data.train.
    columns = TsvColumns()
    # each side as far as the model can take it (`head_for`: a line of megabytes is not encoded whole)
    longest = tokenizer.longest_piece
    read = [(n, s, head_for(s, max_positions, longest), tokenizer.normalize(head_for(t, max_positions, longest)), t)
            for n, s, t in read_pairs(spec, columns=columns)]
    kept = [(n, s, head, ref, t) for n, s, head, ref, t in read if ref and tokenizer.normalize(head)]
    pairs = [(s, ref) for _, s, _, ref, _ in kept]
    if not pairs:
        raise TfmError(
            f"dev corpus {spec} has no usable sentence pairs: every pair has a side that is empty once normalised "
            "(only whitespace, '▁' or invisible characters such as U+200B)",
            hint="give data.dev sentence pairs with text on both sides, or data.dev: null",
        )
    sources = [s for s, _ in pairs]
    references = [ref for _, ref in pairs]
    # Sources longer than the model can take are cut (and count against BLEU), as `tfm translate` cuts them
    given = [(head, ref) for _, _, head, ref, _ in kept]
    if numbers:
        given = [with_number_placeholders(head, ref) for head, ref in given]
    src_ids = [ids[: max_positions] for ids in tokenizer.encode_batch([head for head, _ in given])]
    cut = [n for (n, *_), ids in zip(kept, src_ids, strict=True) if len(ids) > max_positions - 1]
    src_ids = [ids[: max_positions - 1] for ids in src_ids]
    tgt_ids = [ids[: max_positions - 1] for ids in tokenizer.encode_batch([ref for _, ref in given])]
    why = ""
    if bleu_tokenize == AUTO:
        bleu_tokenize, why = bleu_tokenize_for(references)
    bleu_metric(bleu_tokenize)
    written = [t for *_, t in kept]
    return DevSet(
        sources, references, src_ids, tgt_ids, bleu_tokenize, why, len(read) - len(pairs), columns.warning(),
        written=written if written != references else None, cut_warning=_cut_warning(cut, max_positions),
    )


def _cut_warning(lines: list[int], max_positions: int) -> str | None:
    """What to say of the dev sources longer than the model takes (their line numbers, `lines`), or None."""
    if not lines:
        return None
    shown = ", ".join(map(str, lines[:5])) + (", ..." if len(lines) > 5 else "")
    return (f"{len(lines):,} source{'s' if len(lines) > 1 else ''} longer than the model's {max_positions} positions "
            f"(line{'s' if len(lines) > 1 else ''} {shown}): only the first {max_positions - 1} tokens are translated, "
            "as tfm translate cuts them, and the dev BLEU counts the cut")


@torch.no_grad()
def dev_loss(model: Transformer, dev: DevSet, max_tokens: int, smoothing: float, amp) -> dict[str, float]:
    """Teacher-forced loss and perplexity on the whole dev set."""
    cfg = model.config
    device = next(model.parameters()).device
    src_len = torch.tensor([len(s) for s in dev.src_ids])
    tgt_len = torch.tensor([len(t) for t in dev.tgt_ids])
    loss_sum = nll_sum = 0.0
    n_tokens = 0
    for indices in token_batches(src_len, tgt_len, max_tokens, seed=0, epoch=0, shuffle=False):
        batch = make_batch(
            [dev.src_ids[i] for i in indices], [dev.tgt_ids[i] for i in indices],
            cfg.pad_id, cfg.bos_id, cfg.eos_id, indices,
        ).to(device)
        with amp(), compiler_errors():  # (train.compile: eval mode is compiled apart, at the first evaluation)
            features = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask, features_only=True)
            loss, nll, n = output_loss(features, model.generator.weight, batch.tgt_out, smoothing, cfg.pad_id, batch.tgt_keep)
        loss_sum, nll_sum, n_tokens = loss_sum + float(loss), nll_sum + float(nll), n_tokens + n
    return {"loss": loss_sum / n_tokens, "nll": nll_sum / n_tokens, "ppl": perplexity(nll_sum / n_tokens)}


def evaluate(
    model: Transformer, tokenizer: Tokenizer, dev: DevSet, recipe: Recipe, amp, sentences: int = 0,
    events=None, what: str = "dev evaluation",
) -> dict[str, Any]:
    """Dev loss and perplexity (of the whole dev set), then BLEU/chrF of beam-search output on the first
    `sentences` (0 = all).

    The beam search is the slow part (minutes on a CPU for a barely trained model, which runs every sentence to
    the maximum length): its progress goes to `events.decoding(what, sentences)` when the events have it."""
    was_training = model.training
    model.eval()
    metrics: dict[str, Any] = dev_loss(model, dev, recipe.train.max_tokens, recipe.train.label_smoothing, amp)
    n = len(dev.sources) if sentences <= 0 else min(sentences, len(dev.sources))
    d = recipe.decode
    lines = dev.sentence_ids(tokenizer, model.config.max_positions, d.split_sentences, d.verbatim, model.config.reads_placeholders)[:n]
    flat = [ids for line in lines for ids, _ in line if ids]  # each sentence of each source (not those written as they are)
    decoding = getattr(events, "decoding", None)  # (the CLI's events are duck-typed)
    # a line of several sentences is translated a sentence at a time, and one of no words (a number, a URL) is
    # copied: where a line is not one sentence decoded, the count of those decoded is said beside the lines'
    apart = any(sum(1 for ids, _ in line if ids) != 1 for line in lines)
    if apart:
        what += f" ({n:,} dev line{'s' if n != 1 else ''}, as {len(flat):,} sentence{'s' if len(flat) != 1 else ''})"
    with decoding(what, len(flat)) if decoding is not None else contextlib.nullcontext(None) as advance:
        hyps = translate_ids(
            model, flat, beam_size=d.beam, alpha=d.alpha, max_len_offset=d.max_len_offset,
            max_tokens=d.max_tokens, autocast=amp, min_len=d.min_len, on_batch=advance,
        )
    texts = iter([tokenizer.detokenize(h[0].tokens if h else []) for h in hyps])
    outputs = [  # as `tfm translate` prints it
        join_sentences([part.written(next(texts) if ids else "") for ids, part in line]) for line in lines
    ]
    metrics.update(score_translations(outputs, dev.references[:n], dev.bleu_tokenize))
    if changed := dev.references_changed(n):  # what sacrebleu gives on the file, as `tfm translate --score` says it
        plain = score_translations(outputs, dev.written[:n], dev.bleu_tokenize)
        metrics["as_written"] = {"bleu": plain["bleu"], "chrf": plain["chrf"], "references_changed": changed}
    metrics["sentences"] = n  # those decoded and scored; the loss and perplexity are of every dev sentence
    if apart:  # n lines scored, of which some were decoded as several sentences, or none
        metrics["decoded_sentences"] = len(flat)
    metrics["loss_sentences"] = len(dev.sources)
    model.train(was_training)
    return metrics


def finish(
    run_dir: Path, recipe: Recipe, model: Transformer, tokenizer: Tokenizer, dev, amp, events, board=None
) -> dict:
    """Write the run's final model, load it into `model`, and evaluate it on all of dev.

    The paper averages the last checkpoints (section 6.1). Early in training, while the loss still falls fast,
    that average can be far worse than the last checkpoint (a 900-step base run averaged to dev BLEU 0.7), so
    with a dev set both are evaluated and the average is kept unless it scores lower BLEU. The choice and both
    scores are returned under "final_model" (and land in summary.json and metrics.jsonl).
    """
    found = checkpoint_steps(run_dir)
    last = [p for _, p in found[-recipe.train.average_last :]]
    steps = [s for s, _ in found[-recipe.train.average_last :]]
    step = found[-1][0]
    averaged = average_checkpoints(last)
    if dev is None or len(last) == 1:
        chosen, result, scores = ("average" if len(last) > 1 else "last"), {}, {}
    else:
        events.message(  # minutes for a big dev set on a CPU: said, so a quiet log does not look hung
            f"final model: evaluating the average of {len(last)} checkpoints and the last one on all "
            f"{len(dev.sources):,} dev sentences (beam {recipe.decode.beam})"
        )
        load_state(model, read_weights(last[-1]), last[-1])  # (load_state_dict copies onto the model's device)
        last_scores = evaluate(model, tokenizer, dev, recipe, amp, 0, events, "final model: the last checkpoint")
        load_state(model, averaged, run_dir / FINAL)
        avg_scores = evaluate(model, tokenizer, dev, recipe, amp, 0, events, f"final model: the average of {len(last)} checkpoints")
        chosen = "average" if avg_scores["bleu"] >= last_scores["bleu"] else "last"
        scores = {"average": _brief(avg_scores), "last": _brief(last_scores)}
        result = avg_scores if chosen == "average" else last_scores
    names = [p.name for p in last]
    if chosen == "average":
        final = averaged
        save_weights(run_dir / FINAL, final, model.config, tokenizer.sha256, step, averaged=names)
        what = f"average of {len(last)} checkpoint(s) ({', '.join(names)})"
    else:
        final = read_weights(last[-1])
        save_weights(run_dir / FINAL, final, model.config, tokenizer.sha256, step, last=names[-1])
        what = f"the last checkpoint ({names[-1]})"
    load_state(model, final, run_dir / FINAL)  # the model is the final model from here on, whichever won
    if scores:
        a, b = scores["average"], scores["last"]
        why = "the paper's choice" if chosen == "average" else f"the average of {_steps(steps)} scored lower"
        events.message(
            f"final model: {what}: {why} (dev BLEU: average {a['bleu']:.2f}, last checkpoint {b['bleu']:.2f}) -> {run_dir / FINAL}"
        )
    else:
        events.message(f"final model: {what} -> {run_dir / FINAL}")
    final_model = {"chosen": chosen, "checkpoints": names if chosen == "average" else names[-1:], **scores}
    if scores:  # the candidates were both evaluated: which checkpoints the average was of, whichever won
        final_model["averaged"] = names
    if dev is None:
        return {"final_model": final_model}
    if not scores:
        events.message(f"final model: evaluating it on all {len(dev.sources):,} dev sentences (beam {recipe.decode.beam})")
        result = evaluate(model, tokenizer, dev, recipe, amp, 0, events, "final model")
    result = {**result, "final_model": final_model}
    append_metrics(run_dir, {"kind": "final", "step": step, **result})
    if board is not None:
        board.evaluation(step, result, final=True)
    events.evaluation(step, {**result, "final": True})
    return result


def _steps(steps: list[int]) -> str:
    """'steps 800, 900 and 1,000'."""
    shown = [f"{step:,}" for step in steps]
    return "step " + shown[0] if len(shown) == 1 else f"steps {', '.join(shown[:-1])} and {shown[-1]}"


def _brief(scores: dict[str, Any]) -> dict[str, Any]:
    return {k: scores[k] for k in ("bleu", "chrf", "loss", "ppl", "as_written") if k in scores}


