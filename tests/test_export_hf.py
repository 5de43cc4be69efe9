"""`tfm export --format huggingface`: the MarianMT directory loads in transformers and computes our model's function.

On the shared trained model (conftest `trained`): the export's own checks pass and report figures; then, independently
of them, the directory loaded with `MarianMTModel` / `AutoTokenizer` gives tfm's logits and tfm's greedy translations
through `generate` with nothing but the saved generation config, and so does the model CTranslate2's converter makes
of it. On random models: the residual permutation is exact (d_model 24, tied and untied), and configs Marian cannot
express (pre-norm, learned positions) or a foreign tokenizer are refused with one line.
"""

from __future__ import annotations

import errno
import gzip
import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from clitools import tfm

from tfm_cli import TfmError, Translator
from tfm_cli.checkpoint import load_model, save_weights, weights_state
from tfm_cli.export import huggingface as hf_export
from tfm_cli.export import run_export
from tfm_cli.export.common import agreement
from tfm_cli.model import ModelConfig, Transformer
from tfm_cli.model.masks import causal_mask
from tfm_cli.model.transformer import sinusoidal_table
from tfm_cli.runs import FINAL
from tfm_cli.tokenizer import train_tokenizer

transformers = pytest.importorskip(
    "transformers", reason="the huggingface export needs transformers (pip install -e '.[huggingface]')"
)
AutoTokenizer, MarianMTModel = transformers.AutoTokenizer, transformers.MarianMTModel
RENAMED_PAD = hf_export.RENAMED_PAD

CORPUS = Path(__file__).resolve().parents[1] / "tfm_cli" / "corpora" / "tatoeba-fr-en" / "train.tsv.gz"
N_SENTENCES = 50  # dev sentences the independent translation comparisons use


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("export-hf") / "hf"
    result = run_export("huggingface", trained["dir"], out)
    return {"result": result, "dir": out}


@pytest.fixture(scope="module")
def reference(trained) -> dict:
    """tfm's own greedy translations of the first dev sentences, with the length limit at the position table's
    end (max_positions - 1 tokens, then </s>): exactly the limit the export's generation_config.json encodes."""
    translator = Translator.load(trained["dir"], device="cpu", precision="fp32")
    sources = trained["sources"][:N_SENTENCES]
    outputs = translator.translate(sources, greedy=True, max_len_offset=translator.model.config.max_positions)
    return {"sources": sources, "greedy": [t.text for t in outputs], "model": translator.model}


# --- the export on the trained model ---------------------------------------------------------------------------


def test_export_checks_pass_and_report_figures(exported, trained):
    result = exported["result"]
    assert result.ok, result.checks
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tfm-export.json"} <= set(
        result.files
    )
    def check(*words: str):
        found = [c for c in result.checks if all(w in c.name for w in words)]
        assert len(found) == 1, (words, result.checks)
        return found[0]

    exact, fp32 = check("logits", "fp64"), check("logits", "fp32")
    assert float(exact.value) <= 1e-9 and exact.limit  # the mapping is exact: only float64 rounding is left
    assert float(fp32.value.split()[0]) <= 1e-4 and fp32.limit
    n = len(trained["sources"])
    assert check("source token ids").value == f"{n}/{n} identical"
    assert check("greedy", "transformers").value == f"{n}/{n} identical"
    if importlib.util.find_spec("ctranslate2") is not None:
        assert check("greedy", "CTranslate2").value == f"{n}/{n} identical"
    else:
        assert any("ctranslate2 is not installed" in note for note in result.notes)
    assert any("ct2-transformers-converter --model DIR --output_dir DIR-ct2" in note for note in result.notes)
    info = json.loads((exported["dir"] / "tfm-export.json").read_text(encoding="utf-8"))
    assert info["format"] == "huggingface" and info["ok"] and len(info["checks"]) == len(result.checks)


def test_transformers_logits_match_tfm(exported, reference, trained):
    """Real sentences, padded in a batch, teacher-forced on their references: logits within 1e-4 (fp32)."""
    hf = MarianMTModel.from_pretrained(exported["dir"]).eval()
    tok = AutoTokenizer.from_pretrained(exported["dir"])
    model = reference["model"]
    cfg = model.config
    start = hf.config.decoder_start_token_id
    assert start == cfg.vocab_size == tok.pad_token_id  # the appended <pad>: zero embedding, decoder start
    batch = tok(trained["sources"][:8], return_tensors="pt", padding=True)
    refs = [tok(r, add_special_tokens=False).input_ids for r in trained["references"][:8]]
    t = min(len(r) for r in refs)
    body = torch.tensor([r[:t] for r in refs])  # (B, t) reference prefixes of one length
    src = batch.input_ids.masked_fill(batch.attention_mask == 0, cfg.pad_id)  # tfm pads with id 0
    with torch.no_grad():
        ours = model(
            src, torch.cat([torch.full((len(refs), 1), cfg.bos_id), body], 1),
            (src != cfg.pad_id)[:, None, None, :], causal_mask(t + 1),
        )
        theirs = hf(
            **batch, decoder_input_ids=torch.cat([torch.full((len(refs), 1), start), body], 1)
        ).logits
    assert theirs.shape[-1] == cfg.vocab_size + 1
    assert (ours - theirs[..., : cfg.vocab_size]).abs().max().item() <= 1e-4
    assert (theirs.softmax(dim=-1)[..., cfg.vocab_size] == 0).all()  # <pad> is never an output


def test_a_label_smoothed_fine_tuning_loss_of_the_export_is_finite_and_tfms_up_to_the_pad(exported, trained):
    """transformers' LabelSmoother (Seq2SeqTrainer(label_smoothing_factor=0.1)) over the V + 1 logits: finite
    (a -inf <pad> bias made it inf), and the loss tfm's own smoothing gives over V, plus eps's share of <pad>'s
    -log p, whose gradient is nothing."""
    hf = MarianMTModel.from_pretrained(exported["dir"]).eval()
    tok = AutoTokenizer.from_pretrained(exported["dir"])
    batch = tok(trained["sources"][:8], text_target=trained["references"][:8], return_tensors="pt", padding=True)
    labels = batch["labels"].masked_fill(batch["labels"] == tok.pad_token_id, -100)
    with torch.no_grad():
        out = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels)
    smoothed = transformers.trainer_pt_utils.LabelSmoother(epsilon=0.1)({"logits": out.logits}, labels)
    assert torch.isfinite(smoothed)
    v = hf.config.vocab_size - 1  # the export's <pad>
    log_p = out.logits.float().log_softmax(dim=-1)
    keep = labels != -100
    nll = -log_p.gather(-1, labels.clamp(min=0)[..., None])[..., 0][keep].mean()
    over_v = -log_p[..., :v][keep].sum(-1).mean() / (v + 1)
    over_pad = -log_p[..., v][keep].mean() / (v + 1)
    torch.testing.assert_close(smoothed, 0.9 * nll + 0.1 * (over_v + over_pad), rtol=1e-4, atol=1e-4)
    assert 0 < 0.1 * over_pad < 0.1 * (1000 + 50) / (v + 1)  # the share the finite bias adds, as the export says


def test_generate_greedy_matches_translator(exported, reference):
    """`generate` with the saved generation config (only num_beams=1 given) gives tfm's greedy translations."""
    hf = MarianMTModel.from_pretrained(exported["dir"]).eval()
    tok = AutoTokenizer.from_pretrained(exported["dir"])
    got = []
    for i in range(0, N_SENTENCES, 25):
        batch = tok(reference["sources"][i : i + 25], return_tensors="pt", padding=True)
        got += tok.batch_decode(hf.generate(**batch, num_beams=1), skip_special_tokens=True)
    assert got == reference["greedy"]
    assert sum(bool(g) for g in got) > N_SENTENCES // 2  # a real model: real sentences, not empty strings


def test_the_cards_translate_gives_tfm_translates_lines(exported, trained):
    """`tfm translate` splits a line into sentences and takes frames, capitals and numbers off before the model sees
    it; transformers translates what it is given, so the export's greedy output of real lines was not tfm's (29 of
    the quickstart model's 2,000 dev lines: a second sentence lost, one in capitals garbled), though its README
    said "gives tfm's translations". The export carries sentences.py and its README a translate() that gives the
    model each line as tfm does, each output cut at tfm's length limit: run as written, with the model and
    tokenizer loaded as the README loads them, it prints tfm's lines, odd ones included."""
    out = exported["dir"]
    assert (out / "sentences.py").read_text(encoding="utf-8") == (Path(hf_export.__file__).parents[1] / "sentences.py").read_text(encoding="utf-8")
    card = (out / "README.md").read_text(encoding="utf-8")
    code = card.split("## Lines as `tfm translate` gives them")[1].split("```python\n")[1].split("```")[0]
    space = {"tokenizer": AutoTokenizer.from_pretrained(out), "model": MarianMTModel.from_pretrained(out).eval()}
    exec(code.replace('"DIR"', repr(str(out))), space)
    paragraphs = [" ".join(trained["sources"][i : i + 3]) for i in range(0, 15, 3)]
    lines = [*trained["sources"][20:40], *paragraphs, "", "   ", "\u200b", "JE SUIS ÉTUDIANT.", "Je Parle À Marie.",
             '- "Je suis étudiant."', "(2020)", "😀", "« Je suis étudiant. »", "J'ai 3 chats et 12 chiens.",
             "Voir https://example.com/page/123 pour 5 chats.", "Je suis étudiant, " * 30]
    want = tfm("translate", "--model", str(trained["dir"]), "--greedy", "--precision", "fp32", stdin="".join(x + "\n" for x in lines)).stdout
    with torch.inference_mode():
        got = space["translate"](lines, num_beams=1)
    assert got == want.splitlines() and len(got) == len(lines)
    raw = space["tokenizer"].batch_decode(space["model"].generate(**space["tokenizer"](paragraphs, return_tensors="pt", padding=True),
                                                                  num_beams=1, max_new_tokens=60), skip_special_tokens=True)
    assert raw != got[20:25]  # given as they are, the paragraphs come out otherwise
    # run as a user runs it, it says nothing (transformers warned at each call that max_new_tokens overrode the saved
    # max_length)
    script = ("import sys\nfrom transformers import AutoTokenizer, MarianMTModel\n"
              f"tokenizer, model = AutoTokenizer.from_pretrained({str(out)!r}), MarianMTModel.from_pretrained({str(out)!r})\n"
              + code.replace('"DIR"', repr(str(out))) + "\nprint(translate(sys.argv[1:], num_beams=1))\n")
    proc = subprocess.run([sys.executable, "-c", script, *lines[:3]], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0 and proc.stdout.strip() == repr(got[:3]), proc.stderr
    assert "max_new_tokens" not in proc.stderr and "max_length" not in proc.stderr, proc.stderr


def test_an_over_long_sentence_truncated_as_the_card_says_gets_tfm_s_translation(exported, reference, trained):
    """A sentence longer than the encoder's positions: `tfm translate` cuts it (with a warning) and translates;
    the call the export printed and its README showed ended in transformers' IndexError. With the
    `truncation=True` they now give, `generate` translates it as tfm does a line whole (`generate` splits no
    sentences)."""
    hf = MarianMTModel.from_pretrained(exported["dir"]).eval()
    tok = AutoTokenizer.from_pretrained(exported["dir"])
    translator = Translator.load(trained["dir"], device="cpu", precision="fp32")
    long = " ".join(reference["sources"][:12])  # far more pieces than the 64 positions
    assert len(tok(long).input_ids) > translator.model.config.max_positions
    card = (exported["dir"] / "README.md").read_text(encoding="utf-8")
    assert 'tokenizer(["..."], return_tensors="pt", padding=True, truncation=True)' in card
    assert any("padding=True, truncation=True" in note for note in exported["result"].notes)
    with pytest.warns(UserWarning):  # tfm's InputTruncatedWarning
        expected = translator.translate([long], greedy=True, max_len_offset=translator.model.config.max_positions, split_sentences=False)[0].text
    batch = tok([long], return_tensors="pt", padding=True, truncation=True)
    assert tok.batch_decode(hf.generate(**batch, num_beams=1), skip_special_tokens=True) == [expected]


def test_generate_beam_with_alpha_0_matches_translator(exported, reference, trained):
    """Beam search: with no length penalty (length_penalty=0, tfm's alpha 0) and tfm's limit as max_new_tokens,
    `generate` gives tfm's beam translations wherever no beam reaches the limit (there transformers' forced </s>
    costs nothing and tfm's costs its log-probability, as the README says)."""
    hf = MarianMTModel.from_pretrained(exported["dir"]).eval()
    tok = AutoTokenizer.from_pretrained(exported["dir"])
    tfm_translator = Translator.load(trained["dir"], device="cpu", precision="fp32")
    offset, compared = 50, 0
    for source in reference["sources"][:20]:
        batch = tok([source], return_tensors="pt")
        limit = batch.input_ids.size(1) - 1 + offset  # tfm's: source tokens + max_len_offset, then </s>
        ours = tfm_translator.translate(source, beam=4, alpha=0.0, max_len_offset=offset, n_best=4)
        if any(len(h.tokens) >= limit for h in ours.nbest):
            continue  # a beam reached the limit: the forced </s> is scored differently
        out = hf.generate(**batch, num_beams=4, length_penalty=0.0, max_new_tokens=limit + 1)
        assert tok.batch_decode(out, skip_special_tokens=True)[0] == ours.text, source
        compared += 1
    assert compared >= 10


def test_ctranslate2_round_trip(exported, reference, tmp_path):
    """The documented command converts the directory; CTranslate2's greedy output equals tfm's."""
    ctranslate2 = pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed (pip install ctranslate2)")
    script = Path(sys.executable).parent / "ct2-transformers-converter"
    ct2_dir = tmp_path / "hf-ct2"
    if script.is_file():
        subprocess.run(
            [str(script), "--model", str(exported["dir"]), "--output_dir", str(ct2_dir)],
            check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
        )
    else:  # the same conversion through the Python API
        from ctranslate2.converters import TransformersConverter

        TransformersConverter(str(exported["dir"])).convert(str(ct2_dir))
    tok = AutoTokenizer.from_pretrained(exported["dir"])
    limit = reference["model"].config.max_positions - 1
    translator = ctranslate2.Translator(str(ct2_dir), device="cpu", intra_threads=1)
    tokens = [tok.convert_ids_to_tokens(ids) for ids in tok(reference["sources"]).input_ids]
    results = translator.translate_batch(
        tokens, beam_size=1, max_decoding_length=limit + 1, suppress_sequences=[[RENAMED_PAD], ["<s>"], ["<unk>"]],
        min_decoding_length=0,
    )
    got = [tok.decode(tok.convert_tokens_to_ids(r.hypotheses[0])[:limit], skip_special_tokens=True) for r in results]
    assert got == reference["greedy"]


# --- refusals ----------------------------------------------------------------------------------------------------


def _texts(limit: int) -> list[str]:
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in itertools.islice(f, limit)]
    return [s for row in rows for s in row[:2]]


@pytest.fixture(scope="module")
def small_tokenizer():
    return train_tokenizer(_texts(300), vocab_size=320)


def _small_run(root: Path, tokenizer, **config) -> Path:
    torch.manual_seed(0)
    sizes = {"d_model": 16, "d_ff": 32, "n_heads": 2, "n_enc_layers": 1, "n_dec_layers": 1, "max_positions": 24}
    cfg = ModelConfig(vocab_size=tokenizer.vocab_size, dropout=0.0, **{**sizes, **config})
    root.mkdir(parents=True)
    tokenizer.save(root / "tokenizer.json")
    save_weights(root / FINAL, weights_state(Transformer(cfg)), cfg, tokenizer.sha256, 1)
    return root


@pytest.mark.parametrize(
    ("config", "words"), [({"norm": "pre"}, "model.norm=pre"), ({"positions": "learned"}, "model.positions=learned")]
)
def test_unmappable_models_are_refused(tmp_path, small_tokenizer, config, words):
    run = _small_run(tmp_path / "run", small_tokenizer, **config)
    with pytest.raises(TfmError) as err:
        run_export("huggingface", run, tmp_path / "out")
    message = str(err.value)
    assert words in message and "\n" not in message
    assert "onnx" in err.value.hint
    assert not (tmp_path / "out").exists()  # nothing installed


def test_foreign_tokenizer_is_refused(tmp_path, trained, small_tokenizer):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copyfile(trained["dir"] / FINAL, run / FINAL)
    small_tokenizer.save(run / "tokenizer.json")
    with pytest.raises(TfmError, match="tokenizer"):
        run_export("huggingface", run, tmp_path / "out")


def test_a_model_that_ends_at_once_passes_the_ctranslate2_check(tmp_path, small_tokenizer):
    """A model whose first output is </s> (early in training, or for some sentences): tfm's translation is empty,
    and CTranslate2's translate_batch, whose min_decoding_length is 1 unless told otherwise, gave '.' instead, so
    a correct export failed its check ('please report it')."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed (pip install ctranslate2)")
    run = _small_run(tmp_path / "run", small_tokenizer)
    weights = run / FINAL
    model = load_model(run).model
    cfg = model.config
    with torch.no_grad():  # every decoder output is a large multiple of the </s> embedding: </s> always wins
        emb = model.src_embed.token.weight
        emb[cfg.eos_id] *= 1 + emb.norm(dim=1).max() / emb[cfg.eos_id].norm()
        model.decoder_layers[-1].sub_ffn.norm.weight.zero_()
        model.decoder_layers[-1].sub_ffn.norm.bias.copy_(10 * emb[cfg.eos_id])
    save_weights(weights, weights_state(model), cfg, small_tokenizer.sha256, 1)
    assert Translator.load(run, device="cpu", precision="fp32").translate("Je suis étudiant.", greedy=True) == ""
    result = run_export("huggingface", run, tmp_path / "hf", verify_lines=10)
    ct2 = [c for c in result.checks if "CTranslate2" in c.name]
    assert result.ok and len(ct2) == 1 and ct2[0].value.startswith("10/10 identical"), result.checks


def test_a_run_whose_recipe_decodes_greedily_exports(tmp_path, small_tokenizer):
    """decode.beam: 1 in the run's recipe: transformers refused to save a GenerationConfig of num_beams=1 with
    length_penalty and early_stopping set, and `tfm export --format huggingface` ended in a ValueError traceback."""
    from clitools import tfm, tiny_recipe

    run = _small_run(tmp_path / "run", small_tokenizer)
    (run / "recipe.yaml").write_text(tiny_recipe("greedy", decode={"beam": 1}), encoding="utf-8")
    proc = tfm("export", str(run), "--format", "huggingface", "--out", str(tmp_path / "hf"), "--verify-lines", "3", check=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert json.loads((tmp_path / "hf" / "generation_config.json").read_text())["num_beams"] == 1


def test_the_documented_ctranslate2_call_gives_the_models_decoding_limit(tmp_path, small_tokenizer):
    """The call the export documented left CTranslate2's max_decoding_length at its default, 256: for a model of
    fewer positions a translation that runs on failed with "No position encodings are defined for positions >=
    24". The card and the notes give this model's limit, and the call with it translates."""
    import re

    ctranslate2 = pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed (pip install ctranslate2)")
    from ctranslate2.converters import TransformersConverter

    run = _small_run(tmp_path / "run", small_tokenizer)  # random weights, 24 positions: outputs run to the limit
    result = run_export("huggingface", run, tmp_path / "hf", verify_lines=3)
    card = (tmp_path / "hf" / "README.md").read_text(encoding="utf-8")
    limits = {int(n) for text in (card, *result.notes) for n in re.findall(r"max_decoding_length=`?(?:min\(L \+ \d+, )?(\d+)", text)}
    assert limits == {23}
    # and the recipe's beam and alpha, where CTranslate2's defaults (beam 2, length penalty 1) differ
    assert all("beam_size=4" in text and "length_penalty=0.6" in text for text in (card, " ".join(result.notes))), card
    TransformersConverter(str(tmp_path / "hf")).convert(str(tmp_path / "ct2"))
    tok = AutoTokenizer.from_pretrained(tmp_path / "hf")
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", intra_threads=1)
    tokens = [tok.convert_ids_to_tokens(tok("Je suis étudiant.").input_ids)]
    ban = [[RENAMED_PAD], ["<s>"], ["<unk>"]]
    with pytest.raises(RuntimeError, match="position"):  # what the documented call did, at CTranslate2's default
        translator.translate_batch(tokens, beam_size=1, suppress_sequences=ban, min_decoding_length=0)
    out = translator.translate_batch(tokens, beam_size=1, suppress_sequences=ban, min_decoding_length=0, max_decoding_length=23)
    assert 0 < len(out[0].hypotheses[0]) <= 23


def test_the_documented_ctranslate2_limit_is_tfms(tmp_path, small_tokenizer):
    """The notes and card gave max_decoding_length = L + 51 (L: the source's tokens with </s>), where tfm outputs
    at most L - 1 + 50 tokens, then </s>: CTranslate2 counts the tokens it outputs and adds no </s> at its limit,
    so a translation that never ends came out two tokens longer than tfm's (the quickstart model: 92 of the 2,000
    dev sentences in greedy decoding, one at a time). With the documented limit, per sentence, CTranslate2's
    greedy output is tfm's, on a random model whose outputs run to the limit."""
    import re

    ctranslate2 = pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed (pip install ctranslate2)")
    from ctranslate2.converters import TransformersConverter

    run = _small_run(tmp_path / "run", small_tokenizer, max_positions=96)  # room for source + 50: no cap
    result = run_export("huggingface", run, tmp_path / "hf", verify_lines=3)
    card = (tmp_path / "hf" / "README.md").read_text(encoding="utf-8")
    terms = {m for text in (card, *result.notes) for m in re.findall(r"(?:L|len\(tokens\))`?\)?`? ([+-] \d+)", text)}
    assert len(terms) == 1, terms  # one formula, in the notes and the card
    offset = int(terms.pop().replace(" ", ""))
    TransformersConverter(str(tmp_path / "hf")).convert(str(tmp_path / "ct2"))
    tok = AutoTokenizer.from_pretrained(tmp_path / "hf")
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", intra_threads=1)
    ours = Translator.load(run, device="cpu", precision="fp32")
    sources = [s for s in _texts(40)[::2] if s.strip()][:8]
    want = ours.translate(sources, greedy=True)
    assert sum(t.stopped == "max_len" for t in want) >= 4  # the limit is what is compared
    ban = [[RENAMED_PAD], ["<s>"], ["<unk>"]]
    for source, expected in zip(sources, want, strict=True):
        tokens = tok.convert_ids_to_tokens(tok(source).input_ids)
        out = translator.translate_batch(
            [tokens], beam_size=1, suppress_sequences=ban, min_decoding_length=0,
            max_decoding_length=min(len(tokens) + offset, 95),
        )[0].hypotheses[0]
        got = tok.decode(tok.convert_tokens_to_ids(out), skip_special_tokens=True)
        # as the exported tokenizer.json decodes: HF's ByteFallback makes a run of bytes holding a broken character
        # all U+FFFD, where tfm's own text keeps the whole characters of the run (this random model emits such runs)
        ids = [ours.tokenizer.piece_to_id(p) for p in expected.tokens]
        assert (len(out), got) == (len(expected.tokens), ours.tokenizer.normalize(ours.tokenizer.decode_as_saved(ids))), source


def test_a_model_too_short_for_every_dev_sentence_is_checked_on_made_up_ones(tmp_path, small_tokenizer):
    """max_positions 8 and a dev set whose every sentence is longer: the translation checks ran on no sentence
    and passed ('0/0 identical ... ok'). They now run on made-up sentences that fit, and say so."""
    run = _small_run(tmp_path / "run", small_tokenizer, max_positions=8)
    dev = tmp_path / "dev.tsv"
    long = [s for s in _texts(300)[::2] if len(small_tokenizer.encode(s)) > 7][:10]
    dev.write_text("".join(f"{s}\tx\n" for s in long), encoding="utf-8")
    (run / "recipe.yaml").write_text(f"name: short\ndata:\n  train: {dev}\n  dev: {dev}\n", encoding="utf-8")
    result = run_export("huggingface", run, tmp_path / "hf", verify_lines=10)
    translations = [c for c in result.checks if c.name.startswith("greedy translations")]
    assert result.ok and translations and all("made-up sentences" in c.name for c in translations), result.checks
    assert all(not c.value.startswith("0/") for c in result.checks if "identical" in c.value), result.checks
    assert any("10 empty or over-long dev sentences left out" in note and "made-up" in note for note in result.notes)


@pytest.mark.parametrize("fmt", ["huggingface", "onnx", "release"])
def test_translation_checks_name_the_sentences_they_ran_on(tmp_path, small_tokenizer, fmt):
    """A run whose dev set is gone (moved, another machine) is checked on its training corpus, else on made-up
    sentences; the onnx and huggingface checks still said "dev sentences" (or no origin at all)."""
    if fmt == "onnx":
        pytest.importorskip("onnxruntime")
    run = _small_run(tmp_path / "run", small_tokenizer)
    train = tmp_path / "train.tsv"
    train.write_text("".join(f"{s}\tx\n" for s in _texts(40)[::2][:12]), encoding="utf-8")
    (run / "recipe.yaml").write_text(f"name: moved\ndata:\n  train: {train}\n  dev: {tmp_path / 'gone.tsv'}\n", encoding="utf-8")
    names = [c.name for c in run_export(fmt, run, tmp_path / "training", verify_lines=5).checks if "translations" in c.name]
    assert names and all("5 training sentences" in n for n in names), names
    (run / "recipe.yaml").unlink()  # no corpus at all
    names = [c.name for c in run_export(fmt, run, tmp_path / "made-up", verify_lines=5).checks if "translations" in c.name]
    assert names and all("5 made-up sentences" in n for n in names), names


def test_an_agreement_over_nothing_fails():
    assert not agreement("translations (0 sentences)", [], []).ok
    assert agreement("translations (1 sentence)", ["a"], ["a"]).ok


# --- the mapping on random models ----------------------------------------------------------------------------


def test_permutation_gives_marians_position_table():
    hf = hf_export.build_marian(Transformer(ModelConfig(vocab_size=40, d_model=24, d_ff=48, n_heads=3, max_positions=16)))
    marian_own = hf.model.encoder.embed_positions.create_weight()  # the table transformers computes itself
    ours = sinusoidal_table(16, 24)[:, hf_export.residual_permutation(24)]
    assert torch.allclose(ours, marian_own, atol=1e-6)
    assert torch.equal(hf.model.encoder.embed_positions.weight, ours)


@pytest.mark.parametrize("tie", [True, False])
def test_residual_permutation_is_exact(tie):
    """A random model with d_model 24 (not a power of two): Marian's logits are ours, padded sources included."""
    torch.manual_seed(1)
    cfg = ModelConfig(
        vocab_size=40, d_model=24, d_ff=40, n_heads=3, n_enc_layers=2, n_dec_layers=2, max_positions=16,
        dropout=0.0, tie_embeddings=tie,
    )
    model = Transformer(cfg).eval()
    with torch.no_grad():  # random LayerNorm and bias values, so that a wrong permutation cannot hide
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.5)
    hf = hf_export.build_marian(model)
    src = torch.randint(3, 40, (3, 7))
    src[0, 6], src[1, 4], src[2, 2] = 2, 2, 2  # </s> then padding
    src[1, 5:], src[2, 3:] = 0, 0
    tgt = torch.randint(3, 40, (3, 5))
    tgt[:, 0] = cfg.bos_id
    with torch.no_grad():
        ours = model(src, tgt, (src != 0)[:, None, None, :], causal_mask(5))
        hf_tgt = tgt.clone()
        hf_tgt[:, 0] = cfg.vocab_size
        theirs = hf(input_ids=src, attention_mask=(src != 0).long(), decoder_input_ids=hf_tgt).logits
    assert (ours - theirs[..., : cfg.vocab_size]).abs().max().item() < 1e-5


def test_the_exports_card_says_how_to_save_it_again_and_whose_data_it_learned_from(tmp_path, small_tokenizer):
    """transformers drops MarianMT's position tables when it saves (save_pretrained, push_to_hub) and rebuilds
    the standard ones when it loads: the export's decoder row 0 (tfm's <s> folded in) was lost without a word, so
    a re-saved export translated differently. Its README.md now gives the way to save it that keeps them, and the
    bundled corpus's attribution, which the release's card gave and the export meant for the Hub did not."""
    import re

    run = _small_run(tmp_path / "run", small_tokenizer)
    (run / "recipe.yaml").write_text(
        "name: card\ndata:\n  train: bundled:tatoeba-fr-en/train.tsv.gz\n  dev: bundled:tatoeba-fr-en/dev.tsv.gz\n",
        encoding="utf-8",
    )
    out = tmp_path / "hf"
    run_export("huggingface", run, out, verify_lines=3)
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "Tatoeba" in card and "attribution (required when you redistribute or publish)" in card and "CC-BY" in card

    saving = card.split("## Saving it again", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", saving, flags=re.S).group(1).replace('"DIR2"', repr(str(tmp_path / "again")))
    model, tokenizer = MarianMTModel.from_pretrained(out).eval(), AutoTokenizer.from_pretrained(out)
    exec(snippet, {"model": model, "tokenizer": tokenizer})
    again = MarianMTModel.from_pretrained(tmp_path / "again").eval()
    batch = AutoTokenizer.from_pretrained(tmp_path / "again")(["Je suis étudiant.", "Où est la gare ?"], return_tensors="pt", padding=True)
    start = torch.full((2, 1), model.config.decoder_start_token_id)
    with torch.no_grad():
        want, got = model(**batch, decoder_input_ids=start).logits, again(**batch, decoder_input_ids=start).logits
    assert torch.equal(want, got)


def test_exports_forbid_unk_as_tfm_does(tmp_path, small_tokenizer):
    """tfm's search now never outputs <unk>; the export told transformers' `generate` (suppress_tokens) and the
    CTranslate2 call of its notes and card (suppress_sequences) only to forbid <tfm_pad> and <s>, so a model that
    prefers <unk> translated to "" with tfm and to <unk>s (dropped by skip_special_tokens, or kept as "<unk>") with
    the export. Both are told now, and translate as tfm does."""
    tok = small_tokenizer
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=tok.vocab_size, dropout=0.0, d_model=16, d_ff=32, n_heads=2, n_enc_layers=1,
                      n_dec_layers=1, max_positions=24, tie_embeddings=False)
    model = Transformer(cfg).eval()
    with torch.no_grad():  # the decoder's last LayerNorm outputs a constant b: <unk> first, then a piece, then </s>
        b = torch.randn(cfg.d_model)
        norm = model.decoder_layers[-1].sub_ffn.norm
        norm.weight.zero_()
        norm.bias.copy_(b)
        model.generator.weight[tok.unk_id] = 3 * b
        model.generator.weight[tok.piece_to_id("a")] = 2.9 * b
        model.generator.weight[tok.eos_id] = 2.8 * b
    run = tmp_path / "run"
    run.mkdir()
    tok.save(run / "tokenizer.json")
    save_weights(run / FINAL, weights_state(model), cfg, tok.sha256, 1)
    sentence, limit = "Je suis étudiant.", 5
    want = Translator.load(run, device="cpu", precision="fp32").translate(sentence, greedy=True, max_len_offset=limit)
    assert "<unk>" not in want.tokens and want.text == "a" * (len(tok.encode(sentence)) + limit)
    result = run_export("huggingface", run, tmp_path / "hf", verify_lines=3)
    assert result.ok, result.checks
    generation = json.loads((tmp_path / "hf" / "generation_config.json").read_text(encoding="utf-8"))
    assert tok.unk_id in generation["suppress_tokens"]
    hf_tok = AutoTokenizer.from_pretrained(tmp_path / "hf")
    hf = MarianMTModel.from_pretrained(tmp_path / "hf").eval()
    batch = hf_tok([sentence], return_tensors="pt")
    out = hf.generate(**batch, num_beams=1, max_new_tokens=len(want.tokens) + 1)
    assert hf_tok.decode(out[0], skip_special_tokens=False).count("<unk>") == 0
    assert hf_tok.decode(out[0], skip_special_tokens=True) == want.text
    ban = [[RENAMED_PAD], ["<s>"], ["<unk>"]]
    card = (tmp_path / "hf" / "README.md").read_text(encoding="utf-8")
    assert json.dumps(ban) in card and any(str(ban) in note for note in result.notes)
    ctranslate2 = pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed (pip install ctranslate2)")
    from ctranslate2.converters import TransformersConverter

    TransformersConverter(str(tmp_path / "hf")).convert(str(tmp_path / "ct2"))
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", intra_threads=1)
    tokens = [hf_tok.convert_ids_to_tokens(hf_tok(sentence).input_ids)]
    got = translator.translate_batch(tokens, beam_size=1, suppress_sequences=ban, min_decoding_length=0,
                                     max_decoding_length=len(want.tokens) + 1)[0].hypotheses[0]
    assert "<unk>" not in got and hf_tok.convert_tokens_to_string(got[: len(want.tokens)]) == want.text


def test_a_full_temporary_folder_is_not_blamed_on_out(tmp_path, small_tokenizer, monkeypatch):
    """The CTranslate2 check converts in TMPDIR: a full TMPDIR was reported as "--out could not be written: No
    space left on device", sending the user to free space where there was room. It names the temporary folder."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed (pip install ctranslate2)")
    run = _small_run(tmp_path / "run", small_tokenizer)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    def full_disk(hf_dir: Path, out: Path) -> Path:
        out.mkdir()
        (out / "model.bin").write_bytes(b"\0" * 10)  # a conversion cut short, as by a full disk
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(out / "model.bin"))

    monkeypatch.setattr(hf_export, "convert_to_ctranslate2", full_disk)
    with pytest.raises(TfmError) as err:
        run_export("huggingface", run, tmp_path / "hf", verify_lines=5)
    assert str(err.value) == (
        f"the CTranslate2 check could not convert the export in the temporary folder {scratch}: "
        "No space left on device; nothing was exported"
    )
    assert "TMPDIR" in err.value.hint
    assert not (tmp_path / "hf").exists() and list(scratch.iterdir()) == []  # nothing half-written left anywhere
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "scratch"]


def test_generate_with_the_saved_config_stops_when_the_beams_have_ended(exported, trained):
    """The generation config said early_stopping="never", whose bound transformers takes at max_length, here the
    position table's end: every `generate` call ran its decoder to max_positions steps, however short the
    translations (the quickstart model: 1,024 steps, 9 s for 8 short sentences instead of 0.55 s)."""
    hf = MarianMTModel.from_pretrained(exported["dir"]).eval()
    tok = AutoTokenizer.from_pretrained(exported["dir"])
    steps = []
    handle = hf.model.decoder.register_forward_hook(lambda *_: steps.append(1))
    try:
        batch = tok(trained["sources"][:4], return_tensors="pt", padding=True)
        with torch.inference_mode():
            out = hf.generate(**batch)  # nothing but the saved config: beam 4, the recipe's alpha
    finally:
        handle.remove()
    assert out.size(1) < hf.config.max_position_embeddings // 2
    assert len(steps) <= out.size(1) + 2, (len(steps), out.size(1))
