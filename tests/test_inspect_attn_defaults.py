"""inspect-attn's defaults that depend on the model's shape, and what it says about the translation it inspects,
on random-weight tiny models (fast): which decoder layer --align reads, the <s> sink of decoder self-attention in
the summary, and a translation cut at the maximum output length."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import pytest
import torch
from clitools import tfm

from tfm_cli import DecodeSettings, Translator
from tfm_cli.attention import alignment, attention_report, default_alignment_layer, merge_words
from tfm_cli.checkpoint import save_weights, weights_state
from tfm_cli.model import ModelConfig, Transformer
from tfm_cli.runs import FINAL
from tfm_cli.tokenizer import train_tokenizer

CORPUS = Path(__file__).resolve().parents[1] / "tfm_cli" / "corpora" / "tatoeba-fr-en" / "train.tsv.gz"
SENTENCE = "Je suis étudiant."


@pytest.fixture(scope="module")
def tok():
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in itertools.islice(f, 400)]
    return train_tokenizer([s for row in rows for s in row[:2]], vocab_size=320)


def _model(tok, dec_layers: int, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    config = ModelConfig(
        vocab_size=tok.vocab_size, d_model=32, d_ff=64, n_heads=2, n_enc_layers=1, n_dec_layers=dec_layers,
        max_positions=64, dropout=0.0, tie_embeddings=False, pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id,
    )
    return Transformer(config).eval()


def _run_dir(root: Path, model: Transformer, tok) -> Path:
    root.mkdir(parents=True)
    tok.save(root / "tokenizer.json")
    save_weights(root / FINAL, weights_state(model), model.config, tok.sha256, 7)
    return root


@pytest.mark.parametrize(("dec_layers", "expected"), [(1, 0), (2, 1), (3, 2), (5, 4), (6, 4), (8, 6)])
def test_align_reads_the_last_layer_of_a_shallow_decoder(tok, dec_layers: int, expected: int) -> None:
    """Garg et al.'s last-but-one layer is of a 6-layer decoder; in the 3-layer quickstart model the last layer
    aligns 87% of the words right and the last but one 54%, so a shallow decoder is read at its last layer."""
    translator = Translator(_model(tok, dec_layers), tok, DecodeSettings(max_len_offset=6), precision="fp32")
    report = attention_report(translator, SENTENCE, "I am a student.")
    assert default_alignment_layer(report) == expected
    assert alignment(report) == alignment(report, expected)


def test_cli_align_names_the_layer_it_reads(tok, tmp_path: Path) -> None:
    run = _run_dir(tmp_path / "run", _model(tok, 3), tok)
    result = tfm("inspect-attn", "--model", str(run), "--device", "cpu", SENTENCE, "--target", "I am a student.", "--align")
    assert "from cross-attention layer 3, mean of heads" in result.stderr
    report = attention_report(Translator.load(run, device="cpu", precision="fp32"), SENTENCE, "I am a student.")
    words = merge_words(report)
    last = words.matrix("cross", 2, None)
    src = range(len(words.src_tokens) - 1)
    expected = [(max(src, key=lambda i: float(last[j, i])), j) for j in range(len(words.tgt_tokens) - 1)]
    assert result.stdout.splitlines()[0] == " ".join(f"{i}-{j}" for i, j in expected)
    data = json.loads(tfm("inspect-attn", "--model", str(run), "--device", "cpu", SENTENCE, "--target", "I am a student.", "--json").stdout)
    assert data["alignment"] == result.stdout.splitlines()[0]


def test_summary_shows_the_decoder_sink_on_start_of_sentence(tok, tmp_path: Path) -> None:
    """Decoder self-attention's keys are <s> and the target: it has no </s>, so its "</s>" share was always 0% and
    a head resting on <s> (81% on the quickstart model's head 1.3) went unseen; and its first query, which sees
    only <s>, counted as a sharp, diagonal row of every head."""
    model = _model(tok, 2, seed=3)
    with torch.no_grad():  # head 1 of decoder layer 1 made a sink: its one query direction meets only <s>'s key
        attn = model.decoder_layers[0].self_attn
        model.tgt_embed.token.weight[tok.bos_id] = torch.eye(model.config.d_model)[0]
        attn.w_q.weight[: attn.d_k].zero_(), attn.w_q.bias[: attn.d_k].zero_(), attn.w_k.weight[: attn.d_k].zero_()
        attn.w_k.bias[: attn.d_k].zero_()
        attn.w_q.bias[0], attn.w_k.weight[0, 0] = 4.0, 4.0
    run = _run_dir(tmp_path / "run", model, tok)
    target = "I am a student here."
    report = attention_report(Translator.load(run, device="cpu", precision="fp32"), SENTENCE, target)
    from tfm_cli.attention import head_summary

    rows = [r for r in head_summary(report) if r["kind"] == "decoder"]
    w = report.weights["decoder"][:, :, 1:]  # the first query's only key is <s>: left out
    for r in rows:
        m = w[r["layer"] - 1, r["head"] - 1]
        assert r["bos_share"] == pytest.approx(float(m[:, 0].mean()), abs=1e-6)
        assert r["max_weight"] == pytest.approx(float(m.max(-1).values.mean()), abs=1e-6)
        assert r["eos_share"] == 0.0
    assert all(r["bos_share"] == 0.0 for r in head_summary(report) if r["kind"] != "decoder")
    assert rows[0]["bos_share"] > 0.99 and all(r["bos_share"] < 0.5 for r in rows[1:])
    printed = tfm("inspect-attn", "--model", str(run), "--device", "cpu", SENTENCE, "--target", target, "--summary").stdout
    table = [line.split("\t") for line in printed.splitlines() if line.startswith("decoder\t")]
    header = next(line.split("\t") for line in printed.splitlines() if line.startswith("kind\t"))
    column = header.index("<s>")
    assert [cells[column] for cells in table] == [f"{r['bos_share']:.0%}" for r in rows]
    assert [("rests on <s>" in cells[-1]) for cells in table] == [r["bos_share"] > 0.5 for r in rows]
    data = json.loads(tfm("inspect-attn", "--model", str(run), "--device", "cpu", SENTENCE, "--target", target, "--json").stdout)
    assert [r["bos_share"] for r in data["summary"] if r["kind"] == "decoder"] == [r["bos_share"] for r in rows]


def test_a_translation_cut_at_the_maximum_length_is_said(tok, tmp_path: Path) -> None:
    """A translation that runs to the maximum output length ends with a forced </s>: the last row was labelled
    "</s>" as if the model had predicted it, with no word of the cut (a 60-token sentence on the quickstart model,
    most sentences on a barely trained one)."""
    model = _model(tok, 1, seed=1)
    with torch.no_grad():  # the model never chooses </s>: every translation runs to the maximum length
        model.generator.weight[tok.eos_id] = -10.0 * model.generator.weight[tok.eos_id].abs().sign()
    run = _run_dir(tmp_path / "run", model, tok)
    translator = Translator.load(run, device="cpu", precision="fp32")
    assert translator.translate(SENTENCE).stopped == "max_len"
    base = ("inspect-attn", "--model", str(run), "--device", "cpu", SENTENCE)
    cut = tfm(*base)
    n = len(attention_report(translator, SENTENCE).tgt_tokens) - 1
    assert f"warning: the translation reached the maximum output length ({n} tokens) and was cut there" in cut.stderr
    assert "Traceback" not in cut.stderr
    assert json.loads(tfm(*base, "--json").stdout)["stopped"] == "max_len"
    forced = tfm(*base, "--target", "I am a student.", "--json")
    assert "maximum output length" not in forced.stderr and json.loads(forced.stdout)["stopped"] is None


def test_the_summary_of_an_empty_translation_measures_no_decoder_row(tok, tmp_path: Path) -> None:
    """A translation that is empty has one decoder query, <s>, which sees only <s>: the summary showed it as
    every head's measure (entropy -0.00, "sharp, rests on <s>, diagonal"); it has no row to measure."""
    from tfm_cli.attention import head_summary

    model = _model(tok, 2, seed=2)
    with torch.no_grad():  # every decoder output is the same vector u, and only </s>'s output row meets it
        u = torch.ones(model.config.d_model)
        last = model.decoder_layers[-1].sub_ffn.norm
        last.weight.zero_(), last.bias.copy_(u)
        model.generator.weight.zero_()
        model.generator.weight[tok.eos_id] = u
    run = _run_dir(tmp_path / "run", model, tok)
    translator = Translator.load(run, device="cpu", precision="fp32")
    assert translator.translate(SENTENCE).text == ""
    rows = head_summary(attention_report(translator, SENTENCE))
    assert [r["entropy"] for r in rows if r["kind"] == "decoder"] == [None] * 4
    assert all(r["entropy"] is not None and r["max_weight"] > 0 for r in rows if r["kind"] != "decoder")
    base = ("inspect-attn", "--model", str(run), "--device", "cpu", SENTENCE, "--summary")
    printed = tfm(*base)
    table = [line.split("\t") for line in printed.stdout.splitlines() if line.startswith("decoder\t")]
    assert len(table) == 4 and all(cells[3:9] == ["-"] * 6 and "translation is empty" in cells[-1] for cells in table)
    assert "decoder: no row to measure" in printed.stderr and "cross: sharpest head" in printed.stderr
    data = json.loads(tfm(*base, "--json").stdout)
    assert [r["bos_share"] for r in data["summary"] if r["kind"] == "decoder"] == [None] * 4


def test_words_summary_keeps_the_first_target_word(tok, tmp_path: Path) -> None:
    """`--words --summary` left the whole first target word out of decoder self-attention's statistics: the row
    left out is the first query's, which sees only <s>, but over words the first row is the first word's, and its
    later pieces ("Tomatoes" as "▁Tom" "ato" "es") see more than <s>. Only that first piece is left out now."""
    from tfm_cli.attention import head_summary, word_groups

    run = _run_dir(tmp_path / "run", _model(tok, 2, seed=3), tok)
    target = "Tomatoes are red."
    report = attention_report(Translator.load(run, device="cpu", precision="fp32"), SENTENCE, target)
    queries, keys = word_groups(report.tgt_tokens), word_groups(report.tgt_inputs)
    assert len(queries[0]) > 1, report.tgt_tokens  # else this test shows nothing
    w = report.weights["decoder"]
    w = torch.stack([w[..., g].sum(dim=-1) for g in keys], dim=-1)
    rows = [queries[0][1:], *queries[1:]]  # every piece but the first one, grouped into words
    expected = torch.stack([w[..., g, :].mean(dim=-2) for g in rows], dim=-2)  # (L, H, words, keys)
    words = [r for r in head_summary(merge_words(report)) if r["kind"] == "decoder"]
    assert len(words) == 4
    for r in words:
        m = expected[r["layer"] - 1, r["head"] - 1]
        assert r["bos_share"] == pytest.approx(float(m[:, 0].mean()), abs=1e-6)
        assert r["max_weight"] == pytest.approx(float(m.max(-1).values.mean()), abs=1e-6)
    base = ("inspect-attn", "--model", str(run), "--device", "cpu", SENTENCE, "--target", target, "--words")
    data = json.loads(tfm(*base, "--summary", "--json").stdout)
    printed = [r for r in data["summary"] if r["kind"] == "decoder"]
    assert [r["max_weight"] for r in printed] == pytest.approx([r["max_weight"] for r in words], abs=1e-6)
    assert "decoder rows leave out the first word's first piece, which sees only <s>" in tfm(*base, "--summary").stdout


def test_json_keeps_the_kind_layer_and_head_given(tok, tmp_path: Path) -> None:
    """--json printed every weight of every kind, layer and head whatever --kind, --layer and --head said (a
    970-token sentence on the quickstart model: 250 MB), with no way to ask for less. The ones given are kept, the
    others are null, so attention[kind][layer][head] is the same head; none given is every weight, as before."""
    run = _run_dir(tmp_path / "run", _model(tok, 2, seed=3), tok)
    base = ("inspect-attn", "--model", str(run), "--device", "cpu", SENTENCE, "--target", "I am a student.", "--json")
    everything = tfm(*base).stdout
    full = json.loads(everything)
    assert full["selection"] == {"kind": None, "layer": None, "head": None}
    assert all(h is not None for kind in full["attention"].values() for layer in kind for h in layer)
    assert json.loads(tfm(*base, "--head", "mean").stdout)["attention"] == full["attention"]  # the mean needs them all
    one = tfm(*base, "--kind", "cross", "--layer", "2", "--head", "1").stdout
    data = json.loads(one)
    assert data["selection"] == {"kind": "cross", "layer": 1, "head": 0}
    assert data["attention"]["encoder"] is None and data["attention"]["decoder"] is None
    assert data["attention"]["cross"] == [None, [full["attention"]["cross"][1][0], None]]
    assert data["summary"] == full["summary"] and data["tgt_tokens"] == full["tgt_tokens"]
    assert len(one) < len(everything) / 3
    kind = json.loads(tfm(*base, "--kind", "decoder").stdout)["attention"]
    assert kind == {"encoder": None, "decoder": full["attention"]["decoder"], "cross": None}
    layer = json.loads(tfm(*base, "--layer", "1").stdout)["attention"]
    assert layer == {k: [full["attention"][k][0], *([None] * (len(full["attention"][k]) - 1))] for k in full["attention"]}
    proc = tfm(*base, "--layer", "2", check=False)  # the encoder has one layer: not every kind has a layer 2
    assert proc.returncode == 1 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("Error: --layer 2 is out of range for --json: it keeps that layer of every kind, "
                                  "and the encoder has one layer (1)"), proc.stderr
    assert "hint: use --layer 1, or choose the kind with --kind" in proc.stderr and "1 to 1" not in proc.stderr
