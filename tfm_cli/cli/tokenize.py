"""`tfm tokenize`: train the joint subword tokenizer and report its statistics, or show how text is encoded."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

import typer

from tfm_cli.cli.common import (
    JSON_HELP,
    check_output_file,
    check_utf8,
    file_path,
    given_path,
    info,
    print_json,
    print_table,
    warn,
    write_output,
    written_file,
)
from tfm_cli.errors import CheckpointError, TfmError, shell_word
from tfm_cli.files import home_path

BYTE_FALLBACK_WARNING = 0.01  # a side's share of byte-fallback tokens that is said (`tfm train`'s, for a tokenizer of other text)


def tokenize(
    recipe: str = typer.Argument(None, help="Recipe YAML whose data.train and tokenizer settings to use.", show_default=False),
    overrides: list[str] = typer.Argument(None, help="Recipe overrides as dotted.key=value, e.g. tokenizer.vocab_size=8000.", show_default=False),
    corpus: list[str] = typer.Option(None, "--corpus", "-c", help="Train on this TSV (source TAB target), or give it twice: source file, target file.", show_default=False),
    vocab_size: int = typer.Option(None, "--vocab-size", min=300, max=1_000_000, help="Vocabulary size (default: the recipe's, else 8000).", show_default=False),
    min_frequency: int = typer.Option(None, "--min-frequency", min=1, max=2**63 - 1, help="Minimum count of a merge (default: the recipe's, else 2).", show_default=False),
    out: Path = typer.Option(None, "--out", "-o", parser=file_path("tokenizer.json"), metavar="<path>", help="Where to save tokenizer.json (default: the recipe's tokenizer.path, else runs/<recipe name>/tokenizer.json; ./tokenizer.json without a recipe).", show_default=False),
    tokenizer: Path = typer.Option(None, "--tokenizer", "-t", parser=given_path, metavar="<path>", help="With --encode: a tokenizer.json or a run directory (default: the most recent run).", show_default=False),
    encode: list[str] = typer.Option(None, "--encode", "-e", help="Show the pieces and ids of this text (repeatable) instead of training.", show_default=False),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Train a joint BPE tokenizer (HF tokenizers, byte fallback) and print its statistics; or encode text.

    Examples:

      tfm tokenize recipes/tiny.yaml                 (saves runs/tiny/tokenizer.json, which tfm train then uses)

      tfm tokenize --corpus train.tsv --vocab-size 8000 --out tok.json

      tfm tokenize --tokenizer runs/tiny --encode "Je suis étudiant."
    """
    if encode:
        training = [name for name, given in (("RECIPE", recipe), ("--corpus", corpus), ("--out", out is not None),
                    ("--vocab-size", vocab_size is not None), ("--min-frequency", min_frequency is not None)) if given]
        if training:  # options of training a tokenizer: ignored here, they would seem to change the encoding
            raise typer.BadParameter(
                f"--encode shows an existing tokenizer; drop {', '.join(training[:-1])}{' and ' if len(training) > 1 else ''}{training[-1]}"
                " (they train a new one)",
                param_hint="--encode",
            )
        # before the tokenizer loads: it takes no undecodable bytes
        encode = [
            check_utf8(text, f"--encode text {number}" if len(encode) > 1 else "the --encode text")
            for number, text in enumerate(encode, start=1)
        ]
        _encode(_find_tokenizer(tokenizer), encode, json_out)
        return
    if tokenizer is not None:
        raise typer.BadParameter("--tokenizer goes with --encode", param_hint="--tokenizer")
    _train(recipe, list(overrides or []), corpus, vocab_size, min_frequency, out, json_out)


def _find_tokenizer(spec: Path | None):
    from tfm_cli.runs import resolve_weights, run_dir_of
    from tfm_cli.tokenizer import Tokenizer

    if spec is not None and spec.is_file():
        return Tokenizer.load(spec)
    if spec is not None and (spec / "tokenizer.json").is_file():
        return Tokenizer.load(spec / "tokenizer.json")
    if spec is not None and not spec.exists():
        raise TfmError(f"tokenizer {spec} does not exist", hint="give a tokenizer.json or a run directory that holds one")
    if spec is not None:
        raise TfmError(f"no tokenizer at {spec}", hint="give a tokenizer.json or a run directory that holds one")
    try:
        path = run_dir_of(resolve_weights(None)) / "tokenizer.json"
    except CheckpointError:  # no trained run yet: the tokenizer `tfm tokenize RECIPE` wrote there still counts
        found = sorted((p.stat().st_mtime, p) for p in Path("runs").glob("*/tokenizer.json") if p.is_file())
        if not found:
            raise TfmError(
                "no tokenizer found under runs/",
                hint="train one with `tfm tokenize recipes/tiny.yaml`, or pass --tokenizer FILE_OR_RUN_DIR",
            ) from None
        path = found[-1][1]
    info(f"using {path} (the most recent run; choose another with --tokenizer)")
    return Tokenizer.load(path)


def _encode(tok, texts: list[str], json_out: bool) -> None:
    records = []
    for text in texts:
        ids = tok.encode(text)
        records.append({
            "text": text, "normalized": tok.normalize(text), "ids": ids,
            "pieces": [tok.id_to_piece(i) for i in ids], "decoded": tok.decode(ids),
        })
    if json_out:
        for record in records:
            print_json(record)
        return
    for r in records:
        print_table(f"{r['text']!r}: {len(r['ids'])} tokens", ["piece", "id"], [(p, str(i)) for p, i in zip(r["pieces"], r["ids"], strict=True)])
        info(f"decoded: {r['decoded']}")


def _train(recipe, overrides, corpus, vocab_size, min_frequency, out, json_out: bool) -> None:
    settings: dict[str, Any] = {"vocab_size": 8000, "min_frequency": 2}
    spec: Any = None
    option = None  # the command-line option the corpus came from (None: the recipe's data.train)
    default_out = Path("tokenizer.json")
    max_len = None  # the recipe's data.max_len: the pairs `tfm train` keeps are measured
    numbers = True  # numbers on both sides of a pair as the placeholder, as a new model is trained (model.numbers)
    if recipe is not None and "=" in recipe and not Path(recipe).exists():  # `--corpus c.tsv tokenizer.vocab_size=500`
        raise typer.BadParameter(
            f"{recipe} is an override, not a recipe file: overrides follow a RECIPE (tfm tokenize RECIPE {recipe}); "
            "without one, use --vocab-size and --min-frequency",
            param_hint="RECIPE",
        )
    if recipe is not None:
        from tfm_cli.recipe import check_paths_beside, load_recipe, reads_placeholders

        r = load_recipe(recipe, overrides)
        if not corpus:  # data.train beside the recipe, not here: said as `tfm train` says it
            given = {o.split("=", 1)[0].strip() for o in overrides}
            check_paths_beside(recipe, r, given, keys=("data.train",))
        settings = {"vocab_size": r.tokenizer.vocab_size, "min_frequency": r.tokenizer.min_frequency}
        spec = r.data.train
        default_out = Path("runs") / r.name / "tokenizer.json"
        max_len = r.data.max_len
        numbers = reads_placeholders(r)
        if r.tokenizer.path and out is None:  # the file `tfm train RECIPE` takes: written there, never replaced
            default_out = home_path(r.tokenizer.path)
            if default_out.exists() or default_out.is_symlink():
                raise TfmError(
                    f"recipe {recipe} sets tokenizer.path: {r.tokenizer.path}, which exists: `tfm train` trains on that "
                    "file, and this command would not replace it unasked",
                    hint=f"give --out {shell_word(default_out)} to replace it, or --out another file and set "
                    "tokenizer.path to it (or null, to use the run's own)",
                )
    elif overrides:
        raise typer.BadParameter("overrides need a RECIPE", param_hint="OVERRIDES")
    if corpus:
        if len(corpus) > 2:
            raise typer.BadParameter("give one TSV, or a source file and a target file", param_hint="--corpus")
        spec = corpus[0] if len(corpus) == 1 else list(corpus)
        option = "--corpus"
    if spec is None:
        raise typer.BadParameter("give a RECIPE or --corpus to train on (or --encode TEXT to inspect)", param_hint="RECIPE")
    from tfm_cli.corpus import corpus_files, corpus_parts, is_mixture, resolve_corpus_path, same_file
    from tfm_cli.errors import CorpusError

    for part in corpus_parts(spec) if is_mixture(spec) else ():  # a missing file named by its place, as `tfm train` names it
        for path in corpus_files(part.spec):
            try:
                resolve_corpus_path(path, option=option)
            except CorpusError as err:
                raise CorpusError(f"data.train[{part.number}].path: {err.message}", hint=err.hint) from None
    for part in corpus_parts(spec):  # as `tfm train` refuses it: one language's pieces alone
        files, key = part.spec, f"data.train[{part.number}].path" if part.number else "data.train"
        if isinstance(files, list) and same_file(*files):
            pair = f"--corpus {shell_word(files[0])} --corpus {shell_word(files[1])}" if option else f"{key} [{files[0]}, {files[1]}]"
            raise TfmError(
                f"{pair} names the same file as source and target: the joint tokenizer would learn one language's pieces",
                hint="give the source file and the target file (--corpus train.fr --corpus train.en)" if option
                else f"give {key} the source file and the target file, e.g. [train.fr, train.en]",
            )
    settings.update({k: v for k, v in (("vocab_size", vocab_size), ("min_frequency", min_frequency)) if v is not None})
    from tfm_cli.corpus import PROGRESS_EVERY, TsvColumns, has_text, now_and_then, read_pairs
    from tfm_cli.files import DirectoryLock
    from tfm_cli.tokenizer import tokenizer_stats, train_corpus_tokenizer

    target = out if out is not None else default_out
    # the file a run's model is bound to is its tokenizer.json (another name beside it is not): the path given, and
    # through a symbolic link the file it names, each where a run may be (a run's tokenizer.json may be a link)
    runs_own = {p.parent: p for p in (*_link_chain(target), written_file(target)) if p.name == "tokenizer.json"}
    with contextlib.suppress(OSError):  # a name too long is said by check_output_file, below
        if target.is_dir():  # `--out RUN`: a run said as one, not a hint to give RUN/tokenizer.json, refused then
            runs_own.setdefault(target, target / "tokenizer.json")
    # each kept to the end once taken: a `tfm train` into the folder meanwhile is refused
    locks = {run_dir: DirectoryLock(run_dir) for run_dir in runs_own}
    for run_dir, path in runs_own.items():
        _refuse_a_run_folder(run_dir, path, locks[run_dir])

    sources = [recipe] if recipe is not None else []
    sources += [Path(c) for c in corpus_files(spec) if not str(c).startswith("bundled:")]
    check_output_file(target, "--out", inputs=sources, keeps=_is_tokenizer, what="a tokenizer.json", example="tokenizer.json")

    started = time.perf_counter()
    tok = train_corpus_tokenizer(
        spec, settings["vocab_size"], settings["min_frequency"], numbers=numbers, say=info, option=option
    )
    seconds = time.perf_counter() - started
    for run_dir, path in runs_own.items():  # again: a `tfm train` may have made the folder (and its tokenizer) meanwhile
        _refuse_a_run_folder(run_dir, path, locks[run_dir], meanwhile=True)
    # a full disk: one line naming --out, the previous file kept (write_output's own temporary file: tok.save's
    # inside it made a name 14 bytes too long for an --out near the file system's limit)
    write_output(target, "--out", tok.write_json)
    info(f"saved {target} ({tok.vocab_size:,} tokens, trained in {seconds:.1f}s); measuring the corpus...")
    if tok.vocab_size < settings["vocab_size"]:  # said, not left for the user to notice in the table
        info(
            f"note: {tok.vocab_size:,} tokens, fewer than the {settings['vocab_size']:,} asked: the corpus has no more "
            f"pairs of pieces seen at least {settings['min_frequency']} times (a larger corpus"
            f"{', or a lower --min-frequency,' if settings['min_frequency'] > 1 else ''} gives more)"
        )
    parts = corpus_parts(spec)
    counted = [TsvColumns() for _ in parts]  # a tab inside a few sentences, said as `tfm train` says it
    skipped = 0  # pairs with an empty side: `tfm train` skips them, so they are no sentences of its corpus

    said = now_and_then(PROGRESS_EVERY, lambda text, seconds: info(f"{text} so far ({seconds:,.0f}s)"))

    def kept():
        nonlocal skipped
        read = 0
        for part, columns in zip(parts, counted, strict=True):
            for _, src, tgt in read_pairs(part.spec, option=option, columns=columns):
                read += 1
                if has_text(src) and has_text(tgt):
                    yield src, tgt
                else:
                    skipped += 1
                said(f"measuring the corpus: {read:,} pairs read")

    measuring = time.perf_counter()
    stats = tokenizer_stats(tok, kept(), max_len=max_len)
    measure_seconds = time.perf_counter() - measuring
    for part, columns in zip(parts, counted, strict=True):
        if warning := columns.warning():
            warn(f"{option or 'data.train'}{f'[{part.number}]' if part.number else ''} {warning}")
    if skipped:
        info(f"note: {skipped:,} pair{'s' if skipped > 1 else ''} with an empty side not measured (tfm train skips them)")
    if long := stats.get("skipped_long", 0):
        info(f"note: {long:,} pair{'s' if long > 1 else ''} with a side over {max_len - 1} tokens not measured (tfm "
             f"train skips them: data.max_len={max_len} counts the </s>)")
    for side, key in (("source", "src_tokens"), ("target", "tgt_tokens")):  # tfm train warns at 1% for a
        if (share := stats[key]["byte_fallback_share"]) > BYTE_FALLBACK_WARNING:  # tokenizer it did not train
            warn(f"{share:.1%} of the {side} tokens are byte fallback (characters without a piece of their own, "
                 f"spelled byte by byte: up to {stats[key]['max']} tokens a sentence): a larger "
                 f"--vocab-size keeps them whole (than {tok.vocab_size:,}; scripts of many characters, such as "
                 "Chinese or Japanese, want tens of thousands)")
    report = {"tokenizer": str(target), "corpus": spec, "train_seconds": round(seconds, 2),
              "measure_seconds": round(measure_seconds, 2), **stats, "skipped_empty": skipped}
    if json_out:
        print_json(report)
        return
    src, tgt = stats["src_tokens"], stats["tgt_tokens"]
    print_table(
        f"Tokenizer {target}",
        ["statistic", "source", "target"],
        [
            ("vocabulary size (shared)", stats["vocab_size"], stats["vocab_size"]),
            ("sentences", stats["sentences"], stats["sentences"]),
            ("tokens per sentence: mean", round(src["mean"], 2), round(tgt["mean"], 2)),
            ("tokens per sentence: median", src["median"], tgt["median"]),
            ("tokens per sentence: max", src["max"], tgt["max"]),
            ("tokens in total", src["total"], tgt["total"]),
            ("unknown tokens (share)", f"{src['unk_share']:.4%}", f"{tgt['unk_share']:.4%}"),
            ("byte-fallback tokens (share)", f"{src['byte_fallback_share']:.4%}", f"{tgt['byte_fallback_share']:.4%}"),
            ("training time (s)", round(seconds, 2), ""),
            ("measuring time (s)", round(measure_seconds, 2), ""),
        ],
    )


def _link_chain(path: Path, hops: int = 40) -> list[Path]:
    """`path` and every path its symbolic links name on the way to a file (a run's tokenizer.json may be a link, and
    a link to it one more hop), at most `hops` of them (a loop is said by the output's checks)."""
    chain = [path]
    with contextlib.suppress(OSError):
        while chain[-1].is_symlink() and len(chain) <= hops:
            chain.append(chain[-1].parent / os.readlink(chain[-1]))
    return chain


def _refuse_a_run_folder(run_dir: Path, target: Path, lock, meanwhile: bool = False) -> None:
    """Raise TfmError when `run_dir`'s tokenizer.json is a model's: a run training now (its lock), a trained run,
    or a started one (recipe.yaml and config.json, or an export). Otherwise take the folder's lock, when the
    folder exists, and keep it. `meanwhile`: checked again before writing, the tokenizer trained (a `tfm train`
    into a folder that did not exist at the start made it, and its tokenizer, meanwhile: it was overwritten)."""
    from tfm_cli.runs import checkpoint_steps

    since = " (since this tokenizer's training began; nothing was written)" if meanwhile else ""
    if run_dir.is_dir() and not lock.acquire():
        # `tfm train` holds it from its first moment, before its recipe.yaml and config.json are written: the
        # tokenizer it has loaded would no longer be the run's tokenizer.json, and its model could not be used
        raise TfmError(
            f"{run_dir} is in use by another process right now (a training, or `tfm tokenize` or `tfm export` writing "
            f"into it){since}: replacing {target.name} would break its model",
            hint="choose another --out",
        )
    if checkpoint_steps(run_dir) or (run_dir / "model.safetensors").is_file():
        raise TfmError(
            f"{run_dir} already holds a trained model{since}: replacing {target.name} would break it",
            hint="choose another --out, or train a new run",
        )
    if (run_dir / "recipe.yaml").is_file() and (run_dir / "config.json").is_file():
        # a start wrote these (its model, training now or to be restarted, is built on the tokenizer already
        # there), or an export that has no model.safetensors (onnx): either way the tokenizer is the model's
        raise TfmError(
            f"{run_dir} holds a model's recipe.yaml and config.json (a run that `tfm train` started, or an export)"
            f"{since}: replacing {target.name} would break it",
            hint=f"choose another --out, or delete {run_dir} if its run is of no use",
        )


def _is_tokenizer(path: Path) -> bool:
    """Whether `path` holds a tokenizer (one `tfm tokenize` may replace)."""
    from tfm_cli.tokenizer import Tokenizer

    try:
        Tokenizer.load(path)
    except Exception:  # noqa: BLE001 - anything unreadable is not a tokenizer to replace
        return False
    return True
