"""CUDA paths through the installed `tfm`: they skip, saying why, on machines without a GPU (CPU CI runs them
nowhere; a GPU machine runs them with plain `pytest`, or `bash .ci/gpu check`).

Resume on CUDA used to crash (`RNG state must be a torch.ByteTensor`: the state file was loaded onto the GPU);
training in bf16 and fp16, resuming (in another precision too), translating, benchmarking and the decoding's
weight casts each get a short run here. Each `tfm` call has a time limit, so that one that hangs fails its test;
`bash .ci/gpu check` runs this file and three CPU ones in one device command of at most 10 minutes.
"""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import pytest
import torch
from clitools import tfm

TIMEOUT = 300  # seconds a `tfm` call may take (a hung one fails its test, not the whole device command)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none on this machine)")

CORPORA = Path(__file__).resolve().parents[1] / "tfm_cli" / "corpora" / "tatoeba-fr-en"
RECIPE = """\
name: cuda
data: {{train: {train}, dev: {dev}, max_len: 32}}
tokenizer: {{vocab_size: 400}}
model: {{d_model: 64, d_ff: 128, n_heads: 4, n_enc_layers: 2, n_dec_layers: 2, max_positions: 64}}
train: {{max_tokens: 1024, max_steps: 20, warmup_steps: 10, log_every: 5, save_every: 10, eval_every: 10,
        eval_sentences: 10, keep_last: 3, average_last: 2, precision: {precision}}}
decode: {{max_len_offset: 5}}
"""


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_train_resume_translate_on_cuda(precision: str, tmp_path: Path) -> None:
    for name, n in (("train", 2000), ("dev", 20)):
        with gzip.open(CORPORA / f"{name}.tsv.gz", "rt", encoding="utf-8") as f:
            (tmp_path / f"{name}.tsv").write_text("".join(itertools.islice(f, n)), encoding="utf-8")
    recipe = tmp_path / "cuda.yaml"
    recipe.write_text(RECIPE.format(train=tmp_path / "train.tsv", dev=tmp_path / "dev.tsv", precision=precision))
    run = tmp_path / "run"
    tfm("train", str(recipe), "--out", str(run), "--device", "cuda", timeout=TIMEOUT)
    resumed = tfm("train", "--resume", str(run), "train.max_steps=30", "--device", "cuda", timeout=TIMEOUT)
    assert "resumed from" in resumed.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 30 and summary["device"].startswith("cuda") and summary["precision"] == precision
    state = torch.load(run / "checkpoints" / "step-00000030.state.pt", map_location="cpu", weights_only=False)
    cuda_rng = state["rng"]["cuda"]  # the run's own GPU's generator, one ByteTensor (not one per visible GPU)
    assert isinstance(cuda_rng, torch.Tensor) and cuda_rng.dtype == torch.uint8
    if precision == "fp16":  # the loss scale is kept, and is a real one
        assert 0 < state["scaler"]["scale"] < float("inf")
    else:
        assert state["scaler"] == {}
    losses = [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "train"]
    assert len(losses) == 6 and losses[-1] < losses[0]  # every 5 steps to 30, and it learned (no update all skipped)
    out = tfm("translate", "--model", str(run), "--device", "cuda", "--precision", precision, "--json", "Bonjour.")
    assert json.loads(out.stdout)["source"] == "Bonjour."


def test_a_bf16_run_resumes_in_fp16(tmp_path: Path) -> None:
    """A bf16 checkpoint holds no loss scale ({}): an fp16 resume of it (or `auto` on an older GPU) starts a fresh
    one (torch refused to load the empty state, a traceback)."""
    recipe = _small_run(tmp_path, "bf16")
    run = tmp_path / "run"
    tfm("train", str(recipe), "train.max_steps=10", "--out", str(run), "--device", "cuda", timeout=TIMEOUT)
    tfm("train", "--resume", str(run), "train.precision=fp16", "train.max_steps=20", "--device", "cuda", timeout=TIMEOUT)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 20 and summary["precision"] == "fp16"
    state = torch.load(run / "checkpoints" / "step-00000020.state.pt", map_location="cpu", weights_only=False)
    assert 0 < state["scaler"]["scale"] < float("inf")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cuda_decoding_casts_each_weight_once_a_search(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under autocast and inference mode autocast casts a weight at every call; the decoding view keeps its casts
    (and the engine its cast of the output projection's copy): each is cast at most once in a whole search of many
    steps, and the translations are those of the model itself under plain autocast, which cast them every step."""
    import collections

    from test_packing import WeightCasts

    from tfm_cli.decoding import TorchEngine, translate_ids
    from tfm_cli.model import ModelConfig, Transformer
    from tfm_cli.packing import module_view

    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=300, d_model=64, d_ff=128, n_heads=4, n_enc_layers=2, n_dec_layers=2,
                                    dropout=0.0, max_positions=128)).cuda().eval()
    sequences = [torch.randint(4, 300, (n,)).tolist() for n in (3, 9, 17, 5)]

    def search(engine: TorchEngine) -> tuple[list, collections.Counter]:
        casts = WeightCasts({p.data_ptr() for p in model.parameters() if p.dim() == 2} | {engine.output_t.data_ptr()})
        with casts, torch.autocast("cuda", dtype=dtype):
            found = translate_ids(engine, sequences, max_len_offset=30)
        return [[h.tokens for h in hs] for hs in found], casts.each

    kept, kept_casts = search(TorchEngine(model))
    assert kept_casts and max(kept_casts.values()) == 1, f"a weight cast {max(kept_casts.values())} times in one search"
    monkeypatch.setattr("tfm_cli.decoding.decoding_view", module_view)  # the model's own layers, as before
    plain, plain_casts = search(TorchEngine(model))
    assert max(plain_casts.values()) > 10  # autocast's casts at every step, which the view saves
    assert kept == plain


def _small_run(tmp_path: Path, precision: str) -> Path:
    for name, n in (("train", 2000), ("dev", 20)):
        with gzip.open(CORPORA / f"{name}.tsv.gz", "rt", encoding="utf-8") as f:
            (tmp_path / f"{name}.tsv").write_text("".join(itertools.islice(f, n)), encoding="utf-8")
    recipe = tmp_path / "cuda.yaml"
    recipe.write_text(RECIPE.format(train=tmp_path / "train.tsv", dev=tmp_path / "dev.tsv", precision=precision))
    return recipe


def test_resume_on_cuda_continues_the_same_run(tmp_path: Path) -> None:
    """fp32 on one GPU: 20 straight steps against 10 + resume to 20. cuBLAS and the embedding backward may
    reorder float sums between runs, so the weights are compared within a tolerance and the difference printed."""
    from safetensors.torch import load_file

    recipe = _small_run(tmp_path, "fp32")
    straight, split = tmp_path / "straight", tmp_path / "split"
    tfm("train", str(recipe), "--out", str(straight), "--device", "cuda", timeout=TIMEOUT)
    split.mkdir()
    (split / "tokenizer.json").write_bytes((straight / "tokenizer.json").read_bytes())
    tfm("train", str(recipe), "train.max_steps=10", "--out", str(split), "--device", "cuda", timeout=TIMEOUT)
    tfm("train", "--resume", str(split), "train.max_steps=20", "--device", "cuda", timeout=TIMEOUT)
    a = load_file(str(straight / "checkpoints" / "step-00000020.safetensors"))
    b = load_file(str(split / "checkpoints" / "step-00000020.safetensors"))
    worst = max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
    print(f"CUDA resume: max |weight difference| after 20 steps = {worst:.3g} (0 = bit-exact)")
    assert worst < 1e-3


def test_bench_commands_on_cuda(tmp_path: Path) -> None:
    attn = json.loads(tfm("bench", "attention", "--lengths", "64,256", "--batch", "2", "--heads", "4", "--d-k", "32",
                          "--dtype", "bf16", "--device", "cuda", "--repeat", "2", "--json", timeout=TIMEOUT).stdout)
    assert attn["environment"]["device"] == "cuda"
    statuses = {(r["impl"], r["pass"], r["length"]): r["status"] for r in attn["records"]}
    # none disagreed with the reference ("wrong") or ran out of memory; FlashAttention on CUDA takes no padding mask
    assert statuses and set(statuses.values()) <= {"ok", "unsupported"}, statuses
    ran = {impl for (impl, _, _), status in statuses.items() if status == "ok"}
    assert {"naive", "tfm", "sdpa-math", "sdpa-efficient"} <= ran, statuses
    recipe = _small_run(tmp_path, "bf16")
    train = json.loads(tfm("bench", "train", str(recipe), "--steps", "3", "--warmup", "1", "--device", "cuda", "--json",
                           timeout=TIMEOUT).stdout)
    phases = {r["phase"]: r for r in train["records"]}
    assert {"model step", "trainer"} <= set(phases) and train["environment"]["dtype"] == "bf16"
    for phase in ("model step", "trainer"):
        assert phases[phase]["tgt_tokens_per_s"] > 0 and 0 < phases[phase]["mfu"] < 1
        assert phases[phase]["peak_allocated_mb"] > 0  # CUDA memory, measured on the device
    assert train["summary"]["trainer_vs_model_step"] > 0
    run = tmp_path / "run"
    tfm("train", str(recipe), "train.max_steps=10", "--out", str(run), "--device", "cuda", timeout=TIMEOUT)
    out = json.loads(tfm("bench", "translate", "--model", str(run), "--sentences", "16", "--src-len", "8", "--out-len", "8",
                         "--batch-sizes", "1,16", "--device", "cuda", "--json", timeout=TIMEOUT).stdout)
    measured = {(r["mode"], r["cache"], r["batch_size"]) for r in out["records"] if r["engine"] == "tfm" and r["sentences_per_s"] > 0}
    assert {("beam", True, 1), ("beam", True, 16), ("greedy", True, 16)} <= measured


def test_a_run_trained_through_torchrun_on_one_gpu_exports_to_onnx(tmp_path: Path) -> None:
    """`--nproc-per-node 1` (one process: torchrun's path, no NCCL collective) on the GPU, then the ONNX export of
    the CUDA-trained run (exported from the CPU, checked on 10 lines), translating on the CPU as the PyTorch model
    does there."""
    pytest.importorskip("onnxruntime")
    recipe = _small_run(tmp_path, "bf16")
    run = tmp_path / "run"
    tfm("train", str(recipe), "train.max_steps=10", "--out", str(run), "--device", "cuda", "--nproc-per-node", "1",
        timeout=TIMEOUT)
    assert json.loads((run / "summary.json").read_text())["device"].startswith("cuda")
    tfm("export", str(run), "--format", "onnx", "--out", str(tmp_path / "onnx"), "--verify-lines", "10", timeout=TIMEOUT)
    a = tfm("translate", "--model", str(run), "--precision", "fp32", "--device", "cpu", stdin="Bonjour.\nMerci.\n").stdout
    b = tfm("translate", "--model", str(tmp_path / "onnx"), "--device", "cpu", stdin="Bonjour.\nMerci.\n").stdout
    assert a == b and len(a.splitlines()) == 2


def test_compiled_training_on_cuda(tmp_path: Path) -> None:
    """train.compile=true in bf16 on the GPU (Triton kernels, dynamic shapes): trains, evaluates (eval mode compiles
    again), resumes and translates."""
    recipe = _small_run(tmp_path, "bf16")
    run = tmp_path / "run"
    tfm("train", str(recipe), "train.compile=true", "--out", str(run), "--device", "cuda", timeout=TIMEOUT)
    resumed = tfm("train", "--resume", str(run), "train.max_steps=30", "--device", "cuda", timeout=TIMEOUT)
    assert "resumed from" in resumed.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 30 and "compile: true" in (run / "recipe.yaml").read_text()
    out = tfm("translate", "--model", str(run), "--device", "cuda", "--json", "Bonjour.")
    assert json.loads(out.stdout)["source"] == "Bonjour."
