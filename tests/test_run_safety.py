"""A run's files under a reviewer's attempts to lose them (#10): a resume that fails half-way, a second process
on the same run, a recipe kept in the run directory, a trainer state that is not its checkpoint's, and the
messages that send the user on (a damaged checkpoint, a corpus that data.max_len empties).

The run is test_bad_inputs.py's real 10-step run (checkpoints at steps 5 and 10, trainer states, fp32, CPU).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import test_bad_inputs
import torch
from clitools import start_tfm, tfm, tiny_recipe, wait_until
from safetensors.torch import load_file
from test_bad_inputs import error_line, snapshot, write

from tfm_cli.checkpoint import read_metadata
from tfm_cli.errors import RecipeError
from tfm_cli.recipe import load_recipe
from tfm_cli.runs import checkpoint_path, checkpoint_steps, state_path

root, trained = test_bad_inputs.root, test_bad_inputs.trained  # its fixtures: a corpus and recipe, the run


@pytest.fixture
def copy(trained: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "run"))


def train(*args: str):
    return tfm("train", *args, "--device", "cpu", check=False)


def test_a_resume_that_cannot_continue_leaves_the_run_as_it_was(copy: Path) -> None:
    """A resume with data.max_len=6 failed on the data position after it had written the overrides into the run's
    recipe.yaml: every later plain resume failed the same way."""
    before = snapshot(copy)
    for extra in (["--dry-run"], []):  # the dry run passed it (exit 0)
        proc = train("--resume", str(copy), "data.max_len=6", "train.max_steps=12", *extra)
        error_line(proc, f"{copy} cannot continue from its data position", "this resume changes data.max_len 32 -> 6")
        assert snapshot(copy) == before
    train("--resume", str(copy), "train.max_steps=11").check_returncode()  # the run still resumes


def test_a_resume_from_a_damaged_checkpoint_names_it_and_the_one_before_goes_on(copy: Path) -> None:
    """The newest checkpoint's tensor bytes changed after it was written (its CRC-32 no longer matches): the resume
    and its dry run refuse it by name, before touching the run, and say what to delete; once it is gone, the run
    resumes from the checkpoint before it."""
    newest = checkpoint_path(copy, 10)
    test_bad_inputs._zero_bytes_inside_a_tensor(newest)
    before = snapshot(copy)
    for extra in (["--dry-run"], []):
        proc = train("--resume", str(copy), "train.max_steps=12", *extra)
        error_line(proc, f"{newest} is damaged: its tensors no longer match the CRC-32 saved with them")
        assert f"delete it and {state_path(newest).name}" in proc.stderr, proc.stderr
        assert snapshot(copy) == before
    newest.unlink()
    state_path(newest).unlink()
    proc = train("--resume", str(copy), "train.max_steps=12")
    assert proc.returncode == 0 and "step-00000005.safetensors at step 5" in proc.stderr, proc.stderr
    assert [step for step, _ in checkpoint_steps(copy)][-1] == 12


def test_a_resume_that_reorders_the_rest_of_its_epoch_says_so(copy: Path, tmp_path: Path) -> None:
    """A resume that changed train.seed (or max_tokens, or max_len, with the position still in the epoch) read the
    rest of the epoch in another order without a word: some pairs trained twice in it, others never. Said now, in
    the dry run too; a resume that changes none of them says nothing of it."""
    said = "the rest of epoch 1 (from batch 5) comes from batches made or ordered otherwise"
    for override in ("train.seed=5", "train.max_tokens=480"):
        run = Path(shutil.copytree(copy, tmp_path / override))
        for checkpoint in sorted((run / "checkpoints").glob("step-00000010*")):
            checkpoint.unlink()  # resume from step 5, mid-epoch
        (run / "model.safetensors").unlink()
        dry = train("--resume", str(run), override, "train.max_steps=6", "--dry-run")
        assert dry.returncode == 0 and said in dry.stderr and override.split("=")[0] in dry.stderr, dry.stderr
        proc = train("--resume", str(run), override, "train.max_steps=6")
        assert proc.returncode == 0 and said in proc.stderr, proc.stderr
    plain = Path(shutil.copytree(copy, tmp_path / "plain"))
    for checkpoint in sorted((plain / "checkpoints").glob("step-00000010*")):
        checkpoint.unlink()
    (plain / "model.safetensors").unlink()
    proc = train("--resume", str(plain), "train.max_steps=6")
    assert proc.returncode == 0 and "ordered otherwise" not in proc.stderr, proc.stderr


def test_a_resume_on_a_corpus_changed_in_place_says_so(root: Path, tmp_path: Path) -> None:
    """data.train's file shuffled in place (same path, same size, same mtime) between two sessions: the resume
    went on, on other batches than the run's, without a word (its losses differed from the run's own resume). The
    checkpoint keeps a hash of the corpus's ids now, and the resume and its dry run say the content changed."""
    corpus = tmp_path / "train.tsv"
    lines = (root / "train.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
    corpus.write_text("".join(lines), encoding="utf-8")
    run = tmp_path / "run"
    proc = train(str(root / "recipe.yaml"), f"data.train={corpus}", "train.max_steps=10", "--out", str(run))
    assert proc.returncode == 0, proc.stderr
    for checkpoint in sorted((run / "checkpoints").glob("step-00000010*")):
        checkpoint.unlink()  # resume from step 5, mid-epoch
    (run / "model.safetensors").unlink()
    said = "note: this resume changes the content of data.train (the same path holds other pairs): the rest of epoch 1"
    same = train("--resume", str(run), "train.max_steps=6", "--dry-run")
    assert same.returncode == 0 and "changes the content" not in same.stderr, same.stderr
    moved = tmp_path / "moved.tsv"  # a copy at another path: the same pairs, so the same batches (said "changes")
    shutil.copy(corpus, moved)
    proc = train("--resume", str(run), "train.max_steps=6", f"data.train={moved}", "--dry-run")
    assert proc.returncode == 0 and "ordered otherwise" not in proc.stderr, proc.stderr
    stat = corpus.stat()
    random.Random(1).shuffle(lines)
    corpus.write_text("".join(lines), encoding="utf-8")
    os.utime(corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    for extra in (["--dry-run"], []):
        proc = train("--resume", str(run), "train.max_steps=6", *extra)
        assert proc.returncode == 0 and said in proc.stderr, proc.stderr


def test_the_reorder_note_compares_with_the_checkpoint_s_recipe_and_not_at_an_epoch_s_end(root: Path, tmp_path: Path) -> None:
    """The note compared with the run's recipe.yaml, which a session started after the checkpoint rewrites (killed,
    it left seed 5 there over a seed-1 checkpoint: no note for a real reorder, a false one for none); and it spoke
    of "the rest of epoch 1" where the checkpoint was at that epoch's end, nothing of it left."""
    from tfm_cli.recipe import dump_recipe, recipe_to_dict
    from tfm_cli.training.checks import with_absolute_paths
    from tfm_cli.training.resume import restore_stream

    class Stream:  # what restore_stream reads of a BatchStream
        def __init__(self, n: int) -> None:
            self.n, self.position = n, 0

        def load_state_dict(self, saved: dict) -> None:
            self.position = saved["position"]

        def batches(self) -> list:
            return [[0]] * self.n

    run = tmp_path / "run"
    run.mkdir()
    seed = lambda n: load_recipe(root / "recipe.yaml", [f"train.seed={n}"])  # noqa: E731
    dump_recipe(with_absolute_paths(seed(5)), run / "recipe.yaml")  # a later session's, killed before a checkpoint
    trained_with = recipe_to_dict(with_absolute_paths(seed(1)))  # the checkpoint's own
    mid, end = {"epoch": 1, "position": 3}, {"epoch": 1, "position": 8}
    assert restore_stream(Stream(8), mid, seed(1), run, trained_with) is None  # seed 1 as trained: no reorder
    note = restore_stream(Stream(8), mid, seed(5), run, trained_with)
    assert note is not None and "changes train.seed" in note and "the rest of epoch 1 (from batch 3)" in note
    assert restore_stream(Stream(8), end, seed(5), run, trained_with) is None  # nothing of epoch 1 left
    assert restore_stream(Stream(8), mid, seed(1), run, None) is not None  # an older state: recipe.yaml's, as before


def test_a_resume_drops_the_records_a_dead_session_logged_past_its_checkpoint(copy: Path) -> None:
    """A session killed past its last checkpoint (kill -9) left its records of later steps in metrics.jsonl; the
    resume appended its own after them, and the curves mixed the two (TensorBoard's events were purged). The resume
    drops them, and says so; the run's records then have each step once, in order."""
    for name in ("step-00000010.safetensors", "step-00000010.state.pt"):
        (copy / "checkpoints" / name).unlink()  # as if killed after logging steps 6-10, before their checkpoint
    (copy / "model.safetensors").unlink()
    records = lambda: [json.loads(line) for line in (copy / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    assert any(r["step"] > 5 for r in records())
    proc = train("--resume", str(copy))
    assert proc.returncode == 0 and "dropped 1 record(s) of metrics.jsonl logged after step 5" in proc.stderr, proc.stderr
    assert [(r["kind"], r["step"]) for r in records()] == [("train", 5), ("train", 10)]  # step 10 once: this session's


def test_a_resume_with_another_number_of_threads_says_it_is_not_bit_for_bit(copy: Path) -> None:
    """Float sums depend on the number of torch threads: a resume with another number went on otherwise than the
    run would have, without a word (a resume with another number of processes says so)."""
    for name in ("step-00000010.safetensors", "step-00000010.state.pt"):
        (copy / "checkpoints" / name).unlink()
    (copy / "model.safetensors").unlink()
    proc = tfm("train", "--resume", str(copy), "train.max_steps=6", "--device", "cpu", check=False,
               env_extra={"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"})
    assert proc.returncode == 0, proc.stderr
    assert "saved by a run of 1 torch thread(s) a process, resumed with 2" in proc.stderr, proc.stderr
    assert "OMP_NUM_THREADS=1 resumes exactly" in proc.stderr
    proc = train("--resume", str(copy), "train.max_steps=7")  # saved with 2 now, resumed with 1: said again
    assert proc.returncode == 0 and "saved by a run of 2 torch thread(s) a process, resumed with 1" in proc.stderr, proc.stderr


def test_a_folder_where_the_run_writes_a_file_is_said_before_training(copy: Path) -> None:
    """A folder at model.safetensors (or summary.json, metrics.jsonl...) was found when that file was written: the
    final model's after the whole training, with a hint of paths, permissions and free space."""
    for name in ("step-00000010.safetensors", "step-00000010.state.pt"):
        (copy / "checkpoints" / name).unlink()
    (copy / "model.safetensors").unlink()
    (copy / "model.safetensors").mkdir()
    for extra in (["--dry-run"], []):
        proc = train("--resume", str(copy), "train.max_steps=12", *extra)
        error_line(proc, f"{copy / 'model.safetensors'} is a folder, where the run writes its model.safetensors")
        assert "move that folder away" in proc.stderr and not (copy / "checkpoints" / "step-00000012.safetensors").exists()


def test_a_resume_of_a_finished_run_has_nothing_to_do(copy: Path) -> None:
    """A plain resume of a finished run evaluated the final model on the whole dev set again and appended a second
    "final" record to metrics.jsonl; a resume that changes a setting still writes the final model again."""
    before = snapshot(copy)
    proc = train("--resume", str(copy), "--json")
    assert proc.returncode == 0, proc.stderr
    assert f"{copy} finished at step 10 (train.max_steps=10)" in proc.stderr and "nothing to do" in proc.stderr
    assert json.loads(proc.stdout)["steps"] == 10
    assert snapshot(copy) == before
    proc = train("--resume", str(copy), "train.average_last=1")  # the average of 2 was the model: now the last one
    assert proc.returncode == 0 and "nothing to do" not in proc.stderr, proc.stderr
    assert read_metadata(copy / "model.safetensors").get("last") == '"step-00000010.safetensors"'
    assert json.loads((copy / "summary.json").read_text())["final_model"]["chosen"] == "last"


def test_a_resume_that_scores_the_dev_set_otherwise_starts_the_best_score_afresh(root: Path, copy: Path) -> None:
    """A resume with another train.bleu_tokenize (or dev set, or eval_sentences) compared its BLEU with the best
    one of the old scale: best.safetensors and early stopping kept a checkpoint the new scale may rank lower."""
    dev = write(copy.parent / "dev.tsv", "".join((root / "train.tsv").read_text().splitlines(keepends=True)[:40]))
    every = ("train.eval_every=5", f"data.dev={dev}")
    # evaluates at steps 10 (the checkpoint's, which the resume's recipe schedules and the run did not do) and 15;
    # no best to forget yet
    proc = train("--resume", str(copy), "train.max_steps=16", *every)
    assert proc.returncode == 0 and "changes how the dev set is scored" not in proc.stderr, proc.stderr
    before = torch.load(state_path(checkpoint_path(copy, 16)), weights_only=True)
    assert before["best_bleu"] >= 0 and before["scoring"]["train.bleu_tokenize"] == "13a"
    proc = train("--resume", str(copy), "train.max_steps=21", *every, "train.bleu_tokenize=char")
    assert proc.returncode == 0, proc.stderr
    assert "this resume changes how the dev set is scored (train.bleu_tokenize '13a' -> 'char')" in proc.stderr
    evals = [r for r in map(json.loads, (copy / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [10, 15, 20]
    after = torch.load(state_path(checkpoint_path(copy, 21)), weights_only=True)
    # the best is step 20's character BLEU, whatever step 15's 13a BLEU was
    assert after["best_bleu"] == evals[-1]["bleu"] and after["scoring"]["train.bleu_tokenize"] == "char"


def test_a_resume_whose_corpus_moved_says_how_to_give_its_new_place(root: Path, copy: Path) -> None:
    moved = copy.parent / "moved.tsv"
    shutil.copy(root / "train.tsv", moved)
    recipe = copy / "recipe.yaml"
    recipe.write_text(recipe.read_text().replace(str(root / "train.tsv"), str(moved)))
    gone = Path(shutil.move(moved, copy.parent / "elsewhere.tsv"))
    before = snapshot(copy)
    proc = train("--resume", str(copy), "train.max_steps=11")
    error_line(proc, f"data.train: corpus file {moved} does not exist")
    assert f"hint: if it moved, give its new place: tfm train --resume {copy} 'data.train=NEW_PATH'" in proc.stderr
    assert snapshot(copy) == before
    train("--resume", str(copy), "train.max_steps=11", f"data.train={gone}").check_returncode()  # as the hint says


def test_a_trainer_state_of_another_step_is_refused(copy: Path) -> None:
    shutil.copy(state_path(checkpoint_path(copy, 5)), state_path(checkpoint_path(copy, 10)))
    before = snapshot(copy)
    proc = train("--resume", str(copy), "train.max_steps=12")
    error_line(proc, "step-00000010.state.pt is the trainer state of step 5, not of its checkpoint's step 10")
    assert snapshot(copy) == before


def test_a_damaged_checkpoint_on_resume_says_how_to_go_back_one(copy: Path) -> None:
    weights = checkpoint_path(copy, 10)
    weights.write_bytes(weights.read_bytes()[:1000])
    proc = train("--resume", str(copy), "train.max_steps=12")
    error_line(proc, str(weights), "truncated or corrupt")
    assert "hint: delete it and its step-00000010.state.pt to resume from the checkpoint before" in proc.stderr
    weights.unlink()
    state_path(weights).unlink()
    train("--resume", str(copy), "train.max_steps=11").check_returncode()  # from step 5, as the hint says


def test_out_is_refused_with_resume_not_ignored(copy: Path, tmp_path: Path) -> None:
    proc = train("--resume", str(copy), "--out", str(tmp_path / "elsewhere"), "train.max_steps=11")
    assert proc.returncode == 2 and "--resume continues" in proc.stderr and "drop --out" in proc.stderr, proc.stderr
    assert not (tmp_path / "elsewhere").exists()
    train("--resume", str(copy), "--out", str(copy), "train.max_steps=11").check_returncode()  # the same folder: fine


def test_a_recipe_kept_in_the_run_directory_is_not_replaced(root: Path, trained: Path, tmp_path: Path) -> None:
    """`tfm train proj/recipe.yaml --out proj` replaced the user's recipe (comments, layout, relative paths) with
    the resolved one."""
    project = tmp_path / "proj"
    project.mkdir()
    mine = write(project / "recipe.yaml", (root / "recipe.yaml").read_text() + "# my notes on this recipe\n")
    for extra in (["--dry-run"], []):
        error_line(train(str(mine), "--out", str(project), *extra), "is the file the run writes its resolved recipe to")
    assert mine.read_text().endswith("# my notes on this recipe\n") and [p.name for p in project.iterdir()] == ["recipe.yaml"]
    # the hint's command works as given (it said `cp`: the copy left was then "another run's recipe.yaml")
    proc = train(str(mine), "--out", str(project), "--dry-run")
    command = proc.stderr.split("train with it: ", 1)[1].split(";", 1)[0]
    assert command == f"mv {mine} my-recipe.yaml && tfm train my-recipe.yaml --out {project}"
    followed = test_bad_inputs._follow(f"{command} --device cpu train.max_steps=2", tmp_path)
    assert followed.returncode == 0 and (project / "model.safetensors").is_file(), followed.stderr
    assert (tmp_path / "my-recipe.yaml").read_text().endswith("# my notes on this recipe\n")
    # a run's own (resolved) recipe.yaml may start that run again before its first checkpoint
    again = tmp_path / "again"
    again.mkdir()
    shutil.copy(trained / "recipe.yaml", again / "recipe.yaml")
    train(str(again / "recipe.yaml"), "--out", str(again), "--dry-run").check_returncode()


def test_a_second_process_on_a_run_in_training_is_refused(trained: Path, tmp_path: Path) -> None:
    """A --resume of a run still training read a checkpoint that the first process then pruned (a
    FileNotFoundError traceback), or trained beside it, both writing into the run. A start into it (not a resume)
    was told the run "already holds a trained run", as for a finished one."""
    run = Path(shutil.copytree(trained, tmp_path / "run"))
    first = start_tfm("train", "--resume", str(run), "train.max_steps=1000000", "train.save_every=5", "--device", "cpu")
    try:
        wait_until(first, lambda: any(step > 10 for step, _ in checkpoint_steps(run)), "the first process saves checkpoints")
        for extra in ([], ["--dry-run"]):  # the dry run of the resume said "resumes from step N"
            proc = train("--resume", str(run), "train.max_steps=1000000", *extra)
            error_line(proc, f"{run} is in use by another process right now (a training, or `tfm tokenize` or `tfm export` writing into it)")
        for extra in ([], ["--dry-run"]):  # a start into it said "already holds a trained run": it is training
            proc = train(str(run / "recipe.yaml"), "--out", str(run), *extra)
            error_line(proc, f"{run} is in use by another process right now (a training, or `tfm tokenize` or `tfm export` writing into it)")
            assert "hint: train into another --out" in proc.stderr, proc.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=120)
    assert first.returncode == 128 + signal.SIGTERM and b"interrupted" in err, err.decode()  # (saved, or already was)
    train("--resume", str(run), "train.max_steps=1000000", "--dry-run").check_returncode()  # the lock went with it


def test_a_checkpoint_whose_weights_are_gone_is_said_and_a_run_that_never_began_is_told_to_start(copy: Path, tmp_path: Path) -> None:
    """step-10.safetensors lost beside its trainer state: the resume fell back to step 5 without a word. A run
    killed while its start trained the tokenizer (tokenizer.json, nothing else): "not a tfm run directory"."""
    checkpoint_path(copy, 10).unlink()
    proc = train("--resume", str(copy), "train.max_steps=12")
    assert proc.returncode == 0, proc.stderr
    assert "checkpoint(s) at step 10 have a trainer state but no weights (.safetensors): resuming from step 5" in proc.stderr
    begun = tmp_path / "begun"
    begun.mkdir()
    shutil.copy(copy / "tokenizer.json", begun / "tokenizer.json")
    for extra in ([], ["--dry-run"]):
        proc = train("--resume", str(begun), *extra)
        error_line(proc, f"{begun} has no recipe.yaml and no checkpoint: its run was stopped before it began to train")
        assert f"hint: start it again: tfm train RECIPE --out {begun} (the tokenizer.json there is used)" in proc.stderr
    empty = tmp_path / "empty"  # killed before its tokenizer was written: the folder it made, empty
    empty.mkdir()
    for extra in ([], ["--dry-run"]):  # it said "recipe.yaml is missing: ... not a tfm run directory; pass the run's folder"
        proc = train("--resume", str(empty), *extra)
        error_line(proc, f"{empty} is empty: a run started there was stopped before it wrote anything, so there is nothing to resume")
        assert f"hint: start it: tfm train RECIPE --out {empty}" in proc.stderr


def test_a_corpus_that_data_max_len_empties_says_so(root: Path, tmp_path: Path) -> None:
    tokenizer = tmp_path / "tok.json"
    tfm("tokenize", str(root / "recipe.yaml"), "--out", str(tokenizer))
    args = [str(root / "recipe.yaml"), "data.max_len=2", f"tokenizer.path={tokenizer}", "--out", str(tmp_path / "run")]
    for extra in (["--dry-run"], []):  # with the tokenizer at hand, the dry run encodes the corpus too
        error_line(train(*args, *extra), "no usable sentence pairs", "of 3,000 read", "a side over 1 token (data.max_len=2 counts the </s>)")
    assert not (tmp_path / "run").exists()


def test_a_run_name_suggestion_keeps_the_letters(tmp_path: Path) -> None:
    path = write(tmp_path / "r.yaml", "name: étude à deux\n")
    with pytest.raises(RecipeError, match="try 'etude-a-deux'"):
        load_recipe(path)


def test_curves_skip_metrics_lines_that_are_not_records(copy: Path) -> None:
    """Lines of metrics.jsonl that are not UTF-8 or not a record (a damaged disk, a hand edit) stopped `--curves`,
    and a resumed run after its final model was written, with a traceback; a line cut mid-write was skipped."""
    with open(copy / "metrics.jsonl", "ab") as f:
        f.write(b'\xff\xfe\n[1, 2]\n"text"\n{"kind": "train", "step": "x", "loss": 1}\n{"kind": "eval", "step": 3}\n')
    curves = json.loads(tfm("train", "--curves", str(copy), "--json").stdout)
    assert [r["step"] for r in curves["train"]] == [5, 10] and curves["eval"] == []
    proc = train("--resume", str(copy), "train.max_steps=11")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "train loss │" in proc.stdout


def test_curves_skip_records_with_numbers_a_chart_cannot_draw(copy: Path) -> None:
    """NaN, Infinity and 1e400 are JSON to Python's reader: `tfm train --curves RUN` ended in "cannot convert float
    NaN to integer"; a final record's sentences as text in "Cannot specify ',' with 's'"."""
    with open(copy / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write('{"kind": "eval", "step": 4, "loss": NaN, "bleu": 1.0}\n{"kind": "train", "step": 12, "loss": Infinity}\n')
        f.write('{"kind": "train", "step": 13, "loss": 1e400}\n{"kind": "eval", "step": 6, "loss": 2.0, "bleu": -Infinity}\n')
        f.write('{"kind": "eval", "step": 7, "loss": 2.5, "bleu": 3.0, "sentences": "all"}\n')
        f.write('{"kind": "final", "step": 10, "bleu": 3.5, "chrf": 20.0, "sentences": "x", "final_model": [1]}\n')
    proc = tfm("train", "--curves", str(copy), check=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "train loss │" in proc.stdout and "final     BLEU 3.50  chrF 20.00  (averaged model, 0 dev sentences" in proc.stdout
    curves = json.loads(tfm("train", "--curves", str(copy), "--json").stdout)
    assert [r["step"] for r in curves["train"]] == [5, 10] and [r["step"] for r in curves["eval"]] == [7]


def test_a_resume_stopped_before_its_final_model_writes_it_next_time(copy: Path) -> None:
    """A resume rewrites recipe.yaml when it starts; one stopped while averaging or evaluating (Ctrl-C, a kill, a
    damaged checkpoint) left a recipe.yaml ahead of the final model, and the next plain resume, as the stop message
    says to run, found the recipe unchanged and said "nothing to do" over the old final model."""
    recipe = copy / "recipe.yaml"
    recipe.write_text(recipe.read_text().replace("average_last: 2", "average_last: 1"))  # as that resume left it
    proc = train("--resume", str(copy))
    assert proc.returncode == 0 and "nothing to do" not in proc.stderr, proc.stderr
    assert read_metadata(copy / "model.safetensors").get("last") == '"step-00000010.safetensors"'
    assert json.loads((copy / "summary.json").read_text())["final_model"]["chosen"] == "last"
    assert "nothing to do" in train("--resume", str(copy)).stderr  # now it is written


@pytest.mark.parametrize("damage", ["truncated", "bytes changed"])
def test_a_damaged_checkpoint_in_the_final_average_says_how_to_go_on(copy: Path, damage: str) -> None:
    """An older checkpoint damaged since it was saved (a resume reads only the newest) stopped the final average
    with a SafetensorError traceback, after the steps of the resume were trained; one whose bytes changed inside
    (its CRC-32 no longer matches) is said with the same way on."""
    weights = checkpoint_path(copy, 5)
    if damage == "truncated":
        weights.write_bytes(weights.read_bytes()[:1000])
    else:
        test_bad_inputs._zero_bytes_inside_a_tensor(weights)
    proc = train("--resume", str(copy), "train.keep_last=3")  # a changed setting: the final model is written again
    said = "truncated or corrupt" if damage == "truncated" else "is damaged: its tensors no longer match the CRC-32"
    error_line(proc, str(weights), said, "one of the 2 checkpoints averaged into the final model")
    assert f"hint: delete it and its step-00000005.state.pt, then `tfm train --resume {copy}`" in proc.stderr
    weights.unlink()
    state_path(weights).unlink()
    train("--resume", str(copy)).check_returncode()  # as the hint says: the final model from the one left
    assert read_metadata(copy / "model.safetensors").get("last") == '"step-00000010.safetensors"'


@pytest.mark.parametrize("gone_before", ["read_metadata", "read_weights"])
def test_a_checkpoint_pruned_while_it_is_loaded_gives_the_next_one(copy: Path, gone_before: str, monkeypatch) -> None:
    """`tfm translate --model RUN` (and export) of a run that is training, before its final model: the newest
    checkpoint, chosen a moment before, was pruned by the run before it was read, a FileNotFoundError traceback
    (found with train.save_every=1 train.keep_last=1 and translations in a loop)."""
    import tfm_cli.checkpoint as checkpoint

    for name in ("model.safetensors", "best.safetensors"):
        (copy / name).unlink(missing_ok=True)
    newest = checkpoint_path(copy, 10)
    real = getattr(checkpoint, gone_before)

    def pruned_first(path, *args, **kwargs):  # the training run prunes (here: a newer one replaces it) meanwhile
        if Path(path) == newest and newest.exists():
            shutil.copy(newest, checkpoint_path(copy, 15))
            newest.unlink()
        return real(path, *args, **kwargs)

    monkeypatch.setattr(checkpoint, gone_before, pruned_first)
    loaded = checkpoint.load_model(copy)
    assert loaded.path == checkpoint_path(copy, 15)


def test_weights_renamed_over_while_they_are_loaded_are_read_again(copy: Path, monkeypatch) -> None:
    """A training renames a newer best.safetensors over the old one: a load that read the metadata of the old file
    and the tensors of the new said step 230 over step 260's weights (5 of 1,699 loads while a run trained)."""
    import tfm_cli.checkpoint as checkpoint

    best = copy / "best.safetensors"
    shutil.copy(checkpoint_path(copy, 5), best)
    real = checkpoint.read_weights
    replaced = []

    def newer_first(path, *args, **kwargs):  # between the metadata and the tensors, as the trainer's rename can
        if Path(path) == best and not replaced:
            shutil.copy(checkpoint_path(copy, 10), best.with_suffix(".tmp"))
            best.with_suffix(".tmp").replace(best)
            replaced.append(True)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "read_weights", newer_first)
    loaded = checkpoint.load_model(best)
    assert replaced and loaded.step == 10
    for name, tensor in real(checkpoint_path(copy, 10)).items():
        torch.testing.assert_close(loaded.model.state_dict()[name], tensor, rtol=0, atol=0)


def test_a_final_model_older_than_the_runs_newest_checkpoint_is_said(copy: Path, tmp_path: Path) -> None:
    """A finished run resumed with a higher train.max_steps and stopped keeps the final model of the earlier
    session: `tfm translate --model RUN` translated with it, saying nothing of the newer checkpoints."""
    import warnings

    from tfm_cli.checkpoint import load_model

    shutil.copy(checkpoint_path(copy, 10), checkpoint_path(copy, 15))  # as the stopped resume left it
    with pytest.warns(UserWarning, match=r"model.safetensors is the final model of step 10, but .* trained on to step 15"):
        assert load_model(copy).step == 10  # still the run's final model, as documented
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_model(copy / "model.safetensors")  # asked for by name: nothing to say
    proc = tfm("translate", "--model", str(copy), "Bonjour .", "--device", "cpu")
    warning = [line for line in proc.stderr.splitlines() if line.startswith("warning:") and "final model" in line]
    assert len(warning) == 1 and "tfm train --resume" in warning[0] and "step-00000015.safetensors" in warning[0], proc.stderr


def test_a_run_folder_moved_while_it_trains_stops_before_writing_under_its_old_name(root: Path, tmp_path: Path) -> None:
    """`mv RUN RUN-old` while it trains, then `tfm train --out RUN`: the lock was on the moved folder, so the second
    run was let in, and the first one wrote its checkpoints, metrics and final model into the second's folder (or,
    with nothing there, stopped on "metrics.jsonl: No such file or directory"). It stops at its next write now,
    saying where its folder is, and resumes there."""
    from tfm_cli.errors import TfmError
    from tfm_cli.training import TrainEvents
    from tfm_cli.training import train as train_in_process

    out, moved = tmp_path / "run", tmp_path / "run-old"

    class Moving(TrainEvents):
        def step(self, step: int, metrics: dict) -> None:
            if step == 6:
                out.rename(moved)
                out.mkdir()  # another run's folder, by the old name
                (out / "theirs.txt").write_text("another run's")

    recipe = load_recipe(root / "recipe.yaml", ["train.max_steps=12", "train.save_every=5", "train.log_every=5", "data.dev=null"])
    with pytest.raises(TfmError) as caught:
        train_in_process(recipe, out, device="cpu", events=Moving())
    assert str(caught.value).startswith(f"{out} was moved or deleted while this run trained (its folder is now {moved})")
    assert caught.value.hint == f"continue it where it is: tfm train --resume {moved}"
    assert sorted(p.name for p in out.iterdir()) == ["theirs.txt"]  # nothing of the first run written there
    proc = train("--resume", str(moved))
    assert proc.returncode == 0 and (moved / "model.safetensors").is_file(), proc.stderr


def test_a_tokenizer_json_deleted_after_the_last_checkpoint_is_written_back(root: Path, tmp_path: Path, monkeypatch) -> None:
    """Deleted while the final model was averaged and evaluated: exit 0 and a run whose model loaded nowhere."""
    from tfm_cli.training import train as train_in_process
    from tfm_cli.training import trainer
    from tfm_cli.translator import Translator

    out = tmp_path / "run"
    real = trainer.Trainer._finish

    def deleting_first(self, stopped):
        (out / "tokenizer.json").unlink()
        return real(self, stopped)

    monkeypatch.setattr(trainer.Trainer, "_finish", deleting_first)
    recipe = load_recipe(root / "recipe.yaml", ["train.max_steps=2", "train.save_every=2", "data.dev=null", "train.average_last=1"])
    train_in_process(recipe, out, device="cpu")
    assert Translator.load(out, device="cpu").step == 2


def test_a_tokenizer_json_deleted_while_the_run_trains_is_written_back(root: Path, tmp_path: Path) -> None:
    """rm RUN/tokenizer.json mid-training: the run ended with exit 0, its model then loaded nowhere ("missing")
    and --resume failed; `tfm tokenize` may not write into a run. The next checkpoint writes it back, said."""
    from tfm_cli.training import TrainEvents
    from tfm_cli.training import train as train_in_process
    from tfm_cli.translator import Translator

    out = tmp_path / "run"
    said: list[str] = []

    class Deleting(TrainEvents):
        def step(self, step: int, metrics: dict) -> None:
            if step == 3:
                (out / "tokenizer.json").unlink()

        def message(self, text: str) -> None:
            said.append(text)

    recipe = load_recipe(root / "recipe.yaml", ["train.max_steps=6", "train.save_every=5", "data.dev=null"])
    train_in_process(recipe, out, device="cpu", events=Deleting())
    assert [s for s in said if "was gone" in s] == [
        f"warning: {out / 'tokenizer.json'} was gone (deleted while the run trained): written back, as the model needs it"]
    loaded = Translator.load(out, device="cpu")  # "tokenizer.json is missing" before; its hash is checked on load
    assert loaded.step == 6 and isinstance(loaded.translate("Bonjour."), str)


def test_tokenize_out_refuses_the_tokenizer_of_a_run_that_is_training(root: Path, tmp_path: Path) -> None:
    """`tfm tokenize --out RUN/tokenizer.json` while `tfm train` read its corpus (before its recipe.yaml and
    config.json): the run finished on the old tokenizer, and its model then failed every translate ("does not
    match") and resume."""
    from tfm_cli.files import DirectoryLock

    run = tmp_path / "run"
    run.mkdir()
    given = ("tokenize", "--corpus", str(root / "train.tsv"), "--out", str(run / "tokenizer.json"))
    tfm(*given, "--vocab-size", "300")
    before = (run / "tokenizer.json").read_bytes()
    lock = DirectoryLock(run)  # as `tfm train` holds it from its first moment
    assert lock.acquire()
    proc = tfm(*given, "--vocab-size", "320", check=False)
    error_line(proc, f"{run} is in use by another process right now (a training, or `tfm tokenize` or `tfm export` writing into it)", "would break its model")
    assert (run / "tokenizer.json").read_bytes() == before
    lock.release()
    tfm(*given, "--vocab-size", "320")  # once it is not: replaced, as before
    assert (run / "tokenizer.json").read_bytes() != before


def test_tokenize_out_refuses_a_run_that_a_training_started_while_the_tokenizer_was_trained(root: Path, tmp_path: Path) -> None:
    """`tfm tokenize --out RUN/tokenizer.json` with no RUN yet, then `tfm train --out RUN` started while the
    tokenizer trained: tokenize looked at RUN only at its start, so it overwrote the tokenizer the run had made,
    and the run's model then matched no tokenizer (translate, export and --resume refused it). The training here
    starts inside the tokenizer's training (a patched train_tokenizer makes RUN and holds its lock, as `tfm
    train` does from its first moment, and writes the run's own tokenizer.json)."""
    run = tmp_path / "run"
    script = f"""
import sys
import tfm_cli.tokenizer as t
from tfm_cli.files import DirectoryLock
real = t.train_tokenizer
def train_tokenizer(*args, **kwargs):
    tok = real(*args, **kwargs)
    run = {str(run)!r}
    import os; os.makedirs(run)
    global held; held = DirectoryLock(__import__("pathlib").Path(run)); assert held.acquire()
    open(os.path.join(run, "tokenizer.json"), "w").write("the run's own")
    return tok
t.train_tokenizer = train_tokenizer
sys.argv = ["tfm", "tokenize", "--corpus", {str(root / "train.tsv")!r}, "--out", {str(run / "tokenizer.json")!r}, "--vocab-size", "300"]
from tfm_cli.console import main
main()
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "NO_COLOR": "1"})
    error_line(proc, f"{run} is in use by another process right now (a training, or `tfm tokenize` or `tfm export` writing into it) "
               "(since this tokenizer's training began; nothing was written): replacing tokenizer.json would break its model")
    assert (run / "tokenizer.json").read_text() == "the run's own"


@pytest.mark.parametrize("name", ["metrics.jsonl", "tensorboard"])
def test_a_resume_into_a_file_it_may_not_write_says_so_before_training(copy: Path, name: str, monkeypatch) -> None:
    """A run whose metrics.jsonl (or tensorboard/) is read-only, the rest writable (a copy made by another user): the
    resume rewrote recipe.yaml, then stopped at its first log line (metrics.jsonl), or before its first step with a
    traceback from tensorboard's writer thread. Now one line before anything is written, naming the path."""
    import os

    from tfm_cli.errors import TfmError
    from tfm_cli.training import resume_recipe
    from tfm_cli.training import train as train_in_process

    locked = copy / name
    if not locked.exists():
        pytest.skip(f"{name} is written with the tensorboard extra only")
    if os.geteuid() != 0:
        locked.chmod(0o555 if locked.is_dir() else 0o444)
    else:  # root may write anything: the access check is made to answer as it would for a user
        access = os.access
        monkeypatch.setattr(os, "access", lambda path, mode, **kw: Path(path) != locked and access(path, mode, **kw))
    before = snapshot(copy)
    with pytest.raises(TfmError, match=f"cannot write into {locked}: Permission denied") as caught:
        train_in_process(resume_recipe(copy, ["train.max_steps=12"]), copy, device="cpu", resume=True)
    assert "chmod u+w" in caught.value.hint
    assert snapshot(copy) == before


def test_a_disk_that_fills_up_under_metrics_jsonl_names_the_checkpoint_to_resume(root: Path, tmp_path: Path, monkeypatch) -> None:
    """metrics.jsonl is written more often than a checkpoint, so a disk that fills up often fails there first: that
    was the generic `metrics.jsonl: No space left on device`, without the intact checkpoint and the way on that a
    checkpoint which cannot be written gets."""
    import errno

    from tfm_cli.errors import TfmError
    from tfm_cli.monitor import append_metrics
    from tfm_cli.training import train as train_in_process

    def full_after_step_6(run_dir: Path, record: dict) -> None:
        if record.get("step", 0) > 6:
            raise OSError(errno.ENOSPC, "No space left on device", str(run_dir / "metrics.jsonl"))
        append_metrics(run_dir, record)

    monkeypatch.setattr("tfm_cli.training.trainer.append_metrics", full_after_step_6)
    out = tmp_path / "run"
    with pytest.raises(TfmError) as caught:
        train_in_process(load_recipe(root / "recipe.yaml", ["train.log_every=1"]), out, device="cpu")
    assert str(caught.value) == (
        f"training stopped at step 7: its log line could not be written ({out / 'metrics.jsonl'}: No space left on "
        "device); the last checkpoint (step-00000005.safetensors, step 5) is intact"
    )
    assert caught.value.hint == f"free some space there, then continue with `tfm train --resume {out}`"
    monkeypatch.undo()
    proc = train("--resume", str(out))
    assert proc.returncode == 0 and "resumed from" in proc.stderr and "at step 5" in proc.stderr, proc.stderr


@pytest.mark.parametrize("failing", ["best.safetensors", "model.safetensors", "read-only"])
def test_a_final_or_best_model_that_cannot_be_written_names_the_way_on(root: Path, tmp_path: Path, failing: str, monkeypatch) -> None:
    """A disk that filled up (or was made read-only) while the best or the final model was written gave the
    generic `model.safetensors: No space left on device` with "check the path, its permissions and the free
    space", where a checkpoint's gets the intact checkpoint and the resume; the resume then writes them."""
    import errno

    from tfm_cli import checkpoint
    from tfm_cli.errors import TfmError
    from tfm_cli.training import train as train_in_process

    name = "best.safetensors" if failing == "best.safetensors" else "model.safetensors"
    code, why = (errno.EROFS, "Read-only file system") if failing == "read-only" else (errno.ENOSPC, "No space left on device")
    save = checkpoint.save_weights

    def fails_there(path: Path, *args, **kwargs) -> None:
        if Path(path).name == name:
            raise OSError(code, why, str(path))
        save(path, *args, **kwargs)

    monkeypatch.setattr("tfm_cli.training.trainer.save_weights", fails_there)
    monkeypatch.setattr("tfm_cli.training.evaluation.save_weights", fails_there)
    out = tmp_path / "run"
    dev = ["data.dev=" + str(root / "train.tsv"), "train.eval_sentences=4", "train.eval_every=5"]
    with pytest.raises(TfmError) as caught:
        train_in_process(load_recipe(root / "recipe.yaml", dev), out, device="cpu")
    fix = "make it writable again" if failing == "read-only" else "free some space there"
    if name == "best.safetensors":  # at step 5's evaluation, just after its checkpoint
        assert str(caught.value) == (
            f"training stopped at step 5: best.safetensors could not be written ({out / name}: {why}); the last "
            "checkpoint (step-00000005.safetensors, step 5) is intact"
        )
        assert caught.value.hint == f"{fix}, then continue with `tfm train --resume {out}`"
    else:
        assert str(caught.value) == (
            f"training ended at step 10, but the final model could not be written ({out / name}: {why}); the last "
            "checkpoint (step-00000010.safetensors, step 10) is intact"
        )
        assert caught.value.hint == f"{fix}, then `tfm train --resume {out}` writes the final model from the checkpoints"
    monkeypatch.undo()
    proc = train("--resume", str(out), *dev)
    assert proc.returncode == 0, proc.stderr
    assert (out / "model.safetensors").is_file() and (out / "best.safetensors").is_file()


def test_a_trainer_state_left_by_a_cut_prune_is_removed_by_the_next_one(copy: Path) -> None:
    """A prune deletes a checkpoint's weights, then its trainer state: a `kill -9` between the two left the state
    (hundreds of MB on a real model) in checkpoints/ for good, since only the weights were looked for."""
    orphan = state_path(checkpoint_path(copy, 2))
    shutil.copy(state_path(checkpoint_path(copy, 5)), orphan)  # as a cut prune of step 2 would have left it
    train("--resume", str(copy), "train.max_steps=15").check_returncode()
    assert sorted(p.name for p in (copy / "checkpoints").iterdir()) == [
        "step-00000010.safetensors", "step-00000010.state.pt", "step-00000015.safetensors", "step-00000015.state.pt",
    ]


def test_a_stop_signal_inside_a_weights_read_is_raised_after_it(copy: Path, monkeypatch) -> None:
    """A SIGTERM that landed inside safetensors' reading raised KeyboardInterrupt in the Python calls its Rust
    code makes, and came out as "ValueError: could not determine the shape of object type 'UntypedStorage'": a
    traceback from `tfm export` stopped while it loaded its release. The read finishes, then the stop is raised."""
    import os

    import tfm_cli.checkpoint as checkpoint
    from tfm_cli.cli.common import stop_signals

    real, finished = checkpoint.safe_open, []

    def opened_and_hit_by_a_signal(path: str, *args, **kwargs):  # the weights' one opening (read_weights)
        os.kill(os.getpid(), signal.SIGTERM)  # its handler runs at the next bytecode: here, inside the read
        handle = real(path, *args, **kwargs)
        finished.append(path)
        return handle

    monkeypatch.setattr(checkpoint, "safe_open", opened_and_hit_by_a_signal)
    weights = copy / "model.safetensors"
    with pytest.raises(KeyboardInterrupt), stop_signals() as received:
        checkpoint.read_weights(weights)
    assert finished == [str(weights)] and received == [signal.SIGTERM]


@pytest.mark.parametrize("unreadable", ["weights", "trainer state"])
def test_a_checkpoint_it_may_not_read_is_not_called_damaged(copy: Path, unreadable: str, monkeypatch) -> None:
    """A checkpoint the system would not let the resume read (permissions, an I/O error) was "damaged" or "truncated
    or corrupt", with the hint to delete it: advice that destroys a whole file. Now the system's reason, and no
    deleting."""
    import os

    import tfm_cli.checkpoint as checkpoint
    from tfm_cli.errors import TfmError
    from tfm_cli.training import resume_recipe
    from tfm_cli.training import train as train_in_process

    weights = checkpoint_path(copy, 10)
    locked = weights if unreadable == "weights" else state_path(weights)
    if os.geteuid() != 0:
        locked.chmod(0)
    else:  # root reads anything: the reads fail as they would for a user (safetensors says "No such file")
        access, load, safe_open = os.access, torch.load, checkpoint.safe_open

        def refused(real, error):
            def read(path, *args, **kwargs):
                if Path(path) == locked:
                    raise error
                return real(path, *args, **kwargs)

            return read

        monkeypatch.setattr(os, "access", lambda path, mode, **kw: Path(path) != locked and access(path, mode, **kw))
        monkeypatch.setattr(torch, "load", refused(load, PermissionError(13, "Permission denied")))
        monkeypatch.setattr(checkpoint, "safe_open", refused(safe_open, FileNotFoundError("No such file or directory")))
    before = snapshot(copy)
    with pytest.raises(TfmError) as caught:
        train_in_process(resume_recipe(copy, ["train.max_steps=12"]), copy, device="cpu", resume=True)
    assert str(caught.value) == f"{locked} cannot be read (permission denied)"
    assert "delete" not in caught.value.hint and "permissions" in caught.value.hint
    locked.chmod(0o644)
    assert snapshot(copy) == before


def _new_run(proc, tmp_path: Path) -> str:
    """The command a refused resume suggests for a new run, with NEW_DIR filled in; checked by a dry run."""
    hint = proc.stderr.split("hint: ", 1)[1].strip()
    command = "tfm train " + hint.split(": tfm train ", 1)[1]
    assert command.endswith(" --out NEW_DIR"), hint
    command = command.replace("NEW_DIR", str(tmp_path / "new"))
    followed = test_bad_inputs._follow(f"{command} --device cpu --dry-run", tmp_path)
    assert followed.returncode == 0, f"{command}:\n{followed.stderr}"
    return command


@pytest.mark.parametrize(
    ("override", "refused"),
    [("model.d_model=64", "--resume cannot change the model"), ("model.norm=pre", "--resume cannot change the model"),
     ("tokenizer.min_frequency=5", "--resume cannot change the tokenizer"), ("data.max_len=6", "cannot continue from its data position")],
)
def test_a_refused_resume_says_how_to_start_the_new_run(copy: Path, tmp_path: Path, override: str, refused: str) -> None:
    """The hint was "start a new run with them (--out)", and `tfm train --resume RUN OVERRIDE --out NEW` is refused
    in turn ("--resume continues RUN in place; drop --out"): it now gives the command, from the run's recipe with
    the same override, which a dry run accepts."""
    proc = train("--resume", str(copy), override, "train.max_steps=12")
    error_line(proc, refused)
    assert _new_run(proc, tmp_path) == f"tfm train {copy / 'recipe.yaml'} {override} --out {tmp_path / 'new'}"


def test_a_damaged_trainer_state_says_which_files_to_delete(copy: Path, tmp_path: Path) -> None:
    """"delete it and its .safetensors ..., or start a new run (--out)": the second way on was refused as above; the
    weights file to delete is named."""
    state = state_path(checkpoint_path(copy, 10))
    whole = state.read_bytes()
    # random bytes (a disk's garbage) were "holds more than tensors and plain data (it could run code)"
    for damage in [whole[:100], *(random.Random(seed).randbytes(4000) for seed in range(3))]:
        state.write_bytes(damage)
        proc = train("--resume", str(copy), "train.max_steps=12")
        error_line(proc, f"{state} is damaged")
        assert "UserWarning" not in proc.stderr
    assert "hint: delete it and its step-00000010.safetensors to resume from the checkpoint before" in proc.stderr
    assert _new_run(proc, tmp_path) == f"tfm train {copy / 'recipe.yaml'} --out {tmp_path / 'new'}"
    state.unlink()
    checkpoint_path(copy, 10).unlink()
    proc = train("--resume", str(copy), "train.max_steps=12")
    assert proc.returncode == 0 and "resumed from" in proc.stderr and "at step 5" in proc.stderr, proc.stderr


def test_a_full_disk_says_how_many_checkpoints_fit(root: Path, copy: Path, tmp_path: Path, monkeypatch) -> None:
    """"free some space, lower train.keep_last, or choose another --out": lowering train.keep_last alone was refused
    (train.average_last must be at most train.keep_last, which in turn said only to raise train.keep_last), a
    resume cannot take another --out, and the count that fits was not said. The hint now gives the overrides that
    fit (for a resume, the whole command) and, for a resume, a copy of the run instead of --out; followed, the run
    trains."""
    import shutil as shutil_module
    from collections import namedtuple

    import tfm_cli.training.checks as checks
    from tfm_cli.errors import TfmError
    from tfm_cli.training import resume_recipe
    from tfm_cli.training import train as train_in_process

    params = sum(t.numel() for t in load_file(str(copy / "model.safetensors")).values())
    usage = namedtuple("usage", "total used free")
    # The run holds its 2 checkpoints (steps 5 and 10) and its final model: a resume with train.keep_last=2
    # needs room for one more checkpoint and the best weights (about 16 bytes a parameter); with keep_last=1 for
    # the next checkpoint alone (12), written before the older ones are pruned.
    free = [params * 13]
    monkeypatch.setattr(checks.shutil, "disk_usage", lambda path: usage(10**12, 10**12 - free[0], free[0]))
    assert checks.shutil is shutil_module
    with pytest.raises(TfmError) as err:
        train_in_process(resume_recipe(copy, ["train.max_steps=12"]), copy, device="cpu", resume=True)
    assert err.value.hint == (f"free some space, keep fewer checkpoints (tfm train --resume {copy} train.keep_last=1 "
                              f"train.average_last=1), or copy {copy} where there is room and write access, and resume the copy")
    overrides = err.value.hint.split(f"--resume {copy} ", 1)[1].split(")", 1)[0].split()
    result = train_in_process(resume_recipe(copy, [*overrides, "train.max_steps=12"]), copy, device="cpu", resume=True)
    assert result.step == 12
    free[0] = params * 12 * 2 + params * 8 + 100  # a start: one checkpoint (and the next), the final and best weights
    with pytest.raises(TfmError) as err:  # a start: the same overrides, and another --out
        train_in_process(load_recipe(root / "recipe.yaml"), tmp_path / "new", device="cpu")
    assert err.value.hint == "free some space, keep fewer checkpoints (train.keep_last=1 train.average_last=1), or choose another --out"
    with pytest.raises(RecipeError) as err:
        load_recipe(root / "recipe.yaml", ["train.keep_last=1"])
    assert "(raise train.keep_last to 2, or lower train.average_last to 1)" in str(err.value)


def test_the_free_space_a_resume_needs_counts_the_checkpoints_it_prunes(copy: Path, monkeypatch) -> None:
    """The disk check counted train.keep_last + 1 new checkpoints and new final and best weights on a resume too, as
    if the run's checkpoints on disk were kept beside them: a resume with keep_last=2 of a run holding 2 checkpoints
    and its final model was refused with room for the one checkpoint and the best weights it adds (the saves prune
    the old ones, the final model is replaced)."""
    from collections import namedtuple

    import tfm_cli.training.checks as checks
    from tfm_cli.errors import TfmError, human_size
    from tfm_cli.training import resume_recipe
    from tfm_cli.training import train as train_in_process

    assert len(checkpoint_steps(copy)) == 2
    params = sum(t.numel() for t in load_file(str(copy / "model.safetensors")).values())
    assert not (copy / "best.safetensors").exists()
    held = params * 12 * 2 + params * 4  # the estimate's 12 bytes a parameter per checkpoint, 4 for the final model
    peak = params * 12 * 3 + params * 8  # 2 checkpoints and the next one before a prune, the final and best weights
    usage = namedtuple("usage", "total used free")
    free = [peak - held - 1000]  # short of the peak by a little: refused, and the message says what is counted
    monkeypatch.setattr(checks.shutil, "disk_usage", lambda path: usage(10**12, 10**12 - free[0], free[0]))
    with pytest.raises(TfmError) as err:
        train_in_process(resume_recipe(copy, ["train.max_steps=12"]), copy, device="cpu", resume=True)
    assert str(err.value).startswith(f"{copy} has ") and ", but resuming needs about " in str(err.value)
    assert f"of which about {human_size(held)} is on disk already" in str(err.value), str(err.value)
    free[0] = peak - held + 1000  # the peak fits: well under the 44 bytes a parameter of a fresh start
    assert free[0] < peak * 0.5
    result = train_in_process(resume_recipe(copy, ["train.max_steps=12"]), copy, device="cpu", resume=True)
    assert result.step == 12 and [s for s, _ in checkpoint_steps(copy)] == [10, 12]


def test_a_run_without_checkpoints_says_how_to_start_it_again(copy: Path) -> None:
    """A run stopped before its first checkpoint: the hint was "start it again without --resume", without the
    command (the run's recipe.yaml into the run itself), which works as given."""
    shutil.rmtree(copy / "checkpoints")
    for name in ("model.safetensors", "best.safetensors"):
        (copy / name).unlink(missing_ok=True)
    proc = train("--resume", str(copy))
    error_line(proc, f"{copy} has no checkpoint to resume from")
    command = proc.stderr.split("hint: start it again without --resume: ", 1)[1].strip()
    assert command == f"tfm train {copy / 'recipe.yaml'} --out {copy}"
    proc = train(*command.split()[2:])
    assert proc.returncode == 0 and (copy / "model.safetensors").is_file(), proc.stderr


def test_a_run_copied_without_checkpoints_is_offered_its_weights_to_train_on(copy: Path, tmp_path: Path) -> None:
    """A finished run copied with its final model but not its checkpoints: the hint offered only a new run from
    the recipe, which throws the trained weights away. It gives the command that trains on from them, and it works."""
    shutil.rmtree(copy / "checkpoints")
    before = snapshot(copy)
    proc = train("--resume", str(copy), "train.max_steps=12")
    error_line(proc, f"{copy} has no checkpoint to resume from")
    command = proc.stderr.split("hint: train on from its final model's weights (a new optimizer and schedule): ", 1)[1]
    command = command.split("; or ", 1)[0].replace("NEW_DIR", str(tmp_path / "on"))
    assert command.startswith(f"tfm train {copy / 'recipe.yaml'} train.init_from={copy} --out ") and snapshot(copy) == before
    proc = train(*command.split()[2:], "train.max_steps=5")
    assert proc.returncode == 0 and (tmp_path / "on" / "model.safetensors").is_file(), proc.stderr


def _evaluating_recipe(root: Path, tmp_path: Path, name: str, **train: object):
    """A tiny recipe that checkpoints and evaluates every 5 steps on 20 dev pairs not in train (5 of them scored),
    with `train` on top."""
    dev = write(tmp_path / "dev.tsv", test_bad_inputs._head(3000).split("\n", 2980)[-1])  # 20 pairs, not in train
    data = {"train": str(root / "train.tsv"), "dev": str(dev)}
    settings = {**test_bad_inputs.TRAIN, "save_every": 5, "eval_every": 5, "eval_sentences": 5, **train}
    return load_recipe(write(tmp_path / "recipe.yaml", tiny_recipe(name, data=data, train=settings)))


class _StopInEvaluation:
    """Training events that stop the run (Ctrl-C) as the dev evaluation after `step` starts decoding: after that
    step's checkpoint was saved, before its evaluation was done."""

    def __init__(self, at: int | None) -> None:
        self.at = at

    def message(self, text: str) -> None: ...

    def start(self, step: int, max_steps: int) -> None: ...

    def step(self, step: int, metrics: dict) -> None: ...

    def evaluation(self, step: int, result: dict) -> None: ...

    def decoding(self, what: str, sentences: int):
        if self.at is not None and what == f"dev evaluation at step {self.at}":
            raise KeyboardInterrupt
        return contextlib.nullcontext(None)


def test_a_stop_during_an_evaluation_is_made_good_by_the_resume(root: Path, tmp_path: Path) -> None:
    """A checkpoint at an evaluation step is saved before the evaluation; a run stopped during it lost that
    evaluation for good: the resume went on to the next step, so best.safetensors was never written and early
    stopping stopped at another step (15 instead of 10, when this was found) than the run would have, uninterrupted."""
    from tfm_cli.training.trainer import train as train_run

    recipe = _evaluating_recipe(root, tmp_path, "stops", max_steps=40, patience=1, patience_metric="loss")
    whole = train_run(recipe, tmp_path / "whole", device="cpu", events=_StopInEvaluation(None))
    stopped = train_run(recipe, tmp_path / "stopped", device="cpu", events=_StopInEvaluation(whole.step))
    assert stopped.interrupted and stopped.step == whole.step < 40  # stopped at the step early stopping ends on
    resumed = train_run(None, tmp_path / "stopped", device="cpu", resume=True, events=_StopInEvaluation(None))
    assert resumed.step == whole.step and not resumed.interrupted
    for name in ("model.safetensors", "best.safetensors"):
        got, want = load_file(tmp_path / "stopped" / name), load_file(tmp_path / "whole" / name)
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want), name
    summary = json.loads((tmp_path / "stopped" / "summary.json").read_text())
    assert summary["steps"] == whole.step and summary["stopped"].startswith("early stop")

    def evaluations(run: str) -> list[int]:
        lines = (tmp_path / run / "metrics.jsonl").read_text().splitlines()
        return [r["step"] for r in map(json.loads, lines) if r["kind"] == "eval"]

    assert evaluations("stopped") == evaluations("whole") == list(range(5, whole.step + 1, 5))
    # an evaluation completed before the stop is not done again: its outcome was kept beside its checkpoint
    again = train_run(recipe, tmp_path / "again", device="cpu", events=_StopAtStep(6))
    assert again.interrupted and (tmp_path / "again" / "checkpoints" / "step-00000005.evaluated.json").is_file()
    for stop_checkpoint in (tmp_path / "again" / "checkpoints").glob("step-00000006.*"):
        stop_checkpoint.unlink()  # as a kill -9 at step 6 leaves it: the newest checkpoint is step 5's
    train_run(None, tmp_path / "again", device="cpu", resume=True, events=_StopInEvaluation(None))
    assert evaluations("again") == evaluations("whole")  # step 5's evaluation was not done (and logged) twice


def test_a_stop_during_the_evaluation_of_the_last_step_is_made_good_by_the_resume(root: Path, tmp_path: Path) -> None:
    """The same at train.max_steps (base.yaml's last evaluation falls there: 100,000 is a multiple of 5,000): the
    resume went straight to the final model, without that evaluation: best.safetensors stayed an older step's, and
    metrics.jsonl and the curves missed the last evaluation. (train.log_every=3: step 10's train record was logged
    at the end, off the schedule, and early stopping then, at the evaluation made good, logged it again.)"""
    from tfm_cli.training.trainer import train as train_run

    recipe = _evaluating_recipe(root, tmp_path, "last", max_steps=10, log_every=3, patience=1)
    train_run(recipe, tmp_path / "whole", device="cpu", events=_StopInEvaluation(None))
    stopped = train_run(recipe, tmp_path / "stopped", device="cpu", events=_StopInEvaluation(10))
    assert stopped.interrupted and stopped.step == 10
    resumed = train_run(None, tmp_path / "stopped", device="cpu", resume=True, events=_StopInEvaluation(None))
    assert resumed.step == 10 and not resumed.interrupted
    for name in ("model.safetensors", "best.safetensors"):
        got, want = load_file(tmp_path / "stopped" / name), load_file(tmp_path / "whole" / name)
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want), name
    assert read_metadata(tmp_path / "stopped" / "best.safetensors")["step"] == read_metadata(tmp_path / "whole" / "best.safetensors")["step"]

    def records(run: str) -> list[tuple[str, int]]:
        lines = (tmp_path / run / "metrics.jsonl").read_text().splitlines()
        return [(r["kind"], r["step"]) for r in map(json.loads, lines)]

    assert records("stopped") == records("whole")
    assert [step for kind, step in records("whole") if kind == "eval"] == [5, 10]
    assert [step for kind, step in records("whole") if kind == "train"] == [3, 6, 9, 10]


def test_an_evaluation_owed_is_made_good_by_a_resume_whose_time_budget_is_spent(root: Path, tmp_path: Path) -> None:
    """A stop during step 5's evaluation, then a resume whose train.max_time the sessions before had spent: it
    trained no step and wrote the final model without that evaluation (no best.safetensors, no eval record)."""
    import dataclasses

    from tfm_cli.training.trainer import train as train_run

    recipe = _evaluating_recipe(root, tmp_path, "spent", max_steps=10)
    stopped = train_run(recipe, tmp_path / "run", device="cpu", events=_StopInEvaluation(5))
    assert stopped.interrupted and stopped.step == 5 and not (tmp_path / "run" / "best.safetensors").exists()
    spent = load_recipe(tmp_path / "run" / "recipe.yaml")
    spent = dataclasses.replace(spent, train=dataclasses.replace(spent.train, max_time="0.01s"))
    resumed = train_run(spent, tmp_path / "run", device="cpu", resume=True, events=_StopInEvaluation(None))
    assert resumed.step == 5 and resumed.stopped.startswith("time budget")
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [(r["kind"], r["step"]) for r in map(json.loads, lines) if r["kind"] != "train"] == [("eval", 5), ("final", 5)]
    assert read_metadata(tmp_path / "run" / "best.safetensors")["step"] == "5"


class _StopAtStep(_StopInEvaluation):
    """Training events that stop the run (Ctrl-C) when step `at` is done, before it would be checkpointed."""

    def step(self, step: int, metrics: dict) -> None:
        if step == self.at:
            raise KeyboardInterrupt


def test_the_checkpoint_a_stop_saves_is_not_averaged_into_the_final_model(root: Path, tmp_path: Path) -> None:
    """Ctrl-C at step 7 saves a checkpoint there so that the run can resume; it then stayed among the checkpoints,
    and the final model averaged step 7 with step 20 where the uninterrupted run averaged 15 and 20."""
    from tfm_cli.training.trainer import train as train_run

    settings = {**test_bad_inputs.TRAIN, "max_steps": 20, "save_every": 5, "keep_last": 2, "average_last": 2}
    data = {"train": str(root / "train.tsv"), "dev": None}
    recipe = load_recipe(write(tmp_path / "recipe.yaml", tiny_recipe("stops", data=data, train=settings)))
    train_run(recipe, tmp_path / "whole", device="cpu", events=_StopAtStep(None))
    stopped = train_run(recipe, tmp_path / "stopped", device="cpu", events=_StopAtStep(7))
    assert stopped.interrupted and [s for s, _ in checkpoint_steps(tmp_path / "stopped")] == [5, 7]
    assert read_metadata(checkpoint_path(tmp_path / "stopped", 7))["saved_on"] == '"stop"'
    train_run(None, tmp_path / "stopped", device="cpu", resume=True, events=_StopAtStep(None))
    assert [s for s, _ in checkpoint_steps(tmp_path / "stopped")] == [15, 20]
    got, want = load_file(tmp_path / "stopped" / "model.safetensors"), load_file(tmp_path / "whole" / "model.safetensors")
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert read_metadata(tmp_path / "stopped" / "model.safetensors")["averaged"] == read_metadata(tmp_path / "whole" / "model.safetensors")["averaged"]


def test_a_stop_that_saves_a_scheduled_step_keeps_it_in_the_average(root: Path, tmp_path: Path) -> None:
    """A stop at a step on the train.save_every schedule whose own save was not made (Ctrl-C twice: the second cut
    the scheduled save short) saved it marked "stop"; the next checkpoint deleted it, and the final model averaged
    steps 5 and 15 where the uninterrupted run averaged 10 and 15, without a word."""
    from tfm_cli.training.trainer import train as train_run

    settings = {**test_bad_inputs.TRAIN, "max_steps": 15, "save_every": 5, "keep_last": 3, "average_last": 2}
    data = {"train": str(root / "train.tsv"), "dev": None}
    recipe = load_recipe(write(tmp_path / "recipe.yaml", tiny_recipe("stops", data=data, train=settings)))
    train_run(recipe, tmp_path / "whole", device="cpu", events=_StopAtStep(None))
    stopped = train_run(recipe, tmp_path / "stopped", device="cpu", events=_StopAtStep(10))  # before step 10's save
    assert stopped.interrupted and [s for s, _ in checkpoint_steps(tmp_path / "stopped")] == [5, 10]
    assert "saved_on" not in read_metadata(checkpoint_path(tmp_path / "stopped", 10))  # a scheduled one
    train_run(None, tmp_path / "stopped", device="cpu", resume=True, events=_StopAtStep(None))
    assert [s for s, _ in checkpoint_steps(tmp_path / "stopped")] == [5, 10, 15]
    got, want = load_file(tmp_path / "stopped" / "model.safetensors"), load_file(tmp_path / "whole" / "model.safetensors")
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_a_run_stopped_while_saving_its_first_checkpoint_starts_again_in_its_folder(root: Path, tmp_path: Path) -> None:
    """A kill between the first checkpoint's weights and its trainer state left a run that `--resume` refused ("no
    checkpoint with its trainer state", pointing to a new folder) and a start in its folder refused too ("already
    holds a trained run", pointing to --resume): `--resume RUN || tfm train RECIPE --out RUN` could not go on. The
    start now removes that checkpoint and trains as an uninterrupted run does."""
    from tfm_cli.training.trainer import train as train_run

    settings = {**test_bad_inputs.TRAIN, "max_steps": 10, "save_every": 5}
    data = {"train": str(root / "train.tsv"), "dev": None}
    recipe = load_recipe(write(tmp_path / "recipe.yaml", tiny_recipe("first", data=data, train=settings)))
    train_run(recipe, tmp_path / "whole", device="cpu", events=_StopAtStep(None))
    run = tmp_path / "killed"
    train_run(recipe, run, device="cpu", events=_StopAtStep(7))
    for path in (run / "checkpoints").glob("step-00000007.*"):
        path.unlink()
    state_path(checkpoint_path(run, 5)).unlink()  # as a kill -9 between the weights and the state leaves it
    proc = tfm("train", "--resume", str(run), "--device", "cpu", check=False)
    error_line(proc, f"{run} stopped while it saved its first checkpoint (step-00000005.safetensors, without its trainer state)")
    assert f"start it again in its folder, which removes that checkpoint: tfm train {run / 'recipe.yaml'} --out {run}" in proc.stderr
    proc = tfm("train", str(run / "recipe.yaml"), "--out", str(run), "--device", "cpu")  # the hint, as given
    assert f"removed {checkpoint_path(run, 5)}: the run stopped while it saved it" in proc.stderr, proc.stderr
    got, want = load_file(run / "model.safetensors"), load_file(tmp_path / "whole" / "model.safetensors")
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_stops_in_a_row_before_the_next_checkpoint_leave_the_scheduled_ones(root: Path, tmp_path: Path) -> None:
    """Each stop saves a checkpoint off the schedule, which counted in keep_last: three stops between steps 10 and
    15 pruned steps 5 and 10 in their place, and the final model was the last checkpoint alone where the
    uninterrupted run averaged steps 5, 10 and 15. A stop now drops the stop checkpoint before it."""
    from tfm_cli.training.trainer import train as train_run

    settings = {**test_bad_inputs.TRAIN, "max_steps": 15, "save_every": 5, "keep_last": 3, "average_last": 3}
    data = {"train": str(root / "train.tsv"), "dev": None}
    recipe = load_recipe(write(tmp_path / "recipe.yaml", tiny_recipe("stops", data=data, train=settings)))
    train_run(recipe, tmp_path / "whole", device="cpu", events=_StopAtStep(None))
    run = tmp_path / "stopped"
    assert train_run(recipe, run, device="cpu", events=_StopAtStep(11)).interrupted
    for at in (12, 13):
        assert train_run(None, run, device="cpu", resume=True, events=_StopAtStep(at)).interrupted
        assert [s for s, _ in checkpoint_steps(run)] == [5, 10, at]
    train_run(None, run, device="cpu", resume=True, events=_StopAtStep(None))
    assert [s for s, _ in checkpoint_steps(run)] == [5, 10, 15]
    got, want = load_file(run / "model.safetensors"), load_file(tmp_path / "whole" / "model.safetensors")
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert read_metadata(run / "model.safetensors")["averaged"] == read_metadata(tmp_path / "whole" / "model.safetensors")["averaged"]

    def losses(folder: Path) -> list[tuple[int, float]]:
        lines = (folder / "metrics.jsonl").read_text().splitlines()
        return [(r["step"], r["loss"]) for r in map(json.loads, lines) if r["kind"] == "train"]

    # the train record at step 15 covers steps 11-15, as the run's did: each resume started a new sum at the step
    # it resumed from, and the steps before (11, 12, 13) were in no record
    assert losses(run) == losses(tmp_path / "whole")


class _SlowOrStopInTheFinalModel(_StopInEvaluation):
    """Training events whose dev evaluation after step `slow` takes 3 seconds more, and that stop the run (Ctrl-C)
    as the final model's evaluation starts decoding, where `stop` says so."""

    def __init__(self, slow: int | None, stop: bool) -> None:
        super().__init__(None)
        self.slow, self.stop = slow, stop

    def decoding(self, what: str, sentences: int):
        if self.stop and what.startswith("final model"):
            raise KeyboardInterrupt
        if what == f"dev evaluation at step {self.slow}":
            import time

            time.sleep(3)
        return contextlib.nullcontext(None)


@pytest.mark.parametrize("stop", ["early stop", "time budget"])
def test_a_stop_while_the_final_model_is_made_is_not_trained_past(root: Path, tmp_path: Path, stop: str) -> None:
    """Early stopping (or the time budget, used up by the evaluation after a checkpoint) ended the run, then a
    Ctrl-C (or a kill) came while the final model was evaluated: the resume trained on past the stop, as nothing
    said the run had ended there (the time budget's count, saved with the checkpoint before the evaluation, had
    time left). It now writes the final model of the step the run stopped at, as the uninterrupted run did, and
    so does a resume that changes a setting of the final model."""
    from tfm_cli.training.trainer import train as train_run

    # early stopping on the dev loss after one evaluation without a better one; or a budget that step 5's
    # evaluation (3 s more) uses up: 5 steps of this model train in well under the 2 s
    ending = {"patience": 1, "patience_metric": "loss"} if stop == "early stop" else {"max_time": "2s"}
    slow = 5 if stop == "time budget" else None
    recipe = _evaluating_recipe(root, tmp_path, "stops", max_steps=40, **ending)
    whole = train_run(recipe, tmp_path / "whole", device="cpu", events=_SlowOrStopInTheFinalModel(slow, False))
    summary = json.loads((tmp_path / "whole" / "summary.json").read_text())
    assert summary["stopped"].startswith(stop) and whole.step % 5 == 0 and whole.step < 40, summary["stopped"]
    assert (tmp_path / "whole" / "checkpoints" / f"step-{whole.step:08d}.evaluated.json").is_file()
    run = tmp_path / "stopped"
    with pytest.raises(KeyboardInterrupt):  # (outside the training loop: it reaches the caller, as Ctrl-C does)
        train_run(recipe, run, device="cpu", events=_SlowOrStopInTheFinalModel(slow, True))
    assert checkpoint_steps(run)[-1][0] == whole.step and not (run / "summary.json").exists()
    for overrides in ([], ["train.average_last=1"]):  # a changed setting writes the final model again
        resumed = train_run(load_recipe(run / "recipe.yaml", overrides), run, device="cpu", resume=True,
                            events=_StopInEvaluation(None))
        assert resumed.step == whole.step and not resumed.interrupted, overrides
        again = json.loads((run / "summary.json").read_text())
        assert again["steps"] == whole.step and again["stopped"].startswith(stop), again["stopped"]
        if not overrides:
            got, want = load_file(run / "model.safetensors"), load_file(tmp_path / "whole" / "model.safetensors")
            assert all(torch.equal(got[k], want[k]) for k in want)


def test_a_run_extended_past_its_end_evaluates_and_averages_as_the_longer_run(root: Path, tmp_path: Path) -> None:
    """A run extended past its end (train.max_steps raised on resume): a 12-step run's checkpoint at its end, off
    the schedule of every 5 steps, stayed among the checkpoints and was averaged into the 20-step model; a 15-step
    run's end, an evaluation step of the longer run, was evaluated as the final model only, so the extended run
    never evaluated it (nor kept it as best.safetensors). Both extended runs now end as the 20-step run does,
    uninterrupted: its checkpoints, evaluations, best and final model."""
    from tfm_cli.training.trainer import train as train_run

    recipe = _evaluating_recipe(root, tmp_path, "extend", max_steps=20, keep_last=4, average_last=4)
    train_run(recipe, tmp_path / "whole", device="cpu", events=_StopInEvaluation(None))
    for first in (12, 15):
        run = tmp_path / f"from-{first}"
        short = load_recipe(tmp_path / "recipe.yaml", [f"train.max_steps={first}"])
        train_run(short, run, device="cpu", events=_StopInEvaluation(None))
        extended = load_recipe(run / "recipe.yaml", ["train.max_steps=20"])
        train_run(extended, run, device="cpu", resume=True, events=_StopInEvaluation(None))
        assert [s for s, _ in checkpoint_steps(run)] == [5, 10, 15, 20]
        for name in ("model.safetensors", "best.safetensors"):
            got, want = load_file(run / name), load_file(tmp_path / "whole" / name)
            assert all(torch.equal(got[k], want[k]) for k in want), (first, name)

        def evaluations(folder: Path) -> list[int]:
            lines = (folder / "metrics.jsonl").read_text().splitlines()
            return [r["step"] for r in map(json.loads, lines) if r["kind"] == "eval"]

        assert evaluations(run) == evaluations(tmp_path / "whole") == [5, 10, 15, 20], first  # the last step too

        # and its train records after the first end: the record at step 15 averages steps 11-15, as the longer run's
        # does (the 12-step run's end logged 11-12 and saved no sums of them: the extended record covered 13-15)
        def train_records(folder: Path, after: int) -> dict[int, float]:
            lines = (folder / "metrics.jsonl").read_text().splitlines()
            return {r["step"]: r["loss"] for r in map(json.loads, lines) if r["kind"] == "train" and r["step"] > after}

        assert train_records(run, first) == train_records(tmp_path / "whole", first) and train_records(run, first), first


def test_an_old_checkpoint_that_may_not_be_deleted_does_not_stop_the_run(copy: Path, monkeypatch) -> None:
    """An old checkpoint made immutable (`chattr +i`) or another user's: the prune after a save raised, and the run
    stopped with "Operation not permitted / check the path, its permissions and the free space". It is kept now,
    said once, the others are pruned as ever, and the run goes on to its end."""
    from tfm_cli.training import resume_recipe
    from tfm_cli.training import train as train_in_process
    from tfm_cli.training.trainer import TrainEvents

    locked = checkpoint_path(copy, 5)
    unlink = Path.unlink

    def refused(self, missing_ok=False):
        if self == locked:
            raise PermissionError(1, "Operation not permitted", str(self))
        return unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", refused)

    class Events(TrainEvents):
        def __init__(self) -> None:
            self.said: list[str] = []

        def message(self, text: str) -> None:
            self.said.append(text)

    events = Events()
    result = train_in_process(resume_recipe(copy, ["train.max_steps=20", "train.save_every=5", "train.keep_last=2"]), copy,
                              device="cpu", resume=True, events=events)
    assert result.step == 20 and not result.interrupted and (copy / "model.safetensors").is_file()
    warned = [line for line in events.said if line.startswith("warning: an older checkpoint's file could not be deleted")]
    assert len(warned) == 1 and f"({locked}: Operation not permitted): it is kept, and the run goes on" in warned[0]  # once
    # the others are pruned all the same: keep_last still holds for what may be deleted
    assert [step for step, _ in checkpoint_steps(copy)] == [5, 15, 20]


@pytest.mark.parametrize("failure", ["full disk", "latex"])
def test_the_curves_are_drawn_before_the_summary_marks_the_run_finished(root: Path, tmp_path: Path, monkeypatch, failure: str) -> None:
    """summary.json was written first: a stop between the two (a kill soak's Ctrl-C) left the run without
    curves.png for good, its resume finding nothing to do. A chart that cannot be written (a full disk, a
    matplotlibrc asking for LaTeX where there is none) is a warning, not the end of a run whose final model is
    written (nor a run left unfinished, every resume failing the same way)."""
    import errno

    from tfm_cli.training import train as train_in_process
    from tfm_cli.training import trainer

    summary_there: list[bool] = []
    error, why = {
        "full disk": (OSError(errno.ENOSPC, "No space left on device"), "No space left on device"),
        "latex": (RuntimeError("Failed to process string with tex because latex could not be found"), "Failed to process"),
    }[failure]

    def full_disk(run_dir: Path, *args, **kwargs) -> None:
        summary_there.append((Path(run_dir) / "summary.json").exists())
        raise error

    said: list[str] = []

    class Events(trainer.TrainEvents):
        def message(self, text: str) -> None:
            said.append(text)

    monkeypatch.setattr(trainer, "write_curves_png", full_disk)
    out = tmp_path / "run"
    result = train_in_process(load_recipe(root / "recipe.yaml"), out, device="cpu", events=Events())
    assert summary_there == [False]
    assert json.loads((out / "summary.json").read_text())["steps"] == result.step
    assert any(m.startswith(f"warning: curves.png not written ({why}") and m.endswith(f"`tfm train --curves {out}` draws them")
               for m in said), said


def test_a_trainer_state_that_is_not_a_file_is_named_and_a_dry_run_says_what_a_resume_passes_over(copy: Path) -> None:
    """A folder (or a pipe) where the newest trainer state belongs was passed over as a missing state, and a
    `--dry-run` of the resume said nothing of the checkpoint it would pass over (the resume itself says it)."""
    newest = checkpoint_path(copy, 10)
    state_path(newest).unlink()
    proc = train("--resume", str(copy), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "checkpoint(s) at step 10 have no trainer state (the run stopped while saving): resuming from step 5" in proc.stderr
    state_path(newest).mkdir()
    before = snapshot(copy)
    for extra in (["--dry-run"], []):
        proc = train("--resume", str(copy), *extra)
        error_line(proc, f"{state_path(newest)} is not a regular file (a directory, a pipe or a broken link)")
        assert "hint: put the trainer state back there, or move that away to resume from the checkpoint before" in proc.stderr
    assert snapshot(copy) == before


def test_a_checkpoint_whose_model_config_is_damaged_is_one_line_on_resume(copy: Path) -> None:
    """The config a checkpoint's metadata carries, not JSON or nested too deeply, ended a resume (and its dry run)
    in a traceback, where translating the same file says it in one line."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    weights = checkpoint_path(copy, 10)
    with safe_open(str(weights), "pt") as f:
        metadata = dict(f.metadata())
    tensors = load_file(weights)
    for config in ("[" * 100_000, "{not json"):
        save_file(tensors, str(weights), metadata={**metadata, "config": config})
        for extra in (["--dry-run"], []):
            proc = train("--resume", str(copy), "train.max_steps=12", *extra)
            error_line(proc, f"{weights}: invalid model config in metadata")


def test_a_trainer_state_of_another_model_is_refused(root: Path, copy: Path, tmp_path: Path) -> None:
    """A step-N.state.pt copied from a run of another model (another d_model) was loaded without a check: the
    resume crashed with a segmentation fault, or trained on with Adam moments of the wrong shapes, and its dry run
    passed. Both refuse it now, naming the file, and the run is left as it was."""
    other = tmp_path / "wider"
    proc = train(str(root / "recipe.yaml"), f"tokenizer.path={copy / 'tokenizer.json'}", "model.d_model=48",
                 "train.max_steps=10", "--out", str(other))
    assert proc.returncode == 0, proc.stderr
    shutil.copy(state_path(checkpoint_path(other, 10)), state_path(checkpoint_path(copy, 10)))
    before = snapshot(copy)
    for extra in (["--dry-run"], []):
        proc = train("--resume", str(copy), "train.max_steps=12", *extra)
        error_line(proc, f"{state_path(checkpoint_path(copy, 10))} is the trainer state of another model: it holds "
                         "Adam's moments of shape")
        assert "for a parameter of shape" in proc.stderr and "put back the state saved with" in proc.stderr
        assert snapshot(copy) == before


def test_a_run_inside_another_run_s_folders_is_refused(root: Path, copy: Path) -> None:
    """`--out RUN/checkpoints` trained a whole run there: `tfm translate --model RUN/checkpoints` then took it for a
    run, and the outer run's checkpoints folder held another run's files (`tfm export` refuses such an --out)."""
    before = snapshot(copy)
    for out, said in ((copy / "checkpoints", f"is the checkpoints/ folder of the run {copy}"),
                      (copy / "tensorboard" / "sub", f"is inside the tensorboard/ folder of the run {copy}")):
        for extra in (["--dry-run"], []):
            proc = train(str(root / "recipe.yaml"), "--out", str(out), *extra)
            error_line(proc, f"{out} {said}")
            assert "hint: choose an --out outside that run" in proc.stderr
    assert snapshot(copy) == before


def test_a_resume_of_a_finished_run_that_lowers_keep_last_prunes(copy: Path) -> None:
    """`--resume RUN train.keep_last=1 train.average_last=1` of a finished run wrote its final model again, but
    saved nothing that prunes: both checkpoints stayed, where keep_last said one."""
    assert [s for s, _ in checkpoint_steps(copy)] == [5, 10]
    proc = train("--resume", str(copy), "train.keep_last=1", "train.average_last=1")
    assert proc.returncode == 0, proc.stderr
    assert [s for s, _ in checkpoint_steps(copy)] == [10] and not state_path(checkpoint_path(copy, 5)).exists()
    assert read_metadata(copy / "model.safetensors")["step"] == "10"
