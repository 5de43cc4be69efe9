"""`tfm train RECIPE [key=value ...]`: train a model from a YAML recipe (or resume a run).

With `--nproc-per-node N` (and the node options) the command re-launches itself under torchrun; started by
torchrun, it runs as one rank of the job (`tfm_cli.distributed`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import typer

from tfm_cli.cli.common import (
    DEVICE_HELP,
    JSON_HELP,
    counted_progress,
    device_name,
    duration,
    err,
    fancy_stderr,
    given_path,
    handling_stop_signals,
    info,
    interrupted_status,
    print_json,
    print_table,
    stop_signals,
    warn,
)
from tfm_cli.errors import TfmError, install_hint, shell_word
from tfm_cli.files import home_path, missing
from tfm_cli.signals import PARENT_ENV
from tfm_cli.torchrun import OWNED_LOGS_ENV

_DIST = "Several processes or machines (torchrun, DDP)"


def train(
    recipe: str = typer.Argument(None, help="Recipe YAML, e.g. recipes/tiny.yaml (omit with --resume).", show_default=False),
    overrides: list[str] = typer.Argument(None, help="Recipe overrides as dotted.key=value, e.g. train.max_steps=2000.", show_default=False),
    out: Path = typer.Option(None, "--out", "-o", parser=given_path, metavar="<path>", help="Run directory (default: runs/<recipe name>).", show_default=False),
    resume: Path = typer.Option(None, "--resume", parser=given_path, metavar="<path>", help="Continue the run in this directory from its newest checkpoint.", show_default=False),
    device: str = typer.Option("auto", "--device", callback=device_name, help=DEVICE_HELP),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check the recipe, corpora and run directory as a real start would, print the resolved recipe, parameter count and tokens per step, then exit."),
    curves: Path = typer.Option(None, "--curves", parser=given_path, metavar="<path>", help="Show a run's loss and dev BLEU curves (and write curves.png with the plot extra), then exit.", show_default=False),
    json_out: bool = typer.Option(False, "--json", help=JSON_HELP),
    nproc_per_node: int = typer.Option(None, "--nproc-per-node", min=1, help="Train with N processes on this node, one per GPU with CUDA (NCCL) or sharing the cores on CPU (gloo: at most one a core, or 2), under torchrun. train.max_tokens stays the budget of the whole step.", show_default=False, rich_help_panel=_DIST),
    nnodes: int = typer.Option(None, "--nnodes", min=1, help="Number of nodes (machines) in the job, each running the same command.", show_default=False, rich_help_panel=_DIST),
    node_rank: int = typer.Option(None, "--node-rank", min=0, help="This node's rank, 0 to nnodes-1 (node 0 writes the run).", show_default=False, rich_help_panel=_DIST),
    master_addr: str = typer.Option(None, "--master-addr", help="Address of node 0 (several nodes without --rdzv-endpoint).", show_default=False, rich_help_panel=_DIST),
    master_port: int = typer.Option(None, "--master-port", min=1, max=65535, help="A free port on node 0 (torchrun's default: 29500).", show_default=False, rich_help_panel=_DIST),
    rdzv_endpoint: str = typer.Option(None, "--rdzv-endpoint", help="HOST:PORT of a c10d rendezvous instead of --master-addr and --node-rank.", show_default=False, rich_help_panel=_DIST),
) -> None:
    """Train a Transformer from a YAML recipe; checkpoints and the final model go to the run directory.

    Examples:

      tfm train recipes/tiny.yaml

      tfm train recipes/base.yaml train.max_steps=2000 model.dropout=0.2 --out runs/base-short

      tfm train --resume runs/tiny

      tfm train recipes/base.yaml --nproc-per-node 8

      tfm train --curves runs/tiny
    """
    launch = _Launch(nproc_per_node, nnodes, node_rank, master_addr, master_port, rdzv_endpoint)
    if launch.asked:
        if curves is not None or dry_run:
            # (it named --nproc-per-node where only --node-rank was given)
            raise typer.BadParameter(
                f"{', '.join(launch.given)} {'starts' if len(launch.given) == 1 else 'start'} training with torchrun, "
                f"which {'--dry-run' if dry_run else '--curves'} does not: drop {'it' if len(launch.given) == 1 else 'them'}",
                param_hint=launch.given[0]
            )
        launch.check(device)
    if curves is not None:
        given = [*([recipe] if recipe is not None else []), *(overrides or [])]  # a first override reads as RECIPE
        given += [o for o, v in (("--resume", resume), ("--out", out)) if v is not None] + (["--dry-run"] if dry_run else [])
        given += [f"--device {device}"] if device != "auto" else []
        if given:  # each was ignored without a word
            raise typer.BadParameter(
                f"--curves shows an existing run and trains nothing; drop {' '.join(given)}",
                param_hint="--curves",
            )
        _show_curves(curves, json_out)
        return
    recipe, overrides, resolved, run_dir = _resolve(recipe, list(overrides or []), resume, out)
    if dry_run:
        _check_as_a_start_would(resolved, run_dir, resume, device, json_out)
        return
    if launch.asked:  # the same command, minus the launcher options, as N processes under torchrun
        from tfm_cli.training import preflight
        from tfm_cli.training.checks import with_init_tokenizer

        preflight(with_init_tokenizer(resolved, resume is not None), Path(run_dir), resume is not None)  # said once here
        args = ["train", *([recipe] if recipe is not None else []), *overrides, "--device", device]
        args += ["--resume", str(resume)] if resume is not None else ["--out", str(run_dir)]
        args += ["--json"] if json_out else []
        raise typer.Exit(launch.run(args, device))
    result = _train_here(resolved, run_dir, device, resume is not None)
    _report(result, resolved, json_out)


def _resolve(recipe: str | None, overrides: list[str], resume: Path | None, out: Path | None):
    """The recipe as given and the overrides (a resume's first override may have come as RECIPE), the resolved
    recipe, and the run directory: a resume's own, else --out or runs/<recipe name>."""
    from tfm_cli.recipe import load_recipe

    if resume is not None:
        # `tfm train --resume RUN key=value` (or `key = value`): no recipe was given
        if recipe is not None and ("=" in recipe or (overrides and overrides[0].startswith("="))):
            overrides.insert(0, recipe)
            recipe = None
        if recipe is not None:
            raise typer.BadParameter("give either RECIPE or --resume RUN_DIR, not both", param_hint="RECIPE")
        if out is not None and out.absolute() != resume.absolute():  # a resume continues the run where it is
            raise typer.BadParameter(
                f"--resume continues {resume} in place; drop --out {out} (to train a new run from its recipe: "
                f"tfm train {resume / 'recipe.yaml'} --out {out})",
                param_hint="--out",
            )
        from tfm_cli.training import resume_recipe

        return recipe, overrides, resume_recipe(resume, overrides), resume
    if recipe is None:
        raise typer.BadParameter("a recipe is required, e.g. `tfm train recipes/tiny.yaml`", param_hint="RECIPE")
    resolved = load_recipe(recipe, overrides)
    run_dir = out if out is not None else Path("runs") / resolved.name
    from tfm_cli.training.checks import check_recipe_file

    check_recipe_file(recipe, resolved, Path(run_dir), overrides)
    return recipe, overrides, resolved, run_dir


def _check_as_a_start_would(resolved, run_dir: Path, resume: Path | None, device: str, json_out: bool) -> None:
    """--dry-run: every check a real start (or resume) makes before it writes, the corpora read through, then what
    it would train."""
    from tfm_cli.corpus import PROGRESS_EVERY, is_mixture, now_and_then
    from tfm_cli.runtime import resolve_device, resolve_precision
    from tfm_cli.training import check_resume, check_start, preflight, scan_corpora
    from tfm_cli.training.checks import restored_recipe_note, schedule_warnings, with_init_tokenizer
    from tfm_cli.training.compiling import check_compile
    from tfm_cli.training.corpora import check_mixture

    torch_device = resolve_device(device)
    resolve_precision(resolved.train.precision, torch_device, "train.precision")  # fp16 on a CPU is refused
    if resolved.train.compile:  # no C++ compiler (CPU) or Triton (CUDA) for torch.compile
        check_compile(torch_device)
    resolved = with_init_tokenizer(resolved, resume is not None)  # fine-tuning: that model's tokenizer, as a start
    preflight(resolved, Path(run_dir), resume is not None)  # every check a real start makes before writing
    # and a resume's, saying the newer checkpoints it would pass over, as the resume says them
    resumes_at = check_resume(resolved, Path(run_dir), torch_device, said=info) if resume is not None else None
    if resume is not None and (note := restored_recipe_note(Path(run_dir), dry_run=True)):
        info(note)
    found: list[str] = schedule_warnings(resolved)
    # a line every 30 s while a large corpus is read, then tokenized (minutes for millions of lines: a silent
    # dry run looked hung)
    said = now_and_then(PROGRESS_EVERY, lambda text, seconds: info(f"{text} so far ({duration(seconds)})"))
    pairs = scan_corpora(resolved, found, lambda key, n: said(f"{key}: {n:,} pairs read"))  # (+ a dev set in it)
    if is_mixture(resolved.data.train):  # the start's refusal of weights that take no pair or too many, said now
        found += [w.removeprefix("warning: ") for w in check_mixture(_mixture_parts(resolved, pairs))]
    for warning in found:
        warn(warning)
    if resume is None:
        for warning in check_start(resolved, Path(run_dir), lambda n: said(f"data.train: {n:,} pairs tokenized")):
            warn(warning)
    _dry_run(resolved, run_dir, json_out, pairs, resumes_at, torch_device)


def _train_here(resolved, run_dir: Path, device: str, resume: bool):
    """Train in this process: alone, or as one rank of a torchrun job (rank 0 shows the progress, the others say
    nothing but their own errors). Returns the `TrainResult`; a stopped run exits here with its status."""
    from tfm_cli.distributed import RankError, lost_a_peer, torchrun_env
    from tfm_cli.runtime import resolve_device, resolve_precision
    from tfm_cli.training import train as run_training

    rank, local_rank, _ = torchrun_env() or (0, 0, 1)
    torch_device = resolve_device(device)
    precision = resolve_precision(resolved.train.precision, torch_device, "train.precision")
    with stop_signals() as received:
        try:
            if rank != 0:  # one rank of a torchrun job: rank 0 prints progress and the result
                try:
                    result = run_training(resolved, run_dir, torch_device, resume=resume)
                except RuntimeError as error:  # rank 0 ended while setting up (a bad dev set line): it has said why
                    if not lost_a_peer(error):
                        raise
                    raise typer.Exit(1) from None
                except TfmError as error:  # a bad corpus line, a refused resume: local rank 0 says the same line
                    if isinstance(error, RankError) and error.said_elsewhere:  # rank 0 stopped on a full disk, said so
                        raise typer.Exit(1) from None
                    if local_rank == 0 or isinstance(error, RankError):
                        raise
                    raise typer.Exit(1) from None
                raise typer.Exit(interrupted_status(received) if result.interrupted else 0)
            info(f"tfm train: recipe {resolved.name} -> {run_dir} on {torch_device} ({precision})")
            events = _Progress(resolved.train.max_steps, resolved.train.log_every)
            try:
                result = run_training(resolved, run_dir, torch_device, resume=resume, events=events)
            finally:
                events.close()
        except KeyboardInterrupt:  # outside the training loop: while setting up, or writing the final model
            _exiting()
            if rank != 0:
                raise typer.Exit(interrupted_status(received)) from None
            _interrupted_outside_the_loop(Path(run_dir), received, torch_device)
    if result.interrupted:
        _exiting()
        if received:
            info(f"tfm train: stopped by {signal.Signals(received[0]).name}")
        raise typer.Exit(interrupted_status(received))
    return result


def _report(result, resolved, json_out: bool) -> None:
    """The finished run: its final model's dev scores (a table, or JSON), its curves, and the command to try it."""
    final = result.final
    summary: dict[str, Any] = {
        "run_dir": str(result.run_dir), "steps": result.step, "wall_seconds": round(result.seconds, 1),
        "model": str(result.run_dir / "model.safetensors"), **{k: final[k] for k in final if k != "sentences"},
    }
    if result.stopped:
        summary["stopped"] = result.stopped
    if json_out:
        print_json(summary)
    else:
        shown = {"final_model": _describe, "as_written": _as_written}
        rows = [(k, shown[k](v) if k in shown else v) for k, v in summary.items() if not k.endswith("signature")]
        print_table("Training finished", ["", "value"], rows)
        if "bleu_signature" in final:
            info(f"sacrebleu: {final['bleu_signature']} | {final['chrf_signature']}")
        _print_curves(result.run_dir)
    info(f"next: tfm translate --model {shell_word(result.run_dir)} {shell_word(_example_source(resolved))}")


def _example_source(recipe) -> str:
    """A short source sentence of the run's own language for the hint: the first dev (else training) source of
    at most 40 characters among the first 200 pairs (not one that starts with "-", which would read as an option)."""
    import itertools

    from tfm_cli.corpus import read_pairs

    for spec in (recipe.data.dev, recipe.data.train):
        if not spec:
            continue
        try:
            for _, src, _ in itertools.islice(read_pairs(spec), 200):
                if 0 < len(src.strip()) <= 40 and not src.strip().startswith("-"):
                    return " ".join(src.split())
        except (OSError, TfmError):  # moved or damaged since the run read it: the hint is not worth an error
            continue
    return "a sentence"


def _exiting() -> None:
    """The run is stopped and saved, and the process is on its way out: a second Ctrl-C would only interrupt
    Python's exit handlers (torch's among them) with a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)




def _interrupted_outside_the_loop(run_dir: Path, received: list[int], device=None) -> None:
    """Ctrl-C or a stop signal before the first step or while the final model was written: every file is written
    under a temporary name and renamed, so what is there is whole; say what to run next, and exit 128 + signal."""
    from tfm_cli.distributed import resume_command
    from tfm_cli.runs import checkpoint_steps

    why = signal.Signals(received[0]).name if received else "Ctrl-C"
    steps = checkpoint_steps(run_dir) if run_dir.is_dir() else []
    if steps:
        info(f"tfm train: stopped by {why} outside a training step; its checkpoints (up to step {steps[-1][0]}) are "
             f"intact; continue, or write the final model, with `{resume_command(run_dir, device=device)}`")
    else:
        info(f"tfm train: stopped by {why} before the first checkpoint; nothing to resume: start again")
    raise typer.Exit(interrupted_status(received))


class _Launch:
    """`--nproc-per-node N` and the node options: checked, then torchrun started on `tfm train` itself."""

    def __init__(self, nproc_per_node, nnodes, node_rank, master_addr, master_port, rdzv_endpoint) -> None:
        options = {"--nproc-per-node": nproc_per_node, "--nnodes": nnodes, "--node-rank": node_rank,
                   "--master-addr": master_addr, "--master-port": master_port, "--rdzv-endpoint": rdzv_endpoint}
        self.given = [name for name, value in options.items() if value is not None]  # those given, in the help's order
        self.asked = bool(self.given)
        self.nproc, self.nnodes = nproc_per_node or 1, nnodes or 1
        self.node_rank, self.master_addr, self.master_port = node_rank, master_addr, master_port
        self.rdzv_endpoint = rdzv_endpoint

    def check(self, device: str) -> None:
        """One line (exit 2) for a combination that cannot start."""
        from tfm_cli.distributed import torchrun_env

        if torchrun_env() is not None:
            raise typer.BadParameter("this process already runs under torchrun; drop the launcher options", param_hint="--nproc-per-node")
        if self.node_rank is not None and self.node_rank >= self.nnodes:
            raise typer.BadParameter(f"--node-rank {self.node_rank} must be below --nnodes {self.nnodes}", param_hint="--node-rank")
        if self.nnodes > 1 and self.rdzv_endpoint is None and (self.master_addr is None or self.node_rank is None):
            raise typer.BadParameter(
                f"--nnodes {self.nnodes} needs --master-addr (node 0's address) and --node-rank on each node, or --rdzv-endpoint HOST:PORT",
                param_hint="--nnodes",
            )
        if self.rdzv_endpoint is not None and (self.master_addr is not None or self.master_port is not None):
            raise typer.BadParameter("give either --rdzv-endpoint HOST:PORT or --master-addr/--master-port, not both", param_hint="--rdzv-endpoint")
        self._check_address()
        if device.startswith("cuda:") and self.nproc * self.nnodes > 1:
            raise typer.BadParameter(f"--device {device} names one GPU; with several processes use --device cuda (process N takes cuda:N)", param_hint="--device")
        import torch

        if device.startswith("cuda") or (device == "auto" and torch.cuda.is_available()):
            gpus = torch.cuda.device_count()
            if self.nproc > gpus:
                raise typer.BadParameter(f"--nproc-per-node {self.nproc} is more processes than this node's {gpus} GPU(s)", param_hint="--nproc-per-node")
        else:  # `--nproc-per-node 9223372036854775807` grew the launcher's memory until it was killed, with no word
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
            if self.nproc > max(cores, 2):  # (two, the smallest distributed run, on any machine: to try it out)
                raise typer.BadParameter(
                    f"--nproc-per-node {self.nproc} is more processes than this node takes on CPU (gloo): one a core, "
                    f"{cores} here, or 2 on any machine; give at most {max(cores, 2)}", param_hint="--nproc-per-node",
                )

    def _check_address(self) -> None:
        """--master-addr and --rdzv-endpoint as torchrun would read them, said in one line: a port that is not a
        number was torchrun's ValueError traceback, and a host that does not resolve a minute of retries and a
        C++ stack trace. An empty value (an unset shell variable) is not quietly the default."""
        import socket

        from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

        for option, value in (("--master-addr", self.master_addr), ("--rdzv-endpoint", self.rdzv_endpoint)):
            if value is None:
                continue
            if not value.strip():
                raise typer.BadParameter("is empty (an unset shell variable?): give node 0's address", param_hint=option)
            if option == "--master-addr":
                host, port = value, self.master_port or 29500
            else:
                try:
                    host, port = parse_rendezvous_endpoint(value, default_port=29400)
                except ValueError:
                    host, port = value, 0
                if not 1 <= port <= 65535:
                    raise typer.BadParameter(f"{value!r} is not HOST:PORT with a port from 1 to 65535 (e.g. node0:29400)", param_hint=option)
            try:
                socket.getaddrinfo(host, port)
            except (OSError, UnicodeError) as error:  # socket.gaierror: an unknown name
                why = getattr(error, "strerror", None) or error
                raise typer.BadParameter(f"the host {host!r} cannot be resolved ({why}): give node 0's name or IP address", param_hint=option) from None

    def run(self, args: list[str], device: str) -> int:
        """Run torchrun on `tfm ARGS` (after `check`); its exit status."""
        import torch

        from tfm_cli.distributed import threads_per_process, torchrun_command

        env = dict(os.environ)
        env[PARENT_ENV] = str(os.getpid())  # torchrun stops when this process ends, even by kill -9
        on_cpu = device == "cpu" or (device == "auto" and not torch.cuda.is_available())
        threads = threads_per_process(self.nproc) if on_cpu else None
        if threads is not None:  # the cores shared out (torchrun would give each process one thread)
            env["OMP_NUM_THREADS"] = str(threads)
        cmd = torchrun_command(
            args, self.nproc, self.nnodes, self.node_rank, self.master_addr, self.master_port, self.rdzv_endpoint
        )
        info(f"tfm train: {self.nproc} process(es) on this node, {self.nnodes} node(s): {' '.join(cmd[1:])}")
        if self.nnodes > 1:  # torchrun says nothing while it waits, up to 15 minutes
            where = self.rdzv_endpoint or f"{self.master_addr}:{self.master_port or 29500}"
            own = "" if self.rdzv_endpoint else ", with its own --node-rank"  # (the c10d rendezvous assigns them)
            info(f"tfm train: waiting for all {self.nnodes} nodes to meet at {where} (up to 15 minutes; start the "
                 f"same command on each node{own})")
        # torchrun in a session of its own: a stop signal reaches it once, from here, whether it came from the
        # terminal (Ctrl-C signals the whole foreground group) or to this process alone (`kill -INT PID` left tfm
        # waiting and the job training on: Python's Ctrl-C handler only raised KeyboardInterrupt here)
        forwarded: list[int] = []
        torchrun: list[subprocess.Popen] = []  # once started
        sent: list[float] = []  # when the signal was passed on

        def forward(signum: int, frame: Any) -> None:  # torchrun passes it on to the ranks, which stop and save
            forwarded.append(signum)
            if torchrun and not sent:  # once: a second signal would cut torchrun's own shutdown short
                sent.append(time.monotonic())
                # torchrun handles SIGTERM, SIGINT, SIGHUP and SIGQUIT only: SIGXCPU (a CPU-time limit's notice)
                # killed it outright, its workers left running as this process returned; they get SIGTERM
                xcpu = getattr(signal, "SIGXCPU", None)
                torchrun[0].send_signal(signal.SIGTERM if signum == xcpu else signum)

        # torchrun's log directory (its workers' error files), removed here once it has ended: one ended by a signal
        # at the rendezvous, before its Python code runs again, cannot remove its own (tfm_cli.torchrun)
        logs = tempfile.mkdtemp(prefix="tfm-torchrun-")
        env[OWNED_LOGS_ENV] = logs  # torchrun removes it if this process is gone by then (killed: kill -9)
        try:
            with handling_stop_signals(forward), _forwarding_ctrl_c(forward):
                if forwarded:  # before anything started
                    return interrupted_status(forwarded)
                torchrun.append(subprocess.Popen([*cmd[:3], f"--log-dir={logs}", *cmd[3:]], env=env, start_new_session=True))
                if forwarded and not sent:  # it came while torchrun was being started
                    forward(forwarded.pop(), None)
                status, started = _wait_for_torchrun(torchrun[0], sent, Path(logs))
            if status < 0:  # torchrun killed: its workers get SIGTERM, and save the step they are in
                _wait_for_the_workers(args)
        finally:
            shutil.rmtree(logs, ignore_errors=True)
        if forwarded and not started:
            at = "while waiting for the other nodes of the job" if self.nnodes > 1 else "as the job was starting"
            info(f"tfm train: stopped by {signal.Signals(forwarded[0]).name} {at}: no process had started, nothing "
                 "was trained or written")
        if forwarded:
            return interrupted_status(forwarded)
        if status < 0:  # torchrun itself killed (kill -9, the out-of-memory killer): it could say nothing
            from tfm_cli.torchrun import killed_message

            who = f"torchrun (pid {torchrun[0].pid}), which ran the job's processes on this node,"
            print(killed_message(who, -status, cmd[3:]), file=sys.stderr)
            return 128 - status
        return status


def _wait_for_torchrun(torchrun: subprocess.Popen, sent: list[float], logs: Path, grace: float = 3.0) -> tuple[int, bool]:
    """torchrun's exit status, once it ends; and whether it had started the job's processes by then.

    Ctrl-C passed on to torchrun while it waits at the rendezvous for the other nodes did nothing for up to 15
    minutes: its main thread is inside the C++ store's wait, where Python's KeyboardInterrupt is not raised (SIGTERM
    ends it there). When it has not ended `grace` seconds after the signal (`sent` holds when it was passed on) and
    has started no worker (its log directory `logs`, where it makes a folder for the attempt as it starts them, is
    still empty), there is nothing to save: it is sent SIGTERM, and killed if that did not end it either. With
    workers it ends as they do, once they have saved (it may outlive them by seconds: the folder tells).
    """
    started = False
    ended: list[float] = []  # when it was told to end here
    while True:
        started = started or _holds_anything(logs)
        try:
            status = torchrun.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            if ended and time.monotonic() - ended[0] > grace:
                torchrun.kill()
            elif not ended and sent and time.monotonic() - sent[0] > grace and not started:
                torchrun.terminate()  # its handler runs inside that wait (a worker started meanwhile saves)
                ended.append(time.monotonic())
            continue
        return status, started or _holds_anything(logs)


def _holds_anything(folder: Path) -> bool:
    """Whether `folder` holds a file or folder (False where it cannot be read, or is gone)."""
    try:
        with os.scandir(folder) as entries:
            return next(entries, None) is not None
    except OSError:
        return False


def _wait_for_the_workers(args: list[str], timeout: float = 120) -> None:
    """Wait (at most `timeout` seconds) until rank 0 of this node lets go of the run directory's lock: the workers
    have saved the step they were in and ended, so the checkpoints said next are all there and a resume may start."""
    from tfm_cli.files import DirectoryLock

    option = "--resume" if "--resume" in args else "--out"
    run_dir = Path(args[args.index(option) + 1])
    deadline = time.monotonic() + timeout
    while run_dir.is_dir() and time.monotonic() < deadline:
        lock = DirectoryLock(run_dir)
        try:
            if lock.acquire():
                lock.release()
                return
        except (OSError, ImportError):  # a directory it cannot open, no flock (not Linux): nothing to wait on
            return
        time.sleep(0.2)


@contextlib.contextmanager
def _forwarding_ctrl_c(handler: Any):
    """`handler` for SIGINT while Python's own (KeyboardInterrupt) is in place; left alone when it is ignored."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _as_written(scores: dict[str, Any]) -> str:
    """The final scores against the dev references as the file has them (`evaluation.DevSet.written`)."""
    n = scores["references_changed"]
    return (f"BLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f} (against the references as the file has them; "
            f"normalising changed {n:,} of them)")


def _describe(final_model: dict[str, Any]) -> str:
    """"average of 5 checkpoints (dev BLEU 35.6; last checkpoint 35.1)" for the summary table."""
    chosen = final_model.get("chosen", "average")
    text = f"average of {len(final_model.get('checkpoints', []))} checkpoints" if chosen == "average" else "the last checkpoint"
    if "average" in final_model and "last" in final_model:
        text += f" (dev BLEU: average {final_model['average']['bleu']:.2f}, last {final_model['last']['bleu']:.2f})"
    return text


def _show_curves(run_dir: Path, json_out: bool) -> None:
    """`tfm train --curves RUN`: the run's curves from metrics.jsonl, as a chart or as JSON."""
    from tfm_cli.monitor import read_curves, write_curves_png

    if not run_dir.exists():
        raise TfmError(f"run directory {run_dir} {missing(run_dir)}", hint="check the path; runs are under runs/, e.g. runs/tiny")
    if not run_dir.is_dir():  # `--curves RUN/metrics.jsonl` said the file "has no metrics.jsonl"
        inside = (run_dir.parent / "metrics.jsonl").is_file()  # a file of a run: that run
        raise TfmError(
            f"{run_dir} is {'a file' if run_dir.is_file() else 'not a folder'}, not a run directory",
            hint=f"pass the run directory, e.g. {shell_word(run_dir.parent) if inside else 'runs/tiny'}",
        )
    try:
        data = read_curves(run_dir)
    except (FileNotFoundError, NotADirectoryError):
        raise TfmError(
            f"{run_dir} has no metrics.jsonl: it is not a tfm run directory, or its training has not logged yet",
            hint="pass a run directory, e.g. runs/tiny",
        ) from None
    tfm_wrote = data["train"] or data["eval"] or data["final"] or data["skipped_steps"] or data["not_finite"]
    if data["damaged_lines"] and not tfm_wrote:
        raise TfmError(  # (random bytes said "no training records yet", exit 0)
            f"{run_dir / 'metrics.jsonl'} holds no record tfm writes ({data['damaged_lines']:,} line(s), from line "
            f"{data['first_damaged_line']}, are none): the file is damaged, or is not a tfm run's log",
            hint="restore it from a copy; the run's checkpoints and model do not depend on it",
        )
    if json_out:
        print_json(data)
        return
    _print_curves(run_dir, data)
    # what the chart leaves out, said (a diverged loss is what one opens the curves to find)
    if steps := data["skipped_steps"]:
        shown = ", ".join(map(str, steps[:8])) + (", ..." if len(steps) > 8 else "")
        warn(f"{len(steps):,} update{'s' if len(steps) != 1 else ''} skipped by the trainer, the loss not finite (step{'s' if len(steps) != 1 else ''} {shown})")
    if n := data["not_finite"]:
        warn(f"{run_dir / 'metrics.jsonl'}: {n:,} record{'s' if n != 1 else ''} of a loss or score that is not a finite number, not drawn")
    if n := data["damaged_lines"]:
        warn(
            f"{run_dir / 'metrics.jsonl'}: {n:,} line{'s that are' if n != 1 else ' that is'} no record tfm writes (cut by "
            f"a crash, damaged or edited), from line {data['first_damaged_line']}, not drawn"
        )
    if not data["train"]:  # (it said "curves.png needs matplotlib", with matplotlib installed)
        info("curves.png not written: no training records to draw")
        return
    try:
        png = write_curves_png(run_dir, data)
    except OSError as error:  # a run this user may read but not write (another's, a read-only copy): the chart was shown
        warn(f"curves.png not written: {error.filename}: {error.strerror}")
        return
    info(f"curves: {png}" if png else f"curves.png needs matplotlib: {install_hint('plot')}")


def _print_curves(run_dir: Path, data: dict[str, Any] | None = None) -> None:
    import shutil

    from tfm_cli.cli.views import curves_lines
    from tfm_cli.monitor import read_curves

    width = max(20, min(80, shutil.get_terminal_size((100, 24)).columns - 16))
    print("\n".join(curves_lines(data if data is not None else read_curves(run_dir), width)))


def _mixture_parts(recipe, pairs: dict[str, int]) -> list[tuple[str, int, float]]:
    """(name, pairs read, weight) of each corpus of the recipe's mixture, from `scan_corpora`'s counts."""
    from tfm_cli.corpus import corpus_parts, describe

    return [(f"data.train[{part.number}] ({describe(part.spec)})", pairs[f"data.train[{part.number}]"], part.weight)
            for part in corpus_parts(recipe.data.train)]


def _dry_run(recipe, run_dir: Path, json_out: bool, pairs: dict[str, int], resumes_at: int | None, device) -> None:
    """Resolved recipe, parameter count, tokens per step, the corpora's sentence pairs and, for a resume, the
    step it continues from; nothing is written."""
    import yaml

    from tfm_cli.corpus import is_mixture
    from tfm_cli.data import pairs_taken
    from tfm_cli.recipe import model_config, recipe_to_dict, with_numbers_of
    from tfm_cli.tokenizer import Tokenizer
    from tfm_cli.training import parameter_count
    from tfm_cli.training.checks import with_absolute_paths
    from tfm_cli.training.corpora import mixture_text
    from tfm_cli.training.step import check_fits

    vocab = recipe.tokenizer.vocab_size
    tok_path = Path(run_dir) / "tokenizer.json"  # what a start uses first (preflight refused one that differs from tokenizer.path)
    left_there = tok_path.is_file() and resumes_at is None and not recipe.tokenizer.path
    if not tok_path.is_file() and recipe.tokenizer.path:
        tok_path = home_path(recipe.tokenizer.path)
    asked = recipe.tokenizer.vocab_size
    if tok_path.is_file():
        vocab = Tokenizer.load(tok_path).vocab_size
    if tok_path.is_file() and resumes_at is None:
        # the recipe the start will record: its tokenizer's size (a dry run printed the size asked for, which a
        # start with a tokenizer already in the run directory does not train)
        from tfm_cli.training.checks import with_tokenizer_size

        recipe = with_tokenizer_size(recipe, vocab)
    kept = (
        f"tokenizer: {tok_path} ({vocab:,} tokens), already in the run directory (from `tfm tokenize` or an earlier "
        f"start), not trained again: delete it to train one with tokenizer.vocab_size {asked}"
    ) if left_there and vocab != asked else None
    config = model_config(recipe, vocab, 0, 1, 2)
    recipe = with_numbers_of(recipe, config.numbers)  # as the start records it (null: a new model's way)
    parameters = parameter_count(config)  # shapes only: no memory is allocated
    t = recipe.train
    init = None
    if t.init_from and resumes_at is None:  # as the start checks it: every shape of that model the same
        from tfm_cli.training.checks import check_init

        init = check_init(recipe, config)
    budget: dict[str, Any] = {}
    finished = None
    if resumes_at is not None:
        from tfm_cli.training import finished_resume

        finished = finished_resume(Path(run_dir), recipe)
    if finished is None:  # room for its checkpoints, as a start checks it (a dry run passed a model of 10**9 wide)
        from tfm_cli.training.checks import check_room

        check_room(Path(run_dir), config, t, resumes_at is not None, probe=False)
    check_fits(config, device)  # as the start checks it, after the disk, before building the model
    if resumes_at is not None and t.max_time and finished is None:  # the budget counts all sessions: what this resume has left of it
        from tfm_cli.recipe import parse_duration
        from tfm_cli.training import trained_seconds

        used = trained_seconds(Path(run_dir))
        budget = {"train_seconds_used": round(used, 1), "train_seconds_left": round(max(0.0, parse_duration(t.max_time) - used), 1)}
    facts = {
        "run_dir": str(run_dir),
        "parameters": parameters,
        "vocab_size": vocab,
        "tokens_per_step": t.max_tokens * t.accum_steps,
        "sentence_pairs": pairs,
        **({"pairs_an_epoch": {name.split(" ")[0]: pairs_taken(n, weight) for name, n, weight in _mixture_parts(recipe, pairs)}}
           if is_mixture(recipe.data.train) else {}),  # of the pairs read, by the weights
        **({"resumes_at_step": resumes_at} if resumes_at is not None else {}),
        **({"init_from": {"weights": str(init.path), "step": init.step}} if init is not None else {}),
        **({"finished": True} if finished is not None else {}),
        **budget,
        "note": "tokens_per_step is the most source (and target) tokens per optimizer step, padding included",
        **({"tokenizer_kept": kept} if kept else {}),
        # no tokenizer at hand: the start trains one, which a corpus with fewer distinct pieces makes smaller than
        # tokenizer.vocab_size (its size is then what recipe.yaml records): vocab_size and parameters are bounds
        **({"upper_bounds": ["vocab_size", "parameters"]} if not tok_path.is_file() else {}),
    }
    recorded = with_absolute_paths(recipe)  # as the start records it: corpus and tokenizer paths made absolute
    if json_out:
        print_json({"recipe": recipe_to_dict(recorded), **facts})
        return
    print(yaml.safe_dump(recipe_to_dict(recorded), sort_keys=False, allow_unicode=True).rstrip())
    print(f"# run directory: {facts['run_dir']}")
    if tok_path.is_file():
        print(f"# parameters: {facts['parameters']:,} (vocabulary {vocab:,})")
    else:
        print(
            f"# parameters: up to {facts['parameters']:,} (vocabulary up to {vocab:,}: the start trains the tokenizer, "
            "and a corpus with fewer distinct pieces gives fewer tokens, whose number recipe.yaml then records)"
        )
    if kept:  # as the start itself will say
        print(f"# {kept}")
    print(f"# tokens per step: up to {facts['tokens_per_step']:,} source + {facts['tokens_per_step']:,} target")
    print("# sentence pairs: " + ", ".join(f"{n:,} in {key}" for key, n in pairs.items() if "[" not in key))
    if is_mixture(recipe.data.train):  # what an epoch takes of each corpus, by its weight
        print(f"# an epoch trains on {mixture_text(_mixture_parts(recipe, pairs))} (of the pairs read: the start leaves "
              "out those over data.max_len)")
    if finished is not None:  # as the resume itself will say
        stopped = finished.get("stopped") or f"train.max_steps={recipe.train.max_steps:,}"
        print(f"# finished at step {resumes_at:,} ({stopped}) and its final model is written: the resume has nothing to do")
        return
    if resumes_at is not None:
        print(f"# resumes from step {resumes_at:,} to train.max_steps={recipe.train.max_steps:,}")
    if init is not None:  # as the start itself will say
        print(f"# fine-tunes {init.path} (its step {init.step:,}): its weights and tokenizer, a fresh optimizer and "
              "learning-rate schedule from step 0")
    if budget:
        left = budget["train_seconds_left"]
        then = f"{left:,.0f}s left" if left > 0 else "spent: the resume trains no step, it writes the final model"
        print(f"# train.max_time={t.max_time} counts all sessions: {budget['train_seconds_used']:,.0f}s of training used, {then}")


def _ppl(ppl: float, digits: int = 1) -> str:
    from tfm_cli.monitor import ppl_text

    return ppl_text(ppl, digits)


class _Progress:
    """TrainEvents rendered on stderr: a rich progress bar at a terminal, plain log lines otherwise."""

    def __init__(self, max_steps: int, log_every: int) -> None:
        self.max_steps, self.log_every = max_steps, log_every
        self.bar = None
        self.task = None
        self.started = time.perf_counter()
        self.first_step = 0
        self.last: dict[str, Any] = {}
        self.deadline: float | None = None  # when train.max_time runs out (perf_counter), if it is set

    # the TrainEvents interface (duck-typed so that importing this module does not load torch)
    def stopping(self, signum: int) -> None:
        """Said at once, from inside the signal handler: os.write takes no lock (print could be in the middle of
        writing to stderr)."""
        again = "; Ctrl-C again to stop at once" if signum == signal.SIGINT else ""
        lead = "\n" if os.isatty(2) else ""  # off the progress bar's line
        with contextlib.suppress(OSError):  # stderr's reader gone (a pipe): the stop goes on without the line
            os.write(2, f"{lead}tfm train: {signal.Signals(signum).name}: stopping at the end of this step{again}\n".encode())

    def message(self, text: str) -> None:
        if self.bar is not None:
            self.bar.console.print(text, markup=False, highlight=False)
        else:
            info(text)

    def start(self, step: int, max_steps: int) -> None:
        self.first_step, self.started = step, time.perf_counter()
        if not fancy_stderr():
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
        from rich.table import Column
        from rich.text import Text

        progress = self

        class Remaining(TimeRemainingColumn):  # the training's ends at train.max_time when that comes first
            def render(self, task):
                left = progress.left()
                if task.description != "train" or left is None or (task.time_remaining or 0) <= left:
                    return super().render(task)
                return Text(duration(left), style="progress.remaining")

        # The step count and the time left come before the figures, which are cut to the terminal's width
        # (`_stats_room`): at 80 columns and less the count and the time left were what rich cut first.
        self.bar = Progress(
            TextColumn("[bold]{task.description}[/bold]", table_column=Column(no_wrap=True)),
            BarColumn(table_column=Column(min_width=3)), MofNCompleteColumn(table_column=Column(no_wrap=True)),
            Remaining(table_column=Column(no_wrap=True)),
            TextColumn("{task.fields[stats]}", table_column=Column(no_wrap=True, overflow="ellipsis")),
            console=err, transient=False, redirect_stdout=False,
        )
        self.bar.start()
        self.task = self.bar.add_task("train", total=max_steps, completed=step, stats="")

    def time_budget(self, seconds_left: float) -> None:
        self.deadline = time.perf_counter() + seconds_left

    def left(self) -> float | None:
        """Seconds until train.max_time runs out, or None without one."""
        return None if self.deadline is None else max(0.0, self.deadline - time.perf_counter())

    def _stats_room(self) -> int:
        """Columns left for the figures on the bar's rows: the terminal's width less the label, a short bar, the
        step count and the time left."""
        count = 2 * len(str(self.max_steps)) + 1
        return self.bar.console.width - (len("train") + 1 + 10 + 1 + count + 1 + 7 + 1)

    def step(self, step: int, metrics: dict[str, Any]) -> None:
        if metrics:
            self.last = metrics
        if self.bar is not None:
            stats = ""
            if self.last:
                m = self.last
                loss, lr = f"loss {m['loss']:.3f}", f"lr {m['lr']:.2e}"
                speed, epoch = f"{m['tgt_tokens_per_s']:,.0f} tok/s", f"epoch {m['epoch']}"
                shorter = ((loss, lr, speed, epoch), (loss, lr, speed), (loss, speed), (loss,))
                room = self._stats_room()
                stats = next(("  ".join(p) for p in shorter if len("  ".join(p)) <= room), "")
            self.bar.update(self.task, completed=step, stats=stats)
        elif metrics:
            m = metrics
            done = step - self.first_step
            spent = time.perf_counter() - self.started
            eta = spent / max(done, 1) * (self.max_steps - step)
            if (left := self.left()) is not None:
                eta = min(eta, left)
            info(
                f"step {step}/{self.max_steps}  loss {m['loss']:.3f}  ppl {_ppl(m['ppl'])}  lr {m['lr']:.2e}  "
                f"{m['tgt_tokens_per_s']:,.0f} tgt tok/s  epoch {m['epoch']}  eta {duration(eta)}"
            )

    def evaluation(self, step: int, metrics: dict[str, Any]) -> None:
        chosen = metrics.get("final_model", {}).get("chosen", "average")
        label = f"final model ({'averaged' if chosen == 'average' else 'last checkpoint'})" if metrics.get("final") else f"step {step}"
        n, every = metrics["sentences"], metrics.get("loss_sentences", metrics["sentences"])
        # (lines, where some hold several sentences, decoded one by one: the progress counted those)
        noun = ("line" if "decoded_sentences" in metrics else "sentence") + ("s" if n != 1 else "")
        text = (  # the loss of every dev sentence, the scores of the first `train.eval_sentences`: both said so
            f"dev {label}: loss {metrics['loss']:.3f}  ppl {_ppl(metrics['ppl'], 2)}{f'  (all {every:,})' if n < every else ''}"
            f"  BLEU {metrics['bleu']:.2f}  chrF {metrics['chrf']:.2f}  ({'first ' if n < every else ''}{n:,} {noun})"
        )
        if (plain := metrics.get("as_written")) is not None:  # the references as the file has them (evaluation.py)
            text += f"; as written: BLEU {plain['bleu']:.2f}  chrF {plain['chrf']:.2f}"
        if self.bar is not None:
            self.bar.console.print(text, markup=False)
        else:
            info(text)

    @contextlib.contextmanager
    def decoding(self, what: str, sentences: int):
        """A dev evaluation's beam search: a second row on the training bar at a terminal, else a line when it
        starts, one every 30 seconds (`counted_progress`), and one when it ends (a barely trained model runs every sentence to
        the maximum length: minutes on a CPU, which a silent log would make look hung)."""
        if self.bar is None:
            with counted_progress(what, sentences, "dev sentences") as advance:
                yield advance
            return
        started = time.perf_counter()
        room = max(self._stats_room(), 0)  # what is decoded goes with the figures, cut as they are
        said = what if len(what) <= room else what[: max(room - 1, 0)] + "…" * (room > 0)
        task = self.bar.add_task("dev", total=sentences, stats=said)
        try:
            yield lambda n: self.bar.advance(task, n)
        finally:
            self.bar.remove_task(task)
        self.message(f"{what}: {sentences:,} dev sentences decoded in {duration(time.perf_counter() - started)}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


