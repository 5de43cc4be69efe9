"""What a start checks before it writes anything (`tfm train --dry-run` runs the same checks): the run directory,
the corpora, the tokenizer, the disk, and for a resume, that the overrides leave the checkpoint's model as it is."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
import tempfile
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path

from tfm_cli.checkpoint import WEIGHTS_CRC, config_in_metadata, read_metadata, tokenizer_folder
from tfm_cli.corpus import (
    BUNDLED_PREFIX,
    SPM_SAMPLE,
    Segmented,
    TsvColumns,
    corpus_files,
    corpus_parts,
    corpus_text,
    map_files,
    read_pairs,
    resolve_corpus_path,
    same_file,
)
from tfm_cli.errors import CheckpointError, CorpusError, TfmError, human_size, shell_word
from tfm_cli.files import DirectoryLock, home_path, missing, nearest_existing, utf8_name
from tfm_cli.model.config import NUMBERS
from tfm_cli.recipe import (
    MAX_VOCAB_SIZE,
    MIN_VOCAB_SIZE,
    NEW_MODEL_NUMBERS,
    ModelRecipe,
    Recipe,
    check_paths_beside,
    load_recipe,
    recipe_from_dict,
    recipe_path,
    recipe_text,
    recipe_to_dict,
    with_numbers_of,
)
from tfm_cli.runs import (
    BEST,
    CHECKPOINTS,
    CURVES_PNG,
    EXPORT_INFO,
    FINAL,
    TENSORBOARD_DIR,
    checkpoint_steps,
    state_path,
    unfinished_first_checkpoint,
)
from tfm_cli.scoring import AUTO, bleu_metric
from tfm_cli.tokenizer import Tokenizer, normalized
from tfm_cli.training.step import parameter_count


def preflight(recipe: Recipe, run_dir: Path, resume: bool = False) -> None:
    """Everything a start checks before it writes anything (`tfm train --dry-run` runs it too).

    Raises:
        CheckpointError: `run_dir` already holds a trained run and this is not a resume.
        TfmError: train.bleu_tokenize names a tokenizer sacrebleu cannot set up here.
        CorpusError: a corpus file named by the recipe is missing; TfmError: tokenizer.path is missing, or a fresh
            start's run directory already holds another tokenizer.
    """
    _check_name_lengths(run_dir)  # before any look into it: such a name fails every lookup ("File name too long")
    if (run_dir / EXPORT_INFO).is_file():  # an ONNX export holds recipe.yaml and config.json but no checkpoint
        raise CheckpointError(
            f"{run_dir} is an export written by `tfm export` (it holds {EXPORT_INFO}), not a run directory",
            hint=f"train from its recipe into a new folder: tfm train {run_dir / 'recipe.yaml'} --out NEW_DIR",
        )
    if not resume and run_dir.is_dir() and _trained_now(run_dir):  # not "already holds a trained run": it is training
        raise TfmError(
            f"{run_dir} is in use by another process right now (a training, or `tfm tokenize` or `tfm export` writing into it)",
            hint="train into another --out, or wait until that run ends",
        )
    prior = checkpoint_steps(run_dir)
    if not resume and unfinished_first_checkpoint(run_dir) is not None and (run_dir / "recipe.yaml").is_file():
        prior = []  # a stop while the first checkpoint was saved: the start removes it (`Trainer.setup`)
    if not resume and (prior or (run_dir / FINAL).is_file()) and not (run_dir / "recipe.yaml").is_file():
        # a folder of weights that is no tfm run (a Hugging Face model's): "continue it with --resume" could not
        what = f"{CHECKPOINTS}/step-*.safetensors" if prior else FINAL
        raise CheckpointError(
            f"{run_dir} is not a tfm run directory (it has no recipe.yaml) but holds {what}, which a start would overwrite",
            hint="choose another --out (a new or empty folder)",
        )
    if not resume and (prior or (run_dir / FINAL).is_file()):  # refuse before writing anything into the run
        where = f"checkpoints up to step {prior[-1][0]}" if prior else f"a final {FINAL}"
        raise CheckpointError(
            f"{run_dir} already holds a trained run ({where})",
            hint=f"continue it with `tfm train --resume {shell_word(run_dir)}`, or choose another --out",
        )
    old_recipe = run_dir / "recipe.yaml"
    if not resume and not prior and old_recipe.is_file() and (differs := _recipe_differences(old_recipe, recipe)):
        raise CheckpointError(
            f"{run_dir} already holds another run (its recipe.yaml differs from this one: {differs}; it has no "
            "checkpoint yet)",
            hint="choose another --out, or delete that directory if its run is of no use",
        )
    if not resume and not old_recipe.is_file():
        _check_foreign_files(run_dir)
    _check_place(run_dir, resume)
    _check_corpora(recipe, run_dir if resume else None)
    if recipe.data.dev and recipe.train.bleu_tokenize != AUTO:  # MeCab missing: said now, not at the first evaluation
        bleu_metric(recipe.train.bleu_tokenize)
    own = run_dir / "tokenizer.json"
    # a run keeps its own copy of tokenizer.path: a resume does not read that file again
    wanted = home_path(recipe.tokenizer.path) if recipe.tokenizer.path and not (resume and own.is_file()) else None
    if wanted is not None and not wanted.is_file():
        what = "is not a file" if wanted.exists() else "does not exist"
        inside = wanted / "tokenizer.json"  # a run or export directory, as `tfm tokenize --tokenizer` takes one
        raise TfmError(
            f"tokenizer.path: {recipe.tokenizer.path} {what}",
            hint=f"give the file: tokenizer.path={shell_word(inside)}" if inside.is_file()
            # a folder: `tfm tokenize --out FOLDER` is refused; a file in it is what both can take
            else f"train one into it with `tfm tokenize RECIPE --out {shell_word(inside)}` and give "
            f"tokenizer.path={shell_word(inside)}, or set tokenizer.path: null to train one with the run" if wanted.is_dir()
            # (a bare `tfm tokenize` is a usage error, and `tfm tokenize RECIPE` writes runs/NAME/tokenizer.json)
            else f"train it there with `tfm tokenize RECIPE --out {shell_word(recipe.tokenizer.path)}`, or set "
            "tokenizer.path: null to train one with the run",
        )
    if wanted is not None and own.is_file() and Tokenizer.load(own).sha256 != Tokenizer.load(wanted).sha256:
        raise TfmError(
            f"{own} (left by `tfm tokenize` or an earlier start) is not tokenizer.path {recipe.tokenizer.path}: "
            "the run would train with the tokenizer already in its directory",
            hint=f"delete {own} to train with tokenizer.path, or choose another --out",
        )
    given = own if own.is_file() else wanted  # the tokenizer the run will use, when it is not trained by the start
    if given is not None:
        check_beam(recipe, Tokenizer.load(given).vocab_size)


def _trained_now(run_dir: Path) -> bool:
    """Whether another process holds the run's lock: `tfm train` holds it while it trains the run."""
    try:
        return DirectoryLock(run_dir).held_elsewhere()
    except OSError:  # a directory that cannot be opened: the checks below name what is wrong with it
        return False


def check_recipe_file(recipe_file: str | os.PathLike[str], recipe: Recipe, run_dir: Path, overrides: Sequence[str] = ()) -> None:
    """Refuse a start whose recipe file is the run directory's recipe.yaml, which the start replaces with the
    resolved recipe (`tfm train proj/recipe.yaml --out proj` lost the user's comments and layout), unless that
    file already is the resolved recipe (a run started again before its first checkpoint); and say so when a
    relative path of the recipe file (not one of the `overrides`, typed where tfm runs) is missing from the current
    directory but is there beside the recipe file."""
    given = {text.split("=", 1)[0].strip() for text in overrides}
    recipe_file = recipe_path(recipe_file)
    check_paths_beside(recipe_file, recipe, given)
    target = run_dir / "recipe.yaml"
    try:
        if (run_dir / EXPORT_INFO).is_file():  # not a run at all: preflight says so
            return
    except OSError:  # a name too long to look up ("runs/xxx.../tfm-export.json: File name too long"): preflight
        return  # names the run directory and what is wrong with it
    try:
        same = Path(recipe_file).samefile(target)
    except OSError:
        return
    if same and target.read_text(encoding="utf-8", errors="replace") != recipe_text(with_absolute_paths(recipe)):
        raise TfmError(
            f"the recipe {recipe_file} is the file the run writes its resolved recipe to ({target}): training into "
            f"{run_dir} would replace it",
            # (a copy left the run directory holding another recipe.yaml: the start was then refused as another run's)
            hint=f"move your recipe out of the run directory and train with it: mv {shell_word(target)} my-recipe.yaml && "
            f"tfm train my-recipe.yaml --out {shell_word(run_dir)}; or choose another --out",
        )


def check_beam(recipe: Recipe, vocab_size: int) -> None:
    """A decode.beam wider than the tokenizer's vocabulary: the dev evaluation could not fill it. (The recipe
    rule compares it with tokenizer.vocab_size; the tokenizer used may hold fewer tokens.)"""
    if recipe.decode.beam > vocab_size:
        raise TfmError(
            f"decode.beam={recipe.decode.beam} is wider than the tokenizer's vocabulary ({vocab_size:,} tokens): the "
            "dev evaluation could not fill the beam",
            hint=f"lower decode.beam (at most {vocab_size:,}; the paper's is 4)",
        )


# What a start writes over or deletes in its run directory (besides checkpoints/ and the final model, which the
# checks above already guard); tokenizer.json is not here: `tfm tokenize` puts one there for the run to use.
_RUN_FILES = ("config.json", "metrics.jsonl", "summary.json", BEST, CURVES_PNG, TENSORBOARD_DIR)


def _check_foreign_files(run_dir: Path) -> None:
    """Refuse a fresh start into a folder that is not a tfm run (no recipe.yaml) but holds a file the run would
    overwrite or delete: `--out .` in a project with its own config.json must not lose it."""
    clash = [name for name in _RUN_FILES if (run_dir / name).exists()]
    if clash:
        raise CheckpointError(
            f"{run_dir} is not a tfm run directory but holds {', '.join(clash)}, which a start would overwrite",
            hint="choose another --out (a new or empty folder)",
        )


def _check_name_lengths(run_dir: Path) -> None:
    """Refuse a run directory with a name longer than any file system takes (255 bytes): `name:` of 300 letters
    was reported as "runs/xxx.../tfm-export.json: File name too long", a file the user never asked for."""
    if any(len(os.fsencode(part)) > 255 for part in Path(run_dir).parts):
        raise TfmError(
            f"cannot create the run directory {run_dir}: {os.strerror(errno.ENAMETOOLONG)}",
            hint="choose a shorter name in the recipe (the run directory is runs/<name>/), or another --out",
        )


def _check_place(run_dir: Path, resume: bool = False) -> None:
    """Fail when `run_dir` cannot become a run directory (a file is there, or its place is not writable),
    without creating anything: the probe file is made and removed in the nearest folder that exists. A resume
    must be able to write into the run's own directory."""
    if run_dir.exists() and not run_dir.is_dir():
        raise TfmError(f"{run_dir} exists and is not a directory: it cannot hold the run", hint="choose another --out")
    if run_dir.is_symlink() and not run_dir.exists():
        raise TfmError(f"{run_dir} is a broken symbolic link (to {os.readlink(run_dir)})",
                       hint="remove it, or create what it points to, or choose another --out")
    if not resume:  # a run nested in another's checkpoints/ or tensorboard/ (`tfm export` refuses them too)
        for folder in [run_dir.resolve(), *run_dir.resolve().parents]:
            if folder.name in (CHECKPOINTS, "tensorboard") and (folder.parent / "recipe.yaml").is_file():
                raise TfmError(
                    f"{run_dir} is {'' if folder == run_dir.resolve() else 'inside '}the {folder.name}/ folder of the "
                    f"run {folder.parent}: its files would mix "
                    "with that run's (a resume of it, or `tfm translate --model`, would take them for its own)",
                    hint="choose an --out outside that run",
                )
    try:  # tensorboard (and what reads metrics.jsonl) take the path as UTF-8: it failed there with a traceback
        str(run_dir).encode("utf-8")
    except UnicodeEncodeError:
        if utf8_name(run_dir):  # UTF-8 bytes that an ASCII locale could not read (LC_ALL=C with PYTHONUTF8=0)
            raise TfmError(
                f"the run directory {run_dir} has a non-ASCII name, which this locale ({_locale()}) with Python's UTF-8 "
                "mode off cannot hand to TensorBoard",
                hint="run with PYTHONUTF8=1 (or LC_ALL=C.UTF-8), or choose an --out of ASCII letters, digits, '-', '_'",
            ) from None
        raise TfmError(
            f"the run directory {run_dir} has a name that is not UTF-8 (bytes of another encoding)",
            hint="choose an --out whose name is UTF-8 (e.g. ASCII letters, digits, '-', '_')",
        ) from None
    existing = nearest_existing(run_dir)
    try:
        if not existing.is_dir():
            raise NotADirectoryError(20, f"{existing} is not a directory")
        with tempfile.TemporaryFile(dir=existing):
            pass
        limit = os.pathconf(existing, "PC_NAME_MAX") if hasattr(os, "pathconf") else 255
        missing = run_dir
        while missing != existing:  # the folders a start would create: a name too long fails only at mkdir
            if len(os.fsencode(missing.name)) > limit:
                raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
            missing = missing.parent
    except OSError as err:
        if resume and existing == run_dir:
            raise TfmError(
                f"cannot write into the run directory {run_dir}: {err.strerror or err}",
                hint="a resume writes its checkpoints there: make it writable, or copy the run somewhere writable and resume the copy",
            ) from None
        made = "write into the run directory" if existing == run_dir else "create the run directory"
        raise TfmError(f"cannot {made} {run_dir}: {err.strerror or err}", hint="choose another --out") from None


def _recipe_differences(path: Path, recipe: Recipe) -> str:
    """How the run's recipe.yaml differs from what this start would write ("" for a restart of the same run): the
    first keys that differ, as `key there -> here`. What a start records otherwise than the recipe says is taken as
    it records it: model.numbers null (as the model reads numbers), tokenizer.vocab_size (the size of the tokenizer
    already in the folder, which the start takes: a corpus too small for the size asked gives fewer); train.compile
    is left out (it computes the same training: a start that failed to compile may go on without). The same command
    was refused as "another run" in both cases."""
    try:
        theirs = recipe_to_dict(load_recipe(path))
    except TfmError:
        return "it cannot be read"
    ours_recipe = with_absolute_paths(with_numbers_of(recipe, NEW_MODEL_NUMBERS))
    own = path.parent / "tokenizer.json"
    if own.is_file():
        try:
            ours_recipe = with_tokenizer_size(ours_recipe, Tokenizer.load(own).vocab_size)
        except (TfmError, OSError, ValueError):  # (a damaged one: said by the start, naming it)
            pass
    ours = recipe_to_dict(ours_recipe)
    for written in (theirs, ours):
        written["train"].pop("compile", None)
    differs = []
    for section in sorted(set(theirs) | set(ours)):
        a, b = theirs.get(section), ours.get(section)
        if isinstance(a, dict) and isinstance(b, dict):
            differs += [f"{section}.{k} {_value_text(section, k, a.get(k))} there -> {_value_text(section, k, b.get(k))} here"
                        for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        elif a != b:
            differs.append(f"{section} {a!r} there -> {b!r} here")
    return "; ".join(differs[:3]) + (f"; and {len(differs) - 3} more" if len(differs) > 3 else "")


def _moved(named: list, resumed: Path, where: str, err: CorpusError) -> CorpusError:
    """A corpus file that a resume does not find, with the override that gives its new place in the hint; of a list of
    corpora, every one that moved at once (by its place, `data.train[2].path=NEW_PATH`), not one failed resume each."""
    gone: dict[str, str] = {}
    for key, path, part in named:
        if not _resolves(path):
            gone.setdefault(key, "[SOURCE_FILE, TARGET_FILE]" if isinstance(part.spec, list) else "NEW_PATH")
    others = [key for key in gone if key != where]
    fixes = " ".join(f"'{key}={value}'" for key, value in gone.items())
    return CorpusError(
        f"{where}: {err}" + (f" (and {', '.join(others)})" if others else ""),
        hint=f"if {'they' if others else 'it'} moved, give {'their new places' if others else 'its new place'}: "
        f"tfm train --resume {shell_word(resumed)} {fixes}",
    )


def _resolves(path) -> bool:
    try:
        resolve_corpus_path(path)
    except CorpusError:
        return False
    return True


def _value_text(section: str, key: str, value) -> str:
    """A recorded value in a message: data.train as a recipe writes it, none as YAML writes it (`null`, not
    Python's `None`), anything else as Python shows it."""
    return corpus_text(value) if (section, key) == ("data", "train") else "null" if value is None else repr(value)


def _check_corpora(recipe: Recipe, resumed: Path | None = None) -> None:
    """Fail before anything is written when a corpus file named by the recipe is missing (for a resume of
    `resumed`, the hint says how to give the corpus's new place)."""
    for key, spec in (("data.train", recipe.data.train), ("data.dev", recipe.data.dev)):
        named = [(f"{key}[{part.number}].path" if part.number else key, path, part)
                 for part in (corpus_parts(spec) if spec is not None else ()) for path in corpus_files(part.spec)]
        for where, path, part in named:
            try:
                found = resolve_corpus_path(path)
            except CorpusError as err:
                if resumed is not None:  # the run's recipe.yaml names where the corpus was
                    raise _moved(named, resumed, where, err) from None
                raise CorpusError(f"{where}: {err}", hint=err.hint) from None
            if found.is_file() and found.stat().st_size == 0:  # said once the tokenizer was trained, naming no key
                pair = isinstance(part.spec, list)  # one file of a source file and a target file
                raise CorpusError(
                    f"{where}: {path} is empty",
                    hint=("give a file of one sentence a line, line for line with the other" if pair else
                          "give a file of source<TAB>target lines") + (
                        ", or data.dev=null to train without dev evaluations" if key == "data.dev" else ""),
                )
        if spec is not None and resumed is None:  # its first pair (a gzip of nothing, blank lines): said now too
            where = key
            try:
                for part in corpus_parts(spec):
                    where = f"{key}[{part.number}].path" if part.number else key
                    next(iter(read_pairs(part.spec)), None)
            except CorpusError as err:
                hint = err.hint if err.hint is not None else "give a file of source<TAB>target lines"
                if key == "data.dev":  # ("": the line says the fix, a permission's)
                    hint = f"{hint}, or data.dev=null to train without dev evaluations" if hint else (
                        "data.dev=null trains without dev evaluations")
                raise CorpusError(f"{where}: {err.message}", hint=hint) from None
        for part in corpus_parts(spec) if resumed is None and spec is not None else ():
            files = part.spec
            if isinstance(files, list) and same_file(*files):  # a slip: the model would learn to copy
                where = f"{key}[{part.number}].path" if part.number else key
                raise CorpusError(
                    f"{where}: [{files[0]}, {files[1]}] names the same file as source and target: every pair would be a "
                    "sentence and itself, and the model would learn to copy its input",
                    hint=f"give {where} the source file and the target file, e.g. [train.fr, train.en] (to train a copy "
                    "task on purpose, give a copy of the file as the target)",
                )


DEV_IN_TRAIN_WARNING = 0.05  # of the dev pairs; a random split of a corpus with repeated pairs shares a few


def schedule_warnings(recipe: Recipe) -> list[str]:
    """Settings that are valid each but together do less than they say (a start and its dry run say them): an
    average of more checkpoints than the run saves, a warm-up longer than the run, early stopping with too few
    evaluations to ever fire. Each had passed without a word."""
    t, found = recipe.train, []
    # every save_every steps, and the last step (counted, not listed: save_every=1 with max_steps=10**9 is valid)
    saved = min(t.max_steps // t.save_every + (t.max_steps % t.save_every > 0), t.keep_last)
    if t.average_last > saved:
        final = "is the last checkpoint" if saved == 1 else f"averages {saved}"
        found.append(
            f"train.average_last={t.average_last}, but the run saves {saved} checkpoint{'s' if saved > 1 else ''} "
            f"(train.save_every={t.save_every}, train.max_steps={t.max_steps}): the final model {final}"
        )
    if t.warmup_steps > t.max_steps:
        found.append(
            f"train.warmup_steps={t.warmup_steps} is more than train.max_steps={t.max_steps}: the learning rate "
            "rises to the last step and never reaches its peak"
        )
    dev = recipe.data.dev
    if isinstance(dev, str) and dev.startswith(BUNDLED_PREFIX) and not any(
        str(f).startswith(BUNDLED_PREFIX) for f in corpus_files(recipe.data.train)
    ):
        stops = ", and stop early" if t.patience else ""
        found.append(
            f"data.dev is {dev}, tfm's own French-English dev set (the recipe's, or the default where it names none), "
            f"but data.train is a corpus of yours ({corpus_text(recipe.data.train)}): the dev scores choose the best "
            f"checkpoint and the final model{stops}; unless your corpus is French to English too, give data.dev "
            "held-out pairs of your languages, in the same direction (data.dev=PATH), or data.dev=null for none"
        )
    evaluations = t.max_steps // t.eval_every if t.eval_every else 0
    if t.patience and recipe.data.dev and evaluations <= t.patience:
        found.append(
            f"train.patience={t.patience} needs {t.patience + 1} dev evaluations to stop a run, and train.eval_every="
            f"{t.eval_every} gives {evaluations} in train.max_steps={t.max_steps}: early stopping never fires"
        )
    return found


def dev_is_train(recipe: Recipe) -> str | None:
    """A warning when data.dev is data.train (the same files), or when more than 5% of its pairs are training
    pairs too (a copy of the file, its gzip, the same pairs as two plain files, a dev split taken from the
    training file and left in it): its dev scores measure memorisation, not translation, and early stopping
    would never stop. Reads data.train once more, as a stream (about a second per 160,000 pairs);
    `scan_corpora` says the same from its own reading."""
    if recipe.data.dev is None:
        return None
    if same := _same_corpus(recipe):
        return same
    held = {_pair_key(s, t) for _, s, t in read_pairs(recipe.data.dev)} - {("", "")}
    found = set()
    for _, s, t in read_pairs(recipe.data.train) if held else ():
        pair = _pair_key(s, t)
        if pair in held:
            found.add(pair)
            if len(found) == len(held):
                break
    return _dev_in_train(recipe, found, held)


def _same_corpus(recipe: Recipe) -> str | None:
    dev = recipe.data.dev
    for part in corpus_parts(recipe.data.train):
        train = part.spec
        if isinstance(train, list) == isinstance(dev, list):
            pairs = zip(train, dev, strict=True) if isinstance(train, list) else [(train, dev)]
            if all(same_file(a, b) for a, b in pairs):
                which = f"data.train[{part.number}]" if part.number else "the training corpus"
                return (f"data.dev is {which} ({dev}): its BLEU and loss measure how well the model remembers "
                        "its training pairs, not how well it translates; give data.dev held-out pairs")
    return None


def _pair_key(src: str, tgt: str) -> tuple[str, str]:
    """A pair as the model sees it (normalised as the tokenizer does): a dev set written in NFD (as macOS writes
    files) or with typographic apostrophes is still the training pairs it copies."""
    return normalized(src), normalized(tgt)


def _dev_in_train(recipe: Recipe, found: set, held: set) -> str | None:
    if len(found) <= DEV_IN_TRAIN_WARNING * len(held):
        return None
    return (f"{len(found):,} of the {len(held):,} distinct pairs of data.dev {recipe.data.dev} "
            f"({100 * len(found) // len(held)}%) are in data.train too: its BLEU and loss measure partly how well "
            "the model remembers its training pairs, not how well it translates; give data.dev held-out pairs (or "
            "take them out of data.train)")


def scan_corpora(
    recipe: Recipe, warnings: list[str] | None = None, progress: Callable[[str, int], None] | None = None
) -> dict[str, int]:
    """Read every line of the recipe's corpora as a start would (`tfm train --dry-run`): the number of sentence
    pairs in data.train and data.dev (and in each corpus of a mixture, `data.train[1]`, ...); a CorpusError names the first bad file and line. A TSV file with a few lines
    of more than two columns, and `dev_is_train`'s warning (from this one reading of each file), are added to
    `warnings`. `progress(key, pairs)` is called every 100,000 pairs of a file (millions take minutes)."""
    dev, train = recipe.data.dev, recipe.data.train
    same = _same_corpus(recipe) if warnings is not None and dev is not None else None
    look = warnings is not None and dev is not None and same is None
    held: set[tuple[str, str]] = set()
    found: set[tuple[str, str]] = set()
    counts, said = {}, {}
    for key, spec in (("data.dev", dev), ("data.train", train)):  # the dev first: its pairs are looked for in train
        if spec is None:
            continue
        n = 0
        said[key] = []
        parts = corpus_parts(spec)
        counted = [TsvColumns() for _ in parts]
        readers = [read_pairs(part.spec, columns=c) for part, c in zip(parts, counted, strict=True)]  # each file checked now
        for part, pairs, columns in zip(parts, readers, counted, strict=True):
            where = f"{key}[{part.number}]" if part.number else key
            segmented = Segmented(part.spec, where) if key == "data.train" else None  # as the start's tokenizer training says
            read = 0
            for _, s, t in pairs:
                n, read = n + 1, read + 1
                if segmented is not None and read <= SPM_SAMPLE:
                    segmented.look(s, t)
                if progress is not None and n % 100_000 == 0:
                    progress(key, n)
                if look and key == "data.dev":
                    held.add(_pair_key(s, t))
                elif look and held and (pair := _pair_key(s, t)) in held:
                    found.add(pair)
            said[key] += [f"{where} {w}" for w in (columns.warning(),) if w] + [w for w in (segmented and segmented.warning(),) if w]
            if part.number:
                counts[where] = read
        counts[key] = n
        held.discard(("", ""))
    if warnings is not None:
        warnings += [w for key in ("data.train", "data.dev") for w in said.get(key, [])]
        if warning := same or (_dev_in_train(recipe, found, held) if held else None):
            warnings.append(warning)
    return {key: counts[key] for key in ("data.train", *(k for k in counts if k.startswith("data.train[")), "data.dev")
            if key in counts}


# --- fine-tuning: train.init_from ------------------------------------------------------------------------------

# model keys a fine-tuning may change: no weight depends on them (a model that read numbers as written learns the
# placeholders in fine-tuning)
FREE_IN_FINE_TUNING = ("dropout", "attn_dropout", "numbers")


@dataclasses.dataclass(frozen=True)
class InitModel:
    """The trained model a fine-tuning starts from (`train.init_from`): its weights file and step."""

    path: Path
    step: int
    crc: str | None = None  # the CRC-32 of its tensors, from its metadata (`weights_crc32`; older files have none)


def _init_weights(recipe: Recipe) -> tuple[Path, dict[str, str]]:
    """The weights file that train.init_from names (a run's final, best or newest, as `tfm translate` picks) and
    its metadata; errors name the key."""
    from tfm_cli.runs import resolve_weights

    spec = home_path(recipe.train.init_from)
    try:
        path = resolve_weights(spec)
        return path, read_metadata(path)
    except CheckpointError as error:
        raise CheckpointError(f"train.init_from: {error.message}", hint=error.hint) from None


def with_init_tokenizer(recipe: Recipe, resume: bool = False) -> Recipe:
    """A start with train.init_from takes its model's tokenizer: tokenizer.path is set to that tokenizer.json,
    which every later check and the run's own copy then use (a tokenizer.path given must be the same tokenizer);
    and, where model.numbers is null, the way that model reads numbers (one trained before tfm had model.numbers:
    as written). A resume has its own copy, and does not read train.init_from again."""
    if resume or not recipe.train.init_from:
        return recipe
    path, metadata = _init_weights(recipe)
    try:
        numbers = config_in_metadata(path, metadata).get("numbers", "as_written")
    except CheckpointError:  # (said by check_init, with the shapes)
        numbers = None
    if numbers in NUMBERS:
        recipe = with_numbers_of(recipe, numbers)
    own = tokenizer_folder(path) / "tokenizer.json"
    if not own.is_file():
        raise CheckpointError(
            f"train.init_from: {path} has no tokenizer.json beside it ({own} is missing), and a model is trained on with "
            "the tokenizer it was trained with", hint=f"put that run's tokenizer.json at {own}",
        )
    expected = metadata["tokenizer_sha256"]
    if Tokenizer.load(own).sha256 != expected:
        raise CheckpointError(
            f"train.init_from: {own} does not match {path} (its tokenizer hash differs)",
            hint="put back the tokenizer.json that model was trained with",
        )
    given = home_path(recipe.tokenizer.path) if recipe.tokenizer.path else None
    if given is None:
        return dataclasses.replace(recipe, tokenizer=dataclasses.replace(recipe.tokenizer, path=str(own)))
    if given.is_file() and Tokenizer.load(given).sha256 != expected:  # (one that is missing: preflight says so)
        raise TfmError(
            f"tokenizer.path {recipe.tokenizer.path} is not the tokenizer of train.init_from ({own}): a model is "
            "trained on with the tokenizer it was trained with",
            hint="drop tokenizer.path (tokenizer.path=null): the run takes the tokenizer of train.init_from",
        )
    return recipe


def check_init(recipe: Recipe, config) -> InitModel:
    """The model train.init_from names, checked against the run's model config: every shape the same (dropout may
    differ). A TfmError names each key that differs and the value that fits."""
    from tfm_cli.model import ModelConfig

    path, metadata = _init_weights(recipe)
    try:
        theirs = ModelConfig.from_dict(config_in_metadata(path, metadata))
    except (ValueError, TypeError) as err:
        raise CheckpointError(f"train.init_from: {path}: invalid model config in its metadata ({err})") from None
    differ = [
        f.name for f in dataclasses.fields(config)
        if f.name not in FREE_IN_FINE_TUNING and getattr(config, f.name) != getattr(theirs, f.name)
    ]
    if differ:
        ours = ", ".join(f"model.{name}={getattr(config, name)}" for name in differ)
        fix = " ".join(f"model.{name}={getattr(theirs, name)}" for name in differ)
        raise TfmError(
            f"train.init_from {path} is a model of {', '.join(f'{n}={getattr(theirs, n)}' for n in differ)}, but this "
            f"recipe's has {ours}: its weights would not fit",
            hint=f"give the model section of the run it comes from (e.g. its recipe.yaml), or set {fix}",
        )
    try:
        step = int(metadata.get("step", 0))
    except ValueError:
        step = 0
    return InitModel(path, step, metadata.get(WEIGHTS_CRC))


def _absolute(spec):
    """A corpus, tokenizer or model path made absolute (relative ones are read from the current directory)."""
    return map_files(spec, lambda path: path if path.startswith("bundled:") else str(home_path(path).resolve()))


def with_absolute_paths(recipe: Recipe) -> Recipe:
    """The recipe with relative corpus, tokenizer and model paths made absolute (they are relative to the CWD)."""
    data = dataclasses.replace(recipe.data, train=_absolute(recipe.data.train), dev=_absolute(recipe.data.dev))
    tokenizer = dataclasses.replace(recipe.tokenizer, path=_absolute(recipe.tokenizer.path))
    train = dataclasses.replace(recipe.train, init_from=_absolute(recipe.train.init_from))
    return dataclasses.replace(recipe, data=data, tokenizer=tokenizer, train=train)


def check_room(run_dir: Path, config, t, resume: bool = False, probe: bool = True) -> None:
    """Fail before training when checkpoints cannot be written into `run_dir`, or will not fit on its disk.

    A checkpoint holds the fp32 weights and Adam's two moments (about 12 bytes a parameter); the run keeps
    `keep_last` of them (one more while the oldest is pruned, after the new one is written), plus the final model
    and the best one. A resume counts what is on disk already: the checkpoints that its saves prune and the final
    and best weights they replace take room that the free space does not have to give again; but each save needs
    room for one more checkpoint. With `probe=False` (the dry run, which writes nothing) no folder is made and no
    file written to test it: the space is that of the nearest folder that exists.
    """
    folder = run_dir / CHECKPOINTS
    try:
        if probe:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
                pass
    except OSError as err:
        raise TfmError(
            f"cannot write checkpoints into {folder}: {err.strerror}",
            hint=f"fix that folder's permissions, or {_elsewhere(run_dir, resume)}",
        ) from None
    there = next((p for p in (folder, *folder.parents) if p.is_dir()), Path("."))
    # A folder where the run writes one of its files was found by that write: the final model's after the whole
    # training, with "check the path, its permissions and the free space"
    for name in (FINAL, BEST, "summary.json", "metrics.jsonl", CURVES_PNG):
        if (run_dir / name).is_dir():
            raise TfmError(  # (a copy of the run would copy the folder too)
                f"{run_dir / name} is a folder, where the run writes its {name}",
                hint="move that folder away" + ("" if resume else ", or choose another --out"),
            )
    # What a resume writes into in place (the rest is written under a temporary name and renamed): a read-only
    # metrics.jsonl stopped the run at its first log line, a read-only tensorboard/ before the first step with a
    # traceback from tensorboard's writer thread, both after recipe.yaml had been rewritten.
    kept = [p for p in (run_dir / "metrics.jsonl", run_dir / TENSORBOARD_DIR) if p.exists()]
    for path in kept:
        if not os.access(path, os.W_OK | (os.X_OK if path.is_dir() else 0)):
            raise TfmError(
                f"cannot write into {path}: Permission denied (the run adds to it)",
                hint=f"fix its permissions (chmod u+w{'x' if path.is_dir() else ''} {shell_word(path)}), or {_elsewhere(run_dir, resume)}",
            )
    params = parameter_count(config)
    checkpoint, weights = params * 12, params * 4
    peak = run_files_size(params, t.keep_last)
    held = _held(run_dir, checkpoint, weights) if resume else 0
    need = max(peak - held, checkpoint)
    free = shutil.disk_usage(there).free
    if free < need:
        fits = (free + held - weights * 2) // checkpoint - 1 if free >= checkpoint else 0
        what = (f"{t.keep_last} checkpoints of this {params:,}-parameter model (one more while the oldest is pruned) "
                f"and its final and best weights")
        said = (f"resuming needs about {human_size(need)} more: {what} come to about {human_size(peak)}, of which about "
                f"{human_size(held)} is on disk already" if resume else f"{what} need about {human_size(need)}")
        raise TfmError(
            f"{run_dir} has {human_size(free)} free, but {said}",
            hint=", ".join(["free some space", *_fewer(run_dir, t, resume, fits), f"or {_elsewhere(run_dir, resume)}"]),
        )


def run_files_size(params: int, keep_last: int) -> int:
    """About the most a run's files take on disk, in bytes: `keep_last` checkpoints of a model of `params`
    parameters, one more while the oldest is pruned (weights and Adam's two moments, 12 bytes a parameter), and its
    final and best weights (4 bytes a parameter each)."""
    return params * 12 * (keep_last + 1) + params * 4 * 2


def _held(run_dir: Path, checkpoint: int, weights: int) -> int:
    """The room, in the estimate's units, that a run's files already take and its training prunes or replaces: its
    periodic checkpoints and its final and best weights."""
    final_and_best = sum((run_dir / name).is_file() for name in (FINAL, BEST))
    return len(checkpoint_steps(run_dir)) * checkpoint + final_and_best * weights


def _fewer(run_dir: Path, t, resume: bool, fits: int) -> list[str]:
    """How to keep as many checkpoints as fit (`fits`), when one does: train.average_last may not exceed
    train.keep_last, so it is lowered with it."""
    if fits < 1:
        return []
    words = [f"train.keep_last={fits}"] + ([f"train.average_last={fits}"] if t.average_last > fits else [])
    command = " ".join([f"tfm train --resume {shell_word(run_dir)}", *words] if resume else words)
    return [f"keep fewer checkpoints ({command})"]


def _elsewhere(run_dir: Path, resume: bool) -> str:
    """Where else a run can go: another --out for a start; a resume continues in place (--out is refused), so a copy."""
    if resume:
        return f"copy {shell_word(run_dir)} where there is room and write access, and resume the copy"
    return "choose another --out"


# Model settings that only act in training: a resume may change them; any other changes what the weights mean.
_TRAINING_ONLY = ("dropout", "attn_dropout")
_RECIPE_MODEL_KEYS = {f.name for f in dataclasses.fields(ModelRecipe)}


def _locale() -> str:
    """The locale setting in force, as the user set it (LC_ALL=C)."""
    for name in ("LC_ALL", "LC_CTYPE", "LANG"):
        if os.environ.get(name):
            return f"{name}={os.environ[name]}"
    return "the C locale"


def new_run_hint(run_dir: Path, settings: list[tuple[str, object]]) -> str:
    """The command that starts a new run from `run_dir`'s recipe with `settings` (dotted key, value) as overrides:
    what a resume refuses to change. (`--out` alone is no way on: `--resume RUN --out NEW` is refused.)"""
    words = [f"{key}={value if isinstance(value, str) else json.dumps(value)}" for key, value in settings]
    given = "".join(f" {shell_word(word)}" for word in words)
    return f"tfm train {shell_word(run_dir / 'recipe.yaml')}{given} --out NEW_DIR"


def check_resumable(run_dir: Path, weights: Path, config, step: int, max_steps: int) -> None:
    """Refuse a resume, before anything in the run is rewritten, whose overrides change the model the checkpoint
    holds (its shapes, or shape-preserving settings such as model.n_heads or model.norm that would change what
    the weights compute), or whose train.max_steps is already behind the checkpoint."""
    saved = config_in_metadata(
        weights, read_metadata(weights), hint=f"delete it and its {state_path(weights).name} to resume from the checkpoint before"
    )
    saved = {"numbers": "as_written", **saved}  # (a checkpoint saved before tfm had model.numbers: read as written)
    differ = [(k, v) for k, v in config.to_dict().items() if k not in _TRAINING_ONLY and k in saved and saved[k] != v]
    changed = [f"{'model.' + k if k in _RECIPE_MODEL_KEYS else k} {saved.get(k)!r} -> {v!r}" for k, v in differ]
    edited = _edited(run_dir, differ)
    if edited:  # no override did it: recipe.yaml was edited by hand since the checkpoint was saved
        recipe_file = Path(run_dir) / "recipe.yaml"
        put_back = ", ".join(f"model.{k}: {json.dumps(saved[k])}" for k, _ in edited)
        raise TfmError(
            f"--resume cannot change the model of {run_dir} ({'; '.join(changed)}): {weights.name} holds the other "
            f"one, and {recipe_file} was edited to say so",
            hint=f"put back {put_back} in {shell_word(recipe_file)} to continue the run, or start a new run from it: "
            f"tfm train {shell_word(recipe_file)} --out NEW_DIR",
        )
    if changed:
        raise TfmError(
            f"--resume cannot change the model of {run_dir} ({'; '.join(changed)}): {weights.name} holds the other one",
            hint="drop those overrides to continue the run, or start a new run with them: "
            + new_run_hint(run_dir, [(f"model.{k}", v) for k, v in differ if k in _RECIPE_MODEL_KEYS]),
        )
    if step > max_steps:
        raise TfmError(
            f"{run_dir} is already at step {step}, past train.max_steps={max_steps}: there is nothing to train",
            hint=f"raise train.max_steps above {step} to continue it (e.g. train.max_steps={2 * step})",
        )


def _edited(run_dir: Path, differ: list[tuple[str, object]]) -> list[tuple[str, object]]:
    """Of the model settings (config key, value) that differ from a run's checkpoint, those that the run's own
    recipe.yaml says: a hand edit, not an override (which the run's recipe.yaml records only once the resume runs)."""
    try:
        model = load_recipe(Path(run_dir) / "recipe.yaml").model
    except TfmError:  # said by the resume's own checks
        return []
    return [(k, v) for k, v in differ if k in _RECIPE_MODEL_KEYS and getattr(model, k) == v]


def check_tokenizer_kept(recipe: Recipe, run_dir: Path, actual: int, trained_with: object = None) -> None:
    """Refuse a resume whose tokenizer.vocab_size, tokenizer.min_frequency or tokenizer.path differ from the run's: the run goes on
    with its own tokenizer.json, so such an override changed nothing but what recipe.yaml then said (a run of 500
    tokens recorded as one of 800, and trained so by `tfm train RUN/recipe.yaml --out NEW`). The size of the run's
    tokenizer.json is the run's size too: recipe.yaml records it (an older tfm recorded the size asked for, which a
    tokenizer.path, or a corpus too small for it, need not give), and either number is accepted. `actual` is the
    size of the run's tokenizer.json, which the caller has loaded. `trained_with`, the recipe the newest trainer state
    saved (a dict; None from an older tfm), tells a hand edit of recipe.yaml, refused too, from what the run had."""
    try:
        saved = load_recipe(Path(run_dir) / "recipe.yaml").tokenizer
    except TfmError:  # said by the resume's own checks
        return
    differ = [
        k for k in ("vocab_size", "min_frequency")
        if getattr(saved, k) != getattr(recipe.tokenizer, k) and not (k == "vocab_size" and recipe.tokenizer.vocab_size == actual)
    ]

    def where(path: str | None) -> str | None:  # (a relative override and recipe.yaml's absolute path alike)
        return str(home_path(path).resolve()) if path else None

    if where(saved.path) != where(recipe.tokenizer.path):  # taken, ignored, and written into recipe.yaml
        differ.append("path")
    changed = [f"tokenizer.{k} {getattr(saved, k)!r} -> {getattr(recipe.tokenizer, k)!r}" for k in differ]
    if changed:
        raise TfmError(
            f"--resume cannot change the tokenizer of {run_dir} ({'; '.join(changed)}): the run goes on with its own "
            f"tokenizer.json ({actual:,} tokens)",
            hint="drop those overrides to continue the run, or start a new run with them: "
            + new_run_hint(run_dir, [(f"tokenizer.{k}", getattr(recipe.tokenizer, k)) for k in differ]),
        )
    trained = trained_with.get("tokenizer") if isinstance(trained_with, dict) else None
    if not isinstance(trained, dict):
        return
    edited = [
        k for k in ("vocab_size", "min_frequency")
        if k in trained and getattr(saved, k) != trained[k] and not (k == "vocab_size" and saved.vocab_size == actual)
    ]
    if edited:  # no override did it: recipe.yaml was edited by hand since the checkpoint was saved
        recipe_file = Path(run_dir) / "recipe.yaml"
        changed = [f"tokenizer.{k} {trained[k]!r} -> {getattr(saved, k)!r}" for k in edited]
        put_back = ", ".join(f"tokenizer.{k}: {json.dumps(trained[k])}" for k in edited)
        raise TfmError(
            f"--resume cannot change the tokenizer of {run_dir} ({'; '.join(changed)}): the run goes on with its own "
            f"tokenizer.json ({actual:,} tokens), and {recipe_file} was edited to say so",
            hint=f"put back {put_back} in {shell_word(recipe_file)} to continue the run, or start a new run from it: "
            f"tfm train {shell_word(recipe_file)} --out NEW_DIR",
        )


def with_tokenizer_size(recipe: Recipe, vocab_size: int) -> Recipe:
    """`recipe` with tokenizer.vocab_size set to the size of the tokenizer the run uses (one from tokenizer.path,
    or one trained on a corpus too small for the size asked), so that recipe.yaml records the run's vocabulary;
    unchanged where that size is outside the range a recipe accepts."""
    if vocab_size == recipe.tokenizer.vocab_size or not MIN_VOCAB_SIZE <= vocab_size <= MAX_VOCAB_SIZE:
        return recipe
    return dataclasses.replace(recipe, tokenizer=dataclasses.replace(recipe.tokenizer, vocab_size=vocab_size))


BYTE_SHARE_WARNING = 0.01  # a tokenizer trained on the corpus encodes well under 0.1% of the Tatoeba pairs as bytes


def foreign_tokenizer(recipe: Recipe, corpus, tokenizer: Tokenizer, where: str | None) -> str | None:
    """A warning when the tokenizer a start did not train (`where`: tokenizer.path, or one left in the run
    directory) encodes more than 1% of the training tokens as byte fallback (or <unk>): it was trained on other
    text (another language or script), so the model spends its steps and length on bytes; or when the one it
    trained (`where` None) does, its tokenizer.vocab_size too small for the corpus's characters. The share is
    measured on every training token; the characters it has no piece for are named from the first 5,000 pairs."""
    import itertools
    from collections import Counter

    from tfm_cli.corpus import read_pairs
    from tfm_cli.tokenizer import FIRST_PIECE_ID, N_SPECIAL

    src, _, tgt, _ = corpus.id_tensors()
    total = len(src) + len(tgt)
    if not total:
        return None
    (src_byte, src_unk), (tgt_byte, tgt_unk) = _unpieced(src), _unpieced(tgt)
    byte, unk = src_byte + tgt_byte, src_unk + tgt_unk
    share = (byte + unk) / total
    if share <= BYTE_SHARE_WARNING:
        return None
    chars: Counter[str] = Counter()
    try:
        for pair in itertools.islice(read_pairs(recipe.data.train), 5000):
            chars.update(pair[-2] + pair[-1])
    except (OSError, TfmError):
        pass
    missing = [c for c, _ in chars.most_common() if not c.isspace()
               and any(N_SPECIAL <= i < FIRST_PIECE_ID or i == Tokenizer.unk_id for i in tokenizer.encode(c))]
    # a joiner, a variation selector or a combining mark printed bare shows as nothing: its code point instead
    shown = [c if unicodedata.category(c)[0] not in "CMZ" else f"U+{ord(c):04X}" for c in missing[:10]]
    named = f" (characters without a piece of their own: {' '.join(shown)}{' ...' if len(missing) > 10 else ''})" if missing else ""
    if where is None:  # (tokenizer.vocab_size=300 spelled 2% of the dev set's tokens in bytes, without a word)
        return (
            f"the tokenizer this run trained encodes {share:.1%} of the training tokens as byte fallback{named}: "
            f"tokenizer.vocab_size={recipe.tokenizer.vocab_size:,} is too small for this corpus's characters, and the "
            "model will spend its length on bytes; raise tokenizer.vocab_size (the quickstart's is 8,000)"
        )
    if recipe.train.init_from:  # a fine-tuned model keeps its tokenizer: "set tokenizer.path: null" could not be done
        fix = ("a model fine-tuned from train.init_from keeps that model's tokenizer: train from scratch (train.init_from: "
               "null) for one of this corpus's own")
    elif where.startswith("tokenizer.path"):
        fix = "train one on this corpus with `tfm tokenize RECIPE`, or set tokenizer.path: null to have the run train one"
    else:  # one `tfm tokenize` left in the run directory (tokenizer.path is null already)
        fix = f"train one on this corpus with `tfm tokenize RECIPE` (it replaces that file), or delete {where} to have the run train one"
    return (
        f"the tokenizer {where} encodes {share:.1%} of the training tokens as byte fallback"
        f"{f' and <unk> ({unk / total:.1%})' if unk else ''}{named}: it was trained on other text than data.train, "
        f"or its vocabulary is too small for this corpus's characters, and the model will spend its length on bytes; {fix}"
    )


def _unpieced(ids, chunk: int = 1 << 20) -> tuple[int, int]:
    """How many of these ids (a 1-D integer tensor, of any integer dtype) are byte fallback, and how many <unk>:
    text the tokenizer has no piece for. Counted a chunk at a time: masks of a 2M-line corpus's ids, and an int64
    copy of them, added 674 MB to the peak of a start."""
    import torch

    from tfm_cli.tokenizer import FIRST_PIECE_ID, N_SPECIAL

    byte = unk = 0
    for start in range(0, len(ids), chunk):
        part = ids[start : start + chunk].to(torch.int32)  # (uint16, a corpus's ids, has no comparisons)
        byte += int(((part >= N_SPECIAL) & (part < FIRST_PIECE_ID)).sum())
        unk += int((part == Tokenizer.unk_id).sum())
    return byte, unk


DEV_BYTE_SHARE_WARNING = 0.05  # the bundled dev set has none under the quickstart's tokenizer; a Russian dev of a German run, 88%


def foreign_dev(spec, dev, corpus) -> str | None:
    """A warning when a side of the dev set (`dev`: its DevSet, encoded with the run's tokenizer) is far more
    byte fallback than that side of data.train (over 5%, and over 3x the training share): most likely it is in
    another language or script than the model learns, a wrong file, and the dev scores that choose the best
    checkpoint, stop early and pick the final model would rest on text the model cannot read."""
    import torch

    src, _, tgt, _ = corpus.id_tensors()
    found = []
    for side, train_ids, dev_ids in (("source", src, dev.src_ids), ("target", tgt, dev.tgt_ids)):
        flat = torch.tensor([i for ids in dev_ids for i in ids], dtype=torch.int64)
        if not len(flat) or not len(train_ids):
            continue
        share = sum(_unpieced(flat)) / len(flat)
        train_share = sum(_unpieced(train_ids)) / len(train_ids)
        if share > max(DEV_BYTE_SHARE_WARNING, 3 * train_share):
            found.append(f"{share:.0%} of its {side} tokens (data.train: {train_share:.1%})")
    if not found:
        return None
    return (
        f"data.dev {spec}: {' and '.join(found)} are byte fallback, characters the tokenizer has no piece for: is it "
        "in the languages of data.train, source and target in the same order? The dev scores pick the best "
        "checkpoint and the final model, and stop early"
    )


SIDES_APART = 1.0  # nats a token: how far apart data.train's two sides must lean for a direction to tell (fr/en: 7.3)


def _token_counts(ids):
    """(N,) token ids of any integer type -> (max id + 1,) float64 counts, a million at a time (a corpus's ids are
    uint16, which `bincount` does not take, and as int64 would take 8 bytes each)."""
    import torch

    out = torch.zeros(0, dtype=torch.float64)
    for start in range(0, len(ids), 1 << 20):
        found = torch.bincount(ids[start : start + (1 << 20)].to(torch.int64)).double()
        if len(found) > len(out):
            out = torch.nn.functional.pad(out, (0, len(found) - len(out)))
        out[: len(found)] += found
    return out


def swapped_dev(spec, dev, corpus) -> str | None:
    """A warning when the dev set (`dev`: its DevSet, encoded with the run's tokenizer) reads as the other direction
    of data.train: its source side like the training targets and its target side like the training sources (an
    en->fr run given the bundled fr->en dev set scored BLEU 0.10 without a word; the byte fallback `foreign_dev`
    counts tells nothing there: a joint vocabulary holds both languages).

    Each token leans to a side by the log of how much more often it comes in data.train's sources than in its
    targets (add-one counts); a text leans as its tokens do on average, placed on the scale from data.train's targets
    (0) to its sources (1). Said when the dev source is near the targets (at most 0.3) and the dev target near the
    sources (at least 0.7), for two sides that lean apart at all (the same language on both sides tells nothing). On the bundled corpus and
    its tokenizer: the dev set 0.99 / 0.01, swapped 0.01 / 0.99; 20 pairs swapped 0.12 / 0.93."""
    import torch

    src, _, tgt, _ = corpus.id_tensors()  # (the corpus's token ids, uint16 or int32)
    dev_src = torch.tensor([i for ids in dev.src_ids for i in ids], dtype=torch.int64)
    dev_tgt = torch.tensor([i for ids in dev.tgt_ids for i in ids], dtype=torch.int64)
    if not (len(src) and len(tgt) and len(dev_src) and len(dev_tgt)):
        return None
    sides = [_token_counts(ids) for ids in (src, tgt, dev_src, dev_tgt)]  # (V_side,) float64 counts
    size = max(len(c) for c in sides)
    counts = [torch.nn.functional.pad(c, (0, size - len(c))) for c in sides]
    smoothed = [c + 1 for c in counts[:2]]
    lean = (smoothed[0] / smoothed[0].sum()).log() - (smoothed[1] / smoothed[1].sum()).log()  # (V,) > 0: a source token
    sources, targets, *dev_sides = [float((c * lean).sum() / c.sum()) for c in counts]  # each text's mean lean
    if sources - targets < SIDES_APART:
        return None
    place = [min(max((side - targets) / (sources - targets), 0.0), 1.0) for side in dev_sides]  # (a few lines lean past either end)
    if place[0] > 0.3 or place[1] < 0.7:  # (a corpus of both directions, a tenth of it the other way, is 0.41 and 0.65)
        return None
    return (
        f"data.dev {spec} reads as the other direction of data.train: its source side is like the training targets "
        f"and its target side like the training sources ({place[0]:.2f} and {place[1]:.2f} on a scale from the "
        "targets, 0, to the sources, 1); the dev scores pick the best checkpoint and the final model (and stop a run "
        "early, with train.patience): give its sides the other way round (two files: swap them; a TSV file: awk -F'\\t' -v OFS='\\t' "
        "'{print $2, $1}')"
    )


def resume_recipe(run_dir: Path, overrides: list[str]) -> Recipe:
    """The recipe a run was started with (its resolved recipe.yaml), with new overrides on top."""
    path = Path(run_dir) / "recipe.yaml"
    if not Path(run_dir).exists():  # a typo, or a run not started yet: "not a tfm run directory" said neither
        raise CheckpointError(
            f"run directory {run_dir} {missing(Path(run_dir))}",
            hint=f"check the path, or start a run there: tfm train recipes/tiny.yaml --out {shell_word(run_dir)}",
        )
    if not Path(run_dir).is_dir():
        raise CheckpointError(f"{run_dir} is a file, not a run directory", hint="pass the run's folder, e.g. runs/tiny")
    if not path.is_file() and (Path(run_dir) / "tokenizer.json").is_file() and not checkpoint_steps(Path(run_dir)):
        raise CheckpointError(  # a start stopped while it trained its tokenizer or read the corpus: "not a tfm run"
            f"{run_dir} has no recipe.yaml and no checkpoint: its run was stopped before it began to train (its "
            "tokenizer.json is there), so there is nothing to resume",
            hint=f"start it again: tfm train RECIPE --out {shell_word(run_dir)} (the tokenizer.json there is used)",
        )
    if not path.is_file() and not any(Path(run_dir).iterdir()):
        raise CheckpointError(  # a start killed while it trained its tokenizer left the folder it made, empty
            f"{run_dir} is empty: a run started there was stopped before it wrote anything, so there is nothing to resume",
            hint=f"start it: tfm train RECIPE --out {shell_word(run_dir)}",
        )
    saved = saved_recipe(Path(run_dir)) if recipe_damage(path) else None
    if not path.is_file() and saved is None:
        raise CheckpointError(f"{path} is missing: {run_dir} is not a tfm run directory", hint="pass the run's folder, e.g. runs/tiny")
    if saved is not None:  # damaged or lost: the recipe the newest checkpoint was trained with (`restored_recipe_note`)
        step, data = saved
        recipe = recipe_from_dict(data, f"the recipe of {run_dir}'s checkpoint at step {step}", overrides)
    else:
        recipe = load_recipe(path, overrides)
    if any(o.split("=", 1)[0].strip() == "train.init_from" for o in overrides):
        started = (saved[1].get("train") or {}).get("init_from") if saved is not None else load_recipe(path).train.init_from
        if _absolute(recipe.train.init_from) != _absolute(started):  # recipe.yaml and summary.json would say so, untrue
            raise TfmError(
                f"train.init_from={recipe.train.init_from} on a resume: a run starts from another model once, at its "
                f"start ({started or 'random weights'}), and a resume trains on from its own checkpoints",
                hint="drop train.init_from; to fine-tune this run's model on, start a new run from it: "
                f"tfm train {shell_word(path)} --out NEW train.init_from={shell_word(run_dir)}",
            )
    if saved is None and (cut := _settings_cut(Path(run_dir), path)):
        given = {o.split("=", 1)[0].strip() for o in overrides}
        if lost := [(key, value) for key, value in cut if key not in given]:
            shown = ", ".join(key for key, _ in lost[:4]) + (f" and {len(lost) - 4} more" if len(lost) > 4 else "")
            words = " ".join(shell_word(f"{k}={v if isinstance(v, str) else json.dumps(v)}") for k, v in lost)
            raise TfmError(
                f"{path} lacks {shown}, which its checkpoint was trained with: tfm writes every setting there, so the "
                "file was cut short or edited, and the resume would train with their defaults",
                hint=f"put them back in {shell_word(path)}, or give them: tfm train --resume {shell_word(run_dir)} {words}",
            )
    # model.numbers null (a run started before tfm had it; every run's recipe.yaml names it since): as the run's model
    # reads numbers, which goes on so
    return recipe if recipe.model.numbers is not None else with_numbers_of(recipe, run_numbers(Path(run_dir)))


def recipe_damage(path: Path) -> str | None:
    """What makes a run's recipe.yaml unreadable to a resume: "is missing", "is empty", "is not valid YAML (...)",
    "is not UTF-8 text", "holds no recipe"; None where it reads as a mapping (its settings are checked after)."""
    import yaml

    if not path.is_file():
        return "is missing"
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return "is not UTF-8 text"
    except OSError:
        return None  # (unreadable, not damaged: the resume's own reading says why)
    if not text.strip():
        return "is empty"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        return f"is not valid YAML{f' (line {mark.line + 1})' if mark is not None else ''}"
    return None if isinstance(data, dict) else "holds no recipe"


def saved_recipe(run_dir: Path) -> tuple[int, dict] | None:
    """(step, recipe) of the newest checkpoint of `run_dir` whose state holds the recipe it was trained with (every
    checkpoint of tfm since it saved one), or None."""
    import torch

    for step, weights in reversed(checkpoint_steps(run_dir)):
        try:  # mapped, not read: of the optimizer's tensors nothing is loaded
            state = torch.load(state_path(weights), map_location="cpu", weights_only=True, mmap=True)
        except Exception:  # noqa: BLE001 - missing or damaged: the one before, as a resume falls back to it
            continue
        if isinstance(state, dict) and isinstance(state.get("recipe"), dict) and state["recipe"].get("name"):
            return step, state["recipe"]
    return None


def restored_recipe_note(run_dir: Path, dry_run: bool = False) -> str | None:
    """What a resume says when the run's recipe.yaml is damaged or lost and its newest checkpoint holds the recipe
    (`resume_recipe` takes that one, and the resume writes recipe.yaml again from it); None otherwise."""
    path = Path(run_dir) / "recipe.yaml"
    if (damage := recipe_damage(path)) is None or (saved := saved_recipe(Path(run_dir))) is None:
        return None
    kept = "" if damage == "is missing" else f" (the file as it was kept as {damaged_recipe_path(Path(run_dir)).name})"
    written = "which the resume writes to recipe.yaml again" if dry_run else "written to recipe.yaml again"
    return f"{path} {damage}: resuming with the recipe its checkpoint at step {saved[0]} was trained with, {written}{kept}"


def damaged_recipe_path(run_dir: Path) -> Path:
    """Where a resume keeps a damaged recipe.yaml before it writes the recipe again: `recipe.damaged.yaml`, or a
    free name beside it."""
    from tfm_cli.files import free_name

    return free_name(run_dir / "recipe.yaml", "recipe.damaged.yaml")


def run_numbers(run_dir: Path) -> str:
    """How the model of a run's newest checkpoint reads numbers (`ModelConfig.numbers`; one saved before tfm had it:
    as written); a new model's way where it has none that says (the resume's own checks say what is wrong)."""
    for _, weights in reversed(checkpoint_steps(run_dir)):
        try:
            numbers = config_in_metadata(weights, read_metadata(weights)).get("numbers", "as_written")
        except (CheckpointError, OSError):
            continue
        return numbers if numbers in NUMBERS else NEW_MODEL_NUMBERS
    return NEW_MODEL_NUMBERS


def _settings_cut(run_dir: Path, path: Path) -> list[tuple[str, object]]:
    """The settings (dotted key, value) that the newest checkpoint of `run_dir` was trained with and its recipe.yaml
    (`path`) does not name: a file cut short (a disk that filled up, a copy) read as their defaults. Checkpoints of
    an older tfm, which saved no recipe, say nothing."""
    import torch
    import yaml

    found = [state_path(w) for _, w in checkpoint_steps(run_dir) if state_path(w).is_file()]
    try:  # mapped, not read: of the optimizer's tensors nothing is loaded (the resume reads the state itself)
        state = torch.load(found[-1], map_location="cpu", weights_only=True, mmap=True) if found else None
        written = yaml.safe_load(path.read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - a damaged state or file: said by the resume's own checks
        return []
    saved = state.get("recipe") if isinstance(state, dict) else None
    if not isinstance(saved, dict) or not isinstance(written, dict):
        return []
    cut = []
    for section, values in saved.items():
        if not isinstance(values, dict):
            continue
        there = written.get(section)
        cut += [(f"{section}.{k}", v) for k, v in values.items() if not (isinstance(there, dict) and k in there)]
    return cut
