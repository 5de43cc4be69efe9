"""Shared test setup: one torch thread in-process, and one small trained model for the tests that need a model
that really translates (the Python API, inspect-attn).

The model (d_model 128, 2+2 layers, 1k vocabulary) is trained in-process through `from tfm_cli import
load_recipe, train` for 600 steps on the 30,000 shortest pairs of the bundled corpus: 1.5-3.5 minutes of one CPU
thread, once per session however many xdist workers need it, and it produces varied, sentence-like English (dev
BLEU ~3 on 200 sentences, as at 900 steps, which cost half as much again).
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import itertools
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Byte-compile tfm_cli once, before any worker starts (the controller, or the one process of `-n 0`).

    An editable install leaves tfm_cli as source, and where PYTHONDONTWRITEBYTECODE is set (as in this project's CI
    containers) no process ever writes its bytecode: every `tfm` call compiled its modules (62 then) again, 0.5-0.9 s of a
    slow CPU against 0.1 s from bytecode, and the suite makes hundreds of calls. The .pyc files go where Python puts
    them (tfm_cli/__pycache__, ignored by git) and are checked against the source as any import checks them."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    import compileall

    import tfm_cli

    for folder in tfm_cli.__path__:
        with contextlib.suppress(OSError):  # an install we may not write to: it was compiled when installed
            compileall.compile_dir(folder, quiet=2)


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """Tiny tensors gain nothing from intra-op threads, and on a busy 2-core machine waiting for them costs
    seconds per call. Subprocesses (the CLI and end-to-end tests) set OMP_NUM_THREADS themselves."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def plot_extra(request: pytest.FixtureRequest):
    """The `tfm` calls of a test marked `plot` (it looks at curves.png or an `--image`) draw with matplotlib; the
    others' forked ones, and those of fixtures of a wider scope, run as without the [plot] extra
    (tests/forkserver.py: a second of each training saved)."""
    import clitools

    clitools.PLOT["drawn"] = request.node.get_closest_marker("plot") is not None
    yield
    clitools.PLOT["drawn"] = False


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
  max_steps: 600
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


def _trained_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the trained model lives: in the session's temporary folder, which pytest-xdist's workers share (each
    worker's own base folder sits in it)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    root = root / "trained"
    root.mkdir(exist_ok=True)
    return root


@pytest.fixture(autouse=True, scope="session")
def train_early(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Start training the shared model in a background process as soon as a session that needs it begins, so
    that no worker waits idle for it later (three minutes on a slow CPU). The trainer holds the lock that the
    `trained` fixture waits on; one started by an earlier worker is left to finish, and one still training when
    its worker ends is stopped (a later `trained` then trains in-process)."""
    trainer = None
    if any("trained" in getattr(item, "fixturenames", ()) for item in request.session.items):
        root = _trained_root(tmp_path_factory)
        with open(root / "start.lock", "w") as start:
            fcntl.flock(start, fcntl.LOCK_EX)  # held for a moment: which worker starts the trainer
            if not (root / "started").exists():
                (root / "started").touch()
                with open(root / "lock", "w") as lock:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody holds it before the trainer starts
                    code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import conftest; conftest._train_locked({str(root)!r}, {lock.fileno()})"
                    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
                    trainer = subprocess.Popen([sys.executable, "-c", code], pass_fds=(lock.fileno(),), env=env)
                # closing our descriptor leaves the lock with the trainer, which holds a copy of it until it ends
    yield
    if trainer is not None and trainer.poll() is None:
        trainer.kill()
        trainer.wait()


def _train_locked(root: str, lock_fd: int) -> None:
    """The background trainer: train into `root` while holding the inherited lock (released when it exits)."""
    import torch

    torch.set_num_threads(1)
    _train(Path(root))
    os.close(lock_fd)


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The trained model, trained once for the whole session (by `train_early`'s background process, or here if
    that did not finish it), read by every xdist worker from the session's shared temporary folder, with the
    training result and the dev evaluations the training reported."""
    root = _trained_root(tmp_path_factory)
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed, also by a process that dies
        if not (root / "trained.pickle").is_file():
            shutil.rmtree(root / "run", ignore_errors=True)  # what a stopped trainer left
            _train(root)
    with open(root / "trained.pickle", "rb") as f:
        return pickle.load(f)


def _train(root: Path) -> None:
    from tfm_cli import TrainEvents, load_recipe, train

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
    trained = {
        "dir": root / "run", "result": result, "events": SimpleNamespace(evaluations=events.evaluations),
        "sources": [p[0] for p in pairs], "references": [p[1] for p in pairs],
    }
    with open(root / "trained.pickle.tmp", "wb") as f:
        pickle.dump(trained, f)
    os.replace(root / "trained.pickle.tmp", root / "trained.pickle")  # whole, or not there
