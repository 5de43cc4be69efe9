"""Recipes: shipped files validate and hold the paper's numbers; all problems are reported at once."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from clitools import tfm

from tfm_cli.errors import RecipeError, TfmError
from tfm_cli.model.config import ModelConfig
from tfm_cli.recipe import (
    DataRecipe,
    ModelRecipe,
    Recipe,
    TrainRecipe,
    dump_recipe,
    load_recipe,
    model_config,
    parse_override,
    recipe_from_dict,
    recipe_keys,
    recipe_to_dict,
    validate_recipe,
)

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def write(tmp_path: Path, text: str, name: str = "r.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def problems_of(excinfo: pytest.ExceptionInfo[RecipeError]) -> list[str]:
    return excinfo.value.problems


# ------------------------------------------------------------------------------------------- shipped recipes


def test_every_shipped_recipe_validates():
    paths = sorted(RECIPES.glob("*.yaml"))
    assert {"base.yaml", "big.yaml"} <= {p.name for p in paths}
    for path in paths:
        recipe = load_recipe(path)
        assert recipe.name == path.stem
        assert validate_recipe(recipe) == []
        assert recipe.description


def test_base_recipe_is_the_paper_base_model():
    r = load_recipe(RECIPES / "base.yaml")
    m = r.model
    assert (m.d_model, m.d_ff, m.n_heads, m.n_enc_layers, m.n_dec_layers) == (512, 2048, 8, 6, 6)
    assert m.dropout == 0.1 and m.norm == "post" and m.positions == "sinusoidal" and m.tie_embeddings is True
    t = r.train
    assert t.max_tokens == 25000 and t.accum_steps == 1 and t.max_steps == 100000 and t.warmup_steps == 4000
    assert t.betas == [0.9, 0.98] and t.eps == 1e-9 and isinstance(t.eps, float)
    assert t.label_smoothing == 0.1 and t.lr_factor == 1.0
    assert t.keep_last == 5 and t.average_last == 5
    assert (r.decode.beam, r.decode.alpha, r.decode.max_len_offset) == (4, 0.6, 50)
    assert r.tokenizer.vocab_size == 37000 and r.tokenizer.path is None
    assert "Vaswani" in r.description and "base" in r.description
    # The dataclass defaults are the paper's base too: base.yaml writes them out, every key (the README says its
    # comments explain every key; decode.min_len was missing).
    assert dataclasses.replace(r, name="", description="") == Recipe()
    written = yaml.safe_load((RECIPES / "base.yaml").read_text(encoding="utf-8"))
    flat = [f"{section}.{key}" for section, values in written.items() if isinstance(values, dict) for key in values]
    assert sorted(flat + [k for k in written if not isinstance(written[k], dict)]) == sorted(recipe_keys())


def test_big_recipe_is_the_paper_big_model():
    base, big = load_recipe(RECIPES / "base.yaml"), load_recipe(RECIPES / "big.yaml")
    m = big.model
    assert (m.d_model, m.d_ff, m.n_heads, m.n_enc_layers, m.n_dec_layers) == (1024, 4096, 16, 6, 6)
    assert m.dropout == 0.3
    assert big.train.max_steps == 300000
    assert big.train.average_last == 20 <= big.train.keep_last  # the paper averages the last 20 for big
    assert big.train.warmup_steps == 4000 and big.train.max_tokens == 25000
    assert big.decode == base.decode and big.data == base.data and big.tokenizer == base.tokenizer


def test_model_recipe_is_model_config_minus_tokenizer_keys():
    recipe_fields = [f.name for f in dataclasses.fields(ModelRecipe)]
    config_fields = [f.name for f in dataclasses.fields(ModelConfig)]
    assert recipe_fields == [
        n for n in config_fields if n not in ("vocab_size", "pad_id", "bos_id", "eos_id")
    ]
    for f in dataclasses.fields(ModelRecipe):  # but numbers: a new model's, and that of a model saved before tfm had it
        assert f.default == ModelConfig.__dataclass_fields__[f.name].default or f.name == "numbers", f.name


def test_model_config_from_recipe():
    cfg = model_config(load_recipe(RECIPES / "big.yaml"), vocab_size=1000, pad_id=0, bos_id=1, eos_id=2)
    assert isinstance(cfg, ModelConfig)
    assert (cfg.vocab_size, cfg.d_model, cfg.n_heads, cfg.d_k, cfg.dropout) == (1000, 1024, 16, 64, 0.3)
    assert (cfg.pad_id, cfg.bos_id, cfg.eos_id) == (0, 1, 2)


# -------------------------------------------------------------------------------------- all problems at once


def test_three_mistakes_reported_together(tmp_path):
    path = write(
        tmp_path,
        "name: demo\nmodel:\n  d_model: 510\ntrain:\n  warmup_step: 4000\n  max_steps: many\n",
    )
    with pytest.raises(RecipeError) as excinfo:
        load_recipe(path)
    err = excinfo.value
    assert err.source == str(path)
    assert sorted(err.problems) == sorted(
        [
            "model.d_model=510 must be divisible by model.n_heads=8 (try 512, or model.n_heads=6)",
            "train.warmup_step is not a recipe key; did you mean train.warmup_steps?",
            "train.max_steps='many' must be an integer",
        ]
    )
    text = str(err)
    assert text.startswith(f"{path} has 3 problems:")
    assert "did you mean train.warmup_steps?" in text


@pytest.mark.parametrize(
    ("model", "problem"),
    [
        # 10**15 heads hung the dry run: the nearest head count was searched among 2 * n_heads candidates
        ({"d_model": 32, "n_heads": 10**15}, "model.d_model=32 must be divisible by model.n_heads=1000000000000000 "
         "(at most 32 heads, e.g. model.n_heads=32)"),
        ({"d_model": 32, "n_heads": 33}, "model.d_model=32 must be divisible by model.n_heads=33 "
         "(at most 32 heads, e.g. model.n_heads=32)"),
        ({"d_model": 30, "n_heads": 4}, "model.d_model=30 must be divisible by model.n_heads=4 (try 28, or model.n_heads=3)"),
        ({"d_model": 10**13 + 2, "n_heads": 8}, "model.d_model=10000000000002 must be divisible by model.n_heads=8 (try 10000000000000)"),
    ],
)
def test_heads_that_do_not_divide_the_model_width_get_a_fix_at_once(model, problem):
    with pytest.raises(RecipeError) as excinfo:
        recipe_from_dict({"name": "x", "model": model})
    assert problem in problems_of(excinfo)


def test_unknown_keys_and_non_mapping_sections():
    with pytest.raises(RecipeError) as excinfo:
        recipe_from_dict({"name": "x", "modle": {}, "zzzz": 1, "model": [1, 2], "decode": {"bem": 2}})
    got = problems_of(excinfo)
    assert "modle is not a recipe key; did you mean model?" in got
    assert any(
        p.startswith("zzzz is not a recipe key; valid top-level keys: name, description, data") for p in got
    )
    assert "model must be a mapping of keys, not a list" in got
    assert "decode.bem is not a recipe key; did you mean decode.beam?" in got
    assert len(got) == 4


def test_key_of_another_section_is_pointed_there(tmp_path):
    """`train.beam` is decode.beam (not the look-alike train.betas); a section's key at the top level is nested."""
    path = write(tmp_path, "name: x\nmax_steps: 5\ntrain:\n  beam: 3\n  dropout: 0.2\ndata:\n  max_tokens: 9\n")
    with pytest.raises(RecipeError) as excinfo:
        load_recipe(path, ["model.max_len=10"])
    assert sorted(problems_of(excinfo)) == sorted(
        [
            "max_steps is not a recipe key; did you mean train.max_steps?",
            "train.beam is not a recipe key; did you mean decode.beam?",
            "train.dropout is not a recipe key; did you mean model.dropout?",
            "data.max_tokens is not a recipe key; did you mean train.max_tokens or decode.max_tokens?",
            "override 'model.max_len=10': model.max_len is not a recipe key; did you mean data.max_len?",
        ]
    )


def test_a_key_in_other_case_or_with_dashes_is_pointed_to_the_key(tmp_path):
    """`TRAIN:` and `train.MAX_STEPS=5` got only the list of valid keys (difflib matches no upper-case word), and
    `max-steps` (argparse/fairseq spelling) a bare guess."""
    path = write(tmp_path, "name: x\nTRAIN:\n  max_steps: 5\nmodel:\n  D_MODEL: 64\n  n-heads: 4\n")
    with pytest.raises(RecipeError) as excinfo:
        load_recipe(path, ["Train.Max_Steps=5", "decode.max-len-offset=3"])
    why = "(keys are lower case, words joined by '_')"
    assert problems_of(excinfo) == [
        f"TRAIN is not a recipe key; did you mean train? {why}",
        f"model.D_MODEL is not a recipe key; did you mean model.d_model? {why}",
        f"model.n-heads is not a recipe key; did you mean model.n_heads? {why}",
        f"override 'Train.Max_Steps=5': Train.Max_Steps is not a recipe key; did you mean train.max_steps? {why}",
        f"override 'decode.max-len-offset=3': decode.max-len-offset is not a recipe key; did you mean decode.max_len_offset? {why}",
    ]


def test_a_key_with_a_look_alike_letter_names_it(tmp_path):
    """`train.max_stеps` with a Cyrillic е got "did you mean train.max_steps?", which looks the same on screen."""
    path = write(tmp_path, "name: x\n")
    with pytest.raises(RecipeError) as excinfo:
        load_recipe(path, ["train.max_st\u0435ps=5"])
    (problem,) = problems_of(excinfo)
    assert "is not a recipe key (its 'е' is U+0435 CYRILLIC SMALL LETTER IE, not an ASCII letter); did you mean train.max_steps?" in problem


def test_override_with_bytes_that_are_not_utf8_says_so():
    """A Latin-1 file name on the command line (Python's surrogate escapes): YAML refused it with 'quote it',
    which cannot help."""
    with pytest.raises(RecipeError) as excinfo:
        parse_override("data.train=caf\udce9.tsv")
    (problem,) = problems_of(excinfo)
    assert problem.endswith("holds bytes that are not UTF-8 (a file name in another encoding?): give it a UTF-8 name (mv) or a link with one (ln -s)")


def test_missing_or_bad_name():
    with pytest.raises(RecipeError) as excinfo:
        recipe_from_dict({})
    assert problems_of(excinfo) == [
        "name is missing: every recipe needs a name (it names runs/<name>/), e.g. name: base"
    ]
    with pytest.raises(RecipeError) as excinfo:
        recipe_from_dict({"name": "my run/1"})
    assert problems_of(excinfo) == [
        "name='my run/1' may only use ASCII letters, digits, '.', '_' and '-' (it names runs/<name>/); "
        "try 'my-run-1'"
    ]
    for name, where in ((".", "runs/ itself"), ("..", "no folder inside runs/")):  # they use only what is allowed
        with pytest.raises(RecipeError) as excinfo:
            recipe_from_dict({"name": name})
        assert problems_of(excinfo) == [
            f"name={name!r} names no run folder of its own (runs/{name}/ is {where}): use a letter or digit, e.g. name: base"
        ]
    with pytest.raises(RecipeError) as excinfo:  # `name: no`, a boolean to YAML 1.1
        recipe_from_dict({"name": False})
    assert problems_of(excinfo) == [
        "name=false must be a string (YAML 1.1 reads yes, no, on, off, true and false as booleans: put it in quotes)"
    ]
    assert validate_recipe(Recipe())[0].startswith("name='' must be a non-empty run name")


def test_range_and_cross_field_rules():
    data = {
        "name": "x",
        "data": {"max_len": 2000},
        "tokenizer": {"vocab_size": 100},
        "train": {
            "max_tokens": 1000,
            "precision": "fp8",
            "keep_last": 2,
            "average_last": 3,
            "label_smoothing": 1.0,
            "betas": [0.9, 1.5],
            "eps": 0,
            "warmup_steps": 0,
            "eval_every": -1,
        },
        "decode": {"beam": 0},
    }
    with pytest.raises(RecipeError) as excinfo:
        recipe_from_dict(data)
    got = problems_of(excinfo)
    expected = [
        "tokenizer.vocab_size=100 must be between 300 (the byte fallback needs 256 byte tokens + 4 special "
        "tokens, plus room for merges) and 1,000,000; e.g. 8000 for a small corpus, 37000 for the paper's",
        "train.precision='fp8' must be one of: auto, fp32, bf16, fp16",
        "train.average_last=3 must be at most train.keep_last=2 (raise train.keep_last to 3, or lower train.average_last to 2)",
        "train.label_smoothing=1.0 must be in [0, 1) (the paper uses 0.1)",
        "train.betas=[0.9, 1.5] must be two numbers in [0, 1), e.g. [0.9, 0.98]",
        "train.eps=0.0 must be > 0 (the paper uses 1e-9)",
        "train.warmup_steps=0 must be >= 1 (the schedule divides by it; the paper uses 4000)",
        "train.eval_every=-1 must be >= 0 (0 = evaluate only at the end)",
        "decode.beam=0 must be a positive integer",
        "data.max_len=2000 must be at most model.max_positions=1024 (a training side takes data.max_len positions, "
        "its </s> or <s> included); lower data.max_len or raise model.max_positions to 2000",
        "data.max_len=2000 must be at most train.max_tokens=1000 (a batch must hold the longest pair); "
        "lower data.max_len or raise train.max_tokens to 2000",
    ]
    assert sorted(got) == sorted(expected)


def test_a_beam_wider_than_the_vocabulary_is_refused_before_training():
    """The dev evaluation at the end could not fill it: said at load, not after the whole run trained."""
    with pytest.raises(RecipeError) as excinfo:
        recipe_from_dict({"name": "x", "tokenizer": {"vocab_size": 300}, "decode": {"beam": 301}})
    assert problems_of(excinfo) == [
        "decode.beam=301 is wider than tokenizer.vocab_size=300: a beam holds at most one hypothesis per token "
        "(the paper's beam is 4); lower decode.beam"
    ]
    recipe_from_dict({"name": "x", "tokenizer": {"vocab_size": 300}, "decode": {"beam": 300}})  # the widest


def test_integers_beyond_64_bits_are_refused():
    """A warmup of 10**400 steps raised OverflowError in the schedule, a seed of 2**64 one in torch.manual_seed."""
    big = 10**400
    with pytest.raises(RecipeError) as excinfo:
        recipe_from_dict({"name": "x", "train": {"warmup_steps": big, "seed": 2**64, "max_steps": 2**63 - 1}})
    assert problems_of(excinfo) == [
        f"train.warmup_steps={big!r} must be at most 9,223,372,036,854,775,807 (a 64-bit integer)",
        "train.seed=18446744073709551616 must be at most 9,223,372,036,854,775,807 (a 64-bit integer)",
    ]


def test_model_shape_problems_come_from_config_problems():
    with pytest.raises(RecipeError) as excinfo:
        recipe_from_dict({"name": "x", "model": {"n_heads": 0, "norm": "mid", "dropout": 1.5}})
    assert sorted(problems_of(excinfo)) == sorted(
        [
            "model.n_heads=0 must be a positive integer",
            "model.norm='mid' must be one of: post, pre",
            "model.dropout=1.5 must be a number in [0, 1)",
        ]
    )


def test_a_wrong_type_is_reported_once():
    # config_problems would also call 'x' not a positive integer; the recipe reports the type only.
    with pytest.raises(RecipeError) as excinfo:
        recipe_from_dict({"name": "x", "model": {"d_model": "x"}, "data": {"max_len": "long"}})
    assert problems_of(excinfo) == [
        "data.max_len='long' must be an integer",
        "model.d_model='x' must be an integer",
    ]


# ----------------------------------------------------------------------------------------------------- types


def test_float_string_quirk_accepted_for_float_fields_only(tmp_path):
    assert yaml.safe_load("eps: 1e-9")["eps"] == "1e-9"  # the PyYAML quirk this handles
    path = write(tmp_path, "name: x\ntrain:\n  eps: 1e-9\n  lr_factor: 2\n  betas: [0.9, 98e-2]\n")
    t = load_recipe(path).train
    assert t.eps == 1e-9 and isinstance(t.eps, float)
    assert t.lr_factor == 2.0 and isinstance(t.lr_factor, float)  # an int is fine where a float is expected
    assert t.betas == [0.9, 0.98]
    # ...but a string is not an int, and not a path's substitute for a number
    with pytest.raises(RecipeError) as excinfo:
        recipe_from_dict({"name": "x", "train": {"max_steps": "1e5"}})
    assert problems_of(excinfo) == ["train.max_steps='1e5' must be an integer: write 100000"]
    with pytest.raises(RecipeError) as excinfo:
        recipe_from_dict({"name": "x", "train": {"eps": "tiny", "lr_factor": "inf", "clip_norm": ".5"}})
    assert problems_of(excinfo) == [
        "train.lr_factor=inf must be a finite number",
        "train.eps='tiny' must be a number",
    ]


def test_bool_rejected_for_int_and_float():
    with pytest.raises(RecipeError) as excinfo:
        recipe_from_dict(
            {"name": "x", "train": {"max_steps": True, "lr_factor": False}, "model": {"tie_embeddings": 1}}
        )
    assert sorted(problems_of(excinfo)) == sorted(
        [
            "train.max_steps=true must be an integer",
            "train.lr_factor=false must be a number",
            "model.tie_embeddings=1 must be true or false",
        ]
    )


def test_string_fields_reject_numbers():
    with pytest.raises(RecipeError) as excinfo:
        recipe_from_dict({"name": 2017, "tokenizer": {"path": 3}})
    assert problems_of(excinfo) == [
        "name=2017 must be a string (put it in quotes)",
        "tokenizer.path=3 must be a string or null (put it in quotes)",
    ]


def test_a_string_that_yaml_reads_as_a_mapping_or_a_list_says_to_quote_it(tmp_path):
    """`description=Tatoeba fr-en: small` on the command line is a mapping to YAML: the problem was only
    "description={'Tatoeba fr-en': 'small'} must be a string", for a value the user had written as text."""
    path = tmp_path / "r.yaml"
    path.write_text("name: x\n", encoding="utf-8")
    with pytest.raises(RecipeError) as excinfo:
        load_recipe(path, ["description=Tatoeba fr-en: small", "name=[draft]"])
    assert problems_of(excinfo) == [
        "override 'name=[draft]': name=['draft'] must be a string (YAML reads [...] as a list: put it in quotes)",
        "override 'description=Tatoeba fr-en: small': description={'Tatoeba fr-en': 'small'} must be a string (YAML reads a: b as a mapping: put it in quotes)",
    ]
    assert load_recipe(path, ['description="Tatoeba fr-en: small"']).description == "Tatoeba fr-en: small"


def test_dates_and_keys_that_yaml_reads_as_other_types_are_shown_as_written(tmp_path):
    """YAML reads `name: 2024-01-01` as a date and `null:` / `true:` keys as None / True: the problem lines showed
    Python's spelling ("name=datetime.date(2024, 1, 1)", "model.None is not a recipe key")."""
    path = tmp_path / "r.yaml"
    path.write_text("name: 2024-01-01\nmodel:\n  null: 3\ntrue: 1\n", encoding="utf-8")
    with pytest.raises(RecipeError) as excinfo:
        load_recipe(path)
    got = problems_of(excinfo)
    assert "name=2024-01-01 (a date to YAML) must be a string (put it in quotes)" in got
    assert any(p.startswith("model.null is not a recipe key") for p in got)
    assert any(p.startswith("true is not a recipe key") for p in got)
    assert not any("datetime" in p or "None" in p or "True" in p for p in got), got


def test_corpus_paths():
    ok = recipe_from_dict({"name": "x", "data": {"train": ["a.fr", "a.en"], "dev": None}})
    assert ok.data == DataRecipe(train=["a.fr", "a.en"], dev=None)
    with pytest.raises(RecipeError) as excinfo:
        recipe_from_dict({"name": "x", "data": {"train": ["only.fr"], "dev": ["a", "b", "c"]}})
    assert problems_of(excinfo) == [
        "data.train=['only.fr'] must be one TSV file path or a list of exactly 2 paths "
        "[source_file, target_file], or a list of corpora [{path: CORPUS, weight: W}, ...]",
        "data.dev=['a', 'b', 'c'] must be one TSV file path or a list of exactly 2 paths "
        "[source_file, target_file] (or null for none)",
    ]
    with pytest.raises(RecipeError) as excinfo:
        recipe_from_dict({"name": "x", "data": {"train": None, "dev": ["a", " "]}})
    assert problems_of(excinfo) == [
        "data.train=null (empty) must be one TSV file path or a list of exactly 2 paths [source_file, target_file], "
        "or a list of corpora [{path: CORPUS, weight: W}, ...]",
        "data.dev=['a', ' '] must name a file: a path may not be empty",
    ]
    with pytest.raises(RecipeError) as excinfo:  # data.train=bundled: on the command line, a word and a colon
        recipe_from_dict({"name": "x", "data": {"train": {"bundled": None}}})
    assert "(YAML reads 'bundled:' as a mapping; name a bundled corpus in full, e.g. bundled:" in problems_of(excinfo)[0]


def test_paths_are_not_resolved_here():
    recipe = recipe_from_dict({"name": "x", "data": {"train": "/no/such/corpus.tsv"}})
    assert recipe.data.train == "/no/such/corpus.tsv"


# ------------------------------------------------------------------------------------------------- overrides


def test_parse_override_values_are_yaml():
    assert parse_override("train.max_steps=2000") == ("train.max_steps", 2000)
    assert parse_override("model.tie_embeddings=false") == ("model.tie_embeddings", False)
    assert parse_override("model.dropout=0.1") == ("model.dropout", 0.1)
    assert parse_override("data.train=[a.fr, a.en]") == ("data.train", ["a.fr", "a.en"])
    assert parse_override("data.dev=null") == ("data.dev", None)
    assert parse_override("description=a=b") == ("description", "a=b")
    for bad in ("foo", "=3", "train..max_steps=1", "train max_steps=1"):
        with pytest.raises(RecipeError) as excinfo:
            parse_override(bad)
        assert problems_of(excinfo) == [
            f"override {bad!r} must look like key=value (e.g. train.max_steps=2000)"
        ]
    # a file name starting with '#' was read as a YAML comment: data.train became null
    with pytest.raises(RecipeError) as excinfo:
        parse_override("data.train=#1.tsv")
    assert problems_of(excinfo) == [
        "override 'data.train=#1.tsv': YAML reads a value starting with '#' as a comment (null); quote the value: "
        "'data.train=\"#1.tsv\"'"
    ]
    assert parse_override('data.train="#1.tsv"') == ("data.train", "#1.tsv")


def test_an_override_without_a_value_or_with_a_comment_is_refused():
    """`data.dev=$DEV` with DEV unset read as null: the dev set dropped without a word (tokenizer.path= trained a
    new tokenizer, train.max_time= lifted the budget). And ' #' starts a YAML comment: `description=run #3` was
    "run", `train.max_steps=5 # five` was 5."""
    def refused(text: str) -> list[str]:
        with pytest.raises(RecipeError) as excinfo:
            parse_override(text)
        return problems_of(excinfo)

    for key in ("data.dev", "tokenizer.path", "train.max_time"):
        assert refused(f"{key}=  ") == [
            f"override '{key}=  ' has no value (an unset shell variable?): give one, or {key}=null for none"
        ]
    for key in ("train.max_steps", "name", "model.d_model"):  # null offered where it is no value of the key
        assert refused(f"{key}=  ") == [f"override '{key}=  ' has no value (an unset shell variable?): give one"]
    assert refused("description=run #3") == [
        "override 'description=run #3': YAML reads ' #' and what follows as a comment (description='run'); quote the "
        "value: 'description=\"run #3\"'"
    ]
    assert refused("train.max_steps=5 # five")[0].endswith("(train.max_steps=5); leave the comment out: train.max_steps=5")
    assert parse_override('description="run #3"') == ("description", "run #3")
    assert parse_override("data.train=a#b.tsv") == ("data.train", "a#b.tsv")  # no space before '#': no comment


def test_names_from_other_toolkits_point_to_the_key_that_means_them():
    """`train.epochs` was "did you mean train.eps?" (Adam's epsilon, which train.eps=3 then set); train.max_length
    pointed to train.max_tokens (the batch size); train.lr and train.batch_size got no pointer."""
    said = {
        "train.epochs": "tfm's is train.max_steps or train.max_time",
        "train.max_length": "tfm's is data.max_len",
        "decode.max_step": "tfm's is train.max_steps",
        "train.lr": "tfm's is train.lr_factor (the paper's schedule",
        "learning_rate": "tfm's is train.lr_factor",
        "train.batch_size": "tfm's is train.max_tokens",
        "train.grad_clip": "tfm's is train.clip_norm",
        "train.fp16": "tfm's is train.precision",
        "decode.beam_size": "tfm's is decode.beam",
        "decode.length_penalty": "tfm's is decode.alpha",
        "train.update_freq": "tfm's is train.accum_steps",
        "train.warmup_step": "did you mean train.warmup_steps?",  # a look-alike still
        # inside decode a length is the output's: decode.max_new_tokens was "did you mean decode.max_tokens?" (the
        # batch size), decode.max_len "did you mean data.max_len?" (which training pairs are kept)
        "decode.max_new_tokens": "tfm's is decode.max_len_offset",
        "decode.max_len": "tfm's is decode.max_len_offset",
        "decode.max_length": "tfm's is decode.max_len_offset",
        "max_new_tokens": "tfm's is decode.max_len_offset",
        "data.max_target_length": "tfm's is data.max_len",  # Hugging Face's run_translation: training targets cut
        "decode.max_target_length": "tfm's is decode.max_len_offset",
        "decode.early_stopping": "tfm has no such setting: its beam search always stops",
        "train.stop-time-hours": "tfm's is train.max_time",  # fairseq's --stop-time-hours
        "train.early_stopping": "tfm's is train.patience",  # OpenNMT-py's
        "early_stopping_criteria": "tfm's is train.patience",
        "train.log_interval": "tfm's is train.log_every",  # fairseq's
        "model.normalize_before": "tfm's is model.norm",  # Hugging Face's MarianConfig, fairseq's
        # OpenNMT's valid_steps was "did you mean train.max_steps?", Hugging Face's eval_steps train.eval_sentences,
        # embed_dim model.tie_embeddings: each a look-alike of another meaning; hidden_size and others got none
        "train.valid_steps": "tfm's is train.eval_every",
        "train.eval_steps": "tfm's is train.eval_every",
        "train.validate_interval_updates": "tfm's is train.eval_every",
        "train.save_interval_updates": "tfm's is train.save_every",
        "train.save_checkpoint_steps": "tfm's is train.save_every",
        "model.embed_dim": "tfm's is model.d_model",
        "model.hidden_size": "tfm's is model.d_model",
        "model.word_vec_size": "tfm's is model.d_model",
        "model.encoder_embed_dim": "tfm's is model.d_model",
        "model.dim-emb": "tfm's is model.d_model",  # Marian's, written with a hyphen
        "model.transformer_ff": "tfm's is model.d_ff",
        "model.encoder_ffn_embed_dim": "tfm's is model.d_ff",
        "model.encoder_attention_heads": "tfm's is model.n_heads",
        "model.transformer-heads": "tfm's is model.n_heads",
        "model.layers": "tfm's is model.n_enc_layers (and model.n_dec_layers",
        "data.valid": "tfm's is data.dev",
        "validation": "tfm's is data.dev",
        "data.valid-sets": "tfm's is data.dev",
        "tokenizer.bpe_size": "tfm's is tokenizer.vocab_size",
    }
    for key, hint in said.items():
        with pytest.raises(RecipeError) as excinfo:
            load_recipe(RECIPES / "tiny.yaml", [f"{key}=3"])
        assert hint in problems_of(excinfo)[0], (key, problems_of(excinfo))


def test_a_whole_number_written_otherwise_says_how_to_write_it():
    for written, told in (("1e3", "train.max_steps='1e3' must be an integer: write 1000"),
                          ("2000.0", "train.max_steps=2000.0 must be an integer: write 2000")):
        with pytest.raises(RecipeError) as excinfo:
            load_recipe(RECIPES / "tiny.yaml", [f"train.max_steps={written}"])
        assert problems_of(excinfo) == [f"override 'train.max_steps={written}': {told}"]
    with pytest.raises(RecipeError) as excinfo:
        load_recipe(RECIPES / "tiny.yaml", ["train.max_steps=1.5"])
    assert problems_of(excinfo) == ["override 'train.max_steps=1.5': train.max_steps=1.5 must be an integer"]


def test_an_odd_width_is_told_one_that_fits_the_heads_too():
    """d_model=15 with 3 heads was told "try 16", which then failed for not dividing by 3."""
    for width, heads, fix in ((15, 3, 12), (9, 3, 6), (7, 1, 6), (33, 1, 32)):
        with pytest.raises(RecipeError) as excinfo:
            load_recipe(RECIPES / "tiny.yaml", [f"model.d_model={width}", f"model.n_heads={heads}"])
        problem = problems_of(excinfo)[0]
        assert f"model.d_model={width} must be even for sinusoidal positions (try {fix}, or model.positions=learned)" in problem
        assert fix % heads == 0 and fix % 2 == 0
        load_recipe(RECIPES / "tiny.yaml", [f"model.d_model={fix}", f"model.n_heads={heads}"])


def test_overrides_apply():
    base = RECIPES / "base.yaml"
    r = load_recipe(base, ["train.max_steps=2000", "model.d_model=256", "name=small", "train.eps=1e-8"])
    assert r.train.max_steps == 2000 and r.model.d_model == 256 and r.name == "small"
    assert r.train.eps == 1e-8 and isinstance(r.train.eps, float)
    assert load_recipe(base, ["train.max_steps=10", "train.max_steps=20"]).train.max_steps == 20  # last wins
    assert load_recipe(base).train.max_steps == 100000  # the file is untouched


def test_override_problems_reported_with_the_rest():
    with pytest.raises(RecipeError) as excinfo:
        load_recipe(
            RECIPES / "base.yaml",
            [
                "train.warmup_step=10",
                "foo",
                "modle.d_model=3",
                "model=3",
                "train.max_steps=0",
                "model.d_model=510",
                "model.max_positions=10",  # a cross-key rule with a key base.yaml does not set was blamed on the file
            ],
        )
    assert sorted(problems_of(excinfo)) == sorted(
        [
            "override 'train.warmup_step=10': train.warmup_step is not a recipe key; did you mean train.warmup_steps?",
            "override 'foo' must look like key=value (e.g. train.max_steps=2000)",
            "override 'modle.d_model=3': modle.d_model is not a recipe key; did you mean model.d_model?",
            "override 'model=3' must set one key inside model, e.g. model.d_model=...",
            "override 'train.max_steps=0': train.max_steps=0 must be a positive integer",
            "override 'model.d_model=510': model.d_model=510 must be divisible by model.n_heads=8 (try 512, or model.n_heads=6)",
            "override 'model.max_positions=10': data.max_len=256 must be at most model.max_positions=10 (a training side "
            "takes data.max_len positions, its </s> or <s> included); lower data.max_len or raise model.max_positions to 256",
        ]
    )
    assert excinfo.value.source == str(RECIPES / "base.yaml")
    assert excinfo.value.only_overrides  # base.yaml itself is fine: every problem is an override's


def test_recipe_keys_cover_every_field():
    keys = recipe_keys()
    assert "name" in keys and "train.warmup_steps" in keys and "model.d_model" in keys
    assert (
        len(keys)
        == len(set(keys))
        == 2
        + sum(
            len(dataclasses.fields(type(getattr(Recipe(), s))))
            for s in ("data", "tokenizer", "model", "train", "decode")
        )
    )


# ----------------------------------------------------------------------------------------------------- files


def test_invalid_yaml_names_the_line(tmp_path):
    path = write(tmp_path, "name: x\ntrain:\n  max_steps: [1, 2\n  eps: 1\n")
    with pytest.raises(RecipeError) as excinfo:
        load_recipe(path)
    assert str(path) in str(excinfo.value)
    [problem] = problems_of(excinfo)
    assert problem.startswith("invalid YAML at line 4, column")


def test_duplicate_key_is_an_error(tmp_path):
    path = write(tmp_path, "name: x\ntrain:\n  max_steps: 1\n  max_steps: 2\n")
    with pytest.raises(RecipeError) as excinfo:
        load_recipe(path)
    assert problems_of(excinfo) == [
        "invalid YAML at line 4, column 3: duplicate key 'max_steps' (each key may appear once in a mapping)"
    ]


def test_anchors_aliases_and_merge_keys_are_yaml(tmp_path):
    """`<<: *anchor` (YAML's merge key, which PyYAML's safe loader reads) was refused as 'invalid YAML ... could
    not determine a constructor for the tag merge'; keys beside it override the merged ones."""
    text = (
        "name: x\nmodel: {d_model: &w 256, d_ff: 1024, n_heads: 4}\n"
        "train:\n  <<: {max_steps: 3, warmup_steps: 2, eval_every: *w}\n  max_steps: 7\n  save_every: *w\n"
    )
    recipe = load_recipe(write(tmp_path, text))
    assert (recipe.train.max_steps, recipe.train.warmup_steps, recipe.train.eval_every, recipe.train.save_every) == (7, 2, 256, 256)
    with pytest.raises(RecipeError, match="duplicate key 'max_steps'"):  # two explicit keys are still refused
        load_recipe(write(tmp_path, text + "  max_steps: 8\n"))



def test_a_huge_value_is_shown_shortened(tmp_path):
    """Nine YAML aliases nested nine deep (a 'billion laughs' recipe) stand for 9**9 strings: the error line printed
    the whole list (gigabytes, and the command never ended); a list of 100,000 betas printed every one."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    text = "\n".join(lines) + "\nname: x\nmodel:\n  d_model: *i\ntrain:\n  betas: [" + ", ".join(["0.5"] * 100000) + "]\n"
    with pytest.raises(RecipeError) as excinfo:
        load_recipe(write(tmp_path, text))
    problems = [p for p in problems_of(excinfo) if "is not a recipe key" not in p]
    assert problems == [
        "model.d_model=[[...], [...], [...], [...], [...], [...], ...] must be an integer",
        "train.betas=[0.5, 0.5, 0.5, 0.5, 0.5, 0.5, ...] must be two numbers in [0, 1), e.g. [0.9, 0.98]",
    ]



def test_an_alias_bomb_in_a_text_or_list_field_is_refused_at_once(tmp_path):
    """The same bomb in `name`, `description`, `train.betas` or `data.train` (fields whose value may be text or a
    list) was walked item by item before its type was checked: 387 million copies, minutes and gigabytes before
    the one-line error. Run in a subprocess with a time limit, so that such a walk fails the test instead of
    holding the suite."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    fields = ["name: *i", "description: *i", "train:\n  betas: *i", "data:\n  train: [*i, *i]"]
    paths = []
    for k, field in enumerate(fields):
        (tmp_path / str(k)).mkdir()
        named = "\n" if field.startswith("name") else "\nname: x\n"
        paths.append(str(write(tmp_path / str(k), "\n".join(lines) + named + field + "\n")))
    code = ("import sys\nfrom tfm_cli.recipe import load_recipe\nfrom tfm_cli.errors import RecipeError\n"
            "for path in sys.argv[1:]:\n    try:\n        load_recipe(path)\n    except RecipeError as e:\n"
            "        print(str(e).replace(chr(10), ' '))\n")
    out = subprocess.run([sys.executable, "-c", code, *paths], capture_output=True, text=True, timeout=90, check=True)
    said = out.stdout.splitlines()
    assert len(said) == len(fields), out.stdout + out.stderr
    for field, line in zip(fields, said, strict=True):
        key = field.replace(":\n  ", ".").split(":")[0]
        assert f"{key}=[[...], [...]" in line, line


def test_a_number_too_long_to_read_is_named(tmp_path):
    """An integer of 5,000 digits in a recipe or an override: PyYAML's int() raised a ValueError (Python reads at
    most 4,300 digits), a traceback."""
    big = "9" * 5000
    with pytest.raises(RecipeError) as excinfo:
        load_recipe(write(tmp_path, f"name: x\ntrain:\n  max_steps: {big}\n"))
    [problem] = problems_of(excinfo)
    assert problem.startswith("invalid YAML at line 3: a number too long to read (") and len(problem) < 200
    with pytest.raises(RecipeError) as excinfo:
        load_recipe(write(tmp_path, "name: x\n"), [f"train.max_steps={big}"])
    [problem] = problems_of(excinfo)
    assert problem.startswith("override 'train.max_steps=999") and "has a number too long to read (" in problem
    assert len(problem) < 250


def test_missing_file_is_named(tmp_path):
    write(tmp_path, "name: x\n", name="base.yaml")
    with pytest.raises(TfmError) as excinfo:
        load_recipe(tmp_path / "bsae.yaml")
    assert isinstance(excinfo.value, RecipeError)
    assert str(excinfo.value) == f"recipe {tmp_path / 'bsae.yaml'} does not exist"
    assert excinfo.value.hint == f"did you mean {tmp_path / 'base.yaml'}?"
    with pytest.raises(RecipeError, match="does not exist"):
        load_recipe(tmp_path / "nowhere" / "x.yaml")


def test_directory_empty_and_non_mapping_files(tmp_path):
    with pytest.raises(RecipeError, match="is a directory"):
        load_recipe(tmp_path)
    with pytest.raises(RecipeError, match="is empty"):
        load_recipe(write(tmp_path, "# nothing\n"))
    with pytest.raises(RecipeError) as excinfo:
        load_recipe(write(tmp_path, "- name: x\n"))
    assert problems_of(excinfo)[0].startswith("the top level must be a mapping of recipe keys")
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(RecipeError, match="not UTF-8"):
        load_recipe(latin1)


@pytest.mark.parametrize("codec, iconv", [("utf-16", "utf-16"), ("utf-16-le", "utf-16le"), ("utf-16-be", "utf-16be")])
def test_a_utf16_recipe_is_named_so_with_the_encoding_iconv_reads(tmp_path, codec, iconv):
    """A recipe saved as UTF-16 (Notepad's "Unicode") was "bad byte 0xff at line 1, column 1", or without a
    byte-order mark "control character 0x00, which YAML does not allow": true, but not what the file is. The
    command offered writes the UTF-8 copy beside it, never over it, with the encoding that decodes it."""
    path = tmp_path / "recipe.yaml"
    text = "name: x\ndescription: café\nmodel:\n  d_model: 64\n"
    path.write_bytes(text.encode(codec))
    with pytest.raises(RecipeError) as excinfo:
        load_recipe(path)
    (problem,) = problems_of(excinfo)
    assert problem.startswith("is UTF-16 text (") and "not UTF-8: save it as UTF-8" in problem, problem
    assert problem.endswith(f"(e.g. iconv -f {iconv} -t utf-8 {path} > {tmp_path / 'utf8-recipe.yaml'})"), problem
    if shutil.which("iconv") is None:
        pytest.skip("iconv is not installed: the command the message gives was not run")
    subprocess.run(problem.split("(e.g. ", 1)[1].removesuffix(")"), shell=True, check=True)
    assert load_recipe(tmp_path / "utf8-recipe.yaml").description == "café"


def test_a_gzipped_recipe_is_named_so(tmp_path):
    """A recipe.yaml.gz (or one gzipped under its own name) was "bad byte 0x8b at line 1, column 2"."""
    import gzip

    for name, there, plain in (("recipe.yaml.gz", [], "recipe.yaml"), ("recipe.yaml.gz", ["recipe.yaml"], "plain-recipe.yaml"),
                               ("recipe.yaml", [], "plain-recipe.yaml"),
                               ("recipe.yaml.gz", ["recipe.yaml", "plain-recipe.yaml"], "converted-plain-recipe.yaml")):
        path = tmp_path / name
        for old in ("recipe.yaml", "plain-recipe.yaml"):
            (tmp_path / old).unlink(missing_ok=True)
        for mine in there:  # files of its own beside it: never written over
            (tmp_path / mine).write_text("name: mine\n", encoding="utf-8")
        path.write_bytes(gzip.compress(b"name: x\n"))
        with pytest.raises(RecipeError) as excinfo:
            load_recipe(path)
        assert problems_of(excinfo) == [
            f"is gzip-compressed, not YAML text: decompress it first (gunzip -c {path} > {tmp_path / plain})"
        ]


def test_empty_sections_take_defaults(tmp_path):
    recipe = load_recipe(write(tmp_path, "name: x\nmodel:\ntrain:\n"))
    assert recipe.model == ModelRecipe() and recipe.train == TrainRecipe()


def test_a_blank_description_is_no_description(tmp_path):
    """`description:` left blank, as in a template, was "description=null (empty) must be a string"; a blank
    name is still an error (it names the run directory)."""
    assert load_recipe(write(tmp_path, "name: x\ndescription:\n")).description == ""
    with pytest.raises(RecipeError) as excinfo:
        load_recipe(write(tmp_path, "name:\ndescription:\n"))
    assert problems_of(excinfo) == ["name=null (empty) must be a string"]


def test_dump_load_round_trip(tmp_path):
    for source in (RECIPES / "base.yaml", RECIPES / "big.yaml"):
        recipe = load_recipe(source, ["data.train=[a.fr, a.en]", "data.dev=null", "tokenizer.path=tok.json"])
        out = tmp_path / f"{source.stem}.resolved.yaml"
        dump_recipe(recipe, out)
        again = load_recipe(out)
        assert again == recipe
        assert recipe_to_dict(again) == recipe_to_dict(recipe)
        assert recipe_from_dict(recipe_to_dict(recipe)) == recipe
    assert list(recipe_to_dict(Recipe(name="x"))) == [
        "name",
        "description",
        "data",
        "tokenizer",
        "model",
        "train",
        "decode",
    ]


def test_import_and_validation_stay_light():
    # The recipe layer must not pull in torch (nor the CLI's typer/rich). `tfm_cli.model.config` is pure
    # Python, so `tfm_cli/model/__init__.py` must not import torch eagerly either.
    code = (
        "import sys, tfm_cli.recipe as r; r.load_recipe(sys.argv[1]); "
        "print(sorted(m for m in ('torch', 'typer', 'rich') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(RECIPES / "base.yaml")], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_integers_that_yaml_1_1_reads_as_octal_or_base_60_are_not_silently_other_numbers(tmp_path):
    """PyYAML (YAML 1.1) read `seed: 010` as 8 and `max_steps: 1:30` as 90, and trained with them without a word;
    YAML 1.2, JSON and every other config reader take 010 as 10 and 1:30 as text."""
    path = write(tmp_path, "name: x\ntrain:\n  seed: 010\n  max_steps: 1:30\n  max_time: 1:30\n")
    with pytest.raises(RecipeError) as excinfo:
        load_recipe(path, ["train.eval_every=-0_10"])
    assert problems_of(excinfo) == [
        "train.max_steps=1:30 is a base-60 number to YAML 1.1 (90): write 90",
        "train.max_time='1:30' is not a positive duration: write e.g. 90s, 15m, 2h or 1h30m (or null for no time limit)",
        "train.seed=010 has a leading zero, which makes it octal to YAML 1.1 (8): write 10 without the zero "
        "(or 8 if octal was meant)",
        "override 'train.eval_every=-0_10': train.eval_every=-0_10 has a leading zero, which makes it octal to YAML "
        "1.1 (-8): write -10 without the zero "
        "(or -8 if octal was meant)",
    ]
    # elsewhere it is the text it was written as: a name, a path, a float; and the recipe dumps back to YAML
    path = write(tmp_path, "name: 007\ndata: {train: 0123, dev: [1:2, '3']}\ntrain: {lr_factor: 010, seed: 0, eps: 0x1}\n")
    recipe = load_recipe(path, ["description=12:30"])
    assert (recipe.name, recipe.description, recipe.data.train, recipe.data.dev) == ("007", "12:30", "0123", ["1:2", "3"])
    assert (recipe.train.lr_factor, recipe.train.seed) == (10.0, 0)
    dump_recipe(recipe, tmp_path / "again.yaml")
    assert recipe_to_dict(load_recipe(tmp_path / "again.yaml")) == recipe_to_dict(recipe)


def test_load_recipe_refuses_overrides_that_are_not_a_list_of_strings(tmp_path):
    """`load_recipe(path, "train.max_steps=5")` listed 15 nonsense problems (one a character); None, a number and
    a path of another type failed deep inside."""
    path = write(tmp_path, "name: x\n")
    for bad in ("train.max_steps=5", None, 5):
        with pytest.raises(TypeError, match="takes overrides as a list of 'key=value' strings"):
            load_recipe(path, bad)
    with pytest.raises(TypeError, match="override 2 is int"):
        load_recipe(path, ["train.max_steps=5", 5])
    with pytest.raises(TypeError, match="load_recipe\\(\\) takes the recipe's path"):
        load_recipe(None)
    assert load_recipe(path, ("train.max_steps=5",)).train.max_steps == 5


def test_the_shipped_recipes_train_from_anywhere(tmp_path):
    """An installed tfm (a wheel, `pip install` of the checkout without -e) had no recipe at all: `tfm train
    recipes/tiny.yaml` outside the checkout said it does not exist, and its hint named that same file. The recipes
    ship in the package, as `bundled:NAME.yaml`; the checkout's recipes/ is a link to them, and the wheel's files
    are what pyproject.toml's package-data lists."""
    import fnmatch
    import re

    from tfm_cli.recipe import BUNDLED_RECIPES, bundled_recipes

    repo = Path(__file__).resolve().parents[1]
    assert (repo / "recipes").resolve() == BUNDLED_RECIPES.resolve()
    assert bundled_recipes() == ["bundled:base.yaml", "bundled:big.yaml", "bundled:tiny.yaml"]
    assert load_recipe("bundled:tiny.yaml") == load_recipe(repo / "recipes" / "tiny.yaml")
    data = re.search(r"^tfm_cli = \[(.*)\]", (repo / "pyproject.toml").read_text(), re.M)  # (tomllib: Python 3.11+)
    globs = re.findall(r'"([^"]+)"', data.group(1))
    package = repo / "tfm_cli"
    shipped = [p.relative_to(package).as_posix() for d in ("recipes", "corpora") for p in (package / d).rglob("*") if p.is_file()]
    assert shipped and all(any(fnmatch.fnmatch(f, g) for g in globs) for f in shipped), (shipped, globs)
    proc = tfm("train", "bundled:tiny.yaml", "--dry-run", "--json", cwd=tmp_path)
    assert json.loads(proc.stdout)["recipe"]["name"] == "tiny"
    proc = tfm("train", "recipes/tiny.yaml", "--dry-run", cwd=tmp_path, check=False)
    assert proc.returncode == 1 and "Error: recipe recipes/tiny.yaml does not exist" in proc.stderr
    assert "hint: tfm ships that recipe as bundled:tiny.yaml" in proc.stderr
    with pytest.raises(RecipeError) as excinfo:
        load_recipe("bundled:tiyn.yaml")
    assert str(excinfo.value) == "tfm ships no recipe bundled:tiyn.yaml" and excinfo.value.hint == "did you mean bundled:tiny.yaml?"


def test_an_override_with_a_line_break_is_refused():
    """YAML folds a line break in a plain value into a space: `data.train=$'nl\\na.tsv'` trained on "nl a.tsv", silently."""
    for text in ("data.train=nl\na.tsv", "description=two\r\nlines", 'description="quoted\nbreak"'):
        with pytest.raises(RecipeError, match="holds a line break, which YAML reads as a space"):
            parse_override(text)
    assert parse_override("description=two words") == ("description", "two words")


def test_model_numbers(tmp_path):
    """model.numbers: null in a recipe is the placeholder for a new model, and as the model a run goes on from reads
    them for a fine-tuning or a resume (a checkpoint saved before tfm had it: as written); a bad value is named
    with the choices."""
    import torch
    from safetensors.torch import save_file

    from tfm_cli.training import resume_recipe

    assert recipe_from_dict({"name": "x"}).model.numbers is None
    assert model_config(recipe_from_dict({"name": "x"}), 300, 0, 1, 2).numbers == "placeholders"
    assert ModelConfig().numbers == "as_written"  # the config of a model saved before: digits as they are
    assert ModelConfig.from_dict({k: v for k, v in ModelConfig().to_dict().items() if k != "numbers"}).numbers == "as_written"
    with pytest.raises(RecipeError) as excinfo:
        recipe_from_dict({"name": "x", "model": {"numbers": "words"}})
    assert problems_of(excinfo) == ["model.numbers='words' must be one of: as_written, placeholders"]
    for name in ("tiny.yaml", "base.yaml", "big.yaml"):
        assert load_recipe(RECIPES / name).model.numbers is None

    def run(name: str, saved: dict | None, numbers_line: str = "") -> Path:
        folder = tmp_path / name
        (folder / "checkpoints").mkdir(parents=True)
        text = (RECIPES / "tiny.yaml").read_text(encoding="utf-8").replace("  numbers: null", numbers_line or "  #")
        (folder / "recipe.yaml").write_text(text, encoding="utf-8")
        if saved is not None:
            config = {k: v for k, v in ModelConfig().to_dict().items() if k in saved or k != "numbers"} | saved
            metadata = {"format": "tfm", "config": json.dumps(config), "tokenizer_sha256": "0" * 64}
            save_file({"x": torch.zeros(1)}, folder / "checkpoints" / "step-00000010.safetensors", metadata)
        return folder

    old = run("old", {})  # a checkpoint of a model saved before tfm had model.numbers
    assert resume_recipe(old, []).model.numbers == "as_written"
    assert resume_recipe(old, ["model.numbers=placeholders"]).model.numbers == "placeholders"  # (refused by the checks)
    assert resume_recipe(run("new", {"numbers": "placeholders"}), []).model.numbers == "placeholders"
    assert resume_recipe(run("said", {}, "  numbers: as_written"), []).model.numbers == "as_written"
    assert resume_recipe(run("none", None), []).model.numbers == "placeholders"  # no checkpoint: a new model's


@pytest.mark.parametrize(("theirs", "given", "expected"), [
    ("as_written", None, "as_written"), ("placeholders", None, "placeholders"), ("as_written", "placeholders", "placeholders"),
])
def test_fine_tuning_reads_numbers_as_its_model_unless_told(tmp_path, theirs: str, given: str | None, expected: str):
    """train.init_from with model.numbers null (a run's recipe.yaml of before tfm had it, the shipped recipes) goes on
    reading numbers as the model it starts from: a model that read digits fine-tuned into one given placeholders
    its tokenizer spells letter by letter lost every number. A value given is the run's."""
    from tfm_cli.checkpoint import save_weights, weights_state
    from tfm_cli.model import Transformer
    from tfm_cli.runs import FINAL
    from tfm_cli.tokenizer import train_tokenizer
    from tfm_cli.training.checks import with_init_tokenizer

    tok = train_tokenizer(["Bonjour, j'ai 3 chats.", "Hello, I have 3 cats."] * 20, vocab_size=300)
    config = ModelConfig(vocab_size=tok.vocab_size, d_model=8, d_ff=8, n_heads=1, n_enc_layers=1, n_dec_layers=1,
                         max_positions=16, numbers=theirs)
    (tmp_path / "run").mkdir()
    tok.save(tmp_path / "run" / "tokenizer.json")
    save_weights(tmp_path / "run" / FINAL, weights_state(Transformer(config)), config, tok.sha256, 7)
    recipe = recipe_from_dict({"name": "ft", "train": {"init_from": str(tmp_path / "run")}, "model": {"numbers": given}})
    assert with_init_tokenizer(recipe).model.numbers == expected
    assert with_init_tokenizer(recipe, resume=True).model.numbers == given  # a resume reads its own run (resume_recipe)
