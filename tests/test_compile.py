"""`train.compile: true`: the model compiled by torch.compile (TorchInductor) trains the same function as the eager
model, deterministically, resumes bit for bit on CPU, and says in one line when it cannot compile.

The compiler builds C++ kernels on CPU (a C++ compiler is part of this project's CI image, as of most Linux
machines); each test that compiles costs 10-40 s of one core, so there are few of them, on the smallest models.
"""

from __future__ import annotations

import gzip
import itertools
import shutil
from pathlib import Path

import pytest
import torch
from clitools import tfm, tiny_recipe
from safetensors.torch import load_file
from test_bad_inputs import error_line

from tfm_cli.data import make_batch
from tfm_cli.errors import TfmError
from tfm_cli.model import ModelConfig
from tfm_cli.recipe import TrainRecipe
from tfm_cli.runtime import autocast
from tfm_cli.training import setup_model, train_step
from tfm_cli.training.compiling import compile_problem
from tfm_cli.training.loss import output_loss

CORPORA = Path(__file__).resolve().parents[1] / "tfm_cli" / "corpora" / "tatoeba-fr-en"
NO_COMPILER = compile_problem(torch.device("cpu"))
needs_compiler = pytest.mark.skipif(NO_COMPILER is not None, reason=f"torch.compile cannot build here: {NO_COMPILER}")


def _batches(config: ModelConfig, seed: int) -> list:
    """Two batches of other shapes (the compiled graph takes both: dynamic shapes), random ids past the specials."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for n, s_len, t_len in ((5, 7, 6), (3, 11, 9)):
        src = [torch.randint(4, config.vocab_size, (int(k),), generator=g).tolist() for k in torch.randint(1, s_len + 1, (n,), generator=g)]
        tgt = [torch.randint(4, config.vocab_size, (int(k),), generator=g).tolist() for k in torch.randint(1, t_len + 1, (n,), generator=g)]
        out.append(make_batch(src, tgt, config.pad_id, config.bos_id, config.eos_id))
    return out


@needs_compiler
def test_a_compiled_step_is_the_eager_step() -> None:
    """The same weights and batches (two shapes: one dynamic graph), dropout off: the compiled model's losses and
    gradients equal the eager model's within float tolerance (the compiler fuses and reorders float operations),
    and `train_step` gives the same losses step after step (Adam's first updates, lr * g / |g| elementwise,
    magnify float noise in near-zero gradients, so the updated weights are not compared)."""
    config = ModelConfig(vocab_size=64, d_model=32, d_ff=64, n_heads=2, n_enc_layers=1, n_dec_layers=1,
                         dropout=0.0, max_positions=32, pad_id=0, bos_id=1, eos_id=2)
    device = torch.device("cpu")
    batches = _batches(config, 1)
    runs = {}
    for compiled in (False, True):
        t = TrainRecipe(compile=compiled, warmup_steps=4)
        torch.manual_seed(0)
        model, optimizer, scaler = setup_model(config, t, device, "fp32")
        model.train()
        grads = []
        for batch in batches:
            features = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask, features_only=True)
            loss, _, _ = output_loss(features, model.generator.weight, batch.tgt_out, t.label_smoothing, config.pad_id)
            loss.backward()
            grads.append({k: p.grad.clone() for k, p in model.named_parameters()})
            model.zero_grad(set_to_none=True)
        losses = [train_step(model, optimizer, scaler, [b], 1e-3, t, lambda: autocast(device, "fp32"), device) for b in batches * 2]
        runs[compiled] = (grads, losses, list(model.state_dict()))
    (eager_grads, eager_losses, eager_names), (grads, losses, names) = runs[False], runs[True]
    assert names == eager_names  # compiled in place: the checkpoints keep the model's names (no _orig_mod.)
    for eager_step, step in zip(eager_grads, grads, strict=True):
        for k, g in eager_step.items():
            assert torch.allclose(step[k], g, rtol=1e-4, atol=1e-6), f"{k}: max |diff| {float((step[k] - g).abs().max())}"
    for (a, a_nll), (b, b_nll) in zip(eager_losses, losses, strict=True):
        assert b == pytest.approx(a, rel=1e-4) and b_nll == pytest.approx(a_nll, rel=1e-4)
    assert eager_losses[2][0] < eager_losses[0][0]  # the steps trained: the first batch's loss fell


def test_python_headers_missing_are_said_before_the_start_and_at_the_compile(monkeypatch, tmp_path: Path) -> None:
    """TorchInductor's CPU kernels include Python.h: without Python's C headers (no python3-dev) the check says so
    before any work, and a compile that fails on it anyway names gcc's own error line, not its last words."""
    import sysconfig

    import torch._inductor.compile_fx as compile_fx

    from tfm_cli.training.compiling import check_compile

    if NO_COMPILER is None:  # (no C++ compiler: that is said first, as the test below shows)
        real = sysconfig.get_paths()
        monkeypatch.setattr(sysconfig, "get_paths", lambda *a, **k: {**real, "include": str(tmp_path)})
        with pytest.raises(TfmError, match=r"Python's C headers, and they are not installed \(.*Python.h is missing\)") as caught:
            check_compile(torch.device("cpu"))
        assert "python3-dev" in caught.value.hint and "train.compile=false" in caught.value.hint
        monkeypatch.undo()

    def no_headers(*args, **kwargs):
        raise RuntimeError("C++ compile error\nCommand:\ng++ kernel.cpp\nOutput:\nkernel.cpp:116:10: fatal error: "
                           "Python.h: No such file or directory\ncompilation terminated.")

    monkeypatch.setattr(compile_fx, "compile_fx", no_headers)
    config = ModelConfig(vocab_size=64, d_model=16, d_ff=32, n_heads=2, n_enc_layers=1, n_dec_layers=1,
                         dropout=0.0, max_positions=32, pad_id=0, bos_id=1, eos_id=2)
    t, device = TrainRecipe(compile=True), torch.device("cpu")
    monkeypatch.setattr("tfm_cli.training.step.check_compile", lambda device: None)  # (this machine may have them)
    model, optimizer, scaler = setup_model(config, t, device, "fp32")
    with pytest.raises(TfmError, match=r"\): kernel.cpp:116:10: fatal error: Python.h: No such file or directory$") as caught:
        train_step(model, optimizer, scaler, _batches(config, 2)[:1], 1e-3, t, lambda: autocast(device, "fp32"), device)
    assert "python3-dev" in caught.value.hint
    torch._dynamo.reset()


def test_a_compiler_failure_is_one_line_naming_the_setting(monkeypatch) -> None:
    """A failure inside TorchInductor (here a backend that raises) is a TfmError naming train.compile and the way
    round, not dynamo's pages; the same failure with compile off is not ours to rename."""
    import torch._inductor.compile_fx as compile_fx

    def broken(*args, **kwargs):
        raise RuntimeError("C++ compile error\nkernel.cpp:1: error: something broke")

    monkeypatch.setattr(compile_fx, "compile_fx", broken)
    config = ModelConfig(vocab_size=64, d_model=16, d_ff=32, n_heads=2, n_enc_layers=1, n_dec_layers=1,
                         dropout=0.0, max_positions=32, pad_id=0, bos_id=1, eos_id=2)
    t = TrainRecipe(compile=True)
    device = torch.device("cpu")
    torch._dynamo.reset()
    model, optimizer, scaler = setup_model(config, t, device, "fp32")
    with pytest.raises(TfmError, match=r"could not compile the model \(train.compile is true\): kernel.cpp:1: error: something broke") as caught:
        train_step(model, optimizer, scaler, _batches(config, 2)[:1], 1e-3, t, lambda: autocast(device, "fp32"), device)
    assert "train.compile=false" in caught.value.hint
    # the dev evaluation's forward (eval mode: another graph, compiled at the first evaluation) says it alike
    from tfm_cli.training.evaluation import DevSet, dev_loss

    dev = DevSet(sources=["a"], references=["b"], src_ids=[[5, 6, 7]], tgt_ids=[[8, 9]])
    model.eval()
    with pytest.raises(TfmError, match=r"could not compile the model \(train.compile is true\): kernel.cpp:1: error"):
        dev_loss(model, dev, 256, 0.1, lambda: autocast(device, "fp32"))
    torch._dynamo.reset()  # the broken backend's failure is not cached for the other tests


@needs_compiler
def test_compiled_training_resumes_bit_for_bit(tmp_path: Path) -> None:
    """`tfm train ... train.compile=true` with dropout on: 20 straight steps, and 10 + `--resume` to 20, give the same
    weights bit for bit on CPU (the compiler's dropout masks come from torch's generator, which the checkpoint
    keeps), and the run translates."""
    with gzip.open(CORPORA / "train.tsv.gz", "rt", encoding="utf-8") as f:
        (tmp_path / "train.tsv").write_text("".join(itertools.islice(f, 3000)), encoding="utf-8")
    recipe = tmp_path / "c.yaml"
    recipe.write_text(tiny_recipe("c", data={"train": str(tmp_path / "train.tsv"), "dev": None},
                                  train={"max_steps": 20, "save_every": 10, "log_every": 10, "max_tokens": 512,
                                         "compile": True}))
    straight, split = tmp_path / "straight", tmp_path / "split"
    err = tfm("train", str(recipe), "--out", str(straight), "--device", "cpu").stderr
    assert "train.compile: the model compiles during its first steps" in err  # the quiet minute is said beforehand
    split.mkdir()
    shutil.copy(straight / "tokenizer.json", split / "tokenizer.json")
    tfm("train", str(recipe), "train.max_steps=10", "--out", str(split), "--device", "cpu")
    tfm("train", "--resume", str(split), "train.max_steps=20", "--device", "cpu")
    a = load_file(str(straight / "checkpoints" / "step-00000020.safetensors"))
    b = load_file(str(split / "checkpoints" / "step-00000020.safetensors"))
    assert a.keys() == b.keys()
    different = [k for k in a if not bool((a[k] == b[k]).all())]
    assert not different, f"the resumed compiled run differs in {different[:5]}"
    assert "compile: true" in (straight / "recipe.yaml").read_text()
    out = tfm("translate", "--model", str(straight), "--device", "cpu", "--greedy", "Bonjour.")
    assert out.stdout.strip()


def test_train_compile_without_a_compiler_is_refused_before_the_start(tmp_path: Path) -> None:
    """No C++ compiler on the PATH (and no CXX): the dry run and the start say so in one line naming
    train.compile, before any file of the run is written."""
    recipe = tmp_path / "c.yaml"
    recipe.write_text(tiny_recipe("c", data={"train": "bundled:tatoeba-fr-en/dev.tsv.gz", "dev": None},
                                  train={"max_steps": 2, "compile": True}))
    bare = {"PATH": str(tmp_path / "no-compilers-here"), "CXX": None, "CC": None}
    for extra in (["--dry-run"], []):
        proc = tfm("train", str(recipe), "--out", str(tmp_path / "run"), "--device", "cpu", *extra,
                   env_extra=bare, check=False)
        error_line(proc, "train.compile is true, but TorchInductor builds its CPU kernels with a C++ compiler")
        assert "train.compile=false" in proc.stderr
        assert not (tmp_path / "run").exists()
