"""Inputs and outputs a reviewer tried on `translate`, `inspect-attn` and the Python API that slipped past
test_bad_inputs.py: an output that is the input behind stdin or a hard link to one, a full disk, closed stdin,
weights that hold NaN, text with lone surrogates, options given the same file, a folder where a file is meant.

Each is answered as the rest: one `Error:` line (or a clear Python exception), no traceback, nothing saved lost.
The model is test_bad_inputs.py's random tiny run.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
from pathlib import Path, PurePosixPath

import pytest
import test_bad_inputs
from clitools import TFM, has_module, start_tfm, tfm, tfm_env
from safetensors.torch import load_file, save_file
from test_bad_inputs import error_line, translate, write

from tfm_cli.checkpoint import WEIGHTS_CRC, read_metadata, weights_crc32
from tfm_cli.cli.common import print_json, write_output
from tfm_cli.errors import CheckpointError, TfmError, shell_word
from tfm_cli.runs import FINAL
from tfm_cli.translator import Translator

root, run = test_bad_inputs.root, test_bad_inputs.run  # its fixtures: the random tiny run, made once here too
DEV_FULL = Path("/dev/full")
needs_dev_full = pytest.mark.skipif(not DEV_FULL.exists(), reason="no /dev/full (a device that is always full) here")


# ---- outputs that would destroy an input ----------------------------------------------------------------------


def test_output_that_is_the_file_behind_stdin_is_refused(run: Path, tmp_path: Path) -> None:
    """`tfm translate -r ref --output src < src` replaced the French sources with their translations."""
    sources = write(tmp_path / "src.fr", "Bonjour.\nMerci.\n")
    refs = write(tmp_path / "ref.en", "Hello.\nThanks.\n")
    with sources.open("rb") as stdin:
        proc = subprocess.run(
            [str(TFM), "translate", "--model", str(run), "--device", "cpu", "-r", str(refs), "--output", str(sources)],
            stdin=stdin, capture_output=True, text=True, env=tfm_env(),
        )
    error_line(proc, f"--output {sources}", "standard input")
    assert sources.read_text() == "Bonjour.\nMerci.\n"


def test_output_that_is_a_hard_link_to_an_input_is_refused(run: Path, tmp_path: Path) -> None:
    refs = write(tmp_path / "ref.en", "Hello.\nThanks.\n")
    os.link(refs, tmp_path / "link.en")
    proc = translate(run, "-r", str(refs), "--output", str(tmp_path / "link.en"), stdin="Bonjour.\nMerci.\n")
    error_line(proc, "--output", "is also an input")
    assert refs.read_text() == "Hello.\nThanks.\n"


def test_html_and_image_may_not_be_the_same_file(run: Path, tmp_path: Path) -> None:
    same = str(tmp_path / "attention.svg")
    proc = tfm("inspect-attn", "--model", str(run), "--device", "cpu", "Je suis.", "--html", same, "--image", same, check=False)
    assert proc.returncode == 2 and "--html and --image are the same file" in proc.stderr, proc.stderr
    assert not Path(same).exists()


@pytest.mark.parametrize(
    ("command", "option", "example"),
    [
        (["tokenize", "--corpus", "c.tsv"], "--out", "tokenizer.json"),
        (["translate", "--score", "c.tsv"], "--output", "translations.txt"),
        (["inspect-attn", "Je suis."], "--html", "attention.html"),
    ],
)
def test_an_output_path_ending_in_a_slash_names_a_folder(tmp_path: Path, command, option: str, example: str) -> None:
    """Path("newdir/") is Path("newdir"): `tfm tokenize --out newdir/` wrote a file called newdir."""
    proc = tfm(*command, option, "newdir/", cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "'newdir/' names a folder" in proc.stderr and f"newdir/{example}" in proc.stderr
    assert not (tmp_path / "newdir").exists()


@pytest.mark.parametrize(
    ("command", "named"),
    [
        (["train", "recipe.yaml", "--out", "", "--dry-run"], "'--out' / '-o': is empty"),
        (["train", "--resume", ""], "'--resume': is empty"),
        (["train", ""], "the recipe path is empty"),
        (["export", "run", "--format", "release", "--out", ""], "'--out' / '-o': is empty"),
        (["export", "", "--format", "release"], "'RUN': is empty"),
        (["translate", "--model", "", "Bonjour."], "'--model' / '-m': is empty"),
        (["translate", "--score", "", "--score", "ref.en"], "'--score': is empty"),
        (["translate", "--output", "", "--score", "c.tsv"], "'--output': is empty"),
        (["tokenize", "--corpus", ""], "--corpus is empty"),
        (["tokenize", "--encode", "x", "--tokenizer", ""], "'--tokenizer' / '-t': is empty"),
        (["inspect-attn", "--model", "", "Bonjour."], "'--model' / '-m': is empty"),
        (["bench", "translate", "--baseline", ""], "'--baseline': is empty"),
    ],
)
def test_an_empty_path_is_refused_not_read_as_the_current_folder(tmp_path: Path, command, named: str) -> None:
    """`--out "$RUN"` with RUN unset: Path("") is ".", so `tfm train --out ""` trained into the current folder."""
    shutil.copy(Path(__file__).parents[1] / "recipes" / "tiny.yaml", tmp_path / "recipe.yaml")
    proc = tfm(*command, cwd=tmp_path, check=False)
    assert proc.returncode in (1, 2) and "Traceback" not in proc.stderr, proc.stderr
    assert named in " ".join(proc.stderr.replace("│", " ").split()), proc.stderr
    assert "an unset shell variable?" in " ".join(proc.stderr.replace("│", " ").split())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recipe.yaml"]


@pytest.mark.parametrize(
    "command",
    [
        ["train", "recipe.yaml", "--out", "runs/x\r", "--dry-run"],
        ["tokenize", "recipe.yaml", "--out", "tok.json\r"],
        ["export", "run", "--format", "release", "--out", "exported\n"],
    ],
)
def test_a_path_ending_in_a_line_end_is_refused(tmp_path: Path, command) -> None:
    """A script saved with Windows line ends passes `--out runs/x\\r`: the run went into a folder whose name ends in
    an invisible carriage return. Refused now, before anything is written."""
    shutil.copy(Path(__file__).parents[1] / "recipes" / "tiny.yaml", tmp_path / "recipe.yaml")
    proc = tfm(*command, cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    said = " ".join(proc.stderr.replace("│", " ").split())
    assert "'--out' / '-o':" in said and ("ends with a carriage return" in said or "ends with a line feed" in said), said
    assert "dos2unix" in said and sorted(p.name for p in tmp_path.iterdir()) == ["recipe.yaml"]


# ---- a disk that fills up -------------------------------------------------------------------------------------


@needs_dev_full
def test_a_full_disk_under_stdout_or_an_output_file_is_one_line(run: Path, tmp_path: Path) -> None:
    for args in (["Bonjour."], ["--json", "Bonjour."]):
        with DEV_FULL.open("wb") as full:
            proc = subprocess.run(
                [str(TFM), "translate", "--model", str(run), "--device", "cpu", *args],
                stdout=full, stderr=subprocess.PIPE, text=True, env=tfm_env(),
            )
        error_line(proc, "writing the output failed", "No space left on device")
    refs = write(tmp_path / "ref.en", "Hello.\n")
    error_line(translate(run, "-r", str(refs), "--output", str(DEV_FULL), stdin="Bonjour.\n"), "--output /dev/full", "No space left")
    proc = tfm("inspect-attn", "--model", str(run), "--device", "cpu", "Je suis.", "--html", str(DEV_FULL), check=False)
    error_line(proc, "--html /dev/full could not be written")


def test_an_output_file_is_replaced_whole_or_not_at_all(tmp_path: Path) -> None:
    """--output was written in place: a disk that filled up half-way left the previous file truncated."""
    previous = write(tmp_path / "hyp.en", "an earlier run's translations\n")

    def fails_half_way(name: str) -> None:
        Path(name).write_text("half of the new")
        raise OSError(28, "No space left on device")

    with pytest.raises(TfmError, match="--output .* could not be written: No space left on device; the file there is as it was"):
        write_output(previous, "--output", fails_half_way)
    assert previous.read_text() == "an earlier run's translations\n"
    assert [p.name for p in tmp_path.iterdir()] == ["hyp.en"]  # no temporary file left
    write_output(previous, "--output", lambda name: Path(name).write_text("new\n"))
    assert previous.read_text() == "new\n" and previous.stat().st_mode & 0o777 == 0o666 & ~_umask()
    # a file replaced keeps its permissions, as a shell's `>` keeps them (a private 0600 file became 0644)
    for mode in (0o600, 0o640, 0o444):
        previous.chmod(mode)
        write_output(previous, "--output", lambda name: Path(name).write_text("newer\n"))
        assert previous.read_text() == "newer\n" and previous.stat().st_mode & 0o777 == mode
    fresh = tmp_path / "fresh.en"
    write_output(fresh, "--output", lambda name: Path(name).write_text("new\n"))
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~_umask()


def _file_size_limit(limit: int):
    """A `preexec_fn` that lets the command write no file past `limit` bytes (EFBIG, as a disk that fills up
    half-way through a file), without root or a small file system to fill."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead of the process being killed

    return apply


def _tfm_limited(limit: int, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(TFM), *args], capture_output=True, text=True, env=tfm_env(), cwd=cwd, preexec_fn=_file_size_limit(limit),
    )


def test_a_disk_that_fills_up_under_an_output_file_is_one_line_naming_it(root: Path, run: Path, tmp_path: Path) -> None:
    """A write's error names no file: `tokenize --out` on a full disk said 'writing the output failed ... where
    stdout goes', and a checkpoint or an export (safetensors' own error type) was a traceback."""
    corpus = str(root / "train.tsv")
    previous = tmp_path / "tok.json"
    shutil.copy(run / "tokenizer.json", previous)
    before = previous.read_bytes()
    proc = _tfm_limited(20_000, "tokenize", "--corpus", corpus, "--vocab-size", "2000", "--out", str(previous), cwd=tmp_path)
    error_line(proc, f"--out {previous} could not be written", "File too large", "the file there is as it was")
    assert previous.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["tok.json"]

    out = tmp_path / "run"
    proc = _tfm_limited(50_000, "train", str(root / "recipe.yaml"), "--out", str(out), "--device", "cpu", cwd=tmp_path)
    line = error_line(proc, "training stopped at step 5", "step-00000005.safetensors: File too large", "no checkpoint was saved yet")
    assert "hint: free some space there, then run the same command again" in proc.stderr, line
    assert not list((out / "checkpoints").iterdir())  # no temporary file left

    proc = _tfm_limited(50_000, "export", str(run), "--format", "release", "--out", str(tmp_path / "rel"), "--verify-lines", "2", cwd=tmp_path)
    error_line(proc, f"{tmp_path / 'rel'} could not be written: File too large; nothing was written")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "tok.json"]


@pytest.mark.skipif(not has_module("matplotlib"), reason="curves.png needs the plot extra")
def test_curves_of_a_run_whose_png_cannot_be_written_are_shown_with_a_warning(tmp_path: Path) -> None:
    """`tfm train --curves RUN` of a run this user may read but not write (another's, a read-only copy): the chart
    was drawn, then exit 1 naming curves.png's temporary file (one it left behind where the write failed)."""
    records = [{"kind": "train", "step": s, "loss": 8.0 - s / 10, "lr": 1e-3} for s in (10, 20, 30)]
    write(tmp_path / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in records))
    proc = _tfm_limited(2_000, "train", "--curves", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "train loss" in proc.stdout
    assert f"warning: curves.png not written: {tmp_path / 'curves.png'}: File too large" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]


def test_a_writer_error_that_names_no_errno_on_a_full_disk_is_said_as_one(tmp_path: Path, monkeypatch) -> None:
    """torch.save on a full disk raises RuntimeError('... unexpected pos ...'), with no errno to go by."""
    from tfm_cli.files import atomic_write

    def torch_like(name: str) -> None:
        Path(name).write_bytes(b"half")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    target = tmp_path / "step.state.pt"
    monkeypatch.setattr(os, "statvfs", lambda path: os.statvfs_result((4096,) * 3 + (0,) * 7))
    with pytest.raises(OSError, match="No space left on device") as caught:
        atomic_write(target, torch_like)
    assert caught.value.filename == str(target) and list(tmp_path.iterdir()) == []
    monkeypatch.undo()  # free space left: the error is not the disk's, and keeps its own type
    with pytest.raises(RuntimeError, match="unexpected pos"):
        atomic_write(target, torch_like)


def test_a_file_is_synced_to_the_disk_before_its_rename_and_its_folder_after(tmp_path: Path, monkeypatch) -> None:
    """A checkpoint (or any file tfm writes whole) must survive a crash of the machine, not only of the process:
    its data is fsynced under the temporary name, before the rename, and the folder after it (the new name)."""
    from tfm_cli.files import atomic_write

    target = tmp_path / "step-00000100.safetensors"
    target.write_bytes(b"old")
    synced = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        st = os.fstat(fd)
        synced.append(("folder" if stat.S_ISDIR(st.st_mode) else "file", st.st_ino, target.read_bytes()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    atomic_write(target, lambda tmp: Path(tmp).write_bytes(b"new"))
    assert target.read_bytes() == b"new"
    # the new file's data (the inode the rename then puts under the name) while the name still held the old file;
    # then the folder, once the name holds the new one
    assert synced == [("file", target.stat().st_ino, b"old"), ("folder", tmp_path.stat().st_ino, b"new")]


def test_an_error_found_by_the_sync_leaves_the_old_file_and_names_the_new(tmp_path: Path, monkeypatch) -> None:
    """A full disk or an I/O error may show only when the data is synced (delayed allocation): the file is then not
    renamed into place, the old one stays, and the error names the file; a folder that cannot be synced (a file
    system without it: EINVAL) does not fail the write."""
    from tfm_cli.files import atomic_write

    target = tmp_path / "summary.json"
    target.write_bytes(b"old")
    real_fsync = os.fsync

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(OSError, match="Input/output error") as caught:
        atomic_write(target, lambda tmp: Path(tmp).write_bytes(b"new"))
    assert caught.value.filename == str(target)
    assert target.read_bytes() == b"old" and list(tmp_path.iterdir()) == [target]

    def no_folder_sync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "Invalid argument")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", no_folder_sync)
    atomic_write(target, lambda tmp: Path(tmp).write_bytes(b"new"))
    assert target.read_bytes() == b"new" and list(tmp_path.iterdir()) == [target]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---- stdin, text ----------------------------------------------------------------------------------------------


def test_closed_stdin_is_one_line(run: Path) -> None:
    proc = subprocess.run(
        [str(TFM), "translate", "--model", str(run), "--device", "cpu"], stdin=subprocess.DEVNULL,
        capture_output=True, text=True, env=tfm_env(), preexec_fn=lambda: os.close(0),
    )
    error_line(proc, "standard input is closed")


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_results_are_utf8_whatever_the_encoding_of_stdout(run: Path, encoding: str) -> None:
    """PYTHONIOENCODING=ascii (or a Latin-1 locale): the first result holding a character stdout's encoding lacks
    was a UnicodeEncodeError traceback, after the work; inputs are read as UTF-8 whatever the locale."""
    env = {"PYTHONIOENCODING": encoding}
    proc = tfm("tokenize", "--tokenizer", str(run), "--encode", "Où est 日本 ?", "--json", env_extra=env)
    assert json.loads(proc.stdout)["pieces"][0].startswith("▁")
    proc = tfm("tokenize", "--tokenizer", str(run), "--encode", "Où", env_extra=env)  # a piped table
    assert "▁" in proc.stdout
    proc = tfm("translate", "--model", str(run), "--device", "cpu", "--greedy", "--json", stdin="Où est 日本 ?\n", env_extra=env)
    assert json.loads(proc.stdout)["source"] == "Où est 日本 ?"


def test_closed_stdout_is_one_line_before_the_work(run: Path, tmp_path: Path) -> None:
    """`tfm ... >&-` translated (or trained) first, then ended in an AttributeError traceback ('NoneType' object
    has no attribute 'write') where the results were to be written."""
    for args in (["translate", "--model", str(run), "--device", "cpu", "Bonjour."], ["train", str(run / "recipe.yaml"), "--out", str(tmp_path / "out")]):
        proc = subprocess.run(
            [str(TFM), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=tfm_env(),
            preexec_fn=lambda: os.close(1),
        )
        error_line(proc, "standard output is closed")
    assert not (tmp_path / "out").exists()


def test_closed_stderr_trains_and_translates_quietly(run: Path, tmp_path: Path) -> None:
    """`tfm train ... 2>&-` (a cron line): Python starts with sys.stderr None, and the first progress line ended the
    run with an AttributeError no one could see: exit 1, recipe.yaml and tokenizer.json written, no checkpoint."""
    out = tmp_path / "out"
    for args in (["train", str(run / "recipe.yaml"), "--out", str(out), "--device", "cpu"],
                 ["translate", "--model", str(run), "--device", "cpu", "--greedy", "Bonjour."],
                 ["translate", "--model", str(tmp_path / "nowhere"), "Bonjour."]):
        proc = subprocess.run(
            [str(TFM), *args], stdout=subprocess.PIPE, text=True, env=tfm_env(), preexec_fn=lambda: os.close(2),
        )
        if "nowhere" in args[2]:  # an error with nowhere to be said: the exit status still says it
            assert proc.returncode == 1 and proc.stdout == ""
        else:
            assert proc.returncode == 0 and proc.stdout.strip(), args
    assert (out / "model.safetensors").is_file()


@needs_dev_full
def test_stderr_on_a_full_disk_trains_and_translates_quietly(root: Path, run: Path, tmp_path: Path) -> None:
    """`tfm train ... 2>train.log` on a full log partition: the first progress line's ENOSPC stopped the run before
    it began, and the error, blamed on stdout ("check the free space where stdout goes"), went to the full stderr."""
    out = tmp_path / "run"
    with DEV_FULL.open("w") as full:
        for args in (["train", str(root / "recipe.yaml"), "--out", str(out), "--device", "cpu"],
                     ["translate", "--model", str(run), "--device", "cpu", "--greedy", " ".join(["mot"] * 200)],  # + a warning
                     ["tokenize", "--tokenizer", str(run), "--encode", "Bonjour."]):
            proc = subprocess.run([str(TFM), *args], stdout=subprocess.PIPE, stderr=full, text=True, env=tfm_env())
            assert proc.returncode == 0 and proc.stdout.strip(), (args, proc.returncode)
    assert (out / "model.safetensors").is_file()


def test_a_current_directory_deleted_under_the_shell_is_said(run: Path, tmp_path: Path) -> None:
    """`cd build; rm -rf ../build` elsewhere, then tfm: torch's MKL stopped every command that loads a model with
    "Intel oneMKL FATAL ERROR: Cannot load libtorch_cpu.so", exit 2."""
    gone = tmp_path / "gone"
    gone.mkdir()

    def enter_then_delete() -> None:
        os.chdir(gone)
        os.rmdir(gone)

    proc = subprocess.run([str(TFM), "translate", "--model", str(run), "Bonjour."], capture_output=True, text=True,
                          env=tfm_env(), preexec_fn=enter_then_delete)
    error_line(proc, "the current directory no longer exists")
    assert "hint: cd to a directory that exists" in proc.stderr


def _stderr_reader_gone(args: list[str], stdin: bytes = b"") -> subprocess.CompletedProcess:
    """`tfm ARGS` whose stderr is a pipe nobody reads any more (`2>&1 | tee log` whose tee was killed)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = start_tfm(*args, stdin=subprocess.PIPE, stderr=write_end)
    finally:
        os.close(write_end)
    stdout, _ = proc.communicate(stdin, timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, None)


def test_a_reader_of_stderr_that_went_away_does_not_stop_the_work(root: Path, run: Path, tmp_path: Path) -> None:
    """rich met the broken pipe at the first progress or warning line by putting /dev/null on stdout and raising
    SystemExit(1): a translation into a file came out empty, a training run ended without saving, exit 1 silently."""
    long_line = " ".join(["mot"] * 200)  # longer than the model takes: a warning on stderr
    proc = _stderr_reader_gone(["translate", "--model", str(run), "--device", "cpu", "--greedy"], f"{long_line}\nBonjour.\n".encode())
    assert proc.returncode == 0 and len(proc.stdout.decode().splitlines()) == 2
    out = tmp_path / "run"
    proc = _stderr_reader_gone(["train", str(root / "recipe.yaml"), "--out", str(out), "--device", "cpu"])
    assert proc.returncode == 0 and (out / "model.safetensors").is_file() and b"run_dir\t" in proc.stdout


def test_inspect_attn_text_that_is_not_utf8(run: Path) -> None:
    for args in ([b"caf\xe9"], [b"Bonjour", b"--target", b"caf\xe9"]):
        proc = subprocess.run(
            [str(TFM).encode(), b"inspect-attn", b"--model", str(run).encode(), b"--device", b"cpu", *args],
            capture_output=True, env=tfm_env(),
        )
        proc.stderr = proc.stderr.decode()
        error_line(proc, "is not valid UTF-8", "character 4")


def test_byte_fallback_pieces_of_a_word_read_back_as_its_characters(run: Path) -> None:
    """--words showed `<0xD7><0xA9>...` for a Hebrew word whose characters the vocabulary lacks."""
    proc = tfm("inspect-attn", "--model", str(run), "--device", "cpu", "שלום le monde", "--words", "--json")
    report = json.loads(proc.stdout)
    assert "שלום" in report["src_tokens"] and not any("<0x" in t for t in report["src_tokens"]), report["src_tokens"]


# ---- models ---------------------------------------------------------------------------------------------------


def test_weights_holding_nan_are_refused_not_translated_to_empty_lines(run: Path, tmp_path: Path) -> None:
    copy = Path(shutil.copytree(run, tmp_path / "run"))
    state, metadata = load_file(str(copy / FINAL)), read_metadata(copy / FINAL)
    name = next(k for k in state if k.endswith("weight") and "decoder" in k)
    state[name][0, 0] = float("nan")  # as a run that diverged writes it, with their CRC-32
    save_file(state, str(copy / FINAL), metadata={**metadata, WEIGHTS_CRC: weights_crc32(state)})
    error_line(translate(copy, stdin="Bonjour\nMerci\n"), f"{name} holds 1 NaN or infinite value of")
    proc = tfm("inspect-attn", "--model", str(copy), "Je suis.", check=False)
    error_line(proc, "NaN or infinite")
    with pytest.raises(CheckpointError, match="unusable"):
        Translator.load(copy, device="cpu")


def test_other_engines_models_and_missing_files_are_named(run: Path, tmp_path: Path) -> None:
    ct2 = tmp_path / "ct2"
    ct2.mkdir()
    write(ct2 / "model.bin", b"\0" * 16)
    write(ct2 / "config.json", "{}")
    error_line(translate(ct2, "Bonjour."), f"{ct2} is a CTranslate2 model (model.bin), not tfm's")
    lone = Path(shutil.copy(run / FINAL, tmp_path / "lone.safetensors"))
    proc = translate(lone, "Bonjour.")
    error_line(proc, str(lone), "needs the tokenizer it was trained with", str(tmp_path / "tokenizer.json"))
    assert "hint: copy the run's tokenizer.json into" in proc.stderr
    onnx = tmp_path / "onnx"
    onnx.mkdir()
    write(onnx / "decoder.onnx", b"graph")
    error_line(translate(onnx, "Bonjour."), f"{onnx} is an incomplete ONNX export: encoder.onnx is missing")
    write(onnx / "encoder.onnx", b"graph")
    proc = tfm("export", str(onnx), "--format", "release", "--out", str(tmp_path / "rel"), check=False)
    error_line(proc, f"{onnx} is an ONNX export (decoder.onnx, encoder.onnx): it holds no PyTorch weights")
    proc = translate(run, "-r", str(tmp_path / "nowhere.en"), stdin="Bonjour.\n")
    line = error_line(proc, f"--reference {tmp_path / 'nowhere.en'} does not exist")
    assert "data.train" not in line and "bundled" not in proc.stderr  # not the recipe's corpus message
    for corpus in (["nowhere.tsv"], ["nowhere.fr", "nowhere.en"]):
        args = [a for c in corpus for a in ("--corpus", str(tmp_path / c))]
        proc = tfm("tokenize", *args, "--out", str(tmp_path / "tok.json"), check=False)
        line = error_line(proc, f"--corpus {tmp_path / corpus[0]} does not exist")
        assert "data.train" not in line and not (tmp_path / "tok.json").exists()


def test_alpha_that_is_not_a_number_is_named_as_such(run: Path) -> None:
    for value in ("nan", "inf", "-0.5"):
        proc = translate(run, "--alpha", value, "Bonjour.")
        assert proc.returncode == 2 and f"{value} is not a number from 0 to 10" in proc.stderr.replace("\n", " "), proc.stderr


def test_json_says_when_an_input_was_cut(run: Path) -> None:
    long = " ".join(["bonjour"] * 200)  # more tokens than max_positions=64
    records = [json.loads(line) for line in translate(run, "--json", stdin=f"Merci.\n{long}\n").stdout.splitlines()]
    assert [r["truncated"] for r in records] == [False, True]


def test_json_has_no_nan(capsys: pytest.CaptureFixture) -> None:
    """Python's json writes NaN, which no JSON parser reads."""
    print_json({"score": float("nan"), "nbest": [{"score": float("-inf")}, {"score": 1.5}]})
    assert json.loads(capsys.readouterr().out) == {"score": None, "nbest": [{"score": None}, {"score": 1.5}]}


# ---- the Python API -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def translator(run: Path) -> Translator:
    return Translator.load(run, device="cpu", precision="fp32")


def test_api_arguments_of_the_wrong_kind_are_clear_errors(translator: Translator, run: Path) -> None:
    with pytest.raises(TypeError, match=r"Translator.load\(\) takes the model as a path"):
        Translator.load(123)
    with pytest.raises(TypeError, match=r"Translator.load\(\) takes the model as a path \(str or os.PathLike\) or None, not bytes"):
        Translator.load(bytes(run))
    with pytest.raises(TypeError, match=r"Translator\(\) takes a model in memory; to load .* use Translator.load"):
        Translator(PurePosixPath(run), translator.tokenizer)
    with pytest.raises(TypeError, match="device must be a string"):
        Translator.load(run, device=0)
    with pytest.raises(TypeError, match="sources is a str"):  # each character would have been a sentence
        translator.score("abc", "xyz")
    with pytest.raises(TypeError, match="references is a NoneType"):
        translator.score(["abc"], None)
    with pytest.raises(TypeError, match=r"references item 0 \(counted from 0\) is int"):
        translator.score(["abc"], [3])
    with pytest.raises(TypeError, match="not a NoneType"):
        next(translator.translate_stream(None))
    with pytest.raises(TfmError, match="greedy='false' must be True or False"):  # 'false' is true
        translator.translate("Bonjour.", greedy="false")
    with pytest.raises(TfmError, match="beam=3 has no effect with greedy=True"):  # as the CLI's --greedy --beam 3
        translator.translate("Bonjour.", greedy=True, beam=3)
    import numpy

    for call in (translator.translate, lambda lines: list(translator.translate_stream(lines))):  # numpy's own message
        with pytest.raises(TypeError, match=r"a 0-d ndarray holds one value \(pass str\(value\), or value.item\(\)\)"):
            call(numpy.array("Bonjour."))
    assert translator.translate(numpy.array(["Bonjour.", "Salut."])) == translator.translate(["Bonjour.", "Salut."])


def test_score_checks_every_source_before_translating(translator: Translator, monkeypatch: pytest.MonkeyPatch) -> None:
    """score() translates a chunk at a time: a bad source past the first chunk (two lines in one, at source 2,051)
    came after 2,000 translations; every source is checked first, as one call did."""
    import tfm_cli.translator as module

    monkeypatch.setattr(module, "SCORE_CHUNK_LINES", 2)
    done: list[int] = []
    for bad, said in (("Bonjour\nSalut.", "input line 5"), ("Bon\udcffjour.", "input line 5")):
        sources = ["Oui.", "Non.", "Merci.", "Salut.", bad]
        with pytest.raises(TfmError, match=said):
            translator.score(sources, ["Yes."] * 5, progress=done.append)
    assert done == []  # nothing was translated
    report = translator.score(["Oui.", "Non.", "Merci."], ["Yes.", "No.", "Thanks."], progress=done.append)
    assert sum(done) == 3 and len(report["translations"]) == 3  # chunks of 2: every source once, in order


def test_api_takes_any_path_like_object(run: Path) -> None:
    """Any os.PathLike names a model, as it does for open() and pathlib: a PurePosixPath (or an os.DirEntry from
    os.scandir) was "Translator.load() takes a path (str or Path)"."""
    reference = Translator.load(run, device="cpu", precision="fp32")
    entry = next(e for e in os.scandir(run.parent) if e.name == run.name)
    for given in (PurePosixPath(run), entry):
        loaded = Translator.load(given, device="cpu", precision="fp32")
        assert loaded.path == reference.path
        assert loaded.translate("Bonjour.").text == reference.translate("Bonjour.").text


def test_api_refuses_an_empty_path_and_says_which_argument(run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`train(recipe, "")` (an unset variable) wrote a whole run into the current directory, and `Translator.load("")`
    loaded whatever model was there; the CLI refuses both. `train(run_dir=5)` and `train(device=0)` failed deep in
    pathlib and as "'int' object has no attribute 'startswith'"."""
    from tfm_cli.tokenizer import Tokenizer
    from tfm_cli.training import train

    work = tmp_path / "work"
    shutil.copytree(run, work)  # a model in the current directory, to be loaded by mistake
    monkeypatch.chdir(work)
    before = sorted(p.name for p in work.iterdir())
    with pytest.raises(TfmError, match=r"Translator.load\(\): the model as a path is empty \(an unset variable\?\)"):
        Translator.load("", device="cpu")
    with pytest.raises(TfmError, match=r"train\(\): run_dir as a path is empty"):
        train(run / "recipe.yaml", "", device="cpu")
    with pytest.raises(TfmError, match=r"Tokenizer.load\(\): the tokenizer.json as a path is empty"):
        Tokenizer.load("")
    with pytest.raises(TypeError, match=r"train\(\) takes run_dir as a path \(str or os.PathLike\) or None, not int"):
        train(run / "recipe.yaml", 5, device="cpu")
    with pytest.raises(TypeError, match=r"train\(device=...\) takes a str .* or a torch.device, not int"):
        train(run / "recipe.yaml", tmp_path / "out", device=0)
    with pytest.raises(TypeError, match=r"Tokenizer.load\(\) takes the path of a tokenizer.json .*, not None"):
        Tokenizer.load(None)
    from tfm_cli.export import run_export

    for call in (lambda: Translator.load(runs_root=5), lambda: run_export("release", None, tmp_path / "x", runs_root=5)):
        with pytest.raises(TypeError, match="runs_root must be a non-empty path"):  # pathlib's own TypeError
            call()
    assert sorted(p.name for p in work.iterdir()) == before and not (tmp_path / "out").exists()


def test_api_text_with_a_lone_surrogate_names_the_line(translator: Translator) -> None:
    """Bytes read with errors='surrogateescape' failed deep inside the tokenizer with a TypeError."""
    with pytest.raises(TfmError, match=r"input line 2 is not valid text: '\\udcff' at character 2"):
        translator.translate(["Bonjour.", "a\udcff"])
    assert translator.translate(["Bonjour.", "Merci."])  # the translator still works


def test_api_text_with_a_nul_or_several_lines_is_refused_as_on_the_command_line(translator: Translator) -> None:
    """`translate("Mer\\x00ci")` translated binary data (the CLI refuses a NUL on stdin), and
    `translate("Merci.\\nSalut.")` returned one translation of two lines glued together (the CLI refuses such an
    argument): each names the input line."""
    with pytest.raises(TfmError, match=r"input line 1 holds a NUL character \(at character 4\): binary data"):
        translator.translate("Mer\x00ci")
    for text in ("Merci.\nSalut.", "Merci.\r\nSalut.", "Merci.\rSalut."):
        with pytest.raises(TfmError, match=r"input line 2 holds several lines") as caught:
            translator.translate(["Bonjour.", text])
        assert "translate(text.splitlines())" in caught.value.hint
    with pytest.raises(TfmError, match=r"input line 3 holds several lines"):
        list(translator.translate_stream(["Bonjour.\n", "Oui.\n", "Merci.\rSalut.\n"]))
    # one line with blank ones around it, a line end, U+2028 (stdin keeps it inside its line): a sentence each
    assert [t.source for t in translator.translate(["\nBonjour.\n", "Merci.\r\n", "Je suis\u2028étudiant."])] == [
        "\nBonjour.\n", "Merci.\r\n", "Je suis\u2028étudiant."
    ]
    assert [str(t) for t in translator.translate_stream(["Bonjour.\r\n", "Merci.\n"])] == [
        str(translator.translate("Bonjour.")), str(translator.translate("Merci."))
    ]


def test_api_settings_and_arguments_the_cli_would_refuse(translator: Translator, tmp_path: Path) -> None:
    """Found by a review of the Python API: DecodeSettings(greedy=True, beam=3) decoded greedily with the beam
    ignored (translate(greedy=True, beam=3) refused it); numpy numbers in DecodeSettings stayed numpy's (not JSON);
    attention_report took a target of two lines as one sentence (inspect-attn refuses it); train(events=3) was an
    AttributeError."""
    import numpy

    from tfm_cli import DecodeSettings, load_recipe, train
    from tfm_cli.attention import attention_report

    with pytest.raises(TfmError, match=r"decode setting beam=3 has no effect with greedy=True"):
        DecodeSettings(greedy=True, beam=3)
    assert DecodeSettings(beam=5).updated(greedy=True).beam == 4  # a greedy search's beam is no setting of it
    assert DecodeSettings(greedy=True).updated(greedy=False, beam=6).beam == 6
    # a length penalty with greedy search was taken without a word (the CLI refuses --greedy --alpha)
    with pytest.raises(TfmError, match=r"decode setting alpha=0.9 has no effect with greedy=True") as given:
        DecodeSettings().updated(greedy=True, alpha=0.9)
    assert "not both" in given.value.hint
    with pytest.raises(TfmError, match=r"alpha=0.9 has no effect with greedy=True") as earlier:
        DecodeSettings(greedy=True).updated(alpha=0.9)
    assert "greedy=False" in earlier.value.hint
    assert DecodeSettings(greedy=True).updated(greedy=False, alpha=0.9).alpha == 0.9
    with pytest.raises(TfmError, match=r"alpha='x' must be a number"):  # its type first
        DecodeSettings().updated(greedy=True, alpha="x")
    settings = DecodeSettings(beam=numpy.int64(3), alpha=numpy.float32(0.5), max_tokens=numpy.int32(900))
    assert json.loads(json.dumps(vars(settings))) == {**vars(DecodeSettings(beam=3, alpha=0.5, max_tokens=900))}
    assert type(settings.beam) is int and type(settings.alpha) is float and repr(settings).startswith("DecodeSettings(beam=3,")
    for target, said in (("I am\na student.", "the target holds several lines"), ("I am\x00", "the target holds a NUL"),
                         ("", "the target is empty")):
        with pytest.raises(TfmError, match=said) as caught:
            attention_report(translator, "Je suis étudiant.", target=target)
        assert "--target" not in str(caught.value)
    recipe = load_recipe(Path(__file__).parents[1] / "recipes" / "tiny.yaml")
    for events in (3, "log", object()):
        with pytest.raises(TypeError, match=r"train\(events=...\) takes a TrainEvents .* it has no message, start, step, evaluation"):
            train(recipe, tmp_path / "never", device="cpu", events=events)
    assert not (tmp_path / "never").exists()


def test_arguments_are_utf8_under_an_ascii_locale_without_utf8_mode(run: Path) -> None:
    """Under `LC_ALL=C` with Python's UTF-8 mode off, Python decodes the arguments' bytes as ASCII: a sentence
    given as an argument ("Ça coûte cher.") was refused as "not valid UTF-8" (by translate, inspect-attn and
    tokenize --encode) while the same bytes on stdin were translated. Arguments are UTF-8, as every input is."""
    env = {**tfm_env(), "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    env.pop("PYTHONIOENCODING", None)
    sentence = "Ça coûte cher."
    on_stdin = subprocess.run([str(TFM), "translate", "--model", str(run), "--device", "cpu", "--json"],
                              input=f"{sentence}\n".encode(), capture_output=True, env=env)
    assert on_stdin.returncode == 0, on_stdin.stderr.decode()
    given = subprocess.run([str(TFM).encode(), b"translate", b"--model", str(run).encode(), b"--device", b"cpu", b"--json",
                            sentence.encode()], capture_output=True, env=env)
    assert given.returncode == 0, given.stderr.decode()
    assert json.loads(given.stdout) == json.loads(on_stdin.stdout) and json.loads(given.stdout)["source"] == sentence
    for args in ([b"inspect-attn", b"--model", str(run).encode(), b"--device", b"cpu", b"--summary", sentence.encode()],
                 [b"tokenize", b"--tokenizer", str(run / "tokenizer.json").encode(), b"--encode", sentence.encode(), b"--json"]):
        proc = subprocess.run([str(TFM).encode(), *args], capture_output=True, env=env)
        assert proc.returncode == 0 and sentence in proc.stdout.decode() + proc.stderr.decode(), proc.stderr.decode()
    bad = subprocess.run([str(TFM).encode(), b"translate", b"--model", str(run).encode(), b"caf\xe9"], capture_output=True, env=env)
    assert bad.returncode == 1 and "is not valid UTF-8 (a bad byte at character 4)" in bad.stderr.decode()


def test_paths_whose_bytes_the_locale_cannot_read_are_written_as_they_are(root: Path, run: Path, tmp_path: Path) -> None:
    """Under `LC_ALL=C` with UTF-8 mode off, a non-ASCII path (`uni_é/`) reaches Python as lone surrogates: train,
    export and inspect-attn --html stopped with "surrogates not allowed" tracebacks at the first status line, the
    recipe, the model card or the page. A name in another encoding (`b\\xffad`) gave invalid UTF-8 in --json."""
    env = {**tfm_env(), "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    env.pop("PYTHONIOENCODING", None)
    folder = tmp_path / "uni_é"

    def tfm_bytes(*args: str | Path) -> subprocess.CompletedProcess:
        words = [os.fsencode(a) if isinstance(a, Path) else a.encode() for a in args]
        return subprocess.run([os.fsencode(TFM), *words], capture_output=True, env=env)

    shutil.copytree(run, folder / "run")
    for args in (("export", folder / "run", "--format", "release", "--out", folder / "exp_ç"),
                 ("inspect-attn", "--model", folder / "run", "--device", "cpu", "Ça", "--html", folder / "é.html")):
        proc = tfm_bytes(*args)
        assert proc.returncode == 0 and b"Traceback" not in proc.stderr, (args, proc.stderr.decode(errors="replace"))
        assert str(folder).encode() in proc.stderr + proc.stdout  # the path as it is, in UTF-8
    assert json.loads((folder / "exp_ç" / "tfm-export.json").read_text(encoding="utf-8"))["path"] == str(folder / "exp_ç")
    assert str(folder) in (folder / "é.html").read_text(encoding="utf-8")
    # TensorBoard takes no such name under this locale: said in one line, the way out with it
    proc = tfm_bytes("train", root / "recipe.yaml", "--out", folder / "new", "--device", "cpu")
    error_line(subprocess.CompletedProcess(proc.args, proc.returncode, "", proc.stderr.decode("utf-8")),
               f"the run directory {folder / 'new'} has a non-ASCII name, which this locale (LC_ALL=C) with Python's UTF-8 mode off")
    assert b"hint: run with PYTHONUTF8=1" in proc.stderr
    latin = Path(os.fsdecode(os.fsencode(tmp_path) + b"/b\xffad"))
    shutil.copytree(run, latin)
    proc = subprocess.run([str(TFM), "inspect-attn", "--model", str(latin), "--device", "cpu", "Je", "--json"], capture_output=True, env=tfm_env())
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert json.loads(proc.stdout.decode("utf-8"))["model"] == str(latin / FINAL)  # valid UTF-8: a \\udcff escape


def test_a_memory_error_is_one_line(run: Path, monkeypatch, capsys) -> None:
    """Under a memory limit (`ulimit -v`), Python's own allocations fail with MemoryError, e.g. importing torch.optim
    at the first step of a large model: it was a traceback."""
    import sys

    from tfm_cli.cli import app
    from tfm_cli.tokenizer import Tokenizer

    def refused(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(Tokenizer, "load", refused)
    monkeypatch.setattr(sys, "argv", ["tfm", "tokenize", "--tokenizer", str(run), "--encode", "Bonjour."])
    monkeypatch.delenv("TFM_DEBUG", raising=False)
    with pytest.raises(SystemExit) as ended:
        app.main()
    assert ended.value.code == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "Error: out of memory: the system refused this process more memory" and lines[1].startswith("hint: free memory")


def test_a_final_model_that_is_not_a_regular_file_is_said(run: Path, tmp_path: Path) -> None:
    """model.safetensors linked to /dev/null, or a dangling link: translate and export took best.safetensors instead
    without a word (export recorded it only in tfm-export.json)."""
    copy = Path(shutil.copytree(run, tmp_path / "run", symlinks=True))
    shutil.copy(copy / FINAL, copy / "best.safetensors")
    final = copy / FINAL
    for target, said in (("/dev/null", f"{final} is not a regular file"), (str(tmp_path / "gone"), f"{final} is a broken link (to {tmp_path / 'gone'})")):
        final.unlink()
        final.symlink_to(target)
        error_line(translate(copy, "Bonjour."), said)
        proc = tfm("export", str(copy), "--format", "release", "--out", str(tmp_path / "exp"), check=False)
        error_line(proc, said)
    assert not (tmp_path / "exp").exists()


def test_json_in_pieces_keeps_a_names_bytes_together(monkeypatch) -> None:
    """print_json writes in 64 KiB pieces: the two bytes of an `é` the locale could not read (two surrogates) fell on
    either side of a piece's end and were written as \\udcc3\\udca9 instead of é."""
    import io
    import sys

    from tfm_cli.cli import common

    name = "/tmp/\udcc3\udca9t\udcc3\udca9"  # /tmp/été read under LC_ALL=C
    for cut in range(-2, 10):  # the piece's end falls before, inside and after the name's surrogates
        data = {"a": "x" * (common.JSON_PIECE - len('{"a": "') - len('", "path": "/tmp/') - cut), "path": name}
        raw = io.BytesIO()
        stream = io.TextIOWrapper(raw, encoding="utf-8", errors=common.TEXT_ERRORS, write_through=True)
        monkeypatch.setattr(sys, "stdout", stream)
        common.print_json(data)
        stream.flush()
        got = ascii(json.loads(raw.getvalue().decode("utf-8"))["path"])  # (a report holding surrogates stops pytest-xdist)
        assert got == ascii("/tmp/été"), cut


def test_a_name_with_a_line_break_keeps_errors_on_one_line(run: Path, tmp_path: Path) -> None:
    """A folder called "a<newline>b" split `Error: ...` over two lines, the second looking like another message;
    the break is written out (\\n) now, in errors and status lines alike, and a recipe's problems stay a line each."""
    folder = tmp_path / "two\nlines"
    folder.mkdir()
    line = error_line(tfm("translate", "--model", str(folder), "Bonjour.", check=False), "two\\nlines", "holds no model")
    assert line.startswith("Error: ")
    recipe = write(folder / "recipe.yaml", "model:\n  d_model: -1\n  n_heads: 0\n")
    proc = tfm("train", str(recipe), "--dry-run", "--out", str(tmp_path / "out"), check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == f"Error: {tmp_path}/two\\nlines/recipe.yaml has 3 problems:", proc.stderr
    assert len(lines) == 4 and all(line.startswith("  ") for line in lines[1:]), proc.stderr


@pytest.mark.parametrize("name", ["two\nlines", "tab\there", "it's \x1b[31m red", "back\\slash\nand 'quotes'",
                                  "next\x85line", "caf\udce9 latin-1", "-dash \u00e9t\u00e9\n"])
def test_a_suggested_command_types_a_name_with_control_characters(name: str) -> None:
    """The commands messages suggest (`next: tfm translate --model ...`) quote a name holding a line break or
    another control character as $'...': one line on the screen, and the same name once bash reads it, byte for
    byte (U+0085 as its two UTF-8 bytes, a byte the locale could not decode as that byte: both came back wrong)."""
    word = shell_word(f"runs/{name}")
    assert word.isprintable()  # no raw control character, no lone surrogate
    typed = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, check=True)
    assert typed.stdout == os.fsencode(f"runs/{name}")
    assert shell_word("runs/plain name") == "'runs/plain name'"


def test_yaml_and_json_nested_deeper_than_python_reads_are_one_line(run: Path, tmp_path: Path) -> None:
    """`[[[[...` a thousand deep ended in a RecursionError traceback of some 3,000 lines: a recipe, an override, a
    bench baseline; a run's config.json so nested is warned about as any damaged one is (below)."""
    deep = "[" * 1000 + "]" * 1000
    recipe = write(tmp_path / "deep.yaml", f"name: x\ndescription: {deep}\n")
    error_line(tfm("train", str(recipe), "--dry-run", "--out", str(tmp_path / "r"), check=False),
               f"{recipe}: invalid YAML: nested too deeply to read")
    tiny = Path(__file__).parents[1] / "recipes" / "tiny.yaml"
    error_line(tfm("train", str(tiny), f"model.dropout={deep}", "--dry-run", "--out", str(tmp_path / "r"), check=False),
               "has a value nested too deeply to read")
    baseline = write(tmp_path / "baseline.json", "[" * 100_000)
    error_line(tfm("bench", "attention", "--baseline", str(baseline), "--lengths", "8", check=False),
               f"{baseline} is not a JSON file (JSON nested too deeply to read)", code=2)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "empty", "deep", "list"])
def test_a_run_config_json_that_is_not_a_model_config_is_warned_about_not_read_for_ever(run: Path, tmp_path: Path, kind: str) -> None:
    """The weights carry their own config; config.json beside them is what other tools read. A FIFO there blocked
    `translate` for good, a link to /dev/zero read until the memory ran out, and an empty or damaged one went
    unsaid while one that disagreed with the weights was warned about: each is warned about now, and translated."""
    copy = Path(shutil.copytree(run, tmp_path / "run"))
    config = copy / "config.json"
    config.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(config)
    elif kind == "dev-zero":
        config.symlink_to("/dev/zero")
    else:
        config.write_text({"empty": "", "deep": "[" * 100_000, "list": "[1, 2]"}[kind])
    proc = tfm("translate", "--model", str(copy), "Bonjour.", timeout=120)
    why = {"fifo": "is not a regular file", "dev-zero": "is not a regular file", "empty": "is not JSON (Expecting value",
           "deep": "is not JSON (JSON nested too deeply to read)", "list": "is not a JSON object"}[kind]
    assert f"warning: {config} {why}" in proc.stderr and proc.stdout.strip(), proc.stderr


def test_a_socket_given_as_a_file_is_called_a_socket(run: Path, tmp_path: Path) -> None:
    """A Unix socket as --score said "cannot read the file ([Errno 6] No such device or address: ...); is it a
    complete, uncompressed or gzip text file?": Python's errno, and advice about a file it is not."""
    import socket

    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        error_line(tfm("translate", "--model", str(run), "--score", str(path), check=False), f"--score {path} is a socket, not a file")
        error_line(tfm("tokenize", "--corpus", str(path), "--out", str(tmp_path / "t.json"), check=False),
                   f"--corpus {path} is a socket, not a file")


def test_a_recipe_of_two_files_joined_names_the_byte_order_mark_between_them(tmp_path: Path) -> None:
    """`cat a.yaml b.yaml` of two files saved with a byte-order mark: the second's first key was "\\ufeffname is not
    a recipe key; did you mean name?", the difference invisible."""
    recipe = write(tmp_path / "joined.yaml", "\ufeffname: a\n".encode() + "\ufeffdescription: b\n".encode())
    error_line(tfm("train", str(recipe), "--dry-run", "--out", str(tmp_path / "r"), check=False),
               f"{recipe}: description is written after an invisible byte-order mark (U+FEFF)")
