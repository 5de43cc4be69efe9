"""`tfm export`: the release format end to end, and what every format shares (staging, --force, failed checks).

The ONNX and Hugging Face formats have their own files (test_export_onnx.py, test_export_hf.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
from pathlib import Path, PurePosixPath

import pytest
from clitools import tfm
from safetensors import safe_open

from tfm_cli.errors import TfmError
from tfm_cli.export import ExportCheckError, run_export
from tfm_cli.export.common import Check, require
from tfm_cli.translator import Translator

SENTENCES = "Je suis étudiant.\nOù est la gare ?\nIl fait beau aujourd'hui.\n"


@pytest.fixture(scope="module")
def release(trained, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rel") / "release"
    proc = tfm("export", str(trained["dir"]), "--format", "release", "--out", str(out), "--verify-lines", "60")
    assert "60/60 identical" in proc.stdout, proc.stdout
    return out


def test_release_holds_weights_config_tokenizer_and_card(release: Path, trained) -> None:
    names = sorted(p.name for p in release.iterdir())
    assert names == ["README.md", "config.json", "model.safetensors", "recipe.yaml", "tfm-export.json", "tokenizer.json"]
    with safe_open(str(release / "model.safetensors"), framework="pt") as f:
        meta = f.metadata()
        keys = set(f.keys())
    assert meta["format"] == "tfm" and meta["tfm_version"] and json.loads(meta["config"])["d_model"] == 128
    tokenizer_sha = Translator.load(trained["dir"], device="cpu").tokenizer.sha256
    assert meta["tokenizer_sha256"] == tokenizer_sha
    assert not any("optim" in k or "state" in k for k in keys)  # weights only
    assert json.loads((release / "config.json").read_text())["n_heads"] == 4
    card = (release / "README.md").read_text(encoding="utf-8")
    summary = json.loads((trained["dir"] / "summary.json").read_text())
    assert f"dev BLEU {summary['dev']['bleu']:.2f}" in card and "nrefs:1|case:mixed" in card
    assert "parameters:" in card and "train.tsv" in card and "attribution" in card
    assert all(p.stat().st_mode & 0o044 == 0o044 for p in release.iterdir())  # readable by others, as with cp
    info = json.loads((release / "tfm-export.json").read_text())
    assert info["format"] == "release" and info["ok"] and info["path"] == str(release)


def test_a_summary_of_another_step_than_the_weights_gives_the_card_no_scores_of_it(trained, tmp_path: Path) -> None:
    """A resume replaces model.safetensors seconds before summary.json; killed between the two, the summary is
    the previous session's, and the card showed its scores over the newer weights. The card scores them anew."""
    copy = tmp_path / "run"
    shutil.copytree(trained["dir"], copy)
    summary = json.loads((copy / "summary.json").read_text())
    summary["steps"] -= 1
    summary["dev"]["bleu"] = 99.99
    (copy / "summary.json").write_text(json.dumps(summary))
    run_export("release", copy, tmp_path / "rel", verify_lines=5)
    card = (tmp_path / "rel" / "README.md").read_text(encoding="utf-8")
    assert "99.99" not in card and "dev BLEU " in card, card


def test_release_translates_like_the_run_from_the_cli(release: Path, trained) -> None:
    from_run = tfm("translate", "--model", str(trained["dir"]), "--precision", "fp32", stdin=SENTENCES).stdout
    from_release = tfm("translate", "--model", str(release), "--precision", "fp32", stdin=SENTENCES).stdout
    assert from_release == from_run and len(from_run.splitlines()) == 3
    attn = json.loads(tfm("inspect-attn", "Je suis étudiant.", "--model", str(release), "--json").stdout)
    assert attn["src_tokens"] and attn["n_heads"] == 4


def test_release_refuses_a_tokenizer_that_is_not_its_own(release: Path, trained, tmp_path: Path) -> None:
    from tfm_cli.tokenizer import train_tokenizer

    copy = tmp_path / "rel"
    shutil.copytree(release, copy)
    other = train_tokenizer(trained["sources"] * 3, vocab_size=1000)
    other.save(copy / "tokenizer.json")
    proc = tfm("translate", "--model", str(copy), "Je suis étudiant.", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "does not match" in proc.stderr and len(proc.stderr.strip().splitlines()) <= 2


def test_half_precision_release_is_smaller_and_reports_what_changed(trained, tmp_path: Path) -> None:
    # a space and a quote: the note's command quotes it, to be pasted as it is (with a quote it named the staging
    # folder, removed by then, as the quoting of the two names differed)
    out = tmp_path / "my exports" / "fp16 o'clock"
    result = run_export("release", trained["dir"], out, dtype="fp16", verify_lines=40)
    assert f"translate with: tfm translate --model {shlex.quote(str(out))}" in result.notes, result.notes
    assert json.loads((out / "tfm-export.json").read_text(encoding="utf-8"))["notes"] == result.notes
    full = (trained["dir"] / "model.safetensors").stat().st_size
    assert (out / "model.safetensors").stat().st_size < 0.6 * full
    logits, translations = result.checks
    assert 0 < float(logits.value) < 1.0 and "fp16" in logits.limit  # rounded weights: small, non-zero
    assert translations.value.split("/")[1].startswith("40 identical")
    t = Translator.load(out, device="cpu", precision="fp32")
    assert isinstance(t.translate("Je suis étudiant."), str)


def test_a_non_empty_destination_is_kept_without_force_and_only_an_earlier_export_is_replaced(trained, tmp_path: Path) -> None:
    """--force replaced whatever --out held: a folder of notes, or one holding a training run one level down
    (`--out runs --force` would have deleted every run). It replaces an earlier export, and nothing else."""
    out = tmp_path / "taken"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    proc = tfm("export", str(trained["dir"]), "--format", "release", "--out", str(out), check=False)
    assert proc.returncode == 1 and "is not empty" in proc.stderr and "--force" in proc.stderr
    proc = tfm("export", str(trained["dir"]), "--format", "release", "--out", str(out), "--force", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "is not an earlier export" in proc.stderr and "'precious.txt'" in proc.stderr
    assert (out / "precious.txt").read_text() == "keep me" and len(list(out.iterdir())) == 1
    (out / "precious.txt").unlink()
    tfm("export", str(trained["dir"]), "--format", "release", "--out", str(out), "--verify-lines", "5")
    # an earlier export: replaced with --force, not without
    proc = tfm("export", str(trained["dir"]), "--format", "release", "--out", str(out), "--verify-lines", "5", check=False)
    assert proc.returncode == 1 and "is not empty" in proc.stderr
    (out / "model.safetensors").write_bytes(b"stale")
    tfm("export", str(trained["dir"]), "--format", "release", "--out", str(out), "--force", "--verify-lines", "5")
    assert (out / "model.safetensors").stat().st_size > 1000
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging leftovers
    # an export that also holds a training run, or a note, one level down: refused, named, kept
    shutil.copytree(trained["dir"], out / "my-run", ignore=shutil.ignore_patterns("*.safetensors", "*.pt"))
    (out / "notes.txt").write_text("mine")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    proc = tfm("export", str(trained["dir"]), "--format", "release", "--out", str(out), "--force", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "holds 'my-run' and 'notes.txt' besides the earlier export" in proc.stderr
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    (out / "tfm-export.json").write_text("{not json")  # a record tfm cannot read: not known to be an export
    proc = tfm("export", str(trained["dir"]), "--format", "release", "--out", str(out), "--force", check=False)
    assert proc.returncode == 1 and "is not an earlier export" in proc.stderr and "and 6 more" in proc.stderr


def test_an_export_never_takes_the_folder_of_a_training_that_is_starting(trained, tmp_path: Path, monkeypatch) -> None:
    """`tfm train --out X` holds X's lock from its first moment, while X is still empty (its tokenizer being
    built): `tfm export --out X` took the empty folder, the run then wrote its model beside the export's card
    (which described another model), its lock left on the folder put aside. The same when the training made X
    while the export ran."""
    from tfm_cli.export import common
    from tfm_cli.files import DirectoryLock

    out = tmp_path / "starting"
    out.mkdir()
    held = DirectoryLock(out)  # as `tfm train` holds it
    assert held.acquire()
    proc = tfm("export", str(trained["dir"]), "--format", "release", "--out", str(out), check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{out} is in use by another process right now (a training starting in it, or an export)" in proc.stderr
    assert list(out.iterdir()) == [] and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    held.release()

    later = tmp_path / "made-meanwhile"
    real = common._install_new

    def train_starts_first(tmp: Path, where: Path, lock) -> None:
        where.mkdir()
        assert held_later.acquire()
        real(tmp, where, lock)

    held_later = DirectoryLock(later)
    monkeypatch.setattr(common, "_install_new", train_starts_first)
    with pytest.raises(TfmError, match="since this export began; the export was not installed"):
        run_export("release", trained["dir"], later, verify_lines=3)
    assert list(later.iterdir()) == [] and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    held_later.release()
    monkeypatch.undo()

    forced = tmp_path / "forced"  # --force took the folder made meanwhile, and deleted it with the training's lock
    held_forced = DirectoryLock(forced)

    def training_starts(what: str, n: int):  # while the export checks itself: a `tfm train --out` begins
        if not forced.exists():
            forced.mkdir()
            assert held_forced.acquire()
        return contextlib.nullcontext(None)

    with pytest.raises(TfmError, match="since this export began; the export was not installed"):
        run_export("release", trained["dir"], forced, force=True, verify_lines=3, progress=training_starts)
    assert forced.is_dir() and list(forced.iterdir()) == []
    held_forced.release()


def test_run_export_refuses_arguments_of_the_wrong_type_before_touching_out(trained, tmp_path: Path) -> None:
    """force="no" is true: it replaced a non-empty export; a model or out of 123 failed inside pathlib."""
    out = tmp_path / "taken"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    for force in ("no", 0, None):
        with pytest.raises(TypeError, match=r"force=True or False"):
            run_export("release", trained["dir"], out, force=force, verify_lines=2)
    assert (out / "precious.txt").read_text() == "keep me" and len(list(out.iterdir())) == 1
    with pytest.raises(TypeError, match=r"takes model as a path .* not int"):
        run_export("release", 123, tmp_path / "a")
    with pytest.raises(TypeError, match=r"takes out as a path .* not bytes"):
        run_export("release", trained["dir"], b"exports/x")
    exported = run_export("release", PurePosixPath(trained["dir"]), PurePosixPath(tmp_path / "pathlike"), verify_lines=2)
    assert exported.path == tmp_path / "pathlike" and (tmp_path / "pathlike" / "model.safetensors").is_file()
    with pytest.raises(TfmError, match=r"unknown export format \['release'\]"):
        run_export(["release"], trained["dir"], tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_an_out_that_is_a_broken_link_is_named_before_the_export(trained, tmp_path: Path) -> None:
    """The export was made and checked, then its rename failed: "out/.x.123.abc.partial: Not a directory"."""
    link = tmp_path / "exports" / "tiny"
    link.parent.mkdir()
    link.symlink_to(tmp_path / "gone")
    proc = tfm("export", str(trained["dir"]), "--format", "release", "--out", str(link), "--verify-lines", "2", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{link} is a symbolic link to {tmp_path / 'gone'}, which does not exist" in proc.stderr
    assert "checks against" not in proc.stdout  # refused before the export, not after it
    assert link.is_symlink() and sorted(p.name for p in link.parent.iterdir()) == ["tiny"]


def test_an_out_that_links_to_a_folder_puts_the_export_where_it_points(trained, tmp_path: Path) -> None:
    """A link to an empty folder failed as "filled by another process (another tfm export?)"; then it was replaced
    by a folder beside it: the link lost, the export on the link's disk, not the target's, and with --force the
    folder the user asked to replace left as it was. The export goes into the link's target; the link stays."""
    (tmp_path / "disk" / "empty").mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "disk" / "empty")
    proc = tfm("export", str(trained["dir"]), "--format", "release", "--out", str(link), "--verify-lines", "2", check=False)
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and (tmp_path / "disk" / "empty" / "model.safetensors").is_file()
    old = tmp_path / "disk" / "old"
    shutil.copytree(tmp_path / "disk" / "empty", old)  # an earlier export
    (old / "model.safetensors").write_bytes(b"stale")
    link.unlink()
    link.symlink_to(old)
    proc = tfm("export", str(trained["dir"]), "--format", "release", "--out", str(link), "--verify-lines", "2", check=False)
    assert proc.returncode == 1 and "is not empty" in proc.stderr and (old / "model.safetensors").read_bytes() == b"stale"
    proc = tfm("export", str(trained["dir"]), "--format", "release", "--out", str(link), "--force", "--verify-lines", "2", check=False)
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and (old / "model.safetensors").stat().st_size > 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["disk", "link"]  # nothing written beside the link


def test_the_run_itself_is_never_the_destination(trained) -> None:
    proc = tfm("export", str(trained["dir"]), "--format", "release", "--out", str(trained["dir"]), "--force", check=False)
    assert proc.returncode == 1 and "holds the model being exported" in proc.stderr
    assert (trained["dir"] / "model.safetensors").is_file()


def test_another_training_run_is_never_replaced_even_with_force(trained, tmp_path: Path) -> None:
    """`--out` naming another run (a typo, a name reused) with --force deleted its checkpoints and trainer states."""
    other = tmp_path / "other-run"
    shutil.copytree(trained["dir"], other)
    before = sorted(p.relative_to(other) for p in other.rglob("*"))
    for force in ([], ["--force"]):
        proc = tfm("export", str(trained["dir"]), "--format", "release", "--out", str(other), *force, check=False)
        assert proc.returncode == 1 and "is a training run" in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) <= 3  # the progress line, the error, the hint
    assert sorted(p.relative_to(other) for p in other.rglob("*")) == before

def test_a_failed_check_installs_nothing(trained, tmp_path: Path, monkeypatch) -> None:
    import tfm_cli.export.release as release_module

    real = release_module.export_release

    def broken(loaded, out, sources, **options):
        result = real(loaded, out, sources, **options)
        result.checks.append(Check("translations", "3/5 identical", False, "all identical"))
        return result

    monkeypatch.setattr(release_module, "export_release", broken)
    out = tmp_path / "old"
    out.mkdir()
    (out / "previous.txt").write_text("an older export")
    (out / "tfm-export.json").write_text(json.dumps({"format": "release", "files": ["previous.txt"]}))
    with pytest.raises(ExportCheckError) as caught:
        run_export("release", trained["dir"], out, force=True, verify_lines=5)
    assert "nothing was written" in str(caught.value) and len(caught.value.result.checks) == 3
    assert sorted(p.name for p in out.iterdir()) == ["previous.txt", "tfm-export.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["old"]


def test_an_out_under_a_file_is_named_and_a_failed_export_leaves_no_new_folders(trained, tmp_path: Path, monkeypatch) -> None:
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    proc = tfm("export", str(trained["dir"]), "--format", "release", "--out", str(a_file / "release"), check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{a_file} is a file, not a folder" in proc.stderr and a_file.read_text() == "mine"

    import tfm_cli.export.release as release_module

    def broken(loaded, out, sources, **options):
        raise TfmError("the export broke half-way")

    monkeypatch.setattr(release_module, "export_release", broken)
    with pytest.raises(TfmError, match="half-way"):
        run_export("release", trained["dir"], tmp_path / "new" / "deeper" / "release", verify_lines=5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # neither new/ nor new/deeper/ is left


def test_sigterm_removes_the_partial_export_and_stale_ones_are_swept(trained, tmp_path: Path) -> None:
    """SIGTERM (kill, a scheduler) left a hidden .NAME.XXXX.partial folder of the size of the model, never removed;
    one left by SIGKILL is now removed by the next export to the same --out, once its process is gone."""
    import signal
    import subprocess
    import sys

    from clitools import start_tfm, wait_until

    out = tmp_path / "release"
    proc = start_tfm("export", str(trained["dir"]), "--format", "release", "--out", str(out), "--verify-lines", "0")
    wait_until(proc, lambda: any(tmp_path.glob(".release.*.partial/model.safetensors")), "the export never staged", every=0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err.decode()
    assert b"interrupted; " in err and b"Traceback" not in err
    assert list(tmp_path.iterdir()) == []
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".release.{int(gone.stdout)}.abcd.partial"  # as a SIGKILLed export leaves it
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    run_export("release", trained["dir"], out, verify_lines=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["release"]


def test_an_export_killed_between_the_renames_of_force_gets_its_previous_export_back(trained, tmp_path: Path) -> None:
    """`--force` moves the previous export aside (.NAME.PID.XXXX.old), then renames the new one into place: a SIGKILL
    between the two left no --out at all and the previous export in the hidden folder for good. The next export to
    that --out puts it back first (and a .old folder whose export is in place is removed)."""
    import subprocess
    import sys

    out = tmp_path / "release"
    run_export("release", trained["dir"], out, verify_lines=0)
    made = json.loads((out / "tfm-export.json").read_text())
    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout)
    aside = tmp_path / f".release.{gone}.wxyz.old"
    aside.mkdir()
    out.rename(aside / "release")  # as the kill left it: the previous export aside, no --out
    leftover = tmp_path / f".release.{gone}.abcd.old"  # and one whose replacement was already in place
    (leftover / "release").mkdir(parents=True)
    with pytest.raises(TfmError, match="is not empty"):  # without --force: the export put back is not replaced
        run_export("release", trained["dir"], out, verify_lines=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["release"]
    assert json.loads((out / "tfm-export.json").read_text()) == made
    # another --out's leftovers are not this one's: `.release.*` matched `.release.20241129.<pid>.XXXX.partial` of
    # `--out release.20241129`, read 20241129 as a process that is gone, and deleted it
    sibling = tmp_path / f".release.20241129.{os.getpid()}.abcd.partial"
    sibling.mkdir()
    run_export("release", trained["dir"], out, force=True, verify_lines=0)
    assert sibling.is_dir()
    # through a link: the export moved aside sits beside the folder the link points to
    link = tmp_path / "link"
    link.symlink_to(out)
    aside = tmp_path / f".release.{gone}.wxyz.old"
    aside.mkdir()
    out.rename(aside / "release")
    with pytest.raises(TfmError, match="is not empty"):
        run_export("release", trained["dir"], link, verify_lines=0)
    assert link.resolve() == out and (out / "tfm-export.json").is_file()


def test_a_full_out_is_refused_before_the_model_is_loaded(trained, tmp_path: Path, monkeypatch) -> None:
    """A folder that is not empty, or another run, is said at once: it was said only after the model's load (seconds
    for a base model), and the same words come after it for an --out that fills meanwhile."""
    import tfm_cli.checkpoint

    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("mine")
    other = tmp_path / "other-run"
    (other / "checkpoints").mkdir(parents=True)

    def loaded_anyway(*args, **kwargs):
        raise AssertionError("the model was loaded before --out was looked at")

    monkeypatch.setattr(tfm_cli.checkpoint, "load_model", loaded_anyway)
    with pytest.raises(TfmError, match="full is not empty"):
        run_export("onnx", trained["dir"], full)
    with pytest.raises(TfmError, match="other-run is a training run"):
        run_export("release", trained["dir"], other, force=True)
    with pytest.raises(TfmError, match="exists and is not a directory"):
        run_export("release", trained["dir"], full / "notes.txt")
    assert (full / "notes.txt").read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["full", "other-run"]
    # the run's own folders are named as the run's, as before (the early check said "not empty: add --force")
    monkeypatch.undo()
    before = sorted(p.name for p in (trained["dir"] / "checkpoints").iterdir())
    for force in (False, True):
        with pytest.raises(TfmError, match="is part of the run being exported"):
            run_export("release", trained["dir"], trained["dir"] / "checkpoints", force=force)
    assert sorted(p.name for p in (trained["dir"] / "checkpoints").iterdir()) == before


def test_format_options_fp16_range_and_a_broken_recipe_are_named(trained, tmp_path: Path) -> None:
    with pytest.raises(TfmError, match=r"dtype is not an option of the onnx export \(its options: opset\)"):
        run_export("onnx", trained["dir"], tmp_path / "onnx", dtype="fp16")
    # verify_lines=-1 was "all" (it reads as "none" as easily); opset="17" said "opset 17 is not supported"
    for bad in (-1, 2.5, "10", True):
        with pytest.raises(TfmError, match=re.escape(f"verify_lines must be an integer >= 0 (0: the whole dev set), not {bad!r}")):
            run_export("release", trained["dir"], tmp_path / "r", verify_lines=bad)
    with pytest.raises(TfmError, match="opset must be an integer, not '17'"):
        run_export("onnx", trained["dir"], tmp_path / "onnx", opset="17")
    assert not (tmp_path / "r").exists() and not (tmp_path / "onnx").exists()
    run = Path(shutil.copytree(trained["dir"], tmp_path / "run"))
    from safetensors.torch import load_file, save_file

    from tfm_cli.checkpoint import WEIGHTS_CRC, read_metadata, weights_crc32

    state, metadata = load_file(str(run / "model.safetensors")), read_metadata(run / "model.safetensors")
    name = next(k for k in state if k.endswith("weight"))
    state[name][0, 0] = 1e6  # a finite weight that fp16 cannot hold (its CRC-32 as tfm writes it: not damaged)
    save_file(state, str(run / "model.safetensors"), metadata={**metadata, WEIGHTS_CRC: weights_crc32(state)})
    with pytest.raises(TfmError, match=f"{re.escape(name)} holds values up to 1e\\+06, beyond fp16's range") as caught:
        run_export("release", run, tmp_path / "fp16", dtype="fp16")
    assert "--dtype bf16" in caught.value.hint
    assert (run_export("release", run, tmp_path / "bf16", dtype="bf16", verify_lines=3)).ok
    (run / "recipe.yaml").write_text("data: {train: [\n")
    with pytest.raises(TfmError, match=f"^{re.escape(str(run / 'recipe.yaml'))} has 1 problem:\n  invalid YAML"):  # not the staging copy
        run_export("release", run, tmp_path / "broken")


def test_bad_options_and_missing_extras_get_one_line(trained, tmp_path: Path) -> None:
    proc = tfm("export", str(trained["dir"]), "--format", "tflite", check=False)
    assert proc.returncode == 2 and "release, onnx, huggingface" in proc.stderr
    proc = tfm("export", str(trained["dir"]), "--format", "onnx", "--dtype", "fp16", check=False)
    assert proc.returncode == 2 and "--dtype is for --format release" in proc.stderr
    proc = tfm("export", str(tmp_path / "nowhere"), "--format", "release", check=False)
    assert proc.returncode == 1 and "does not exist" in proc.stderr and "Traceback" not in proc.stderr
    with pytest.raises(TfmError) as caught:
        require("tfm_no_such_package", "onnx", "the ONNX export")
    # the checkout's extra (PyPI's "tfm" is another project) or the extra's packages by name
    assert caught.value.hint == 'pip install -e ".[onnx]" in the tfm checkout (or pip install onnx onnxruntime)'
    assert "tfm_no_such_package" in str(caught.value)


def test_an_export_without_run_names_the_run_it_takes(trained, tmp_path: Path) -> None:
    """Without RUN the newest run is exported, and only tfm-export.json said which: the start names it, as
    translate and tokenize name the run they take."""
    shutil.copytree(trained["dir"], tmp_path / "runs" / "mine")
    proc = tfm("export", "--format", "release", "--out", str(tmp_path / "r"), "--verify-lines", "3", cwd=tmp_path)
    expected = str(Path("runs") / "mine")
    assert proc.stderr.startswith(f"exporting {expected} (the most recent run; choose another with RUN) as release"), proc.stderr
    assert json.loads((tmp_path / "r" / "tfm-export.json").read_text())["source"].startswith(expected)


def test_json_output_lists_files_and_checks(trained, tmp_path: Path) -> None:
    proc = tfm("export", str(trained["dir"]), "--format", "release", "--out", str(tmp_path / "j"), "--json", "--verify-lines", "5")
    data = json.loads(proc.stdout)
    assert data["ok"] and "model.safetensors" in data["files"] and len(data["checks"]) == 2
    assert all(c["ok"] and c["value"] for c in data["checks"])


def test_a_release_whose_bleu_tokenizer_is_missing_here_is_written_unscored(trained, tmp_path: Path) -> None:
    """A run scored with ja-mecab, released where MeCab is not installed: the export failed on the model card's
    dev scores; the release itself needs no MeCab."""
    import yaml

    run = Path(shutil.copytree(trained["dir"], tmp_path / "run"))
    recipe = yaml.safe_load((run / "recipe.yaml").read_text(encoding="utf-8"))
    recipe["train"]["bleu_tokenize"] = "ja-mecab"
    (run / "recipe.yaml").write_text(yaml.safe_dump(recipe), encoding="utf-8")
    stubs = tmp_path / "stubs"  # `import MeCab` fails, as on a machine without sacrebleu[ja]
    stubs.mkdir()
    (stubs / "MeCab.py").write_text("raise ImportError('No module named MeCab')\n", encoding="utf-8")
    out = tmp_path / "release"
    proc = tfm("export", str(run), "--format", "release", "--dtype", "bf16", "--out", str(out), "--verify-lines", "5",
               env_extra={"PYTHONPATH": str(stubs)})
    assert "the model card has no dev scores: sacrebleu's 'ja-mecab' BLEU tokenizer could not be set up" in proc.stdout + proc.stderr
    # the whole dev set is translated for the card whatever --verify-lines says: said before it starts
    assert "for the model card's dev BLEU and chrF, the bf16 weights translate all of the run's dev set" in proc.stderr
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "- not scored on the run's dev set by tfm export: sacrebleu's 'ja-mecab'" in card and "dev BLEU" not in card
    assert Translator.load(out).translate("Je suis étudiant.").text  # the release works


def test_release_translating_shows_its_progress(tmp_path: Path) -> None:
    """An fp16/bf16 release translates the whole dev set for its model card: with a barely trained model (every
    sentence to the maximum length) minutes without a line, which looked hung. Each translating the release does
    now says how many sentences and its progress (plain lines here, a bar at a terminal), through the API too."""
    run = _random_run(tmp_path / "run")  # random weights: they run every sentence to the maximum length
    dev = tmp_path / "dev.tsv"
    lines = [f"{line} {n}" for n in range(4) for line in SENTENCES.splitlines()]  # 12 pairs
    dev.write_text("".join(f"{line}\t{line.lower()}\n" for line in lines), encoding="utf-8")
    (run / "recipe.yaml").write_text(f"name: run\ndata:\n  dev: {dev}\n", encoding="utf-8")
    proc = tfm("export", str(run), "--format", "release", "--dtype", "bf16", "--out", str(tmp_path / "out"),
               "--verify-lines", "3")
    err = proc.stderr
    assert "check: the source weights translate dev sentences: 3 sentences to decode" in err
    assert "check: the bf16 release translates dev sentences: 3 sentences decoded in " in err
    assert "model card: the bf16 release scores the dev set: 12 sentences to decode" in err
    assert "model card: the bf16 release scores the dev set: 12 sentences decoded in " in err
    said: list[tuple[str, int, int]] = []

    @contextlib.contextmanager
    def progress(what: str, sentences: int):
        done = [0]
        yield lambda n: done.__setitem__(0, done[0] + n)
        said.append((what, sentences, done[0]))

    run_export("release", run, tmp_path / "api", dtype="fp16", verify_lines=2, progress=progress)
    assert said == [
        ("check: the source weights translate dev sentences", 2, 2), ("check: the fp16 release translates dev sentences", 2, 2),
        ("model card: the fp16 release scores the dev set", 12, 12),
    ]
    # a plain callback (print), and one returning the per-batch function: it broke the export at its first
    # translating ("'NoneType' object does not support the context manager protocol")
    plain: list[tuple[str, int]] = []
    counted = [0]
    run_export("release", run, tmp_path / "plain", dtype="fp16", verify_lines=2, progress=lambda what, n: plain.append((what, n)))
    run_export("release", run, tmp_path / "counted", dtype="fp16", verify_lines=2,
               progress=lambda what, n: lambda done: counted.__setitem__(0, counted[0] + done))
    assert plain == [(what, n) for what, n, _ in said] and counted[0] == 16
    with pytest.raises(TypeError, match="progress"):
        run_export("release", run, tmp_path / "bad", progress=5)


def _random_run(root: Path) -> Path:
    """A run of random weights (d_model 16, 1+1 layers) with a tokenizer of 300 pieces: quick to export."""
    import torch

    from tfm_cli.checkpoint import save_weights, weights_state
    from tfm_cli.model import ModelConfig, Transformer
    from tfm_cli.runs import FINAL
    from tfm_cli.tokenizer import train_tokenizer

    texts = [s for line in SENTENCES.splitlines() for s in (line, line.lower(), line.upper())] * 20
    tokenizer = train_tokenizer(texts, vocab_size=300)
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=tokenizer.vocab_size, d_model=16, d_ff=32, n_heads=2, n_enc_layers=1,
                      n_dec_layers=1, max_positions=32, dropout=0.0)
    root.mkdir(parents=True)
    tokenizer.save(root / "tokenizer.json")
    save_weights(root / FINAL, weights_state(Transformer(cfg)), cfg, tokenizer.sha256, 1)
    return root


def test_an_export_finished_alongside_is_not_replaced_without_force(tmp_path: Path, monkeypatch) -> None:
    """Two exports to the same missing --out at once, neither with --force: both passed the "not empty" test at
    the start, both said "wrote OUT/", and the one that finished last silently replaced the other's export."""
    import tfm_cli.export.release as release_module

    first, second = _random_run(tmp_path / "first"), _random_run(tmp_path / "second")
    out = tmp_path / "exports" / "shared"
    real, alongside = release_module.export_release, [second]

    def with_another_alongside(loaded, staged, sources, **options):
        result = real(loaded, staged, sources, **options)
        while alongside:  # while the first is staged, the second export runs and installs itself
            run_export("release", alongside.pop(), out, verify_lines=2)
        return result

    monkeypatch.setattr(release_module, "export_release", with_another_alongside)
    with pytest.raises(TfmError) as caught:
        run_export("release", first, out, verify_lines=2)
    assert "filled by another process" in str(caught.value) and "--force" in caught.value.hint
    info = json.loads((out / "tfm-export.json").read_text(encoding="utf-8"))
    assert Path(info["source"]).parent == second  # the export installed first is kept
    assert sorted(p.name for p in out.parent.iterdir()) == ["shared"]  # no staging leftovers
    run_export("release", first, out, force=True, verify_lines=2)  # --force still replaces it
    assert Path(json.loads((out / "tfm-export.json").read_text(encoding="utf-8"))["source"]).parent == first


def test_an_empty_mount_point_as_out_is_named_before_the_export(tmp_path: Path) -> None:
    """An empty volume (a docker -v mount) given as --out ran every check, then was blamed on "another process"
    that had "filled" it (it was still empty), with a hint to use --force, which failed with "Device or resource
    busy": the export is written beside `out` and renamed into place, which a mount point cannot take."""
    import subprocess

    run, volume = _random_run(tmp_path / "run"), tmp_path / "volume"
    volume.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(volume)], capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root (CAP_SYS_ADMIN), which this machine does not give")
    try:
        with pytest.raises(TfmError) as caught:
            run_export("release", run, volume, verify_lines=2)
        assert str(caught.value).startswith(f"{volume} is a mount point") and f"--out {volume / 'export'}" in caught.value.hint
        assert list(volume.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["run", "volume"]
        run_export("release", run, volume / "export", verify_lines=2)  # a folder inside it, as the hint says
        assert (volume / "export" / "tfm-export.json").is_file()
    finally:
        subprocess.run(["umount", str(volume)], check=True)


def test_an_empty_out_that_cannot_be_replaced_is_not_blamed_on_another_export(tmp_path: Path, monkeypatch) -> None:
    """An empty --out whose place the staged export cannot take (a read-only parent, a busy folder): the rename fails
    while `out` is still empty, which was reported as "filled by another process (another tfm export?)"."""
    import errno

    import tfm_cli.export.common as common

    run, out = _random_run(tmp_path / "run"), tmp_path / "out"
    out.mkdir()
    real_rename = Path.rename

    def busy(self: Path, target):
        if Path(target) == out:
            raise OSError(errno.EBUSY, "Device or resource busy", str(target))
        return real_rename(self, target)

    monkeypatch.setattr(common.Path, "rmdir", lambda self: (_ for _ in ()).throw(OSError(errno.EBUSY, "busy")))
    monkeypatch.setattr(common.Path, "rename", busy)
    with pytest.raises(TfmError) as caught:
        run_export("release", run, out, verify_lines=2)
    message = str(caught.value)
    assert message == f"{out} (an empty folder) cannot be replaced by the export: Device or resource busy", message
    assert "another process" not in message and list(out.iterdir()) == []


def test_the_release_card_says_how_an_unusual_model_was_made(trained, tmp_path: Path) -> None:
    """The card said "(tied embeddings counted once)" of an untied model, "1 heads", and "trained for 5 steps" of a
    model fine-tuned for 5 steps from another's weights."""
    import yaml
    from clitools import tiny_recipe

    train_tsv = trained["dir"].parent / "train.tsv"
    base = yaml.safe_load(tiny_recipe("odd", data={"train": str(train_tsv), "dev": None},
                                      model={"tie_embeddings": False, "n_heads": 1},
                                      train={"max_steps": 4, "save_every": 2, "keep_last": 2, "average_last": 1}))
    recipe = tmp_path / "odd.yaml"
    recipe.write_text(yaml.safe_dump(base), encoding="utf-8")
    first, tuned = tmp_path / "first", tmp_path / "tuned"
    tfm("train", str(recipe), "--out", str(first), "--device", "cpu")
    tfm("train", str(recipe), "--out", str(tuned), "--device", "cpu", f"train.init_from={first}", "train.max_steps=2")
    card = (run_export("release", tuned, tmp_path / "rel", verify_lines=5).path / "README.md").read_text(encoding="utf-8")
    assert "tied embeddings counted once" not in card and ", 1 head, 1+1 layers" in card, card
    assert f"- fine-tuned for 2 steps from `{first}`; exported from" in card, card
    plain = (run_export("release", first, tmp_path / "rel-first", verify_lines=5).path / "README.md").read_text(encoding="utf-8")
    assert "- trained for 4 steps; exported from" in plain, plain
