"""Every bad input answered (#10): one `Error:` line that names the file, key or line (plus at most one `hint:`
line), exit 1 for bad data and 2 for bad usage, no traceback, and nothing already saved touched.

Each case runs once through the installed `tfm`; further variants of a case are checked in-process, where they
cost no interpreter start (every `tfm` that loads torch takes about 2 s). The model is a random tiny one saved
like a run (recipe.yaml, tokenizer.json, a checkpoint, model.safetensors), copied where a test damages it.
Cases already tested elsewhere get a variant here that is not:

    recipe errors      test_recipe.py (library), test_cli.py::test_bad_recipe_lists_every_problem (several at once),
                       test_cli.py::test_unknown_override_did_you_mean, test_cli.py::test_missing_recipe_file_*
    corpus errors      test_data.py::test_error_* (library), test_cli.py::test_corpus_errors_name_file_and_line,
                       test_cli.py::test_mismatched_parallel_files, test_cli.py::test_missing_corpus_fails_*,
                       test_e2e.py::test_dry_run_checks_the_corpora_a_start_would_read
    model errors       test_cli.py::test_translate_with_another_tokenizer, ::test_translate_missing_model_dir,
                       ::test_translate_empty_model_dir, test_training_core.py::test_load_model_from_run_directory,
                       ::test_load_state_rejects_weights_of_another_shape, test_translator.py::test_a_tokenizer_of_*
    translate input    test_cli.py::test_translate_invalid_utf8_names_the_line, test_e2e.py::test_translate_long_*,
                       test_e2e.py::test_translate_stdin_keeps_order_and_empty_lines
    existing run       test_e2e.py::test_fresh_train_refuses_a_run_with_checkpoints, ::test_refused_train_leaves_*,
                       test_e2e.py::test_dry_run
    usage (exit 2)     test_cli.py::test_usage_error_exits_2, ::test_unknown_option_exits_2, ::test_translate_precision_*
"""

from __future__ import annotations

import bz2
import dataclasses
import errno
import gzip
import io
import itertools
import json
import lzma
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import pytest
import torch
import yaml
from clitools import TFM, start_tfm, tfm, tfm_env, tiny_recipe
from safetensors.torch import load_file, save_file

from tfm_cli.checkpoint import (
    WEIGHTS_CRC,
    load_model,
    read_metadata,
    save_weights,
    weights_crc32,
    weights_state,
)
from tfm_cli.corpus import read_pairs
from tfm_cli.errors import CheckpointError, CorpusError, RecipeError, TfmError
from tfm_cli.model import ModelConfig, Transformer
from tfm_cli.recipe import TrainRecipe, load_recipe
from tfm_cli.runs import FINAL, checkpoint_path, checkpoint_steps
from tfm_cli.tokenizer import train_tokenizer
from tfm_cli.translator import Translator

REPO = Path(__file__).resolve().parents[1]
CORPORA = REPO / "tfm_cli" / "corpora" / "tatoeba-fr-en"

TRAIN = {"max_tokens": 512, "max_steps": 10, "warmup_steps": 5, "save_every": 5, "keep_last": 2, "average_last": 2,
         "log_every": 5, "eval_every": 0}


# ---- helpers -------------------------------------------------------------------------------------------------


def error_line(proc, *fragments: str, code: int = 1) -> str:
    """The one `Error:` line of a failed command, checked: exit `code`, no traceback, at most a hint after it,
    and every fragment in it. Progress lines before it (`tfm train: recipe ...`) are allowed."""
    assert proc.returncode == code, f"exit {proc.returncode}, expected {code}:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [i for i, line in enumerate(lines) if line.startswith("Error: ")]
    assert len(errors) == 1, proc.stderr
    after = lines[errors[0] + 1 :]
    assert after == [] or (len(after) == 1 and after[0].startswith("hint: ")), f"more than one line:\n{proc.stderr}"
    line = lines[errors[0]]
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} not in {line!r}"
    return line


def one_line(error: BaseException, *fragments: str) -> str:
    """An in-process error: one line holding every fragment; the line."""
    text = str(error)
    assert "\n" not in text, text
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in {text!r}"
    return text


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def nothing_written(out: Path) -> bool:
    """A run directory a failed start did not write into (at most an empty folder)."""
    return not out.exists() or not any(p.is_file() for p in out.rglob("*"))


def write(path: Path, data: str | bytes) -> Path:
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def recipe(folder: Path, train: str, dev: str = "null", name: str = "recipe.yaml") -> Path:
    """A tiny recipe whose data.train and data.dev are these YAML values ("[a.tsv, b.tsv]", "null", a path)."""
    data = {"train": yaml.safe_load(train), "dev": yaml.safe_load(dev)}
    return write(folder / name, tiny_recipe("bad-inputs", data=data, train=TRAIN, decode={"max_len_offset": 10}))


def _head(n: int) -> str:
    with gzip.open(CORPORA / "train.tsv.gz", "rt", encoding="utf-8") as f:
        return "".join(itertools.islice(f, n))  # short sentences come first


def _texts(n: int) -> list[str]:
    return [s for line in _head(n).splitlines() for s in line.split("\t")[:2]]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bad-inputs")
    recipe(folder, str(write(folder / "train.tsv", _head(3000))))
    return folder


@pytest.fixture(scope="module")
def run(root: Path) -> Path:
    """A run as `tfm train` leaves it, with random weights: recipe.yaml, tokenizer.json (400 tokens), a checkpoint
    at step 10 and model.safetensors (d_model 32, 1+1 layers, max_positions 64)."""
    out = root / "run"
    out.mkdir()
    shutil.copy(root / "recipe.yaml", out / "recipe.yaml")
    tok = train_tokenizer(_texts(3000), vocab_size=400)
    tok.save(out / "tokenizer.json")
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=tok.vocab_size, d_model=32, d_ff=64, n_heads=2, n_enc_layers=1, n_dec_layers=1,
        max_positions=64, pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id,
    )
    state = weights_state(Transformer(config))
    save_weights(checkpoint_path(out, 10), state, config, tok.sha256, 10)
    save_weights(out / FINAL, state, config, tok.sha256, 10)
    return out


@pytest.fixture
def copy(run: Path, tmp_path: Path) -> Path:
    """A copy of the run, for a test to damage."""
    return Path(shutil.copytree(run, tmp_path / "run"))


def translate(model: Path, *args: str, stdin: bytes | str | None = None, timeout: int = 120):
    return tfm("translate", "--model", str(model), "--device", "cpu", *args, stdin=stdin, check=False, timeout=timeout)


# ---- 1-4: recipes: YAML syntax, unknown keys, wrong types, values out of range -----------------------------
# A recipe with one problem gets one line, `Error: FILE: PROBLEM`; several are listed under one head line
# (test_cli.py::test_bad_recipe_lists_every_problem).


def _bad_recipe(tmp_path: Path, text: str | bytes, expected: str) -> None:
    path = write(tmp_path / "bad.yaml", text)
    out = tmp_path / "out"
    proc = tfm("train", str(path), "--out", str(out), "--device", "cpu", check=False)
    line = error_line(proc)
    assert line.startswith(f"Error: {path}: "), line
    assert expected in line, f"{expected!r} not in {line!r}"
    assert proc.stdout == "" and not out.exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the problem is found on line 5, but the key without its colon is on line 4: both are named
        (
            "name: bad\nmodel:\n  d_model: 32\n  n_heads 4\n  dropout: 0.1\n",
            "invalid YAML at line 5, column 3: could not find expected ':' (while scanning a simple key at line 4, column 3)",
        ),
        (
            "name: bad\nmodel:\n\td_model: 32\n",
            "invalid YAML at line 3, column 1: found character '\\t' that cannot start any token (while scanning for the "
            "next token); use spaces, not tabs",
        ),
        # a second ': ' on a line was only 'mapping values are not allowed here': a value to quote, a section's key
        # written on its line, or a key indented deeper than the one above it
        (
            "name: bad\ndescription: Tatoeba: the small set  # fr-en\n",
            "invalid YAML at line 2, column 21: mapping values are not allowed here; a value that holds ': ' must be "
            'in quotes, e.g. description: "Tatoeba: the small set"',
        ),
        (
            "name: bad\ntrain: max_steps: 5\n",
            "mapping values are not allowed here; a section's keys go on the lines below it, indented (or inline: "
            "train: {max_steps: 5})",
        ),
        (
            "name: bad\ntrain:\n  max_steps: 5\n   seed: 3\n",
            "invalid YAML at line 4, column 8: mapping values are not allowed here; this key is indented more than the "
            "keys above it",
        ),
        (
            'name: bad\ndescription: "unclosed\nmodel:\n  d_model: 32\n',
            "found unexpected end of stream (while scanning a quoted scalar at line 2, column 14)",
        ),
        ("name: bad\ntrain:\n  betas: [0.9, 0.98\n  eps: 1.0e-9\n", "invalid YAML at line 4, column 6: expected ',' or ']'"),
        (b"name: bad\n\x00\n", "invalid YAML at line 2: control character 0x00, which YAML does not allow"),
        (b"name: bad\ndescription: caf\xe9\n", "is not UTF-8 text (bad byte 0xe9 at line 2, column 17); save it as UTF-8"),
    ],
    ids=["missing-colon", "tab-indent", "colon-in-value", "section-on-one-line", "over-indented", "unclosed-quote",
         "unclosed-list", "nul-byte", "latin1"],
)
def test_yaml_syntax_error_names_the_line(tmp_path: Path, text: str | bytes, expected: str) -> None:
    _bad_recipe(tmp_path, text, expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: bad\nmodel:\n  d_modle: 32\n", "model.d_modle is not a recipe key; did you mean model.d_model?"),
        ("name: bad\ntrian:\n  max_steps: 5\n", "trian is not a recipe key; did you mean train?"),
        ("name: bad\ntrain.max_steps: 5\n", "train.max_steps is not a recipe key at the top level; nest it: train: {max_steps: ...}"),
    ],
    ids=["in-section", "section", "dotted"],
)
def test_unknown_recipe_key_is_named(tmp_path: Path, text: str, expected: str) -> None:
    _bad_recipe(tmp_path, text, expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: bad\nmodel:\n  d_model: big\n", "model.d_model='big' must be an integer"),
        ("name: bad\ntrain:\n  max_steps: 1e4\n", "train.max_steps='1e4' must be an integer"),  # YAML reads 1e4 as text
        ("name: bad\nmodel:\n  tie_embeddings: 'yes'\n", "model.tie_embeddings='yes' must be true or false"),
        ("name: bad\ndata:\n  train: [a.tsv]\n", "data.train=['a.tsv'] must be one TSV file path or a list of exactly 2 paths"),
        ("name: bad\nmodel: 512\n", "model must be a mapping of keys, not a number"),
    ],
    ids=["int", "int-as-1e4", "bool", "corpus-path", "section"],
)
def test_wrong_type_is_named(tmp_path: Path, text: str, expected: str) -> None:
    _bad_recipe(tmp_path, text, expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: bad\nmodel:\n  dropout: -0.1\n", "model.dropout=-0.1 must be a number in [0, 1)"),
        ("name: bad\nmodel:\n  d_model: 500\n  n_heads: 8\n", "model.d_model=500 must be divisible by model.n_heads=8 (try 496"),
        ("name: bad\ntrain:\n  warmup_steps: 0\n", "train.warmup_steps=0 must be >= 1 (the schedule divides by it"),
        # torch.manual_seed raised an OverflowError (a traceback) after the tokenizer was trained
        ("name: bad\ntrain:\n  seed: 99999999999999999999999\n", "train.seed=99999999999999999999999 must be at most 9,223,372,036,854,775,807"),
    ],
    ids=["negative-dropout", "d_model-by-heads", "warmup-0", "seed-beyond-64-bits"],
)
def test_value_out_of_range_is_named(tmp_path: Path, text: str, expected: str) -> None:
    _bad_recipe(tmp_path, text, expected)


def test_a_bad_override_on_resume_touches_nothing(copy: Path) -> None:
    before = snapshot(copy)
    proc = tfm("train", "--resume", str(copy), "train.warmup_steps=0", "--device", "cpu", check=False)
    line = error_line(proc, "Error: override 'train.warmup_steps=0': train.warmup_steps=0 must be >= 1")
    assert str(copy) not in line  # the run's recipe.yaml holds no such value
    assert snapshot(copy) == before


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["train.max_steps=abc"], "override 'train.max_steps=abc': train.max_steps='abc' must be an integer"),
        (["train.max_stepz=10"], "override 'train.max_stepz=10': train.max_stepz is not a recipe key; did you mean train.max_steps?"),
        (["train.max_steps=-5"], "override 'train.max_steps=-5': train.max_steps=-5 must be a positive integer"),
        (["train.average_last=9"], "override 'train.average_last=9': train.average_last=9 must be at most train.keep_last=2"),
        (["train.max_steps"], "override 'train.max_steps' must look like key=value (e.g. train.max_steps=2000)"),
        (["train=5"], "override 'train=5' must set one key inside train"),
        (["train.max_steps", "=", "5"], "override 'train.max_steps = 5' is 3 words"),
        # given twice, the last one wins: it is the one a problem is blamed on
        (["train.max_steps=5", "train.max_steps=abc"], "override 'train.max_steps=abc': train.max_steps='abc' must be"),
    ],
    ids=["wrong-type", "unknown-key", "out-of-range", "cross-field", "no-equals", "section", "spaced", "given-twice"],
)
def test_a_bad_override_is_blamed_on_the_command_line_not_the_recipe(
    root: Path, overrides: list[str], expected: str
) -> None:
    """`tfm train recipe.yaml train.max_steps=abc` said "recipe.yaml: train.max_steps='abc' must be an integer", a
    value the file does not hold: the line now starts with the override, leaves the file out, and the hint says to
    fix the command."""
    path = root / "recipe.yaml"
    proc = tfm("train", str(path), *overrides, "--dry-run", "--device", "cpu", check=False)
    line = error_line(proc, f"Error: {expected}")
    assert str(path) not in line, line
    assert f"hint: the override is on the command line (key=value after the recipe), not in {path}: correct it in " \
        "the command, or leave it out" in proc.stderr, proc.stderr


def test_problems_of_the_recipe_and_of_an_override_say_which_is_which(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.yaml", "name: bad\nmodel:\n  d_modle: 32\n")
    proc = tfm("train", str(path), "train.max_steps=abc", "--dry-run", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [
        f"Error: {path} has 2 problems:",
        "model.d_modle is not a recipe key; did you mean model.d_model?",
        "override 'train.max_steps=abc': train.max_steps='abc' must be an integer",
        f"hint: the problems starting with 'override' are the command line's (key=value after the recipe): correct "
        f"them in the command; the others are in {path}",
    ], proc.stderr
    proc = tfm("train", str(REPO / "recipes" / "tiny.yaml"), "train.max_steps=abc", "model.d_modle=3", "--dry-run", check=False)
    assert proc.stderr.startswith(f"Error: the overrides given with {REPO / 'recipes' / 'tiny.yaml'} have 2 problems:\n")


# ---- 5-8: corpora: missing, line counts, empty, binary or not UTF-8 ---------------------------------------


def test_missing_file_of_a_corpus_pair_stops_before_the_run_is_created(root: Path, tmp_path: Path) -> None:
    src = write(tmp_path / "dev.fr", "Bonjour.\n")
    missing = tmp_path / "dev.en"
    out = tmp_path / "out"
    path = recipe(tmp_path, str(root / "train.tsv"), dev=f"[{src}, {missing}]")
    proc = tfm("train", str(path), "--out", str(out), "--device", "cpu", check=False)
    error_line(proc, f"data.dev: corpus file {missing} does not exist")
    assert not out.exists()


def test_a_missing_corpus_path_is_named_as_typed_quoted_for_the_shell(root: Path, tmp_path: Path) -> None:
    """`data.train='base.tsv '` was "corpus file base.tsv  does not exist": the space that made it missing unseen."""
    shutil.copy(root / "train.tsv", tmp_path / "my train.tsv")
    proc = tfm("train", str(root / "recipe.yaml"), "data.train='my train.tsv '", "--dry-run", cwd=tmp_path, check=False)
    error_line(proc, "data.train: corpus file 'my train.tsv ' does not exist, but 'my train.tsv' does: drop the white space")
    proc = tfm("train", str(root / "recipe.yaml"), "data.train='no such.tsv'", "--dry-run", cwd=tmp_path, check=False)
    error_line(proc, "data.train: corpus file 'no such.tsv' does not exist: check the path")


def test_source_and_target_files_of_different_lengths(tmp_path: Path) -> None:
    src = write(tmp_path / "train.fr", "Bonjour.\nMerci.\n")
    tgt = write(tmp_path / "train.en", "Hello.\nThanks.\nGood night.\n")
    out = tmp_path / "out"
    proc = tfm("train", str(recipe(tmp_path, f"[{src}, {tgt}]")), "--out", str(out), "--device", "cpu", check=False)
    error_line(proc, f"{src} has 2 lines but {tgt} has 3", f"{tgt}:3 has no counterpart")
    assert nothing_written(out)


def test_an_output_name_too_long_is_refused_before_the_work_and_leaves_no_folders(root: Path, tmp_path: Path) -> None:
    """`--output dir/sub/<300 characters>.en` was refused only by the write at the end, after every sentence was
    translated, and left dir/sub behind (as a full disk did). A name longer than the file system takes, the
    file's (with room for its temporary name) or a folder's on the way, is refused first; a write that fails
    removes the folders it made."""
    from tfm_cli.cli.common import write_output

    long_name = "x" * 250 + ".json"  # fits 255, but not its temporary name (".NAME.XXXXXXXX.tmp")
    proc = tfm("tokenize", "--corpus", str(root / "train.tsv"), "--out", str(tmp_path / "a" / "b" / long_name), check=False)
    error_line(proc, "cannot be written: its name is 255 bytes, and this file system takes 241 at most there")
    proc = tfm("tokenize", "--corpus", str(root / "train.tsv"), "--out", str(tmp_path / ("y" * 300) / "t.json"), check=False)
    error_line(proc, "cannot be written: File name too long")  # (the file system says it: the folder's parent exists)
    proc = tfm("tokenize", "--corpus", str(root / "train.tsv"), "--out", str(tmp_path / "new" / ("y" * 300) / "t.json"), check=False)
    error_line(proc, "cannot be written: the folder name yyyyyyyyyyyyyyyyyyyy... is 300 bytes")
    assert list(tmp_path.iterdir()) == []

    def full(name: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", name)

    with pytest.raises(TfmError, match="could not be written: No space left on device; nothing was written"):
        write_output(tmp_path / "new" / "sub" / "o.en", "--output", full)
    assert list(tmp_path.iterdir()) == []


def test_tokenize_min_frequency_past_64_bits_is_a_usage_error(root: Path, tmp_path: Path) -> None:
    """`--min-frequency 18446744073709551616` was an OverflowError traceback from the tokenizers library; the
    option has the recipe key's bound (a 64-bit integer)."""
    proc = tfm("tokenize", "--corpus", str(root / "train.tsv"), "--min-frequency", str(2**64), "--out",
               str(tmp_path / "t.json"), check=False)
    error_line(proc, "--min-frequency", f"less than or equal to {2**63 - 1}", code=2)
    assert not (tmp_path / "t.json").exists()


def test_a_corpus_on_stdin_is_said_to_be_impossible(tmp_path: Path) -> None:
    """`xzcat c.tsv.xz | tfm tokenize --corpus -` (`-` is stdin to `tfm translate`) was told "--corpus - does not
    exist"; a corpus is read more than once, so it cannot come from stdin, and that is what is said."""
    proc = tfm("tokenize", "--corpus", "-", "--out", str(tmp_path / "t.json"), stdin="Bonjour.\tHello.\n", check=False)
    error_line(proc, "--corpus - would be standard input", "save it to a file first")
    proc = tfm("train", str(recipe(tmp_path, "'-'")), "--dry-run", check=False)
    error_line(proc, "corpus file - would be standard input")


def test_two_tsv_files_given_as_a_pair_are_refused(root: Path, tmp_path: Path) -> None:
    """`data.train: [a.tsv, b.tsv]`, meant as "train on both", was read as a source file and a target file: each
    "source sentence" a whole `source<TAB>target` line of a.tsv, silently. A side whose lines all hold a tab is
    refused, for the dry run and `tfm tokenize` too; a pair of plain files with a tab in one line is not."""
    other = write(tmp_path / "b.tsv", "Merci.\tThanks.\n" * 150)
    out = tmp_path / "out"
    proc = tfm("train", str(recipe(tmp_path, f"[{root / 'train.tsv'}, {other}]")), "--out", str(out), "--device", "cpu", check=False)
    error_line(proc, f"{root / 'train.tsv'}, given as the source file of [source_file, target_file], holds a tab in every "
               "one of its first 100 lines", "(cat a.tsv b.tsv > both.tsv)")
    assert nothing_written(out)
    src, short = write(tmp_path / "a.fr", "Bonjour.\nMerci.\n"), write(tmp_path / "c.tsv", "Hello.\tBonjour.\nThanks.\tMerci.\n")
    proc = tfm("train", str(recipe(tmp_path, f"[{src}, {short}]")), "--dry-run", check=False)
    error_line(proc, f"{short}, given as the target file", "in every one of its first 2 lines")
    proc = tfm("tokenize", "--corpus", str(src), "--corpus", str(short), "--out", str(tmp_path / "t.json"), check=False)
    error_line(proc, f"{short}, given as the target file")
    tgt = write(tmp_path / "a.en", "Hello\tthere.\nThanks.\n")  # one tab, in one sentence: read as it is
    assert [p[1:] for p in read_pairs([src, tgt])] == [("Bonjour.", "Hello\tthere."), ("Merci.", "Thanks.")]


def test_a_corpus_without_a_single_full_pair(tmp_path: Path) -> None:
    """Every line has an empty side: not one pair to learn from, said with the file (it was 'cannot train a
    tokenizer: the training texts are empty', no file named)."""
    corpus = write(tmp_path / "train.tsv", "\tHello.\nBonjour.\t\nSalut.\t\u200b\u00ad \n")  # the last: invisible
    out = tmp_path / "out"
    proc = tfm("train", str(recipe(tmp_path, str(corpus))), "--out", str(out), "--device", "cpu", check=False)
    error_line(proc, f"{corpus} has 3 lines but none with both a source and a target")
    assert nothing_written(out)
    src, tgt = write(tmp_path / "a.fr", "\nBonjour.\n"), write(tmp_path / "a.en", "Hello.\n \u200b\n")
    with pytest.raises(CorpusError) as err:
        list(read_pairs([src, tgt]))
    one_line(err.value, f"{src} and {tgt} have 2 lines but no pair with both a source and a target sentence")


@pytest.mark.parametrize("kind", ["binary", "latin1-in-target"])
def test_binary_or_not_utf8_corpus_names_file_and_line(run: Path, tmp_path: Path, kind: str) -> None:
    if kind == "binary":  # a model given as the corpus (it was read as text up to the first bad byte)
        corpus = [str(shutil.copy(run / "model.safetensors", tmp_path / "train.tsv"))]
        expected = [f"{corpus[0]}:", ": a NUL byte at byte", "binary file"]
    else:  # line 3 of the target file of a pair
        src = write(tmp_path / "train.fr", "Bonjour.\nMerci.\nUn café.\n")
        tgt = write(tmp_path / "train.en", b"Hello.\nThanks.\nA caf\xe9.\n")
        corpus = [str(src), str(tgt)]
        expected = [f"{tgt}:3: invalid UTF-8 at byte 6 of the line", "iconv -f cp1252 -t utf-8"]
    out = tmp_path / "tokenizer.json"
    args = [a for path in corpus for a in ("--corpus", path)]
    proc = tfm("tokenize", *args, "--vocab-size", "300", "--out", str(out), check=False)
    error_line(proc, *expected)
    assert not out.exists()


PAIRS = b"Bonjour.\tHello.\nMerci.\tThanks.\n"


def _tar(gzipped: bool) -> bytes:
    """A tar archive (gzip-compressed: a .tgz, as WMT and OPUS ship corpora) holding c.tsv."""
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz" if gzipped else "w") as archive:
        entry = tarfile.TarInfo("c.tsv")
        entry.size = len(PAIRS)
        archive.addfile(entry, io.BytesIO(PAIRS))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"(\xb5/\xfd" + bytes(12), ":1: zstd-compressed data, not text: tfm reads plain text, or text compressed with gzip, xz "
         "or bzip2; decompress it first (e.g. unzstd c.tsv)"),
        # compressed text that is no text: decompressed first, then said as what it is
        (lzma.compress(PAIRS.decode().encode("utf-16")), ":1: UTF-16 text, not UTF-8: re-encode the file (e.g. xzcat c.tsv | iconv -f utf-16 -t utf-8 | xz > "),
        (bz2.compress(lzma.compress(PAIRS)), ":1: compressed twice: decompress it once (e.g. bzcat c.tsv > "),
        (PAIRS.decode().encode("utf-16"), ":1: UTF-16 text, not UTF-8: re-encode the file (e.g. iconv -f utf-16 -t utf-8 c.tsv"),
        (PAIRS.decode().encode("utf-16-be"), ":1: a NUL byte at byte 1 of the line: a binary file (or UTF-16), not UTF-8 text"),
        (b"Bonjour.\tHello.\nMer\x00ci.\tThanks.\n", ":2: a NUL byte at byte 4 of the line"),  # was read as text
        # a PDF or an image was "invalid UTF-8 ... iconv -f cp1252", random bytes "a carriage return inside the line"
        (b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n", ":1: a PDF document, not text: give the corpus as UTF-8 text, plain or compressed"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", ":1: a PNG image, not text"),
        (bytes([7, 200, 27, 13, 65, 14, 66, 3, 1, 9, 67, 68, 2, 69, 70, 71, 72, 5, 6]) + b"\n", ":1: binary data, not text (8 control bytes in its 19)"),
        # "a NUL byte at byte 15 of the line: a binary file (or UTF-16)", for a .tgz and a .tar and a gzip in a gzip
        (_tar(gzipped=True), ":1: a tar archive (gzip-compressed), not a text file: extract it (tar xzf c.tsv) and give"),
        (_tar(gzipped=False), ":1: a tar archive, not a text file: extract it (tar xf c.tsv)"),
        (gzip.compress(gzip.compress(PAIRS)), ":1: compressed twice: decompress it once (e.g. zcat c.tsv > "),
    ],
    ids=["zstd", "xz-utf-16", "bzip2-of-xz", "utf-16", "utf-16-without-bom", "nul-in-line-2", "pdf", "png", "control-bytes", "tgz", "tar",
         "gzip-twice"],
)
def test_corpus_that_is_not_text_says_what_it_is(tmp_path: Path, data: bytes, expected: str) -> None:
    corpus = write(tmp_path / "c.tsv", data)
    with pytest.raises(CorpusError) as err:
        list(read_pairs(corpus))
    one_line(err.value, f"{corpus}{expected.replace(' c.tsv', f' {corpus}')}")


_RECORDS = [{"id": "17", "fr": "Déjà vu.", "en": "Hello.", "n": 1}, {"id": "18", "fr": "Merci.", "en": "Thanks.", "n": 2}]


@pytest.mark.parametrize(
    ("name", "data", "expected"),
    [
        ("c.jsonl", "".join(json.dumps(r) + "\n" for r in _RECORDS).encode(), "a JSON record (JSON Lines?), not source<TAB>target"),
        # as Hugging Face's datasets write a translation dataset (to_json), a string id first (opus_books): the
        # command took [.id, .translation.fr], and tfm trained ids to French
        ("c.json", "".join(json.dumps({"id": r["id"], "translation": {k: r[k] for k in ("fr", "en")}}, ensure_ascii=False) + "\n"
                           for r in _RECORDS).encode(), "a JSON record (JSON Lines?)"),
        ("c.tsv", "".join(json.dumps(r) + "\n" for r in _RECORDS).encode(), "a JSON record"),  # its copy: converted-c.tsv
        ("c.csv", b'fr,en\n"D\xc3\xa9j\xc3\xa0 vu.","Hello."\n"Merci.",Thanks.\n', "comma-separated (CSV), not tab-separated"),
        ("c.csv.gz", gzip.compress(b'fr,en\n"D\xc3\xa9j\xc3\xa0 vu.","Hello."\nMerci.,Thanks.\n'), "comma-separated (CSV)"),
    ],
    ids=["jsonl", "hf-datasets-json", "jsonl-named-tsv", "csv", "csv-gzip"],
)
@pytest.mark.parametrize("taken", [False, True])
def test_a_corpus_in_another_format_is_named_with_a_command_that_converts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, data: bytes, expected: str, taken: bool
) -> None:
    """JSON Lines (Hugging Face's datasets), CSV, TMX: each was "the line has no tab", true of its first line and no
    help. Now the message says what the file is and, where a standard tool converts it, the command; run as printed
    (from the directory tfm ran in), it writes a TSV that tfm reads, the same pairs in order, and never over a file
    that is there (`taken`: a c.tsv beside it, which it replaced)."""
    (tmp_path / "data").mkdir()
    write(tmp_path / "data" / name, data)
    if taken:
        for mine in {"c.tsv", "converted-c.tsv"} - {name}:
            write(tmp_path / "data" / mine, b"mine\tkept\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CorpusError) as err:
        list(read_pairs(f"data/{name}"))
    message = one_line(err.value, f"data/{name}:1: {expected}")
    command = re.search(r", e\.g\. (.*?) > (\S+)(?: \(source key first\))?$", message)
    assert command, message
    if "jq " in command.group(1) and not shutil.which("jq"):
        pytest.skip("jq is not installed: the command's result was not checked")
    if name.startswith("c.csv"):  # the header line, which the message says to remove
        subprocess.run(f"{command.group(1)} | tail -n +2 > {command.group(2)}", shell=True, check=True)
    else:
        subprocess.run(f"{command.group(1)} > {command.group(2)}", shell=True, check=True)
    converted = Path(command.group(2))
    assert converted.name == ("converted-2-c.tsv" if taken else "converted-c.tsv" if name == "c.tsv" else "c.tsv")
    assert [(s, t) for _, s, t in read_pairs(converted)] == [("Déjà vu.", "Hello."), ("Merci.", "Thanks.")]
    if taken:
        assert all((tmp_path / "data" / f).read_bytes() == b"mine\tkept\n" for f in ("c.tsv", "converted-c.tsv") if f != name)


@pytest.mark.parametrize(
    ("record", "fields"),
    [
        ({"meta": {"lang": "en", "url": "x"}, "src": "Hi.", "tgt": "Salut."}, ".src, .tgt"),  # a nested dict of metadata
        ({"en": "2", "fr": "deux", "source": "tatoeba"}, ".en, .fr"),  # sentences that are numbers are sentences
        ({"id": 5, "translation": {"en": "10", "fr": "dix"}}, ".translation.en, .translation.fr"),
        ({"sentence_id": "7", "en": "Hi.", "fr": "Salut."}, ".en, .fr"),
    ],
)
def test_the_jq_of_a_json_record_takes_its_pair(tmp_path: Path, record: dict, fields: str) -> None:
    corpus = write(tmp_path / "c.jsonl", (json.dumps(record) + "\n").encode())
    with pytest.raises(CorpusError) as err:
        list(read_pairs(corpus))
    one_line(err.value, f"jq -r '[{fields}] | join(\"\\t\")'")


@pytest.mark.parametrize(
    "first_line",
    ['<?xml version="1.0" encoding="UTF-8"?>', '<tmx version="1.4">', '<srcset setid="newstest2014" srclang="any">',
     "<!DOCTYPE tmx SYSTEM \"tmx14.dtd\">"],
)
def test_a_tmx_or_sgm_file_is_named_markup(tmp_path: Path, first_line: str) -> None:
    corpus = write(tmp_path / "c.tmx", f"{first_line}\n<body>\n".encode())
    with pytest.raises(CorpusError) as err:
        list(read_pairs(corpus))
    one_line(err.value, f"{corpus}:1: XML or SGML markup (a TMX, XLIFF or SGM file?), not source<TAB>target lines")


def test_a_first_line_without_a_tab_in_a_tsv_is_still_said_so(tmp_path: Path) -> None:
    """Only a file that shows another format from its first line is named one: a sentence in angle brackets or
    braces further down, or a first line of prose with a comma, is "the line has no tab" as before."""
    for name, data, line in [("c.tsv", b"Bonjour.\tHello.\n<b>Merci.</b>\n", 2), ("c.tsv", b"{Merci.}\n", 1),
                             ("c.tsv", b"Oui, merci.\n", 1)]:
        corpus = write(tmp_path / name, data)
        with pytest.raises(CorpusError) as err:
            list(read_pairs(corpus))
        one_line(err.value, f"{corpus}:{line}: the line has no tab: each line must be source<TAB>target")


@pytest.mark.parametrize("kind", ["gzip", "xz", "bzip2"])
def test_a_compressed_corpus_is_read_as_its_text(tmp_path: Path, kind: str) -> None:
    """gzip, xz and bzip2 files (by their bytes, whatever their name) are read as the text they hold, streams one
    after another (`cat a.xz b.xz`) as one file, as zcat, xzcat and bzcat read them; one cut short, or with text
    appended after its compressed data (which Python's LZMAFile and BZ2File drop without a word), is one line."""
    compress = {"gzip": gzip.compress, "xz": lzma.compress, "bzip2": bz2.compress}[kind]
    text = "".join(f"Phrase {i}.\tSentence {i}.\n" for i in range(3000)).encode()
    plain = [(s, t) for _, s, t in read_pairs(write(tmp_path / "plain.tsv", text))]
    assert [(s, t) for _, s, t in read_pairs(write(tmp_path / "c.data", compress(text)))] == plain
    assert [(s, t) for _, s, t in read_pairs(write(tmp_path / "two", compress(text) + compress(text)))] == plain * 2
    if kind == "xz":  # null bytes after a stream are the format's own padding (xzcat reads them so)
        assert [(s, t) for _, s, t in read_pairs(write(tmp_path / "padded", compress(text) + bytes(8)))] == plain
    packed = compress(text)
    for name, data, why in (("cut", packed[: len(packed) // 2], "cannot read the file ("),
                            ("appended", packed + b"Oui.\tYes.\n", "" if kind == "gzip" else "cannot read the file (bytes after the end")):
        corpus = write(tmp_path / name, data)
        with pytest.raises(CorpusError) as err:
            list(read_pairs(corpus))
        one_line(err.value, f"{corpus}: {why}")


def test_text_appended_to_a_gzip_file_is_named_with_the_line_count(tmp_path: Path) -> None:
    """`echo "a<TAB>b" >> train.tsv.gz` leaves bytes after the gzip data that are no second member: "cannot read
    the file (Not a gzipped file (b'a\\t')); is it a complete, uncompressed or gzip text file?". Now it says what
    is there, and the zcat it offers keeps the compressed lines (gzip warns of the rest and exits 2)."""
    corpus = write(tmp_path / "my c.tsv.gz", gzip.compress(b"Bonjour.\tHello.\nMerci.\tThanks.\n") + b"Oui.\tYes.\n")
    with pytest.raises(CorpusError) as err:
        list(read_pairs(corpus))
    message = one_line(err.value, f"{corpus}: after its compressed data (2 lines) the file goes on with bytes that are not gzip")
    command = re.search(r"\((zcat .*?) writes the lines of the compressed part", message)
    assert command, message
    subprocess.run(command.group(1), shell=True, check=False, stderr=subprocess.DEVNULL)
    part = tmp_path / "compressed-part-my c.tsv"  # plain text, named so (not .gz)
    assert [(s, t) for _, s, t in read_pairs(part)] == [("Bonjour.", "Hello."), ("Merci.", "Thanks.")]
    assert not part.read_bytes().startswith(b"\x1f\x8b")


_UTF16 = "Déjà vu.\tHello.\nMerci.\tThanks.\n".encode("utf-16")
_LATIN1 = "Déjà vu.\tHello.\nMerci.\tThanks.\n".encode("latin-1")
_CR = "Déjà vu.\tHello.\rMerci.\tThanks.\r".encode()
# Windows' Western encoding: Latin-1's letters, and ’ € – where Latin-1 has control characters (`iconv -f latin1`,
# the fix once offered, turned them into U+0092, U+0080, U+0096, which tfm then read without a word)
_CP1252 = "Déjà vu.\tHello.\nMerci.\tThanks.\n".replace("vu.", "vu’ 5 € – «oui».").encode("cp1252")


@pytest.mark.parametrize(
    ("data", "name", "fixed"),
    [
        (_UTF16, "my corpus.tsv", "utf8-my corpus.tsv"),
        (_LATIN1, "my corpus.tsv", "utf8-my corpus.tsv"),
        (_CP1252, "my corpus.tsv", "utf8-my corpus.tsv"),
        (_CR, "my corpus.tsv", "fixed-my corpus.tsv"),
        # gzip is told by the content, as the reader tells it, not by the name: iconv ran on compressed bytes, and
        # zcat was offered a plain file named .gz ("not in gzip format"), cat a gzip file named otherwise
        (gzip.compress(_UTF16), "my corpus.tsv.gz", "utf8-my corpus.tsv.gz"),
        (gzip.compress(_LATIN1), "my corpus.tsv.gz", "utf8-my corpus.tsv.gz"),
        (gzip.compress(_CR), "my corpus.tsv", "fixed-my corpus.tsv"),
        (_CR, "my corpus.tsv.gz", "fixed-my corpus.tsv"),
        (lzma.compress(_LATIN1), "my corpus.tsv.xz", "utf8-my corpus.tsv.xz"),
        (bz2.compress(_CR), "my corpus.tsv.bz2", "fixed-my corpus.tsv"),
    ],
    ids=["utf-16", "latin-1", "windows-1252", "cr-only", "utf-16-gzip", "latin-1-gzip", "cr-only-gzip-named-tsv", "cr-only-plain-named-gz",
         "latin-1-xz", "cr-only-bzip2"],
)
def test_suggested_fix_command_works_from_where_tfm_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes, name: str, fixed: str
) -> None:
    """The message's command names the file as it was given (not its bare name, which is not there from the
    directory tfm ran in), quoted for the shell; run as printed, it writes a corpus tfm reads."""
    (tmp_path / "data").mkdir()
    corpus = write(tmp_path / "data" / name, data)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CorpusError) as err:
        list(read_pairs(f"data/{name}"))  # as given on a command line, relative to the working directory
    command = re.search(r"\(e\.g\. (.*?)(?:, if it is Western European text.*)?\)$|convert them \((.*?)\);", str(err.value))
    assert command, str(err.value)
    subprocess.run(command.group(1) or command.group(2), shell=True, check=True)
    first = "Déjà vu’ 5 € – «oui»." if data == _CP1252 else "Déjà vu."
    assert [(s, t) for _, s, t in read_pairs(corpus.parent / fixed)] == [(first, "Hello."), ("Merci.", "Thanks.")]


@pytest.mark.parametrize(
    ("text", "encoding"),
    [("учитель и студент.", "cp1251"), ("我喜欢苹果。", "gb18030"), ("私は学生です。", "shift_jis"), ("저는 학생입니다.", "euc-kr"),
     ("İstanbul'da öğrenci.", "cp1254"), ("Może łódź jest zła.", "cp1250"), ("Да.", "cp1251"), ("καλημέρα κόσμε.", "cp1253")],
)
def test_a_file_in_another_encoding_is_not_told_to_read_as_cp1252(tmp_path: Path, text: str, encoding: str) -> None:
    """Every file that was not UTF-8 got `iconv -f cp1252`: on a Russian (cp1251), Chinese or Japanese file it exits 0
    and writes wrong letters ("ó÷èòåëü"), which tfm then trained on. Such a line gets `-f ENCODING` and the usual
    encodings by script; the command printed with the file's own encoding in place gives the text back."""
    corpus = write(tmp_path / "c.tsv", f"Hello.\t{text}\n".encode(encoding))
    with pytest.raises(CorpusError) as err:
        list(read_pairs(corpus))
    message = str(err.value)
    one_line(err.value, f"{corpus}:1: invalid UTF-8 at byte")
    assert "iconv -f ENCODING -t utf-8" in message and "cp1252" not in message.split("where ENCODING")[0], message
    command = re.search(r"\(e\.g\. (.*?), where ENCODING", message).group(1).replace("ENCODING", encoding)
    subprocess.run(command, shell=True, check=True, cwd=tmp_path)
    assert [(s, t) for _, s, t in read_pairs(tmp_path / "utf8-c.tsv")] == [("Hello.", text)]


def test_central_european_text_that_reads_as_western_is_told_its_encoding_too(tmp_path: Path) -> None:
    """Czech ě, Polish ń and ę in cp1250 read as ì, ñ and ê in cp1252, Western letters: the guess cannot tell, so
    the message names cp1250 beside the cp1252 command."""
    corpus = write(tmp_path / "cz.tsv", "Děkuji moc.\tThank you.\nDzień dobry, proszę.\tGood morning.\n".encode("cp1250"))
    with pytest.raises(CorpusError) as err:
        list(read_pairs(corpus))
    one_line(err.value, "iconv -f cp1252 -t utf-8", "if it is Western European text; else -f its own encoding: cp1250 for Central European")


def test_stdin_in_another_encoding_is_not_told_to_read_as_cp1252(run: Path) -> None:
    russian = translate(run, stdin="Bonjour.\nучитель и студент.\n".encode("cp1251"))
    error_line(russian, "stdin line 2: invalid UTF-8 at byte 1")
    assert "hint: re-encode the input as UTF-8, e.g. iconv -f ENCODING -t utf-8, where ENCODING is the file's own: cp1251 for Cyrillic" in russian.stderr
    french = translate(run, stdin="Bonjour.\nDéjà vu.\n".encode("cp1252"))
    error_line(french, "stdin line 2: invalid UTF-8 at byte 2")
    assert "hint: re-encode the input as UTF-8, e.g. iconv -f cp1252 -t utf-8, if it is Western European text; else -f its own encoding: cp1250" in french.stderr, french.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="symbolic links")
def test_a_broken_link_as_the_corpus_is_said_to_be_one(tmp_path: Path) -> None:
    """A link to a file that was moved (or a loop of links) was "does not exist", a file the user can see there."""
    broken = tmp_path / "train.tsv"
    broken.symlink_to(tmp_path / "moved" / "train.tsv")
    loop = tmp_path / "loop.tsv"
    loop.symlink_to(loop)
    for path, target in ((broken, tmp_path / "moved" / "train.tsv"), (loop, loop)):
        with pytest.raises(CorpusError) as err:
            list(read_pairs(path))
        one_line(err.value, f"corpus file {path} is a symbolic link to {target}, which does not exist")
    proc = tfm("tokenize", "--corpus", str(broken), "--vocab-size", "300", "--out", str(tmp_path / "t.json"), check=False)
    error_line(proc, f"--corpus {broken} is a symbolic link to ")


def test_text_that_looks_like_a_compression_header_is_still_text(tmp_path: Path) -> None:
    corpus = write(tmp_path / "c.tsv", "BZh9\tBZh9\nPK\tPK\n")
    assert [(s, t) for _, s, t in read_pairs(corpus)] == [("BZh9", "BZh9"), ("PK", "PK")]


# ---- 9-12: models: tokenizer, truncated or corrupt weights, another architecture, no such path ----------------


@pytest.mark.skipif(sys.platform != "linux", reason="names that are not UTF-8: a Linux file system keeps their bytes")
def test_a_model_in_a_folder_whose_name_is_not_utf8(run: Path, tmp_path: Path) -> None:
    """A run in a folder named in Latin-1 (`b\xe9d/`, from a shared disk) was "not a readable safetensors file,
    or is truncated or corrupt", with the hint to copy it again: the safetensors library takes only UTF-8 names.
    Such a model is read now (translate); an export, whose files record the path in UTF-8, refuses it in one line
    naming a way on, and so it does for an --out of such a name, leaving nothing behind."""
    odd = Path(os.fsdecode(bytes(tmp_path) + b"/b\xe9d"))
    shutil.copytree(run, odd)
    proc = translate(odd, "--json", "Bonjour.")
    assert proc.returncode == 0 and json.loads(proc.stdout)["source"] == "Bonjour.", proc.stderr
    proc = tfm("export", str(odd), "--format", "release", "--out", str(tmp_path / "exp"), check=False)
    error_line(proc, "has a name that is not UTF-8", "model card and tfm-export.json record")
    assert "ln -s" in proc.stderr and not (tmp_path / "exp").exists()
    out = Path(os.fsdecode(bytes(tmp_path) + b"/exp\xe9"))
    proc = tfm("export", str(run), "--format", "release", "--out", str(out), check=False)
    error_line(proc, "the export folder", "has a name that is not UTF-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == [odd.name]


def test_a_run_without_its_final_model_says_which_checkpoint_translates(run: Path, tmp_path: Path) -> None:
    """`tfm translate -m RUN` (and inspect-attn) on a run still training used its newest checkpoint without a
    word, so a score taken mid-run did not say which step it measured. It names the checkpoint; a run with its
    final model, or a weights file named outright, is used without a note."""
    training = Path(shutil.copytree(run, tmp_path / "training"))
    (training / FINAL).unlink()
    said = f"using {training / 'checkpoints' / 'step-00000010.safetensors'}: {training} has no final model yet"
    checkpoint = translate(training, "Bonjour.")
    assert checkpoint.returncode == 0 and said in checkpoint.stderr and checkpoint.stdout.count("\n") == 1, checkpoint.stderr
    assert said in tfm("inspect-attn", "--model", str(training), "--device", "cpu", "Bonjour.", "--summary").stderr
    for model in (run, training / "checkpoints" / "step-00000010.safetensors"):  # used, without the note
        proc = translate(model, "Bonjour.")
        assert proc.returncode == 0 and proc.stdout.count("\n") == 1 and "no final model" not in proc.stderr, proc.stderr


def test_tokenizer_that_does_not_match_the_checkpoint(copy: Path) -> None:
    """Another vocabulary (the same size: test_cli.py; another size through the API: test_translator.py)."""
    train_tokenizer(_texts(300), vocab_size=300).save(copy / "tokenizer.json")
    before = snapshot(copy)
    proc = translate(copy, "Bonjour.")
    error_line(proc, f"{copy / 'tokenizer.json'} does not match {copy / 'model.safetensors'} (tokenizer hash")
    assert "hint: put back the tokenizer.json this model was trained with" in proc.stderr
    assert proc.stdout == "" and snapshot(copy) == before


def test_tokenizer_json_that_is_a_directory(copy: Path) -> None:
    """Was reported as missing, which sends the user looking for a file that is there."""
    (copy / "tokenizer.json").unlink()
    (copy / "tokenizer.json").mkdir()
    proc = translate(copy, "Bonjour.")
    error_line(proc, f"{copy / 'tokenizer.json'} is not a file (a directory?)")
    assert "is missing" not in proc.stderr and proc.stdout == ""


def test_weights_without_the_tokenizer_hash_are_not_tfm_weights(copy: Path) -> None:
    """tfm writes the hash into every weights file; one without it could sit beside any tokenizer unchecked."""
    weights = copy / "model.safetensors"
    metadata = read_metadata(weights)
    del metadata["tokenizer_sha256"]
    save_file(load_file(str(weights)), str(weights), metadata=metadata)
    proc = translate(copy, "Bonjour.")
    error_line(proc, f"{weights} has no tfm metadata (config, tokenizer hash)")
    assert proc.stdout == ""


@pytest.mark.parametrize("given", ["file", "run"])
def test_truncated_or_corrupt_safetensors(copy: Path, given: str) -> None:
    """Truncated (an interrupted copy), given as --model FILE; a corrupt header, in a run directory."""
    weights = copy / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) * 6 // 10] if given == "file" else data[:8] + b"x" * 16 + data[24:])
    before = snapshot(copy)
    proc = translate(weights if given == "file" else copy, "Bonjour.")
    error_line(proc, f"{weights} is not a readable safetensors file, or is truncated or corrupt (")
    assert "checkpoints/step-*.safetensors" in proc.stderr  # the hint names what may still be intact
    assert proc.stdout == "" and snapshot(copy) == before


def _zero_bytes_inside_a_tensor(weights: Path) -> None:
    """Sixteen bytes of `weights`' tensor data set to zero, as a bad disk block or a broken copy does: the file
    keeps its size and header, every number stays finite."""
    data = bytearray(weights.read_bytes())
    start = 8 + int.from_bytes(data[:8], "little")
    middle = start + (len(data) - start) // 2
    assert any(data[middle:middle + 16])  # random weights: not zero already
    data[middle:middle + 16] = bytes(16)
    weights.write_bytes(bytes(data))


@pytest.mark.parametrize("given", ["run", "checkpoint"])
def test_weights_damaged_after_they_were_written_are_refused_by_name(copy: Path, given: str) -> None:
    """Bytes zeroed inside the tensor data (the size, the header and every number still valid) loaded without a
    word and translated with whatever weights were left: exit 0, garbage out. tfm writes a CRC-32 of the tensors
    into the metadata, and every read checks it: translate, inspect-attn, export and the API refuse the file by
    name, and leave it as it is."""
    weights = copy / FINAL if given == "run" else checkpoint_path(copy, 10)
    intact = translate(copy if given == "run" else weights, "Bonjour.")
    assert intact.returncode == 0, intact.stderr
    _zero_bytes_inside_a_tensor(weights)
    before = snapshot(copy)
    model = copy if given == "run" else weights
    for proc in (translate(model, "Bonjour."),
                 tfm("inspect-attn", "--model", str(model), "--device", "cpu", "Bonjour.", "--summary", check=False),
                 tfm("export", str(model), "--format", "release", "--out", str(copy.parent / "release"), check=False)):
        error_line(proc, f"{weights} is damaged: its tensors no longer match the CRC-32 saved with them (", "or a script of yours, that kept its metadata: write their new one as weights_crc32")
        assert proc.stdout == ""
        assert ("`tfm train --resume" in proc.stderr) is (given == "checkpoint"), proc.stderr
    with pytest.raises(CheckpointError, match="is damaged") as caught:
        Translator.load(model, device="cpu")
    one_line(caught.value, str(weights))
    assert snapshot(copy) == before and not (copy.parent / "release").exists()


def test_weights_written_before_the_crc_load_as_before(copy: Path) -> None:
    """Weights saved without `weights_crc32` (by tfm before it was written) are read unchecked, as they were."""
    weights = copy / FINAL
    plain = translate(copy, "Bonjour.")
    metadata = read_metadata(weights)
    del metadata[WEIGHTS_CRC]
    save_file(load_file(str(weights)), str(weights), metadata=metadata)
    proc = translate(copy, "Bonjour.")
    assert proc.returncode == 0 and proc.stdout == plain.stdout, proc.stderr


@pytest.mark.parametrize("kind", ["shapes", "foreign"])
def test_weights_of_another_architecture(copy: Path, kind: str) -> None:
    weights = copy / "model.safetensors"
    metadata, state = read_metadata(weights), load_file(str(weights))
    if kind == "shapes":  # the metadata's config says d_ff 128, the weights have 64 (was a torch traceback)
        config = ModelConfig.from_dict(json.loads(metadata["config"]))
        save_weights(weights, state, dataclasses.replace(config, d_ff=128), metadata["tokenizer_sha256"], 10)
        expected = [f"{weights} does not fit the model config: ", "is float32 [", "the config needs float32 [", "128"]
    else:  # written by some other program: no tfm metadata
        save_file(state, str(weights))
        expected = [f"{weights} has no tfm metadata"]
    before = snapshot(copy)
    proc = translate(copy, "Bonjour.")
    error_line(proc, *expected)
    assert proc.stdout == "" and snapshot(copy) == before


def test_weights_whose_scores_are_nan_are_named_not_translated_as_empty(copy: Path, tmp_path: Path) -> None:
    """A damaged file whose numbers are all finite (the loader's NaN/inf check passes it) but overflow in the first
    products: every score NaN. tfm translate printed an empty translation for every line (score 0.0, exit 0) and
    the release export's "same weights" check took max(0.0, nan) = 0.0 as equal, and put the run's BLEU on its card."""
    weights = copy / "model.safetensors"
    metadata, state = read_metadata(weights), load_file(str(weights))
    state["encoder_layers.0.ffn.w_1.weight"][0, 0] = 3e38
    save_weights(weights, state, ModelConfig.from_dict(json.loads(metadata["config"])), metadata["tokenizer_sha256"], 10)
    before = snapshot(copy)
    for args in ((), ("--greedy",), ("--json", "--n-best", "2")):
        proc = translate(copy, "Bonjour.", *args)
        error_line(proc, f"{weights}: the model's scores are not finite numbers (NaN or infinite): its weights are damaged")
        assert proc.stdout == "", args
    out = tmp_path / "release"
    proc = tfm("export", str(copy), "--format", "release", "--verify-lines", "2", "--out", str(out), check=False)
    error_line(proc, f"{weights}: the model's scores are not finite numbers (NaN or infinite)")
    assert not out.exists() and snapshot(copy) == before


def test_files_of_another_kind_given_as_the_model_are_named_for_what_they_are(copy: Path) -> None:
    """A trainer state, an ONNX graph, a tokenizer or a run's checkpoints folder given as --model were all called
    "not a readable safetensors file, or truncated or corrupt ... copy a damaged file again": intact files, of the
    wrong kind. Each is now said to be what it is, with what to give instead."""
    state = copy / "checkpoints" / "step-00000010.state.pt"
    state.write_bytes(b"PK\x03\x04 a torch.save zip")
    graph = copy / "export" / "decoder.onnx"
    graph.parent.mkdir()
    graph.write_bytes(b"\x08\x07 an onnx protobuf")
    evaluated = copy / "checkpoints" / "step-00000010.evaluated.json"
    evaluated.write_text("{}", encoding="utf-8")
    before = snapshot(copy)
    cases = [
        (state, ["is a checkpoint's trainer state", "not its weights"], "step-00000010.safetensors"),
        (graph, ["is one graph of an ONNX export"], f"give the export directory ({graph.parent})"),
        (copy / "tokenizer.json", ["is a JSON file, not a model's weights"], f"give the run directory it belongs to ({copy})"),
        # a file of checkpoints/: its run, not checkpoints/ (which is refused as no run)
        (evaluated, ["is a JSON file, not a model's weights"], f"give the run directory it belongs to ({copy}) or"),
        (copy / "checkpoints", ["is the checkpoints folder of a run, not a run"], "step-00000010.safetensors"),
    ]
    for model, said, hint in cases:
        proc = translate(model, "Bonjour.")
        error_line(proc, str(model), *said)
        assert hint in proc.stderr and "corrupt" not in proc.stderr, proc.stderr
    assert snapshot(copy) == before


def test_a_config_json_that_disagrees_with_the_weights_is_said(copy: Path) -> None:
    """A release whose config.json was edited (or copied from another run) translated without a word: tfm uses the
    config the weights carry, but every other tool reads config.json."""
    path = copy / "config.json"  # as `tfm train` and `tfm export --format release` write it
    config = json.loads(read_metadata(copy / "model.safetensors")["config"])
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    plain = translate(copy, "Bonjour.")
    path.write_text(json.dumps({**config, "n_heads": config["n_heads"] * 2}), encoding="utf-8")
    proc = translate(copy, "Bonjour.")
    assert proc.returncode == 0 and proc.stdout == plain.stdout, proc.stderr  # the weights' config, as before
    assert f"warning: {path} describes another model than {copy / 'model.safetensors'} (n_heads" in proc.stderr
    assert "describes another model" not in plain.stderr, plain.stderr
    # a number written as a string (hand-edited) is another value to the tools that read it: said as JSON has it
    # ("d_model 32 there, 32 in the weights" named the same value twice)
    path.write_text(json.dumps({**config, "d_model": str(config["d_model"])}), encoding="utf-8")
    proc = translate(copy, "Bonjour.")
    assert f'(d_model "{config["d_model"]}" there, {config["d_model"]} in the weights)' in proc.stderr, proc.stderr


def _resave(weights: Path, state: dict | None = None, **metadata: str) -> None:
    """`weights` with other tensors or metadata, and the CRC-32 of its tensors as tfm writes it (the damage
    under test is another than bytes changed after writing)."""
    old = read_metadata(weights)
    state = state if state is not None else load_file(str(weights))
    save_file(state, str(weights), metadata={**old, WEIGHTS_CRC: weights_crc32(state), **metadata})


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("empty", "is not a readable safetensors file, or is truncated or corrupt"),
        ("truncated", "is not a readable safetensors file, or is truncated or corrupt"),
        ("integers", "does not fit the model config: "),  # would have loaded, cast, as garbage weights
        ("layers", "does not fit the model config (missing encoder_layers.1."),
        ("step", "the step in its metadata, 'ten', is not an integer"),  # was a ValueError traceback
        ("config", "invalid model config in metadata (expected a JSON object, got list)"),
    ],
)
def test_broken_weights_variants(copy: Path, damage: str, expected: str) -> None:
    weights = copy / "model.safetensors"
    if damage == "empty":
        weights.write_bytes(b"")
    elif damage == "truncated":
        weights.write_bytes(weights.read_bytes()[:-1])
    elif damage == "integers":
        _resave(weights, {k: v.to(torch.int64) for k, v in load_file(str(weights)).items()})
    elif damage == "layers":
        config = json.loads(read_metadata(weights)["config"])
        _resave(weights, config=json.dumps({**config, "n_enc_layers": 2}))
    elif damage == "step":
        _resave(weights, step="ten")
    else:
        _resave(weights, config="[32, 64]")
    with pytest.raises(CheckpointError) as err:
        load_model(copy)
    one_line(err.value, str(weights), expected)


def test_a_baseline_of_another_kind_names_the_command_that_writes_the_right_one(root: Path, run: Path, tmp_path: Path) -> None:
    """A translate result given to `tfm bench train --baseline` was told to "compare with a baseline written by
    `tfm bench train --json`" (no recipe: a usage error), and a missing or broken baseline to "write one with
    `tfm bench ... --json > FILE`", literally: the hint is now the command as typed, less --baseline and
    --tolerance, with --json, and it writes a baseline this command accepts."""
    recipe_file = str(root / "recipe.yaml")
    translate_result = write(tmp_path / "translate.json", json.dumps({"kind": "translate", "records": []}))
    args = ["bench", "train", recipe_file, "train.max_tokens=256", "--steps", "1", "--warmup", "0", "--device", "cpu",
            "--model-step-only"]
    proc = tfm(*args, "--baseline", str(translate_result), "--tolerance", "20%", check=False)
    said = error_line(proc, f"{translate_result} is a result of `tfm bench translate`, not of `tfm bench train`", code=2)
    command = shlex.join(["tfm", *args, "--json"])
    assert said.endswith(f"; write a train baseline with `{command} > train-baseline.json`"), said
    missing = tmp_path / "nowhere.json"
    said = error_line(tfm(*args, f"--baseline={missing}", "--json", check=False), code=2)
    assert said.endswith(f"{missing} does not exist; write one with `{command} > {missing}`"), said
    written = _follow(f"{command} > {missing}", tmp_path)
    assert written.returncode == 0, written.stderr
    proc = tfm(*args, "--baseline", str(missing), "--tolerance", "1000%", check=False)  # the hint's file gates
    assert proc.returncode == 0 and "gate: 1 figure(s) within 1000%" in proc.stderr, proc.stderr
    broken = write(tmp_path / "broken.json", "{not json")
    said = error_line(tfm("bench", "translate", "--model", str(run), "--baseline", str(broken), check=False), code=2)
    assert said.endswith(f"; write one with `tfm bench translate --model {run} --json > translate-baseline.json`"), said


def test_onnxruntime_says_nothing_where_home_cannot_hold_its_telemetry_id(run: Path, tmp_path: Path, monkeypatch) -> None:
    """With HOME unset or not writable (a CI container), onnxruntime printed "[W:onnxruntime:Default,
    telemetry_1ds.cc:613 operator()] Failed to persist telemetry device ID; using an in-memory identifier" when
    imported: in the output of `tfm export --format onnx` and of every onnxruntime translation. tfm imports it
    with its telemetry off, unless ORT_DISABLE_TELEMETRY is set."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    home = write(tmp_path / "home", "a file: no cache folder can be made under it")
    out = tmp_path / "onnx"
    proc = tfm("export", str(run), "--format", "onnx", "--out", str(out), "--verify-lines", "3",
               env_extra={"HOME": str(home), "XDG_CACHE_HOME": None}, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "[W:onnxruntime" not in proc.stderr and "telemetry" not in proc.stderr, proc.stderr
    proc = tfm("translate", "--model", str(out), "Bonjour.", env_extra={"HOME": str(home), "XDG_CACHE_HOME": None}, check=False)
    # nothing but tfm's own warning that this barely trained model's translation was cut at the maximum length
    others = [line for line in proc.stderr.splitlines() if "cut at the maximum output length" not in line]
    assert proc.returncode == 0 and others == [], proc.stderr
    from tfm_cli.export.common import require

    monkeypatch.setenv("ORT_DISABLE_TELEMETRY", "0")  # the user's choice is kept
    require("onnxruntime", "onnx", "a test")
    assert os.environ["ORT_DISABLE_TELEMETRY"] == "0"


def test_a_worker_killed_by_a_signal_is_one_line_of_tfm_s(tmp_path: Path) -> None:
    """A worker of the launcher killed by a signal cannot say so itself: torchrun's own "E... failed (exitcode: -9)"
    lines are replaced by one line of tfm's. (A worker's own error, without torchrun's lines after it:
    test_distributed.py's test_a_bad_input_under_two_processes_is_one_line.)"""
    script = write(tmp_path / "killed.py", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, "-m", "tfm_cli.torchrun", "--nproc-per-node=1", "--standalone", str(script)],
                          capture_output=True, text=True, timeout=120, env=tfm_env())
    assert proc.returncode == 137
    assert re.fullmatch(r"Error: process 0 of the job \(pid \d+\) was killed by SIGKILL \(out of memory\?\), which stopped the job\n", proc.stderr), proc.stderr


def test_model_file_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "runs" / "tiny" / "model.safetensors"
    error_line(translate(missing, "Bonjour."), f"model {missing} does not exist")


def test_a_path_that_does_not_exist_is_said_so_by_every_command(root: Path, tmp_path: Path) -> None:
    """`tfm train --resume /no/such/dir` said "/no/such/dir/recipe.yaml is missing: /no/such/dir is not a tfm run
    directory", `--curves` "has no metrics.jsonl", `tfm tokenize --tokenizer` "no tokenizer at", and `tfm export`
    printed "exporting /no/such as onnx" before its error: each now says the path does not exist, and the resume
    says how to start a run there, a command that works."""
    nowhere = tmp_path / "no" / "such"
    proc = tfm("train", "--resume", str(nowhere), "--device", "cpu", check=False)
    error_line(proc, f"Error: run directory {nowhere} does not exist")
    start = proc.stderr.split("hint: check the path, or start a run there: ", 1)[1].strip()
    assert start == f"tfm train recipes/tiny.yaml --out {nowhere}", proc.stderr
    proc = tfm("train", str(root / "recipe.yaml"), "--out", str(nowhere), "--dry-run", "--device", "cpu", check=False)
    assert proc.returncode == 0, proc.stderr  # the command's shape is right (with this test's recipe)
    proc = tfm("train", "--resume", str(root / "train.tsv"), "--device", "cpu", check=False)
    error_line(proc, f"Error: {root / 'train.tsv'} is a file, not a run directory")
    error_line(tfm("train", "--curves", str(nowhere), check=False), f"Error: run directory {nowhere} does not exist")
    error_line(tfm("tokenize", "--tokenizer", str(nowhere), "--encode", "x", check=False),
               f"Error: tokenizer {nowhere} does not exist")
    proc = tfm("export", str(nowhere), "--format", "onnx", "--out", str(tmp_path / "out"), check=False)
    assert proc.stderr.startswith(f"Error: model {nowhere} does not exist\n"), proc.stderr  # not "exporting ..." first


# ---- 13-15: what `tfm translate` reads: not UTF-8, empty, very long ------------------------------------------


def test_binary_stdin_names_the_line(run: Path) -> None:
    """A NUL byte (was translated as text); a latin-1 byte is test_cli.py::test_translate_invalid_utf8_*."""
    proc = translate(run, stdin=b"Bonjour.\nMer\x00ci.\nAu revoir.\n")
    error_line(proc, "stdin line 2: a NUL byte at byte 4: binary data, not text")
    # the lines before the bad one are translated and written first (as sed would), nothing after it
    assert len(proc.stdout.splitlines()) == 1 and proc.stdout.endswith("\n"), proc.stdout


def test_utf16_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    from tfm_cli.cli.common import stdin_lines

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("Bonjour.\nMerci.\n".encode("utf-16"))))
    with pytest.raises(TfmError) as err:
        list(stdin_lines("tfm translate"))
    one_line(err.value, "stdin is UTF-16 text, not UTF-8")
    assert "iconv -f utf-16 -t utf-8" in err.value.hint
    # without a byte-order mark (as PowerShell's and .NET's tools write it) it was "a NUL byte at byte 2: binary data"
    for code in ("utf-16-le", "utf-16-be"):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("Bonjour.\nMerci.\n".encode(code))))
        with pytest.raises(TfmError) as err:
            list(stdin_lines("tfm translate"))
        name = code.replace("-le", "le").replace("-be", "be")
        one_line(err.value, f"stdin is {name.upper()} text (a NUL byte beside each letter), not UTF-8")
        assert f"iconv -f {name} -t utf-8" in err.value.hint
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\x00" * 100 + b"\n")))  # /dev/zero: binary data
    with pytest.raises(TfmError) as err:
        list(stdin_lines("tfm translate"))
    one_line(err.value, "stdin line 1: a NUL byte at byte 1: binary data, not text")


def test_compressed_stdin_says_how_to_decompress(run: Path) -> None:
    """`tfm translate < src.gz` said "a NUL byte at byte 9: binary data"; the README reads .gz corpora, so a user
    expects it here too: name the compression and the tool. A text line that starts like bzip2's magic is text."""
    import bz2
    import gzip
    import lzma

    text = b"Bonjour.\nMerci.\n"
    for packed, kind, tool in ((gzip.compress(text), "gzip", "zcat"), (bz2.compress(text), "bzip2", "bzcat"),
                               (lzma.compress(text), "xz", "xzcat")):
        proc = translate(run, stdin=packed)
        error_line(proc, f"stdin is {kind}-compressed, not text")
        assert f"{tool} input | tfm translate" in proc.stderr
    proc = translate(run, "--greedy", stdin=b"BZh91AY&SY\n")
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 1
    import io
    import zipfile

    for method in (zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED):
        packed = io.BytesIO()
        with zipfile.ZipFile(packed, "w", compression=method) as archive:
            archive.writestr("src.fr", text)
        data = packed.getvalue()
        if method == zipfile.ZIP_STORED:  # as Info-ZIP's `zip` writes a stored file: "version needed" 1.0 = 0x0a, a
            data = data[:4] + b"\x0a" + data[5:]  # newline right after the magic: a first line of valid UTF-8, which
        proc = translate(run, stdin=data)  # was translated as text (junk on stdout), then stopped at a NUL on line 2
        error_line(proc, "stdin is zip-compressed, not text")
        assert "unzip -p input | tfm translate" in proc.stderr and proc.stdout == ""


def _follow(hint: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run the command a message suggests, as a user pastes it into a shell (`tfm` being the installed one)."""
    command = hint.replace("tfm ", f"{TFM} ")
    return subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True, env=tfm_env(), timeout=120)


def test_hints_that_pipe_into_tfm_keep_the_command_as_typed(run: Path, tmp_path: Path) -> None:
    """`zcat input | tfm translate` and `tfm translate < input.fr` dropped --model (and every other option): pasted
    as given, they translated with the most recent run under runs/, another model, without a word."""
    options = ["--model", str(run), "--device", "cpu", "--max-len", "3"]
    write(tmp_path / "input.fr", "Bonjour.\nMerci.\n")
    write(tmp_path / "input", gzip.compress(b"Bonjour.\nMerci.\n"))  # as the hint calls it
    proc = tfm("translate", *options, stdin=(tmp_path / "input").read_bytes(), check=False)
    error_line(proc, "stdin is gzip-compressed, not text")
    hint = proc.stderr.split("hint: decompress it on the way in, e.g. ", 1)[1].strip()
    assert hint == f"zcat input | tfm translate --model {run} --device cpu --max-len 3"
    followed = _follow(hint, tmp_path)
    assert followed.returncode == 0 and len(followed.stdout.splitlines()) == 2, followed.stderr
    proc = tfm("translate", *options, "input.fr", cwd=tmp_path, check=False)
    line = error_line(proc, "input.fr is a file, not a sentence", code=2)
    hint = re.search(r"give them on stdin \((.*)\)$", line).group(1)
    assert hint == f"tfm translate --model {run} --device cpu --max-len 3 < input.fr"
    followed = _follow(hint, tmp_path)
    assert followed.returncode == 0 and len(followed.stdout.splitlines()) == 2, followed.stderr


def test_a_sentence_argument_of_several_lines_is_refused(run: Path, tmp_path: Path) -> None:
    """`tfm translate "$(cat input.fr)"` glued the lines into one sentence and printed one translation, and
    `tfm inspect-attn "$(head -3 input.fr)"` inspected three sentences as one (stdin with two lines is refused there):
    refused, with the way that works. Blank lines around one sentence are fine."""
    proc = tfm("translate", "--model", str(run), "--device", "cpu", "--max-len", "3", "Bonjour.\nMerci.\n", check=False)
    line = error_line(proc, "TEXT holds 2 lines", code=2)
    hint = re.search(r"pipe them in \((.*)\);", line).group(1)
    assert hint == f"tfm translate --model {run} --device cpu --max-len 3 < input.fr"
    write(tmp_path / "input.fr", "Bonjour.\nMerci.\n")
    followed = _follow(hint, tmp_path)
    assert followed.returncode == 0 and len(followed.stdout.splitlines()) == 2, followed.stderr
    assert translate(run, "--max-len", "3", "\nBonjour.\n\n").returncode == 0
    for args, said in (
        (["Bonjour.\r\nMerci."], "the sentence to inspect holds 2 lines"),
        (["Bonjour.", "--target", "Hello.\nThanks."], "--target holds 2 lines"),
    ):
        proc = tfm("inspect-attn", "--model", str(run), "--device", "cpu", *args, check=False)
        error_line(proc, said)
        assert proc.stdout == ""
    # One line holding a character that str.splitlines breaks at but stdin does not (U+2028, U+0085, a form feed,
    # \x1c): translated from stdin, it was refused as "2 lines" as an argument, by both commands, with a hint
    # (tr '\n' ' ') that could not help.
    for odd in ("\u2028", "\x85", "\x0c", "\x1c"):
        sentence = f"Je suis{odd}étudiant."
        piped = translate(run, "--max-len", "3", stdin=sentence + "\n")
        argued = translate(run, "--max-len", "3", sentence)
        assert argued.returncode == 0 and argued.stdout == piped.stdout and len(piped.stdout.splitlines()) == 1, argued.stderr
        proc = tfm("inspect-attn", "--model", str(run), "--device", "cpu", sentence, "--target", f"I am{odd}a student.",
                   "--json", check=False)
        assert proc.returncode == 0 and json.loads(proc.stdout)["src_tokens"], proc.stderr


def test_n_best_above_the_models_beam_with_a_wider_beam(run: Path) -> None:
    """`--n-best 5 --beam 5` was refused as "cannot exceed the beam size 4" (the model's, which --beam replaces):
    no n-best list wider than the recipe's beam could be had at all."""
    proc = translate(run, "--beam", "5", "--n-best", "5", "--max-len", "3", "Bonjour.")
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 5, proc.stderr
    proc = translate(run, "--n-best", "5", "--max-len", "3", "Bonjour.")
    error_line(proc, "--n-best 5 cannot exceed the model's beam size 4", "(--beam 5 --n-best 5)", code=2)


def test_scoring_nothing_is_an_error_not_a_traceback(run: Path, tmp_path: Path) -> None:
    """Empty stdin and an empty reference file agree on their 0 lines, but there is no BLEU of nothing (sacrebleu
    raised IndexError)."""
    from tfm_cli.translator import Translator

    empty = write(tmp_path / "empty.en", "")
    proc = translate(run, "--reference", str(empty), stdin=b"")
    error_line(proc, "nothing to score")
    assert proc.stdout == ""
    with pytest.raises(TfmError) as caught:
        Translator.load(run, device="cpu").score([], [])
    one_line(caught.value, "nothing to score")


@pytest.mark.parametrize("option", ["--reference", "--score"])
def test_a_directory_given_for_references_is_named_by_its_option(run: Path, tmp_path: Path, option: str) -> None:
    """Was "corpus file DIR is not a file": no corpus was named on that command line."""
    proc = translate(run, option, str(tmp_path), stdin="Bonjour.\n")
    error_line(proc, f"{option} {tmp_path} is a directory, not a file")
    assert "corpus" not in proc.stderr and proc.stdout == ""


def test_blank_lines_at_the_end_count_alike_on_stdin_and_in_the_reference(run: Path, tmp_path: Path) -> None:
    """A reference file's blank lines at the end were dropped while stdin's were kept: two files of 3 lines
    each ("a", "b", "") were "ref has 2 lines but the input has 3". Blank lines inside stay aligned."""
    ref = write(tmp_path / "ref.en", "a house\n\nthe cat\n\n")
    proc = translate(run, "--reference", str(ref), "--json", stdin="une maison\n\nle chat\n\n\n")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["sentences"] == 3
    proc = translate(run, "--reference", str(ref), stdin="une maison\nle chat\n\n")
    error_line(proc, "ref.en has 3 lines but the input has 2 (blank lines at the end of either are not counted)")


def test_references_that_are_the_standard_input_of_the_sources_are_refused(run: Path, tmp_path: Path) -> None:
    """`tfm translate --reference /dev/stdin < src.fr` opened src.fr a second time: the French sources were scored
    as their own references, a BLEU with no error. A pipe's /dev/stdin, `-` and the file behind `<` are refused."""
    src = write(tmp_path / "src.fr", "Bonjour.\nMerci.\n")
    for reference in ("/dev/stdin", "-", str(src)):
        with open(src, "rb") as stdin:
            proc = subprocess.run(
                [str(TFM), "translate", "--model", str(run), "--device", "cpu", "--reference", reference],
                stdin=stdin, capture_output=True, text=True, env=tfm_env(),
            )
        error_line(proc, f"--reference {reference} is the standard input the sentences to translate are read from")
        assert proc.stdout == ""
    error_line(translate(run, "--reference", "/dev/stdin", stdin="Bonjour.\nMerci.\n"), "is the standard input")
    ref = write(tmp_path / "ref.en", "Hello.\nThanks.\n")
    assert json.loads(translate(run, "--reference", str(ref), "--json", stdin=src.read_bytes()).stdout)["sentences"] == 2


def test_references_that_are_the_sources_or_given_twice_are_refused_and_empty_ones_said(run: Path, tmp_path: Path) -> None:
    """`--score test.fr --score test.fr` (a typo for test.en; a hard link too) scored the sources against themselves,
    exit 0; a reference file given twice was counted as two references (nrefs:2); `--score a.tsv --score b.tsv` was
    told how to train on two TSV files; an empty reference (`source<TAB>`, a blank line inside a file) was scored
    without a word, and the TSV's warning named the other line as the one with more columns."""
    src = write(tmp_path / "src.fr", "Bonjour.\nMerci.\n")
    os.link(src, tmp_path / "hard.fr")
    ref = write(tmp_path / "ref.en", "Hello.\nThanks.\n")
    for args, said in (
        (["--score", str(src), "--score", str(src)], f"--score {src} is the source file ({src}): the translations would be scored against their sources"),
        (["--score", str(src), "--score", str(tmp_path / "hard.fr")], "is the source file"),
        (["--score", str(src), "--score", str(ref), "--score", str(ref)], f"--score {ref} is given twice as references"),
    ):
        error_line(translate(run, *args), said)
    error_line(translate(run, "--reference", str(ref), "--reference", str(ref), stdin="Bonjour.\nMerci.\n"),
               f"--reference {ref} is given twice as references")
    tsv = write(tmp_path / "a.tsv", "Bonjour.\tHello.\nMerci.\tThanks.\n")
    other = write(tmp_path / "b.tsv", "Salut.\tHi.\nOui.\tYes.\n")
    error_line(translate(run, "--score", str(tsv), "--score", str(other)),
               f"--score {tsv}, given as the source file of --score SOURCE --score REFERENCE, holds a tab",
               f"which is given alone (--score {tsv})")
    empty = write(tmp_path / "e.tsv", "Bonjour.\t\nMerci.\tThanks.\n")
    proc = translate(run, "--score", str(empty))
    assert proc.returncode == 0 and "1 of 2 references are empty (line 1), scored as they are" in proc.stderr, proc.stderr
    assert "more than" not in proc.stderr, proc.stderr  # (`source<TAB>` is a line of two columns)
    # blank lines at the end of a source file and its reference file are not counted, nor said
    ends = [write(tmp_path / "e.fr", "Bonjour.\nMerci.\n\n"), write(tmp_path / "e.en", "Hello.\nThanks.\n\n")]
    proc = translate(run, "--score", str(ends[0]), "--score", str(ends[1]), "--json")
    assert "empty" not in proc.stderr and json.loads(proc.stdout)["sentences"] == 2, proc.stderr
    blank = write(tmp_path / "blank.en", "Hello.\n\nYes.\n")
    proc = translate(run, "--reference", str(blank), stdin="Bonjour.\nMerci.\nOui.\n")
    assert "1 of 3 references are empty (line 2)" in proc.stderr, proc.stderr


def test_a_run_s_recipe_that_does_not_read_says_where_decoding_settings_come_from(run: Path, tmp_path: Path) -> None:
    """A broken recipe.yaml beside good weights stopped tfm translate with its YAML error alone: the hint says the
    decoding settings are read from it, and how to decode without it."""
    copy = Path(shutil.copytree(run, tmp_path / "run"))
    (copy / "recipe.yaml").write_text("name: x\ndecode: {beam: [\n")
    error_line(translate(copy, "Bonjour."), f"{copy / 'recipe.yaml'}: invalid YAML at line 3")
    assert "hint: the decoding settings (decode:) are read from it: fix it, or move it away" in translate(copy, "Bonjour.").stderr


def test_json_lines_stay_one_line_to_every_line_splitter(run: Path) -> None:
    """A source line holding U+2028, U+2029 or U+0085 (valid in a JSON string, so json.dumps left them raw) split
    its `--json` line in two for str.splitlines, JavaScript's readers and editors: 3 inputs read as 6 lines."""
    sources = ["Bonjour\u2028le monde", "Merci\x85bien", "Salut\u2029ami"]
    for args in (["--greedy", "--json"], ["--n-best", "2", "--json"]):
        out = translate(run, *args, stdin="".join(f"{s}\n" for s in sources)).stdout
        assert [json.loads(line)["source"] for line in out.splitlines()] == sources
    proc = tfm("tokenize", "--tokenizer", str(run / "tokenizer.json"), "--encode", sources[0], "--json")
    assert [json.loads(line)["text"] for line in proc.stdout.splitlines()] == [sources[0]]


def test_sentence_argument_that_is_not_utf8(run: Path) -> None:
    proc = translate(run, "caf\udce9")  # the byte 0xe9 on the command line (Python's surrogate escape); was a traceback
    error_line(proc, "the sentence to translate is not valid UTF-8")
    assert proc.stdout == ""


def test_encode_text_that_is_not_utf8(run: Path) -> None:
    """`tfm tokenize --encode` with the byte 0xe9 on the command line was a TypeError traceback from tokenizers
    ('TextInputSequence must be str'); it is one line naming which --encode text, as `translate` says of its TEXT."""
    base = ("tokenize", "--tokenizer", str(run / "tokenizer.json"))
    error_line(tfm(*base, "--encode", "caf\udce9", check=False), "the --encode text is not valid UTF-8")
    proc = tfm(*base, "--encode", "café", "--encode", "caf\udce9", "--json", check=False)
    error_line(proc, "--encode text 2 is not valid UTF-8")
    assert proc.stdout == ""


def test_empty_stdin_gives_no_output_and_exit_0(run: Path) -> None:
    """Like `cat`: nothing in, nothing out, success, and nothing said."""
    proc = translate(run, stdin=b"")
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == "", proc.stderr


def test_blank_lines_give_blank_lines_and_a_bom_is_dropped(run: Path) -> None:
    """Whitespace-only lines translate to empty lines without the model, so line i of the output is still the
    translation of line i; a byte-order mark (Windows editors) is not part of the first sentence."""
    proc = translate(run, "--json", stdin="\ufeffBonjour.\r\n   \n\t\n\nBonjour.\n")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["source"] for r in records] == ["Bonjour.", "   ", "\t", "", "Bonjour."]
    assert all(r["translation"] == "" and r["tokens"] == [] for r in records[1:4])
    assert records[0]["tokens"] and records[0]["tokens"] == records[4]["tokens"]  # the mark changed nothing


def test_a_100000_character_line_is_cut_with_a_warning(run: Path) -> None:
    """Three 100,000-character lines (one 'word', words, CJK that falls back to bytes) between two short ones:
    each is cut to what the model takes, with one warning naming its line; one output line each; quickly."""
    long_lines = ["a" * 100_000, ("chat " * 20_000)[:100_000], "".join(chr(0x4E00 + i % 20000) for i in range(100_000))]
    stdin = "\n".join(["Bonjour.", *long_lines, "Merci."]) + "\n"
    started = time.perf_counter()
    proc = translate(run, stdin=stdin, timeout=60)
    seconds = time.perf_counter() - started
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stdout.split("\n")) == 6 and proc.stdout.endswith("\n")  # 5 lines, each ended by a newline
    # (a random model may also spell broken characters in byte tokens: said in its own line at the end)
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:") and "U+FFFD" not in line]
    assert len(warnings) == 4 and "cut at the maximum output length" in warnings[3], proc.stderr  # then: the outputs cut
    warnings = warnings[:3]
    for line_no, warning in zip((2, 3, 4), warnings, strict=True):
        assert f"input line {line_no} has " in warning and "the model takes at most 63" in warning
    assert seconds < 30, f"{seconds:.1f} s"


def test_many_lines_cut_to_the_model_s_length_are_said_ten_then_counted(run: Path) -> None:
    """200,000 inputs printed 3,102 warnings, one per line cut to the model's length: the first ten are said, the
    rest counted in one line at the end (`--json` marks every one)."""
    stdin = "".join(("chat " * 100) + "\n" for _ in range(14))
    proc = translate(run, "--json", stdin=stdin)
    cut = [line for line in proc.stderr.splitlines() if "tokens; the model takes at most 63" in line]
    assert [f"input line {n} has " in line for n, line in enumerate(cut, start=1)] == [True] * 10, proc.stderr
    assert "warning: ... and 4 more like the last 10 (not shown)" in proc.stderr, proc.stderr
    assert [json.loads(line)["truncated"] for line in proc.stdout.splitlines()] == [True] * 14


def test_a_line_with_no_end_in_sight_is_refused_not_held(run: Path) -> None:
    """`tfm translate < /dev/zero` read on without end (RSS growing, no word), and a 20 MB line took 2 GB and
    24 s for its first 1,023 tokens: a line over 1 MiB is refused once that much has come, naming it, after the lines
    before it are translated and written; NUL bytes are named as binary data at once, not at the line's end."""
    big = b"chat noir " * 110_000  # 1.1 MB, no line end
    proc = translate(run, "--max-len", "3", stdin=b"Bonjour.\nMerci.\n" + big + b"\nOui.\n")
    line = error_line(proc, "stdin line 3 runs over 1 MiB without a line end: that is no sentence")
    assert "head -c 100000 input.txt | tfm translate" in proc.stderr, line
    assert len(proc.stdout.splitlines()) == 2  # the two lines before it
    proc = translate(run, stdin=b"\x00" * 3_000_000)  # what `< /dev/zero` gives
    error_line(proc, "stdin line 1: a NUL byte at byte 1: binary data, not text")
    proc = tfm("inspect-attn", "--model", str(run), "--device", "cpu", "-", stdin=big, check=False)  # stdin's other reader
    error_line(proc, "stdin line 1 runs over 1 MiB without a line end")
    just = b"a" * (1 << 20)  # 1 MiB exactly: a (long) line, cut to what the model takes as before
    proc = translate(run, "--max-len", "3", stdin=just + b"\n")
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 1 and "input line 1 has" in proc.stderr, proc.stderr


# ---- 16: a run directory that already holds a run -----------------------------------------------------------


def test_train_into_a_directory_holding_a_final_model_is_refused(root: Path, run: Path, tmp_path: Path) -> None:
    """A finished run, and only a model.safetensors and its tokenizer (a copied model, or another toolkit's weights):
    refused before anything is written (a run with checkpoints: test_e2e.py::test_fresh_train_refuses_a_run_with_
    checkpoints). The folder without recipe.yaml is no tfm run: "continue it with --resume" sent the user to a
    command that said so."""
    finished = Path(shutil.copytree(run, tmp_path / "finished"))
    (finished / "checkpoints").rename(tmp_path / "aside")
    proc = tfm("train", str(root / "recipe.yaml"), "--out", str(finished), "--device", "cpu", check=False)
    error_line(proc, f"{finished} already holds a trained run (a final model.safetensors)")
    assert f"tfm train --resume {finished}" in proc.stderr
    target = tmp_path / "final-only"
    target.mkdir()
    for name in ("model.safetensors", "tokenizer.json"):
        shutil.copy(run / name, target / name)
    before = snapshot(target)
    for extra in ((), ("--dry-run",)):
        proc = tfm("train", str(root / "recipe.yaml"), "--out", str(target), "--device", "cpu", *extra, check=False)
        error_line(proc, f"{target} is not a tfm run directory (it has no recipe.yaml) but holds model.safetensors, which a start would overwrite")
        assert "--resume" not in proc.stderr and snapshot(target) == before


@pytest.mark.parametrize("name", ["config.json", "metrics.jsonl", "summary.json"])
def test_train_into_a_folder_with_files_it_would_overwrite_is_refused(root: Path, tmp_path: Path, name: str) -> None:
    """`--out .` in a project that has its own config.json (or metrics.jsonl, summary.json), with no tfm
    recipe.yaml there: a start would overwrite or delete that file, so it is refused and the folder is untouched;
    a folder holding only other files, or only a tokenizer from `tfm tokenize`, is still a fine place for a run."""
    target = tmp_path / "project"
    target.mkdir()
    (target / name).write_text('{"theirs": true}\n')
    (target / "notes.txt").write_text("keep me\n")
    before = snapshot(target)
    for extra in ([], ["--dry-run"]):
        proc = tfm("train", str(root / "recipe.yaml"), "--out", str(target), "--device", "cpu", *extra, check=False)
        error_line(proc, f"{target} is not a tfm run directory but holds {name}, which a start would overwrite")
        assert snapshot(target) == before
    (target / name).unlink()
    proc = tfm("train", str(root / "recipe.yaml"), "--out", str(target), "--device", "cpu", "--dry-run", check=False)
    assert proc.returncode == 0, proc.stderr


def test_tokenize_into_a_run_is_refused(root: Path, copy: Path) -> None:
    before = snapshot(copy)
    # the run's tokenizer.json, or the run's folder (which was told to give RUN/tokenizer.json, then refused)
    for out in (copy / "tokenizer.json", copy):
        proc = tfm("tokenize", str(root / "recipe.yaml"), "--out", str(out), check=False)
        error_line(proc, f"{copy} already holds a trained model: replacing tokenizer.json would break it")
        assert snapshot(copy) == before


def test_tokenize_through_a_link_to_a_run_s_tokenizer_is_refused(root: Path, copy: Path, tmp_path: Path) -> None:
    """`--out LINK`, LINK naming RUN/tokenizer.json: the checks looked at the link's folder, not the run, and the
    run's tokenizer was replaced (its model then refused to load); a link to a folder that does not exist said
    "No such file or directory" only after the training, with a hint of free space and permissions."""
    before = snapshot(copy)
    link = tmp_path / "tok.json"
    link.symlink_to(copy / "tokenizer.json")
    proc = tfm("tokenize", str(root / "recipe.yaml"), "--out", str(link), check=False)
    error_line(proc, f"{copy} already holds a trained model: replacing tokenizer.json would break it")
    assert snapshot(copy) == before and link.is_symlink()
    # and a run whose own tokenizer.json is a link to a file kept elsewhere: refused by the run's folder too
    kept = tmp_path / "store" / "shared-tok.json"
    kept.parent.mkdir()
    shutil.move(copy / "tokenizer.json", kept)
    (copy / "tokenizer.json").symlink_to(kept)
    before, kept_bytes = snapshot(copy), kept.read_bytes()
    proc = tfm("tokenize", str(root / "recipe.yaml"), "--out", str(copy / "tokenizer.json"), check=False)
    error_line(proc, f"{copy} already holds a trained model: replacing tokenizer.json would break it")
    assert snapshot(copy) == before and kept.read_bytes() == kept_bytes
    # one link more on the way (LINK -> RUN/tokenizer.json -> the file elsewhere): every hop is checked
    (tmp_path / "mylink").symlink_to(copy / "tokenizer.json")
    proc = tfm("tokenize", str(root / "recipe.yaml"), "--out", str(tmp_path / "mylink"), check=False)
    error_line(proc, f"{copy} already holds a trained model: replacing tokenizer.json would break it")
    assert snapshot(copy) == before and kept.read_bytes() == kept_bytes
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "nowhere" / "tok.json")
    proc = tfm("tokenize", str(root / "recipe.yaml"), "--out", str(dangling), check=False)
    error_line(proc, f"--out {dangling} is a broken symbolic link (to {tmp_path / 'nowhere' / 'tok.json'}), whose folder does not exist")


def test_an_output_through_a_link_replaces_its_file_whole_or_not_at_all(tmp_path: Path) -> None:
    """A symbolic link was written in place, through the link: a full disk cut the file it names short (a
    tokenizer.json that no longer loaded, a translations file half gone). The file it names is replaced whole now,
    the link kept, and a failed write leaves it as it was."""
    from tfm_cli.cli.common import write_output

    kept, link = tmp_path / "real" / "hyp.txt", tmp_path / "hyp.txt"
    kept.parent.mkdir()
    kept.write_text("old\n" * 20, encoding="utf-8")
    link.symlink_to(kept)

    def full_disk(name: str) -> None:
        Path(name).write_text("new, half", encoding="utf-8")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(TfmError, match=f"--output {link} could not be written: No space left on device; the file there is as it was"):
        write_output(link, "--output", full_disk)
    assert kept.read_text(encoding="utf-8") == "old\n" * 20 and link.is_symlink()
    assert sorted(p.name for p in kept.parent.iterdir()) == ["hyp.txt"]  # no temporary file left
    write_output(link, "--output", lambda name: Path(name).write_text("new\n", encoding="utf-8"))
    assert link.is_symlink() and link.resolve() == kept.resolve() and kept.read_text(encoding="utf-8") == "new\n"


def test_tokenize_beside_a_run_s_tokenizer_under_another_name_is_written(root: Path, copy: Path) -> None:
    """`--out RUN/tok-300.json` (another tokenizer kept beside a run's): refused as "replacing tok-300.json would
    break it", though the run's model is bound to its tokenizer.json alone, which is left as it was."""
    before = snapshot(copy)
    proc = tfm("tokenize", str(root / "recipe.yaml"), "tokenizer.vocab_size=300", "--out", str(copy / "tok-300.json"))
    assert proc.returncode == 0, proc.stderr
    assert (copy / "tok-300.json").is_file()
    after = snapshot(copy)
    del after["tok-300.json"]
    assert after == before
    assert tfm("translate", "--model", str(copy), "--device", "cpu", "--max-len", "3", "Bonjour.").returncode == 0


def test_tokenize_into_a_run_before_its_first_checkpoint_is_refused(root: Path, run: Path, tmp_path: Path) -> None:
    """A run that `tfm train` started (recipe.yaml, config.json, its tokenizer) but that has no checkpoint yet, as
    while it trains its first steps: `tfm tokenize RECIPE` (the same default runs/NAME/tokenizer.json) replaced its
    tokenizer, and every checkpoint the training then wrote no longer matched its run's tokenizer.json."""
    target = tmp_path / "started"
    target.mkdir()
    for name in ("recipe.yaml", "tokenizer.json"):
        shutil.copy(run / name, target / name)
    write(target / "config.json", json.dumps(load_model(run, "cpu").model.config.to_dict()))
    before = snapshot(target)
    proc = tfm("tokenize", str(root / "recipe.yaml"), "tokenizer.vocab_size=300", "--out", str(target / "tokenizer.json"), check=False)
    error_line(proc, f"{target} holds a model's recipe.yaml and config.json", "replacing tokenizer.json would break it")
    assert snapshot(target) == before


def test_a_directory_holding_another_unfinished_run_is_refused(root: Path, run: Path, tmp_path: Path) -> None:
    """Another run that stopped before its first checkpoint: a start would take over its tokenizer (whatever the
    new recipe asks for), rewrite its recipe.yaml and config.json and append to its metrics.jsonl."""
    target = tmp_path / "other"
    target.mkdir()
    shutil.copy(run / "tokenizer.json", target / "tokenizer.json")
    write(target / "recipe.yaml", (run / "recipe.yaml").read_text(encoding="utf-8").replace("name: bad-inputs", "name: other"))
    write(target / "metrics.jsonl", '{"kind": "train", "step": 1, "loss": 6.0}\n')
    before = snapshot(target)
    proc = tfm("train", str(root / "recipe.yaml"), "--out", str(target), "--dry-run", check=False)
    error_line(proc, f"{target} already holds")
    assert snapshot(target) == before


def test_a_start_on_a_bad_corpus_leaves_no_run_behind(root: Path, run: Path, tmp_path: Path) -> None:
    """The corpus is read before the run's files are written; what the failed start made is taken back."""
    bad = write(tmp_path / "bad.tsv", "Bonjour.\tHello.\n\xff\xfe broken\tline\n".encode("latin-1"))
    for extra in ([], [f"tokenizer.path={run / 'tokenizer.json'}"]):
        out = tmp_path / f"out{len(extra)}"
        proc = tfm("train", str(recipe(tmp_path, str(bad))), *extra, "--out", str(out), "--device", "cpu", check=False)
        error_line(proc, str(bad))
        assert not out.exists(), sorted(p.name for p in out.iterdir())


@pytest.mark.parametrize("shape", ["tatoeba-download", "pandas-index", "tatoeba-download-gzip"])
def test_a_corpus_whose_side_is_an_id_column_is_refused_with_the_cut_of_its_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    """Tatoeba.org's own download (`id<TAB>sentence<TAB>id<TAB>translation`) and pandas' `to_csv(sep="\\t")`
    (its index first, a header of `<TAB>fr<TAB>en`) were trained without a word: every source an id number, the
    translation dropped. Now the file is refused, dry run or not, with the `cut` of its two text columns; run as
    printed, it writes the pairs. Two columns of numbers and words (a task of its own) are read as before."""
    pairs = [tuple(line.split("\t")[:2]) for line in _head(300).splitlines()]
    if shape.startswith("tatoeba-download"):
        text = "".join(f"{1000 + i}\t{s}\t{90000 + i}\t{t}\n" for i, (s, t) in enumerate(pairs))
        fields = "2,4"
    else:
        text = "\tfr\ten\n" + "".join(f"{i}\t{s}\t{t}\n" for i, (s, t) in enumerate(pairs))
        fields = "2,3"
    gz = shape.endswith("gzip")
    (tmp_path / "data").mkdir()
    name = "pairs.tsv.gz" if gz else "pairs.tsv"
    write(tmp_path / "data" / name, gzip.compress(text.encode()) if gz else text.encode())
    monkeypatch.chdir(tmp_path)
    for command in (["train", str(recipe(tmp_path, f"data/{name}")), "--dry-run", "--out", str(tmp_path / "dry")],
                    ["tokenize", "--corpus", f"data/{name}", "--vocab-size", "300", "--out", str(tmp_path / "tok.json")]):
        proc = tfm(*command, check=False)
        line = error_line(proc, f"data/{name}: its source side (column 1) is a number on 100% of its first 200 lines: an id")
        assert not (tmp_path / "tok.json").exists() and not (tmp_path / "dry").exists()
    cut = re.search(r"\(e\.g\. (.*?)\)$", line)
    assert cut and f"cut -f{fields}" in cut.group(1), line
    subprocess.run(cut.group(1), shell=True, check=True)
    read = [(s, t) for _, s, t in read_pairs(tmp_path / "data" / "text-pairs.tsv")]
    assert read[-300:] == pairs and (shape != "pandas-index" or read[0] == ("fr", "en")), read[:2]
    numbers = write(tmp_path / "numbers.tsv", "".join(f"{n}\t{w}\n" for n, w in enumerate(["zero", "one", "two", "three", "four", "five", "six"])))
    assert len(list(read_pairs(numbers))) == 7  # numbers read out: two columns, nothing else in the file
    # numbers read out, not in order, with an attribution after them; numbers written with separators: a task of
    # their own, read as they are (they were refused, and the `cut` offered trained words -> attribution)
    import random

    rng = random.Random(0)
    words = [f"{rng.randint(1, 10**6)}\tnumber {i} in words\tCC-BY 2.0\n" for i in range(60)]
    words += [f"{rng.randint(1, 999)},{rng.randint(100, 999)}\tsome words\tfr-FR\n" for i in range(60)]
    assert len(list(read_pairs(write(tmp_path / "words.tsv", "".join(words).encode())))) == 120


@pytest.mark.parametrize(
    ("rows", "fields", "column"),
    [
        # WikiMatrix: a margin score first, the file sorted by it
        (lambda i, s, t: f"{1.2 - i / 1000:.4f}\t{s}\t{t}", "2,3", 1),
        # two sentence ids first (a links file joined to its sentences), the first in order, the second not
        (lambda i, s, t: f"{i + 1}\t{(i * 7919) % 1000}\t{s}\t{t}", "3,4", 1),
        # Tatoeba's download with its ids in no order
        (lambda i, s, t: f"{(i * 7919) % 100003}\t{s}\t{(i * 104729) % 100019}\t{t}", "2,4", 1),
        # the number second, between the two sides; a language code first, then an id: the target side a number
        (lambda i, s, t: f"{s}\t{i}\t{t}", "1,3", 2),
        (lambda i, s, t: f"eng\t{i}\t{s}\t{t}", "3,4", 2),
    ],
    ids=["wikimatrix-score", "two-id-columns", "tatoeba-ids-unordered", "id-between", "language-code-then-id"],
)
def test_more_shapes_of_number_columns_are_refused(tmp_path: Path, rows, fields: str, column: int) -> None:
    pairs = [tuple(line.split("\t")[:2]) for line in _head(300).splitlines()]
    corpus = write(tmp_path / "c.tsv", "".join(rows(i, s, t) + "\n" for i, (s, t) in enumerate(pairs)).encode())
    with pytest.raises(CorpusError) as err:
        list(read_pairs(corpus))
    side = "source" if column == 1 else "target"
    message = one_line(err.value, f"{corpus}: its {side} side (column {column}) is a number on 100% of its first 200 lines")
    cut = re.search(r"\(e\.g\. (.*?)\)$", message)
    assert cut and f"cut -f{fields}" in cut.group(1), message
    subprocess.run(cut.group(1), shell=True, check=True)
    assert [(s, t) for _, s, t in read_pairs(tmp_path / "text-c.tsv")] == pairs


@pytest.mark.parametrize(
    ("rows", "fields", "said"),
    [
        # the Tatoeba Challenge's and OPUS's test files: two language codes, then the pair
        (lambda i, s, t: f"fra\teng\t{s}\t{t}", "3,4", "is 'fra' on each of its first 200 lines: a language code"),
        (lambda i, s, t: f"fra\t{s}\t{t}", "2,3", "is 'fra' on each of its first 200 lines"),
        (lambda i, s, t: f"FRA\tENG\t{s}\t{t}", "3,4", "is 'FRA' on each of its first 200 lines"),  # in capitals
        (lambda i, s, t: f"French\tEnglish\t{s}\t{t}", "3,4", "is 'French' on each of its first 200 lines: a language code or name"),
        # several codes in one column (the Tatoeba Challenge's Chinese): not a text column of the pair
        (lambda i, s, t: f"{['cmn_Hans', 'cmn_Hant', 'yue_Hant'][i % 3]}\teng\t{s}\t{t}", "3,4",
         "is 'cmn_Hans' or 'cmn_Hant' or 'yue_Hant' on each of its first 200 lines: a language code"),
        # ParaCrawl's raw files: the two pages, the pair, a score
        (lambda i, s, t: f"https://a.fr/{i}\thttps://b.com/{i}\t{s}\t{t}\t0.{i % 9}", "3,4", "is a web address on 100% of"),
    ],
    ids=["language-codes", "one-language-code", "codes-in-capitals", "language-names", "several-codes", "paracrawl-urls"],
)
def test_columns_of_language_codes_or_web_addresses_before_the_pair_are_refused(tmp_path: Path, rows, fields: str, said: str) -> None:
    """`fra<TAB>eng<TAB>source<TAB>target` trained a model to translate everything as "eng", with a warning that
    offered to drop line 1; ParaCrawl's `url<TAB>url<TAB>source<TAB>target<TAB>score` one that answered with an
    address. Refused, as a column of ids is, with the `cut` of the two text columns; a constant column after the
    pair (an attribution) is read as before."""
    pairs = [tuple(line.split("\t")[:2]) for line in _head(300).splitlines()]
    corpus = write(tmp_path / "c.tsv", "".join(rows(i, s, t) + "\n" for i, (s, t) in enumerate(pairs)).encode())
    with pytest.raises(CorpusError) as err:
        list(read_pairs(corpus))
    message = one_line(err.value, f"{corpus}: its source side (column 1) {said}")
    cut = re.search(r"\(e\.g\. (.*?)\)$", message)
    assert cut and f"cut -f{fields}" in cut.group(1), message
    subprocess.run(cut.group(1), shell=True, check=True)
    assert [(s, t) for _, s, t in read_pairs(tmp_path / "text-c.tsv")] == pairs
    attributed = write(tmp_path / "a.tsv", "".join(f"{s}\t{t}\tCC-BY 2.0 (France)\n" for s, t in pairs).encode())
    assert [(s, t) for _, s, t in read_pairs(attributed)] == pairs
    answers = [("Oui." if i % 2 else "Non.", t) for i, (_, t) in enumerate(pairs)]  # two answers: sentences, no codes
    few = write(tmp_path / "f.tsv", "".join(f"{s}\t{t}\tCC-BY 2.0 (France)\n" for s, t in answers).encode())
    assert [(s, t) for _, s, t in read_pairs(few)] == answers


def test_a_file_without_line_ends_is_refused_as_binary_before_it_is_read_whole(tmp_path: Path, monkeypatch) -> None:
    """3 GB of zero bytes (a preallocated or failed download) took 6.6 GB of memory and 24 s before "a NUL byte at
    byte 1": the whole "line" was read first. A line is now read a part at a time, and the first part looked at."""
    from tfm_cli import corpus as corpus_module

    monkeypatch.setattr(corpus_module, "PART", 1000)
    zeros = write(tmp_path / "zeros.tsv", b"\x00" * 100_000 + b"\tx\n")
    with pytest.raises(CorpusError) as err:
        list(read_pairs(zeros))
    one_line(err.value, f"{zeros}:1: a NUL byte at byte 1 of the line: a binary file")
    stream = io.BytesIO(b"\x00" * 100_000)
    seen = []

    def look(part: bytes, line_no: int) -> None:
        seen.append((len(part), stream.tell(), line_no))
        raise CorpusError("binary")

    with pytest.raises(CorpusError):
        list(corpus_module._whole_lines(stream, look))
    assert seen == [(1000, 1000, 1)]  # one part read, not the 100,000 bytes
    # a long line of text is read whole, its line end and the lines after it as they were
    text = "Bonjour " * 500 + "\tHello\n" + "Oui\tYes\n"
    lines = list(corpus_module._whole_lines(io.BytesIO(text.encode()), lambda part, n: None))
    assert lines == [line.encode() for line in text.splitlines(keepends=True)]


def test_sides_in_a_spreadsheet_s_quotes_are_warned_about(tmp_path: Path) -> None:
    """A TSV saved with every field quoted, or as Python's csv module and spreadsheets save it (a field holding a
    quote in quotes, the quote doubled), trained on the quotes without a word. Warned about,
    with the command that reads the quoting away; the bundled corpus's quotations (56 pairs quoted on both sides,
    one with "" inside) are no such file."""
    import csv

    pairs = [tuple(line.split("\t")[:2]) for line in _head(300).splitlines()]
    quoted = write(tmp_path / "q.tsv", "".join(f'"{s}"\t"{t}"\n' for s, t in pairs))
    with open(tmp_path / "x.tsv", "w", newline="", encoding="utf-8") as f:
        rows = [(f'Il a dit "{s}"' if i % 20 == 0 else s, t) for i, (s, t) in enumerate(pairs)]
        csv.writer(f, delimiter="\t", lineterminator="\n").writerows(rows)
    for corpus, said, expected in ((quoted, "300 of 300 lines have both sides in double quotes", pairs),
                                   (tmp_path / "x.tsv", '15 lines have a side in double quotes with "" inside it (lines 1, 21, 41, ...)', rows)):
        proc = tfm("train", str(recipe(tmp_path, str(corpus))), "--dry-run", "--out", str(tmp_path / "dry"))
        text = proc.stderr.replace("\n", " ")
        assert f"warning: data.train {corpus}: {said}, as a spreadsheet or a CSV writer quotes a field" in text, proc.stderr
        command = text.split("save the file without it (e.g. ", 1)[1].rsplit(")", 1)[0]
        subprocess.run(command, shell=True, check=True, cwd=tmp_path)
        assert [(s, t) for _, s, t in read_pairs(tmp_path / f"unquoted-{corpus.stem}.tsv")] == expected
    bundled = tfm("train", str(recipe(tmp_path, "bundled:tatoeba-fr-en/train.tsv.gz")), "--dry-run", "--out", str(tmp_path / "dry"))
    assert "double quotes" not in bundled.stderr, bundled.stderr


def test_a_first_line_of_column_names_is_warned_about(tmp_path: Path) -> None:
    """`fr<TAB>en` or `source<TAB>target` on line 1 (a spreadsheet's, pandas' header) was trained as a sentence pair,
    unsaid. Warned about now, dry run, start and tokenize alike, with the command that drops it; a first line of
    short words (`Oui<TAB>Yes`) is a pair like any other."""
    lines = _head(50)
    for header in ("fr\ten", "source\ttarget", "pt-BR\ten_US", "EN\tDE"):
        corpus = write(tmp_path / "h.tsv", f"{header}\n{lines}".encode())
        proc = tfm("train", str(recipe(tmp_path, str(corpus))), "--dry-run", "--out", str(tmp_path / "dry"))
        src, tgt = header.split("\t")
        said = f"warning: data.train {corpus}: line 1 ({src!r} / {tgt!r}) reads as the names of the columns"
        assert said in proc.stderr, proc.stderr
        command = proc.stderr.split("remove it (e.g. ", 1)[1].splitlines()[0].removesuffix(")")
        subprocess.run(command, shell=True, check=True)
        out = Path(shlex.split(command)[-1])  # no-header-h.tsv, then converted-no-header-h.tsv, ...: never over one
        assert out.read_text(encoding="utf-8") == lines and (tmp_path / "no-header-h.tsv").read_text(encoding="utf-8") == lines
    proc = tfm("tokenize", "--corpus", str(corpus), "--vocab-size", "300", "--out", str(tmp_path / "tok.json"))
    assert f"warning: --corpus {corpus}: line 1 ('EN' / 'DE') reads as" in proc.stderr, proc.stderr
    for first in ("Oui\tYes", "go\tva", "no\tnon", "No\tNe", "Ja\tDa"):  # short words: sentence pairs
        plain = write(tmp_path / "p.tsv", f"{first}\n{lines}".encode())
        proc = tfm("train", str(recipe(tmp_path, str(plain))), "--dry-run", "--out", str(tmp_path / "dry"))
        assert "names of the columns" not in proc.stderr, proc.stderr


def test_a_tab_inside_a_sentence_of_a_three_column_file_is_warned_about(tmp_path: Path) -> None:
    """In Tatoeba's and Anki's three columns (the third an attribution), a line of four had a tab inside a sentence,
    the rest of it dropped without a word: only a file of two columns and a few more was warned about."""
    lines = [f"{line}\tCC-BY 2.0 (France) Attribution: tatoeba.org" for line in _head(100).splitlines()]
    lines[41] = "Je suis\tétudiant.\tI am a student.\tCC-BY 2.0"
    corpus = write(tmp_path / "three.tsv", ("\n".join(lines) + "\n").encode())
    proc = tfm("train", str(recipe(tmp_path, str(corpus))), "--dry-run", "--out", str(tmp_path / "dry"))
    said = f"warning: data.train {corpus}: 1 of 100 lines has more than 3 tab-separated columns (line 42) where the others have 3"
    assert said in proc.stderr, proc.stderr
    command = proc.stderr.split("check them, e.g. ", 1)[1].splitlines()[0]
    assert subprocess.run(command, shell=True, capture_output=True, text=True).stdout.split() == ["42"]


def test_a_tab_inside_a_few_sentences_is_warned_about(tmp_path: Path) -> None:
    """`Je suis<TAB>étudiant.<TAB>I am a student.` trained the pair "Je suis" -> "étudiant." without a word: columns
    after the second are ignored (a Tatoeba or Anki export's attribution). A file whose lines mostly have two
    columns and a few more is warned about, dry run or not; one whose lines all have three is as documented."""
    lines = _head(300).splitlines()
    mixed = write(tmp_path / "mixed.tsv", "\n".join(["Je suis\tétudiant.\tI am a student.", *lines, "Oui\t!\tYes!"]) + "\n")
    proc = tfm("train", str(recipe(tmp_path, str(mixed))), "--dry-run", "--out", str(tmp_path / "dry"))
    said = f"warning: data.train {mixed}: 2 of 302 lines have more than two tab-separated columns (lines 1, 302) where"
    assert said in proc.stderr, proc.stderr
    command = proc.stderr.split("check them, e.g. ", 1)[1].splitlines()[0]
    assert subprocess.run(command, shell=True, capture_output=True, text=True).stdout.split() == ["1", "302"]
    packed = write(tmp_path / "mixed.tsv.xz", lzma.compress(mixed.read_bytes()))  # (`zcat -f` found no line in it)
    proc = tfm("train", str(recipe(tmp_path, str(packed))), "--dry-run", "--out", str(tmp_path / "dry"))
    command = proc.stderr.split("check them, e.g. ", 1)[1].splitlines()[0]
    assert subprocess.run(command, shell=True, capture_output=True, text=True).stdout.split() == ["1", "302"], command
    dev = write(tmp_path / "dev.tsv", "\n".join([*lines[:9], "Oui\t!\tYes!"]) + "\n")  # a small one: it is translated
    proc = tfm("train", str(recipe(tmp_path, str(mixed), dev=str(dev))), "train.max_steps=1", "--out", str(tmp_path / "run"), "--device", "cpu")
    assert f"warning: data.train {mixed}: 2 of 302 lines have more than two" in proc.stderr, proc.stderr
    assert f"warning: data.dev {dev}: 1 of 10 lines has more than two" in proc.stderr, proc.stderr
    attributed = write(tmp_path / "tatoeba.tsv", "".join(f"{line}\tCC-BY 2.0 (France) Attribution: tatoeba.org\n" for line in lines))
    proc = tfm("train", str(recipe(tmp_path, str(attributed))), "--dry-run", "--out", str(tmp_path / "dry"))
    assert "tab-separated columns" not in proc.stderr and "300 in data.train" in proc.stdout
    # a trailing tab (an empty third column, a spreadsheet's export) cuts no sentence: no warning (it said "150 of
    # 300 lines have more than two columns")
    trailing = write(tmp_path / "trailing.tsv", "".join(line + ("\n" if i % 3 == 0 else "\t\n" if i % 3 == 1 else "\t \n") for i, line in enumerate(lines)))
    proc = tfm("train", str(recipe(tmp_path, str(trailing))), "--dry-run", "--out", str(tmp_path / "dry"))
    assert "tab-separated columns" not in proc.stderr and "300 in data.train" in proc.stdout
    # `tfm tokenize` learns from the same file and says the same (it said nothing)
    proc = tfm("tokenize", "--corpus", str(mixed), "--vocab-size", "300", "--out", str(tmp_path / "tok.json"))
    assert f"warning: --corpus {mixed}: 2 of 302 lines have more than two" in proc.stderr, proc.stderr
    proc = tfm("tokenize", str(recipe(tmp_path, str(mixed))), "--out", str(tmp_path / "tok2.json"))
    assert f"warning: data.train {mixed}: 2 of 302 lines have more than two" in proc.stderr, proc.stderr


def test_a_relative_path_found_only_beside_the_recipe_says_where_paths_are_read_from(root: Path, tmp_path: Path) -> None:
    """Relative paths are read from the current directory (as fairseq, OpenNMT-py and JoeyNMT read theirs);
    `tfm train cfg/recipe.yaml` with `train: train.tsv` beside the recipe was told only 'train.tsv does not exist'."""
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    shutil.copy(root / "train.tsv", cfg / "train.tsv")
    recipe(cfg, "train.tsv")
    out = tmp_path / "out"
    for extra in (["--dry-run"], []):
        proc = tfm("train", "cfg/recipe.yaml", "--out", str(out), "--device", "cpu", *extra, cwd=tmp_path, check=False)
        error_line(proc, "data.train: train.tsv does not exist in the current directory",
                   "relative paths in a recipe are read from the directory you run tfm in, not from the recipe's folder (cfg)")
        assert "hint: it is there beside the recipe: write train: cfg/train.tsv" in proc.stderr
        assert not out.exists()
    # `tfm tokenize RECIPE` reads data.train the same way, and says the same (it said "does not exist" alone)
    proc = tfm("tokenize", "cfg/recipe.yaml", "--out", str(tmp_path / "tok.json"), cwd=tmp_path, check=False)
    error_line(proc, "data.train: train.tsv does not exist in the current directory", "not from the recipe's folder (cfg)")
    assert "hint: it is there beside the recipe: write train: cfg/train.tsv" in proc.stderr
    assert not (tmp_path / "tok.json").exists()
    tfm("tokenize", "cfg/recipe.yaml", "--corpus", "cfg/train.tsv", "--out", str(tmp_path / "tok.json"), cwd=tmp_path)  # (its own)
    recipe(cfg, "[train.tsv, cfg/train.tsv]")  # one side of a pair
    proc = tfm("train", "cfg/recipe.yaml", "--out", str(out), "--dry-run", cwd=tmp_path, check=False)
    error_line(proc, "data.train: train.tsv does not exist in the current directory")
    assert "write train: [cfg/train.tsv, cfg/train.tsv]" in proc.stderr
    recipe(cfg, "train.tsv")
    tfm("train", "recipe.yaml", "--out", str(out), "--dry-run", cwd=cfg)  # from the recipe's folder it is found
    recipe(cfg, str(root / "train.tsv"))  # the relative path is an override's, typed here: no "write it in the recipe"
    proc = tfm("train", "cfg/recipe.yaml", "data.train=train.tsv", "--out", str(out), "--dry-run", cwd=tmp_path, check=False)
    error_line(proc, "train.tsv does not exist")
    assert "beside the recipe" not in proc.stderr and "cfg/recipe.yaml" not in proc.stderr.split("hint:", 1)[-1], proc.stderr


def test_a_leading_tilde_in_a_path_option_is_the_home_folder(root: Path, tmp_path: Path) -> None:
    """`--out=~/runs/x` (the shell leaves `~` as it is after `=`) made a folder named `~` in the current directory,
    and said `~/runs/x` as if it were the home's; a recipe's `~/x` was the home's already."""
    home, here = tmp_path / "home", tmp_path / "here"
    home.mkdir()
    here.mkdir()
    shutil.copy(root / "train.tsv", home / "train.tsv")
    env = {"HOME": str(home)}
    tfm("tokenize", "--corpus", "~/train.tsv", "--vocab-size", "300", "--out=~/tok.json", cwd=here, env_extra=env)
    assert (home / "tok.json").is_file() and not (here / "~").exists()
    proc = tfm("train", str(root / "recipe.yaml"), "data.train=~/train.tsv", "tokenizer.path=~/tok.json", "--out=~/runs/x",
               "--dry-run", "--json", cwd=here, env_extra=env)
    assert json.loads(proc.stdout)["run_dir"] == str(home / "runs" / "x"), proc.stdout
    assert not (here / "~").exists()
    # `~name` of no such user is a name as written (Path.expanduser raised: a traceback), in an option or a recipe
    proc = tfm("train", str(root / "recipe.yaml"), "data.train=~no-such-user-tfm/t.tsv", "--out=~no-such-user-tfm/run",
               "--dry-run", cwd=here, env_extra=env, check=False)
    error_line(proc, "corpus file '~no-such-user-tfm/t.tsv' does not exist")
    # no home folder at all (HOME unset, a user with no entry): `~/x` is refused, not a folder `~` here
    from tfm_cli.files import home_path

    def no_home(self: Path) -> Path:
        raise RuntimeError("Could not determine home directory.")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Path, "expanduser", no_home)
        with pytest.raises(TfmError, match="there is no home folder to read ~ as"):
            home_path("~/runs/x")
        assert home_path("~nobody/x") == Path("~nobody/x")


def test_the_same_file_as_source_and_target_is_refused(root: Path, tmp_path: Path) -> None:
    """`train: [train.fr, train.fr]` (a copy-paste slip) trained a model that copies its input, without a word."""
    src = write(tmp_path / "train.fr", "".join(line.split("\t")[0] + "\n" for line in _head(50).splitlines()))
    out = tmp_path / "out"
    for spec in (f"[{src}, {src}]", f"[{src}, {tmp_path / '.' / 'train.fr'}]"):
        for extra in (["--dry-run"], []):
            proc = tfm("train", str(recipe(tmp_path, spec)), "--out", str(out), "--device", "cpu", *extra, check=False)
            error_line(proc, "data.train: [", "names the same file as source and target")
            assert not out.exists()
    proc = tfm("train", str(recipe(tmp_path, str(root / "train.tsv"), dev=f"[{src}, {src}]")), "--out", str(out),
               "--dry-run", check=False)
    error_line(proc, "data.dev: [", "names the same file as source and target")
    # `tfm tokenize` learnt one language's pieces from it, without a word: refused as `tfm train` refuses it
    tok = tmp_path / "tok.json"
    for command in (["--corpus", str(src), "--corpus", str(tmp_path / "." / "train.fr")], [str(recipe(tmp_path, f"[{src}, {src}]"))]):
        proc = tfm("tokenize", *command, "--vocab-size", "300", "--out", str(tok), check=False)
        error_line(proc, "names the same file as source and target: the joint tokenizer would learn one language's pieces")
        assert not tok.exists()


def test_dev_sources_longer_than_the_model_are_said_and_a_huge_one_is_not_encoded_whole(root: Path, tmp_path: Path) -> None:
    """A dev source longer than the model's positions was cut without a word (`tfm translate` says it), and a line
    of 32 MB (a document without line breaks) was encoded whole to keep its first tokens: 5.2 GB of memory. Said
    at the start now, with the line numbers, and a line far too long is encoded only as far as it needs."""
    dev = write(tmp_path / "dev.tsv", "Bonjour.\tHello.\n" + "mot " * 300 + "\tword\n"
                + "Bonjour " * 2_000_000 + "\tHello.\nMerci.\tThanks.\n")
    proc = tfm("train", str(root / "recipe.yaml"), f"data.dev={dev}", "--out", str(tmp_path / "run"),
               "train.max_steps=2", "train.save_every=1", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "longer than the model's" in line]
    assert len(said) == 1 and said[0].startswith("warning: data.dev 2 sources longer than the model's "), proc.stderr
    assert "(lines 2, 3): only the first " in said[0] and "as tfm translate cuts them" in said[0], said[0]
    short = write(tmp_path / "short.tsv", "Bonjour.\tHello.\nMerci.\tThanks.\n")
    ok = tfm("train", str(root / "recipe.yaml"), f"data.dev={short}", "--out", str(tmp_path / "ok"),
             "train.max_steps=1", "train.save_every=1", "--device", "cpu")
    assert ok.returncode == 0 and "longer than the model" not in ok.stderr, ok.stderr


def test_a_dev_set_that_is_the_training_corpus_is_warned_about(root: Path, tmp_path: Path) -> None:
    """data.dev naming data.train's file scored the model on its training pairs: a dev BLEU that measures
    memorisation, given as if it measured translation."""
    train = root / "train.tsv"
    path = recipe(tmp_path, str(train), dev=str(train.parent / "." / train.name))
    proc = tfm("train", str(path), "--out", str(tmp_path / "out"), "--dry-run")
    assert "warning: data.dev is the training corpus" in proc.stderr
    proc = tfm("train", str(path), "--out", str(tmp_path / "out"), "train.max_steps=2", "train.save_every=1",
               "--device", "cpu")
    assert "warning: data.dev is the training corpus" in proc.stderr
    proc = tfm("train", str(recipe(tmp_path, str(train), dev=str(CORPORA / "dev.tsv.gz"))), "--out", str(tmp_path / "o2"), "--dry-run")
    assert "warning" not in proc.stderr
    # the same pairs in another file (a copy, its gzip, two plain files, the file's last lines): only the very same
    # file was warned about. The check itself in-process (the start and the dry run call it, as above), the CLI once
    from tfm_cli.training.checks import dev_is_train, scan_corpora

    lines = train.read_text(encoding="utf-8").splitlines(keepends=True)
    copy = write(tmp_path / "copy.tsv", "".join(lines))
    gz = write(tmp_path / "copy.tsv.gz", gzip.compress(copy.read_bytes()))
    src = write(tmp_path / "dev.fr", "".join(line.split("\t")[0] + "\n" for line in lines[-200:]))
    tgt = write(tmp_path / "dev.en", "".join(line.split("\t")[1] for line in lines[-200:]))
    tail = write(tmp_path / "tail.tsv", "".join(lines[-300:]) + "Une phrase à part.\tA sentence apart.\n")
    few = write(tmp_path / "few.tsv", lines[0] + "".join(f"Phrase {i}.\tSentence {i}.\n" for i in range(40)))
    # the last lines as the model sees them, written otherwise: NFD (macOS), typographic apostrophes, a BOM, a
    # soft hyphen, no-break spaces (the key compared only whitespace: 168 of 280 such pairs were found)
    def reworded(line: str) -> str:
        line = unicodedata.normalize("NFD", line).replace("'", "\u2019").replace(" ", "\u00a0", 1)
        return "\ufeff" + line if line.startswith("J") else line.replace("e", "e\u00ad", 1)

    written = write(tmp_path / "written.tsv", "".join(reworded(line) for line in lines[-300:]))
    assert sum(reworded(line) != line for line in lines[-300:]) > 250
    base = load_recipe(recipe(tmp_path, str(train)))
    for dev, said in ((str(copy), "(100%)"), (str(gz), "(100%)"), ([str(src), str(tgt)], "(100%)"),
                      (str(written), "300 of the 300 distinct pairs"),
                      (str(tail), "300 of the 301 distinct pairs"), (str(few), None)):  # few: 1 of 41, as random splits share
        with_dev = dataclasses.replace(base, data=dataclasses.replace(base.data, dev=dev))
        warning = dev_is_train(with_dev)
        assert (warning is None) if said is None else (said in warning and "are in data.train too" in warning), (dev, warning)
        scanned: list[str] = []  # the dry run's one reading of the corpora says the same
        scan_corpora(with_dev, scanned)
        assert scanned == ([] if warning is None else [warning])
    proc = tfm("train", str(recipe(tmp_path, str(train), dev=str(gz))), "--out", str(tmp_path / "o3"), "--dry-run")
    assert f"distinct pairs of data.dev {gz} (100%) are in data.train too" in proc.stderr.replace("\n", " "), proc.stderr


# ---- held-out cases: outputs that would destroy inputs, unwritable places, CR line ends, bounds, resume -------


@pytest.fixture(scope="module")
def trained(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real 10-step run (checkpoints with their trainer states), trained in-process."""
    from tfm_cli.training import train

    out = tmp_path_factory.mktemp("trained") / "run"
    train(root / "recipe.yaml", out, device="cpu")
    return out


def test_resume_refuses_another_architecture_before_touching_the_run(trained: Path, tmp_path: Path) -> None:
    run = Path(shutil.copytree(trained, tmp_path / "run"))
    before = snapshot(run)
    # a shape change, and one that keeps every shape (the weights would silently mean something else)
    # --dry-run makes the same checks (it passed all of these with exit 0)
    for extra in ([], ["--dry-run"]):
        for override, named in (("model.d_model=64", "model.d_model 32 -> 64"), ("model.n_heads=1", "model.n_heads 2 -> 1")):
            proc = tfm("train", "--resume", str(run), override, "train.max_steps=12", "--device", "cpu", *extra, check=False)
            error_line(proc, "--resume cannot change the model", named)
            assert snapshot(run) == before  # recipe.yaml and config.json untouched: a plain resume still works
        proc = tfm("train", "--resume", str(run), "train.max_steps=5", "--device", "cpu", *extra, check=False)
        error_line(proc, "already at step 10", "train.max_steps=5")
        assert snapshot(run) == before
    proc = tfm("train", "--resume", str(run), "train.max_steps=12", "--dry-run", "--json")
    assert json.loads(proc.stdout)["resumes_at_step"] == 10 and "finished" not in json.loads(proc.stdout)
    # the run is finished: the dry run said "resumes from step 10 to train.max_steps=10", the resume "nothing to do"
    proc = tfm("train", "--resume", str(run), "--dry-run")
    assert "# finished at step 10 (reached train.max_steps=10) and its final model is written: the resume has nothing to do" in proc.stdout
    assert "resumes from" not in proc.stdout  # (what the resume itself says: test_monitor.py, test_e2e.py)
    assert json.loads(tfm("train", "--resume", str(run), "--dry-run", "--json").stdout)["finished"] is True
    # without its tokenizer a resume would train or copy another one: refused, dry run or not
    moved = Path(shutil.move(run / "tokenizer.json", tmp_path / "tokenizer.json"))
    for extra in ([], ["--dry-run"]):
        proc = tfm("train", "--resume", str(run), "train.max_steps=12", "--device", "cpu", *extra, check=False)
        error_line(proc, "tokenizer.json is missing")
        assert not (run / "tokenizer.json").exists()
    shutil.move(moved, run / "tokenizer.json")
    assert snapshot(run) == before
    # training-only settings may change on resume
    tfm("train", "--resume", str(run), "model.dropout=0.2", "train.max_steps=11", "--device", "cpu")
    assert json.loads((run / "config.json").read_text())["dropout"] == 0.2


@pytest.mark.parametrize(("written", "edit", "named", "put_back"), [
    ("d_ff: 64,", "d_ff: 128,", "--resume cannot change the model (model.d_ff 64 -> 128)", "model.d_ff: 64"),
    ("min_frequency: 2}", "min_frequency: 3}", "--resume cannot change the tokenizer (tokenizer.min_frequency 2 -> 3)",
     "tokenizer.min_frequency: 2"),
])
def test_a_hand_edited_model_in_recipe_yaml_is_named_as_an_edit(trained: Path, tmp_path: Path, written: str, edit: str,
                                                                named: str, put_back: str) -> None:
    """recipe.yaml's model changed by hand, then a plain --resume: refused as a change of model, with the hint
    "drop those overrides" where none was given. The edit is named, and how to put it back. An edit of the
    tokenizer's settings went on quietly with the run's own tokenizer.json, and recipe.yaml was rewritten as it had
    been: the checkpoint's trainer state keeps the recipe, which tells the edit."""
    run = Path(shutil.copytree(trained, tmp_path / "run"))
    recipe = run / "recipe.yaml"
    text = recipe.read_text()
    assert text.count(written) == 1
    recipe.write_text(text.replace(written, edit))
    before = snapshot(run)
    what, change = named.split(" (")
    for extra in ([], ["--dry-run"]):
        proc = tfm("train", "--resume", str(run), "train.max_steps=12", "--device", "cpu", *extra, check=False)
        error_line(proc, what.replace("(", ""), change.rstrip(")"), f"{recipe} was edited to say so")
        assert f"hint: put back {put_back} in {recipe} to continue the run" in proc.stderr
        assert "overrides" not in proc.stderr
        assert snapshot(run) == before
    recipe.write_text(text)  # put back: the run resumes
    tfm("train", "--resume", str(run), "train.max_steps=11", "--device", "cpu")


@pytest.mark.parametrize(
    ("damage", "said"),
    [(b"", "is empty"), (b"name: bad-inputs\ndata: {train: x.tsv, dev: nu", "is not valid YAML (line 2)"),
     (b"name: caf\xe9\n", "is not UTF-8 text"), (b"- a list\n", "holds no recipe"), (None, "is missing")],
    ids=["empty", "cut-mid-line", "not-utf8", "a-list", "missing"],
)
def test_a_recipe_yaml_damaged_or_lost_is_written_again_from_the_checkpoint(trained: Path, tmp_path: Path, damage, said: str) -> None:
    """An empty recipe.yaml (a full disk), one cut inside its one-line `data: {...}`, or one deleted, could not be
    resumed at all ("invalid YAML at line 3", "not a tfm run directory": pass the run's folder, which was given),
    though every checkpoint keeps the recipe it was trained with. The resume takes that one, says so, writes
    recipe.yaml again from it and keeps the damaged file beside it; its dry run says the same and writes nothing."""
    import yaml

    run = Path(shutil.copytree(trained, tmp_path / "run"))
    original = yaml.safe_load((run / "recipe.yaml").read_text())
    if damage is None:
        (run / "recipe.yaml").unlink()
    else:
        (run / "recipe.yaml").write_bytes(damage)
    before = snapshot(run)
    note = f"{run / 'recipe.yaml'} {said}: resuming with the recipe its checkpoint at step 10 was trained with, "
    kept = "" if damage is None else " (the file as it was kept as recipe.damaged.yaml)"
    dry = tfm("train", "--resume", str(run), "train.max_steps=12", "--dry-run", "--device", "cpu")
    assert f"{note}which the resume writes to recipe.yaml again{kept}" in dry.stderr.replace("\n", " "), dry.stderr
    assert snapshot(run) == before
    proc = tfm("train", "--resume", str(run), "train.max_steps=12", "--device", "cpu")
    assert f"{note}written to recipe.yaml again{kept}" in proc.stderr.replace("\n", " "), proc.stderr
    resolved = yaml.safe_load((run / "recipe.yaml").read_text())
    assert resolved == {**original, "train": {**original["train"], "max_steps": 12}}
    assert json.loads((run / "summary.json").read_text())["steps"] == 12
    if damage is not None:
        assert (run / "recipe.damaged.yaml").read_bytes() == damage
    # a run whose checkpoints hold no recipe (an older tfm's) is refused as before, nothing touched
    (run / "recipe.yaml").unlink()
    for state in (run / "checkpoints").glob("*.state.pt"):
        state.unlink()
    before = snapshot(run)
    error_line(tfm("train", "--resume", str(run), "--device", "cpu", check=False), f"{run / 'recipe.yaml'} is missing")
    assert snapshot(run) == before


def test_a_recipe_yaml_cut_short_is_not_resumed_with_defaults(trained: Path, tmp_path: Path) -> None:
    """A run's recipe.yaml cut short (a full disk, a copy) resumed with the defaults of every setting it lost
    (warmup 250 -> 4000, beam 2 -> 4), then was rewritten so: the run's own settings gone. The checkpoint keeps the
    recipe it was trained with; the lost settings are named, and given back on the command line they resume."""
    import yaml

    run = Path(shutil.copytree(trained, tmp_path / "run"))
    full = yaml.safe_load((run / "recipe.yaml").read_text())
    cut = {**full, "train": {k: v for k, v in full["train"].items() if k not in ("warmup_steps", "lr_factor")}}
    del cut["decode"]
    (run / "recipe.yaml").write_text(yaml.safe_dump(cut, sort_keys=False))
    before = snapshot(run)
    proc = tfm("train", "--resume", str(run), "train.max_steps=12", "--device", "cpu", check=False)
    line = error_line(proc, f"{run / 'recipe.yaml'} lacks train.warmup_steps, train.lr_factor, decode.beam, decode.alpha and",
                      "which its checkpoint was trained with", "the resume would train with their defaults")
    assert snapshot(run) == before, line
    hint = proc.stderr.split(f"hint: put them back in {run / 'recipe.yaml'}, or give them: ", 1)[1].strip()
    assert hint.startswith(f"tfm train --resume {run} train.warmup_steps={full['train']['warmup_steps']} ")
    words = shlex.split(hint)[4:]
    proc = tfm("train", "--resume", str(run), *words, "train.max_steps=12", "--device", "cpu")  # as the hint says
    resolved = yaml.safe_load((run / "recipe.yaml").read_text())
    assert resolved["train"]["warmup_steps"] == full["train"]["warmup_steps"] and resolved["decode"] == full["decode"]


def test_settings_that_together_do_less_than_they_say_are_warned_about(root: Path, tmp_path: Path) -> None:
    """An average of more checkpoints than the run saves (the final model was the last checkpoint, said nowhere),
    a warm-up longer than the run, early stopping with too few evaluations to fire: each passed without a word, at
    the start and in its dry run. And the dry run printed relative corpus paths where the start records them whole."""
    with gzip.open(CORPORA / "dev.tsv.gz", "rt", encoding="utf-8") as f:
        dev = write(tmp_path / "dev.tsv", "".join(itertools.islice(f, 20)))
    cases = {
        "train.save_every=100": "train.average_last=2, but the run saves 1 checkpoint (train.save_every=100, "
        "train.max_steps=10): the final model is the last checkpoint",
        "train.warmup_steps=50": "train.warmup_steps=50 is more than train.max_steps=10: the learning rate rises to the "
        "last step and never reaches its peak",
        "train.patience=2": "train.patience=2 needs 3 dev evaluations to stop a run, and train.eval_every=5 gives 2 in "
        "train.max_steps=10: early stopping never fires",
    }
    base = ("train", str(root / "recipe.yaml"), f"data.dev={dev}", "train.eval_every=5", "--device", "cpu")
    for override, said in cases.items():
        proc = tfm(*base, override, "--dry-run", "--out", str(tmp_path / "dry"))
        assert f"warning: {said}" in proc.stderr.replace("\n", " "), proc.stderr
    proc = tfm(*base, "train.save_every=100", "--out", str(tmp_path / "run"))
    assert f"warning: {cases['train.save_every=100']}" in proc.stderr.replace("\n", " ")
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["final_model"]["chosen"] == "last"
    quiet = tfm(*base, "--dry-run", "--out", str(tmp_path / "dry"))
    assert "warning" not in quiet.stderr, quiet.stderr
    relative = tfm("train", str(root / "recipe.yaml"), "data.dev=dev.tsv", "--dry-run", "--json", "--out", "dry", cwd=tmp_path)
    assert json.loads(relative.stdout)["recipe"]["data"]["dev"] == str(dev)  # as recipe.yaml of the start records it


def test_resume_refuses_tokenizer_settings_it_would_only_write_down(trained: Path, tmp_path: Path) -> None:
    """tokenizer.vocab_size=800 on --resume was accepted and written into recipe.yaml, while the run went on with its
    own 400-token tokenizer.json: the recipe then described another run. Refused now, dry run or not, run untouched."""
    run = Path(shutil.copytree(trained, tmp_path / "run"))
    before = snapshot(run)
    for extra in ([], ["--dry-run"]):
        for override, named in (("tokenizer.vocab_size=800", "tokenizer.vocab_size 400 -> 800"),
                                ("tokenizer.min_frequency=5", "tokenizer.min_frequency 2 -> 5"),
                                # taken, ignored and written down, a path that does not exist too
                                ("tokenizer.path=/nonexistent.json", "tokenizer.path None -> '/nonexistent.json'")):
            proc = tfm("train", "--resume", str(run), override, "train.max_steps=12", "--device", "cpu", *extra, check=False)
            error_line(proc, "--resume cannot change the tokenizer", named)
            assert snapshot(run) == before
    tfm("train", "--resume", str(run), "tokenizer.vocab_size=400", "train.max_steps=11", "--device", "cpu")  # unchanged


def test_recipe_yaml_records_the_size_of_the_tokenizer_the_run_uses(root: Path, tmp_path: Path) -> None:
    """A run on tokenizer.path (a 300-token tokenizer, the recipe asking for 400) recorded tokenizer.vocab_size 400
    in recipe.yaml: a resume that gave the real size was refused as a change of the tokenizer ("400 -> 300"), and one
    that gave 400 was accepted. recipe.yaml now records the tokenizer's 300 tokens; an older run's recorded 400 is
    accepted too, and a plain resume of a finished older run still has nothing to do."""
    tok = tmp_path / "tok.json"
    tfm("tokenize", "--corpus", str(root / "train.tsv"), "--vocab-size", "300", "--out", str(tok))
    run = tmp_path / "run"
    tfm("train", str(root / "recipe.yaml"), f"tokenizer.path={tok}", "--out", str(run), "--device", "cpu")
    assert load_recipe(run / "recipe.yaml").tokenizer.vocab_size == 300
    assert json.loads((run / "summary.json").read_text())["recipe_resolved"]["tokenizer"]["vocab_size"] == 300
    proc = tfm("train", "--resume", str(run), "tokenizer.vocab_size=300", "--device", "cpu")
    assert "nothing to" in proc.stderr.lower() or "already" in proc.stderr.lower()
    proc = tfm("train", "--resume", str(run), "tokenizer.vocab_size=500", "--device", "cpu", check=False)
    error_line(proc, "--resume cannot change the tokenizer", "tokenizer.vocab_size 300 -> 500", "300 tokens")
    # a run of an older tfm, which recorded the size asked for (and whose trainer states keep no recipe, which
    # would tell this from a hand edit): both numbers are the run's
    text = (run / "recipe.yaml").read_text()
    (run / "recipe.yaml").write_text(text.replace("vocab_size: 300", "vocab_size: 400"))
    for state in (run / "checkpoints").glob("*.state.pt"):
        saved = torch.load(state, weights_only=True)
        del saved["recipe"]
        torch.save(saved, state)
    before = snapshot(run)
    for size in ("400", "300"):
        tfm("train", "--resume", str(run), f"tokenizer.vocab_size={size}", "train.max_steps=10", "--dry-run", "--device", "cpu")
    proc = tfm("train", "--resume", str(run), "--device", "cpu")
    assert snapshot(run) == before, proc.stderr


def test_a_dry_run_beside_a_tokenizer_already_in_the_run_directory_prints_what_the_start_will_use(root: Path, tmp_path: Path) -> None:
    """After `tfm tokenize` left a 300-token tokenizer in the run directory, `tfm train RECIPE tokenizer.vocab_size=400
    --dry-run` printed vocab_size 400 in the resolved recipe and said nothing of the tokenizer kept, while the start
    says it and records 300."""
    run = tmp_path / "run"
    run.mkdir()
    tfm("tokenize", "--corpus", str(root / "train.tsv"), "--vocab-size", "300", "--out", str(run / "tokenizer.json"))
    before = snapshot(run)
    proc = tfm("train", str(root / "recipe.yaml"), "tokenizer.vocab_size=400", "--out", str(run), "--dry-run", "--device", "cpu")
    assert "vocab_size: 300" in proc.stdout and "vocab_size: 400" not in proc.stdout
    assert f"# tokenizer: {run / 'tokenizer.json'} (300 tokens), already in the run directory" in proc.stdout
    assert "delete it to train one with tokenizer.vocab_size 400" in proc.stdout
    facts = json.loads(tfm("train", str(root / "recipe.yaml"), "tokenizer.vocab_size=400", "--out", str(run), "--dry-run",
                           "--json", "--device", "cpu").stdout)
    assert facts["recipe"]["tokenizer"]["vocab_size"] == 300 == facts["vocab_size"] and "300 tokens" in facts["tokenizer_kept"]
    assert snapshot(run) == before
    tfm("train", str(root / "recipe.yaml"), "tokenizer.vocab_size=400", "--out", str(run), "--device", "cpu")
    assert load_recipe(run / "recipe.yaml").tokenizer.vocab_size == 300  # what the dry run printed


def test_a_tokenizer_trained_on_other_text_is_warned_with_its_byte_share(root: Path, tmp_path: Path) -> None:
    """tokenizer.path naming a tokenizer trained on other text (here: upper-case only, so every lower-case letter of
    the corpus falls back to bytes) trained without a word; the start now measures the share of training tokens
    that are byte fallback and names the characters. A tokenizer trained on the corpus itself gets no warning."""
    other = write(tmp_path / "other.tsv", (root / "train.tsv").read_text().upper())
    for corpus, warned in ((other, True), (root / "train.tsv", False)):
        tok = tmp_path / f"tok-{warned}.json"
        tfm("tokenize", "--corpus", str(corpus), "--vocab-size", "400", "--out", str(tok))
        proc = tfm("train", str(root / "recipe.yaml"), f"tokenizer.path={tok}", "train.max_steps=2", "train.save_every=2",
                   "--out", str(tmp_path / f"run-{warned}"), "--device", "cpu")
        line = next((x for x in proc.stderr.splitlines() if "byte fallback" in x), None)
        if not warned:
            assert line is None, line
            continue
        assert line is not None and line.startswith("warning: the tokenizer tokenizer.path"), proc.stderr
        share = float(re.search(r"encodes ([0-9.]+)% of the training tokens", line).group(1))
        assert 20 < share <= 100 and "characters without a piece of their own: e " in line, line
        # the dry run, which encodes the corpus with that tokenizer too, says it as well (it said nothing)
        dry = tfm("train", str(root / "recipe.yaml"), f"tokenizer.path={tok}", "--out", str(tmp_path / "dry"), "--dry-run")
        assert f"warning: {line.removeprefix('warning: ')}" in dry.stderr.replace("\n", " "), dry.stderr
        assert line.endswith("train one on this corpus with `tfm tokenize RECIPE`, or set tokenizer.path: null to have the run train one"), line
        # one `tfm tokenize` left in the run directory, tokenizer.path null: "set tokenizer.path: null" could not help
        left = tmp_path / "left"
        left.mkdir()
        shutil.copy(tok, left / "tokenizer.json")
        dry = tfm("train", str(root / "recipe.yaml"), "--out", str(left), "--dry-run")
        said = next(x for x in dry.stderr.splitlines() if "byte fallback" in x)
        assert said.startswith(f"warning: the tokenizer {left / 'tokenizer.json'} encodes") and said.endswith(
            f"(it replaces that file), or delete {left / 'tokenizer.json'} to have the run train one"), said


def test_a_tokenizer_the_run_trains_too_small_for_the_corpus_is_warned(root: Path, tmp_path: Path) -> None:
    """tokenizer.vocab_size=300 leaves 40 pieces beside the 256 bytes: letters of the corpus were spelled in bytes,
    and `tfm train` said nothing, where `tfm tokenize` warns. A vocabulary that holds the corpus's characters (the
    400 of the other tests) gets no warning."""
    def said(size: int) -> list[str]:
        proc = tfm("train", str(root / "recipe.yaml"), f"tokenizer.vocab_size={size}", "train.max_steps=1", "train.save_every=1",
                   "--out", str(tmp_path / f"run-{size}"), "--device", "cpu")
        return [x for x in proc.stderr.splitlines() if "byte fallback" in x]

    assert said(400) == []
    (line,) = said(300)
    assert line.startswith("warning: the tokenizer this run trained encodes"), line
    assert "tokenizer.vocab_size=300 is too small for this corpus's characters" in line and line.endswith("raise tokenizer.vocab_size (the quickstart's is 8,000)"), line


def test_the_byte_share_is_counted_in_chunks_of_any_id_type() -> None:
    """The share was counted on int64 copies of every id, with full-size masks (674 MB over the ids of a 2M-line
    corpus), and counted <unk> twice (as a byte and as itself). Now a chunk at a time, in the ids' own type."""
    import random

    import torch

    from tfm_cli.tokenizer import FIRST_PIECE_ID, N_SPECIAL, Tokenizer
    from tfm_cli.training.checks import _unpieced

    rng = random.Random(0)
    ids = [rng.choice([Tokenizer.unk_id, N_SPECIAL, FIRST_PIECE_ID - 1, FIRST_PIECE_ID, 1, 2, 4000]) for _ in range(1001)]
    expected = (sum(N_SPECIAL <= i < FIRST_PIECE_ID for i in ids), ids.count(Tokenizer.unk_id))
    for dtype in (torch.uint16, torch.int16, torch.int32, torch.int64):  # (a corpus keeps its ids in uint16)
        assert _unpieced(torch.tensor(ids, dtype=dtype), chunk=7) == expected
    assert _unpieced(torch.tensor([], dtype=torch.int16)) == (0, 0)


def _dev_set_runs(root: Path, tmp_path: Path, devs: list[tuple[Path, bool]]) -> list[tuple[Path, bool, list[str]]]:
    """For each (dev set, whether it is warned about): what a dry run says on stderr (one line) and, where warned, a
    start of one step too, with a tokenizer of root's corpus (which the dry run needs for the dev set's checks)."""
    tok = tmp_path / "tok.json"
    tfm("tokenize", "--corpus", str(root / "train.tsv"), "--vocab-size", "400", "--out", str(tok))
    found = []
    for dev, warned in devs:
        args = ["train", str(root / "recipe.yaml"), f"tokenizer.path={tok}", f"data.dev={dev}"]
        procs = [tfm(*args, "--out", str(tmp_path / f"dry-{warned}"), "--dry-run")]
        if warned:
            procs.append(tfm(*args, "train.max_steps=1", "train.save_every=1", "--out", str(tmp_path / "run"), "--device", "cpu"))
        found.append((dev, warned, [proc.stderr.replace("\n", " ") for proc in procs]))
    return found


def test_a_dev_set_in_another_script_is_warned_about(root: Path, tmp_path: Path) -> None:
    """A German run given a Russian dev set trained and scored to the end without a word, though the dev scores
    pick the best checkpoint and the final model. A side of data.dev far more byte fallback than that side of
    data.train is warned about, by the start and by the dry run; a dev set of the corpus's own language is not."""
    greek = write(tmp_path / "greek.tsv", "Καλημέρα σας, φίλε μου.\tGood morning, my friend.\n" * 20)
    own = write(tmp_path / "own.tsv", "".join((root / "train.tsv").read_text().splitlines(keepends=True)[-40:]))
    for dev, warned, said in _dev_set_runs(root, tmp_path, [(greek, True), (own, False)]):
        for text in said:
            found = re.search(rf"warning: data\.dev {re.escape(str(dev))}: (\d+)% of its source tokens \(data\.train: ([0-9.]+)%\) "
                              r"are byte fallback", text)
            assert bool(found) == warned, text
            if warned:
                assert int(found.group(1)) > 50 and float(found.group(2)) < 1 and "target tokens" not in text, text
                assert "is it in the languages of data.train" in text


def test_a_dev_set_of_the_other_direction_or_tfm_s_own_beside_another_corpus_is_warned_about(root: Path, tmp_path: Path) -> None:
    """An en->fr run given the bundled fr->en dev set (the recipe's, or the default where it names none) scored BLEU
    0.10 to the end without a word: a joint vocabulary holds both languages, so no byte fallback tells. The dev set
    of the other direction is warned about (its source side reads like the training targets), by the start and the
    dry run, and so is tfm's own dev set beside a corpus of the user's; the same pairs the right way round are not."""
    pairs = [line.split("\t")[:2] for line in (root / "train.tsv").read_text().splitlines()[-40:]]
    right = write(tmp_path / "right.tsv", "".join(f"{s}\t{t}\n" for s, t in pairs))
    swapped = write(tmp_path / "swapped.tsv", "".join(f"{t}\t{s}\n" for s, t in pairs))
    for dev, warned, said in _dev_set_runs(root, tmp_path, [(swapped, True), (right, False)]):
        for text in said:
            found = re.search(rf"warning: data\.dev {re.escape(str(dev))} reads as the other direction of data\.train: its "
                              r"source side is like the training targets and its target side like the training sources "
                              r"\(([0-9.]+) and ([0-9.]+) on a scale", text)
            assert bool(found) == warned, text
            if warned:
                assert float(found.group(1)) < 0.3 and float(found.group(2)) > 0.7, text
                assert "awk -F'\\t' -v OFS='\\t' '{print $2, $1}'" in text
        assert "tfm's own French-English dev set" not in said[0]
    dry = tfm("train", str(root / "recipe.yaml"), "data.dev=bundled:tatoeba-fr-en/dev.tsv.gz", "--dry-run", "--out", str(tmp_path / "dry"))
    said = (f"warning: data.dev is bundled:tatoeba-fr-en/dev.tsv.gz, tfm's own French-English dev set (the recipe's, or the "
            f"default where it names none), but data.train is a corpus of yours ({root / 'train.tsv'}): the dev scores")
    assert said in dry.stderr.replace("\n", " "), dry.stderr
    bundled = tfm("train", str(root / "recipe.yaml"), "data.train=bundled:tatoeba-fr-en/dev.tsv.gz", "data.dev=null", "--dry-run",
                  "--out", str(tmp_path / "dry"))
    assert "tfm's own French-English dev set" not in bundled.stderr


def test_tokenize_out_never_replaces_an_input_or_a_foreign_file(root: Path, tmp_path: Path) -> None:
    corpus = Path(shutil.copy(root / "train.tsv", tmp_path / "corpus.tsv"))
    kept = corpus.read_bytes()
    error_line(tfm("tokenize", "--corpus", str(corpus), "--out", str(corpus), check=False), "--out", "is also an input")
    notes = write(tmp_path / "notes.txt", "my notes\n")
    error_line(tfm("tokenize", "--corpus", str(corpus), "--out", str(notes), check=False), "not a tokenizer.json")
    error_line(tfm("tokenize", "--corpus", str(corpus), "--out", str(tmp_path), check=False), "is a directory")
    error_line(tfm("tokenize", "--corpus", str(corpus), "--out", str(notes / "tok.json"), check=False), "cannot be written")
    assert corpus.read_bytes() == kept and notes.read_text() == "my notes\n"
    tok = tmp_path / "tok.json"
    for _ in range(2):  # a tokenizer it wrote may be replaced
        tfm("tokenize", "--corpus", str(corpus), "--vocab-size", "400", "--out", str(tok))
    assert json.loads(tok.read_text())["model"]["type"] == "BPE"


def test_unwritable_outputs_are_refused_before_the_work(run: Path, root: Path, tmp_path: Path) -> None:
    pairs = write(tmp_path / "pairs.tsv", _head(20))
    blocker = write(tmp_path / "a-file", "x")  # a path under a file can never be created
    proc = translate(run, "--score", str(pairs), "--output", str(blocker / "out.txt"))
    error_line(proc, "--output", "cannot be written")
    error_line(translate(run, "--score", str(pairs), "--output", str(pairs)), "--output", "is also an input")
    error_line(translate(run, "--score", str(pairs), "--output", str(tmp_path)), "--output", "is a directory")
    proc = tfm("translate", "--model", str(run), "--device", "cpu", "--score", str(pairs), "--output", "-", cwd=tmp_path, check=False)
    error_line(proc, "--output - would write a file named '-'", code=2)  # it did, in the current directory
    assert not (tmp_path / "-").exists()
    for option in ("--html", "--image"):
        proc = tfm("inspect-attn", "--model", str(run), "--device", "cpu", "Je suis.", option, str(blocker / "x.png"), check=False)
        error_line(proc, option, "cannot be written")
    proc = tfm("export", str(run), "--format", "release", "--out", str(blocker / "export"), check=False)
    error_line(proc, str(blocker / "export"), "cannot be written")
    error_line(tfm("train", "--curves", str(blocker), check=False), f"{blocker} is a file, not a run directory")
    assert pairs.read_text() == _head(20)


def test_a_failed_command_leaves_no_output_folder_behind(run: Path, tmp_path: Path) -> None:
    """The output's missing folders are made when it is written, not while it is checked: a bad --model after a
    good --html/--output left `new/` behind. A good command still makes them."""
    pairs = write(tmp_path / "pairs.tsv", _head(5))
    missing = str(tmp_path / "no-such-run")
    proc = tfm("inspect-attn", "--model", missing, "Je suis.", "--html", str(tmp_path / "new" / "x.html"), check=False)
    error_line(proc, "no-such-run", "does not exist")
    error_line(translate(Path(missing), "--score", str(pairs), "--output", str(tmp_path / "new" / "out.txt")), "does not exist")
    assert not (tmp_path / "new").exists()
    proc = translate(run, "--score", str(pairs), "--output", str(tmp_path / "new" / "deeper" / "out.txt"))
    assert proc.returncode == 0, proc.stderr
    assert len((tmp_path / "new" / "deeper" / "out.txt").read_text(encoding="utf-8").splitlines()) == 5


def test_outputs_never_replace_the_model_they_come_from(copy: Path, tmp_path: Path) -> None:
    """`--output RUN/model.safetensors` wrote the translations over the weights (the run could not translate any
    more); the model's own files are inputs of the command, like the corpus files."""
    pairs = write(tmp_path / "pairs.tsv", _head(5))
    before = snapshot(copy)
    for model, target in (
        (copy, copy / "model.safetensors"), (copy, copy / "tokenizer.json"), (copy, copy / "recipe.yaml"),
        (copy / "model.safetensors", copy / "tokenizer.json"),
    ):
        # (refused before the model is loaded, as a file of a model, then as the command's input)
        error_line(translate(model, "--score", str(pairs), "--output", str(target)), "--output", "writing it would destroy it")
    for option in ("--html", "--image"):
        proc = tfm("inspect-attn", "--model", str(copy), "--device", "cpu", "Je suis.", option, str(copy / "model.safetensors"), check=False)
        error_line(proc, option, "writing it would destroy it")
    assert snapshot(copy) == before
    translate(copy, "--score", str(pairs), "--output", str(copy / "hyp.en"))  # beside the model is fine
    assert len((copy / "hyp.en").read_text(encoding="utf-8").splitlines()) == 5


def test_an_output_file_that_is_also_standard_output_is_refused(run: Path, tmp_path: Path) -> None:
    """`--output out.txt > out.txt` (or `--output /dev/stdout > out.txt`) gave two writers of one file, each from its
    own offset: the scores table written over the start of the translations, or the translations left and the
    scores lost, with exit 0. Refused before any translating; a pipe or terminal behind both stays fine."""
    src, ref = write(tmp_path / "s.fr", "Bonjour.\nMerci.\n"), write(tmp_path / "r.en", "Hello.\nThanks.\n")
    out = tmp_path / "out.txt"
    for output in (str(out), "/dev/stdout"):
        out.write_text("before\n", encoding="utf-8")
        with open(src, "rb") as stdin, open(out, "wb") as stdout:
            proc = start_tfm("translate", "--model", str(run), "--device", "cpu", "--reference", str(ref),
                             "--output", output, stdin=stdin, stdout=stdout, text=True)
            _, stderr = proc.communicate(timeout=120)
        error_line(subprocess.CompletedProcess(proc.args, proc.returncode, "", stderr), "--output", "also where standard output goes")
        assert out.read_text(encoding="utf-8") == "", output  # the shell's `>` emptied it; tfm wrote nothing
    proc = translate(run, "--reference", str(ref), "--output", "/dev/stdout", stdin=src.read_bytes())  # a pipe
    assert proc.returncode == 0 and "BLEU" in proc.stdout and len(proc.stdout.splitlines()) > 2, proc.stderr


def test_a_stray_carriage_return_in_stdin_is_told_apart_from_cr_line_ends(run: Path) -> None:
    """A CR inside one line of LF-ended input was called "CR-only line ends" with `tr '\\r' '\\n'` as the fix, which
    splits that line in two (one output line more than the input: a --reference run out of step)."""
    proc = translate(run, stdin=b"Bonjour !\nMerci\rOui.\nFin.\n")
    error_line(proc, "stdin line 2", "stray carriage return")
    assert "tr '\\r' ' '" in proc.stderr and "tr '\\r' '\\n'" not in proc.stderr, proc.stderr
    proc = translate(run, stdin=b"Merci\rOui.")  # no line feed at all: either kind, both fixes said
    error_line(proc, "stdin line 1", "carriage return")
    assert "tr '\\r' ' '" in proc.stderr and "tr '\\r' '\\n'" in proc.stderr, proc.stderr


def test_a_cut_caused_by_min_len_blames_min_len(run: Path) -> None:
    """With --min-len at or past the maximum output length the end of sentence is forbidden up to the cut, and the
    warning advised raising --max-len, which only makes such outputs longer."""
    proc = translate(run, "--min-len", "20", "--max-len", "3", "Merci.")
    assert proc.returncode == 0, proc.stderr
    assert "--min-len 20 forbids the end of sentence" in proc.stderr and "raise --max-len" not in proc.stderr, proc.stderr
    assert "(input tokens + 3)" in proc.stderr, proc.stderr
    # a --min-len past the model's own limit (max_positions 64: 63 tokens): that limit is the cut, not the input + 100
    proc = translate(run, "--min-len", "80", "--max-len", "100", "Merci.")
    assert "cut at the maximum output length (the model's limit of 63 tokens)" in proc.stderr, proc.stderr
    assert "--min-len 80 forbids" in proc.stderr and "input tokens + 100" not in proc.stderr, proc.stderr
    proc = translate(run, "--max-len", "1", "--greedy", "Je ne sais pas ce que tu veux dire.")  # a plain short limit
    if "cut at the maximum output length" in proc.stderr:  # (unless this model ends it within one token)
        assert "raise --max-len" in proc.stderr and "--min-len" not in proc.stderr, proc.stderr


def test_a_file_given_where_a_run_directory_is_expected_is_said_to_be_one(run: Path, tmp_path: Path) -> None:
    """`--curves RUN/metrics.jsonl` said the file "has no metrics.jsonl"; a FIFO as --model "holds no model"."""
    error_line(tfm("train", "--curves", str(run / "recipe.yaml"), check=False), f"{run / 'recipe.yaml'} is a file, not a run directory")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    error_line(translate(fifo, "Bonjour."), f"{fifo} is neither a weights file (.safetensors) nor a run directory")


def test_carriage_return_line_ends_are_not_read_as_one_line(run: Path, tmp_path: Path) -> None:
    lines = _head(50).splitlines()
    cr = write(tmp_path / "mac.tsv", "\r".join(lines) + "\r")
    with pytest.raises(CorpusError) as caught:
        list(read_pairs(str(cr)))
    one_line(caught.value, "mac.tsv:1", "carriage return", "tr '\\r' '\\n'")
    proc = tfm("tokenize", "--corpus", str(cr), "--out", str(tmp_path / "tok.json"), check=False)
    error_line(proc, "mac.tsv:1", "carriage return")
    error_line(translate(run, stdin=b"Bonjour.\rMerci.\rSalut.\r"), "stdin line 1", "carriage return")
    crlf = write(tmp_path / "dos.tsv", "\r\n".join(lines) + "\r\n")  # Windows line ends are fine
    assert [(s, t) for _, s, t in read_pairs(str(crlf))] == [tuple(line.split("\t")[:2]) for line in lines]
    assert len(translate(run, stdin=b"Bonjour.\r\nMerci.\r\n").stdout.splitlines()) == 2


def test_vocabulary_size_and_length_penalty_have_upper_bounds(run: Path, root: Path, tmp_path: Path) -> None:
    from tfm_cli.recipe import load_recipe
    from tfm_cli.translator import Translator

    for override, key in (("tokenizer.vocab_size=10000000000", "tokenizer.vocab_size"), ("decode.alpha=1e308", "decode.alpha")):
        with pytest.raises(RecipeError) as caught:
            load_recipe(root / "recipe.yaml", [override])
        (problem,) = caught.value.problems
        assert problem.startswith(f"override {override!r}: {key}") and "must be between" in problem, problem
    with pytest.raises(TfmError, match="too large"):
        train_tokenizer(["a b c"], vocab_size=10**10)  # the Rust trainer would abort the process
    proc = tfm("tokenize", "--corpus", str(root / "train.tsv"), "--vocab-size", str(2**64), "--out", str(tmp_path / "t.json"), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "panicked" not in proc.stderr
    assert translate(run, "--alpha", "1e308", "Bonjour.").returncode == 2
    translator = Translator.load(run, device="cpu")
    for alpha in (float("nan"), 1e308):
        with pytest.raises(TfmError, match="between 0 and 10"):
            translator.translate("Bonjour.", alpha=alpha)


def test_a_huge_maximum_length_offset_means_no_limit_but_the_model_s(run: Path) -> None:
    """--max-len 2**63 - 1 overflowed int64 and cut every output to one token; a larger one was a traceback."""
    from tfm_cli.translator import Translator

    translator = Translator.load(run, device="cpu")
    sources = ["Bonjour.", "Je suis étudiant.", "Il fait beau aujourd'hui."]
    want = [r.tokens for r in translator.translate(sources, max_len_offset=1000, min_len=40)]
    assert all(len(tokens) == 63 for tokens in want)  # every output runs to the model's own maximum
    for offset in (2**63 - 1, 2**64, 10**30):
        assert [r.tokens for r in translator.translate(sources, max_len_offset=offset, min_len=40)] == want
    proc = translate(run, "--max-len", str(10**30), "--greedy", "Bonjour.")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and len(proc.stdout.splitlines()) == 1, proc.stderr


def test_a_beam_wider_than_the_vocabulary_is_refused(run: Path) -> None:
    """--beam 10**20 was a torch overflow traceback, --beam 10**8 an allocation of 43 GB; the vocabulary (400
    tokens here) is the widest beam that can be filled. The widest one still translates."""
    from tfm_cli.translator import Translator

    for beam in (401, 10**8, 10**20):
        error_line(translate(run, "--beam", str(beam), "Bonjour."), f"beam={beam} is wider than the model's vocabulary (400 tokens)")
    proc = tfm("bench", "translate", "--model", str(run), "--beam", str(10**20), "--beam-only", "--cache-only",
               "--batch-sizes", "1", "--sentences", "1", check=False)
    error_line(proc, "is wider than the model's vocabulary")
    with pytest.raises(TfmError, match="wider than the model's vocabulary"):
        Translator.load(run, device="cpu", beam=10**20)
    translator = Translator.load(run, device="cpu")
    with pytest.raises(TfmError, match="wider than the model's vocabulary"):
        translator.translate("Bonjour.", beam=401)
    assert translator.translate(["Bonjour.", "Merci."], beam=400, max_len_offset=2)[1].source == "Merci."


def test_dry_run_makes_the_checks_of_a_real_start(root: Path, tmp_path: Path) -> None:
    blocker = write(tmp_path / "a-file", "x")
    dry = ("train", str(root / "recipe.yaml"), "--dry-run")
    error_line(tfm(*dry, "--out", str(blocker), check=False), str(blocker), "not a directory")
    error_line(tfm(*dry, "--out", str(blocker / "run"), check=False), "cannot create the run directory")
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "gone")  # it said "File exists" of a path that does not exist
    for extra in ((), ("--dry-run",)):
        error_line(tfm(*dry[:2], *extra, "--out", str(dangling), check=False), "dangling", "broken symbolic link")
    assert not (tmp_path / "gone").exists()
    # a name that is no device is a usage error (exit 2), as any other bad choice is, in every command with --device
    error_line(tfm(*dry, "--device", "tpu", check=False), "Invalid value for '--device': unknown device 'tpu'", code=2)
    for command in (("translate", "x"), ("inspect-attn", "x"), ("bench", "attention")):
        error_line(tfm(*command, "--device", "cuda:x", check=False), "unknown device 'cuda:x'", code=2)
    for extra in ((), ("--dry-run",)):  # a dry run passed fp16 on a CPU, which a start refuses
        proc = tfm(*dry[:2], *extra, "train.precision=fp16", "--device", "cpu", "--out", str(tmp_path / "fp16"), check=False)
        error_line(proc, "train.precision fp16 needs a CUDA device, and this runs on cpu")
    assert not (tmp_path / "fp16").exists()
    error_line(tfm(*dry, "data.max_len=1", check=False), "data.max_len", "at least 2")
    dev = write(tmp_path / "dev.tsv", _head(5) + "no tab here\n")
    error_line(tfm(*dry, f"data.dev={dev}", check=False), "dev.tsv:6", "no tab")
    proc = tfm(*dry, "--out", str(tmp_path / "fresh"))
    assert "3,000 in data.train" in proc.stdout and not (tmp_path / "fresh").exists()


def test_inspect_attn_refuses_a_sentence_longer_than_the_model_takes_at_once(run: Path) -> None:
    long = "le chat " * 200  # max_positions is 64 here
    proc = tfm("inspect-attn", "--model", str(run), "--device", "cpu", long, check=False)
    error_line(proc, "the sentence has", "at most 63")
    assert "Warning" not in proc.stderr  # refused before a (truncated) translation was made


def test_bench_translate_refuses_batches_larger_than_its_sentences(run: Path) -> None:
    for sizes in ("1,8,32", "1,,2"):
        proc = tfm("bench", "translate", "--model", str(run), "--sentences", "4", "--batch-sizes", sizes, check=False)
        assert proc.returncode == 2 and "--batch-sizes" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--sentences", str(10**20), "--batch-sizes", "1"], "lower --sentences"),  # was a 16 TB allocation traceback
        (["--sentences", str(10**7), "--batch-sizes", str(10**7)], "lower --batch-sizes"),
    ],
)
def test_bench_translate_refuses_what_could_not_fit_in_memory(run: Path, args: list[str], expected: str) -> None:
    proc = tfm("bench", "translate", "--model", str(run), "--device", "cpu", *args, check=False)
    error_line(proc, "more than the", expected)


def test_the_temporary_files_of_a_killed_save_are_swept(root: Path, tmp_path: Path) -> None:
    """`kill -9` in the middle of a checkpoint save left `checkpoints/.step-*.tmp` (a state file: hundreds of MB
    for the base recipe) through resumes and the end of the run. The next trainer of the run, which holds its
    lock, removes them; other files are left alone."""
    import tfm_cli.training as training
    from tfm_cli.recipe import load_recipe

    out = tmp_path / "run"
    r = load_recipe(root / "recipe.yaml", ["train.max_steps=2", "train.save_every=2", "data.dev=null"])
    training.train(r, out, device="cpu")
    stale = [out / "checkpoints" / ".step-00000004.state.pt.u3w_h6eb.tmp", out / "checkpoints" / ".step-00000004.safetensors.x1.tmp",
             out / ".model.safetensors.k2.tmp", out / "checkpoints" / ".write-test-abc",
             # safetensors' own temporary files (its writer's `.tmpXXXXXX`, as large as the weights)
             out / "checkpoints" / ".tmpqtKlgE", out / ".tmpbTseVy"]
    kept = [out / "notes.tmp", out / "checkpoints" / "README", out / ".tmpnotes", out / ".tmp-old-copy"]
    for path in stale + kept:
        path.write_bytes(b"partial")
    training.train(run_dir=out, resume=True, device="cpu")  # finished: nothing to do, but the lock was taken
    assert not any(p.exists() for p in stale) and all(p.exists() for p in kept)


@pytest.mark.parametrize("kind", ["cpu", "cuda"])
def test_running_out_of_memory_in_a_step_is_one_line(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A step that cannot allocate (`ulimit -v`, a batch too large for the GPU) ended the run with a 40-line
    traceback from inside backward(). It is one TfmError naming the device, the step, the last intact checkpoint
    and the settings that take less memory; the checkpoints already written are kept."""
    import tfm_cli.training.trainer as trainer
    from tfm_cli.recipe import load_recipe

    real_step, calls = trainer.train_step, []
    errors = {
        "cpu": RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
                            "you tried to allocate 67108864 bytes. Error code 12 (Cannot allocate memory)"),
        "cuda": torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB."),
    }

    def step(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:
            raise errors[kind]
        return real_step(*args, **kwargs)

    monkeypatch.setattr(trainer, "train_step", step)
    out = tmp_path / "run"
    r = load_recipe(root / "recipe.yaml", ["train.max_steps=8", "train.save_every=2", "data.dev=null"])
    with pytest.raises(TfmError) as caught:
        trainer.train(r, out, device="cpu")
    one_line(caught.value, "training ran out of memory on cpu after step 4", str(errors[kind]).splitlines()[-1],
             "the last checkpoint (step-00000004.safetensors, step 4) is intact")
    assert "lower train.max_tokens (raising train.accum_steps keeps the tokens per step)" in caught.value.hint
    assert [s for s, _ in checkpoint_steps(out)] == [2, 4]
    calls.clear()
    monkeypatch.setattr(trainer, "train_step", lambda *a, **k: (_ for _ in ()).throw(MemoryError()))
    with pytest.raises(TfmError) as caught:
        trainer.train(r, tmp_path / "run2", device="cpu")
    one_line(caught.value, "training ran out of memory on cpu in its first step (MemoryError); no checkpoint was saved yet")


def test_the_dry_run_checks_the_room_for_checkpoints(root: Path, tmp_path: Path) -> None:
    """`model.d_model=1000000000` passed `--dry-run` (exit 0), and the start refused it: its checkpoints would need
    more than the disk has. The dry run says so too, and still writes nothing."""
    out = tmp_path / "new" / "run"
    proc = tfm("train", str(root / "recipe.yaml"), "model.d_model=1000000000", "--out", str(out), "--dry-run", check=False)
    error_line(proc, "free, but 2 checkpoints of this", "-parameter model")
    assert not (tmp_path / "new").exists()
    proc = tfm("train", str(root / "recipe.yaml"), "--out", str(out), "--dry-run")
    assert proc.returncode == 0 and not (tmp_path / "new").exists()


def test_a_model_too_large_to_build_is_one_line(root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """model.d_model=10**12 passed the recipe checks, then torch could not size its weights: a RuntimeError
    traceback from --dry-run and from a start (after the tokenizer was trained). A model the memory cannot hold
    is said the same way, before the run's recipe.yaml and config.json are written, and what the start wrote before
    (its tokenizer, checkpoints/) is taken back."""
    out = tmp_path / "out"
    for extra in (["--dry-run"], ["--device", "cpu"]):
        proc = tfm("train", str(root / "recipe.yaml"), "model.d_model=1000000000000", "--out", str(out), *extra, check=False)
        error_line(proc, "the model (model.d_model=1000000000000", "cannot be built")
        assert not out.exists()  # the tokenizer and checkpoints/ the start made are taken back (they were left)
    import tfm_cli.training as training
    from tfm_cli.recipe import load_recipe

    class NoMemory(Transformer):
        def to(self, *args, **kwargs):
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 800000000000 bytes")

    monkeypatch.setattr(training.step, "Transformer", NoMemory)  # where the trainer builds its model
    with pytest.raises(TfmError) as caught:
        training.train(load_recipe(root / "recipe.yaml"), tmp_path / "run", device="cpu")
    one_line(caught.value, "cannot be built on cpu", "can't allocate memory")
    assert not (tmp_path / "run").exists()


def test_a_position_table_larger_than_the_memory_is_refused_before_it_is_built(root: Path, tmp_path: Path) -> None:
    """model.max_positions=10**8 (a "no limit" guess) passed --dry-run; the start then spent a minute and 13 GB of a
    24 GB machine on the sinusoid tables before torch's allocator gave up. The tables' size (like the weights',
    their gradients' and Adam's) is held to the memory the machine has, before any tensor is made."""
    out = tmp_path / "out"
    for extra in (["--dry-run"], ["--device", "cpu"]):
        started = time.monotonic()
        proc = tfm("train", str(root / "recipe.yaml"), "model.max_positions=100000000000", "--out", str(out), *extra,
                   check=False)
        error_line(proc, "the model (model.d_model=32", "model.max_positions=100000000000", "cannot be built on cpu",
                   "and its position tables need 23,841.9 GiB, more than the")
        assert not out.exists() and time.monotonic() - started < 60


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("train.warmup_steps", 0, "train.warmup_steps=0 must be >= 1"),  # was ZeroDivisionError after the tokenizer
        ("train.max_steps", "4", "train.max_steps='4' must be an integer"),  # was a TypeError, a run half written
        ("model.n_heads", 3, "must be divisible by model.n_heads=3"),  # was a ValueError from ModelConfig
        # a misspelt attribute: the dataclass took it, and the run trained on with train.max_steps as it was
        ("train.max_step", 3, "train.max_step is not a recipe key; tfm's is train.max_steps"),
        ("model.d_modell", 64, "model.d_modell is not a recipe key; did you mean model.d_model?"),
    ],
)
def test_a_recipe_changed_in_code_is_checked_as_a_file_is(root: Path, tmp_path: Path, key: str, value, expected: str) -> None:
    """train(recipe) with a field set after load_recipe (a Python user's way to try a setting): the same RecipeError
    a recipe file with that value gets, before anything is written; and arguments of the wrong kind are TypeErrors."""
    import tfm_cli.training as training
    from tfm_cli.recipe import load_recipe

    r = load_recipe(root / "recipe.yaml")
    section, name = key.split(".")
    setattr(getattr(r, section), name, value)
    out = tmp_path / "run"
    with pytest.raises(RecipeError) as caught:
        training.train(r, out, device="cpu")
    assert expected in str(caught.value) and "given to train()" in str(caught.value)
    assert nothing_written(out)
    with pytest.raises(TypeError, match="must be True or False"):
        training.train(load_recipe(root / "recipe.yaml"), out, device="cpu", resume="no")  # a str that is truthy
    with pytest.raises(TypeError, match="must be a Recipe"):
        training.train({"name": "x"}, out, device="cpu")
    assert nothing_written(out)


def test_a_recipe_built_in_code_takes_paths_tuples_and_numpy_numbers(root: Path, tmp_path: Path) -> None:
    """`r.data.train = Path(...)`, `r.train.betas = (0.9, 0.98)`: a Python user's natural values were refused ("must
    be one TSV file path ...", "must be a list of numbers"); they are taken as the YAML would hold them, and the
    run's recipe.yaml is written with them as text and lists. The caller's recipe is left as it was."""
    import numpy

    import tfm_cli.training as training
    from tfm_cli.recipe import load_recipe, validate_recipe

    r = load_recipe(root / "recipe.yaml")
    r.data.train, r.data.dev = Path(r.data.train), None
    r.train.betas, r.train.max_steps, r.train.lr_factor = (0.9, 0.98), numpy.int64(2), numpy.float32(0.5)
    assert validate_recipe(r) == []
    result = training.train(r, tmp_path / "run", device="cpu")
    assert result.step == 2
    saved = yaml.safe_load((tmp_path / "run" / "recipe.yaml").read_text(encoding="utf-8"))
    assert saved["data"]["train"] == str(r.data.train) and saved["train"]["betas"] == [0.9, 0.98]
    assert saved["train"]["max_steps"] == 2 and saved["train"]["lr_factor"] == 0.5
    assert isinstance(r.data.train, Path) and r.train.betas == (0.9, 0.98)  # a copy was written, not the caller's
    r.data.train = [Path("a.fr"), b"b.en"]  # what stays wrong is still named
    assert any("data.train=" in p and "must be one TSV file path" in p for p in validate_recipe(r))


def test_a_section_replaced_in_code_is_a_recipe_error(root: Path, tmp_path: Path) -> None:
    """`r.train = None` (or a dict) after load_recipe: an AttributeError traceback from the checks."""
    import tfm_cli.training as training
    from tfm_cli.recipe import load_recipe

    r = load_recipe(root / "recipe.yaml")
    r.train, r.model = None, {"d_model": 64}
    with pytest.raises(RecipeError) as caught:
        training.train(r, tmp_path / "run", device="cpu")
    assert "train=None must be a TrainRecipe (tfm_cli.recipe), not null" in str(caught.value)
    assert "model={'d_model': 64} must be a ModelRecipe (tfm_cli.recipe), not a mapping" in str(caught.value)
    assert nothing_written(tmp_path / "run")


def test_ctrl_c_while_the_model_is_built_is_ctrl_c(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop signal while torch defines a class on first use reaches the model builder as Python 3.11's
    "RuntimeError: Error calling __set_name__" around the KeyboardInterrupt; it was reported as "the model ...
    cannot be built on this machine" (seen once in 14 SIGTERMs to a 2-process start). It stays an interruption."""
    import tfm_cli.training as training
    from tfm_cli.model import ModelConfig

    class Interrupted(Transformer):
        def __init__(self, config) -> None:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance") from KeyboardInterrupt()

    monkeypatch.setattr(training.step, "Transformer", Interrupted)  # where the trainer builds its model
    with pytest.raises(KeyboardInterrupt):
        training.step.setup_model(ModelConfig(vocab_size=32, d_model=16, d_ff=32, n_heads=2), TrainRecipe(), torch.device("cpu"), "fp32")


def test_tokenizer_path_is_the_tokenizer_the_run_trains_with(root: Path, run: Path, tmp_path: Path) -> None:
    """tokenizer.path: `~` is expanded by a start as by --dry-run (it was 'does not exist' after a dry run passed);
    a tokenizer.json that `tfm tokenize` left in the run directory no longer wins silently over it; and a resume
    reads the run's own copy, not the file tokenizer.path named (it was refused once that file had moved)."""
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(run / "tokenizer.json", home / "tok.json")
    out = tmp_path / "out"
    start = ("train", str(root / "recipe.yaml"), "tokenizer.path=~/tok.json", "train.max_steps=2", "train.save_every=2")
    env = {"HOME": str(home)}
    tfm(*start, "--out", str(out), "--device", "cpu", env_extra=env)
    assert (out / "tokenizer.json").read_bytes() == (run / "tokenizer.json").read_bytes()
    (home / "tok.json").unlink()  # the run has its own copy
    tfm("train", "--resume", str(out), "train.max_steps=3", "--device", "cpu", env_extra=env)
    # another tokenizer already in the run directory (here: one `tfm tokenize` wrote)
    shutil.copy(run / "tokenizer.json", home / "tok.json")
    other = tmp_path / "other"
    tfm("tokenize", "--corpus", str(root / "train.tsv"), "--vocab-size", "300", "--out", str(other / "tokenizer.json"))
    before = snapshot(other)
    for extra in (["--dry-run"], ["--device", "cpu"]):
        proc = tfm(*start, "--out", str(other), *extra, env_extra=env, check=False)
        error_line(proc, f"{other / 'tokenizer.json'} (left by `tfm tokenize` or an earlier start) is not tokenizer.path ~/tok.json")
        assert snapshot(other) == before
    # without tokenizer.path the run's tokenizer is used, and the log says so
    proc = tfm("train", str(root / "recipe.yaml"), "train.max_steps=1", "--out", str(other), "--device", "cpu")
    assert f"tokenizer: {other / 'tokenizer.json'} (" in proc.stderr and "not trained again" in proc.stderr


def test_run_directory_whose_name_is_not_utf8_is_refused_before_anything_is_written(root: Path, tmp_path: Path) -> None:
    """--out with a Latin-1 byte in its name (a valid Linux name): a traceback from tensorboard after the run's
    recipe.yaml and config.json were written; now one line before anything is, dry run or not."""
    out = tmp_path / os.fsdecode(b"caf\xe9")
    for extra in (["--dry-run"], ["--device", "cpu"]):
        proc = tfm("train", str(root / "recipe.yaml"), "train.max_steps=1", "--out", str(out), *extra, check=False)
        error_line(proc, "has a name that is not UTF-8")
        assert not out.exists()


def test_tokenizer_path_that_is_a_run_directory_names_its_tokenizer(root: Path, run: Path, tmp_path: Path) -> None:
    """tokenizer.path=RUN (a directory, as `tfm tokenize --tokenizer` takes): the hint gives RUN/tokenizer.json."""
    proc = tfm("train", str(root / "recipe.yaml"), f"tokenizer.path={run}", "--out", str(tmp_path / "out"), "--dry-run",
               check=False)
    error_line(proc, f"tokenizer.path: {run} is not a file")
    assert f"hint: give the file: tokenizer.path={run / 'tokenizer.json'}" in proc.stderr


def test_a_missing_tokenizer_path_says_how_to_train_it_there(root: Path, tmp_path: Path) -> None:
    """The hint was "train one with `tfm tokenize`": bare, that is a usage error, and `tfm tokenize RECIPE` writes
    runs/NAME/tokenizer.json, not tokenizer.path. Followed now, the start finds its tokenizer."""
    wanted = tmp_path / "toks" / "my tokenizer.json"
    args = [str(root / "recipe.yaml"), f"tokenizer.path={wanted}", "--out", str(tmp_path / "out"), "--dry-run"]
    proc = tfm("train", *args, check=False)
    error_line(proc, f"tokenizer.path: {wanted} does not exist")
    command = re.search(r"with `(tfm tokenize RECIPE --out .*?)`", proc.stderr).group(1)
    assert command == f"tfm tokenize RECIPE --out '{wanted}'"
    tfm("tokenize", *shlex.split(command.replace("RECIPE", str(root / "recipe.yaml")))[2:])
    tfm("train", *args)


def test_a_tokenizer_path_that_is_an_empty_folder_says_how_to_train_into_it(root: Path, tmp_path: Path) -> None:
    """The hint was `tfm tokenize RECIPE --out FOLDER`, which tfm tokenize refuses ("--out FOLDER is a directory").
    Followed now (a file in the folder, given as tokenizer.path), the start finds its tokenizer."""
    folder = tmp_path / "toks"
    folder.mkdir()
    args = [str(root / "recipe.yaml"), f"tokenizer.path={folder}", "--out", str(tmp_path / "out"), "--dry-run"]
    proc = tfm("train", *args, check=False)
    error_line(proc, f"tokenizer.path: {folder} is not a file")
    command, path = re.search(r"with `(tfm tokenize RECIPE --out .*?)` and give (tokenizer.path=\S+),", proc.stderr).groups()
    tfm("tokenize", *shlex.split(command.replace("RECIPE", str(root / "recipe.yaml")))[2:])
    tfm("train", *args[:1], *shlex.split(path), *args[2:])


@pytest.mark.parametrize("key", ["data.dev", "data.train"])
def test_an_empty_corpus_file_is_named_by_its_key_before_the_tokenizer_is_trained(root: Path, tmp_path: Path, key: str) -> None:
    """An empty dev file was said after the tokenizer's training (minutes on a large corpus), as "X contains no
    sentence pairs", naming neither data.dev nor data.dev=null."""
    import gzip

    empty = write(tmp_path / "empty.tsv", "")
    with gzip.open(tmp_path / "empty.tsv.gz", "wt"):  # a gzip of nothing, and a file of blank lines: no pair either
        pass
    blank = write(tmp_path / "blank.tsv", "\n\n")
    out = tmp_path / "out"
    for given, said in ((empty, "is empty"), (tmp_path / "empty.tsv.gz", "contains no sentence pairs"), (blank, "contains no sentence pairs")):
        for dry in ([], ["--dry-run"]):
            proc = tfm("train", str(root / "recipe.yaml"), f"{key}={given}", "--out", str(out), *dry, check=False)
            error_line(proc, f"{key}: {given} {said}")
            assert "tokenizer:" not in proc.stderr and not out.exists(), proc.stderr
            assert ("data.dev=null" in proc.stderr) == (key == "data.dev"), proc.stderr
            assert "hint: give a file of source<TAB>target lines" in proc.stderr, proc.stderr
    # one file of a source file and a target file: not "give a file of source<TAB>target lines"
    side = write(tmp_path / "side.fr", "Bonjour.\n")
    proc = tfm("train", str(root / "recipe.yaml"), f"{key}=[{side}, {empty}]", "--out", str(out), "--dry-run", check=False)
    error_line(proc, f"{key}: {empty} is empty")
    assert "hint: give a file of one sentence a line, line for line with the other" in proc.stderr, proc.stderr


def test_a_tokenizer_trained_smaller_than_asked_is_said_by_train(root: Path, tmp_path: Path) -> None:
    """`tfm tokenize` said "fewer than asked"; `tfm train` rewrote recipe.yaml's tokenizer.vocab_size unsaid."""
    out = tmp_path / "out"
    proc = tfm("train", str(root / "recipe.yaml"), "tokenizer.vocab_size=100000", "train.max_steps=1", "train.save_every=1",
               "train.average_last=1", "train.keep_last=1", "--out", str(out), "--device", "cpu")
    size = json.loads((out / "config.json").read_text())["vocab_size"]
    assert f"note: {size:,} tokens, fewer than the 100,000 asked" in proc.stderr and "(recipe.yaml records it)" in proc.stderr
    assert f"vocab_size: {size}" in (out / "recipe.yaml").read_text()


def test_a_beam_wider_than_the_tokenizer_is_refused_before_anything_is_written(root: Path, run: Path, tmp_path: Path) -> None:
    """tokenizer.path names a 400-token tokenizer, decode.beam=1000 passes the recipe's own check (vocab_size
    2000): the start says so before its first step (with a dev set it trained to the end, then failed in the
    final evaluation)."""
    out = tmp_path / "out"
    for extra in (["--dry-run"], []):  # the dry run says it too
        proc = tfm("train", str(root / "recipe.yaml"), f"tokenizer.path={run / 'tokenizer.json'}",
                   "tokenizer.vocab_size=2000", "decode.beam=1000", "--out", str(out), "--device", "cpu", *extra,
                   check=False)
        error_line(proc, "decode.beam=1000 is wider than the tokenizer's vocabulary (400 tokens)")
        assert not out.exists()


def test_a_run_that_cannot_resume_points_to_a_command_that_works(trained: Path, tmp_path: Path) -> None:
    """Checkpoints without their trainer states: the resume said 'start the run again without --resume', and that
    start said 'continue it with tfm train --resume' (a loop). The hint now names a start that is accepted."""
    run = Path(shutil.copytree(trained, tmp_path / "run"))
    for state in (run / "checkpoints").glob("*.state.pt"):
        state.unlink()
    before = snapshot(run)
    proc = tfm("train", "--resume", str(run), "train.max_steps=12", "--device", "cpu", check=False)
    error_line(proc, "has no checkpoint with its trainer state")
    assert f"hint: an exact resume needs the .state.pt files; start a new run from its recipe: tfm train {run / 'recipe.yaml'} --out NEW_DIR" in proc.stderr
    error_line(tfm("train", str(run / "recipe.yaml"), "--out", str(run), "--dry-run", check=False), "already holds a trained run")
    tfm("train", str(run / "recipe.yaml"), "--out", str(tmp_path / "new"), "--dry-run")
    assert snapshot(run) == before


def test_tokenize_override_without_a_recipe_is_a_usage_error(root: Path, tmp_path: Path) -> None:
    """`tfm tokenize --corpus c.tsv tokenizer.vocab_size=500` took the override for a recipe file and said only
    "tokenizer.vocab_size=500: no such file"; it now says what the word is and what to use instead."""
    out = tmp_path / "tok.json"
    proc = tfm("tokenize", "--corpus", str(root / "train.tsv"), "tokenizer.vocab_size=500", "--out", str(out), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    said = " ".join(line.strip("│ ") for line in proc.stderr.splitlines())
    assert "tokenizer.vocab_size=500 is an override, not a recipe file" in said and "--vocab-size" in said, said
    assert not out.exists()


def test_train_override_in_place_of_the_recipe_says_so(tmp_path: Path) -> None:
    """`tfm train train.max_steps=3` (the recipe left out) said "no such file; recipes in .: ..." of the override."""
    proc = tfm("train", "train.max_steps=3", "--dry-run", check=False, cwd=tmp_path)
    error_line(proc, "train.max_steps=3", "looks like an override", "recipes/tiny.yaml train.max_steps=3")


@pytest.mark.parametrize("command", [["train"], ["bench", "train"], ["tokenize"]])
def test_a_missing_recipe_is_said_as_every_missing_path(command: list[str], tmp_path: Path) -> None:
    """A missing recipe said `Error: /no/r.yaml: no such file` where every other missing path (--resume, --model,
    --tokenizer, a corpus) says `X does not exist`; now `recipe X does not exist`, with what to give as the hint."""
    missing = tmp_path / "no" / "r.yaml"
    proc = tfm(*command, str(missing), check=False)
    error_line(proc, f"Error: recipe {missing} does not exist")
    assert "hint: check the path; give a recipe file, or one tfm ships: bundled:base.yaml, bundled:big.yaml, bundled:tiny.yaml" in proc.stderr
    (tmp_path / "base.yaml").write_text("name: x\n", encoding="utf-8")
    proc = tfm(*command, str(tmp_path / "bsae.yaml"), check=False)
    error_line(proc, f"Error: recipe {tmp_path / 'bsae.yaml'} does not exist")
    assert f"hint: did you mean {tmp_path / 'base.yaml'}?" in proc.stderr


def test_tokenize_encode_without_tokenizer_finds_the_one_tokenize_wrote(root: Path, tmp_path: Path) -> None:
    """`tfm tokenize RECIPE` then `tfm tokenize --encode TEXT`, the README's order: the second looked only for runs
    with trained weights, so it failed with 'no trained model found' and a hint naming --model, an option
    tokenize does not have. It now uses the newest runs/*/tokenizer.json, and says how to choose another."""
    tfm("tokenize", "--corpus", str(root / "train.tsv"), "--vocab-size", "300", "--out", str(tmp_path / "runs" / "mine" / "tokenizer.json"))
    proc = tfm("tokenize", "--encode", "Bonjour.", cwd=tmp_path)
    assert proc.stdout.splitlines()[0] == "piece\tid"
    assert f"using {Path('runs') / 'mine' / 'tokenizer.json'} (the most recent run" in proc.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = tfm("tokenize", "--encode", "Bonjour.", cwd=empty, check=False)
    error_line(proc, "no tokenizer found under runs/")
    assert "--tokenizer" in proc.stderr and "--model" not in proc.stderr


def test_options_that_would_be_ignored_are_refused_or_said(run: Path, tmp_path: Path) -> None:
    """Each of these ran with exit 0 and the option did nothing: --curves with a recipe's override (read as
    RECIPE, and the error then said "drop RECIPE and --resume"), --dry-run, --out or --device; --greedy with --alpha
    (greedy search has no length penalty; --greedy --beam was refused); --numbers where no heatmap is drawn. And
    --score with --reference said "drop TEXT and --reference" where no TEXT was given."""
    for extra, named in ((["train.max_steps=3"], "drop train.max_steps=3"), (["--dry-run", "--device", "cpu"], "drop --dry-run --device cpu"),
                         (["--out", str(tmp_path / "o")], "drop --out")):
        proc = tfm("train", "--curves", str(run), *extra, check=False)
        error_line(proc, "--curves shows an existing run and trains nothing", named, code=2)
    assert not (tmp_path / "o").exists()
    base = ("translate", "--model", str(run), "--device", "cpu")
    error_line(tfm(*base, "--greedy", "--alpha", "2", "Bonjour.", check=False), "--greedy has no length penalty; drop --alpha 2", code=2)
    refs = write(tmp_path / "ref.en", "Hello.\n")
    proc = tfm(*base, "--score", str(refs), "--reference", str(refs), check=False)
    error_line(proc, "--score reads sources and references from its file(s); drop --reference", code=2)
    assert "TEXT" not in proc.stderr
    inspect = ("inspect-attn", "--model", str(run), "--device", "cpu", "Je suis étudiant.")
    for extra in (["--json"], ["--summary"], ["--token", "1"]):
        proc = tfm(*inspect, "--numbers", *extra)
        assert "warning: --numbers is not used here: it prints the weights in the heatmap's cells" in proc.stderr, extra
    assert "--numbers is not used" not in tfm(*inspect, "--numbers").stderr


def test_inspect_attn_unicode_digits_are_not_numbers(run: Path) -> None:
    """'²' is a digit to str.isdigit but not to int(): `--head ²` and `--token ²` were ValueError tracebacks, and
    `--head ١` (an Arabic-Indic one) silently chose head 1."""
    base = ("inspect-attn", "--model", str(run), "--device", "cpu", "Je suis étudiant.")
    for head in ("²", "١", "foo", "0", "000", "-1"):  # usage errors, exit status 2, before the model is read
        error_line(tfm(*base, "--head", head, check=False), f"Invalid value for '--head': {head!r} is not a head number", code=2)
    for layer in ("0", "-1"):
        error_line(tfm(*base, "--layer", layer, check=False), "Invalid value for '--layer'", code=2)
    error_line(tfm(*base, "--token", "²", check=False), "--token '²' is in neither the source nor the translation the model gave")


def test_outputs_never_replace_what_the_run_saved(copy: Path, tmp_path: Path) -> None:
    """`--html RUN/metrics.jsonl` wrote the page over the run's training log (and --output over a checkpoint, the
    best model or the summary): only the weights, tokenizer and recipe the model was loaded from were refused."""
    pairs = write(tmp_path / "pairs.tsv", _head(5))
    write(copy / "metrics.jsonl", '{"kind": "train", "step": 10, "loss": 6.0}\n')
    write(copy / "summary.json", '{"steps": 10}\n')
    shutil.copy(copy / "model.safetensors", copy / "best.safetensors")
    before = snapshot(copy)
    saved = ["metrics.jsonl", "summary.json", "best.safetensors", "checkpoints/step-00000010.safetensors"]
    for name in saved:
        proc = tfm("inspect-attn", "--model", str(copy), "--device", "cpu", "Je suis.", "--html", str(copy / name), check=False)
        error_line(proc, "--html", "writing it would destroy it")
        error_line(translate(copy / "model.safetensors", "--score", str(pairs), "--output", str(copy / name)), "--output", "writing it would destroy it")
    assert snapshot(copy) == before


def test_outputs_never_replace_another_models_files(copy: Path, tmp_path: Path) -> None:
    """`--html OTHER_RUN/model.safetensors` (and `--output`) replaced another trained model with a page, exit 0: a
    file of weights anywhere, and the config, tokenizer, recipe and logs beside weights, are refused; other files
    beside them (a run's earlier translations) and files elsewhere with those names are written."""
    pairs = write(tmp_path / "pairs.tsv", _head(5))
    other = tmp_path / "other"
    shutil.copytree(copy, other)
    for folder in ("loose", "plain"):
        (tmp_path / folder).mkdir()
    write(tmp_path / "loose" / "weights.pt", "not a model")  # weights in a folder of their own
    write(tmp_path / "plain" / "config.json", "{}")  # a config.json where no model is
    write(other / "hyp.en", "old\n")
    write(other / "metrics.jsonl", '{"kind": "train", "step": 10, "loss": 6.0}\n')
    # a run's records, and a release's model card: another model's README.md, curves.png, tensorboard's events and a
    # checkpoint's evaluation (which a resume reads) were replaced by a page or translations, exit 0
    (other / "tensorboard").mkdir(exist_ok=True)
    for name in ("README.md", "curves.png", "tensorboard/events.out.tfevents.1", "checkpoints/step-00000010.evaluated.json"):
        write(other / name, "kept\n")
    before, loose = snapshot(other), snapshot(tmp_path / "loose")
    refused = [(other / "model.safetensors", "a model's weights"), (other / "checkpoints" / "step-00000010.safetensors", "a model's weights"),
               (other / "tokenizer.json", f"a file of the model in {other}"), (other / "metrics.jsonl", f"a file of the model in {other}"),
               (other / "recipe.yaml", f"a file of the model in {other}"), (tmp_path / "loose" / "weights.pt", "a model's weights"),
               (other / "README.md", f"a file of the model in {other}"), (other / "curves.png", f"a file of the model in {other}"),
               (other / "tensorboard" / "events.out.tfevents.1", f"a file of the run in {other}"),
               (other / "checkpoints" / "step-00000010.evaluated.json", f"a file of the run in {other}")]
    for target, held in refused:
        proc = tfm("inspect-attn", "--model", str(copy), "--device", "cpu", "Je suis.", "--html", str(target), check=False)
        error_line(proc, f"--html {target} already exists and is {held}: writing it would destroy it")
        error_line(translate(copy, "--score", str(pairs), "--output", str(target)), f"--output {target} already exists and is {held}")
    assert snapshot(other) == before and snapshot(tmp_path / "loose") == loose
    # replaced as before: a run's earlier outputs, and files of those names or kinds where no model is (a folder of
    # fairseq's binarised data, a project whose checkpoints/ are another toolkit's)
    data, project = tmp_path / "data", tmp_path / "project"
    (project / "checkpoints").mkdir(parents=True)
    data.mkdir()
    for path in (other / "hyps.jsonl", data / "train.bin", data / "tok.json", project / "checkpoints" / "checkpoint_best.pt",
                 project / "config.json"):
        write(path, "old\n")
    for target in (other / "hyp.en", other / "hyps.jsonl", tmp_path / "plain" / "config.json", data / "tok.json", project / "config.json"):
        proc = translate(copy, "--score", str(pairs), "--output", str(target))
        assert proc.returncode == 0, proc.stderr
        assert len(target.read_text(encoding="utf-8").splitlines()) == 5, target


def test_export_never_replaces_a_folder_of_the_run(copy: Path) -> None:
    """`tfm export RUN --out RUN/checkpoints` said 'is not empty; add --force', and with --force the release took
    the place of the run's checkpoints and trainer states (no resume any more)."""
    before = snapshot(copy)
    for extra in ([], ["--force"]):
        proc = tfm("export", str(copy), "--format", "release", "--out", str(copy / "checkpoints"), "--verify-lines", "2", *extra, check=False)
        error_line(proc, f"{copy / 'checkpoints'} is part of the run being exported", "would delete the run's files")
    assert snapshot(copy) == before
    release = copy / "release"  # an export written inside the run is an export: --force replaces it
    tfm("export", str(copy), "--format", "release", "--out", str(release), "--verify-lines", "2")
    error_line(tfm("export", str(copy), "--format", "release", "--out", str(release), "--verify-lines", "2", check=False), "is not empty")
    proc = tfm("export", str(copy), "--format", "release", "--out", str(release), "--verify-lines", "2", "--force", check=False)
    assert proc.returncode == 0 and (release / "model.safetensors").is_file(), proc.stderr
    shutil.rmtree(release)
    assert snapshot(copy) == before


def test_a_hugging_face_export_is_named_as_one(copy: Path) -> None:
    """`tfm translate --model EXPORT` on a `tfm export --format huggingface` directory said 'has no tfm metadata;
    was it written by tfm train?', which says neither what the directory is nor what to do with it."""
    weights = copy / "model.safetensors"
    save_file(load_file(str(weights)), str(weights), metadata={"format": "pt"})  # as save_pretrained writes it
    write(copy / "generation_config.json", '{"decoder_start_token_id": 400}\n')
    before = snapshot(copy)
    for command in (("translate", "Bonjour."), ("inspect-attn", "Bonjour.")):
        proc = tfm(command[0], "--model", str(copy), "--device", "cpu", *command[1:], check=False)
        error_line(proc, f"{weights} is a Hugging Face transformers model")
        assert "hint: load it with transformers (MarianMTModel.from_pretrained)" in proc.stderr
    assert snapshot(copy) == before


def test_inspect_attn_align_reads_its_layer_from_the_decoder(run: Path, tmp_path: Path) -> None:
    """--align reads cross-attention: `--align --kind encoder --layer 3` on a model with 3 encoder and 2 decoder
    layers passed the encoder's range check and ended in an IndexError traceback; and with --json the alignment
    ignored --layer and --head (always the default layer's mean of heads), silently."""
    from tfm_cli.attention import alignment, attention_report
    from tfm_cli.translator import Translator

    model = tmp_path / "deep"
    model.mkdir()
    shutil.copy(run / "tokenizer.json", model / "tokenizer.json")
    tok_sha = read_metadata(run / FINAL)["tokenizer_sha256"]
    config = ModelConfig.from_dict({**json.loads(read_metadata(run / FINAL)["config"]), "n_enc_layers": 3, "n_dec_layers": 2})
    source, target = "Je suis étudiant à Paris.", "I am a student in Paris."
    for seed in range(100):  # a random model whose layer 2, head 1 aligns otherwise than the default layer's mean
        torch.manual_seed(seed)
        save_weights(model / FINAL, weights_state(Transformer(config)), config, tok_sha, 1)
        report = attention_report(Translator.load(model, device="cpu", precision="fp32"), source, target)
        chosen, default = alignment(report, 1, 0), alignment(report)
        if chosen != default:
            break
    assert chosen != default  # else no model could tell them apart
    base = ("inspect-attn", "--model", str(model), "--device", "cpu", source, "--target", target, "--align")
    error_line(tfm(*base, "--kind", "encoder", "--layer", "3", check=False), "--layer 3 is out of range for --align", "layers 1-2")
    data = json.loads(tfm(*base, "--layer", "2", "--head", "1", "--json").stdout)
    assert data["alignment"] == " ".join(f"{i}-{j}" for i, j in chosen)
    assert data["alignment_from"] == {"kind": "cross", "layer": 1, "head": 0}
    # Without --align too (the JSON's alignment followed them only with it, and did not say whose it was): the
    # layer and head given, or the default where the layer is only the encoder's.
    plain = base[:-1]
    data = json.loads(tfm(*plain, "--kind", "cross", "--layer", "2", "--head", "1", "--json").stdout)
    assert data["alignment"] == " ".join(f"{i}-{j}" for i, j in chosen) and data["alignment_from"]["layer"] == 1
    data = json.loads(tfm(*plain, "--json").stdout)
    assert data["alignment"] == " ".join(f"{i}-{j}" for i, j in default)
    assert data["alignment_from"] == {"kind": "cross", "layer": 1, "head": None}  # the last of 2 decoder layers
    data = json.loads(tfm(*plain, "--kind", "encoder", "--layer", "3", "--json").stdout)
    assert data["alignment"] == " ".join(f"{i}-{j}" for i, j in default) and data["alignment_from"]["head"] is None
    # and with --align, as the README says ("a layer only the encoder has leaves the default"): it was refused there
    # (in the terminal, where --kind encoder is not used with --align, it still is, above)
    with_align = json.loads(tfm(*base, "--kind", "encoder", "--layer", "3", "--json").stdout)
    assert with_align["alignment"] == data["alignment"] and with_align["alignment_from"] == data["alignment_from"]
    # and where --token, --html or --image takes the encoder's layer, the terminal's alignment is the default's too
    # (it raised a traceback there: layer=2 is out of range for cross)
    shown = tfm(*base, "--kind", "encoder", "--layer", "3", "--token", "suis", check=False)
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    default_pairs = " ".join(f"{i}-{j}" for i, j in default)
    assert default_pairs in shown.stdout.splitlines() and "from cross-attention layer 2, mean of heads" in shown.stderr


def test_inspect_attn_numbers_too_long_to_read(run: Path) -> None:
    """`--head` and `--token` of 5,000 digits: int() reads at most 4,300 and raised a ValueError traceback."""
    base = ("inspect-attn", "--model", str(run), "--device", "cpu", "Je suis étudiant.")
    big = "9" * 5000
    error_line(tfm(*base, "--head", big, check=False), "is out of range: the model has heads 1-2")
    line = error_line(tfm(*base, "--token", big, check=False), "--token 99999999... (5,000 digits) is out of range")
    assert len(line) < 200
    # a position in neither sentence says so (it said "'0' is in neither the source nor the target")
    for position in ("0", "999"):
        error_line(tfm(*base, "--token", position, check=False), f"--token {position} is out of range: the source's tokens are numbered 1-")


def test_dry_run_refuses_a_run_directory_name_too_long_to_create(root: Path, tmp_path: Path) -> None:
    """name: of 300 letters (the recipe allows any length): --dry-run passed, and the start it vouched for then
    failed with 'cannot create the run directory ...: File name too long'."""
    long_name = "a" * 300
    for out in ([], ["--out", str(tmp_path / "runs" / long_name / "x")]):
        proc = tfm("train", str(root / "recipe.yaml"), f"name={long_name}", *out, "--dry-run", "--device", "cpu", cwd=tmp_path, check=False)
        error_line(proc, "cannot create the run directory", "File name too long")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "runs").mkdir()  # with runs/ there, the first lookup inside the run directory failed instead:
    for dry in (["--dry-run"], []):  # "runs/aaa.../tfm-export.json: File name too long", a file never asked for
        proc = tfm("train", str(root / "recipe.yaml"), f"name={long_name}", *dry, "--device", "cpu", cwd=tmp_path, check=False)
        error_line(proc, f"cannot create the run directory runs/{long_name}: File name too long")
        assert "tfm-export.json" not in proc.stderr and "shorter name" in proc.stderr
    assert list((tmp_path / "runs").iterdir()) == []


def _random_model(model: Path, texts: list[str]) -> Path:
    """A run directory holding an untrained 1-layer model and a tokenizer that knows `texts` too."""
    model.mkdir()
    tok = train_tokenizer(_texts(300) + texts * 20, vocab_size=400)
    tok.save(model / "tokenizer.json")
    config = ModelConfig(
        vocab_size=tok.vocab_size, d_model=16, d_ff=32, n_heads=2, n_enc_layers=1, n_dec_layers=1,
        max_positions=32, pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id,
    )
    torch.manual_seed(0)
    save_weights(model / FINAL, weights_state(Transformer(config)), config, tok.sha256, 1)
    return model


def test_inspect_attn_image_without_matplotlib_writes_nothing(tmp_path: Path) -> None:
    """Without the plot extra, `--html page.html --image heat.png` wrote the page, then failed on the image; and
    its hint, `pip install -e ".[plot]"`, works in the checkout only. Nothing is written, and the hint also names
    the package."""
    model = _random_model(tmp_path / "model", [])
    (tmp_path / "hide").mkdir()
    (tmp_path / "hide" / "sitecustomize.py").write_text("import sys\nsys.modules['matplotlib'] = None\n")
    path = os.pathsep.join(filter(None, [str(tmp_path / "hide"), os.environ.get("PYTHONPATH")]))
    page, image = tmp_path / "page.html", tmp_path / "heat.png"
    proc = tfm("inspect-attn", "--model", str(model), "--device", "cpu", "Bonjour.", "--html", str(page), "--image",
               str(image), env_extra={"PYTHONPATH": path}, check=False)
    error_line(proc, "writing an attention image needs matplotlib")
    assert "hint: pip install -e \".[plot]\" in the tfm checkout (or pip install matplotlib)" in proc.stderr
    assert not page.exists() and not image.exists()


@pytest.mark.plot
def test_inspect_attn_image_labels_are_text_not_mathtext(tmp_path: Path) -> None:
    """matplotlib reads a label between dollar signs as mathtext: the word '$$' (--words) was a ParseException
    traceback, and '$x$' came out in italics without its dollars."""
    pytest.importorskip("matplotlib", reason="--image needs the plot extra")
    model = _random_model(tmp_path / "dollars", ["Ça coûte 5 $.", "$ et $$ et $x$"])
    image = tmp_path / "heat.svg"
    proc = tfm("inspect-attn", "--model", str(model), "--device", "cpu", "Ça coûte $$ ou $x$.", "--words", "--kind",
               "encoder", "--image", str(image), check=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "$$" in image.read_text(encoding="utf-8")  # the label's text (matplotlib's SVG keeps it)


def test_export_never_replaces_the_current_directory(run: Path, tmp_path: Path) -> None:
    """`tfm export RUN --out . --force` in a folder of one's own: the rename failed ('.: Device or resource busy')
    and left an empty `..XXXX.old` folder behind; with the folder's absolute path it would have replaced it, and
    everything in it, with the export."""
    here = tmp_path / "work"
    (here / "sub").mkdir(parents=True)
    write(here / "mine.txt", "keep me\n")
    before = snapshot(here)
    for out, cwd in ((".", here), ("..", here / "sub"), (str(here), here)):
        proc = tfm("export", str(run), "--format", "release", "--out", out, "--force", "--verify-lines", "2", cwd=cwd, check=False)
        error_line(proc, "is the current directory, or holds it")
    assert snapshot(here) == before and sorted(p.name for p in here.iterdir()) == ["mine.txt", "sub"]


def test_an_export_is_not_a_run_directory(root: Path, run: Path, tmp_path: Path) -> None:
    """An ONNX export holds recipe.yaml, config.json and tokenizer.json but no checkpoint: `tfm train --resume
    EXPORT` said 'start it again without --resume', and `tfm train EXPORT/recipe.yaml --out EXPORT` then passed
    as a restart of the same run and trained into the export (checkpoints, a model.safetensors beside its graphs)."""
    from tfm_cli.recipe import dump_recipe, load_recipe
    from tfm_cli.training.checks import with_absolute_paths

    export = tmp_path / "export-onnx"
    export.mkdir()
    dump_recipe(with_absolute_paths(load_recipe(root / "recipe.yaml")), export / "recipe.yaml")
    shutil.copy(run / "tokenizer.json", export / "tokenizer.json")
    write(export / "config.json", json.dumps(load_model(run, "cpu").model.config.to_dict()))
    write(export / "tfm-export.json", '{"format": "onnx"}\n')
    write(export / "encoder.onnx", b"graph")
    before = snapshot(export)
    for args in (["--resume", str(export)], [str(export / "recipe.yaml"), "--out", str(export), "--dry-run"],
                 [str(export / "recipe.yaml"), "--out", str(export)]):
        proc = tfm("train", *args, "train.max_steps=1", "--device", "cpu", check=False)
        error_line(proc, f"{export} is an export written by `tfm export` (it holds tfm-export.json), not a run directory")
        assert snapshot(export) == before


def test_release_export_of_a_model_with_a_short_position_table(run: Path, tmp_path: Path) -> None:
    """A model of max_positions 16: the release's logit check built a random batch of 17 source positions (a
    ValueError traceback), and each verify sentence longer than the model takes printed two raw Python
    `InputTruncatedWarning` lines."""
    model = tmp_path / "short"
    model.mkdir()
    shutil.copy(run / "tokenizer.json", model / "tokenizer.json")
    tok_sha = read_metadata(run / FINAL)["tokenizer_sha256"]
    config = ModelConfig.from_dict({**json.loads(read_metadata(run / FINAL)["config"]), "max_positions": 16})
    torch.manual_seed(0)
    save_weights(model / FINAL, weights_state(Transformer(config)), config, tok_sha, 1)
    out = tmp_path / "release"
    proc = tfm("export", str(model), "--format", "release", "--out", str(out), "--verify-lines", "30", check=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "Warning" not in proc.stderr and "were cut to it for the checks" in proc.stderr, proc.stderr
    assert (out / FINAL).is_file()


def test_curves_of_a_damaged_log_are_said_not_blamed_on_matplotlib(copy: Path, tmp_path: Path) -> None:
    """`--curves` of a metrics.jsonl of random bytes said "no training records yet" and "curves.png needs matplotlib"
    with matplotlib installed, exit 0; lines it skips (a diverged window's loss, damage) were dropped without a word."""
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "metrics.jsonl").write_bytes(bytes(range(256)) * 3)
    error_line(tfm("train", "--curves", str(damaged), check=False), f"{damaged / 'metrics.jsonl'} holds no record tfm writes")
    error_line(tfm("train", "--curves", str(damaged), "--json", check=False), "holds no record tfm writes")
    empty = tmp_path / "empty"  # a run that has not logged yet: no error
    empty.mkdir()
    (empty / "metrics.jsonl").write_bytes(b"")
    proc = tfm("train", "--curves", str(empty))
    assert "no training records to draw" in proc.stderr and "matplotlib" not in proc.stderr
    assert not (empty / "curves.png").exists()
    write(copy / "metrics.jsonl", '{"kind": "train", "step": 5, "loss": 6.0}\n{"kind": "train", "step": 10, "loss": 5.0}\n')
    lines = 2
    with open(copy / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write('{"kind": "train", "step": 11, "loss": "nan"}\nnot json\n{"kind": "train", "step": 12, "loss": NaN}\n')
        f.write('{"kind": "skipped", "step": 13, "loss": "nan", "lr": 0.1}\n')  # the trainer's own: no damage
    proc = tfm("train", "--curves", str(copy))
    assert f"{copy / 'metrics.jsonl'}: 2 lines that are no record tfm writes (cut by a crash, damaged or edited), from line {lines + 1}" in proc.stderr
    assert f"{copy / 'metrics.jsonl'}: 1 record of a loss or score that is not a finite number, not drawn" in proc.stderr
    assert "1 update skipped by the trainer, the loss not finite (step 13)" in proc.stderr
    data = json.loads(tfm("train", "--curves", str(copy), "--json").stdout)
    assert (data["damaged_lines"], data["first_damaged_line"], data["not_finite"], data["skipped_steps"]) == (2, lines + 1, 1, [13])
    diverged = tmp_path / "diverged"  # a run whose every update was skipped: the trainer's records, no damage
    diverged.mkdir()
    (diverged / "metrics.jsonl").write_text('{"kind": "skipped", "step": 1, "loss": "nan", "lr": 0.1}\n', encoding="utf-8")
    proc = tfm("train", "--curves", str(diverged))
    assert "1 update skipped by the trainer, the loss not finite (step 1)" in proc.stderr and "damaged" not in proc.stderr


def test_a_link_that_loops_or_leads_nowhere_is_said_as_one(tmp_path: Path) -> None:
    """A symbolic link in a loop (or to nothing) given as a model, a recipe or a run was "does not exist", which sent
    the user looking for a file that is there; tokenize --corpus and train --out said it already."""
    loop, other, dangling = tmp_path / "loop1", tmp_path / "loop2", tmp_path / "dangling"
    loop.symlink_to(other)
    other.symlink_to(loop)
    dangling.symlink_to(tmp_path / "gone")
    for link, to in ((loop, other), (dangling, tmp_path / "gone")):
        said = f"{link} is a symbolic link to {to}, which does not exist (or links round in a loop)"
        error_line(translate(link, "Bonjour."), f"model {said}")
        error_line(tfm("inspect-attn", "--model", str(link), "Bonjour.", check=False), f"model {said}")
        error_line(tfm("train", str(link), check=False), f"recipe {said}")
        error_line(tfm("train", "--resume", str(link), check=False), f"run directory {said}")
        error_line(tfm("train", "--curves", str(link), check=False), f"run directory {said}")


def test_a_run_that_reads_numbers_as_written_resumes_so(root: Path, tmp_path: Path) -> None:
    """A run whose model reads numbers as written (one trained before tfm had model.numbers, or told so) resumes
    reading them so, from the command line and from the Python API given a recipe that leaves model.numbers null
    (the API took null for a new model's placeholders and refused the resume); switching it is refused in one line."""
    from tfm_cli import load_recipe
    from tfm_cli.training import train

    run = tmp_path / "run"
    train(load_recipe(root / "recipe.yaml", ["model.numbers=as_written", "train.max_steps=4", "train.save_every=2"]), run, device="cpu")
    assert json.loads((run / "config.json").read_text())["numbers"] == "as_written"
    proc = tfm("train", "--resume", str(run), "model.numbers=placeholders", "train.max_steps=6", "--device", "cpu", check=False)
    error_line(proc, "--resume cannot change the model", "model.numbers 'as_written' -> 'placeholders'")
    result = train(load_recipe(root / "recipe.yaml", ["train.max_steps=6", "train.save_every=2"]), run, device="cpu", resume=True)
    assert result.step == 6 and json.loads((run / "config.json").read_text())["numbers"] == "as_written"
    assert "numbers: as_written" in (run / "recipe.yaml").read_text()
