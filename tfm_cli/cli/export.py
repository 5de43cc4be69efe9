"""`tfm export [RUN] --format FORMAT`: write a run's model in a format others can use, and show it was checked.

A thin face over `tfm_cli.export.run_export`: parse options, call it, print the checks and what was written.
"""

from __future__ import annotations

import signal
from pathlib import Path

import typer

from tfm_cli.cli.common import (
    counted_progress,
    given_path,
    info,
    interrupted_status,
    print_json,
    print_table,
    route_warnings,
    stop_signals,
)

FORMATS = ("release", "onnx", "huggingface")  # as tfm_cli.export.FORMATS, without importing torch
DTYPES = ("fp32", "fp16", "bf16")


def export(
    model: Path = typer.Argument(None, parser=given_path, metavar="RUN", help="Run directory, release directory or .safetensors file (default: the most recent run under runs/).", show_default=False),
    fmt: str = typer.Option(..., "--format", "-f", help="release (safetensors + tokenizer + model card), onnx (encoder + decoder step for onnxruntime, with a translate.py that needs neither tfm nor torch), or huggingface (MarianMT, for transformers and CTranslate2)."),
    out: Path = typer.Option(None, "--out", "-o", parser=given_path, metavar="<path>", help="Directory to write (default: exports/RUN-FORMAT).", show_default=False),
    force: bool = typer.Option(False, "--force", help="Replace an earlier export in --out (only once the new export is written and checked; a folder holding other files is refused)."),
    dtype: str = typer.Option("fp32", "--dtype", help="release: store the weights as fp32, fp16 or bf16."),
    opset: int = typer.Option(None, "--opset", min=14, max=21, help="onnx: the ONNX opset, 14 to 21 (default: 17).", show_default=False),
    verify_lines: int = typer.Option(200, "--verify-lines", min=0, help="Dev sentences the translation checks use (0: all of the dev set); an fp16 or bf16 release also translates all of it for its model card's scores."),
    json_out: bool = typer.Option(False, "--json", help="Print the result (files, checks, notes) as JSON."),
) -> None:
    """Export a trained model, checked against the PyTorch original: release, ONNX or Hugging Face MarianMT.

    Every export is verified before it is put in place (logits and translations compared with the PyTorch
    model); the checks are printed. A failed check leaves --out untouched and exits 1.

    Examples:

      tfm export runs/tiny --format release --dtype fp16

      tfm export runs/tiny --format onnx --out exports/tiny-onnx

      tfm translate --model exports/tiny-onnx --engine onnxruntime "Je suis étudiant."

      tfm export runs/tiny --format huggingface --out exports/tiny-hf
      ct2-transformers-converter --model exports/tiny-hf --output_dir exports/tiny-ct2
    """
    if fmt not in FORMATS:
        raise typer.BadParameter(f"{fmt!r} is not one of: {', '.join(FORMATS)}", param_hint="--format")
    if dtype not in DTYPES:
        raise typer.BadParameter(f"{dtype!r} is not one of: {', '.join(DTYPES)}", param_hint="--dtype")
    if dtype != "fp32" and fmt != "release":
        raise typer.BadParameter("--dtype is for --format release", param_hint="--dtype")
    if opset is not None and fmt != "onnx":
        raise typer.BadParameter("--opset is for --format onnx", param_hint="--opset")

    from tfm_cli.export import ExportCheckError, run_export

    options = {"dtype": dtype} if fmt == "release" else {"opset": opset} if fmt == "onnx" else {}
    if model is not None and not model.exists():  # said before "exporting MODEL as ...", which it is not
        from tfm_cli.runs import missing_model

        raise missing_model(model)
    if model is None:  # named, as translate and tokenize name the run they take (only tfm-export.json said it)
        from tfm_cli.runs import resolve_weights, run_dir_of

        shown = f"{run_dir_of(resolve_weights(None))} (the most recent run; choose another with RUN)"
    else:
        shown = str(model)
    info(f"exporting {shown} as {fmt} (checking on {f'up to {verify_lines}' if verify_lines else 'all'} sentences of its dev set, else of its training data)")
    if fmt == "release" and dtype != "fp32":  # --verify-lines does not bound this: it can be most of the time
        info(f"then, for the model card's dev BLEU and chrF, the {dtype} weights translate all of the run's dev set "
             "(beam search; --verify-lines does not bound it), as the run's own scores are of its fp32 weights")
    received: list[int] = []
    try:
        with stop_signals() as received:  # SIGTERM (kill, a scheduler) and SIGHUP clean up as Ctrl-C does
            with route_warnings():  # a final model older than the run's newest checkpoint is said
                result = run_export(fmt, model, out, force=force, verify_lines=verify_lines, progress=counted_progress, **options)
    except ExportCheckError as error:
        _show(error.result, json_out)
        raise
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # on the way out: a second Ctrl-C changes nothing
        where = out if out is not None else "--out"
        info(f"tfm export: interrupted; {where} is as it was (the partial export was removed)")
        raise typer.Exit(interrupted_status(received)) from None
    _show(result, json_out)
    info(f"wrote {result.path}/: {', '.join(result.files)}")
    for note in result.notes:
        info(note)


def _show(result, json_out: bool) -> None:
    if json_out:
        print_json(result.to_dict())
        return
    rows = [(c.name, c.value, c.limit or "-", "ok" if c.ok else "FAILED") for c in result.checks]
    print_table(f"tfm export --format {result.format}: checks against the PyTorch model", ["check", "measured", "required", ""], rows)
