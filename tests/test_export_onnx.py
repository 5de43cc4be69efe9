"""`tfm export --format onnx` and the onnxruntime engine of the Translator.

The export of the session's trained model must check itself (graph outputs against PyTorch, translations
identical), and translating with it, from Python or the CLI, must give what the PyTorch model gives: the same
search runs on both engines. A random pre-norm, learned-positions, untied model covers the other model options.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
from clitools import tfm

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from tfm_cli.checkpoint import save_weights, weights_state  # noqa: E402
from tfm_cli.decoding import Sampling, TorchEngine, beam_search, greedy_search, sample_search  # noqa: E402
from tfm_cli.errors import TfmError  # noqa: E402
from tfm_cli.export import run_export  # noqa: E402
from tfm_cli.export.onnx import OnnxEngine  # noqa: E402
from tfm_cli.model import ModelConfig, Transformer, padding_mask  # noqa: E402
from tfm_cli.runs import FINAL  # noqa: E402
from tfm_cli.translator import Translator  # noqa: E402

FILES = ["encoder.onnx", "decoder.onnx", "config.json", "tokenizer.json", "recipe.yaml", "onnx.json", "translate.py", "sentences.py", "README.md",
         "tfm-export.json"]


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    """The trained model exported through the CLI, and the result run_export reported (as JSON)."""
    out = tmp_path_factory.mktemp("onnx") / "export"
    proc = tfm("export", str(trained["dir"]), "--format", "onnx", "--out", str(out), "--json")
    return out, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def engines(trained, exported):
    """fp32 Translators over the same model: PyTorch (the run) and onnxruntime (the export, picked by auto)."""
    return Translator.load(trained["dir"], device="cpu", precision="fp32"), Translator.load(exported[0], device="cpu")


def _figure(check: dict) -> float:
    return float(check["value"])


def test_export_writes_the_graphs_and_passes_its_checks(exported, trained) -> None:
    out, result = exported
    assert result["ok"] and result["format"] == "onnx" and result["files"] == FILES
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    checks = {c["name"].split(",")[0].split(" (")[0]: c for c in result["checks"]}
    assert _figure(checks["encoder cross-attention K/V vs PyTorch"]) <= 1e-4
    assert _figure(checks["decoder step logits vs PyTorch"]) <= 1e-4
    assert _figure(checks["decoder step present K/V vs PyTorch"]) <= 1e-4
    assert checks["translations"]["value"] == "200/200 identical"
    assert _figure(checks["translation scores"]) <= 1e-3
    assert "past of 0, 1, 6, 17 positions" in json.dumps(result["checks"])  # the first step's empty past too
    manifest = json.loads((out / "onnx.json").read_text())
    sha = Translator.load(trained["dir"], device="cpu").tokenizer.sha256
    assert manifest["format"] == "tfm-onnx" and manifest["tokenizer_sha256"] == sha and manifest["step"] > 0
    assert manifest["decoder"]["inputs"][:5] == ["last", "position", "src_mask", "cross_k.0", "cross_v.0"]
    assert json.loads((out / "config.json").read_text())["d_model"] == 128
    graph = onnx.load(str(out / "decoder.onnx"))
    assert {p.key: p.value for p in graph.metadata_props}["tokenizer_sha256"] == sha
    assert not [p for p in out.iterdir() if p.suffix == ".data"]  # weights inside the graphs
    dims = [d.dim_param or d.dim_value for d in graph.graph.input[-1].type.tensor_type.shape.dim]
    assert dims == ["batch", 4, "past_len", 32]  # (B, H, t, Dh) with B and t dynamic


def test_auto_picks_onnxruntime_and_translates_like_pytorch(engines, trained) -> None:
    torch_t, onnx_t = engines
    assert (torch_t.engine_name, onnx_t.engine_name, onnx_t.precision) == ("torch", "onnxruntime", "fp32")
    assert onnx_t.settings == torch_t.settings  # the run's decode: section came along in recipe.yaml
    sources = trained["sources"]
    for settings in ({"n_best": 2}, {"greedy": True}):
        want, got = torch_t.translate(sources, **settings), onnx_t.translate(sources, **settings)
        assert [g.text for g in got] == [w.text for w in want]
        for g, w in zip(got, want, strict=True):
            assert [h.tokens for h in g.nbest] == [h.tokens for h in w.nbest]
            # fp32 sums of log-probabilities from two engines' kernels: a greedy -13.1318 against -13.1320 (8
            # tokens, the same ones) was over an absolute 1e-4; relative to the score, as rounding grows with it
            assert all(abs(a.score - b.score) <= 1e-4 * max(1.0, abs(b.score)) for a, b in zip(g.nbest, w.nbest, strict=True))
    assert len({r.text for r in got}) > 100  # real, varied translations


def test_the_searches_run_on_the_onnx_engine_unchanged(trained, exported) -> None:
    model = Translator.load(trained["dir"], device="cpu", precision="fp32").model
    engine = OnnxEngine.open(exported[0])
    src = torch.tensor([[40, 41, 42, 43, 2], [50, 51, 2, 0, 0], [60, 2, 0, 0, 0]])
    src_mask = padding_mask(src, 0)
    searches = (greedy_search, {}), (beam_search, {"beam_size": 3, "n_best": 3}), (sample_search, {"sampling": Sampling(seed=5), "n": 4})
    for search, options in searches:
        want = search(TorchEngine(model), src, src_mask, max_len_offset=8, **options)
        got = search(engine, src, src_mask, max_len_offset=8, **options)
        assert [[h.tokens for h in hyps] for hyps in got] == [[h.tokens for h in hyps] for hyps in want]


def test_cli_onnxruntime_equals_torch(exported, trained) -> None:
    lines = "".join(s + "\n" for s in trained["sources"])
    want = tfm("translate", "--model", str(trained["dir"]), "--precision", "fp32", stdin=lines).stdout
    got = tfm("translate", "--model", str(exported[0]), "--engine", "onnxruntime", stdin=lines).stdout
    assert got == want and len(got.splitlines()) == 200
    greedy = tfm("translate", "--model", str(exported[0]), "--greedy", "Je suis étudiant.").stdout
    assert greedy == tfm("translate", "--model", str(trained["dir"]), "--precision", "fp32", "--greedy", "Je suis étudiant.").stdout


def test_the_exports_own_translate_py_needs_no_tfm_and_translates_as_tfm(exported, trained, tmp_path: Path) -> None:
    """The export was usable only through tfm (`Translator.load`): its graphs' protocol (the `</s>` a source ends
    with, `<s>` at position 0, the empty cache, the ids never output, the length limit) was nowhere written. Now the
    folder has a README.md saying it and a translate.py of onnxruntime, numpy and tokenizers alone, which, run from
    another directory with torch and tfm unimportable, prints `tfm translate`'s translations, line for line, with
    the run's beam search (it searched greedily only, where `tfm translate --model EXPORT` gave the run's beam
    search), another beam and length penalty, or greedily: blank lines, a line longer than the model takes and characters spelled in byte tokens included, lines of
    several sentences translated a sentence at a time as tfm does (sentences.py, copied beside it), or whole with
    --no-split-sentences."""
    import subprocess
    import sys

    out = exported[0]
    paragraphs = [" ".join(trained["sources"][i : i + 3]) for i in range(60, 75, 3)]
    lines = [*trained["sources"][:60], *paragraphs, "", "   ", "Je suis étudiant, " * 40, "Je suis étudiant. " * 40,
             "Où est 東京 ? 🙂", "\u200b", "JE SUIS ÉTUDIANT.", "JE PARLE À MARIE.", '- "Je suis étudiant."', "(2020)", "😀",
             # markup, addresses, guillemets and single quotes come off as tfm takes them off
             "<ul><li>Je suis étudiant.</li><li>Il pleut</li></ul>", "**Je suis étudiant.**", "@marie Je suis là. :)",
             "Je suis étudiant. https://example.com", "« Je suis étudiant. »", "'J'ai faim.'", "https://example.com",
             "(rires)", "Contact : tom@example.com",
             # numbers as the placeholder, and those a translation leaves out said as tfm says them
             "J'ai 3 chats et 12 chiens.", "Il est né en 1990. Elle a 42 ans.", "Le train part à 17h45 du quai 3."]
    text = "".join(line + "\n" for line in lines)
    # torch and tfm_cli made unimportable: the script must not need them
    blocked = ("import runpy, sys; sys.modules['torch'] = sys.modules['tfm_cli'] = None; sys.argv = sys.argv[1:]; "
               "runpy.run_path(sys.argv[0], run_name='__main__')")
    outputs = []
    # (the same options for both: the run's beam, the others as tfm's)
    # (a beam of 1 is beam search, which may go on past an end that greedy search takes: it was greedy search here)
    for options in ([], ["--no-split-sentences"], ["--greedy", "--verbatim"], ["--beam", "2", "--alpha", "1.5"], ["--beam", "1", "--alpha", "2"]):
        want = tfm("translate", "--model", str(out), *options, stdin=text, check=False)
        assert want.returncode == 0, want.stderr
        got = subprocess.run([sys.executable, "-c", blocked, str(out / "translate.py"), *options], input=text.encode(),
                             capture_output=True, cwd=tmp_path, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert got.returncode == 0, got.stderr.decode()
        assert got.stdout.decode().splitlines() == want.stdout.splitlines() and len(want.stdout.splitlines()) == len(lines)
        # a line cut to the model's length is said as tfm says it (it was cut without a word)
        cuts = [line for line in want.stderr.splitlines() if "so only its first" in line]
        assert cuts and [line for line in got.stderr.decode().splitlines() if "so only its first" in line] == cuts, got.stderr
        outputs.append(want.stdout.splitlines())
        records = [json.loads(x) for x in tfm("translate", "--model", str(out), "--json", *options, stdin=text).stdout.splitlines()]
        said = re.findall(r"input line (\d+): the translation leaves out [^(]*\(([^)]*)\)", got.stderr.decode())
        assert said == [(str(i), ", ".join(r["numbers_left_out"])) for i, r in enumerate(records, start=1) if r.get("numbers_left_out")]
    assert outputs[0][60:65] != outputs[1][60:65]  # the paragraphs: split, then whole
    assert outputs[0] != outputs[2] != outputs[3] and outputs[2] != outputs[4]  # the searches differ
    readme = (out / "README.md").read_text(encoding="utf-8")
    config = json.loads((out / "config.json").read_text())
    assert "python translate.py < source.txt" in readme and f"(B, {config['n_heads']}, 0, {config['d_model'] // config['n_heads']})" in readme
    assert json.loads((out / "onnx.json").read_text())["decode"]["max_len_offset"] == _max_len_offset(trained)


def test_the_exports_translate_py_answers_a_line_at_once_and_refuses_bad_input_in_a_line(exported, trained, tmp_path: Path) -> None:
    """translate.py batches what has come whenever reading on would wait: a program that writes a line and waits for
    its translation gets it before it writes the next (no deadlock), as from `tfm translate`. A line that is not
    UTF-8 text is one line of error naming it, after the translations of the lines before it (it was a traceback);
    so is a line of megabytes, another run's tokenizer.json (it translated into nonsense), a beam of 0 or a length
    penalty out of tfm's range; a reader that goes away ends it quietly (it was a BrokenPipeError traceback)."""
    import select
    import subprocess
    import sys

    out, script = exported[0], str(exported[0] / "translate.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first, second = trained["sources"][0], trained["sources"][1]
    want = tfm("translate", "--model", str(out), stdin=f"{first}\n{second}\n").stdout.splitlines()
    proc = subprocess.Popen([sys.executable, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=tmp_path, env=env)
    try:
        proc.stdin.write(f"{first}\n".encode())
        proc.stdin.flush()
        assert select.select([proc.stdout], [], [], 120)[0], "no translation of the first line while stdin stayed open"
        assert proc.stdout.readline().decode().rstrip("\n") == want[0]
        proc.stdin.write(f"{second}\n".encode())
        proc.stdin.close()
        assert proc.stdout.read().decode().splitlines() == want[1:]
        assert proc.wait(timeout=120) == 0
    finally:
        proc.kill()

    bad = subprocess.run([sys.executable, script], input=f"{first}\n".encode() + b"caf\xe9\n" + f"{second}\n".encode(),
                         capture_output=True, cwd=tmp_path, env=env, timeout=300)
    assert bad.returncode == 1 and bad.stdout.decode().splitlines() == want[:1]
    assert bad.stderr.decode().strip() == "error: input line 2: invalid UTF-8 at byte 4; re-encode the input as UTF-8 (e.g. iconv -f cp1252 -t utf-8)"
    # a "line" of megabytes is refused before it is held whole (/dev/zero would take all memory), after the ones before it
    huge = subprocess.run([sys.executable, script], input=f"{first}\n".encode() + b"a" * (1 << 21), capture_output=True,
                          cwd=tmp_path, env=env, timeout=300)
    assert huge.returncode == 1 and huge.stdout.decode().splitlines() == want[:1]
    assert huge.stderr.decode().startswith("error: input line 2 runs over 1 MiB without a line end")
    # ... also where its line end came in the read that took it over the limit (it was translated)
    over = subprocess.run([sys.executable, script], input=f"{first}\n".encode() + b"ab " * 349_530 + f"\n{second}\n".encode(),
                          capture_output=True, cwd=tmp_path, env=env, timeout=300)
    assert over.returncode == 1 and over.stdout.decode().splitlines() == want[:1]
    assert over.stderr.decode().startswith("error: input line 2 runs over 1 MiB without a line end"), over.stderr.decode()
    # a carriage return inside a line is refused as tfm refuses it (a CRLF line end is fine)
    stray = subprocess.run([sys.executable, script], input=f"{first}\r\nBonjour.\rMerci.\n{second}\n".encode(),
                           capture_output=True, cwd=tmp_path, env=env, timeout=300)
    assert stray.returncode == 1 and stray.stdout.decode().splitlines() == want[:1]
    assert stray.stderr.decode().startswith("error: input line 2: a stray carriage return (\\r) inside the line")
    # a reader that goes away (`| head -1`): quiet, status 141 as the shell reports it, no traceback
    proc = subprocess.Popen([sys.executable, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=tmp_path, env=env)
    proc.stdin.write(f"{first}\n".encode())
    proc.stdin.flush()
    assert proc.stdout.readline().decode().rstrip("\n") == want[0]
    proc.stdout.close()  # gone: the next translation meets a broken pipe
    proc.stdin.write(f"{second}\n".encode())
    proc.stdin.close()
    assert proc.wait(timeout=120) == 141 and proc.stderr.read() == b""
    # another run's tokenizer.json put in the folder is refused by the hash the export recorded (it translated
    # into nonsense without a word)
    other = tmp_path / "other"
    shutil.copytree(out, other)
    vocabulary = json.loads((other / "tokenizer.json").read_text(encoding="utf-8"))
    vocabulary["model"]["vocab"]["zzz"] = len(vocabulary["model"]["vocab"]) + 1000
    (other / "tokenizer.json").write_text(json.dumps(vocabulary), encoding="utf-8")
    foreign = subprocess.run([sys.executable, str(other / "translate.py")], input=b"Bonjour.\n", capture_output=True, cwd=tmp_path, env=env, timeout=300)
    assert foreign.returncode == 1 and not foreign.stdout
    assert foreign.stderr.decode().startswith(f"error: {other / 'tokenizer.json'} does not match the exported model")
    for options, message in ((["--beam", "0"], "--beam 0 must be at least 1"), (["--alpha", "11"], "--alpha 11 must be a number between 0 and 10"),
                             (["--greedy", "--beam", "3"], "not allowed with argument"), (["--beams", "3"], "unrecognized arguments: --beams 3"),
                             (["--greedy", "--alpha", "1"], "--alpha has no effect with --greedy")):
        refused = subprocess.run([sys.executable, script, *options], input=b"", capture_output=True, cwd=tmp_path, env=env, timeout=300)
        assert refused.returncode == 2 and message in refused.stderr.decode() and not refused.stdout, refused.stderr.decode()


def test_running_translate_py_leaves_the_export_replaceable(exported, trained, tmp_path: Path) -> None:
    """translate.py loads sentences.py by its path, and a Python that writes bytecode put
    `__pycache__/sentences.cpython-311.pyc` into the export: `tfm export --force` into that folder then refused
    ("holds '__pycache__' besides the earlier export"). translate.py writes no bytecode now, and a `__pycache__`
    of the export's own modules is the export's (replaced with it); one holding anything else is still refused."""
    import subprocess
    import sys

    out = tmp_path / "export"
    shutil.copytree(exported[0], out)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"OMP_NUM_THREADS": "1"}
    got = subprocess.run([sys.executable, str(out / "translate.py")], input=b"Bonjour.\n", capture_output=True, cwd=tmp_path, env=env, timeout=300)
    assert got.returncode == 0 and got.stdout.strip() and not (out / "__pycache__").exists(), got.stderr.decode()
    cache = out / "__pycache__"  # as `python -c "import sentences"` in the folder leaves it
    subprocess.run([sys.executable, "-c", "import sentences, translate"], cwd=out, env=env, check=True, timeout=300)
    assert sorted(p.name.split(".")[0] for p in cache.iterdir()) == ["sentences", "translate"]
    for mine in ("notes.txt", "translate.notes.pyc", "sentences.pyc"):  # not Python's names for its bytecode: the user's
        (cache / mine).write_text("mine\n")
        refused = tfm("export", str(trained["dir"]), "--format", "onnx", "--out", str(out), "--force", check=False)
        assert refused.returncode == 1 and "holds '__pycache__' besides the earlier export" in refused.stderr
        (cache / mine).unlink()
    tfm("export", str(trained["dir"]), "--format", "onnx", "--out", str(out), "--force")
    assert not cache.exists() and (out / "translate.py").is_file()


def test_the_exports_translate_py_writes_text_as_tfm_does(exported) -> None:
    """A small model may spell a character in byte tokens, a newline or a tab too, or cut one short: the tokenizer's
    own decoder, which translate.py used, put the newline in the text (two lines out for one in) and made a whole
    run of bytes holding a cut character U+FFFD. It writes tfm's text now (`Tokenizer.detokenize`)."""
    import runpy

    out = exported[0]
    script = runpy.run_path(str(out / "translate.py"))  # not as __main__: its names, no stdin read
    theirs = script["OnnxTranslator"](out)
    tok = Translator.load(out, device="cpu").tokenizer
    byte = {b: tok.piece_to_id(f"<0x{b:02X}>") for b in range(256)}
    words = tok.encode("Bonjour toi, c'est l’été.")
    cases = [
        words,
        words[:2] + [byte[0x0A]] + words[2:],  # a newline spelled in bytes
        words[:1] + [byte[0x09], byte[0x09]] + words[1:],  # tabs
        words[:2] + [byte[0xE5], byte[0xA5]] + [byte[b] for b in "好".encode()] + words[2:],  # a cut character, then one whole
        [byte[b] for b in "  東京  ".encode()],
        [],
    ]
    for ids in cases:
        assert theirs.detokenize(ids) == tok.detokenize(ids), ids


def _max_len_offset(trained) -> int:
    from tfm_cli.translator import DecodeSettings

    return DecodeSettings.from_run(trained["dir"]).max_len_offset


def test_wrong_engine_for_the_model_is_one_line(exported, trained) -> None:
    """(The hints said "use precision fp32 ... (engine torch)" in the API's words at the command line, and offered
    the torch engine for an export, which has no PyTorch weights.)"""
    for args, message, hint in (
        (["--model", str(exported[0]), "--engine", "torch"], "is an ONNX export: it holds no PyTorch weights",
         "translate it with --engine onnxruntime or auto"),
        (["--model", str(trained["dir"]), "--engine", "onnxruntime"], "holds no ONNX graphs", "tfm export RUN --format onnx"),
        (["--model", str(exported[0]), "--precision", "bf16"], "runs fp32 graphs", "use --precision fp32"),
        (["--model", str(exported[0]), "--engine", "tensorrt"], "is not one of", "--engine"),
    ):
        proc = tfm("translate", *args, "Je suis étudiant.", check=False)
        assert proc.returncode in (1, 2) and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert hint in proc.stderr and "(engine torch)" not in proc.stderr, proc.stderr
        if proc.returncode == 1:
            assert len(proc.stderr.strip().splitlines()) == 2  # the error and its hint
    with pytest.raises(TfmError, match="holds no ONNX graphs") as caught:
        Translator.load(trained["dir"], engine="onnxruntime")
    assert "`tfm export RUN --format onnx`" in caught.value.hint
    with pytest.raises(TfmError, match="no PyTorch model"):
        Translator.load(exported[0]).model  # noqa: B018  (inspect-attn and bench need the PyTorch weights)


def test_a_tokenizer_that_is_not_its_own_is_refused(exported, trained, tmp_path: Path) -> None:
    from tfm_cli.tokenizer import train_tokenizer

    copy = tmp_path / "export"
    shutil.copytree(exported[0], copy)
    train_tokenizer(trained["sources"] * 3, vocab_size=1000).save(copy / "tokenizer.json")
    with pytest.raises(TfmError, match="does not match the exported model") as caught:
        Translator.load(copy)
    assert "\n" not in str(caught.value)
    proc = tfm("translate", "--model", str(copy), "Je suis étudiant.", check=False)
    assert proc.returncode == 1 and "does not match" in proc.stderr and "Traceback" not in proc.stderr
    (copy / "decoder.onnx").unlink()
    with pytest.raises(TfmError, match="holds no ONNX graphs"):
        Translator.load(copy, engine="onnxruntime")


def test_pre_norm_learned_positions_untied_model(trained, tmp_path: Path) -> None:
    """The other model options, on random weights (sharpened so that searches are decisive)."""
    tok = Translator.load(trained["dir"], device="cpu").tokenizer
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=tok.vocab_size, d_model=48, d_ff=96, n_heads=3, n_enc_layers=2, n_dec_layers=3,
        max_positions=40, dropout=0.0, norm="pre", positions="learned", tie_embeddings=False,
    )
    model = Transformer(config).eval()
    with torch.no_grad():
        model.generator.weight.mul_(4.0)
        model.tgt_embed.learned.weight.normal_()  # positions that matter, so a wrong offset would show
    run = tmp_path / "run"
    run.mkdir()
    tok.save(run / "tokenizer.json")
    save_weights(run / FINAL, weights_state(model), config, tok.sha256, 5)
    result = run_export("onnx", run, tmp_path / "onnx", verify_lines=60, opset=18)
    assert result.ok, result.checks
    figures = [float(c.value) for c in result.checks[:3]]
    assert all(f <= 1e-4 for f in figures) and result.checks[3].value == "60/60 identical"
    assert re.search(r"opset 18", result.notes[0])
    want = Translator(model, tok).translate(trained["sources"][:30], n_best=2)
    got = Translator.load(tmp_path / "onnx").translate(trained["sources"][:30], n_best=2)
    assert [[h.tokens for h in g.nbest] for g in got] == [[h.tokens for h in w.nbest] for w in want]
    assert max(abs(a.score - b.score) for g, w in zip(got, want, strict=True) for a, b in zip(g.nbest, w.nbest, strict=True)) <= 1e-4


def test_a_damaged_or_mismatched_graph_is_refused_at_load(trained, exported, tmp_path: Path) -> None:
    """A truncated graph, a config.json edited to another shape, a graph of another export put beside the others:
    each was a traceback (InvalidProtobuf at load, or a failure in the middle of the search); now one line."""
    other = tmp_path / "other"  # another model's export, for its encoder.onnx
    tok = Translator.load(trained["dir"], device="cpu").tokenizer
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=tok.vocab_size, d_model=32, d_ff=64, n_heads=2, n_enc_layers=1, n_dec_layers=1, max_positions=40)
    run = tmp_path / "run"
    run.mkdir()
    tok.save(run / "tokenizer.json")
    save_weights(run / FINAL, weights_state(Transformer(config)), config, tok.sha256, 5)
    assert run_export("onnx", run, other, verify_lines=5).ok

    def damaged(name: str, damage) -> Path:
        copy = Path(shutil.copytree(exported[0], tmp_path / name))
        damage(copy)
        return copy

    def truncate(copy: Path) -> None:
        data = (copy / "decoder.onnx").read_bytes()
        (copy / "decoder.onnx").write_bytes(data[: len(data) // 3])

    def edit_config(copy: Path) -> None:
        values = json.loads((copy / "config.json").read_text())
        (copy / "config.json").write_text(json.dumps({**values, "n_heads": values["n_heads"] * 2}))

    cases = [
        (damaged("truncated", truncate), "decoder.onnx is not a readable ONNX graph, or is truncated or corrupt"),
        (damaged("edited", edit_config), "encoder.onnx was exported from another model than its config.json describes (n_heads"),
        (damaged("mixed", lambda c: shutil.copy(other / "encoder.onnx", c)), "encoder.onnx was exported from another model"),
        (damaged("no-manifest", lambda c: (c / "onnx.json").unlink()), "onnx.json is missing"),
        # the export's own encoder saved as its decoder (files mixed up by hand): loaded, then a raw onnxruntime
        # ValueError ("Required inputs (['src']) are missing") in the first search
        (damaged("swapped", lambda c: shutil.copy(c / "encoder.onnx", c / "decoder.onnx")),
         "decoder.onnx is not the decoder graph of this export: its inputs are src, the encoder's"),
    ]
    for folder, message in cases:
        with pytest.raises(TfmError) as caught:
            Translator.load(folder)
        assert message in str(caught.value) and "\n" not in str(caught.value)
        proc = tfm("translate", "--model", str(folder), "Je suis étudiant.", check=False)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith("Error: ") and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 2
        # the hint's command replaces this export (`tfm export RUN --format onnx` alone wrote exports/RUN-onnx and
        # left it damaged)
        assert proc.stderr.strip().endswith(f"export it again: tfm export RUN --format onnx --out {folder} --force")
    tfm("export", str(trained["dir"]), "--format", "onnx", "--out", str(cases[0][0]), "--force", "--verify-lines", "5")
    assert Translator.load(cases[0][0]).translate("Je suis étudiant.")
