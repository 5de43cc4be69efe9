"""The CLI tests' fork server (tests/forkserver.py) answers as a freshly started `tfm` does: the same exit status,
stdout and stderr, with the environment, directory and stdin of each call. If it did not, every CLI test run
through it would test something else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clitools import _fork_server, tfm


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
