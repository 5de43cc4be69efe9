"""BLEU for any target language: the tokenizer BLEU counts words with (`auto` by the references' script, or
chosen), and references normalised as the translations are. Checked against sacrebleu's own scores, through
`tfm_cli.scoring`, `Translator.score`, `tfm translate --score` and the trainer's dev set."""

from __future__ import annotations

import json
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
import sacrebleu
import test_bad_inputs
from clitools import tfm
from test_bad_inputs import error_line, translate

from tfm_cli import TfmError, Translator, scoring
from tfm_cli.scoring import BLEU_TOKENIZERS, bleu_metric, bleu_tokenize_for, score_translations
from tfm_cli.tokenizer import train_tokenizer

root, run = test_bad_inputs.root, test_bad_inputs.run  # its fixtures: the random tiny run, made once here too

CHINESE = ["我们明天去北京看朋友。", "这本书非常有意思。", "他每天早上六点起床。", "请把窗户关上，外面很冷。"]
CHINESE_HYPOTHESES = ["我们明天去北京看朋友。", "这本书很有意思。", "他每天六点起床。", "请关上窗户，外面冷。"]
JAPANESE = ["私は毎朝コーヒーを飲みます。", "この本はとても面白いです。", "駅はどこですか。"]
THAI = ["ฉันชอบกินข้าวผัด", "วันนี้อากาศดีมาก"]
KOREAN = ["저는 학생입니다.", "오늘 날씨가 아주 좋아요."]
SPACED = {
    "english": ["The cat sat on the mat.", "I will be there tomorrow."],
    "korean with a few words": ["The word 물 means water in Korean.", "Seoul is 서울 in Korean."],
    "arabic": ["ذهبت إلى المدرسة صباحا.", "الكتاب على الطاولة."],
    "russian": ["Я люблю читать книги.", "Где находится вокзал?"],
    "mostly english with a few ideographs": ["The word 水 means water in Chinese.", "Tokyo is 東京 in Japanese."],
}
MECAB = scoring._can_set_up("ja-mecab")  # MeCab and its dictionary (sacrebleu[ja]), not MeCab alone


def test_auto_picks_the_tokenizer_by_the_references_script() -> None:
    assert bleu_tokenize_for(CHINESE) == ("zh", "the references are Chinese")
    technical = ["我用Python和TensorFlow写代码。", "请打开Settings菜单，然后点击Network。", "这个API返回JSON格式的数据。"]
    assert bleu_tokenize_for(technical)[0] == "zh"  # an English word counts once, not once a letter
    # (sacrebleu[ja] and sacrebleu[ko] are separate: MeCab alone may set up one and not the other)
    assert bleu_tokenize_for(JAPANESE)[0] == ("ja-mecab" if scoring._can_set_up("ja-mecab") else "char")
    assert bleu_tokenize_for(KOREAN)[0] == ("ko-mecab" if scoring._can_set_up("ko-mecab") else "13a")
    assert bleu_tokenize_for(THAI)[0] == "char"
    for name, references in SPACED.items():
        assert bleu_tokenize_for(references)[0] == "13a", name
    assert bleu_tokenize_for([])[0] == bleu_tokenize_for(["", "123 !"])[0] == "13a"  # no letters: the default


@pytest.mark.parametrize("mecab", [False, True])
def test_japanese_and_korean_get_sacrebleus_own_tokenizer_where_mecab_is_there(monkeypatch, mecab: bool) -> None:
    """`auto` scored Japanese with `char` and Korean with `13a` even with MeCab installed, where sacrebleu itself
    (`-l en-ja`, `-l en-ko`) uses ja-mecab and ko-mecab: scores no one could compare. They are chosen where they can
    be set up; elsewhere the fallback says that its score is not sacrebleu's."""
    monkeypatch.setattr(scoring, "_can_set_up", lambda tokenize: mecab)
    japanese, korean = bleu_tokenize_for(JAPANESE), bleu_tokenize_for(KOREAN)
    if mecab:
        assert japanese == ("ja-mecab", "the references are Japanese")
        assert korean == ("ko-mecab", "the references are Korean")
    else:
        assert japanese[0] == "char" and "ja-mecab, needs MeCab: pip install 'sacrebleu[ja]'" in japanese[1]
        assert korean[0] == "13a" and "ko-mecab, needs MeCab: pip install 'sacrebleu[ko]'" in korean[1]
    assert bleu_tokenize_for(CHINESE)[0] == "zh" and bleu_tokenize_for(SPACED["english"])[1] == scoring.DEFAULT_WHY


def test_scores_are_sacrebleus_own_with_the_chosen_tokenizer() -> None:
    scores = score_translations(CHINESE_HYPOTHESES, CHINESE)
    zh = sacrebleu.corpus_bleu(CHINESE_HYPOTHESES, [CHINESE], tokenize="zh")
    assert scores["bleu_tokenize"] == "zh" and "tok:zh" in scores["bleu_signature"]
    assert scores["bleu"] == round(zh.score, 2) and scores["bleu"] > 20
    assert scores["chrf"] == round(sacrebleu.corpus_chrf(CHINESE_HYPOTHESES, [CHINESE]).score, 2)
    # what `auto` avoids: 13a sees each sentence as one word, so only the exact matches count
    forced = score_translations(CHINESE_HYPOTHESES, CHINESE, "13a")
    assert forced["bleu"] == round(sacrebleu.corpus_bleu(CHINESE_HYPOTHESES, [CHINESE]).score, 2) < scores["bleu"] / 2
    assert forced["bleu_tokenize"] == "13a" and "tok:13a" in forced["bleu_signature"]
    hypotheses = ["私は毎朝お茶を飲みます。", "この本は面白いです。", "駅はどこ。"]
    chosen = "ja-mecab" if scoring._can_set_up("ja-mecab") else "char"
    chars = sacrebleu.corpus_bleu(hypotheses, [JAPANESE], tokenize=chosen)
    assert score_translations(hypotheses, JAPANESE)["bleu"] == round(chars.score, 2) > 0


def test_a_tokenizer_that_cannot_be_set_up_is_one_error() -> None:
    with pytest.raises(TfmError, match="unknown BLEU tokenizer 'zhh'"):
        bleu_metric("zhh")
    if MECAB:
        assert bleu_metric("ja-mecab").tokenizer_signature.startswith("ja-mecab")  # (get_signature needs a score first)
    else:
        with pytest.raises(TfmError, match=r"'ja-mecab' BLEU tokenizer could not be set up: .*sacrebleu\[ja\]"):
            bleu_metric("ja-mecab")
    assert set(BLEU_TOKENIZERS) - {"auto"} <= set(sacrebleu.metrics.bleu._TOKENIZERS)


def test_translator_normalises_references_as_its_translations(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reference in NFD (macOS files) or with odd spaces never matched the model's NFC, one-space output."""
    translator = Translator.load(run, device="cpu")
    sources = ["Bonjour.", "Merci beaucoup.", "Où est la gare ?"]
    texts = [t.text for t in translator.translate(sources)]
    composed = [f"{t} café déjà" for t in texts]
    decomposed = [" " + unicodedata.normalize("NFD", r).replace(" ", "\u00a0 ") + "  " for r in composed]
    assert all(a != b for a, b in zip(composed, decomposed, strict=True))
    exact, odd = translator.score(sources, composed), translator.score(sources, decomposed)
    assert (exact["bleu"], exact["chrf"]) == (odd["bleu"], odd["chrf"])
    assert exact["chrf"] == round(sacrebleu.corpus_chrf(texts, [composed]).score, 2)
    # that normalising is no standard a published score knows: the scores against the references as written,
    # what sacrebleu gives on the file, come beside them wherever normalising changed one (here all three)
    assert "as_written" not in exact
    assert odd["as_written"] == {
        "bleu": round(sacrebleu.corpus_bleu(texts, [decomposed]).score, 2),
        "chrf": round(sacrebleu.corpus_chrf(texts, [decomposed]).score, 2), "references_changed": 3,
    }
    assert odd["as_written"]["chrf"] < odd["chrf"]
    tsv = run.parent / "decomposed.tsv"
    tsv.write_text("".join(f"{s}\t{r}\n" for s, r in zip(sources, decomposed, strict=True)), encoding="utf-8")
    proc = tfm("translate", "--model", str(run), "--device", "cpu", "--score", str(tsv))
    said = f"against the references as written, as sacrebleu scores the file: BLEU {odd['as_written']['bleu']}, chrF"
    assert "3 of the 3 references changed when normalised" in proc.stderr and said in proc.stderr, proc.stderr
    report = json.loads(tfm("translate", "--model", str(run), "--device", "cpu", "--score", str(tsv), "--json").stdout)
    assert report["as_written"] == odd["as_written"]
    assert translator.score(sources, texts)["chrf"] == 100.0

    with pytest.raises(TfmError, match="bleu_tokenize='zhh' is not one of: auto, 13a"):
        translator.score(sources, texts, bleu_tokenize="zhh")
    with pytest.raises(TfmError, match=r"reference 2 is not valid text: '\\udcff'"):
        translator.score(sources, ["a", "b\udcff", "c"])
    if not MECAB:  # refused before any sentence is translated
        monkeypatch.setattr(translator, "translate", lambda *a, **k: pytest.fail("translated before the check"))
        with pytest.raises(TfmError, match="ja-mecab"):
            translator.score(sources, texts, bleu_tokenize="ja-mecab")


def test_a_reference_file_with_a_byte_order_mark_scores_as_written_as_sacrebleu_scores_it(run: Path, tmp_path: Path) -> None:
    """The reader dropped the BOM of a reference file saved by Notepad, so `as_written` ("as sacrebleu scores the
    file") was not sacrebleu's figure on it, and a file whose only change was its BOM gave no such line at all."""
    sources = ["Bonjour.", "Merci beaucoup.", "Où est la gare ?"]
    translator = Translator.load(run, device="cpu")
    hypotheses = [t.text for t in translator.translate(sources)]
    references = [h[: len(h) // 2] + "x" for h in hypotheses]  # share their first characters with the translations
    src, ref, hyp = tmp_path / "src.fr", tmp_path / "ref.en", tmp_path / "hyp.en"
    src.write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    ref.write_bytes(b"\xef\xbb\xbf" + "".join(r + "\n" for r in references).encode())
    hyp.write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
    theirs = json.loads(subprocess.run(
        [sys.executable, "-m", "sacrebleu", str(ref), "-i", str(hyp), "-m", "bleu", "chrf", "-w", "2", "--format", "json",
         "--tokenize", "char"], capture_output=True, text=True, check=True).stdout)
    for given in (["--reference", str(ref)], ["--score", str(src), "--score", str(ref)]):
        proc = translate(run, *given, "--bleu-tokenize", "char", "--json", stdin=src.read_text(encoding="utf-8"))
        report = json.loads(proc.stdout)
        assert report["as_written"]["references_changed"] == 1, report
        assert [report["as_written"]["bleu"], report["as_written"]["chrf"]] == [theirs[0]["score"], theirs[1]["score"]]
        assert report["chrf"] == translator.score(sources, references, "char")["chrf"]  # normalised: the BOM gone


def test_translate_score_chooses_and_says_the_bleu_tokenizer(run: Path, tmp_path: Path) -> None:
    pairs = tmp_path / "fr-zh.tsv"
    pairs.write_text("".join(f"Phrase {i}.\t{zh}\n" for i, zh in enumerate(CHINESE)), encoding="utf-8")
    auto = json.loads(translate(run, "--score", str(pairs), "--json").stdout)
    assert auto["bleu_tokenize"] == "zh" and "tok:zh" in auto["bleu_signature"]
    chosen = translate(run, "--score", str(pairs), "--bleu-tokenize", "char")
    assert chosen.returncode == 0 and "tok:char" in chosen.stderr, chosen.stderr
    proc = translate(run, "--score", str(pairs), "--bleu-tokenize", "zhh")
    assert proc.returncode == 2 and "'zhh' is not one of: auto, 13a" in proc.stderr
    proc = translate(run, "Bonjour.", "--bleu-tokenize", "zh")
    assert proc.returncode == 2 and "is for scoring (--score or --reference)" in proc.stderr
    if not MECAB:
        error_line(translate(run, "--score", str(pairs), "--bleu-tokenize", "ja-mecab"), "'ja-mecab' BLEU tokenizer")


def test_translate_score_says_a_reference_cut_by_a_stray_tab(run: Path, tmp_path: Path) -> None:
    """A tab inside a reference of a --score TSV cut the reference at it, and the score was of the cut one, with
    no word (train and tokenize warn about the same file)."""
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("Bonjour.\tHello.\n" * 9 + "Il fait beau.\tThe weather\tis nice.\n", encoding="utf-8")
    proc = translate(run, "--score", str(pairs), "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["sentences"] == 10, proc.stderr
    assert f"warning: --score {pairs}: 1 of 10 lines has more than two tab-separated columns (line 10)" in proc.stderr
    pairs.write_text("Bonjour.\tHello.\n" * 10, encoding="utf-8")
    proc = translate(run, "--score", str(pairs), "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["sentences"] == 10, proc.stderr
    assert "tab-separated columns" not in proc.stderr


def test_the_hint_after_training_is_a_sentence_of_the_run_that_translate_takes(tmp_path: Path) -> None:
    from tfm_cli.cli.train import _example_source
    from tfm_cli.recipe import recipe_from_dict

    dev = tmp_path / "dev.tsv"
    dev.write_text("- Oui, monsieur.\t- Yes, sir.\nUne phrase bien trop longue pour un exemple de commande.\tx\nMerci.\tThanks.\n", encoding="utf-8")
    recipe = recipe_from_dict({"name": "x", "data": {"train": str(dev), "dev": str(dev)}})
    assert _example_source(recipe) == "Merci."  # not "- Oui, monsieur.", which tfm translate reads as an option


def test_the_dev_set_skips_pairs_empty_once_normalised(tmp_path: Path) -> None:
    """A side of only '▁' (sentencepiece's space) or whitespace is empty to the tokenizer: skipped, as data.train
    skips it, not scored as an empty reference; a dev set of nothing else is refused."""
    from tfm_cli.training.evaluation import load_dev

    tok = train_tokenizer(["Merci.", "Thanks."], vocab_size=300, min_frequency=1)
    dev = tmp_path / "dev.tsv"
    dev.write_text("\u2581\tHello.\nMerci.\tThanks.\nBonjour.\t\u2581 \u2581\n", encoding="utf-8")
    kept = load_dev(str(dev), tok, 64)
    assert (kept.sources, kept.references) == (["Merci."], ["Thanks."])
    dev.write_text("\u2581\tHello.\nBonjour.\t\u2581\n", encoding="utf-8")
    with pytest.raises(TfmError, match="has 2 lines but none with both a source and a target: every line has a side that is empty"):
        load_dev(str(dev), tok, 64)  # said by the reader, as for data.train, naming the file


def test_the_dev_set_chooses_once_and_normalises_its_references(root: Path, tmp_path: Path) -> None:
    from tfm_cli.training.evaluation import load_dev

    dev = tmp_path / "dev.tsv"
    dev.write_text("".join(f"Phrase {i}.\t{unicodedata.normalize('NFD', zh)} é\n" for i, zh in enumerate(CHINESE)), encoding="utf-8")
    tok = train_tokenizer(["Phrase 1.", *CHINESE, "é"], vocab_size=300, min_frequency=1)
    chosen = load_dev(str(dev), tok, 64)
    assert (chosen.bleu_tokenize, chosen.bleu_why) == ("zh", "the references are Chinese")
    assert chosen.references == [f"{zh} é" for zh in CHINESE]  # NFC, as translations are
    assert load_dev(str(dev), tok, 64, "char").bleu_tokenize == "char"
    if not MECAB:  # a start (and --dry-run) says so before training, not at the first evaluation
        proc = tfm("train", str(root / "recipe.yaml"), f"data.dev={dev}", "train.bleu_tokenize=ja-mecab", "--out", str(tmp_path / "r"),
                   "--dry-run", check=False)
        error_line(proc, "'ja-mecab' BLEU tokenizer could not be set up")
        assert not (tmp_path / "r").exists()


def test_training_gives_the_dev_scores_also_against_the_references_as_written(root: Path, tmp_path: Path) -> None:
    """The trainer scored its dev set against references normalised as translations are (’ as ', NFC) and said
    nothing: with a file full of ’ its BLEU was far above sacrebleu's on the same file (23.72 against 20.53 on
    400 French references, 141 with ’). Every evaluation now also gives the score as written, and says so."""
    pairs = [line.split("\t")[:2] for line in test_bad_inputs._head(3000).splitlines()[-400:]]
    pairs = [(s, t.replace("'", "\u2019")) for s, t in pairs if "'" in t][:30]
    assert len(pairs) == 30
    dev = tmp_path / "dev.tsv"
    dev.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    out = tmp_path / "run"
    proc = tfm("train", str(root / "recipe.yaml"), f"data.dev={dev}", "train.eval_every=5", "--out", str(out))
    assert "dev corpus: 30 of 30 references change when normalised as the translations are" in proc.stderr
    assert "; as written: BLEU " in proc.stderr  # on each evaluation's line
    final = json.loads((out / "summary.json").read_text(encoding="utf-8"))["dev"]
    # in the precision the run trained and evaluated in (fp32: `auto` is bf16 on a CPU with fast bf16)
    hypotheses = translate(out, "--precision", "fp32", stdin="".join(s + "\n" for s, _ in pairs)).stdout.splitlines()
    written = [t for _, t in pairs]
    bleu, chrf = sacrebleu.corpus_bleu(hypotheses, [written]), sacrebleu.corpus_chrf(hypotheses, [written])
    assert final["as_written"] == {"bleu": round(bleu.score, 2), "chrf": round(chrf.score, 2), "references_changed": 30}
    normalised = [t.replace("\u2019", "'") for t in written]
    assert final["bleu"] == round(sacrebleu.corpus_bleu(hypotheses, [normalised]).score, 2)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert all(r["as_written"]["references_changed"] == 30 for r in records if r["kind"] in ("eval", "final"))


def test_a_large_corpus_is_scored_a_chunk_at_a_time_to_sacrebleus_own_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    """sacrebleu's corpus_score keeps every reference's n-grams until the end (~11 KB a sentence pair: `tfm
    translate --score` on 100,000 lines peaked at 1.9 GB); the statistics are summed a chunk at a time instead,
    and the scores are sacrebleu's own for the whole corpus, to the last digit."""
    import random

    from tfm_cli import scoring

    rng = random.Random(0)
    words = "le la un de et à the a of and to is chat chien maison 東京 水 ,".split()
    sentence = lambda: " ".join(rng.choice(words) for _ in range(rng.randint(0, 15))) + rng.choice(["", ".", "!"])  # noqa: E731
    hypotheses, references = [sentence() for _ in range(503)], [sentence() for _ in range(503)]
    monkeypatch.setattr(scoring, "SCORE_CHUNK", 7)
    for tokenize in ("13a", "zh", "char", "intl"):
        got = score_translations(hypotheses, references, tokenize)
        bleu = sacrebleu.corpus_bleu(hypotheses, [references], tokenize=tokenize)
        assert got["bleu"] == round(bleu.score, 2) and got["chrf"] == round(sacrebleu.corpus_chrf(hypotheses, [references]).score, 2)
        metric = bleu_metric(tokenize)
        chunked = scoring._corpus_score(metric, hypotheses, [references], chunk=7)
        assert chunked.score == bleu.score and chunked.counts == bleu.counts and chunked.sys_len == bleu.sys_len
    # several references a sentence, and some with fewer (sacrebleu's None): the same scores and signatures
    seconds = [sentence() for _ in range(503)]
    thirds = [sentence() if i % 3 else None for i in range(503)]
    for per_sentence, streams, nrefs in (
        ([[a, b] for a, b in zip(references, seconds, strict=True)], [references, seconds], "nrefs:2"),
        ([[a, b] + ([c] if c is not None else []) for a, b, c in zip(references, seconds, thirds, strict=True)],
         [references, seconds, thirds], "nrefs:var"),
    ):
        got = score_translations(hypotheses, per_sentence, "13a")
        bleu = sacrebleu.metrics.BLEU(tokenize="13a")
        chrf = sacrebleu.metrics.CHRF()
        whole_bleu, whole_chrf = bleu.corpus_score(hypotheses, streams), chrf.corpus_score(hypotheses, streams)
        assert got["bleu"] == round(whole_bleu.score, 2) != round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2)
        assert got["chrf"] == round(whole_chrf.score, 2)
        assert got["bleu_signature"] == str(bleu.get_signature()) and nrefs in got["bleu_signature"]
        assert got["chrf_signature"] == str(chrf.get_signature()) and nrefs in got["chrf_signature"]


def test_several_references_score_as_sacrebleus_command_line(run: Path, tmp_path: Path) -> None:
    """`--reference r1 --reference r2` scored against r2 alone (Click kept the last; later refused): the
    multi-reference BLEU and chrF now, the very figures the `sacrebleu r1 r2 -i hyp` command prints; the same with
    `--score SRC R1 R2` and `Translator.score` with a list of references per source."""
    sources = ["Bonjour.", "Merci beaucoup.", "Où est la gare ?", "Il fait beau.", "Je suis étudiant.", "Au revoir."]
    translator = Translator.load(run, device="cpu")
    hypotheses = [t.text for t in translator.translate(sources)]
    # references that share parts with the (random model's) translations, differently per file, scored by
    # character (the random translations are single runs of letters)
    first = [h[: len(h) * 2 // 3] + "the cat" for h in hypotheses]
    second = ["a dog" + h[len(h) // 3 :] for h in hypotheses]
    src, r1, r2 = tmp_path / "src.fr", tmp_path / "r1.en", tmp_path / "r2.en"
    for path, lines in ((src, sources), (r1, first), (r2, second)):
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    hyp = tmp_path / "hyp.en"
    char = ("--bleu-tokenize", "char")
    proc = translate(run, "--reference", str(r1), "--reference", str(r2), *char, "--json", "--output", str(hyp), stdin="".join(s + "\n" for s in sources))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert hyp.read_text(encoding="utf-8").splitlines() == hypotheses
    cli = subprocess.run(
        [sys.executable, "-m", "sacrebleu", str(r1), str(r2), "-i", str(hyp), "-m", "bleu", "chrf", "-w", "2", "--format", "json", "--tokenize", "char"],
        capture_output=True, text=True, check=True,
    )
    theirs = json.loads(cli.stdout)
    assert [report["bleu"], report["chrf"]] == [theirs[0]["score"], theirs[1]["score"]]
    assert report["bleu_signature"] == theirs[0]["signature"] and "nrefs:2" in report["bleu_signature"]
    alone = json.loads(translate(run, "--reference", str(r2), *char, "--json", stdin=src.read_text(encoding="utf-8")).stdout)
    assert 0 < alone["bleu"] < report["bleu"] and "nrefs:1" in alone["bleu_signature"]
    assert report["references"] == [str(r1), str(r2)] and alone["references"] == str(r2)
    scored = json.loads(translate(run, "--score", str(src), "--score", str(r1), "--score", str(r2), *char, "--json").stdout)
    assert (scored["bleu"], scored["chrf"], scored["references"]) == (report["bleu"], report["chrf"], [str(r1), str(r2)])
    api = translator.score(sources, [[a, b] for a, b in zip(first, second, strict=True)], "char")
    assert (api["bleu"], api["chrf"], api["bleu_signature"]) == (report["bleu"], report["chrf"], report["bleu_signature"])
    varied = translator.score(sources, [[a, b] if i % 2 else a for i, (a, b) in enumerate(zip(first, second, strict=True))])
    assert "nrefs:var" in varied["bleu_signature"]

    # a file of the wrong length, stdin twice, and lists that are no references: one line each
    r2.write_text("".join(line + "\n" for line in second[:-1]), encoding="utf-8")
    error_line(translate(run, "--reference", str(r1), "--reference", str(r2), stdin=src.read_text(encoding="utf-8")),
               f"{r2} has 5 lines but the input has 6")
    error_line(translate(run, "--score", str(src), "--score", str(r1), "--score", str(r2)), f"{r2} has 5 lines but {src} has 6")
    proc = translate(run, "Bonjour.", "--reference", "-", "--reference", "-", stdin="Hello.\n")
    assert proc.returncode == 2 and "stdin can be read once" in proc.stderr, proc.stderr
    with pytest.raises(TfmError, match=r"references item 1 \(counted from 0\) is an empty list"):
        translator.score(sources[:2], [["Hello."], []])
    with pytest.raises(TypeError, match=r"references item 0 \(counted from 0\) holds a int"):
        translator.score(sources[:1], [["Hello.", 3]])
    with pytest.raises(TypeError, match=r"a string or a list of strings per source; references item 0 \(counted from 0\) is set"):
        translator.score(sources[:1], [{"Hello."}])
