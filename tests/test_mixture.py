"""Training on several corpora with weights (`data.train: [{path: a.tsv, weight: 2}, {path: [b.fr, b.en]}]`): the
recipe's checks, the pairs an epoch takes of each corpus, the batches and their resume, and what `tfm train`,
its dry run and `tfm tokenize` say and refuse, through the installed command line."""

from __future__ import annotations

import collections
import itertools
import json
from pathlib import Path

import pytest
import yaml
from clitools import tfm, tiny_recipe
from safetensors.torch import load_file

from tfm_cli.corpus import corpus_files, corpus_parts, describe, read_pairs
from tfm_cli.data import (
    BatchStream,
    CorpusStats,
    MixturePart,
    TokenizedCorpus,
    encode_corpus,
    epoch_pairs,
    pairs_an_epoch,
)
from tfm_cli.errors import RecipeError, TfmError
from tfm_cli.export.common import corpus_lines
from tfm_cli.recipe import (
    DataRecipe,
    Recipe,
    recipe_as_written,
    recipe_from_dict,
    recipe_to_dict,
    validate_recipe,
)
from tfm_cli.training.corpora import check_mixture

BUNDLED = "bundled:tatoeba-fr-en/train.tsv.gz"


class Chars:
    """A tokenizer of one id a character (what `encode_corpus` needs of one)."""

    vocab_size = 1000

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [[3 + ord(c) % 997 for c in text.strip()] for text in texts]


def pairs(start: int, n: int) -> list[tuple[str, str]]:
    """`n` real pairs of the bundled corpus from its `start`-th, of at most 30 characters a side."""
    short = ((s, t) for _, s, t in read_pairs(BUNDLED) if len(s) <= 30 and len(t) <= 30)
    return list(itertools.islice(short, start, start + n))


def write_tsv(path: Path, rows: list[tuple[str, str]]) -> Path:
    path.write_text("".join(f"{s}\t{t}\n" for s, t in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mixture")
    a, b = pairs(0, 60), pairs(60, 40)
    (root / "b.fr").write_text("".join(s + "\n" for s, _ in b), encoding="utf-8")
    (root / "b.en").write_text("".join(t + "\n" for _, t in b), encoding="utf-8")
    return {"root": root, "a": write_tsv(root / "a.tsv", a), "b.fr": root / "b.fr", "b.en": root / "b.en",
            "both": write_tsv(root / "both.tsv", a + b), "dev": write_tsv(root / "dev.tsv", pairs(100, 20))}


def mixture(corpora: dict[str, Path], a: float = 2, b: float = 0.5) -> list[dict]:
    return [{"path": str(corpora["a"]), "weight": a}, {"path": [str(corpora["b.fr"]), str(corpora["b.en"])], "weight": b}]


# ---- the recipe ---------------------------------------------------------------------------------------------------


def test_a_mixture_loads_dumps_and_loads_again(corpora):
    recipe = recipe_from_dict({"name": "m", "data": {"train": [{"path": "a.tsv", "weight": 2}, {"path": ["b.fr", "b.en"]}]}})
    assert [(p.spec, p.weight, p.number) for p in corpus_parts(recipe.data.train)] == [
        ("a.tsv", 2.0, 1), (["b.fr", "b.en"], 1.0, 2)]
    assert corpus_files(recipe.data.train) == ["a.tsv", "b.fr", "b.en"]
    assert describe(recipe.data.train) == "a.tsv (weight 2) + b.fr and b.en"
    again = recipe_from_dict(yaml.safe_load(yaml.safe_dump(recipe_to_dict(recipe))))
    assert again.data.train == recipe.data.train
    # set in code, with paths and an integer weight: read as the YAML would hold them
    in_code = Recipe(name="m", data=DataRecipe(train=[{"path": Path("a.tsv"), "weight": 3}, {"path": (Path("b.fr"), "b.en")}]))
    assert validate_recipe(in_code) == []
    assert recipe_as_written(in_code).data.train == [{"path": "a.tsv", "weight": 3}, {"path": ["b.fr", "b.en"], "weight": 1}]


def test_one_corpus_of_the_list_is_set_by_its_place_on_the_command_line():
    data = {"name": "m", "data": {"train": [{"path": "a.tsv", "weight": 2}, {"path": ["b.fr", "b.en"]}]}}
    recipe = recipe_from_dict(data, overrides=["data.train[2].weight=0.3", "data.train[1].path=c.tsv"])
    assert recipe.data.train == [{"path": "c.tsv", "weight": 2.0}, {"path": ["b.fr", "b.en"], "weight": 0.3}]
    assert data["data"]["train"][0] == {"path": "a.tsv", "weight": 2}  # the recipe's own list untouched
    cases = {
        "data.train[3].weight=1": "override 'data.train[3].weight=1': data.train lists 2 corpora (data.train[1] to "
                                  "data.train[2]): to add one, give the whole list",
        "data.train[0].weight=1": "override 'data.train[0].weight=1': data.train[0]: the corpora of data.train are "
                                  "counted from 1 (data.train[1] to data.train[2])",
        "data.train[1].wieght=1": "override 'data.train[1].wieght=1': wieght is not a key of a corpus; did you mean "
                                  "data.train[1].weight?",
        "data.train[1].weight=0": "override 'data.train[1].weight=0': data.train[1].weight=0 must be a number above 0",
    }
    for override, said in cases.items():
        with pytest.raises(RecipeError) as excinfo:
            recipe_from_dict(data, overrides=[override])
        assert len(excinfo.value.problems) == 1 and excinfo.value.problems[0].startswith(said), excinfo.value.problems
    for recipe in (data, {"name": "m"}):  # the list given after it would drop it without a word (or say it is none)
        with pytest.raises(RecipeError) as excinfo:
            recipe_from_dict(recipe, overrides=["data.train[1].weight=5", "data.train=[{path: a.tsv}, {path: b.tsv}]"])
        assert excinfo.value.problems == [
            "override 'data.train[1].weight=5': it comes before 'data.train=[{path: a.tsv}, {path: b.tsv}]', which sets "
            "data.train anew: put it after that one"]
    with pytest.raises(RecipeError) as excinfo:
        recipe_from_dict({"name": "m"}, overrides=["data.train[1].weight=2"])
    assert excinfo.value.problems == [
        "override 'data.train[1].weight=2': data.train is one corpus ('bundled:tatoeba-fr-en/train.tsv.gz'), not a list "
        "of corpora: give the whole list, e.g. data.train=[{path: a.tsv, weight: 2}, {path: b.tsv}]"]


def test_each_problem_of_a_mixture_is_a_line_naming_the_corpus():
    bad = [{"path": "a.tsv", "weight": -1}, {"paths": "b.tsv"}, "c.tsv", {"path_src": "d.fr", "path": ""},
           {"path": "e.tsv", "weight": True}, {"path": ["f.fr", "g.fr", "h.fr"]}, {"path": "i.tsv", "weight": float("nan")},
           {"path": "j.tsv", "weight": 1001}]
    with pytest.raises(RecipeError) as excinfo:
        recipe_from_dict({"name": "m", "data": {"train": bad, "dev": [{"path": "dev.tsv"}]}})
    lines = excinfo.value.problems
    expected = [
        "data.train[1].weight=-1 must be a number above 0",
        "data.train[2].paths is not a key of a corpus; did you mean data.train[2].path?",
        "data.train[2] needs a path",
        "data.train[3]='c.tsv' must be a corpus written as the others of data.train are, {path: CORPUS, weight: W}",
        "data.train[4].path_src is not a key of a corpus; write path: [SOURCE_FILE, TARGET_FILE]",
        "data.train[4].path='' must name a file",
        "data.train[5].weight=true must be a number above 0",
        "data.train[6].path=['f.fr', 'g.fr', 'h.fr'] must be one TSV file path or a list of exactly 2 paths",
        "data.train[7].weight=nan must be a number above 0",
        "data.train[8].weight=1001 must be at most 1,000: an epoch would hold its pairs that many times",
        "data.dev=[{...}] must be one TSV file path",
    ]
    assert len(lines) == len(expected)
    for line, start in zip(lines, expected, strict=True):
        assert line.startswith(start), line
    assert "a list of corpora with weights is for data.train" in lines[-1]
    with pytest.raises(RecipeError) as excinfo:  # one corpus written as a mapping, not in a list
        recipe_from_dict({"name": "m", "data": {"train": {"path": "a.tsv", "weight": 2}}})
    assert "put [ ] around it" in excinfo.value.problems[0]
    with pytest.raises(RecipeError) as excinfo:  # a bound on what validation walks
        recipe_from_dict({"name": "m", "data": {"train": [{"path": "a.tsv"}] * 1001}})
    assert excinfo.value.problems == ["data.train lists 1,001 corpora: at most 1,000 (join small files with cat)"]


# ---- the pairs an epoch takes, and the batches ----------------------------------------------------------------------


def test_an_epoch_takes_each_corpus_as_many_times_as_its_weight(corpora):
    corpus = encode_corpus(mixture(corpora, a=2, b=0.5), Chars(), max_len=64)
    assert [(p.number, p.stats.kept, p.weight) for p in corpus.mixture] == [(1, 60, 2.0), (2, 40, 0.5)]
    assert pairs_an_epoch(corpus.mixture) == [120, 20]
    drawn = []
    for epoch in (1, 2, 3):
        taken = epoch_pairs(corpus.mixture, seed=1, epoch=epoch)
        counts = collections.Counter(taken.tolist())
        assert all(counts[i] == 2 for i in range(60))  # each pair of the first corpus twice
        second = sorted(i for i in counts if i >= 60)
        assert len(second) == 20 and all(counts[i] == 1 for i in second)  # a random half of the second, once each
        drawn.append(second)
        assert epoch_pairs(corpus.mixture, seed=1, epoch=epoch).tolist() == taken.tolist()  # the same again
    assert len({tuple(d) for d in drawn}) == 3  # drawn again each epoch
    stream = BatchStream(corpus, max_tokens=200, seed=1, pad_id=0, bos_id=1, eos_id=2)
    for epoch in (1, 2):
        batched = collections.Counter(i for batch in stream.batches(epoch) for i in batch)
        assert batched == collections.Counter(epoch_pairs(corpus.mixture, 1, epoch).tolist())
        assert len({len(batch) for batch in stream.batches(epoch)}) > 1  # (batches of several sizes: by length)
    one_and_a_half = encode_corpus(mixture(corpora, a=1.5, b=1), Chars(), max_len=64)
    counts = collections.Counter(epoch_pairs(one_and_a_half.mixture, 1, 1).tolist())
    assert sorted(collections.Counter(counts[i] for i in range(60)).items()) == [(1, 30), (2, 30)]


def test_the_copies_of_a_pair_lie_apart_among_the_pairs_of_its_lengths():
    # 400 pairs of one length, each twice, 40 pairs a batch: spread evenly, a pair's copies lie 10 batches apart
    corpus = TokenizedCorpus.from_sequences([[5] * 9] * 400, [[6] * 9] * 400, vocab_size=100)
    corpus.mixture = [MixturePart(1, "a.tsv", 2.0, CorpusStats(400, 400, 0, 0))]
    for epoch in (1, 2, 3):
        batches = BatchStream(corpus, max_tokens=400, seed=epoch, pad_id=0, bos_id=1, eos_id=2).batches(epoch)
        assert len(batches) == 20 and all(len(batch) == 40 for batch in batches)  # as full as ever
        assert all(len(set(batch)) == len(batch) for batch in batches)
        assert collections.Counter(i for batch in batches for i in batch) == collections.Counter(list(range(400)) * 2)


def test_weights_of_one_batch_as_the_files_joined_into_one(corpora):
    joined = encode_corpus(str(corpora["both"]), Chars(), max_len=64)
    mixed = encode_corpus(mixture(corpora, a=1, b=1), Chars(), max_len=64)
    for epoch in (1, 2):
        assert (BatchStream(mixed, 200, 3, 0, 1, 2).batches(epoch) == BatchStream(joined, 200, 3, 0, 1, 2).batches(epoch))


def test_a_mixture_stream_resumes_at_the_next_batch(corpora):
    corpus = encode_corpus(mixture(corpora), Chars(), max_len=64)
    stream = BatchStream(corpus, 150, 7, 0, 1, 2)
    whole = [b.src.tolist() for b in itertools.islice(stream, 40)]  # more than an epoch
    first = BatchStream(corpus, 150, 7, 0, 1, 2)
    head = [b.src.tolist() for b in itertools.islice(first, 17)]
    then = BatchStream(corpus, 150, 7, 0, 1, 2)
    then.load_state_dict(first.state_dict())
    assert head + [b.src.tolist() for b in itertools.islice(then, 23)] == whole
    assert stream.epoch > 1


def test_weights_that_take_no_pair_or_too_many_are_refused(corpora):
    corpus = encode_corpus(mixture(corpora, a=0.001, b=0.001), Chars(), max_len=64)
    with pytest.raises(TfmError, match="take no pair into an epoch"):
        BatchStream(corpus, 200, 1, 0, 1, 2)
    parts = [("data.train[1] (a.tsv)", 60, 0.001), ("data.train[2] (b.fr and b.en)", 40, 0.5)]
    assert check_mixture(parts) == [
        "warning: data.train[1] (a.tsv): an epoch takes none of its 60 pairs (weight 0.001); raise its weight, or take "
        "it out of data.train"]
    with pytest.raises(TfmError, match="take no pair into an epoch"):
        check_mixture([("data.train[1] (a.tsv)", 60, 0.001)])
    with pytest.raises(TfmError, match=r"make an epoch of 50,000,001 pairs .*: its batches are built in memory"):
        check_mixture([("data.train[1] (big.tsv)", 50_000_001, 1), ("data.train[2] (b.tsv)", 100, 0.001)])


def test_a_model_card_names_each_corpus_with_its_weight(corpora):
    lines = corpus_lines([{"path": BUNDLED, "weight": 2.0}, {"path": ["b.fr", "b.en"], "weight": 0.5}])
    assert lines[0] == f"- training data (weight 2): `{BUNDLED}`, the corpus bundled with tfm"
    assert any(line.startswith("- attribution") for line in lines)
    assert lines[-1] == "- training data (weight 0.5): `b.fr and b.en` (a user corpus: give its attribution when you publish)"


# ---- through the command line ---------------------------------------------------------------------------------------


def recipe_file(corpora: dict[str, Path], name: str, train: list[dict] | str | None = None, **train_keys) -> Path:
    path = corpora["root"] / f"{name}.yaml"
    path.write_text(tiny_recipe(
        name, data={"train": train if train is not None else mixture(corpora), "dev": None},
        train={"max_tokens": 200, "max_steps": 24, "save_every": 12, "warmup_steps": 10, "log_every": 6,
               "average_last": 1, "keep_last": 2, **train_keys},
    ), encoding="utf-8")
    return path


def test_train_on_a_mixture_says_what_an_epoch_takes_and_resumes_bit_for_bit(corpora):
    root = corpora["root"]
    recipe = recipe_file(corpora, "mixed")
    straight = tfm("train", str(recipe), "--out", str(root / "straight"), "--device", "cpu")
    said = straight.stdout + straight.stderr
    assert (f"an epoch trains on data.train[1] ({corpora['a']}) 60 pairs x 2 = 120; data.train[2] "
            f"({corpora['b.fr']} and {corpora['b.en']}) 40 pairs x 0.5 = 20, drawn at random again each epoch") in said
    summary = json.loads((root / "straight" / "summary.json").read_text())
    assert [(c["weight"], c["kept"], c["pairs_an_epoch"]) for c in summary["train_corpus"]["corpora"]] == [
        (2.0, 60, 120), (0.5, 40, 20)]
    # the same run stopped at step 12 and resumed to 24, past the end of its first epoch: the same weights
    tfm("train", str(recipe), "--out", str(root / "halves"), "--device", "cpu", "train.max_steps=12")
    tfm("train", "--resume", str(root / "halves"), "train.max_steps=24", "--device", "cpu")
    metrics = [json.loads(line) for line in (root / "straight" / "metrics.jsonl").read_text().splitlines()]
    assert max(m.get("epoch", 0) for m in metrics) >= 2
    a = load_file(root / "straight" / "checkpoints" / "step-00000024.safetensors")
    b = load_file(root / "halves" / "checkpoints" / "step-00000024.safetensors")
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    # another weight on resume: said (its position still exists in the batches of the new weights)
    again = tfm("train", "--resume", str(root / "halves"), "train.max_steps=30", "--device", "cpu",
                f"data.train={json.dumps(mixture(corpora, a=3))}")
    assert "note: this resume changes data.train" in again.stdout + again.stderr


def test_a_resume_that_changes_the_weights_names_them(corpora):
    root = corpora["root"]
    recipe = recipe_file(corpora, "reweigh", mixture(corpora, a=3, b=1), max_steps=10, save_every=10)
    tfm("train", str(recipe), "--out", str(root / "reweigh"), "--device", "cpu")
    proc = tfm("train", "--resume", str(root / "reweigh"), "train.max_steps=20", "--device", "cpu",
               "data.train[1].weight=1", "data.train[2].weight=0.5", check=False)  # 80 pairs: no batch 10 left
    assert proc.returncode == 1
    assert ("cannot continue from its data position (epoch 1, batch 10): this resume changes data.train[1].weight 3 -> "
            "1, data.train[2].weight 1 -> 0.5") in proc.stderr


def test_a_corpus_of_the_list_that_moved_is_given_its_new_place_by_its_own_key(corpora):
    root = corpora["root"]
    moving = write_tsv(root / "moving.tsv", pairs(200, 30))
    recipe = recipe_file(corpora, "moved", [{"path": str(corpora["a"]), "weight": 2}, {"path": str(moving), "weight": 0.5}],
                         max_steps=6, save_every=6)
    tfm("train", str(recipe), "--out", str(root / "moved"), "--device", "cpu")
    moving.rename(root / "moved.tsv")
    proc = tfm("train", "--resume", str(root / "moved"), "train.max_steps=8", "--device", "cpu", check=False)
    assert proc.returncode == 1 and f"\nError: data.train[2].path: corpus file {moving} does not exist" in proc.stderr
    assert f"hint: if it moved, give its new place: tfm train --resume {root / 'moved'} 'data.train[2].path=NEW_PATH'" in proc.stderr
    # two that moved: both named at once, each with its override
    proc = tfm("train", "--resume", str(root / "moved"), "train.max_steps=8", "--device", "cpu",
               f"data.train[1].path={root / 'gone.tsv'}", check=False)
    assert " (and data.train[2].path)\n" in proc.stderr
    assert (f"hint: if they moved, give their new places: tfm train --resume {root / 'moved'} 'data.train[1].path=NEW_PATH' "
            "'data.train[2].path=NEW_PATH'") in proc.stderr
    tfm("train", "--resume", str(root / "moved"), "train.max_steps=8", "--device", "cpu", f"data.train[2].path={root / 'moved.tsv'}")
    assert json.loads((root / "moved" / "summary.json").read_text())["train_corpus"]["corpora"][1]["weight"] == 0.5


def test_corpora_of_weight_one_resume_a_run_of_the_files_joined(corpora):
    root = corpora["root"]
    recipe = recipe_file(corpora, "joined", str(corpora["both"]))  # one corpus: the files joined
    tfm("train", str(recipe), "--out", str(root / "joined"), "--device", "cpu")
    tfm("train", str(recipe), "--out", str(root / "split"), "--device", "cpu", "train.max_steps=12")
    b = root / "b.tsv"
    write_tsv(b, list(zip(corpora["b.fr"].read_text().splitlines(), corpora["b.en"].read_text().splitlines(), strict=True)))
    proc = tfm("train", "--resume", str(root / "split"), "train.max_steps=24", "--device", "cpu",
               f"data.train={json.dumps([{'path': str(corpora['a'])}, {'path': str(b)}])}")
    assert "note:" not in proc.stdout + proc.stderr
    a = load_file(root / "joined" / "checkpoints" / "step-00000024.safetensors")
    resumed = load_file(root / "split" / "checkpoints" / "step-00000024.safetensors")
    assert all(a[k].equal(resumed[k]) for k in a)


def test_the_dry_run_counts_each_corpus(corpora):
    recipe = recipe_file(corpora, "dry", mixture(corpora, a=1, b=2.5))
    out = tfm("train", str(recipe), "--dry-run", "--out", str(corpora["root"] / "dry")).stdout
    assert "# sentence pairs: 100 in data.train\n" in out
    assert (f"# an epoch trains on data.train[1] ({corpora['a']}) 60 pairs x 1 = 60; data.train[2] ({corpora['b.fr']} "
            f"and {corpora['b.en']}) 40 pairs x 2.5 = 100, 20 of them drawn at random again each epoch") in out
    as_json = json.loads(tfm("train", str(recipe), "--dry-run", "--json", "--out", str(corpora["root"] / "dry")).stdout)
    assert as_json["sentence_pairs"] == {"data.train": 100, "data.train[1]": 60, "data.train[2]": 40}
    assert as_json["pairs_an_epoch"] == {"data.train[1]": 60, "data.train[2]": 100}
    assert as_json["recipe"]["data"]["train"][0] == {"path": str(corpora["a"]), "weight": 1}  # recorded as written
    assert not (corpora["root"] / "dry").exists()


def test_a_bad_corpus_of_a_mixture_is_one_line_naming_it(corpora):
    root = corpora["root"]
    cases = {
        "missing": ([{"path": str(corpora["a"])}, {"path": str(root / "nowhere.tsv"), "weight": 2}],
                    "data.train[2].path: corpus file"),
        "same file": ([{"path": str(corpora["a"])}, {"path": [str(corpora["b.fr"]), str(corpora["b.fr"])]}],
                      "data.train[2].path: ["),
    }
    for name, (train, start) in cases.items():
        recipe = recipe_file(corpora, name.replace(" ", "-"), train)
        for dry in ([], ["--dry-run"]):
            proc = tfm("train", str(recipe), "--out", str(root / "bad"), *dry, check=False)
            assert proc.returncode == 1, name
            error = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
            assert len(error) == 1 and error[0].startswith(f"Error: {start}"), proc.stderr
            assert "Traceback" not in proc.stderr
            assert not (root / "bad").exists()
    recipe = recipe_file(corpora, "typo")
    proc = tfm("train", str(recipe), "data.train=[{path: a.tsv, weigth: 2}]", "--dry-run", check=False)
    assert proc.returncode != 0 and proc.stderr.startswith(  # blamed on the override, not on the recipe file
        "Error: override 'data.train=[{path: a.tsv, weigth: 2}]': data.train[1].weigth is not a key of a corpus; "
        "did you mean data.train[1].weight?")
    assert "the override is on the command line" in proc.stderr
    # a corpus that keeps no pair is refused at the start, as one alone is; weights that take no pair, by the dry run
    long = write_tsv(root / "long.tsv", [(" ".join(["mot"] * 40), " ".join(["word"] * 40))] * 5)
    recipe = recipe_file(corpora, "long", [{"path": str(corpora["a"])}, {"path": str(long), "weight": 3}])
    proc = tfm("train", str(recipe), "--out", str(root / "bad"), check=False)
    assert proc.returncode == 1 and "Error: no usable sentence pairs in data.train[2] (" in proc.stderr
    assert "Traceback" not in proc.stderr and not (root / "bad" / "checkpoints").exists()
    recipe = recipe_file(corpora, "none", mixture(corpora, a=0.001, b=0.001))
    proc = tfm("train", str(recipe), "--dry-run", check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("Error: data.train's weights take no pair into an epoch")
    recipe = recipe_file(corpora, "little", mixture(corpora, a=1, b=0.001))
    proc = tfm("train", str(recipe), "--dry-run")
    assert f"warning: data.train[2] ({corpora['b.fr']} and {corpora['b.en']}): an epoch takes none of its 40 pairs" in proc.stderr


def test_a_corpus_of_the_list_with_a_few_lines_of_more_columns_is_warned_about_by_its_place(corpora):
    root = corpora["root"]
    rows = [f"{s}\t{t}" for s, t in pairs(300, 100)]
    rows[10] += "\tCC-BY someone"
    ragged = root / "ragged.tsv"
    ragged.write_text("\n".join(rows) + "\n", encoding="utf-8")
    recipe = recipe_file(corpora, "ragged", [{"path": str(corpora["a"])}, {"path": str(ragged), "weight": 2}],
                         max_steps=1, save_every=1)
    for args in (["--dry-run"], ["--out", str(root / "ragged"), "--device", "cpu"]):  # the dry run and the start
        said = tfm("train", str(recipe), *args).stderr
        assert [line for line in said.splitlines() if "more than two tab-separated columns" in line] == [
            line for line in said.splitlines() if line.startswith(f"warning: data.train[2] {ragged}: 1 of 100 lines")], said


def test_a_dev_set_that_is_one_of_the_corpora_is_warned_about(corpora):
    recipe = recipe_file(corpora, "devin")
    out = tfm("train", str(recipe), f"data.dev={corpora['a']}", "--dry-run", "--out", str(corpora["root"] / "devin"))
    assert f"data.dev is data.train[1] ({corpora['a']})" in out.stderr


def test_tokenize_trains_on_every_corpus_of_a_mixture(corpora):
    root = corpora["root"]
    recipe = recipe_file(corpora, "tok", [{"path": str(corpora["dev"])}, {"path": [str(corpora["b.fr"]), str(corpora["b.en"])]}])
    out = tfm("tokenize", str(recipe), "tokenizer.vocab_size=300", "--out", str(root / "tok.json"), "--json").stdout
    assert json.loads(out)["sentences"] == 20 + 40  # both corpora measured (and trained on: the same pairs)
    proc = tfm("tokenize", str(recipe), f"data.train[2].path={root / 'nowhere.tsv'}", "--out", str(root / "t.json"), check=False)
    assert proc.returncode == 1 and proc.stderr.startswith(f"Error: data.train[2].path: corpus file {root / 'nowhere.tsv'} does not")
    # its pieces are not those of the first corpus alone
    tfm("tokenize", "--corpus", str(corpora["dev"]), "--vocab-size", "300", "--out", str(root / "dev-only.json"))
    learned = json.loads((root / "tok.json").read_text())["model"]["merges"]
    alone = json.loads((root / "dev-only.json").read_text())["model"]["merges"]
    assert learned != alone
