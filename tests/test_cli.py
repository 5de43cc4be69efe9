"""The `tfm` command line through the installed console script: help, version, errors, recipes, completions.

Every command runs as a subprocess of `.venv/bin/tfm` (the script next to the interpreter running pytest), so
exit codes, stdout/stderr separation and the absence of tracebacks are tested as a user sees them. Models here
are built in-process from a tiny tokenizer and random weights: nothing is trained.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import pty
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import clitools
import pytest
import typer

import tfm_cli
from tfm_cli.cli import completions
from tfm_cli.cli.app import app

REPO = Path(__file__).resolve().parents[1]
TFM = Path(sys.executable).parent / "tfm"
RECIPES = sorted((REPO / "recipes").glob("*.yaml"))
CORPUS = REPO / "tfm_cli" / "corpora" / "tatoeba-fr-en" / "train.tsv.gz"
BOX = set("─│┃━┏┓┗┛┡┩└┘┌┐├┤╭╮╰╯═║")  # rich's table and panel borders


def _env(**extra: str | None) -> dict[str, str]:
    """The environment for a subprocess: plain output, one thread; `NAME=None` removes NAME."""
    env = {k: v for k, v in os.environ.items() if k not in ("TFM_DEBUG", "NO_COLOR", "FORCE_COLOR")}
    # one thread: the box has 2 shared cores, and torch's default threads spin against other jobs
    env.update({"COLUMNS": "200", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NO_COLOR": "1"})
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


def tfm(*args: str, stdin: bytes | str | None = None, cwd: Path | None = None, **env: str | None):
    """Run the installed `tfm` (forked from tests/forkserver.py where the environment allows); stdout/stderr come
    back as text; `NAME=None` removes NAME from the environment."""
    return clitools.tfm(*args, stdin=stdin, cwd=cwd, env_extra=env, check=False, timeout=120)


def _error_lines(stderr: str) -> list[str]:
    """stderr without the hint line: what must be one line."""
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith("hint:")]


def _assert_one_line_error(proc, *fragments: str) -> None:
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = _error_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], proc.stderr


def _registered_commands() -> list[str]:
    group = typer.main.get_command(app)
    ctx = typer.Context(group, info_name="tfm")
    names = sorted(group.list_commands(ctx))
    registered = [*app.registered_commands, *app.registered_groups]  # groups: `tfm bench`
    assert names == sorted(c.name for c in registered)
    return names


# ---- help and version ----------------------------------------------------------------------------------------


def test_installed_script_exists() -> None:
    assert TFM.is_file(), f"{TFM} is missing: install the package (pip install -e .)"


def test_help_lists_every_command() -> None:
    proc = tfm("--help")
    assert proc.returncode == 0, proc.stderr
    names = _registered_commands()
    assert {"tokenize", "train", "translate"} <= set(names)
    for name in names:
        assert re.search(rf"\b{re.escape(name)}\b", proc.stdout), f"`tfm --help` does not list {name}"
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", ["tokenize", "train", "translate"])
def test_command_help(command: str) -> None:
    proc = tfm(command, "-h")
    assert proc.returncode == 0, proc.stderr
    assert "Usage:" in proc.stdout and f"tfm {command}" in proc.stdout


@pytest.mark.parametrize("command", [["export"], ["bench", "train"]])
def test_help_prose_flows_at_the_terminal_width(command: list[str]) -> None:
    """A description paragraph is wrapped by the terminal, not at the docstring's line breaks: at 200 columns
    its sentence is on one line (it used to break where the source line did)."""
    proc = tfm(*command, "--help")
    assert proc.returncode == 0, proc.stderr
    sentence = {
        "export": "Every export is verified before it is put in place (logits and translations compared with the PyTorch model)",
        "bench": "with FLOPs per token, MFU, memory and padding share.",
    }[command[0]]
    assert sentence in proc.stdout, proc.stdout


def _command_paths() -> list[list[str]]:
    """Every help page: `tfm`, each command, each group and each of its commands (`tfm bench train`)."""
    group = typer.main.get_command(app)
    paths, todo = [], [([], group)]
    while todo:
        path, command = todo.pop()
        paths.append(path)
        for name in getattr(command, "commands", {}):
            todo.append(([*path, name], command.commands[name]))
    return paths


def test_flags_show_no_value_in_help() -> None:
    """A flag takes no value, so its help line shows no type: Typer printed `--greedy <bool>` and `--help <bool>`,
    which read as if `--greedy true` were expected. An option that takes a value keeps its type (`--beam <int`)."""
    group = typer.main.get_command(app)
    pages = 0
    for path in _command_paths():
        command = group
        for name in path:
            command = command.commands[name]
        proc = tfm(*path, "--help")
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        flags = [p.opts[0] for p in command.params if getattr(p, "is_flag", False)] + ["--help"]
        for flag in flags:
            # the flag's own row (its name first, or after its long name), not another option's help mentioning it
            line = next(line for line in lines if re.match(rf"\W*(?:--[\w-]+\s+)?{re.escape(flag)}\b", line))
            # no type column after the names (<bool>, <boolean>); the help text may say <s>
            assert not re.match(r"\W*--[\w-]+\s+(?:-\w+\s+)?<[a-z ]+>", line), (path, line)
        pages += 1
    assert pages >= 9  # tfm, six commands, bench's three
    beam = next(line for line in tfm("translate", "--help").stdout.splitlines() if "--beam" in line)
    assert "<int" in beam, beam


def test_version() -> None:
    proc = tfm("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"tfm {tfm_cli.__version__}"


def test_python_dash_m() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tfm_cli", "--help"], capture_output=True, text=True, env=_env(), timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    for name in _registered_commands():
        assert name in proc.stdout


def test_no_arguments_shows_help() -> None:
    proc = tfm()
    assert proc.returncode in (0, 2)  # click: no_args_is_help prints the help (exit 0 or 2 by version)
    assert "Usage:" in proc.stdout + proc.stderr


# ---- errors --------------------------------------------------------------------------------------------------

BAD_RECIPE = """\
name: bad
model:
  d_model: 510
  n_heads: 8
train:
  warmup_step: 100
  precision: fp8
"""


def test_bad_recipe_lists_every_problem(tmp_path: Path) -> None:
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(BAD_RECIPE, encoding="utf-8")
    proc = tfm("train", str(recipe), "--dry-run")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[0] == f"Error: {recipe} has 3 problems:"
    problems = [line.strip() for line in lines[1:] if not line.startswith("hint:")]
    assert len(problems) == 3, proc.stderr
    expected = [
        "train.warmup_step is not a recipe key; did you mean train.warmup_steps?",
        "model.d_model=510 must be divisible by model.n_heads=8",
        "train.precision='fp8' must be one of: auto, fp32, bf16, fp16",
    ]
    for fragment in expected:
        assert any(fragment in p for p in problems), f"{fragment!r} not in {problems}"


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        (b"bonjour\thello\nsalut hi\n", [":2:", "has no tab"]),
        (b"bonjour\thello\ncaf\xe9\tcoffee\n", [":2:", "invalid UTF-8"]),
        (b"", ["contains no sentence pairs"]),
    ],
    ids=["no-tab", "invalid-utf8", "empty"],
)
def test_corpus_errors_name_file_and_line(tmp_path: Path, content: bytes, fragments: list[str]) -> None:
    corpus = tmp_path / "corpus.tsv"
    corpus.write_bytes(content)
    proc = tfm("tokenize", "--corpus", str(corpus), "--vocab-size", "300", "--out", str(tmp_path / "tok.json"))
    _assert_one_line_error(proc, str(corpus), *fragments)
    assert not (tmp_path / "tok.json").exists()


def test_tokenize_says_when_the_corpus_gives_fewer_tokens_than_asked(tmp_path: Path) -> None:
    """A small corpus cannot fill a large vocabulary: the count is said, not left to be found in the table."""
    out = tmp_path / "tok.json"
    proc = tfm("tokenize", "--corpus", "bundled:tatoeba-fr-en/dev.tsv.gz", "--vocab-size", "100000", "--out", str(out), "--json")
    size = json.loads(proc.stdout)["vocab_size"]
    assert size < 100000
    assert f"note: {size:,} tokens, fewer than the 100,000 asked" in proc.stderr
    proc = tfm("tokenize", "--corpus", "bundled:tatoeba-fr-en/dev.tsv.gz", "--vocab-size", "1000", "--out", str(out))
    assert "fewer than" not in proc.stderr


def test_a_corpus_already_cut_by_sentencepiece_is_said(tmp_path: Path) -> None:
    """A corpus in SentencePiece's pieces (`▁Je ▁suis ▁étud iant .`), as many Marian, OpenNMT and fairseq users
    have theirs: the ▁ were read as spaces, without a word, and the translations could not go through spm_decode."""
    rows = _texts(400)
    pairs = list(zip(rows[::2], rows[1::2], strict=True))
    spm, plain = tmp_path / "spm.tsv", tmp_path / "plain.tsv"
    spm.write_text("".join(f"▁{s.replace(' ', ' ▁')}\t▁{t.replace(' ', ' ▁')}\n" for s, t in pairs), encoding="utf-8")
    plain.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    proc = tfm("tokenize", "--corpus", str(spm), "--vocab-size", "300", "--out", str(tmp_path / "a.json"))
    assert proc.returncode == 0 and f"warning: --corpus {spm}: 100% of its {len(pairs)} pairs hold ▁ (U+2581)" in proc.stderr, proc.stderr
    assert "spm_decode" in proc.stderr
    proc = tfm("tokenize", "--corpus", str(plain), "--vocab-size", "300", "--out", str(tmp_path / "b.json"))
    assert proc.returncode == 0 and "U+2581" not in proc.stderr, proc.stderr



def test_a_corpus_already_cut_by_subword_nmt_is_said_by_tokenize_and_the_dry_run(tmp_path: Path) -> None:
    """subword-nmt's BPE (`étu@@ diant`), fairseq's preprocessing, was read as text without a word, and the model
    learnt to write `@@`; and the dry run, which says what a start would, left out the SentencePiece warning that
    the start's tokenizer training gave. Both are said now, with a command that undoes the BPE."""
    rows = _texts(400)
    pairs = list(zip(rows[::2], rows[1::2], strict=True))

    def cut(text: str) -> str:  # every word of four letters or more cut after its second, as BPE cuts rare words
        return " ".join(w[:2] + "@@ " + w[2:] if len(w) >= 4 and w.isalpha() else w for w in text.split(" "))

    bpe = tmp_path / "bpe.tsv"
    bpe.write_text("".join(f"{cut(s)}\t{cut(t)}\n" for s, t in pairs), encoding="utf-8")
    proc = tfm("tokenize", "--corpus", str(bpe), "--vocab-size", "300", "--out", str(tmp_path / "a.json"))
    said = re.search(rf"warning: --corpus {re.escape(str(bpe))}: \d+% of its {len(pairs)} pairs hold '@@ ', the joiner of subword-nmt's BPE.*undo the BPE first \((sed -r '.*?')\)", proc.stderr)
    assert said, proc.stderr
    undone = subprocess.run(f"{said.group(1)} {bpe}", shell=True, capture_output=True, text=True, check=True).stdout
    assert undone == "".join(f"{s}\t{t}\n" for s, t in pairs)
    spm = tmp_path / "spm.tsv"
    spm.write_text("".join(f"▁{s.replace(' ', ' ▁')}\t▁{t.replace(' ', ' ▁')}\n" for s, t in pairs), encoding="utf-8")
    for corpus, mark in ((bpe, "hold '@@ '"), (spm, "hold ▁ (U+2581)")):
        recipe = tmp_path / "r.yaml"
        recipe.write_text(clitools.tiny_recipe("seg", data={"train": str(corpus), "dev": None}), encoding="utf-8")
        proc = tfm("train", str(recipe), "--dry-run", "--out", str(tmp_path / "dry"))
        assert f"warning: data.train {corpus}: " in proc.stderr and mark in proc.stderr, proc.stderr
    plain = tmp_path / "plain.tsv"  # an email address or a handle holds @@ seldom, and no joiner: nothing said
    plain.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    recipe.write_text(clitools.tiny_recipe("seg", data={"train": str(plain), "dev": None}), encoding="utf-8")
    proc = tfm("train", str(recipe), "--dry-run", "--out", str(tmp_path / "dry"))
    assert "subword" not in proc.stderr and "U+2581" not in proc.stderr, proc.stderr


def test_tokenize_measures_the_pairs_train_keeps(tmp_path: Path) -> None:
    """A pair with an empty side (a bare tab, a side of spaces) counted among tokenize's sentences and in its
    token means, where `tfm train` skips it: the two commands disagreed on the corpus."""
    import gzip

    import tfm_cli

    with gzip.open(Path(tfm_cli.__file__).parent / "corpora" / "tatoeba-fr-en" / "dev.tsv.gz", "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()[:300]
    corpus = tmp_path / "c.tsv"
    corpus.write_text("\n".join([*lines, "\t", "Bonjour.\t  ", "\tHello."]) + "\n", encoding="utf-8")
    proc = tfm("tokenize", "--corpus", str(corpus), "--vocab-size", "300", "--out", str(tmp_path / "tok.json"), "--json")
    report = json.loads(proc.stdout)
    assert report["sentences"] == 300 and report["skipped_empty"] == 3
    assert "note: 3 pairs with an empty side not measured (tfm train skips them)" in proc.stderr
    table = tfm("tokenize", "--corpus", str(corpus), "--vocab-size", "300", "--out", str(tmp_path / "t.json"))
    assert "note: 3 pairs with an empty side" in table.stderr and re.search(r"sentences\s+300\s+300", table.stdout)



def test_tokenize_with_a_recipe_measures_what_its_max_len_keeps(tmp_path: Path) -> None:
    """With a recipe, the statistics counted the pairs `tfm train` drops for data.max_len (one base64 line of
    750,000 characters made the source mean 2,367 tokens where train's corpus has 14); they are left out and
    counted now, as train counts them."""
    with gzip.open(Path(tfm_cli.__file__).parent / "corpora" / "tatoeba-fr-en" / "dev.tsv.gz", "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()[:300]
    corpus = tmp_path / "c.tsv"
    corpus.write_text("\n".join([*lines, " ".join(["mot"] * 200) + "\tword", "court\t" + "long " * 80]) + "\n",
                      encoding="utf-8")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(clitools.tiny_recipe("mx", data={"train": str(corpus), "dev": None, "max_len": 32}), encoding="utf-8")
    proc = tfm("tokenize", str(recipe), "--out", str(tmp_path / "tok.json"), "--json")
    report = json.loads(proc.stdout)
    kept, long = report["sentences"], report["skipped_long"]
    assert kept + long == 302 and long >= 2, report  # the two made long, and any dev line over 31 tokens
    assert report["src_tokens"]["max"] <= 31 and report["tgt_tokens"]["max"] <= 31
    assert f"note: {long} pairs with a side over 31 tokens not measured (tfm train skips them: data.max_len=32" in proc.stderr
    run = tfm("train", str(recipe), f"tokenizer.path={tmp_path / 'tok.json'}", "train.max_steps=1", "train.warmup_steps=1",
              "train.average_last=1", "--out", str(tmp_path / "run"))
    assert f"{kept} pairs kept of 302 read (0 with an empty side and {long} with a side over 31 tokens" in run.stderr, run.stderr
    # without a recipe, no max_len is known: every pair is measured
    plain = json.loads(tfm("tokenize", "--corpus", str(corpus), "--out", str(tmp_path / "t2.json"), "--json").stdout)
    assert plain["sentences"] == 302 and "skipped_long" not in plain and plain["src_tokens"]["max"] >= 200


def test_tokenize_with_a_recipe_writes_its_tokenizer_path(tmp_path: Path) -> None:
    """`tfm tokenize RECIPE` wrote runs/NAME/tokenizer.json though the recipe named tokenizer.path, and then
    `tfm train RECIPE` refused to start (the run's tokenizer was not tokenizer.path). It writes tokenizer.path now,
    and refuses to replace that file unasked."""
    corpus = tmp_path / "c.tsv"
    corpus.write_text("".join(f"phrase {i} ici .\tsentence {i} here .\n" for i in range(200)), encoding="utf-8")
    wanted = tmp_path / "shared" / "tok.json"
    recipe = tmp_path / "r.yaml"
    recipe.write_text(clitools.tiny_recipe("tp", data={"train": str(corpus), "dev": None}, tokenizer={"path": str(wanted)}),
                      encoding="utf-8")
    proc = tfm("tokenize", str(recipe), cwd=tmp_path)
    assert wanted.is_file() and not (tmp_path / "runs").exists(), proc.stderr
    before = wanted.read_bytes()
    again = tfm("tokenize", str(recipe), "tokenizer.vocab_size=300", cwd=tmp_path)
    _assert_one_line_error(again, f"sets tokenizer.path: {wanted}, which exists")
    assert f"hint: give --out {wanted} to replace it" in again.stderr
    assert wanted.read_bytes() == before
    tfm("tokenize", str(recipe), "tokenizer.vocab_size=300", "--out", str(wanted), cwd=tmp_path)  # asked: replaced
    assert wanted.read_bytes() != before
    tfm("train", str(recipe), "--out", str(tmp_path / "run"), "--dry-run", cwd=tmp_path)



def test_tokenize_out_to_a_device(tmp_path: Path) -> None:
    """`--out /dev/null` was "already exists and is not a tokenizer.json ... delete the file first" (as root, advice
    that removes /dev/null), and a device past that check failed on the fsync: "Invalid argument"."""
    corpus = tmp_path / "c.tsv"
    corpus.write_text("".join(f"phrase {i} ici .\tsentence {i} here .\n" for i in range(50)), encoding="utf-8")
    proc = tfm("tokenize", "--corpus", str(corpus), "--vocab-size", "300", "--out", "/dev/null", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["sentences"] == 50, proc.stderr


def test_mismatched_parallel_files(tmp_path: Path) -> None:
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text("un\ndeux\ntrois\n", encoding="utf-8")
    tgt.write_text("one\ntwo\n", encoding="utf-8")
    proc = tfm("tokenize", "--corpus", str(src), "--corpus", str(tgt), "--vocab-size", "300",
               "--out", str(tmp_path / "tok.json"))
    _assert_one_line_error(proc, "has 3 lines but", "has 2")


def test_missing_corpus_fails_before_creating_the_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = tfm("train", str(REPO / "recipes" / "tiny.yaml"), "data.train=no-such.tsv", "--out", str(out))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, proc.stderr
    assert all(f in errors[0] for f in ("data.train", "no-such.tsv", "does not exist")), proc.stderr
    assert not out.exists()


def test_a_table_wider_than_the_terminal_is_printed_whole(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """At a terminal narrower than a table, rich cut every cell ("entro…", "0.…": inspect-attn --summary at 80
    columns; an empty table at 20). Such a table is printed as a pipe gets it, tab-separated, under its title;
    one that fits is drawn as before."""
    import io

    from rich.console import Console

    import tfm_cli.cli.common as common

    screen = io.StringIO()
    monkeypatch.setattr(common, "fancy_stdout", lambda: True)
    monkeypatch.setattr(common, "out", Console(file=screen, width=40, force_terminal=True, color_system=None))
    monkeypatch.setattr(common, "_piped_tables", 0)
    rows = [("encoder", 1, 2, 0.4123, 0.8, "diagonal, sharp")]
    common.print_table("Every head", ["kind", "layer", "head", "entropy", "max", "notes"], rows)
    printed = screen.getvalue() + capsys.readouterr().out
    assert "kind\tlayer\thead\tentropy\tmax\tnotes" in printed and "encoder\t1\t2\t0.4123\t0.8\tdiagonal, sharp" in printed
    assert "…" not in printed and printed.startswith("Every head")
    screen.truncate(0)
    common.print_table("Pieces", ["piece", "id"], [("▁Je", "419")])
    drawn = screen.getvalue()
    assert "┏" in drawn and "▁Je" in drawn and "419" in drawn and "\t" not in drawn  # it fits: a drawn table
    # a title longer than the table is, a sentence given to `tokenize --encode`: rich wrapped it to the table's width,
    # a column of words cut inside a Thai or Japanese word; now it is one line above the table, as the terminal wraps it
    screen.seek(0)
    screen.truncate(0)
    title = "'ภาษาไทยเป็นภาษาที่สวยงาม 日本語の文章です。': 12 tokens"
    common.print_table(title, ["piece", "id"], [("▁Je", "419")])
    drawn = screen.getvalue().splitlines()
    assert drawn[0] == title and drawn[1].startswith("┏") and any("▁Je" in line for line in drawn), drawn


@pytest.mark.parametrize(
    ("args", "said", "hint"),
    [
        (["translate", "--input", "in.fr"], "--input: tfm translate reads the sentences to translate from stdin", "< input.txt > output.txt"),
        (["translate", "-i", "in.fr"], "-i: tfm translate reads the sentences to translate from stdin", "< input.txt"),
        (["translate", "-o", "out.en", "x"], "-o: tfm translate writes the translations to stdout, one a line (--output is for scoring runs)", "> output.txt"),
        (["translate", "--checkpoint", "m.pt", "x"], "--checkpoint: tfm translate's model (a run, a checkpoint, a release or an export) is --model", "--model runs/tiny"),
        (["train", "--config", "r.yaml"], "--config: tfm train takes its recipe (a YAML file) as its first argument", "tfm train recipes/tiny.yaml"),
        (["train", "r.yaml", "--save-dir", "runs/x"], "--save-dir: tfm train's run directory is --out", "--out runs/mine"),
    ],
)
def test_another_toolkits_option_is_told_what_tfm_does(args: list[str], said: str, hint: str) -> None:
    """fairseq's `--input`, Marian's `-i`/`-o`, OpenNMT's `-config`: Click named the nearest spelling, another
    setting ("No such option: --input (Possible options: --output)", --output being for scoring runs)."""
    proc = tfm(*args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith(f"Error: No such option: {said}") and lines[1].startswith("hint: ") and hint in lines[1], proc.stderr
    assert "Possible options" not in proc.stderr
    other = tfm("translate", "--bogus")  # an option no toolkit has: as before
    assert other.stderr.splitlines()[0] == "Error: No such option: --bogus" and "--help" in other.stderr


def test_bad_recipe_traceback_with_tfm_debug(tmp_path: Path) -> None:
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(BAD_RECIPE, encoding="utf-8")
    proc = tfm("train", str(recipe), "--dry-run", TFM_DEBUG="1")
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr
    assert "RecipeError" in proc.stderr
    for off in ("0", "no", "false", "off", ""):  # TFM_DEBUG=0 in a CI file, meant to turn it off, showed tracebacks
        proc = tfm("train", str(recipe), "--dry-run", TFM_DEBUG=off)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr and proc.stderr.startswith("Error: "), (off, proc.stderr)


def test_unknown_override_did_you_mean(tmp_path: Path) -> None:
    proc = tfm("train", str(REPO / "recipes" / "tiny.yaml"), "train.max_stepz=10", "--dry-run", cwd=tmp_path)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "train.max_stepz is not a recipe key; did you mean train.max_steps?" in proc.stderr


def test_an_override_split_by_spaces_around_the_equals_sign_is_said_once(tmp_path: Path) -> None:
    """`train.max_steps = 10` (Hydra or INI habits) is three shell words: it was three lines, one per word, each
    'must look like key=value'; after --resume it was 'give either RECIPE or --resume RUN_DIR, not both'."""
    tiny = str(REPO / "recipes" / "tiny.yaml")
    for words in (["train.max_steps", "=", "10"], ["train.max_steps", "=10"], ["train.max_steps=", "10"]):
        proc = tfm("train", tiny, *words, "--dry-run", cwd=tmp_path)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr
        assert _error_lines(proc.stderr) == [
            f"Error: override {' '.join(words)!r} is {len(words)} words: write it without spaces around '=', "
            "train.max_steps=10 (quote a value with spaces: 'key=a b')"
        ], proc.stderr
    run = tmp_path / "run"
    run.mkdir()
    (run / "recipe.yaml").write_text("name: run\n", encoding="utf-8")
    proc = tfm("train", "--resume", str(run), "train.max_steps", "=", "10", "--dry-run", cwd=tmp_path)
    assert proc.returncode == 1
    assert "override 'train.max_steps = 10' is 3 words" in proc.stderr, proc.stderr
    proc = tfm("train", tiny, "data.dev=null", "--dry-run", "--json", "--device", "cpu", cwd=tmp_path)
    assert proc.returncode == 0 and json.loads(proc.stdout)["recipe"]["data"]["dev"] is None, proc.stderr
    # an empty value (data.dev=$DEV, DEV unset) was null too: the dev set dropped without a word
    proc = tfm("train", tiny, "data.dev=", "--dry-run", "--json", "--device", "cpu", cwd=tmp_path)
    assert proc.returncode == 1 and "override 'data.dev=' has no value (an unset shell variable?)" in proc.stderr


def test_missing_recipe_file_suggests_close_name(tmp_path: Path) -> None:
    proc = tfm("train", str(REPO / "recipes" / "tiny.yml"), "--dry-run")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "did you mean" in proc.stderr and "tiny.yaml" in proc.stderr


def test_usage_error_exits_2() -> None:
    proc = tfm("train")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "recipe is required" in proc.stderr


def test_unknown_option_exits_2() -> None:
    proc = tfm("translate", "--beem", "3", "x")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "said", "command"),
    [
        (["translate", "--beem", "3", "x"], "No such option: --beem (Possible options: --beam, --seed)", "tfm translate"),
        (["tokenize", "--bogus"], "No such option: --bogus", "tfm tokenize"),
        (["translate", "--device"], "Option '--device' requires an argument.", "tfm translate"),
        (["bench", "translate", "--model"], "Option '--model' requires an argument.", "tfm bench translate"),
        (["trnslate"], "No such command 'trnslate'. Did you mean 'translate'?", "tfm"),
        (["bench", "atention"], "No such command 'atention'", "tfm bench"),
        (["translate", "--beam", "0", "x"], "Invalid value for '--beam' / '-b'", "tfm translate"),
        (["export", "--format", "zip"], "Invalid value for --format: 'zip' is not one of", "tfm export"),
        (["translate", "--engine", "onnx", "x"], "Invalid value for --engine: 'onnx' is not one of: auto, torch, onnxruntime", "tfm translate"),
        (["train"], "recipe is required", "tfm train"),
        (["inspect-attn"], "Missing argument 'SENTENCE'. Give the sentence to inspect, in quotes", "tfm inspect-attn"),
        (["inspect-attn", "--summary"], "or - to read it from stdin (head -n 1 input.fr | tfm inspect-attn --summary -)", "tfm inspect-attn"),
        (["bench", "attention", "--tolerance", "5"], "Invalid value for --tolerance: '5' is a share of 500%", "tfm bench attention"),
        # training options with --encode were ignored without a word, as if they changed the encoding
        (["tokenize", "--encode", "x", "--vocab-size", "500", "--min-frequency", "5"],
         "--encode shows an existing tokenizer; drop --vocab-size and --min-frequency (they train a new one)", "tfm tokenize"),
        (["tokenize", "--encode", "x", "--out", "t.json"], "drop --out (they train a new one)", "tfm tokenize"),
        # a validator's wording ("Value error, 'int8' is not one of ...") and another option's example
        (["inspect-attn", "x", "--precision", "int8"], "Invalid value for '--precision': int8 is not offered here: the weights shown are the fp32 model's", "tfm inspect-attn"),
        (["inspect-attn", "x", "--precision", "fp64"], "Invalid value for '--precision': 'fp64' is not one of: auto, fp32, bf16, fp16", "tfm inspect-attn"),
        (["bench", "translate", "--recipe", str(REPO / "recipes" / "tiny.yaml"), "--batch-sizes", "0"], "'0': give positive integers, e.g. 1,8,32", "tfm bench translate"),
    ],
)
def test_usage_errors_are_one_error_line_with_the_help_as_hint(args: list[str], said: str, command: str) -> None:
    """A usage error was Typer's boxed panel under a usage line and "Try ... for help.": five lines or more, the
    message wrapped inside the box at the terminal's width (COLUMNS=40 here). It is the one red line of every
    other error, Click's "did you mean" kept, and a hint naming the command's --help; exit status 2."""
    proc = tfm(*args, COLUMNS="40")
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr
    assert not BOX & set(proc.stderr), proc.stderr
    lines = _error_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("Error: ") and said in lines[0], proc.stderr
    assert proc.stderr.splitlines()[-1] == f"hint: see {command} --help", proc.stderr


def test_a_reader_of_stdout_that_went_away_ends_the_command_quietly(random_run: Path) -> None:
    """`tfm translate < in.txt | head -1` exited 1 once head had its line (Click's answer to a broken pipe, and
    rich's for the help pages): in a `set -o pipefail` script or a CI log that reads as a failure with no word
    said. Like `seq 1000000 | head -1`, the command ends quietly with the status the shell gives SIGPIPE, 141."""
    model = ["--model", str(random_run), "--device", "cpu", "--max-len", "3"]
    for args, stdin in (
        (["--version"], b""),
        (["--help"], b""),
        (["translate", "--help"], b""),
        (["translate", *model], b"Bonjour.\n" * 50),
        (["translate", *model, "--json", "Bonjour."], b""),
    ):
        read_end, write_end = os.pipe()
        os.close(read_end)  # the reader is gone before the first write
        try:
            proc = clitools.start_tfm(*args, stdin=subprocess.PIPE, stdout=write_end)
        finally:
            os.close(write_end)
        _, stderr = proc.communicate(stdin, timeout=120)
        assert proc.returncode == 141, (args, proc.returncode, stderr.decode())
        assert stderr == b"", (args, stderr.decode())


def test_a_reader_that_leaves_half_way_through_a_big_json_document_is_noticed(random_run: Path) -> None:
    """`tfm inspect-attn --json LONG | head -c 100`: the document (megabytes) went out in one write, which came back
    partly done once head left, without a broken pipe: exit 0 and no word said, with the document cut short."""
    sentence = " ".join(["chat"] * 12)  # tokens of this random model: its maps are about 1 MB of JSON
    proc = clitools.start_tfm("inspect-attn", "--model", str(random_run), "--device", "cpu", "--json", sentence, stdout=subprocess.PIPE)
    begun = proc.stdout.read(100)
    assert len(begun) == 100, proc.communicate(timeout=120)  # the document has begun
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=120) == 141, (proc.returncode, stderr)
    assert b"Traceback" not in stderr and b"Error" not in stderr, stderr  # (a warning: this model runs to the length limit)


def test_a_sentence_that_starts_with_a_dash_is_pointed_to_double_dash(random_run: Path) -> None:
    """A dialogue line ("- Bonjour !") or "-5 °C" given as the sentence was refused with "No such option: -" or
    "No such option: -5", which names no sentence and no way out: the error says to put -- before it, and that
    works. A mistyped option keeps Click's message."""
    model = ["--model", str(random_run), "--device", "cpu"]
    for command, sentence in (("translate", "- Bonjour !"), ("translate", "-5 °C"), ("inspect-attn", "- Bonjour !")):
        proc = tfm(command, *model, sentence)
        assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr
        message = " ".join(line.strip("│ ") for line in proc.stderr.splitlines())
        assert f"{sentence!r} starts with '-', so it was read as an option" in message, message
        assert f"put -- between the options and it: tfm {command} [OPTIONS] -- '{sentence}'" in message, message
    proc = tfm("translate", *model, "--max-len", "3", "--", "- Bonjour !")
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 1
    for mistyped, said in (("--beem", "No such option: --beem"), ("-x", "No such option: -x")):
        proc = tfm("translate", *model, mistyped, "Bonjour")
        assert proc.returncode == 2 and said in proc.stderr and "starts with '-'" not in proc.stderr


# ---- shipped recipes -----------------------------------------------------------------------------------------


def test_recipes_are_shipped() -> None:
    assert {p.stem for p in RECIPES} >= {"base", "big", "tiny"}


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_shipped_recipe_dry_run(recipe: Path, tmp_path: Path) -> None:
    # run in an empty folder so that no runs/<name>/tokenizer.json changes the vocabulary
    proc = tfm("train", str(recipe), "--dry-run", "--json", "--device", "cpu", cwd=tmp_path)
    if proc.returncode == 1 and " free, but " in proc.stderr:
        # The machine's disk, not the recipe: big keeps 20 checkpoints of 214M parameters (52 GB), more than some
        # machines have free (the check itself is tested elsewhere). Said truly, then the recipe checked with fewer.
        need = float(re.search(r"need about ([\d.,]+) GiB", proc.stderr).group(1).replace(",", ""))
        assert shutil.disk_usage(tmp_path).free < need * 2**30, proc.stderr
        proc = tfm("train", str(recipe), "train.keep_last=1", "train.average_last=1", "--dry-run", "--json", "--device", "cpu", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["recipe"]["name"] == recipe.stem
    assert report["parameters"] > 0
    assert (
        report["tokens_per_step"]
        == report["recipe"]["train"]["max_tokens"] * report["recipe"]["train"]["accum_steps"]
    )
    assert not list(tmp_path.iterdir()), "a dry run must not write anything"
    if recipe.stem == "base":
        # Table 3 of the paper: 65M parameters for the base model (shared 37000-token vocabulary)
        assert abs(report["parameters"] - 65e6) / 65e6 < 0.05, report["parameters"]


# ---- translate errors (a random-weight model, no training) ---------------------------------------------------


def _texts(limit: int, skip: int = 0) -> list[str]:
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in itertools.islice(f, skip, skip + limit)]
    return [s for row in rows for s in row[:2]]


@pytest.fixture(scope="module")
def random_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory with a tokenizer and an untrained tiny model: enough to load and decode."""
    import torch

    from tfm_cli.checkpoint import save_weights, weights_state
    from tfm_cli.model import ModelConfig, Transformer
    from tfm_cli.runs import FINAL
    from tfm_cli.tokenizer import train_tokenizer

    run = tmp_path_factory.mktemp("random-run")
    tok = train_tokenizer(_texts(400), vocab_size=320)
    tok.save(run / "tokenizer.json")
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=tok.vocab_size,
        d_model=16,
        d_ff=32,
        n_heads=2,
        n_enc_layers=1,
        n_dec_layers=1,
        max_positions=64,
        pad_id=tok.pad_id,
        bos_id=tok.bos_id,
        eos_id=tok.eos_id,
    )
    save_weights(run / FINAL, weights_state(Transformer(config)), config, tok.sha256, 0)
    return run


def test_translate_random_model_works(random_run: Path) -> None:
    """The fixture itself is a valid model: the error tests below fail for the reason they name."""
    proc = tfm("translate", "--model", str(random_run), "--device", "cpu", "--max-len", "3", "Bonjour.")
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1


def test_translate_a_file_name_is_refused_not_translated(random_run: Path, tmp_path: Path) -> None:
    """`tfm translate input.fr` printed a translation of the words "input.fr" and exited 0."""
    (tmp_path / "input.fr").write_text("Bonjour.\nMerci.\n", encoding="utf-8")
    proc = tfm("translate", "--model", str(random_run), "--device", "cpu", "input.fr", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert "is a file, not a sentence" in proc.stderr
    assert f"tfm translate --model {random_run} --device cpu < input.fr" in proc.stderr
    proc = tfm("translate", "--model", str(random_run), "--device", "cpu", "--max-len", "3", "output.fr", cwd=tmp_path)
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 1  # no such file: a sentence
    # "-" is stdin, as for cat or sacrebleu (it translated the character "-")
    piped = tfm("translate", "--model", str(random_run), "--device", "cpu", "--max-len", "3", stdin="Bonjour.\nMerci.\n")
    dash = tfm("translate", "--model", str(random_run), "--device", "cpu", "--max-len", "3", "-", stdin="Bonjour.\nMerci.\n")
    assert dash.returncode == 0 and dash.stdout == piped.stdout and len(dash.stdout.splitlines()) == 2


def test_translate_a_symlinked_weights_file_finds_its_run_s_tokenizer(random_run: Path, tmp_path: Path) -> None:
    """`ln -s /shared/runs/x/model.safetensors ~/models/fr-en.safetensors`, then `--model` the link: tfm looked
    for tokenizer.json beside the link only ("is missing"). Where none is there, the linked file's own run
    directory (what the link stands for) gives it; a tokenizer.json beside the link still comes first."""
    link = tmp_path / "models" / "fr-en.safetensors"
    link.parent.mkdir()
    link.symlink_to(random_run / "model.safetensors")
    direct = tfm("translate", "--model", str(random_run), "--device", "cpu", "--max-len", "3", "Bonjour.")
    proc = tfm("translate", "--model", str(link), "--device", "cpu", "--max-len", "3", "Bonjour.")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == direct.stdout
    (link.parent / "tokenizer.json").write_text("{}", encoding="utf-8")  # beside the link: that one is used
    proc = tfm("translate", "--model", str(link), "--device", "cpu", "x")
    _assert_one_line_error(proc, str(link.parent / "tokenizer.json"))


def test_translate_empty_model_dir(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = tfm("translate", "--model", str(empty), "--device", "cpu", "x")
    _assert_one_line_error(proc, str(empty))
    assert proc.stdout == ""


def test_translate_missing_model_dir(tmp_path: Path) -> None:
    proc = tfm("translate", "--model", str(tmp_path / "nowhere"), "--device", "cpu", "x")
    _assert_one_line_error(proc, "nowhere")


def test_translate_with_another_tokenizer(random_run: Path, tmp_path: Path) -> None:
    from tfm_cli.tokenizer import train_tokenizer

    swapped = tmp_path / "swapped"
    swapped.mkdir()
    (swapped / "model.safetensors").write_bytes((random_run / "model.safetensors").read_bytes())
    train_tokenizer(_texts(400, skip=5000), vocab_size=320).save(swapped / "tokenizer.json")
    proc = tfm("translate", "--model", str(swapped), "--device", "cpu", "x")
    _assert_one_line_error(proc, "tokenizer.json")
    assert "hint:" in proc.stderr


def test_translate_invalid_utf8_names_the_line(random_run: Path) -> None:
    proc = tfm(
        "translate",
        "--model",
        str(random_run),
        "--device",
        "cpu",
        "--max-len",
        "3",
        stdin=b"Bonjour.\nJ'ai \xe9t\xe9 l\xe0.\nMerci.\n",
    )
    _assert_one_line_error(proc, "line 2", "UTF-8")


def _read_lines(proc: subprocess.Popen, count: int, timeout: float = 90) -> list[str]:
    """The next `count` lines of `proc`'s stdout, or a failure naming what came after `timeout` seconds."""
    import select
    import time

    got, deadline = b"", time.monotonic() + timeout
    while got.count(b"\n") < count:
        left = deadline - time.monotonic()
        readable = select.select([proc.stdout], [], [], max(left, 0))[0]
        assert readable, f"no answer within {timeout:.0f} s (got {got!r}); stderr: {proc.stderr.read1().decode() if proc.poll() is not None else ''}"
        data = os.read(proc.stdout.fileno(), 65536)
        assert data, f"stdout ended after {got!r}: {proc.communicate()[1].decode()}"
        got += data
    return got.decode("utf-8").splitlines()


@pytest.mark.parametrize("extra", [[], ["--json"], ["--n-best", "2", "--beam", "2"]])
def test_translate_answers_a_co_process_line_by_line(random_run: Path, extra: list[str]) -> None:
    """stdin was translated 2,000 lines at a time: a program that writes a line and waits for its translation
    (as fairseq-interactive or Marian's server are used), or `tail -f`, got nothing until 2,000 lines or the end."""
    args = ["translate", "--model", str(random_run), "--device", "cpu", "--max-len", "3", *extra]
    sources = ["Bonjour.", "", "Merci beaucoup."]
    proc = clitools.start_tfm(*args, stdin=subprocess.PIPE)
    per_line = 2 if "--n-best" in extra else 1
    answers = []
    try:
        for source in sources:  # the next line is written only once this one's translation came back
            proc.stdin.write(f"{source}\n".encode())
            proc.stdin.flush()
            answers += _read_lines(proc, per_line)
        rest, err = proc.communicate(timeout=60)  # closes stdin: the end of the input
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0 and rest == b"" and b"Traceback" not in err, err.decode()
    batch = tfm(*args, stdin="".join(f"{s}\n" for s in sources))  # all at once: the same lines
    assert answers == batch.stdout.splitlines() and len(answers) == per_line * len(sources)


def test_translate_a_bad_line_after_answered_ones_names_it(random_run: Path) -> None:
    """Streaming keeps the line numbers of the UTF-8 check: line 1 is answered, line 2 refused by its number."""
    proc = clitools.start_tfm("translate", "--model", str(random_run), "--device", "cpu", "--max-len", "3", stdin=subprocess.PIPE)
    try:
        proc.stdin.write(b"Bonjour.\n")
        proc.stdin.flush()
        assert len(_read_lines(proc, 1)) == 1
        rest, err = proc.communicate(b"caf\xe9\nMerci.\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1 and rest == b""
    lines = _error_lines(err.decode())
    assert lines == ["Error: stdin line 2: invalid UTF-8 at byte 4"], err.decode()


def test_translate_a_bad_line_in_a_piped_file_comes_after_the_lines_before_it(random_run: Path) -> None:
    """`printf 'Il fait beau.\\n\\xff\\xfe\\n' | tfm translate` printed only the error: the lines read before a bad
    one in the same chunk (up to 2,000 of them, a whole file piped in) were never translated. They are now
    written, then the error names the bad line, as sed would have written them before failing."""
    args = ["translate", "--model", str(random_run), "--device", "cpu", "--max-len", "3"]
    good = ["Bonjour.", "Merci beaucoup.", "Il fait beau."]
    proc = tfm(*args, stdin=("\n".join(good) + "\n").encode() + b"\xff\xfe\nSalut.\n")
    _assert_one_line_error(proc, "stdin line 4: invalid UTF-8 at byte 1")
    assert proc.stdout.splitlines() == tfm(*args, stdin="".join(f"{s}\n" for s in good)).stdout.splitlines()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_translate_stopped_by_a_signal_writes_the_lines_it_translated(random_run: Path, tmp_path: Path, sig: int) -> None:
    """`tfm translate < big > out` stopped part-way (Ctrl-C, or SIGTERM: `kill`, a scheduler, `timeout`) lost the
    translations of the chunk of up to 2,000 lines it was working on (SIGTERM ended it at once, Ctrl-C dropped
    them), where sed or awk would have written every line done. The lines translated before the signal are now
    written, in order, and the command ends with one line saying so and 128 + the signal."""
    args = ["translate", "--model", str(random_run), "--device", "cpu", "--max-len", "40", "--batch-tokens", "16"]
    proc = clitools.start_tfm(*args, stdin=subprocess.PIPE)  # with Python's Ctrl-C handler (see start_tfm)
    try:
        proc.stdin.write(b"Bonjour.\n")
        proc.stdin.flush()
        first = _read_lines(proc, 1)  # the model is loaded and answering
        proc.stdin.write(b"Bonjour.\n" * 1999)  # one chunk, taking far longer than the wait below
        proc.stdin.flush()
        time.sleep(4)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    lines = out.decode().splitlines()
    assert 0 < len(lines) < 1999 and set(lines) == set(first), (len(lines), err.decode())  # a part of the chunk
    assert proc.returncode == 128 + sig, err.decode()
    said = [line for line in err.decode().splitlines() if line.strip()]
    assert said == [f"tfm translate: interrupted; the translations of input lines 1-{len(lines) + 1} were written"], err.decode()


def test_translate_dash_at_a_terminal_translates_each_line_typed(random_run: Path) -> None:
    """`tfm translate -` at a terminal was refused ("pipe lines into stdin"): no way to type sentences and read
    their translations, as fairseq-interactive does. Without -, and with --reference (which waited for sources
    typed at the terminal without a word), a terminal stdin is still refused, now before the model loads."""
    args = ["translate", "--model", str(random_run), "--device", "cpu", "--max-len", "3"]
    master, slave = pty.openpty()
    try:
        for extra, said in (
            ([], f"Invalid value for TEXT: give a sentence, or pipe lines into stdin (e.g. {shlex.join(['tfm', *args])} < input.txt), or give - to type them"),
            (["--reference", str(random_run / "tokenizer.json")], "Invalid value for --reference: --reference scores the sentences read from stdin, and stdin is the terminal"),
        ):
            refused = subprocess.run([str(TFM), *args, *extra], stdin=slave, capture_output=True, env=_env(), timeout=60)
            assert refused.returncode == 2 and refused.stdout == b"", refused.stderr.decode()
            lines = _error_lines(refused.stderr.decode())
            assert len(lines) == 1 and lines[0].startswith(f"Error: {said}"), refused.stderr.decode()
        proc = subprocess.Popen([str(TFM), *args, "-"], stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
        try:
            os.write(master, b"Bonjour.\n")
            typed = _read_lines(proc, 1)  # answered while the terminal stays open
            os.write(master, b"\x04")  # Ctrl-D: the end of the input
            rest, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    finally:
        os.close(slave)
        os.close(master)
    assert proc.returncode == 0 and rest == b"", err.decode()
    assert "type a sentence and press Enter to translate it; Ctrl-D ends" in err.decode()
    assert typed == tfm(*args, "Bonjour.").stdout.splitlines()


def test_an_option_of_one_file_given_two_is_refused(random_run: Path, tmp_path: Path) -> None:
    """Click kept the last: `--model a --model b` translated with b (no ensemble), exit 0 (and `--reference r1
    --reference r2` scored against r2 alone, before several references were scored). Two files are a usage error;
    the same one twice is not, nor a sentence after -- that looks like the option, and a setting given again is
    the last one (an alias's `--beam 2` overridden), as in most command lines."""
    other = tmp_path / "other"
    shutil.copytree(random_run, other)
    refs = [tmp_path / "r1.en", tmp_path / "r2.en"]
    for r in refs:
        r.write_text("Hello.\n", encoding="utf-8")
    args = ["translate", "--device", "cpu", "--max-len", "2"]
    for given, name in (
        (["--model", str(random_run), "--model", str(other), "Bonjour."], "--model"),
        (["--model", str(random_run), "--model", str(other), "--reference", str(refs[0]), f"--reference={refs[1]}"], "--model"),
        (["-m", str(random_run), "--output", str(tmp_path / "a.txt"), "--output", str(tmp_path / "b.txt"),
          "--reference", str(refs[0])], "--output"),
        (["-m", str(random_run), f"-m{other}", "--reference", str(refs[1])], "-m"),  # a short one, attached
    ):
        proc = tfm(*args, *given, stdin="Bonjour.\n")
        assert proc.returncode == 2 and proc.stdout == "", proc.stderr
        lines = _error_lines(proc.stderr)
        assert lines[0].startswith(f"Error: Invalid value for {name}: given twice (") and "give it once" in lines[0], lines
    assert tfm(*args, "--model", str(random_run), "--model", str(random_run), "Bonjour.").returncode == 0
    assert tfm(*args, "--model", str(random_run), "--", "--model").returncode == 0
    assert tfm(*args, "--model", str(random_run), "-b", "2", "--beam", "3", "Bonjour.").returncode == 0


def test_an_empty_translation_of_an_input_that_is_not_is_said(random_run: Path, tmp_path: Path) -> None:
    """A model that ends a sentence at once gave "" for a non-empty input, exit 0, nothing on stderr (cut and
    garbled translations were counted). Said now, with --min-len 1; an empty input line stays unsaid."""
    import torch

    from tfm_cli.checkpoint import load_model, save_weights, weights_state
    from tfm_cli.runs import FINAL

    run = tmp_path / "run"
    shutil.copytree(random_run, run)
    loaded = load_model(run)
    model, cfg = loaded.model, loaded.model.config
    with torch.no_grad():  # every decoder output a large multiple of the </s> embedding: </s> always wins
        emb = model.tgt_embed.token.weight
        emb[cfg.eos_id] *= 1 + emb.norm(dim=1).max() / emb[cfg.eos_id].norm()
        model.decoder_layers[-1].sub_ffn.norm.weight.zero_()
        model.decoder_layers[-1].sub_ffn.norm.bias.copy_(10 * emb[cfg.eos_id])
        if not cfg.tie_embeddings:
            model.generator.weight.copy_(emb)
    save_weights(run / FINAL, weights_state(model), cfg, loaded.tokenizer.sha256, 1)
    # (a line of a terminal's escape codes alone, `\x1b[1m`, is no input: it was counted as one the model ended)
    proc = tfm("translate", "--model", str(run), "--device", "cpu", stdin="Bonjour.\n\nMerci.\n\x1b[1m\n")
    assert proc.returncode == 0 and proc.stdout == "\n\n\n\n", proc.stdout
    warned = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert warned == ["warning: 2 of 4 translations (lines 1, 3) are empty for an input that is not: the model ended the "
                      "sentence at once (an input unlike its training data?); --min-len 1 asks for at least one token"], proc.stderr
    proc = tfm("translate", "--model", str(run), "--device", "cpu", "--min-len", "1", stdin="Bonjour.\n")
    assert proc.stdout.strip() and "empty" not in proc.stderr, proc.stderr


def test_translate_precision_errors(random_run: Path) -> None:
    proc = tfm("translate", "--model", str(random_run), "--device", "cpu", "--precision", "fp16", "x")
    _assert_one_line_error(proc, "fp16", "CUDA")
    proc = tfm("translate", "--model", str(random_run), "--device", "cpu", "--precision", "fp8", "x")
    assert proc.returncode == 2 and "fp8" in proc.stderr and "Traceback" not in proc.stderr


def test_translate_min_len_and_bf16_from_the_command_line(random_run: Path) -> None:
    proc = tfm(
        "translate", "--model", str(random_run), "--device", "cpu", "--precision", "bf16", "--max-len", "9",
        "--min-len", "9", "--json", "Bonjour.",
    )
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["tokens"]) >= 9


# ---- plain output for pipes and NO_COLOR ---------------------------------------------------------------------


def _run_on_tty(args: list[str], **env: str) -> str:
    """Run tfm with stdout on a pseudo-terminal (so isatty() is true); returns what it printed there."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.run(
            [str(TFM), *args],
            stdout=slave,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
            timeout=120,
        )
    finally:
        os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal has no writer left
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.returncode == 0, proc.stderr.decode()
    return b"".join(chunks).decode("utf-8", "replace")


def test_progress_on_a_terminal_never_takes_stdout(random_run: Path, tmp_path: Path) -> None:
    """stderr on a terminal (a live progress bar), stdout to a file: every translation lands in the file."""
    import threading

    lines = [f"Bonjour {i}." for i in range(300)]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    master, slave = pty.openpty()
    seen: list[bytes] = []

    def drain() -> None:  # keep the terminal's buffer empty so the bar never blocks
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            seen.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    env = _env(NO_COLOR=None, TERM="xterm-256color", COLUMNS="100")
    with open(source, "rb") as stdin:
        proc = subprocess.run(
            [str(TFM), "translate", "--model", str(random_run), "--device", "cpu", "--max-len", "2"],
            stdin=stdin, stdout=subprocess.PIPE, stderr=slave, env=env, timeout=300,
        )
    os.close(slave)
    reader.join(timeout=10)
    os.close(master)
    assert proc.returncode == 0
    assert len(proc.stdout.decode("utf-8").splitlines()) == len(lines)  # all of them, in the file
    terminal = b"".join(seen).decode("utf-8", "replace")
    first = proc.stdout.decode("utf-8").splitlines()[0]
    assert first not in terminal or not first.strip()  # none leaked onto the terminal


def _terminal_output(master: int) -> str:
    """What a pseudo-terminal's other side wrote, once nothing holds that side open."""
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: no writer left
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def test_translate_dash_typed_at_a_terminal_with_output_to_a_file_draws_no_bar(random_run: Path) -> None:
    """`tfm translate - > out` typed at a terminal: the live bar (stdout was no terminal) was redrawn on the
    line being typed, every 0.1 s, and erased what was typed. The keyboard's lines are the progress now."""
    master, slave = pty.openpty()
    env = _env(NO_COLOR=None, TERM="xterm-256color", COLUMNS="100")
    args = [str(TFM), "translate", "--model", str(random_run), "--device", "cpu", "--max-len", "2", "-"]
    proc = subprocess.Popen(args, stdin=slave, stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    try:
        os.write(master, b"Bonjour.\n")
        typed = _read_lines(proc, 1)  # answered while the terminal stays open, the bar's 0.1 s ticks with it
        time.sleep(0.5)
        os.write(master, b"\x04")  # Ctrl-D
        rest, _ = proc.communicate(timeout=60)
        terminal = _terminal_output(master)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        os.close(master)
    assert proc.returncode == 0 and len(typed) == 1 and rest == b"", terminal
    assert "type a sentence and press Enter" in terminal
    assert "sentences" not in terminal.replace("type a sentence", "") and "━" not in terminal, terminal


def _train_on_a_terminal(tmp_path: Path, **env: str | None) -> str:
    """A few steps of the smallest recipe with stderr on a pseudo-terminal; what the terminal showed."""
    corpus = tmp_path / "corpus.tsv"
    rows = _texts(600)
    corpus.write_text("".join(f"{s}\t{t}\n" for s, t in zip(rows[::2], rows[1::2], strict=True)), encoding="utf-8")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(clitools.tiny_recipe("t", data={"train": str(corpus), "dev": None},
                                           train={"max_steps": 12, "log_every": 4, "max_tokens": 512}), encoding="utf-8")
    master, slave = pty.openpty()
    proc = subprocess.Popen([str(TFM), "train", str(recipe), "--out", str(tmp_path / "run"), "--device", "cpu"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, env=_env(**env))
    os.close(slave)
    try:
        import threading

        seen: list[str] = []
        reader = threading.Thread(target=lambda: seen.append(_terminal_output(master)), daemon=True)
        reader.start()
        proc.communicate(timeout=300)
        reader.join(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        os.close(master)
    assert proc.returncode == 0, seen
    return "".join(seen)


def test_training_on_a_dumb_terminal_prints_plain_lines(tmp_path: Path) -> None:
    """TERM=dumb (Emacs' shell) at a terminal: rich draws no live display there, so nothing was printed between the
    corpus line and the end. Plain step lines, as for a log file."""
    shown = _train_on_a_terminal(tmp_path, NO_COLOR=None, TERM="dumb", COLUMNS="100")
    assert re.search(r"step 4/12  loss [\d.]+", shown) and "step 12/12" in shown, shown


def test_the_training_bar_on_a_narrow_terminal_keeps_its_step_count(tmp_path: Path) -> None:
    """At 80 columns and less rich cut the step count and the time left before the loss text; the figures are
    dropped from their end now, and the count stays whole."""
    shown = _train_on_a_terminal(tmp_path, NO_COLOR=None, TERM="xterm-256color", COLUMNS="56")
    final = [line for line in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown).replace("\r", "\n").splitlines() if "12/12" in line]
    assert final and all(len(line.rstrip()) <= 56 for line in final), shown
    assert any("loss " in line for line in final), final


def test_n_best_output_is_as_the_help_and_readme_say(random_run: Path) -> None:
    """`--n-best K` printed `LINE TAB SCORE TAB TRANSLATION` lines and `--json` an `nbest` list, and neither the
    help nor the README said so (the help of --json left out `truncated` and `nbest`)."""
    help_text = " ".join(w for w in tfm("translate", "--help").stdout.split() if w != "│")  # the panel's borders
    assert "input line number TAB score TAB translation" in help_text and "truncated, stopped" in help_text and "(and nbest" in help_text
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "best first: LINE<TAB>SCORE<TAB>TRANSLATION" in readme
    args = ["translate", "--model", str(random_run), "--device", "cpu", "--n-best", "2", "--beam", "2"]
    lines = tfm(*args, stdin="Bonjour.\n\nMerci.\n").stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == ["1", "1", "2", "2", "3", "3"]
    assert lines[2:4] == ["2\t0.0000\t"] * 2  # the empty line: K empty ones of score 0, as the README says
    assert "an empty input line, which is not translated, gets K\nempty ones of score 0" in readme
    for first, second in zip(lines[::2], lines[1::2], strict=True):
        assert len(first.split("\t")) == 3 and float(first.split("\t")[1]) >= float(second.split("\t")[1])
    records = [json.loads(line) for line in tfm(*args, "--json", stdin="Bonjour.\n\nMerci.\n").stdout.splitlines()]
    assert [set(r) for r in records] == [{"source", "translation", "score", "log_prob", "tokens", "truncated", "stopped", "nbest"}] * 3
    assert all(len(r["nbest"]) == 2 and set(r["nbest"][0]) == {"translation", "score", "log_prob", "tokens", "stopped"} for r in records)
    help_fields = re.sub(r" \([^)]*\)", "", help_text.split("One JSON object per input line:", 1)[1].split(" (and nbest", 1)[0])
    assert {f.strip() for f in help_fields.split(",")} == set(records[0]) - {"nbest"}  # log_prob was left out
    for r in records[::2]:  # the non-empty lines: score = log_prob / ((5 + |Y|) / 6)^0.6, |Y| with the EOS
        for h in r["nbest"]:
            assert h["log_prob"] < 0 and h["score"] == pytest.approx(h["log_prob"] / ((6 + len(h["tokens"])) / 6) ** 0.6, abs=2e-4)


def test_plain_table_when_piped_or_no_color(random_run: Path) -> None:
    args = ["tokenize", "--tokenizer", str(random_run / "tokenizer.json"), "--encode", "Je suis étudiant."]
    piped = tfm(*args, NO_COLOR=None)  # stdout is a pipe, NO_COLOR unset
    assert piped.returncode == 0, piped.stderr
    assert not BOX & set(piped.stdout), piped.stdout
    assert "\x1b[" not in piped.stdout
    assert piped.stdout.splitlines()[0] == "piece\tid"

    env = _env(NO_COLOR=None)
    fancy = _run_on_tty(args, **env)  # a terminal: a rich table
    assert BOX & set(fancy), fancy
    plain = _run_on_tty(args, **env, NO_COLOR="1")  # a terminal, but NO_COLOR
    assert not BOX & set(plain), plain
    assert "\x1b[" not in plain
    assert "piece\tid" in plain



def test_a_terminal_table_shows_the_users_text_as_text(random_run: Path) -> None:
    """Rich reads "[bold]" in a table's title or cells as a style and "[/]" as a closing tag: at a terminal,
    `tfm tokenize --encode '[/] x'` (the text is in the title) was a MarkupError traceback."""
    args = ["tokenize", "--tokenizer", str(random_run / "tokenizer.json"), "--encode", "[/] [bold]x"]
    fancy = _run_on_tty(args, **_env(NO_COLOR=None))
    assert BOX & set(fancy) and "'[/] [bold]x': " in fancy, fancy


# ---- shell completion scripts --------------------------------------------------------------------------------


def test_completions_up_to_date() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tfm_cli.cli.completions", "--check"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 0, (
        f"{proc.stderr} (run `python -m tfm_cli.cli.completions` and commit the result)"
    )


def test_completions_check_names_stale_files(tmp_path: Path) -> None:
    assert completions.main([str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(completions.FILES)
    assert completions.main(["--check", str(tmp_path)]) == 0
    (tmp_path / "tfm.zsh").write_text("# old\n", encoding="utf-8")
    (tmp_path / "tfm.fish").unlink()
    assert completions.stale_files(tmp_path, completions.generate()) == ["tfm.fish", "tfm.zsh"]
    proc = subprocess.run(
        [sys.executable, "-m", "tfm_cli.cli.completions", "--check", str(tmp_path)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert proc.returncode == 1
    assert "tfm.zsh" in proc.stderr and "tfm.fish" in proc.stderr and "tfm.bash" not in proc.stderr


@pytest.mark.parametrize(("version", "refused"), [("2.5.1", True), ("2.10.0+cu128", True), ("2.11.0", False),
                                                  ("2.12.0.dev20260101", False)])
def test_a_torch_older_than_pyprojects_floor_is_one_error_line(tmp_path: Path, version: str, refused: bool) -> None:
    """A torch kept older than pyproject's floor (pip --no-deps, an environment's own): `tfm train` failed with a
    traceback in its first batch (2.3-2.9 cannot index uint16 on the CPU). Now every command says so first, from the
    package's metadata (a distribution found before the real one stands in for it here)."""
    info = tmp_path / f"torch-{version.split('+')[0]}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n", encoding="utf-8")
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    proc = tfm("tokenize", "--help", PYTHONPATH=path)
    if refused:
        _assert_one_line_error(proc, f"tfm needs PyTorch 2.11 or newer; this Python has torch {version}")
        assert "hint: pip install 'torch>=2.11'" in proc.stderr and proc.stdout == ""
    else:
        assert proc.returncode == 0 and "Usage: tfm tokenize" in proc.stdout, proc.stderr


def test_completions_deterministic(tmp_path: Path) -> None:
    """The scripts do not depend on the order of a set or a dict built from hashes: written by two processes with
    other hash seeds (within one process the order would be the same every time), they are the same bytes."""
    written = []
    for seed in ("1", "2"):
        out = tmp_path / seed
        proc = subprocess.run([sys.executable, "-m", "tfm_cli.cli.completions", str(out)], capture_output=True,
                              text=True, env={**_env(), "PYTHONHASHSEED": seed}, timeout=60)
        assert proc.returncode == 0, proc.stderr
        written.append({name: (out / name).read_bytes() for name in completions.FILES})
    assert written[0] == written[1]
    assert all(written[0].values())


def test_completion_scripts_say_they_are_generated() -> None:
    for name in completions.FILES:
        text = (REPO / "completions" / name).read_text(encoding="utf-8")
        header = list(itertools.takewhile(lambda line: line.startswith("#"), text.splitlines()))
        assert header, f"{name} must start with a comment"
        assert any("Generated by `python -m tfm_cli.cli.completions`" in line for line in header), name


def _option_names(flags_only: bool = False) -> dict[str, set[str]]:
    """Command ('' for the top level, 'bench attention' for a group's subcommand) -> every option name (with
    `flags_only`, those that take no value), read from the app (not from the generator)."""
    names: dict[str, set[str]] = {}

    def walk(command, ctx: typer.Context, path: str) -> None:
        names[path] = {
            n
            for p in command.get_params(ctx)
            if p.param_type_name == "option" and (not flags_only or p.is_flag or p.count)
            for n in (*p.opts, *p.secondary_opts)
        }
        for name in command.list_commands(ctx) if hasattr(command, "list_commands") else []:
            sub = command.get_command(ctx, name)
            walk(sub, typer.Context(sub, info_name=name, parent=ctx), f"{path} {name}".strip())

    group = typer.main.get_command(app)
    walk(group, typer.Context(group, info_name="tfm", **group.context_settings), "")
    return names


def _fish_offers(fish: str, *words: str) -> list[str]:
    """The lines of the fish script whose condition holds on the command line `tfm WORDS...`: evaluates the
    conditions the generator writes, `[not] __fish_seen_subcommand_from NAME...` joined by `; and`."""
    offered = []
    for line in fish.splitlines():
        condition = re.search(r" -n '([^']*)'", line)
        if condition is None:
            continue
        holds = True
        for test in condition[1].split("; and "):
            negated = test.startswith("not ")
            function, *names = test.removeprefix("not ").split()
            assert function == "__fish_seen_subcommand_from", line
            holds = holds and any(n in words for n in names) != negated
        if holds:
            offered.append(line)
    return offered


def _zsh_function_body(zsh: str, words: list[str]) -> str:
    """The body of the zsh completion function of `tfm WORDS...` (`_tfm`, `_tfm_train`, `_tfm_bench_attention`)."""
    head = "\n" + "_".join(["_tfm", *words]).replace("-", "_") + "() {\n"
    assert head in zsh, f"zsh: no function for tfm {' '.join(words)}"
    return zsh.split(head)[1].split("\n}\n")[0]


def test_zsh_and_fish_cover_every_command_and_option() -> None:
    zsh = (REPO / "completions" / "tfm.zsh").read_text(encoding="utf-8")
    fish = (REPO / "completions" / "tfm.fish").read_text(encoding="utf-8")
    assert zsh.startswith("#compdef tfm\n")
    commands = _option_names()
    assert {"bench", "bench attention", "bench train", "bench translate"} <= set(commands)
    for command, options in commands.items():
        words = command.split()
        if words:  # offered by its parent (the app, or a group such as `tfm bench`)
            assert f"'{words[-1]}:" in _zsh_function_body(zsh, words[:-1]), f"zsh: tfm {command}"
            parent = _fish_offers(fish, *words[:-1])
            assert any(f"-a {words[-1]} " in line for line in parent), f"fish: tfm {command}"
        assert "-h" in options and "--help" in options
        # fish offers exactly the command's options (`tfm bench train` gets none of `tfm train`'s)
        fish_lines = _fish_offers(fish, *words)
        fish_options = {f"--{n}" for line in fish_lines for n in re.findall(r" -l (\S+)", line)}
        fish_options |= {f"-{n}" for line in fish_lines for n in re.findall(r" -s (\S+)", line)}
        assert fish_options == options, f"fish: tfm {command}"
        zsh_body = _zsh_function_body(zsh, words)
        for option in options:
            assert re.search(rf"[{{,')*]{re.escape(option)}[=+]?[\[,}}]", zsh_body), f"zsh: tfm {command} {option}"


def test_bash_script_syntax() -> None:
    proc = subprocess.run(
        ["bash", "-n", str(REPO / "completions" / "tfm.bash")], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


def _bash_complete(*words: str, cwd: Path = REPO) -> list[str]:
    """Call the bash completion function as bash would for the command line `words` (cursor on the last)."""
    script = (
        f"source {REPO / 'completions' / 'tfm.bash'}\n"
        'COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMPREPLY=()\n'
        "_tfm\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    proc = subprocess.run(
        ["bash", "-c", script, "bash", *words], capture_output=True, text=True, cwd=cwd, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    return sorted(line for line in proc.stdout.splitlines() if line)


def test_bash_completes_commands_and_options() -> None:
    assert _bash_complete("tfm", "tr") == ["train", "translate"]
    assert _bash_complete("tfm", "") == _registered_commands()
    assert _bash_complete("tfm", "--v") == ["--version"]
    assert _bash_complete("tfm", "translate", "--be") == ["--beam"]
    assert _bash_complete("tfm", "translate", "--n-") == ["--n-best"]
    assert _bash_complete("tfm", "translate", "--no-s") == ["--no-split-sentences"]
    assert _bash_complete("tfm", "bench", "") == ["attention", "train", "translate"]
    assert _bash_complete("tfm", "bench", "attention", "--ma") == ["--mask"]
    for command, options in _option_names().items():
        assert set(_bash_complete("tfm", *command.split(), "-")) == options, command


def test_bash_completes_values(tmp_path: Path) -> None:
    assert _bash_complete("tfm", "train", "--device", "") == ["auto", "cpu", "cuda"]
    assert _bash_complete("tfm", "translate", "--device", "=", "c") == ["cpu", "cuda"]  # --device=c
    assert _bash_complete("tfm", "translate", "--beam", "") == []  # a number: nothing to offer
    assert _bash_complete("tfm", "translate", "--precision", "b") == ["bf16"]
    (tmp_path / "runs").mkdir()
    (tmp_path / "recipe.yaml").write_text("name: x\n")
    assert _bash_complete("tfm", "translate", "--model", "ru", cwd=tmp_path) == ["runs"]
    assert _bash_complete("tfm", "train", "rec", cwd=tmp_path) == ["recipe.yaml"]
    # after the recipe come dotted.key= overrides, also after options that take a value
    assert _bash_complete("tfm", "train", "recipe.yaml", "train.max_st", cwd=tmp_path) == ["train.max_steps="]
    assert _bash_complete("tfm", "train", "recipe.yaml", "--out", "x", "model.d_m") == ["model.d_model="]
    assert _bash_complete("tfm", "train", "--resume", "runs", "train.max_s") == ["train.max_steps="]
    assert _bash_complete("tfm", "train", "recipe.yaml", "train.max_steps", "=", "") == []


def test_bash_keeps_the_space_after_a_file_and_completes_a_corpus(tmp_path: Path) -> None:
    """`tfm train recipes/ti<TAB>` gave `recipes/tiny.yaml` with no space after it (nospace, set for the override
    keys' `=`, was set though no key matched); `--corpus` completed nothing."""
    (tmp_path / "recipe.yaml").write_text("name: x\n")
    (tmp_path / "train.tsv").write_text("a\tb\n")
    script = (
        f"source {REPO / 'completions' / 'tfm.bash'}\n"
        'compopt() { echo "compopt $*"; }\n'  # what bash is told about the words offered
        'COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMPREPLY=()\n_tfm\nprintf "%s\\n" "${COMPREPLY[@]}"\n'
    )

    def offered(*words: str) -> str:
        return subprocess.run(["bash", "-c", script, "bash", *words], capture_output=True, text=True, cwd=tmp_path,
                              timeout=30).stdout

    file = offered("tfm", "train", "rec")
    assert "recipe.yaml" in file and "nospace" not in file, file
    key = offered("tfm", "train", "recipe.yaml", "train.max_st")
    assert "train.max_steps=" in key and "compopt -o nospace" in key, key
    assert _bash_complete("tfm", "tokenize", "--corpus", "tr", cwd=tmp_path) == ["train.tsv"]


def test_zsh_takes_an_options_value_in_the_same_word_too() -> None:
    """zsh read `--device=cpu` as a positional word (offering override keys after it, no value after the `=`) and
    `-fo` as stacked flags: every option with a value is written `--name=` and `-x+`, as _arguments needs."""
    zsh = (REPO / "completions" / "tfm.zsh").read_text(encoding="utf-8")
    flags = _option_names(flags_only=True)
    for command, options in _option_names().items():
        body = _zsh_function_body(zsh, command.split())
        for option in options:
            spec = re.search(rf"[{{,')*]{re.escape(option)}([=+]?)[\[,}}]", body)
            assert spec, f"zsh: tfm {command} {option}"
            takes_value = option not in flags[command]
            assert spec.group(1) == (("=" if option.startswith("--") else "+") if takes_value else ""), (command, option)


def test_bash_completes_bench_subcommands(tmp_path: Path) -> None:
    assert _bash_complete("tfm", "bench", "attention", "--mask", "") == ["causal", "none", "padding"]
    assert _bash_complete("tfm", "bench", "attention", "--dtype", "=", "fp") == ["fp16", "fp32"]
    assert _bash_complete("tfm", "bench", "attention", "--mask", "none", "--impl", "sdpa-f") == ["sdpa-flash"]
    assert _bash_complete("tfm", "bench", "translate", "--precision", "b") == ["bf16"]
    assert _bash_complete("tfm", "bench", "train", "--device", "c") == ["cpu", "cuda"]
    assert _bash_complete("tfm", "bench", "train", "--steps", "") == []  # a number: nothing to offer
    (tmp_path / "runs").mkdir()
    (tmp_path / "recipe.yaml").write_text("name: x\n")
    assert _bash_complete("tfm", "bench", "attention", "--baseline", "ru", cwd=tmp_path) == ["runs"]
    assert _bash_complete("tfm", "bench", "translate", "--recipe", "rec", cwd=tmp_path) == ["recipe.yaml"]
    assert _bash_complete("tfm", "bench", "translate", "-m", "ru", cwd=tmp_path) == ["runs"]
    assert _bash_complete("tfm", "bench", "train", "rec", cwd=tmp_path) == ["recipe.yaml"]
    assert _bash_complete("tfm", "bench", "train", "tr", cwd=tmp_path) == []  # the recipe comes first, always
    assert _bash_complete("tfm", "bench", "train", "recipe.yaml", "train.max_st", cwd=tmp_path) == [
        "train.max_steps="
    ]
    after_recipe = ("tfm", "bench", "train", "--steps", "5", "recipe.yaml")  # an option's value is no recipe
    assert _bash_complete(*after_recipe, "model.d_m") == ["model.d_model="]
    assert _bash_complete("tfm", "bench", "attention", "") == []  # no positional arguments


def test_device_choices_match_runtime() -> None:
    from tfm_cli.runtime import DEVICES

    assert set(completions._OPTION_CHOICES["--device"]) == set(DEVICES)


def test_precision_choices_match_runtime() -> None:
    from tfm_cli.precisions import PRECISIONS, TRANSLATE_PRECISIONS

    # translate (and bench translate) take the training precisions plus int8 (CPU inference only)
    assert set(completions._OPTION_CHOICES["--precision"]) == set(TRANSLATE_PRECISIONS) == {*PRECISIONS, "int8"}


def test_bench_completion_choices_match_bench() -> None:
    import torch

    from tfm_cli.bench.attention import MASKS, implementations
    from tfm_cli.bench.common import DTYPES

    assert set(completions._OPTION_CHOICES["--dtype"]) == set(DTYPES)
    assert set(completions._OPTION_CHOICES["--mask"]) == set(MASKS)
    # every implementation runs on CUDA; CPU has a subset
    assert set(completions._OPTION_CHOICES["--impl"]) == set(implementations(torch.device("cuda")))


def test_inspect_attn_kind_choices_match_the_attention_kinds() -> None:
    from tfm_cli.attention import KINDS

    assert set(completions._OPTION_CHOICES["--kind"]) == set(KINDS)
    assert _bash_complete("tfm", "inspect-attn", "--kind", "") == ["cross", "decoder", "encoder"]


def test_override_keys_match_recipe_schema() -> None:
    from tfm_cli.recipe import recipe_keys

    bash = (REPO / "completions" / "tfm.bash").read_text(encoding="utf-8")
    for key in recipe_keys():
        assert f"{key}=" in bash, key


def test_stop_signals_stop_once_and_leave_other_handlers_alone() -> None:
    """SIGTERM and SIGHUP raise KeyboardInterrupt (the trainer's save-and-return path) once: a second one, while
    the checkpoint is saved, is recorded but interrupts nothing; an ignored SIGHUP (nohup) stays ignored; the
    previous handlers come back afterwards."""
    import signal

    from tfm_cli.cli.common import interrupted_status as _interrupted_status
    from tfm_cli.cli.common import stop_signals

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    try:
        with pytest.raises(KeyboardInterrupt), stop_signals() as received:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(100):  # the handler runs between bytecodes of the main thread
                pass
        assert received == [signal.SIGTERM]
        with stop_signals() as received:
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            received.append(signal.SIGTERM)  # as if a first one had arrived
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(100):
                pass
        assert received == [signal.SIGTERM, signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        assert _interrupted_status([signal.SIGTERM]) == 143 and _interrupted_status([]) == 130
    finally:
        signal.signal(signal.SIGHUP, before)


def test_inspect_attn_stopped_by_sigterm_leaves_no_temporary_file(random_run: Path, tmp_path: Path) -> None:
    """SIGTERM (`kill`, `timeout`) while `tfm inspect-attn --image` drew its image ended the process at once: the
    hidden .NAME.XXXX.tmp it was writing stayed beside the image for good, and nothing was said. It now stops as
    Ctrl-C does (tokenize too): the temporary file removed, the image there before kept, status 143."""
    pytest.importorskip("matplotlib")
    image, log = tmp_path / "attn.png", tmp_path / "stderr.txt"
    image.write_bytes(b"the image of an earlier run")
    with open(log, "wb") as stderr:
        proc = subprocess.Popen(
            [str(TFM), "inspect-attn", "--model", str(random_run), "--device", "cpu", "Bonjour.",
             "--html", str(tmp_path / "attn.html"), "--image", str(image)],
            stdout=subprocess.DEVNULL, stderr=stderr, env=_env(),
        )
        try:
            deadline = time.monotonic() + 120
            while b"wrote" not in log.read_bytes():  # the page is written; the image is being drawn
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.005)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    err = log.read_text()
    assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err
    assert image.read_bytes() == b"the image of an earlier run"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attn.html", "attn.png", "stderr.txt"]


_INTERRUPT_WHILE_IMPORTING = '''
import os, signal, sys

class _CtrlC:
    """Ctrl-C as Python starts importing the module named in TFM_TEST_CTRL_C_AT (a tenth of a second in)."""
    def find_spec(self, name, path=None, target=None):
        if name == os.environ["TFM_TEST_CTRL_C_AT"]:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, _CtrlC())
'''


@pytest.mark.parametrize("module", ["typer", "tfm_cli.cli.translate", "rich.console"])
def test_ctrl_c_while_tfm_starts_is_ctrl_c_not_a_traceback(module: str, tmp_path: Path) -> None:
    """A Ctrl-C in the first few tenths of a second, while the app (typer, rich, the commands) was still being
    imported, printed Python's traceback of the import under way: the console script imported the app before any
    of tfm's code ran. Exit 130, as a Ctrl-C of a command that started nothing."""
    (tmp_path / "sitecustomize.py").write_text(_INTERRUPT_WHILE_IMPORTING)
    env = clitools.tfm_env({"PYTHONPATH": str(tmp_path), "TFM_TEST_CTRL_C_AT": module})
    proc = subprocess.run([str(clitools.TFM), "translate", "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 130 and proc.stderr == "" and proc.stdout == "", (proc.returncode, proc.stderr)
    env["TFM_TEST_CTRL_C_AT"] = "no-such-module"  # the same start without the Ctrl-C: the help, exit 0
    proc = subprocess.run([str(clitools.TFM), "translate", "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and "Usage: tfm translate" in proc.stdout


_IMPORT_ORDER = """
import runpy, sys
seen = []
class Record:
    def find_spec(self, name, path=None, target=None):
        if name in ("numpy", "torch"):
            seen.append(name)
sys.meta_path.insert(0, Record())
sys.argv = [sys.argv[1], "--help"]
try:
    runpy.run_module(sys.argv[0], run_name="__main__")
except SystemExit:
    pass
import torch
print(" ".join(seen))
"""


@pytest.mark.parametrize("program", ["tfm_cli", "tfm_cli.torchrun"])  # `tfm`/`python -m tfm_cli`, the launcher
def test_numpy_is_imported_before_torch_whose_import_drops_a_ctrl_c(program: str) -> None:
    """torch imports numpy from C while it loads and drops that import's errors, a KeyboardInterrupt included: a
    Ctrl-C in that instant was lost, numpy left half made, and `tfm train` went on to a traceback at its optimizer
    or its curves (8 of 60 interrupts at random moments of `import torch` were lost, none of 60 with numpy first).
    The console script imports numpy, in Python, just before torch, and so does the torchrun launcher of
    `--nproc-per-node` (a Ctrl-C it lost went on training the whole job)."""
    env = clitools.tfm_env()
    proc = subprocess.run([sys.executable, "-c", _IMPORT_ORDER, program], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].split() == ["numpy", "torch"], proc.stdout  # without the console's finder: torch, numpy


@pytest.mark.parametrize("command", [["tokenize"], ["train"], ["translate"], ["inspect-attn"], ["export"], ["bench", "attention"], ["bench", "train"], ["bench", "translate"]])
def test_help_keeps_every_option_name_whole_on_a_narrow_terminal(command: list[str]) -> None:
    """Below 80 columns the rich panels' option column cut names short (`--vocab…`, `--n-bes…`: 2 to 18 names a
    command at 40 columns, some still at 60) and left a word a line for the descriptions; there the help is now
    Click's plain list, within the width. From 80 columns on, the panels."""
    from rich.cells import cell_len

    click_command = typer.main.get_command(app)
    for word in command:
        click_command = click_command.commands[word]
    names = [name for param in click_command.params for name in (*param.opts, *param.secondary_opts) if name.startswith("--")]
    for columns in (40, 60, 100):
        proc = tfm(*command, "--help", COLUMNS=str(columns))
        assert proc.returncode == 0 and "…" not in proc.stdout, proc.stdout
        assert max(cell_len(line) for line in proc.stdout.splitlines()) <= columns, proc.stdout
        listed = set(re.findall(r"--[a-z0-9-]+", proc.stdout))
        assert set(names) <= listed, set(names) - listed
        assert ("╭─ Options" in proc.stdout) == (columns >= 80), proc.stdout


def test_control_characters_of_a_sentence_are_shown_not_sent_to_the_terminal(random_run: Path) -> None:
    """An ESC sequence in the sentence (`\\e]0;title\\a` sets the terminal's title) was echoed raw in the status
    lines (`source:` of inspect-attn, `decoded:` of tokenize --encode) and in errors: now written out as \\x1b."""
    sentence = "Le chat\x1b]0;pwned\x07 dort."
    for args in (
        ["tokenize", "--tokenizer", str(random_run), "--encode", sentence],
        ["inspect-attn", "--model", str(random_run), "--device", "cpu", sentence],
    ):
        proc = tfm(*args)
        assert "\x1b" not in proc.stderr and "\x07" not in proc.stderr, (args, proc.stderr)
    proc = tfm("tokenize", "--tokenizer", str(random_run), "--encode", sentence)
    assert "decoded: Le chat\\x1b]0;pwned\\x07 dort." in proc.stderr, proc.stderr
    # translated as the sentence without them (the model was given their byte tokens)
    plain = tfm("translate", "--model", str(random_run), "--device", "cpu", "--max-len", "3", "Le chat dort.").stdout
    assert tfm("translate", "--model", str(random_run), "--device", "cpu", "--max-len", "3", sentence).stdout == plain
    proc = tfm("translate", "--model", str(random_run / "missing\x1b[31m"), "Bonjour.")
    assert proc.returncode != 0 and "missing\\x1b[31m" in proc.stderr and "\x1b" not in proc.stderr, proc.stderr


def test_tokenize_out_at_the_file_systems_longest_name_is_written(tmp_path: Path) -> None:
    """An --out name the length check let through (the longest whose temporary name fits) failed at the end with
    "File name too long": the tokenizer's own temporary file was made inside the command's, 14 bytes longer."""
    from tfm_cli.files import TEMPORARY_NAME_EXTRA
    from tfm_cli.tokenizer import Tokenizer

    corpus = tmp_path / "pairs.tsv"
    corpus.write_text("Bonjour le monde.\tHello world.\nMerci beaucoup.\tThank you very much.\n" * 50, encoding="utf-8")
    longest = os.pathconf(tmp_path, "PC_NAME_MAX") - TEMPORARY_NAME_EXTRA
    out = tmp_path / ("t" * (longest - len(".json")) + ".json")
    proc = tfm("tokenize", "--corpus", str(corpus), "--vocab-size", "300", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert Tokenizer.load(out).vocab_size > 260 and sorted(p.name for p in tmp_path.iterdir()) == sorted([corpus.name, out.name])


def test_without_numpy_torch_still_loads_under_the_console_script() -> None:
    """numpy first, but not numpy or nothing: an environment without it (`pip install --no-deps`) ran tfm before
    (torch warns), and the hook that imports it must not turn that into a ModuleNotFoundError."""
    code = (
        "import sys\n"
        "from tfm_cli.console import numpy_before_torch\n"
        "numpy_before_torch()\n"
        "class NoNumpy:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'numpy' or name.startswith('numpy.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(1, NoNumpy())\n"
        "import torch\n"
        "print(torch.ones(2).sum().item())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clitools.tfm_env(), timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "2.0", proc.stderr


@pytest.mark.parametrize("columns", ["0", "-5", "--5", " 0 ", "abc"])
def test_a_width_of_no_columns_is_taken_as_unset(columns: str) -> None:
    """COLUMNS=0: rich took it for a width of nothing, and every error came out as an empty line (exit status 1,
    not a word), the help as blank lines."""
    proc = tfm("tokenize", "--tokenizer", "/nonexistent", "--encode", "x", COLUMNS=columns)
    assert proc.returncode == 1 and proc.stderr.startswith("Error: tokenizer /nonexistent does not exist"), proc.stderr
    helped = tfm("--help", COLUMNS=columns)
    assert helped.returncode == 0 and "Usage: tfm" in helped.stdout and "tokenize" in helped.stdout
