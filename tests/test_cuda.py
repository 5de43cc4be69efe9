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
