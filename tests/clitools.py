"""Running the installed `tfm` the way the CLI tests do: plain output, one torch thread, text in and out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TFM = Path(sys.executable).parent / "tfm"  # the console script next to the interpreter running pytest


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
    env = {k: v for k, v in os.environ.items() if k not in ("TFM_DEBUG", "FORCE_COLOR")}
    env.update({"NO_COLOR": "1", "COLUMNS": "200", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **(env_extra or {})})
    data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
    proc = subprocess.run(
        [str(TFM), *args], input=data if data is not None else b"", capture_output=True, env=env, cwd=cwd,
        timeout=timeout,
    )
    proc.stdout, proc.stderr = proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8")
    if check:
        assert proc.returncode == 0, f"tfm {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}"
        assert "Traceback" not in proc.stderr
    return proc


def has_module(name: str) -> bool:
    """Whether an optional dependency (an extra) is installed."""
    try:
        __import__(name)
    except ImportError:
        return False
    return True
