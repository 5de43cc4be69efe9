"""Running the installed `tfm` the way the CLI tests do: plain output, one torch thread, text in and out."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

TFM = Path(sys.executable).parent / "tfm"  # the console script next to the interpreter running pytest


def tiny_recipe(name: str, **sections: Any) -> str:
    """The YAML of a recipe for the smallest model the CLI tests train (32 wide, one layer a side, a 400-token
    vocabulary, fp32, sentences of at most 32 tokens), each of `sections` updating its section key by key:
    `tiny_recipe("e2e", data={"train": path, "dev": None}, train={"max_steps": 40})`."""
    recipe: dict[str, Any] = {
        "name": name,
        "data": {"max_len": 32},
        "tokenizer": {"vocab_size": 400},
        "model": {"d_model": 32, "d_ff": 64, "n_heads": 2, "n_enc_layers": 1, "n_dec_layers": 1, "max_positions": 64},
        "train": {"precision": "fp32"},
    }
    for section, values in sections.items():  # a section's keys are updated; a top-level value is set
        recipe[section] = {**recipe.get(section, {}), **values} if isinstance(values, dict) else values
    return yaml.safe_dump(recipe, sort_keys=False, allow_unicode=True)


def tfm(
    *args: str,
    stdin: bytes | str | None = None,
    cwd: Path | None = None,
    env_extra: dict[str, str] | None = None,
    check: bool = True,
    timeout: int = 600,
) -> subprocess.CompletedProcess:
    """Run `tfm ARGS`; stdout and stderr come back as text. With `check`, a non-zero exit or a traceback fails.

    One torch thread: the CI box has 2 shared cores, where torch's default thread pool spins against other
    jobs, and exact-resume comparisons need the same thread count anyway.
    """
    data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
    proc = subprocess.run(
        [str(TFM), *args], input=data if data is not None else b"", capture_output=True, env=tfm_env(env_extra),
        cwd=cwd, timeout=timeout,
    )
    proc.stdout, proc.stderr = proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8")
    if check:
        assert proc.returncode == 0, f"tfm {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}"
        assert "Traceback" not in proc.stderr
    return proc


def tfm_env(env_extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment `tfm` runs in here: plain output, one torch thread, no TFM_DEBUG."""
    env = {k: v for k, v in os.environ.items() if k not in ("TFM_DEBUG", "FORCE_COLOR")}
    env.update({"NO_COLOR": "1", "COLUMNS": "200", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **(env_extra or {})})
    return env


def start_tfm(*args: str, **popen: Any) -> subprocess.Popen:
    """`tfm ARGS` started and not waited for (a test that signals or kills it); stdout and stderr piped as bytes
    unless `popen` says otherwise."""
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **popen}
    return subprocess.Popen([str(TFM), *args], env=tfm_env(), **popen)


def wait_until(
    proc: subprocess.Popen, ready: Callable[[], bool], what: str, timeout: float = 120, every: float = 0.2
) -> None:
    """Poll `ready()` every `every` seconds until true; fail with the process's stderr if it ends first, or with
    `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, proc.communicate()[1].decode()
        assert time.monotonic() < deadline, what
        time.sleep(every)


def has_lines(path: Path) -> Callable[[], bool]:
    """A `ready` for `wait_until`: the run's metrics.jsonl (or any file) has a line."""
    return lambda: path.is_file() and bool(path.read_text(encoding="utf-8").strip())


def has_module(name: str) -> bool:
    """Whether an optional dependency (an extra) is installed."""
    try:
        __import__(name)
    except ImportError:
        return False
    return True
