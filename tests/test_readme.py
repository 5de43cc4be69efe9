"""The README's two set-up commands and `.ci/run` must not drift apart."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_COMMAND = 'pip install torch==2.13.0 && pip install -e ".[dev,all]" && pytest'


def _setup_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    return [block.strip().splitlines()[0] for block in blocks]


def test_readme_has_the_two_setup_commands():
    commands = _setup_commands()
    assert len(commands) == 2, commands
    main_job, tests = commands
    assert main_job.endswith("tfm train recipes/tiny.yaml")
    assert "pip install torch==2.13.0" in main_job
    assert tests.endswith(TEST_COMMAND)


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert TEST_COMMAND in ci.splitlines()
    assert "set -euo pipefail" in ci
    assert "python3 -m venv" in ci


def test_readme_recipes_exist():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in re.findall(r"`(recipes/[a-z_]+\.yaml)`", text):
        assert (ROOT / name).is_file(), name


def test_readme_architecture_names_every_module():
    """The Architecture section's tree lists each module of tfm_cli/, training/ and model/ (batches.py,
    signals.py, files.py, errors.py and training/stopping.py were missing from it)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    tree = text.split("## Architecture", 1)[1].split("\n## ", 1)[0]
    package = ROOT / "tfm_cli"
    modules = [p for folder in (package, package / "training", package / "model") for p in folder.glob("*.py")]
    missing = [str(p.relative_to(package)) for p in modules if p.stem not in ("__init__", "__main__") and p.name not in tree]
    assert not missing, missing


def test_every_package_tfm_imports_is_declared():
    """numpy was imported (export checks, attention images) but not declared: it came only as sacrebleu's own
    dependency. Every third-party package that tfm_cli imports is among the requirements of the installed
    package, core or extra."""
    import ast
    import sys
    from importlib import metadata

    imported = set()
    for path in (ROOT / "tfm_cli").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = {m for m in imported if m not in sys.stdlib_module_names and m != "tfm_cli"}
    distributions = metadata.packages_distributions()
    declared = {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower().replace("_", "-") for r in metadata.requires("tfm") or []}
    missing = {}
    for module in third_party:
        names = distributions.get(module, [module])
        if not {n.lower().replace("_", "-") for n in names} & declared:
            missing[module] = names
    assert third_party and not missing, missing


def test_readme_other_direction_finds_the_bundled_corpus():
    """The README's English-to-French recipe finds the bundled corpus's folder with one line of Python: that
    line, run as written, names a folder holding the train and dev files it cuts."""
    import subprocess
    import sys

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    line = re.search(r'^D=\$\(python -c "(.+)"\)$', text, flags=re.M)
    assert line, "the README's D=$(python -c ...) line is gone"
    folder = Path(subprocess.run([sys.executable, "-c", line.group(1)], capture_output=True, text=True, check=True).stdout.strip())
    assert (folder / "train.tsv.gz").is_file() and (folder / "dev.tsv.gz").is_file()
