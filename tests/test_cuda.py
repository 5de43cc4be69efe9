"""CUDA paths through the installed `tfm`: they skip, saying why, on machines without a GPU (CPU CI runs them
nowhere; a GPU machine runs them with plain `pytest`).

Resume on CUDA used to crash (`RNG state must be a torch.ByteTensor`: the state file was loaded onto the GPU);
training in bf16 and fp16, resuming, and translating each get a short run here.
"""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import pytest
import torch
from clitools import tfm

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
    tfm("train", str(recipe), "--out", str(run), "--device", "cuda")
    resumed = tfm("train", "--resume", str(run), "train.max_steps=30", "--device", "cuda")
    assert "resumed from" in resumed.stderr
    assert json.loads((run / "summary.json").read_text())["steps"] == 30
    out = tfm("translate", "--model", str(run), "--device", "cuda", "--precision", precision, "--json", "Bonjour.")
    assert json.loads(out.stdout)["source"] == "Bonjour."


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
    tfm("train", str(recipe), "--out", str(straight), "--device", "cuda")
    split.mkdir()
    (split / "tokenizer.json").write_bytes((straight / "tokenizer.json").read_bytes())
    tfm("train", str(recipe), "train.max_steps=10", "--out", str(split), "--device", "cuda")
    tfm("train", "--resume", str(split), "train.max_steps=20", "--device", "cuda")
    a = load_file(str(straight / "checkpoints" / "step-00000020.safetensors"))
    b = load_file(str(split / "checkpoints" / "step-00000020.safetensors"))
    worst = max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
    print(f"CUDA resume: max |weight difference| after 20 steps = {worst:.3g} (0 = bit-exact)")
    assert worst < 1e-3


def test_bench_commands_on_cuda(tmp_path: Path) -> None:
    attn = json.loads(tfm("bench", "attention", "--lengths", "64,256", "--batch", "2", "--heads", "4", "--d-k", "32",
                          "--dtype", "bf16", "--device", "cuda", "--repeat", "2", "--json").stdout)
    assert attn and "cuda" in json.dumps(attn).lower()
    recipe = _small_run(tmp_path, "bf16")
    train = json.loads(tfm("bench", "train", str(recipe), "--steps", "3", "--warmup", "1", "--device", "cuda", "--json").stdout)
    assert train
    run = tmp_path / "run"
    tfm("train", str(recipe), "train.max_steps=10", "--out", str(run), "--device", "cuda")
    out = tfm("bench", "translate", "--model", str(run), "--sentences", "16", "--src-len", "8", "--out-len", "8",
              "--batch-sizes", "1,16", "--device", "cuda", "--json").stdout
    assert json.loads(out)


def test_onnx_export_runs_on_the_cuda_device_and_torchrun_on_one_gpu(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    recipe = _small_run(tmp_path, "bf16")
    run = tmp_path / "run"
    tfm("train", str(recipe), "train.max_steps=10", "--out", str(run), "--device", "cuda", "--nproc-per-node", "1")
    tfm("export", str(run), "--format", "onnx", "--out", str(tmp_path / "onnx"), "--verify-lines", "10")
    a = tfm("translate", "--model", str(run), "--precision", "fp32", "--device", "cuda", stdin="Bonjour.\nMerci.\n").stdout
    b = tfm("translate", "--model", str(tmp_path / "onnx"), stdin="Bonjour.\nMerci.\n").stdout
    assert a == b


def test_compiled_training_on_cuda(tmp_path: Path) -> None:
    """train.compile=true in bf16 on the GPU (Triton kernels, dynamic shapes): trains, evaluates (eval mode compiles
    again), resumes and translates."""
    recipe = _small_run(tmp_path, "bf16")
    run = tmp_path / "run"
    tfm("train", str(recipe), "train.compile=true", "--out", str(run), "--device", "cuda", timeout=900)
    resumed = tfm("train", "--resume", str(run), "train.max_steps=30", "--device", "cuda", timeout=900)
    assert "resumed from" in resumed.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 30 and "compile: true" in (run / "recipe.yaml").read_text()
    out = tfm("translate", "--model", str(run), "--device", "cuda", "--json", "Bonjour.")
    assert json.loads(out.stdout)["source"] == "Bonjour."
