"""Shared test setup: one torch thread in-process, and one small trained model for the tests that need a model
that really translates (the Python API, inspect-attn).

The model (d_model 128, 2+2 layers, 1k vocabulary) is trained in-process through `from tfm_cli import
load_recipe, train` for 900 steps on the 30,000 shortest pairs of the bundled corpus: about two minutes on one
CPU thread, and it produces varied, sentence-like English (dev BLEU ~3 on 200 sentences).
"""

from __future__ import annotations

import gzip
import itertools
from pathlib import Path

import pytest


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """Tiny tensors gain nothing from intra-op threads, and on a busy 2-core machine waiting for them costs
    seconds per call. Subprocesses (the CLI and end-to-end tests) set OMP_NUM_THREADS themselves."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


CORPORA = Path(__file__).resolve().parents[1] / "tfm_cli" / "corpora" / "tatoeba-fr-en"
RECIPE = """\
name: api
data:
  train: {train}
  dev: {dev}
  max_len: 32
tokenizer:
  vocab_size: 1000
model:
  d_model: 128
  d_ff: 256
  n_heads: 4
  n_enc_layers: 2
  n_dec_layers: 2
  dropout: 0.0
  max_positions: 64
train:
  max_tokens: 1500
  max_steps: 900
  warmup_steps: 200
  lr_factor: 1.5
  save_every: 150
  keep_last: 2
  average_last: 2
  log_every: 300
  eval_every: 0
  precision: fp32
decode:
  max_len_offset: 20
"""


def _head(name: str, n: int) -> list[str]:
    with gzip.open(CORPORA / name, "rt", encoding="utf-8") as f:
        return list(itertools.islice(f, n))


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from tfm_cli import TrainEvents, load_recipe, train

    root = tmp_path_factory.mktemp("trained")
    (root / "train.tsv").write_text("".join(_head("train.tsv.gz", 30000)), encoding="utf-8")
    dev = _head("dev.tsv.gz", 200)
    (root / "dev.tsv").write_text("".join(dev), encoding="utf-8")
    (root / "api.yaml").write_text(RECIPE.format(train=root / "train.tsv", dev=root / "dev.tsv"), encoding="utf-8")

    class Recorder(TrainEvents):
        def __init__(self) -> None:
            self.evaluations: list[dict] = []

        def evaluation(self, step: int, metrics: dict) -> None:
            self.evaluations.append({"step": step, **metrics})

    events = Recorder()
    result = train(load_recipe(root / "api.yaml", ["train.seed=3"]), root / "run", device="cpu", events=events)
    pairs = [line.rstrip("\n").split("\t") for line in dev]
    return {
        "dir": root / "run", "result": result, "events": events,
        "sources": [p[0] for p in pairs], "references": [p[1] for p in pairs],
    }
