"""The CLI tests' fork server (tests/forkserver.py) answers as a freshly started `tfm` does: the same exit status,
stdout and stderr, with the environment, directory and stdin of each call. If it did not, every CLI test run
through it would test something else."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from clitools import Forked, _fork_server, start_tfm, tfm


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch):
    """`tfm` started as a new process, as `TFM_TEST_FORK=0 pytest` runs every call."""

    def run(*args: str, **kwargs):
        with monkeypatch.context() as m:
            m.setenv("TFM_TEST_FORK", "0")
            return tfm(*args, **kwargs)

    return run


def test_the_server_is_used() -> None:
    assert _fork_server() is not None  # the suite's calls go through it unless TFM_TEST_FORK=0


def test_forked_and_fresh_tfm_answer_alike(fresh, tmp_path: Path, trained: dict) -> None:
    (tmp_path / "bad.yaml").write_text("name: x\nmodel:\n  d_model: [\n", encoding="utf-8")
    stdin = "Je suis étudiant.\n\nIl fait beau aujourd'hui.\n"
    cases = [
        (("--version",), {}),
        (("translate", "--help"), {}),
        (("translate", "--help"), {"env_extra": {"COLUMNS": "72"}}),  # the call's environment: rich wraps at 72
        (("train", "bad.yaml"), {"cwd": tmp_path}),  # the call's directory: a one-line error naming the line, exit 1
        (("translate", "--model", str(tmp_path / "missing"), "Bonjour"), {}),
        (("nonsense-command",), {}),  # typer's usage error, exit 2
        (("translate", "--model", str(trained["dir"]), "--json"), {"stdin": stdin}),  # reads stdin to its end
    ]
    for args, call in cases:
        forked, started = tfm(*args, check=False, **call), fresh(*args, check=False, **call)
        assert (forked.returncode, forked.stdout, forked.stderr) == (started.returncode, started.stdout, started.stderr), args
    assert [json.loads(line)["source"] for line in forked.stdout.splitlines()] == stdin.splitlines()
    wide, narrow = tfm("translate", "--help").stdout, tfm("translate", "--help", env_extra={"COLUMNS": "72"}).stdout
    assert max(map(len, narrow.splitlines())) <= 72 < max(map(len, wide.splitlines()))
    assert "bad.yaml: invalid YAML at line 4" in tfm("train", "bad.yaml", cwd=tmp_path, check=False).stderr


def test_started_children_run_beside_other_calls(trained: dict) -> None:
    """`start_tfm` children run while other calls come and go, and each status reaches its own caller: a
    translation left waiting for its input, another killed, a third call run to its end meanwhile."""
    waiting = start_tfm("translate", "--model", str(trained["dir"]), "--device", "cpu", stdin=subprocess.PIPE)
    stopped = start_tfm("translate", "--model", str(trained["dir"]), "--device", "cpu", stdin=subprocess.PIPE)
    assert isinstance(waiting, Forked) and waiting.poll() is None and stopped.poll() is None
    assert tfm("--version").stdout.startswith("tfm ")  # its status comes while the two others run
    stopped.kill()
    assert stopped.wait(120) == -signal.SIGKILL  # as subprocess reports a process ended by a signal
    out, err = waiting.communicate("Bonjour.\nMerci.\n", timeout=120)
    assert waiting.returncode == 0 and len(out.splitlines()) == 2 and b"Traceback" not in err, err.decode()
