"""Training (paper section 5): the label-smoothed loss, Adam with the warm-up schedule, the loop, evaluation.

`train(recipe, run_dir, ...)` goes recipe -> tokenizer -> token-bucketed batches -> model -> checkpoints, and
reports through a `TrainEvents` object so that the CLI (rich progress) and tests (nothing) can both drive it.

    loss.py        label-smoothed cross-entropy; the output projection and the loss in chunks (section 5.4)
    optim.py       the learning-rate schedule (equation 3) and Adam (section 5.3)
    step.py        one optimizer step over a group of batches: what `tfm bench train` times as the model step
    evaluation.py  dev loss, BLEU/chrF of beam search, the final model (average of the last checkpoints or the last)
    checks.py      what a start checks before it writes anything (also `tfm train --dry-run`)
    corpora.py     the training corpus as a run reads it (pairs over data.max_len left out); the dry run's look at it
    resume.py      what an exact resume reads back and checks: checkpoint, trainer state, data position, time spent
    failures.py    the errors that stop a run, each naming the last intact checkpoint and the way on
    events.py      `TrainEvents`: what the trainer tells the CLI's progress display (or no one)
    trainer.py     the loop: set up, step, evaluate, save; Ctrl-C; one rank of a DDP job

The data path (`tfm_cli.batches`), the distributed set-up (`tfm_cli.distributed`) and the run's monitoring
(`tfm_cli.monitor`) are modules of their own, importable without this package's torch-heavy code.
"""

from tfm_cli.scoring import score_translations  # its home is tfm_cli.scoring; kept importable from here
from tfm_cli.training.checks import preflight, resume_recipe, scan_corpora
from tfm_cli.training.corpora import check_start
from tfm_cli.training.evaluation import DevSet, evaluate, finish, load_dev
from tfm_cli.training.events import TrainEvents
from tfm_cli.training.loss import LOSS_CHUNK_LOGITS, label_smoothed_loss, output_loss
from tfm_cli.training.optim import adam, inverse_sqrt_lr, load_optimizer_state
from tfm_cli.training.resume import check_resume, finished_resume, load_trainer_state, trained_seconds
from tfm_cli.training.step import parameter_count, setup_model, step_tokens, train_step
from tfm_cli.training.trainer import TrainResult, train

__all__ = [
    "LOSS_CHUNK_LOGITS", "DevSet", "TrainEvents", "TrainResult", "adam", "check_resume", "check_start", "evaluate", "finish", "finished_resume", "inverse_sqrt_lr",
    "label_smoothed_loss", "load_dev", "load_optimizer_state", "load_trainer_state", "output_loss", "parameter_count", "preflight",
    "resume_recipe", "scan_corpora", "score_translations", "setup_model", "step_tokens", "train", "train_step",
    "trained_seconds",
]
