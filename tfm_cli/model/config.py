"""ModelConfig: the hyperparameters that fix the shapes of the Transformer (paper section 3, Table 3).

Pure Python: the recipe layer fills it from YAML, the checkpoint layer stores it as JSON beside the weights.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

NORMS = ("post", "pre")
POSITIONS = ("sinusoidal", "learned")
NUMBERS = ("as_written", "placeholders")  # how a model reads numbers in digits (ModelConfig.numbers)


@dataclass(frozen=True)
class ModelConfig:
    """Shapes and regularisation of an encoder-decoder Transformer.

    Defaults are the paper's base model (section 3 and Table 3, row "base") with a shared vocabulary.
    """

    vocab_size: int = 37000  # shared source/target vocabulary (joint BPE)
    d_model: int = 512  # width of every sublayer output and of the embeddings
    d_ff: int = 2048  # inner width of the position-wise feed-forward network
    n_heads: int = 8  # h; each head has d_k = d_v = d_model / h
    n_enc_layers: int = 6  # N for the encoder stack
    n_dec_layers: int = 6  # N for the decoder stack
    dropout: float = 0.1  # P_drop on sublayer outputs and on embeddings + positions
    attn_dropout: float = 0.0  # dropout on attention weights (not in the paper; 0 keeps the fused path exact)
    norm: str = "post"  # "post": LayerNorm(x + Sublayer(x)) as in the paper; "pre": x + Sublayer(LayerNorm(x))
    positions: str = "sinusoidal"  # "sinusoidal" (section 3.5) or "learned"
    max_positions: int = 1024  # longest sequence the position table covers
    tie_embeddings: bool = True  # share source embedding, target embedding and output projection (section 3.4)
    # how the model reads numbers written in digits: "as_written" (their pieces, as a model trained before tfm had
    # placeholders reads them), or "placeholders": each number of a sentence (and each telephone number, numeric date
    # and web or e-mail address inside it) given as the placeholder XNUM, which the model learned to copy, and written
    # back into its translation in order (`tfm_cli.sentences`)
    numbers: str = "as_written"
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2

    def __post_init__(self) -> None:
        problems = config_problems(dataclasses.asdict(self))
        if problems:
            raise ValueError("invalid ModelConfig: " + "; ".join(problems))

    @property
    def reads_placeholders(self) -> bool:
        """Whether the model reads numbers as the placeholder XNUM (`numbers`; `tfm_cli.sentences`)."""
        return self.numbers == "placeholders"

    @property
    def d_k(self) -> int:
        return self.d_model // self.n_heads

    def num_parameters(self) -> int:
        """The number of parameters of `Transformer(self)` (a tied matrix counted once), from the shapes alone.

        No tensor is made: counting on the meta device costs `import torch._dynamo`, seconds of every
        `tfm train` start. tests/test_model.py holds this to the built model's count for every option.
        """
        d, f, v = self.d_model, self.d_ff, self.vocab_size
        attention = 4 * (d * d + d)  # W^Q, W^K, W^V, W^O, each with its bias
        ffn = d * f + f + f * d + d  # W_1, b_1, W_2, b_2
        norm = 2 * d  # LayerNorm's gain and bias
        layers = self.n_enc_layers * (attention + ffn + 2 * norm) + self.n_dec_layers * (2 * attention + ffn + 3 * norm)
        tokens = v * d * (1 if self.tie_embeddings else 3)  # source, target embeddings and the output projection
        positions = 2 * self.max_positions * d if self.positions == "learned" else 0  # one table a side
        final_norms = 2 * norm if self.norm == "pre" else 0  # each pre-norm stack ends with a LayerNorm
        return layers + tokens + positions + final_norms

    def largest_weight(self) -> int:
        """The number of values in the largest tensor `Transformer(self)` holds, the sinusoidal table included."""
        d = self.d_model
        return max(d * d, d * self.d_ff, self.vocab_size * d, self.max_positions * d)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """Build from a dict, rejecting unknown keys (a checkpoint from a newer tfm, or a typo)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown ModelConfig keys: {', '.join(unknown)}")
        return cls(**data)


def config_problems(values: dict[str, Any], prefix: str = "") -> list[str]:
    """Check model hyperparameters; each problem names the key as `prefix + name`.

    `values` may leave out `vocab_size` and the special ids (a recipe knows them only once the tokenizer exists).
    The recipe layer calls this with prefix "model." so that messages name the dotted recipe key.
    """
    out: list[str] = []

    def key(name: str) -> str:
        return f"{prefix}{name}"

    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    for name in ("vocab_size", "d_model", "d_ff", "n_heads", "n_enc_layers", "n_dec_layers", "max_positions"):
        if name in values and (not is_int(values[name]) or values[name] < 1):
            out.append(f"{key(name)}={values[name]!r} must be a positive integer")
    d_model, n_heads = values.get("d_model"), values.get("n_heads")
    if is_int(d_model) and is_int(n_heads) and d_model > 0 and n_heads > 0:
        if d_model % n_heads:
            out.append(
                f"{key('d_model')}={d_model} must be divisible by {key('n_heads')}={n_heads} "
                f"({_divisible_fix(d_model, n_heads, key, values.get('positions', 'sinusoidal') == 'sinusoidal')})"
            )
        elif values.get("positions", "sinusoidal") == "sinusoidal" and d_model % 2:
            step = math.lcm(n_heads, 2)  # still a multiple of the heads (15 with 3 heads said "try 16")
            width = min((d_model // step * step or step, d_model // step * step + step), key=lambda w: (abs(w - d_model), w))
            out.append(
                f"{key('d_model')}={d_model} must be even for sinusoidal positions (try {width}, or "
                f"{key('positions')}=learned)"
            )
    for name in ("dropout", "attn_dropout"):
        v = values.get(name, 0.0)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0.0 <= v < 1.0:
            out.append(f"{key(name)}={v!r} must be a number in [0, 1)")
    if values.get("norm", "post") not in NORMS:
        out.append(f"{key('norm')}={values['norm']!r} must be one of: {', '.join(NORMS)}")
    if values.get("positions", "sinusoidal") not in POSITIONS:
        out.append(f"{key('positions')}={values['positions']!r} must be one of: {', '.join(POSITIONS)}")
    if values.get("numbers", "as_written") not in NUMBERS:
        out.append(f"{key('numbers')}={values['numbers']!r} must be one of: {', '.join(NUMBERS)}")
    if not isinstance(values.get("tie_embeddings", True), bool):
        out.append(f"{key('tie_embeddings')}={values['tie_embeddings']!r} must be true or false")
    vocab = values.get("vocab_size")
    ids = [values[k] for k in ("pad_id", "bos_id", "eos_id") if k in values]
    if is_int(vocab) and any(not is_int(i) or not 0 <= i < vocab for i in ids):
        out.append(f"special ids {ids} must lie in [0, {key('vocab_size')}={vocab})")
    if len(ids) == 3 and all(is_int(i) for i in ids) and len(set(ids)) < 3:  # EOS as padding: masked, then banned
        out.append(f"special ids {key('pad_id')}, {key('bos_id')} and {key('eos_id')} must differ, got {ids}")
    return out


def _divisible_fix(d_model: int, n_heads: int, key: Callable[[str], str], even: bool) -> str:
    """The nearest valid d_model (a multiple of n_heads, even for sinusoids) and the nearest head count, up to
    2 * n_heads, that divides d_model; with more heads than d_model, only the head count."""
    heads = sorted((h for h in _divisors(d_model) if h <= 2 * n_heads), key=lambda h: (abs(h - n_heads), h))
    if n_heads > d_model:  # a head of d_model / n_heads < 1 dimensions: a wider model is not the fix
        return f"at most {d_model} heads" + (f", e.g. {key('n_heads')}={heads[0]}" if heads else "")
    step = math.lcm(n_heads, 2) if even else n_heads
    widths = sorted({max(step, d_model // step * step), d_model // step * step + step}, key=lambda w: (abs(w - d_model), w))
    fix = f"try {widths[0]}"
    if heads and heads[0] > 1:
        fix += f", or {key('n_heads')}={heads[0]}"
    return fix


def _divisors(n: int, limit: int = 10**12) -> list[int]:
    """The divisors of `n` (none for n above `limit`: trial division up to its square root would take long)."""
    if n > limit:
        return []
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))
