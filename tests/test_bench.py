"""`tfm bench`: each subcommand on a tiny configuration through the installed CLI, the JSON it documents, the
figures checked against independent references (explicit attention in float64, torch's FLOP counter), the
gate on constructed regressions, and --compare with Hugging Face MarianMT where transformers is installed and
CTranslate2 (the benchmarked model converted) where ctranslate2 is, or the note saying why a peer was left out.

No test asserts a speed: these machines are shared and noisy. Timings only have to exist and be positive.
"""

from __future__ import annotations

import copy
import gzip
import itertools
import json
import math
import os
import re
import shlex
import shutil
import signal
import tempfile
from pathlib import Path

import pytest
import torch
import yaml
from clitools import has_module, start_tfm, tfm, tiny_recipe, wait_until

from tfm_cli.bench.common import fit_exponent, percentile, summarize
from tfm_cli.bench.gate import compare, load_baseline, parse_tolerance
from tfm_cli.errors import TfmError

REPO = Path(__file__).resolve().parents[1]
CORPORA = REPO / "tfm_cli" / "corpora" / "tatoeba-fr-en"
ENV_KEYS = {"tfm", "torch", "python", "device", "device_name", "cpu", "cpu_capability", "cpu_native_bf16", "cpu_fast_bf16", "threads", "dtype"}


@pytest.fixture(scope="module")
def recipe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bench")
    with gzip.open(CORPORA / "train.tsv.gz", "rt", encoding="utf-8") as f:
        (root / "train.tsv").write_text("".join(itertools.islice(f, 2000)), encoding="utf-8")
    path = root / "bench.yaml"
    train = {"max_tokens": 400, "warmup_steps": 10, "log_every": 2}
    text = tiny_recipe("bench", data={"train": str(root / "train.tsv"), "dev": None}, model={"n_dec_layers": 2}, train=train)
    path.write_text(text, encoding="utf-8")
    return path


# ---- statistics --------------------------------------------------------------------------------------------


def test_fit_exponent_recovers_a_power_law() -> None:
    xs = [64, 128, 256, 512, 1024]
    assert fit_exponent(xs, [3 * x**2 for x in xs]) == pytest.approx(2.0)
    assert fit_exponent(xs, [0.5 * x for x in xs]) == pytest.approx(1.0)
    assert fit_exponent([64], [1.0]) is None


def test_summary_statistics() -> None:
    s = summarize([1.0, 2.0, 4.0])
    assert (s["median"], s["min"], s["max"], s["n"]) == (2.0, 1.0, 4.0, 3)
    assert s["spread"] == pytest.approx(1.5)
    assert percentile([10, 20, 30, 40, 50], 50) == 30
    assert percentile([10, 20, 30, 40, 50], 95) == pytest.approx(48)


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="the peak resident set is reset on Linux only")
def test_cpu_peak_memory_is_the_phase_s_own() -> None:
    """On the CPU each phase's peak RSS was the process's peak so far (it never went down): the trainer, and HF
    MarianMT after it, were charged with the model step's peak. peak_memory_start now starts a new peak."""
    import mmap

    from tfm_cli.bench.common import peak_memory_mb, peak_memory_start

    cpu = torch.device("cpu")
    peak_memory_start(cpu)
    before = peak_memory_mb(cpu)["peak_rss_mb"]
    block = mmap.mmap(-1, 256 * 2**20)  # an earlier phase's 256 MB, touched, then given back
    for i in range(0, len(block), mmap.PAGESIZE):
        block[i] = 1
    assert peak_memory_mb(cpu)["peak_rss_mb"] > before + 200
    block.close()
    peak_memory_start(cpu)
    assert peak_memory_mb(cpu)["peak_rss_mb"] < before + 100


# ---- attention ---------------------------------------------------------------------------------------------


def test_attention_json_and_correctness() -> None:
    proc = tfm("bench", "attention", "--lengths", "16,32,64", "--batch", "2", "--heads", "2", "--d-k", "8",
               "--mask", "padding", "--mask", "causal", "--repeat", "2", "--device", "cpu", "--json")
    result = json.loads(proc.stdout)
    assert result["kind"] == "attention" and ENV_KEYS <= set(result["environment"])
    impls = result["settings"]["impls"]
    assert {"naive", "tfm", "sdpa-math", "sdpa-flash"} <= set(impls)
    assert len(result["records"]) == len(impls) * 3 * 2 * 2  # impls x lengths x passes x masks
    assert len({r["id"] for r in result["records"]}) == len(result["records"])
    for r in result["records"]:
        assert r["status"] == "ok", r
        assert 0 < r["min_ms"] <= r["median_ms"] <= r["max_ms"] and r["flops_per_s"] > 0
        assert r["max_abs_diff"] < 1e-5, r  # every implementation computes the formula
        expected_mb = 2 * 2 * r["length"] ** 2 * 4 / 2**20 if r["impl"] in ("naive", "sdpa-math") else 0.0
        assert r["lxl_matrix_mb"] == pytest.approx(expected_mb)
    exponents = result["summary"]["exponents"]
    assert len(exponents) == len(impls) * 2 * 2 and all(math.isfinite(e["exponent"]) for e in exponents)


def test_attention_in_bf16_times_the_path_the_model_runs_and_counts_its_matrices(monkeypatch) -> None:
    """In bf16 the `tfm` row called the model's attention without autocast, so on CPU at <= 128 keys it timed an
    fp32 copy path the model never runs (3-8x slower than under autocast), and counted no L x L matrix, though it
    builds one there; `naive` and `sdpa-math`, which build theirs in fp32, were counted at bf16's 2 bytes."""
    import tfm_cli.bench.attention as bench
    from tfm_cli.model.transformer import CPU_SHORT_KEYS

    seen: list[tuple[torch.dtype, bool]] = []
    real = bench.attention

    def spy(q, k, v, mask=None, dropout_p=0.0, need_weights=False):
        if not need_weights:
            seen.append((q.dtype, torch.is_autocast_enabled("cpu")))
        return real(q, k, v, mask, dropout_p, need_weights)

    monkeypatch.setattr(bench, "attention", spy)
    short, long = 16, 2 * CPU_SHORT_KEYS
    result = bench.bench_attention(torch.device("cpu"), [short, long], batch=2, heads=2, d_k=8, dtype="bf16",
                                   passes=["forward"], impls=["naive", "tfm", "sdpa-math", "sdpa-flash"], repeat=1)
    assert seen and all(dtype == torch.bfloat16 and autocast for dtype, autocast in seen), seen
    mb = {(r["impl"], r["length"]): r["lxl_matrix_mb"] for r in result["records"]}
    size = {n: 2 * 2 * n * n / 2**20 for n in (short, long)}  # B H L L elements, in MiB per byte
    assert mb == {
        ("naive", short): 4 * size[short], ("naive", long): 4 * size[long],
        ("sdpa-math", short): 4 * size[short], ("sdpa-math", long): 4 * size[long],
        ("tfm", short): 2 * size[short], ("tfm", long): 0.0,  # the explicit formula under autocast, then SDPA
        ("sdpa-flash", short): 0.0, ("sdpa-flash", long): 0.0,
    }
    assert all(r["status"] == "ok" for r in result["records"]), result["records"]


def test_an_implementation_whose_output_is_wrong_is_no_figure(tmp_path: Path) -> None:
    """The float64 check was recorded (`max_abs_diff`) and never applied: a kernel returning zeros, 1.09 from the
    formula, was reported "ok" at 102-432 GFLOP/s with exit 0 (README: "Before any figure is trusted ...").
    Now its records are "wrong" (times kept, no FLOP/s, out of the growth fit), said, and the command exits 1."""
    (tmp_path / "sitecustomize.py").write_text(
        "import torch, tfm_cli.bench.attention as attention\n"
        "right = attention._attention_fn\n"
        "attention._attention_fn = lambda impl: (lambda q, k, v, mask: torch.zeros_like(q)) if impl == 'tfm' else right(impl)\n"
    )
    args = ["bench", "attention", "--lengths", "16,32", "--batch", "1", "--heads", "2", "--d-k", "8", "--repeat", "1",
            "--warmup", "0", "--forward-only", "--impl", "naive", "--impl", "tfm", "--device", "cpu", "--json"]
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    proc = tfm(*args, env_extra={"PYTHONPATH": path}, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    records = {r["id"]: r for r in json.loads(proc.stdout)["records"]}
    for length in (16, 32):
        wrong, right = records[f"attention/tfm/padding/forward/L={length}"], records[f"attention/naive/padding/forward/L={length}"]
        assert wrong["status"] == "wrong" and wrong["max_abs_diff"] > 0.1 and "flops_per_s" not in wrong, wrong
        assert "from the formula computed in float64" in wrong["reason"] and wrong["median_ms"] > 0
        assert right["status"] == "ok" and right["max_abs_diff"] < 1e-5
    exponents = json.loads(proc.stdout)["summary"]["exponents"]
    assert [e["impl"] for e in exponents] == ["naive"]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "2 figure(s) came from an implementation whose output is not attention's" in errors[0]
    assert "e.g. attention/tfm/padding/forward/L=16: its output is" in errors[0]
    table = tfm(*args[:-1], env_extra={"PYTHONPATH": path}, check=False)  # the tables say it too
    assert table.returncode == 1 and "tfm\tpadding\tfwd\twrong\twrong\t-" in table.stdout, table.stdout


def test_attention_table_when_piped() -> None:
    proc = tfm("bench", "attention", "--lengths", "16,32", "--batch", "1", "--heads", "1", "--d-k", "8",
               "--repeat", "1", "--forward-only", "--impl", "naive", "--impl", "tfm", "--device", "cpu")
    times, rates = proc.stdout.split("\n\n")  # two tables, a blank line between them
    lines = times.splitlines()
    assert lines[0].split("\t") == ["impl", "mask", "pass", "L=16", "L=32", "exponent"]
    assert [line.split("\t")[0] for line in lines[1:]] == ["naive", "tfm"]
    assert rates.splitlines()[0].split("\t")[:5] == ["impl", "mask", "pass", "L", "GFLOP/s"]
    assert "measured on" in proc.stderr and " thread" in proc.stderr  # "1 thread", "2 threads"


def test_attention_rates_table_keeps_a_pass_skipped_at_the_longest_length(tmp_path: Path) -> None:
    """The rates table showed each implementation at its longest length over all passes: where fwd+bwd (twice the
    memory) was skipped at a length the forward pass measured, naive's fwd+bwd row was left out of the table. The
    memory budget is made small here (sitecustomize) so that naive's fwd+bwd fits at L=16 only."""
    (tmp_path / "sitecustomize.py").write_text(
        "import tfm_cli.bench.attention as attention\n"
        "attention.memory_budget_bytes = lambda device: 20000\n"  # naive L=32: fwd 16,416 bytes, fwd+bwd 32,800
    )
    proc = tfm("bench", "attention", "--lengths", "16,32", "--batch", "1", "--heads", "1", "--d-k", "8", "--repeat", "1",
               "--warmup", "0", "--impl", "naive", "--impl", "tfm", "--device", "cpu", env_extra={"PYTHONPATH": str(tmp_path)})
    times, rates = proc.stdout.split("\n\n")
    assert "naive\tpadding\tfwd+bwd\t" in times and "\tskipped\t" in times  # fwd+bwd skipped at L=32
    rows = {tuple(line.split("\t")[:4]) for line in rates.splitlines()[1:]}
    assert rows == {
        ("naive", "padding", "forward", "32"), ("naive", "padding", "forward+backward", "16"),
        ("tfm", "padding", "forward", "32"), ("tfm", "padding", "forward+backward", "32"),
    }, rates


def test_attention_bad_options() -> None:
    proc = tfm("bench", "attention", "--lengths", "16,x", check=False)
    assert proc.returncode == 2 and "--lengths" in proc.stderr
    proc = tfm("bench", "attention", "--impl", "sdpa-cudnn", "--device", "cpu", check=False)
    assert proc.returncode == 2 and "'sdpa-cudnn' runs on CUDA only; on cpu choose from: naive, tfm," in proc.stderr
    proc = tfm("bench", "attention", "--impl", "bogus", "--device", "cpu", check=False)  # not "not available on cpu"
    assert proc.returncode == 2 and "'bogus' is not one of: naive, tfm," in proc.stderr and "sdpa-cudnn" in proc.stderr
    proc = tfm("bench", "attention", "--dtype", "fp16", "--device", "cpu", check=False)
    assert proc.returncode == 1 and "fp16 needs a CUDA device" in proc.stderr and "Traceback" not in proc.stderr


def test_attention_skips_lengths_whose_inputs_do_not_fit() -> None:
    """Lengths (or batches) whose Q, K, V alone would not fit are skipped like the L x L matrices that do not: their
    allocation was a traceback ("can't allocate memory", or an integer overflow for a 20-digit length). A run
    that measured nothing at all exits 1 (it passed a CI step), after printing what it skipped and why."""
    for extra in (["--lengths", f"16,{10**8}"], ["--lengths", "16", "--batch", str(10**8)], ["--lengths", str(10**20)]):
        proc = tfm("bench", "attention", *extra, "--heads", "1", "--d-k", "8", "--repeat", "1", "--warmup", "0",
                   "--forward-only", "--impl", "tfm", "--impl", "naive", "--device", "cpu", "--json", check=False)
        nothing = "16," not in extra[1]
        assert proc.returncode == (1 if nothing else 0), proc.stderr
        assert ("Error: nothing was measured: all 2 figure(s) were skipped or unsupported" in proc.stderr) == nothing
        # with --json nothing is printed above: the reasons are the records'
        assert ("(each record of the JSON says why)" in proc.stderr) == nothing and "reasons above" not in proc.stderr
        records = json.loads(proc.stdout)["records"]
        huge = [r for r in records if r["length"] == 10**8 or r["length"] == 10**20 or "--batch" in extra]
        assert huge and all(r["status"] == "skipped" and "GiB" in r["reason"] for r in huge), records
        # in GiB with thousands separators, as the other memory messages: "needs ~1788140869.3 GiB" was unreadable
        assert all(re.fullmatch(r"needs ~\d{1,3}(,\d{3})*\.\d GiB of \d{1,3}(,\d{3})*\.\d GiB", r["reason"]) for r in huge), records
        assert all(r["status"] == "ok" for r in records if r not in huge)


# ---- train -------------------------------------------------------------------------------------------------


def test_train_json(recipe: Path) -> None:
    proc = tfm("bench", "train", str(recipe), "--steps", "2", "--warmup", "1", "--device", "cpu", "--json")
    result = json.loads(proc.stdout)
    assert result["kind"] == "train" and ENV_KEYS <= set(result["environment"])
    assert ("MFU above 100%" in proc.stderr) == any(r["mfu"] > 1 for r in result["records"])
    phases = {r["phase"]: r for r in result["records"]}
    assert set(phases) == {"model step", "trainer"}
    for r in phases.values():
        assert r["tgt_tokens_per_s"] > 0 and r["steps"] == 2 and r["step_ms"] > 0
        assert 0 < r["mfu"] and r["flops_per_s"] > 0 and r["peak_rss_mb"] > 0
    s = result["summary"]
    assert 0 <= s["padding_share"] < 1 and s["flops_per_tgt_token"] > 0 and s["tgt_tokens_per_step"] > 0
    assert s["trainer_vs_model_step"] == pytest.approx(phases["trainer"]["tgt_tokens_per_s"] / phases["model step"]["tgt_tokens_per_s"])
    # the trainer measured its own wait for batches: a share of its step time, and in the summary
    assert 0 < phases["trainer"]["data_wait_share"] < 1 and s["trainer_data_wait_share"] == phases["trainer"]["data_wait_share"]
    # and the time inside its model step: a share of its wall time, which holds the wait besides
    inside = phases["trainer"]["model_step_share"]
    assert 0 < inside < 1 and inside + phases["trainer"]["data_wait_share"] <= 1
    assert s["trainer_model_step_share"] == inside


def test_train_says_when_mfu_is_above_the_peak(recipe: Path, tmp_path: Path) -> None:
    """A matmul peak measured while the cores were busy gave "MFU 164%" without a word; here the peak is made
    tiny (sitecustomize, before tfm imports it) so that every phase is above it."""
    (tmp_path / "sitecustomize.py").write_text(
        "import tfm_cli.bench.common as common\n"
        "common.matmul_peak = lambda device, dtype, *a, **k: {'flops_per_s': 1.0}\n"
    )
    proc = tfm("bench", "train", str(recipe), "--steps", "1", "--warmup", "0", "--device", "cpu", "--model-step-only",
               "--json", env_extra={"PYTHONPATH": str(tmp_path)})
    assert json.loads(proc.stdout)["records"][0]["mfu"] > 1
    said = [line for line in proc.stderr.splitlines() if "MFU above 100%" in line]
    assert len(said) == 1 and "model step" in said[0] and "quiet machine" in said[0], proc.stderr


def test_train_gate_refuses_a_baseline_of_another_sentence_length_or_model_variant(recipe: Path, tmp_path: Path) -> None:
    """A baseline measured with data.max_len=32, post-norm, tied embeddings passed the gate against a run with
    data.max_len=8, pre-norm and untied embeddings: other batches, another model, under the same ids."""
    args = ["bench", "train", str(recipe), "--steps", "1", "--warmup", "0", "--device", "cpu", "--model-step-only"]
    measured = json.loads(tfm(*args, "--json").stdout)
    assert measured["settings"]["max_len"] == 32
    assert {k: measured["settings"]["model"][k] for k in ("norm", "positions", "tie_embeddings")} == {
        "norm": "post", "positions": "sinusoidal", "tie_embeddings": True}
    for r in measured["records"]:
        r["tgt_tokens_per_s"] = 1e-9  # a baseline any run beats: only the workload check can fail the gate
    (tmp_path / "base.json").write_text(json.dumps(measured))
    gate = ["--baseline", str(tmp_path / "base.json")]
    assert "gate: 1 figure(s) within 10%" in tfm(*args, *gate).stderr
    for override, said in (
        ("data.max_len=8", "max_len 32 -> 8"),
        ("model.norm=pre", "model.norm 'post' -> 'pre'"),
        ("model.tie_embeddings=false", "model.tie_embeddings True -> False"),
        # the batches timed (the seed shuffles them, --steps and --warmup pick them) and their cost were not compared
        ("model.dropout=0", "dropout 0.1 -> 0.0"),
        ("train.seed=7", "seed "),
        ("train.clip_norm=0.5", "clip_norm "),
        ("--steps=2", "steps 1 -> 2"),
        ("--warmup=1", "warmup 0 -> 1"),
    ):
        other = tfm(*args, override, *gate, check=False)
        assert other.returncode == 1 and "the baseline measured another workload" in other.stderr, other.stderr
        assert said in other.stderr and "Traceback" not in other.stderr
    assert measured["settings"]["compile"] is False
    compiled = copy.deepcopy(measured)  # train.compile=true times another step (without compiling here: edited)
    compiled["settings"]["compile"] = True
    (tmp_path / "compiled.json").write_text(json.dumps(compiled))
    other = tfm(*args, "--baseline", str(tmp_path / "compiled.json"), check=False)
    assert other.returncode == 1 and "the baseline measured another workload (compile True -> False)" in other.stderr
    older = copy.deepcopy(measured)  # a baseline written before the variant was recorded still compares
    for key in ("norm", "positions", "tie_embeddings"):
        del older["settings"]["model"][key]
    for key in ("max_len", "seed", "dropout", "attn_dropout", "clip_norm", "compile"):
        del older["settings"][key]
    (tmp_path / "older.json").write_text(json.dumps(older))
    assert "gate: 1 figure(s) within 10%" in tfm(*args, "--baseline", str(tmp_path / "older.json")).stderr


def test_train_gate_knows_a_corpus_by_its_content_not_its_path(recipe: Path, tmp_path: Path) -> None:
    """The gate compared the corpus path as typed: the same file named by a relative path was "another workload"
    (exit 1), and another corpus under the same relative path passed (290 vs 315 tokens a step)."""
    args = ["--steps", "1", "--warmup", "0", "--device", "cpu", "--model-step-only"]
    measured = json.loads(tfm("bench", "train", str(recipe), *args, "--json").stdout)  # the corpus by its absolute path
    (tmp_path / "base.json").write_text(json.dumps(measured))
    gate = ["--baseline", str(tmp_path / "base.json"), "--tolerance", "1000%"]
    relative = yaml.safe_load(recipe.read_text(encoding="utf-8"))
    relative["data"]["train"] = "train.tsv"
    (recipe.parent / "relative.yaml").write_text(yaml.safe_dump(relative), encoding="utf-8")
    same = tfm("bench", "train", "relative.yaml", *args, *gate, cwd=recipe.parent)
    assert "another workload" not in same.stderr and "gate: 1 figure(s) within 1000%" in same.stderr, same.stderr
    # (a tolerance of 100% or more passes any rate: said, as a test's way to keep noise out is no CI gate)
    assert "warning: --tolerance 1000% never fails a throughput figure" in same.stderr and "nothing can fail" in same.stderr
    other = tmp_path / "other"
    other.mkdir()
    with gzip.open(CORPORA / "train.tsv.gz", "rt", encoding="utf-8") as f:
        (other / "train.tsv").write_text("".join(itertools.islice(f, 3000, 5000)), encoding="utf-8")
    shutil.copy(recipe.parent / "relative.yaml", other / "relative.yaml")
    refused = tfm("bench", "train", "relative.yaml", *args, *gate, cwd=other, check=False)
    assert refused.returncode == 1 and "the baseline measured another workload (corpus_content " in refused.stderr, refused.stderr


@pytest.mark.parametrize("option", ["--steps", "--warmup"])
def test_train_refuses_more_steps_than_their_batches_could_fit(recipe: Path, option: str) -> None:
    """Every step's batches are prepared first: --steps 10**11 (or a 20-digit --warmup) built batches for hours
    and then ran out of memory, without a word. Refused at once, before a tokenizer is trained on the corpus."""
    proc = tfm("bench", "train", str(recipe), option, str(10**11), "--device", "cpu", "--model-step-only",
               check=False, timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.splitlines()[0]
    assert line.startswith("Error: ") and "100,000,000,000" in line and "GiB of batches" in line, proc.stderr
    assert "lower --steps and --warmup" in proc.stderr and "tokenizer:" not in proc.stderr


def test_train_times_every_step_of_a_recipe_with_a_time_budget(recipe: Path) -> None:
    """train.max_time ended the trainer phase after its first step: a KeyError traceback after the model step."""
    proc = tfm("bench", "train", str(recipe), "train.max_time=0.001s", "--steps", "2", "--warmup", "1", "--device", "cpu",
               "--json", check=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert {r["phase"]: r["steps"] for r in json.loads(proc.stdout)["records"]} == {"model step": 2, "trainer": 2}


def test_train_of_a_fine_tuning_recipe_uses_its_models_tokenizer(recipe: Path, tmp_path: Path) -> None:
    """train.init_from: the bench trained a tokenizer of its own, and its trainer phase then refused it ("is not
    tokenizer.path"), with a hint that could not be followed; it times the run's vocabulary now, as tfm train trains."""
    run = tmp_path / "run"
    tfm("train", str(recipe), "tokenizer.vocab_size=350", "train.max_steps=1", "train.save_every=1", "train.average_last=1",
        "--out", str(run), "--device", "cpu")
    proc = tfm("bench", "train", str(recipe), f"train.init_from={run}", "--steps", "1", "--warmup", "0", "--device", "cpu",
               "--json", check=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["settings"]["model"]["vocab_size"] == json.loads((run / "config.json").read_text())["vocab_size"]


def test_train_interrupted_in_the_trainer_phase_stops(recipe: Path) -> None:
    """Ctrl-C in the trainer phase: the trainer returned (its step kept in the scratch run) and the bench went on
    to read step times it never recorded (a KeyError traceback); it stops as Ctrl-C anywhere else does."""
    from tfm_cli.bench.train import bench_train, recipe_tokenizer
    from tfm_cli.recipe import load_recipe

    def progress(phase: str, done: int, total: int) -> None:
        if phase == "trainer" and done == 1:
            raise KeyboardInterrupt  # where a Ctrl-C held over the step is raised: right after it

    loaded = load_recipe(recipe)
    with pytest.raises(KeyboardInterrupt):
        bench_train(loaded, torch.device("cpu"), recipe_tokenizer(loaded), steps=2, warmup=1, progress=progress)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_train_stopped_by_a_signal_removes_its_scratch_run(recipe: Path, tmp_path: Path, sig: int) -> None:
    """SIGTERM (a CI job's timeout, `kill`) killed the benchmark in its trainer phase and left the trainer's scratch
    run in the temporary directory; it now stops as Ctrl-C does: the scratch run removed, exit 128 + signal."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = start_tfm("bench", "train", str(recipe), "--steps", "200", "--warmup", "0", "--device", "cpu",  # the trainer phase: seconds
                     env_extra={"TMPDIR": str(scratch)})
    try:
        wait_until(proc, lambda: any(scratch.glob("tfm-bench-train-*/*")), "the trainer phase's scratch run", timeout=300)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig and b"Traceback" not in err, err.decode()
    assert list(scratch.glob("tfm-bench-train-*")) == []  # (torch may keep its own caches there)


def test_train_flops_match_torch_flop_counter() -> None:
    """The analytic FLOPs of bench train against torch's own count of the forward pass's matrix products."""
    from torch.utils.flop_counter import FlopCounterMode

    from tfm_cli.bench.train import sentence_flops
    from tfm_cli.model import ModelConfig, Transformer
    from tfm_cli.model.masks import padding_mask, target_mask

    config = ModelConfig(vocab_size=97, d_model=32, d_ff=48, n_heads=4, n_enc_layers=2, n_dec_layers=3, max_positions=64)
    model = Transformer(config).eval()
    src = torch.randint(4, 97, (1, 11))
    tgt = torch.randint(4, 97, (1, 7))
    counter = FlopCounterMode(display=False)
    # The explicit-math path (attention_maps), so that every product is a matmul the counter sees (it does not
    # count the CPU SDPA kernel); it runs the same projections, the full forward pass and the output layer.
    with counter, torch.no_grad():
        model.attention_maps(src, tgt, padding_mask(src, 0), target_mask(tgt, 0))
    assert sentence_flops(config, torch.tensor([11]), torch.tensor([7])) == counter.get_total_flops()


# ---- translate ---------------------------------------------------------------------------------------------


def test_translate_json(recipe: Path) -> None:
    result = json.loads(tfm(
        "bench", "translate", "--recipe", str(recipe), "--batch-sizes", "1,3", "--sentences", "6", "--src-len", "5",
        "--out-len", "7", "--beam", "2", "--device", "cpu", "--json",
    ).stdout)
    assert result["kind"] == "translate" and ENV_KEYS <= set(result["environment"])
    assert result["settings"]["model"]["d_model"] == 32 and result["settings"]["model"]["n_dec_layers"] == 2
    records = result["records"]
    assert {(r["engine"], r["mode"], r["cache"], r["batch_size"]) for r in records} == {
        ("tfm", m, c, b) for m in ("beam", "greedy") for c in (True, False) for b in (1, 3)
    }
    for r in records:
        assert r["tokens_per_s"] == pytest.approx(r["sentences_per_s"] * 7)
        assert 0 < r["latency_p50_ms"] <= r["latency_p95_ms"]
        assert r["batches"] == (6 if r["batch_size"] == 1 else 2)
    against = {(x["against"], x["mode"], x["batch_size"]) for x in result["summary"]["ratios"]}
    assert against == {("tfm without cache", m, b) for m in ("beam", "greedy") for b in (1, 3)}
    # the table shows how many batches each row's percentiles are over, and says when that is few; the ratios which
    # way round they are (a p95 of two batches was printed as any other)
    table = tfm("bench", "translate", "--recipe", str(recipe), "--batch-sizes", "1,3", "--sentences", "6", "--src-len", "5",
                "--out-len", "7", "--device", "cpu", "--greedy-only")
    header = next(line for line in table.stdout.splitlines() if line.startswith("engine"))
    assert header.split("\t") == ["engine", "mode", "cache", "batch", "sent/s", "tok/s", "p50 ms", "p95 ms", "batches"]
    assert {line.split("\t")[-1] for line in table.stdout.splitlines() if line.startswith("tfm\t")} == {"6", "2"}
    assert "p50 and p95 are over the batches each row timed (the last column; 2 at the fewest)" in table.stderr
    assert "against\tmode\tbatch\ttfm/against\n" in table.stdout  # (a plain table has no title)


def test_translate_random_weights_have_the_recipe_s_tokenizer_vocabulary(recipe: Path, tmp_path: Path) -> None:
    """A recipe with tokenizer.path got a model of tokenizer.vocab_size (its default, 37,000) instead of the
    tokenizer's vocabulary, which `tfm train` uses: another output projection, silently; a missing file passed."""
    from tfm_cli.bench.train import recipe_tokenizer
    from tfm_cli.recipe import load_recipe

    tokenizer = recipe_tokenizer(load_recipe(recipe))
    tokenizer.save(tmp_path / "tokenizer.json")
    text = recipe.read_text(encoding="utf-8").replace("  vocab_size: 400\n", f"  path: {tmp_path / 'tokenizer.json'}\n")
    (tmp_path / "with-path.yaml").write_text(text, encoding="utf-8")
    args = ["bench", "translate", "--recipe", str(tmp_path / "with-path.yaml"), "--batch-sizes", "1", "--sentences", "1",
            "--src-len", "3", "--out-len", "3", "--greedy-only", "--cache-only", "--device", "cpu"]
    result = json.loads(tfm(*args, "--json").stdout)
    assert result["settings"]["model"]["vocab_size"] == tokenizer.vocab_size
    (tmp_path / "tokenizer.json").unlink()
    missing = tfm(*args, check=False)
    assert missing.returncode == 1 and "tokenizer.json does not exist" in missing.stderr and "Traceback" not in missing.stderr


def test_translate_outputs_shorter_than_their_sources(recipe: Path) -> None:
    """--out-len below --src-len (it was refused: the maximum output length is source length + an offset, and
    the offset may be negative inside the benchmark); every output is checked to be exactly --out-len long."""
    result = json.loads(tfm(
        "bench", "translate", "--recipe", str(recipe), "--batch-sizes", "2", "--sentences", "2", "--src-len", "9",
        "--out-len", "3", "--beam", "2", "--device", "cpu", "--json",
    ).stdout)
    assert result["settings"]["src_len"] == 9 and result["settings"]["out_len"] == 3
    for r in result["records"]:
        assert r["tokens_per_s"] == pytest.approx(r["sentences_per_s"] * 3)


def test_translate_bad_options(recipe: Path) -> None:
    proc = tfm("bench", "translate", check=False)
    assert proc.returncode == 2 and "give a trained model (--model RUN) or a recipe" in proc.stderr
    proc = tfm("bench", "translate", "--model", "runs/x", "--recipe", str(recipe), check=False)  # was "give ... or ..."
    assert proc.returncode == 2 and "--model and --recipe exclude each other" in proc.stderr
    # the model's limits, named by option with the largest value (it was "src_len and out_len must stay below ...")
    proc = tfm("bench", "translate", "--recipe", str(recipe), "--src-len", "60", "--out-len", "70", "--device", "cpu", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "Error: --out-len 70 is longer than this model holds: at most 63 (its max_positions=64" in proc.stderr
    assert "hint: give --out-len 63 or less" in proc.stderr
    proc = tfm("bench", "translate", "--recipe", str(recipe), "--src-len", "64", "--device", "cpu", check=False)
    assert proc.returncode == 1 and "Error: --src-len 64 is longer than this model holds: at most 63" in proc.stderr
    # both at once (the second was said only once the first was mended)
    proc = tfm("bench", "translate", "--recipe", str(recipe), "--src-len", "64", "--out-len", "70", "--device", "cpu", check=False)
    assert "Error: --src-len 64 and --out-len 70 are longer than this model holds: at most 63" in proc.stderr, proc.stderr
    assert "hint: give --src-len 63 and --out-len 63 or less" in proc.stderr
    proc = tfm("bench", "translate", "--recipe", str(recipe), "--beam", "401", "--device", "cpu", check=False)
    assert proc.returncode == 1 and "Error: --beam 401 is wider than the model's vocabulary (400 tokens)" in proc.stderr


def test_translate_refuses_a_last_batch_smaller_than_the_others(recipe: Path) -> None:
    """--sentences 10 --batch-sizes 8 timed a batch of 8 and one of 2, and reported the median of the two as the
    p50 latency of a batch of 8; the default 64 sentences with --batch-sizes 1,24 ended in a batch of 16."""
    from tfm_cli.bench.translate import bench_translate
    from tfm_cli.model import ModelConfig, Transformer

    for args, said in (
        (["--sentences", "10", "--batch-sizes", "8"], "10 is not a multiple of the batch size 8: its last batch would hold 2"),
        (["--batch-sizes", "1,24"], "use --sentences 72"),
        (["--sentences", "10", "--batch-sizes", "2,4"], "use --sentences 12"),
    ):
        proc = tfm("bench", "translate", "--recipe", str(recipe), "--device", "cpu", *args, check=False)
        flat = " ".join(proc.stderr.replace("│", " ").split())  # the usage error's box wraps the line
        assert proc.returncode == 2 and "--sentences" in flat and said in flat and "Traceback" not in flat, proc.stderr
    model = Transformer(ModelConfig(vocab_size=16, d_model=8, d_ff=16, n_heads=2, n_enc_layers=1, n_dec_layers=1))
    with pytest.raises(ValueError, match="sentences=3 is not a multiple of the batch size 2"):
        bench_translate(model, torch.device("cpu"), batch_sizes=(1, 2), sentences=3, src_len=2, out_len=2)


# ---- the gate ----------------------------------------------------------------------------------------------


def _result() -> dict:
    return {
        "kind": "translate",
        "environment": {"device_name": "cpu"},
        "settings": {"sentences": 64},
        "records": [
            {"id": "translate/tfm/beam/cache/batch=8", "sentences_per_s": 100.0, "latency_p50_ms": 50.0},
            {"id": "translate/tfm/greedy/cache/batch=8", "sentences_per_s": 300.0, "latency_p50_ms": 20.0},
        ],
    }


def test_a_change_of_exactly_the_tolerance_passes_whatever_the_rounding() -> None:
    """`(0.33 - 0.3) / 0.3` is 0.10000000000000009: a 10% slower time failed a 10% gate ("+10.0%, tolerance 10%"),
    while 100 -> 110 passed. The README says a figure fails beyond the tolerance."""
    for before, after, figure in ((0.3, 0.33, "latency_p50_ms"), (7.0, 7.7, "latency_p50_ms"), (100.0, 110.0, "latency_p50_ms"),
                                  (7.0, 6.3, "sentences_per_s"), (3.0, 2.7, "sentences_per_s")):
        base, now = _result(), _result()
        base["records"][0][figure], now["records"][0][figure] = before, after
        assert compare(now, base, 0.1)["regressions"] == [], (before, after)
        now["records"][0][figure] = after * (1.0001 if figure == "latency_p50_ms" else 0.9999)  # just beyond
        assert [r["figure"] for r in compare(now, base, 0.1)["regressions"]] == [figure], (before, after)


def test_gate_library() -> None:
    base = _result()
    assert compare(base, base, 0.1)["regressions"] == []
    slower = copy.deepcopy(base)
    slower["records"][0]["sentences_per_s"] = 85.0  # -15%
    slower["records"][1]["latency_p50_ms"] = 21.0  # +5%: within 10%
    gate = compare(slower, base, 0.1)
    assert [(r["id"], r["figure"]) for r in gate["regressions"]] == [("translate/tfm/beam/cache/batch=8", "sentences_per_s")]
    assert gate["regressions"][0]["change"] == pytest.approx(-0.15)
    assert compare(slower, base, 0.2)["regressions"] == []
    faster = copy.deepcopy(base)
    faster["records"][0]["sentences_per_s"] = 500.0
    faster["records"][0]["latency_p50_ms"] = 1.0
    assert compare(faster, base, 0.0)["regressions"] == []
    missing = copy.deepcopy(base)
    del missing["records"][1]
    assert compare(missing, base, 0.1)["only_in_baseline"] == ["translate/tfm/greedy/cache/batch=8"]
    with pytest.raises(TfmError, match="baseline is a benchmark of translate"):
        compare({**base, "kind": "train"}, base, 0.1)
    assert parse_tolerance("10%") == pytest.approx(0.1) and parse_tolerance("0.25") == 0.25
    with pytest.raises(TfmError, match="not a number"):
        parse_tolerance("ten")
    with pytest.raises(TfmError, match=r"'10' is a share of 1000%: a number without % is a share"):
        parse_tolerance("10")  # 1000%: meant as 10%
    assert parse_tolerance("1000%") == pytest.approx(10.0)  # the documented maximum was refused as out of range
    with pytest.raises(TfmError, match=r"'1001%' is out of range: from 0% to 1000% \(without %: a share from 0 to 1\)"):
        parse_tolerance("1001%")
    with pytest.raises(TfmError, match=r"'5' is a share of 500%") as err:
        parse_tolerance("5")  # meant as 5%: the gate passed anything up to 6x slower
    assert "5%" in err.value.hint
    assert parse_tolerance("500%") == pytest.approx(5.0) and parse_tolerance("1") == 1.0
    for text in ("inf", "inf%", "-inf", "nan", "NaN%", "1e999"):  # "inf" was told to write "inf%"
        with pytest.raises(TfmError, match=re.escape(f"--tolerance {text!r} is not a finite number")) as err:
            parse_tolerance(text)
        assert err.value.hint == "write it as 10% or 0.1"


def test_gate_lists_peers_but_fails_on_tfm_figures_alone() -> None:
    """A peer's record (`peer`: HF MarianMT, CTranslate2 under --compare) that got slower is listed, not a
    regression: the gate failed CI when HF's speed changed. A baseline written before the mark still compares."""
    base = _result()
    base["records"].append({"id": "translate/hf-marian/beam/cache/batch=8", "sentences_per_s": 50.0, "latency_p50_ms": 90.0})
    now = copy.deepcopy(base)
    for r in now["records"]:
        r["peer"] = "hf-marian" in r["id"]
    now["records"][2].update(sentences_per_s=25.0, latency_p50_ms=180.0)  # the peer half as fast
    gate = compare(now, base, 0.1)
    assert gate["regressions"] == [] and gate["compared"] == 4
    assert [(p["figure"], p["change"], p["worse"]) for p in gate["peers"]] == [("sentences_per_s", -0.5, True), ("latency_p50_ms", 1.0, True)]
    now["records"][0]["sentences_per_s"] = 50.0  # tfm's own: still failed
    assert [r["id"] for r in compare(now, base, 0.1)["regressions"]] == ["translate/tfm/beam/cache/batch=8"]


def test_gate_ignores_the_beam_width_where_greedy_search_alone_was_measured() -> None:
    """`--greedy-only --beam 8` against a greedy-only baseline of beam 4 was refused as "another workload",
    though no greedy figure depends on the beam; where both sides measured beam search, it still is."""
    settings = {"model": "m", "sentences": 8, "src_len": 20, "out_len": 24, "precision": "fp32"}
    greedy = _result()
    del greedy["records"][0]
    before = {**greedy, "settings": {**settings, "beam": 4, "modes": ["greedy"]}}
    now = {**copy.deepcopy(greedy), "settings": {**settings, "beam": 8, "modes": ["greedy"]}}
    assert compare(now, before, 0.1)["compared"] == 2 and compare(before, now, 0.1)["regressions"] == []
    both = {**_result(), "settings": {**settings, "beam": 4, "modes": ["beam", "greedy"]}}
    wider = {**_result(), "settings": {**settings, "beam": 8, "modes": ["beam", "greedy"]}}
    with pytest.raises(TfmError, match=r"another workload \(beam 4 -> 8\)"):
        compare(wider, both, 0.1)


def test_gate_through_the_cli(tmp_path: Path) -> None:
    args = ["bench", "attention", "--lengths", "16,32", "--batch", "1", "--heads", "1", "--d-k", "8", "--repeat", "1",
            "--forward-only", "--impl", "naive", "--impl", "tfm", "--device", "cpu"]
    measured = json.loads(tfm(*args, "--json").stdout)
    impossible, generous = copy.deepcopy(measured), copy.deepcopy(measured)
    for r in impossible["records"]:
        r["median_ms"] = 1e-9  # a baseline no machine can match: every figure has regressed
    for r in generous["records"]:
        r["median_ms"] = 1e9
    (tmp_path / "impossible.json").write_text(json.dumps(impossible))
    (tmp_path / "generous.json").write_text(json.dumps(generous))
    failed = tfm(*args, "--baseline", str(tmp_path / "impossible.json"), "--tolerance", "10%", check=False)
    assert failed.returncode == 1
    assert "regression: attention/naive/padding/forward/L=16 median_ms" in failed.stderr
    assert failed.stderr.count("regression:") == 4
    fine = tfm(*args, "--baseline", str(tmp_path / "impossible.json"), "--tolerance", "0.5%", check=False)
    assert "tolerance 0.5%)" in fine.stderr  # as given, not rounded to "tolerance 0%"
    passed = tfm(*args, "--baseline", str(tmp_path / "generous.json"))
    assert "gate: 4 figure(s) within 10%" in passed.stderr
    gated = json.loads(tfm(*args, "--baseline", str(tmp_path / "generous.json"), "--json").stdout)
    assert gated["gate"]["regressions"] == [] and gated["gate"]["compared"] == 4
    # A bad baseline fails before anything is measured: here a length that would take minutes is never run.
    slow = ["bench", "attention", "--lengths", "8192", "--impl", "naive", "--device", "cpu", "--repeat", "50"]
    early = tfm(*slow, "--baseline", str(tmp_path / "nowhere.json"), check=False, timeout=60)
    assert early.returncode == 2 and early.stderr.splitlines() == [
        f"Error: Invalid value for --baseline: {tmp_path / 'nowhere.json'} does not exist; write one with "
        f"`{shlex.join(['tfm', *slow, '--json'])} > {tmp_path / 'nowhere.json'}`",
        "hint: see tfm bench attention --help",
    ]  # a usage error too, as a bad --tolerance: exit 1 is the gate's "a figure got worse"
    wrong = tfm(*slow, "--baseline", str(tmp_path / "generous.json"), "--tolerance", "lots", check=False, timeout=60)
    # a usage error, exit 2 as a bad --lengths: exit 1 is what a CI job reads as "a figure got worse"
    said = "Error: Invalid value for --tolerance: 'lots' is not a number; write it as 10% or 0.1"
    assert wrong.returncode == 2 and wrong.stderr.splitlines() == [said, "hint: see tfm bench attention --help"]
    alone = tfm(*slow, "--tolerance", "lots", check=False, timeout=60)  # without --baseline: not ignored either
    assert alone.returncode == 2 and alone.stderr.splitlines() == [said, "hint: see tfm bench attention --help"]
    (tmp_path / "translate.json").write_text(json.dumps({**generous, "kind": "translate"}))
    other = tfm(*slow, "--baseline", str(tmp_path / "translate.json"), check=False, timeout=60)
    assert other.returncode == 2 and "--baseline: " in other.stderr and "is a result of `tfm bench translate`, not of `tfm bench attention`" in other.stderr
    (tmp_path / "bad.json").write_text("{not json")
    bad = tfm(*args, "--baseline", str(tmp_path / "bad.json"), check=False)
    assert bad.returncode == 2 and "bad.json is not a JSON file" in bad.stderr
    wrong_kind = tfm(*args, "--baseline", str(tmp_path / "nowhere.json"), check=False)
    assert wrong_kind.returncode == 2 and "nowhere.json does not exist" in wrong_kind.stderr


def test_gate_refuses_baselines_it_cannot_compare(tmp_path: Path) -> None:
    """A hand-edited baseline failed with a KeyError traceback after the whole benchmark; a NaN, 0 or negative
    figure could never regress; a baseline of another workload (d_k, model shape, output length) passed under the
    same ids; and a gate that compared nothing at all passed."""
    base = _result()
    for records, expected in (
        ([{"foo": 1}], "record 1 has no id"),
        ([1], "record 1 is a int, not an object"),
        ([{"id": "x", "sentences_per_s": "fast", "latency_p50_ms": 5}], "sentences_per_s='fast': a figure is a positive number"),
        ([{"id": "x", "sentences_per_s": 0, "latency_p50_ms": 5}], "sentences_per_s=0"),
        ([{"id": "x", "sentences_per_s": 9, "latency_p50_ms": float("nan")}], "latency_p50_ms=nan"),
        # an integer too large for a float: an OverflowError traceback
        ([{"id": "x", "sentences_per_s": 10**400, "latency_p50_ms": 5}], "sentences_per_s=10000000000000000000... (401 digits)"),
        ([{"id": "x", "sentences_per_s": 9, "latency_p50_ms": -(10**400)}], "latency_p50_ms=-1000000000000000000... (402 digits)"),
        # a figure missing or null: the gate skipped it without a word, no longer gating it
        ([{"id": "x", "sentences_per_s": None, "latency_p50_ms": 5}], "(x) has no sentences_per_s: every record measured has it"),
        ([{"id": "x", "sentences_per_s": 9}], "(x) has no latency_p50_ms"),
        ([{"id": "x", "status": "out of memory"}, {"id": "x", "sentences_per_s": 1, "latency_p50_ms": 5}],
         "record 2 repeats the id x of record 1"),
    ):
        path = tmp_path / "baseline.json"
        path.write_text(json.dumps({**base, "records": records}))
        with pytest.raises(TfmError, match=re.escape(expected)) as caught:
            load_baseline(path)
        assert str(caught.value).startswith(f"baseline {path}: record {1 + (len(records) > 1)} ")
    for key, value in (("environment", None), ("settings", ["x"]), ("environment", "cpu")):  # the gate read them
        path = tmp_path / "parts.json"  # after the whole benchmark: an AttributeError traceback, or no workload check
        path.write_text(json.dumps({**base, key: value}))
        with pytest.raises(TfmError, match=re.escape(f'baseline {path}: its "{key}" is {json.dumps(value)}, not an object')):
            load_baseline(path)
    for settings in ({}, {"settings": {}}, {"settings": {"peers": {}}}):  # a bf16 baseline gated fp32 runs with a warning
        path = tmp_path / "unsaid.json"
        path.write_text(json.dumps({**{k: v for k, v in base.items() if k != "settings"}, **settings}))
        with pytest.raises(TfmError, match=re.escape(f"baseline {path} does not say what it measured (no \"settings\" with model,")):
            load_baseline(path)
    (tmp_path / "kind.json").write_text(json.dumps({"kind": ["translate"], "records": []}))
    with pytest.raises(TfmError, match="is not a tfm bench result"):
        load_baseline(tmp_path / "kind.json")
    shaped = {**base, "settings": {"src_len": 20, "out_len": 24, "model": {"d_model": 512}}}
    assert compare(shaped, shaped, 0.1)["compared"] == 4
    for key, value, said in (("out_len", 4, "out_len 24 -> 4"), ("model", {"d_model": 256}, "model.d_model 512 -> 256")):
        with pytest.raises(TfmError, match="the baseline measured another workload .*" + re.escape(said)):
            compare({**shaped, "settings": {**shaped["settings"], key: value}}, shaped, 0.1)

    args = ["bench", "attention", "--batch", "1", "--heads", "1", "--d-k", "8", "--repeat", "1", "--forward-only",
            "--impl", "naive", "--device", "cpu"]
    measured = json.loads(tfm(*args, "--lengths", "16,16", "--impl", "naive", "--json").stdout)
    assert [r["id"] for r in measured["records"]] == ["attention/naive/padding/forward/L=16"]  # each length once
    (tmp_path / "l16.json").write_text(json.dumps(measured))
    nothing = tfm(*args, "--lengths", "24", "--baseline", str(tmp_path / "l16.json"), check=False)
    assert nothing.returncode == 1 and "gate: no figure of" in nothing.stderr and "Traceback" not in nothing.stderr
    other = tfm(*args, "--lengths", "16", "--d-k", "16", "--baseline", str(tmp_path / "l16.json"), check=False)
    assert other.returncode == 1 and "another workload (d_k 8 -> 16)" in other.stderr
    failed = copy.deepcopy(measured)  # the same id on both sides, but out of memory in the baseline: it said
    failed["records"][0] = {"id": failed["records"][0]["id"], "status": "out of memory"}  # "none in common"
    (tmp_path / "oom.json").write_text(json.dumps(failed))
    oom = tfm(*args, "--lengths", "16", "--baseline", str(tmp_path / "oom.json"), check=False)
    assert oom.returncode == 1 and "none in common" not in oom.stderr
    assert "the 1 record(s) measured on both sides have no figure in the baseline" in oom.stderr


def test_padding_mask_pads_a_batch_of_one() -> None:
    """--mask padding --batch 1 measured no padding at all: only every other sentence from the second was padded."""
    from tfm_cli.bench.attention import make_mask

    for batch in (1, 2, 3):
        mask = make_mask("padding", batch, 16, torch.device("cpu"))
        padded = [(~mask[i]).sum().item() for i in range(batch)]
        assert padded == [4 if i % 2 == 0 else 0 for i in range(batch)]


# ---- peers -------------------------------------------------------------------------------------------------


def test_compare_says_what_is_missing(recipe: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "block" / "transformers"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('transformers is blocked for this test')\n")
    proc = tfm("bench", "translate", "--recipe", str(recipe), "--batch-sizes", "2", "--sentences", "2", "--src-len", "4",
               "--out-len", "5", "--device", "cpu", "--compare", env_extra={"PYTHONPATH": str(tmp_path / "block")}, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "needs Hugging Face transformers" in proc.stderr and "bench" in proc.stderr
    # bench train too, before its tokenizer is trained and its corpus read (it said so after both)
    path = os.pathsep.join(filter(None, [str(tmp_path / "block"), os.environ.get("PYTHONPATH")]))
    proc = tfm("bench", "train", str(recipe), "--steps", "1", "--warmup", "0", "--device", "cpu", "--compare",
               env_extra={"PYTHONPATH": path}, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("Error: --compare needs Hugging Face transformers"), proc.stderr


def test_train_compare_fails_before_measuring(recipe: Path, pre_norm_recipe: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench train --compare without transformers, or for a model MarianMT has no equivalent of, failed only
    after the model step and trainer phases had run (minutes on a real recipe), their figures lost."""
    from tfm_cli.bench.train import bench_train, recipe_tokenizer
    from tfm_cli.recipe import load_recipe

    for path, blocked, said in ((recipe, True, "needs Hugging Face transformers"), (pre_norm_recipe, False, "post-norm")):
        if blocked:
            monkeypatch.setitem(__import__("sys").modules, "transformers", None)  # import transformers: ImportError
        elif not has_module("transformers"):
            continue
        phases: list[str] = []
        loaded = load_recipe(path)
        with pytest.raises(TfmError, match=said):
            bench_train(loaded, torch.device("cpu"), recipe_tokenizer(loaded), steps=1, warmup=0, compare=True,
                        progress=lambda phase, done, total, seen=phases: seen.append(phase))
        assert phases == []  # nothing was measured
        monkeypatch.undo()


@pytest.mark.skipif(not has_module("transformers"), reason="transformers is not installed (the bench extra)")
def test_compare_with_peers(recipe: Path, tmp_path: Path) -> None:
    """hf-marian, and ct2 where ctranslate2 is installed (else a note), on the same batches: every engine's
    warm-up gave exactly --out-len tokens per sentence (or the run would have failed), and ratios name each peer.
    A gate lists the peers' figures but fails on tfm's alone: a slower HF is not a regression of tfm."""
    args = ["bench", "translate", "--recipe", str(recipe), "--batch-sizes", "1,2", "--sentences", "4", "--src-len", "4",
            "--out-len", "6", "--device", "cpu", "--precision", "fp32", "--compare", "--cache-only"]
    result = json.loads(tfm(*args, "--json").stdout)
    peers = ["hf-marian", "ct2"] if has_module("ctranslate2") else ["hf-marian"]
    runs = {(e, m, b) for e in ["tfm", *peers] for m in ("beam", "greedy") for b in (1, 2)}
    assert {(r["engine"], r["mode"], r["batch_size"]) for r in result["records"]} == runs
    assert {r["engine"] for r in result["records"] if r["peer"]} == set(peers)
    baseline = copy.deepcopy(result)
    for r in baseline["records"]:  # the peers impossibly fast then, tfm impossibly slow: only peers got worse
        r["sentences_per_s"], r["latency_p50_ms"] = (1e9, 1e-9) if r["peer"] else (1e-9, 1e9)
    (tmp_path / "baseline.json").write_text(json.dumps(baseline))
    gated = tfm(*args, "--baseline", str(tmp_path / "baseline.json"))
    assert "regression" not in gated.stderr and f"gate: {2 * 4} figure(s) within 10%" in gated.stderr
    assert "peer (not gated): translate/hf-marian/beam/cache/batch=1 sentences_per_s: 1e+09 -> " in gated.stderr
    for r in result["records"]:
        assert r["tokens_per_s"] == pytest.approx(r["sentences_per_s"] * 6) and r["batches"] == 4 // r["batch_size"]
    ratios = {(x["against"], x["mode"], x["batch_size"]): x["ratio"] for x in result["summary"]["ratios"]}
    assert set(ratios) == {(e, m, b) for e, m, b in runs if e != "tfm"} and min(ratios.values()) > 0
    assert set(result["settings"]["peers"]) == set(peers)
    if has_module("ctranslate2"):
        import ctranslate2

        ct2 = result["settings"]["peers"]["ct2"]
        assert (ct2["version"], ct2["compute_type"], ct2["inter_threads"]) == (ctranslate2.__version__, "float32", 1)
        assert result["environment"]["ctranslate2"] == ctranslate2.__version__
        assert result["summary"]["notes"] == []  # fp32 runs as float32: nothing to say
    else:
        assert result["summary"]["notes"] == [
            "ct2 left out: ctranslate2 is not installed (pip install -e \".[ctranslate2]\" in the tfm checkout "
            "(or pip install ctranslate2 transformers))"
        ]
    trained = json.loads(tfm("bench", "train", str(recipe), "--steps", "1", "--warmup", "1", "--model-step-only",
                             "--compare", "--device", "cpu", "--json").stdout)
    phases = {r["phase"]: r["peer"] for r in trained["records"]}
    # Marian with each of its attention implementations (SDPA, its default, is slow in bf16 on CPU: comparing with it
    # alone flattered tfm), and the ratio against the faster one, named
    assert phases == {"model step": False, "hf-marian-sdpa step": True, "hf-marian-eager step": True}
    speed = {r["phase"]: r["tgt_tokens_per_s"] for r in trained["records"]}
    summary = trained["summary"]
    faster = max(("sdpa", "eager"), key=lambda a: speed[f"hf-marian-{a} step"])
    assert summary["hf_marian_attention"] == faster
    assert summary["model_step_vs_hf_marian"] == pytest.approx(speed["model step"] / speed[f"hf-marian-{faster} step"])


@pytest.mark.skipif(not has_module("transformers"), reason="transformers is not installed (the bench extra)")
def test_int8_runs_every_engine_in_int8(recipe: Path) -> None:
    """--precision int8: tfm with int8 linear layers, MarianMT quantized the same way, CTranslate2's int8 type."""
    result = json.loads(tfm(
        "bench", "translate", "--recipe", str(recipe), "--batch-sizes", "2", "--sentences", "2", "--src-len", "4",
        "--out-len", "5", "--device", "cpu", "--precision", "int8", "--compare", "--cache-only", "--greedy-only",
        "--json",
    ).stdout)
    assert result["settings"]["precision"] == "int8"
    bad = tfm("bench", "translate", "--recipe", str(recipe), "--precision", "int9", check=False)
    assert bad.returncode == 2 and "'int9' is not one of: auto, fp32, bf16, fp16, int8" in bad.stderr
    engines = {r["engine"] for r in result["records"]}
    assert engines == ({"tfm", "hf-marian", "ct2"} if has_module("ctranslate2") else {"tfm", "hf-marian"})
    if has_module("ctranslate2"):
        assert result["settings"]["peers"]["ct2"]["compute_type"].startswith("int8")  # the translator's own
    # what was timed, counted in the models themselves: every linear layer of tfm's and of MarianMT's in int8
    from tfm_cli.bench.peers import marian_model
    from tfm_cli.model import Transformer
    from tfm_cli.recipe import load_recipe, model_config

    config = model_config(load_recipe(recipe), 64, 0, 1, 2)
    in_tfm = sum(type(m) is torch.nn.Linear for m in Transformer(config).modules())
    in_marian = sum(type(m) is torch.nn.Linear for m in marian_model(config).modules())
    assert in_tfm > 0 and in_marian > 0
    assert result["settings"]["linear_layers"] == {"int8": in_tfm, "float": 0}
    assert result["settings"]["peers"]["hf-marian"]["linear_layers"] == {"int8": in_marian, "float": 0}
    shown = tfm("bench", "translate", "--recipe", str(recipe), "--batch-sizes", "2", "--sentences", "2", "--src-len", "4",
                "--out-len", "5", "--device", "cpu", "--precision", "int8", "--compare", "--cache-only", "--greedy-only")
    assert f"tfm: {in_tfm} of {in_tfm} linear layers in int8" in shown.stderr
    assert f"{in_marian} of {in_marian} linear layers in int8" in shown.stderr


@pytest.mark.skipif(not has_module("transformers"), reason="transformers is not installed (the bench extra)")
@pytest.mark.parametrize("tie", [True, False])
def test_marian_peer_has_the_same_shapes(tie: bool) -> None:
    """The peer does the same work: MarianMT built from a tfm config has tfm's parameter count and logit shape,
    untied embeddings included (MarianMT has them, as the huggingface export shows; the peer refused them)."""
    from tfm_cli.bench.peers import marian_model
    from tfm_cli.model import ModelConfig, Transformer

    config = ModelConfig(vocab_size=97, d_model=32, d_ff=48, n_heads=4, n_enc_layers=2, n_dec_layers=3, max_positions=64,
                         tie_embeddings=tie)
    ours, theirs = Transformer(config), marian_model(config)
    count = lambda m: sum(p.numel() for p in m.parameters() if p.requires_grad)  # noqa: E731
    # Marian adds a final-logits bias buffer (not trained); the trained parameters match but for LayerNorms'
    # and biases' layout, which are the same count.
    assert count(theirs) == count(ours)
    ids = torch.randint(4, 97, (2, 9))
    logits = theirs(input_ids=ids, decoder_input_ids=ids[:, :5]).logits
    assert logits.shape == (2, 5, 97)
    # the two attention implementations the train comparison times compute the same function (same seed)
    eager = marian_model(config, "eager").eval()
    assert theirs.config._attn_implementation == "sdpa" and eager.config._attn_implementation == "eager"
    with torch.no_grad():
        torch.testing.assert_close(eager(input_ids=ids, decoder_input_ids=ids[:, :5]).logits,
                                   theirs.eval()(input_ids=ids, decoder_input_ids=ids[:, :5]).logits, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def pre_norm_recipe(recipe: Path) -> Path:
    path = recipe.with_name("pre-norm.yaml")
    text = recipe.read_text(encoding="utf-8").replace("  max_positions: 64\n", "  max_positions: 64\n  norm: pre\n")
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.skipif(not has_module("transformers"), reason="transformers is not installed (the bench extra)")
def test_compare_leaves_out_peers_that_cannot_run(recipe: Path, pre_norm_recipe: Path, tmp_path: Path) -> None:
    """A pre-norm model has no MarianMT equivalent: both peers are left out with the reason, tfm is still timed.
    Without ctranslate2, ct2 alone is left out, with the command that installs it."""
    args = ["bench", "translate", "--batch-sizes", "2", "--sentences", "2", "--src-len", "4", "--out-len", "5",
            "--device", "cpu", "--greedy-only", "--cache-only", "--compare"]
    proc = tfm(*args, "--recipe", str(pre_norm_recipe))
    assert [line.split("\t")[0] for line in proc.stdout.splitlines()] == ["engine", "tfm"]  # no ratio table
    assert "warning: hf-marian left out: MarianMT has post-norm" in proc.stderr
    assert "warning: ct2 left out: CTranslate2 gets tfm models through the huggingface export" in proc.stderr
    assert "model.norm=pre" in proc.stderr

    blocker = tmp_path / "block" / "ctranslate2"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('ctranslate2 is blocked for this test')\n")
    blocked = {"PYTHONPATH": str(tmp_path / "block")}
    result = json.loads(tfm(*args, "--recipe", str(recipe), "--json", env_extra=blocked).stdout)
    assert {r["engine"] for r in result["records"]} == {"tfm", "hf-marian"}
    assert result["summary"]["notes"] == ["ct2 left out: ctranslate2 is not installed (pip install -e \".[ctranslate2]\" in the tfm checkout "
            "(or pip install ctranslate2 transformers))"]
    assert "ctranslate2" not in result["environment"] and set(result["settings"]["peers"]) == {"hf-marian"}


@pytest.mark.skipif(
    not (has_module("ctranslate2") and has_module("transformers")), reason="ctranslate2 or transformers is not installed"
)
@pytest.mark.parametrize("tie", [True, False])
def test_ct2_peer_computes_tfm_function(tie: bool) -> None:
    """The ct2 peer runs the benchmarked weights, not merely the same shapes: its greedy ids are tfm's, for
    tied and untied embeddings, on a random model with every weight disturbed (LayerNorms and biases included)."""
    from tfm_cli.bench.peers import PeerUnavailable, ct2_model, ct2_translator
    from tfm_cli.decoding import translate_ids
    from tfm_cli.model import ModelConfig, Transformer

    torch.manual_seed(1)
    config = ModelConfig(vocab_size=60, d_model=24, d_ff=40, n_heads=3, n_enc_layers=2, n_dec_layers=2,
                         max_positions=32, dropout=0.0, tie_embeddings=tie)
    model = Transformer(config).eval()
    with torch.no_grad():  # large random weights: outputs that differ from sentence to sentence
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    translator, pieces = ct2_model(model, torch.device("cpu"), threads=1)
    assert (pieces[0], pieces[1], pieces[2], pieces[7]) == ("<tfm_pad>", "<s>", "</s>", "t7")
    g = torch.Generator().manual_seed(0)
    sources = [torch.randint(3, 60, (int(n),), generator=g).tolist() for n in torch.randint(2, 9, (12,), generator=g)]
    want = [h[0].tokens for h in translate_ids(model, sources, greedy=True, max_len_offset=6)]
    results = translator.translate_batch(
        [[pieces[i] for i in s] + ["</s>"] for s in sources], beam_size=1, min_decoding_length=0,
        max_decoding_length=8 + 6 + 1, suppress_sequences=[["<tfm_pad>"], ["<s>"], ["<unk>"]],
    )
    ids = {piece: i for i, piece in enumerate(pieces)}
    got = [[ids[p] for p in r.hypotheses[0]][: len(s) + 6] for r, s in zip(results, sources, strict=True)]
    assert got == want and len({tuple(w) for w in want}) > 1

    run = ct2_translator(model, torch.device("cpu"), "fp32", 2, 7).run
    assert run(sources[:3], "beam", True) == [7, 7, 7] and run(sources[:3], "greedy", True) == [7, 7, 7]
    learned = ModelConfig(vocab_size=60, d_model=24, d_ff=40, n_heads=3, max_positions=32, positions="learned")
    with pytest.raises(PeerUnavailable, match="model.positions=learned"):
        ct2_translator(Transformer(learned), torch.device("cpu"), "fp32", 2, 7)


def test_greedy_only_refuses_a_beam_it_would_ignore(recipe: Path) -> None:
    """`--greedy-only --beam 3` was accepted and the beam ignored (`tfm translate --greedy` refuses --beam)."""
    proc = tfm("bench", "translate", "--recipe", str(recipe), "--greedy-only", "--beam", "3", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--greedy-only measures no beam search: drop --beam" in proc.stderr


def test_bench_train_says_a_temporary_folder_too_small_for_its_trainer_phase_first(monkeypatch, tmp_path: Path) -> None:
    """The trainer phase's scratch run under TMPDIR ran out of room minutes in, after the model step was timed, and
    the trainer's check told to "choose another --out", an option `bench train` has not."""
    from collections import namedtuple

    from tfm_cli.bench import train as bench

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(bench.shutil, "disk_usage", lambda path: usage(10**12, 0, 6 * 2**20))
    with pytest.raises(TfmError) as caught:
        bench._check_scratch_space(1_945_600)
    assert str(caught.value).startswith(f"the trainer phase trains into a scratch run in {tmp_path} (the temporary folder)")
    assert "6.0 MiB free" in str(caught.value) and "--model-step-only" in caught.value.hint and "--out" not in caught.value.hint
    monkeypatch.setattr(bench.shutil, "disk_usage", lambda path: usage(10**12, 0, 10**9))
    bench._check_scratch_space(1_945_600)  # room enough: nothing said


def test_attention_says_a_long_length_before_it_starts() -> None:
    """`--lengths 64,128,100000` ran L=100,000 of the fused kernel for more than 10 minutes with nothing said. Each
    measurement an earlier length of the same implementation lets estimate is announced with that estimate (its
    time grown as L², times the calls made), and the command says one expected to take a minute or more."""
    import torch

    from tfm_cli.bench.attention import bench_attention, expected_seconds
    from tfm_cli.cli.bench import _duration

    started: list[tuple[dict, tuple[float, int]]] = []
    result = bench_attention(torch.device("cpu"), [16, 32, 64], batch=1, heads=2, d_k=8, impls=["naive", "tfm"],
                             passes=("forward",), warmup=1, repeat=2, on_start=lambda r, e: started.append((dict(r), e)))
    records = {(r["impl"], r["length"]): r for r in result["records"]}
    assert [(r["impl"], r["length"]) for r, _ in started] == [("naive", 32), ("tfm", 32), ("naive", 64), ("tfm", 64)]
    for record, (seconds, grown_from) in started:
        before = records[(record["impl"], grown_from)]
        assert grown_from == record["length"] // 2  # the longest shorter length measured
        assert seconds == pytest.approx(before["median_ms"] / 1000 * 4 * (1 + 2 + 1))  # L² from half: x4; 4 calls
    assert expected_seconds([], {"impl": "tfm", "mask": "padding", "pass": "forward", "length": 64}, 1, 5) is None
    assert [_duration(s) for s in (45, 125, 3900)] == ["45 s", "2 min", "1 h 5 min"]


def test_attention_exponents_of_short_lengths_are_said_to_be_so() -> None:
    """`--lengths 1,2` printed an exponent of -0.05 as any other: fitted where fixed costs hide the growth."""
    base = ("bench", "attention", "--impl", "naive", "--forward-only", "--batch", "1", "--heads", "1", "--d-k", "8",
            "--repeat", "1", "--warmup", "0", "--device", "cpu")
    short = tfm(*base, "--lengths", "8,16,32")
    assert "exponents fitted over lengths under 256 (8, 16, 32: fewer than three lengths reach it)" in short.stderr
    assert "fitted over" not in tfm(*base, "--lengths", "256,512,1024").stderr
