"""The Transformer's ONNX export (issue 17, item 7): the encoder and the cached decoder against
Keras for every layout the config offers, and the lean runtime translating 35 sentences exactly as
the Keras translator does, greedy and with 4 beams, without TensorFlow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from inplugins import in_tree_plugins  # noqa: F401 - the fixture
from transformer_pairs import short_pairs

from ptmkit.testing import main

pytestmark = pytest.mark.usefixtures("in_tree_plugins")

LAYOUTS = [
    {"positions": "sinusoidal", "normalization": "post", "activation": "relu"},  # the paper
    {"positions": "learned", "normalization": "pre", "activation": "gelu", "final_logits_bias": True},
    {"positions": "sinusoidal", "sinusoid_layout": "halves", "normalization": "pre", "activation": "silu", "scale_embeddings": False},  # Marian's
]


@pytest.fixture(scope="module")
def exported(overfit_run, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The overfitted run's fp32 export, shared by the tests that only read it (one export, not four)."""
    out = tmp_path_factory.mktemp("transformer-export") / "export"
    assert main(["export", str(overfit_run[0]), "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: "-".join(str(v) for v in layout.values()))
def test_graphs_match_keras_through_the_cache(layout: dict) -> None:
    """Random weights (a random logits bias too): the parity check of the export (encoder states,
    next-token logits of prefixes fed one token at a time through the cache) within 1e-5."""
    import keras
    import onnxruntime as ort

    from ptmkit_transformer.backbone import build_backbone
    from ptmkit_transformer.config import TransformerConfig
    from ptmkit_transformer.onnx_export import check_parity
    from ptmkit_transformer.onnx_graph import build_decoder_graph, build_encoder_graph
    from ptmkit_transformer.tokenizer import train_shared_bpe
    from ptmkit_transformer.translate import Translator

    keras.utils.set_random_seed(0)
    config = TransformerConfig(vocabulary_size=60, encoder_layers=2, decoder_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32,
                               dropout=0.0, max_sequence_length=24, **layout)
    backbone = build_backbone(config)
    if backbone.logits_bias is not None:
        backbone.logits_bias.bias.assign(np.random.default_rng(1).normal(size=60).astype("float32"))
    tokenizer = train_shared_bpe([s + " " + t for s, t in short_pairs()], 60, 1)
    translator = Translator.from_parts(backbone, tokenizer, config)
    encoder, decoder = (ort.InferenceSession(build(backbone, config).SerializeToString()) for build in (build_encoder_graph, build_decoder_graph))
    assert check_parity(translator, encoder, decoder) < 1e-5


def test_export_translates_as_keras_does(overfit_run, exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ptmkit_export import ExportDirError, Predictor
    from ptmkit_export import Translator as ExportTranslator
    from ptmkit_transformer.translate import Translator

    run, out = overfit_run[0], exported
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["task"] == "translation" and manifest["languages"] == "en-de" and manifest["variants"]["fp32"]["parity_max_abs_diff"] <= 1e-4
    assert sorted(p.name for p in out.iterdir()) == ["decoder.onnx", "encoder.onnx", "manifest.json", "tokenizer.json"]

    pairs = short_pairs()
    dev = [line.split("\t")[0] for line in (Path(__file__).parents[3] / "data/parallel/en-de-dev.tsv").read_text(encoding="utf-8").splitlines()[1:16]]
    sources = [source for source, _ in pairs] + dev  # 35: the 20 learnt pairs and 15 unseen sentences
    keras_side, onnx_side = Translator(run), ExportTranslator(out)
    greedy = onnx_side.translate(sources)
    assert greedy[:20] == [target for _, target in pairs]
    assert greedy == keras_side.translate(sources)
    assert onnx_side.decoder.cached_steps > 0 and onnx_side.decoder.full_steps == 2  # two batches (32 + 3): their first steps only are recomputed
    assert onnx_side.translate(sources, num_beams=4) == keras_side.translate(sources, num_beams=4)

    assert main(["translate", str(out), "--text", pairs[0][0], "--num-beams", "2"]) == 0
    assert capsys.readouterr().out.strip() == pairs[0][1]
    with pytest.raises(ExportDirError, match="a translation export .*load it with ptmkit_export.Translator"):
        Predictor(out)
    assert main(["export", str(run), "--out", str(tmp_path / "fp16"), "--fp16"]) == 2
    assert "--fp16: not supported yet for a translation export" in capsys.readouterr().err
    assert main(["export", str(run), "--out", str(tmp_path / "fp16"), "--int8"]) == 2
    assert "--int8 on a translation export needs --dev PAIRS.tsv" in capsys.readouterr().err
    assert not (tmp_path / "fp16").exists()


def test_int8_is_gated_on_dev_bleu(overfit_run, pairs_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ptmkit_export import Translator as ExportTranslator
    from ptmkit_transformer.translate import score_translations

    run, _ = overfit_run
    out = tmp_path / "export"
    assert main(["export", str(run), "--out", str(out), "--int8", "--dev", str(pairs_file)]) == 0
    err = capsys.readouterr().err  # the console writes to stderr
    assert "ONNX vs Keras max |diff|" in err and "int8: dev BLEU" in err
    manifest = json.loads((out / "manifest.json").read_text())
    entry = manifest["variants"]["int8"]
    assert {"encoder.int8.onnx", "decoder.int8.onnx"} <= {p.name for p in out.iterdir()}
    assert (out / "decoder.int8.onnx").stat().st_size < 0.6 * (out / "decoder.onnx").stat().st_size
    pairs = short_pairs()
    references = [target for _, target in pairs]
    int8 = ExportTranslator(out, variant="int8").translate([source for source, _ in pairs])
    assert entry["dev_bleu"] == score_translations(int8, references)["bleu"] and entry["fp32_dev_bleu"] == 100.0  # the gate recounted
    assert entry["ok"] == (entry["dev_bleu"] >= 99.5) and entry["dev_sentences"] == 20
    assert entry["latency_ms_per_sentence_b1"] > 0 and manifest["gate"]["int8"]["ok"] == entry["ok"]
    assert ExportTranslator(out).variant == ("int8" if entry["ok"] else "fp32")
    few = tmp_path / "few.tsv"
    few.write_text("".join(pairs_file.read_text(encoding="utf-8").splitlines(keepends=True)[:3]), encoding="utf-8")
    assert main(["export", str(run), "--out", str(tmp_path / "few"), "--int8", "--dev", str(few)]) == 2
    assert "sentence pair(s); the int8 gate's BLEU needs at least 20 (over fewer it is noise)" in capsys.readouterr().err
    assert not (tmp_path / "few").exists()
    assert main(["export", str(run), "--out", str(out)]) == 0  # exported again without int8: its files go
    assert not (out / "decoder.int8.onnx").exists() and "int8" not in json.loads((out / "manifest.json").read_text())["variants"]


def test_runtime_translates_without_tensorflow(exported: Path) -> None:
    """The lean runtime alone (``ptmkit_export``, as a production app installs it): TensorFlow is
    never imported."""
    out = exported
    source, target = short_pairs()[1]
    code = (f"import sys, ptmkit_export; t = ptmkit_export.Translator({str(out)!r}); print(t.translate([{source!r}], num_beams=3)[0]); "
            "print('tensorflow' in sys.modules, 'keras' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == [target, "False False"]


def test_serve_answers_translations(exported: Path) -> None:
    """``ptmkit serve`` on the export over real HTTP: ``infer`` (text in, translation out, greedy),
    the generate extension (beam search by its parameters; the stream: one event) and
    ``/v1/predict``, each the lean runtime's translation; bad requests a one-line 400."""
    from serve_fixtures import ServerThread

    from ptmkit_export import Translator as ExportTranslator
    from ptmkit_export.server import create_app

    out = exported
    pairs = short_pairs()
    sources, targets = [s for s, _ in pairs[:4]], [t for _, t in pairs[:4]]
    with ServerThread(create_app(ExportTranslator(out, threads=1), "en-de")) as server:
        status, _, body = server.request("POST", "/v2/models/en-de/infer", {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [4], "data": sources}]})
        assert status == 200, body
        assert json.loads(body)["outputs"] == [{"name": "translation", "datatype": "BYTES", "shape": [4], "data": targets}]
        request = {"text_input": sources[1], "parameters": {"num_beams": 3, "length_penalty": 0.6, "max_length": 20}}
        status, _, body = server.request("POST", "/v2/models/en-de/generate", request)
        assert status == 200 and json.loads(body) == {"model_name": "en-de", "model_version": "1", "text_output": targets[1]}, body
        status, headers, body = server.request("POST", "/v2/models/en-de/generate_stream", request)
        assert status == 200 and headers["content-type"].startswith("text/event-stream")
        assert body.startswith(b"data: ") and body.count(b"\n\n") == 1 and body.endswith(b"\n\n")  # one event: the whole translation
        assert json.loads(body[len(b"data: ") :]) == {"model_name": "en-de", "model_version": "1", "text_output": targets[1]}
        status, _, body = server.request("POST", "/v1/predict", {"texts": sources[:2]})
        assert status == 200 and json.loads(body) == {"model_name": "en-de", "translations": targets[:2]}
        assert "generate" in json.loads(server.request("GET", "/v2")[2])["extensions"]
        metadata = json.loads(server.request("GET", "/v2/models/en-de")[2])
        assert metadata["outputs"] == [{"name": "translation", "datatype": "BYTES", "shape": [-1]}] and metadata["parameters"]["languages"] == "en-de"
        for path, bad, message in [
            ("/v2/models/en-de/infer", {"inputs": [{"name": "token_ids", "datatype": "INT32", "shape": [1, 2], "data": [1, 2]}]}, "give input 'text' (BYTES), not tensors"),
            ("/v2/models/en-de/generate", {"text_input": "hello", "parameters": {"num_beams": 0}}, "'parameters.num_beams' must be an integer from 1 to 64, got 0"),
            ("/v2/models/en-de/generate", {"text_input": "hello", "parameters": {"num_beams": 10**20}}, "'parameters.num_beams' must be an integer from 1 to 64"),
            ("/v2/models/en-de/generate", {"text_input": "hello", "parameters": {"top_k": 5}}, "unknown parameter 'parameters.top_k'"),
            ("/v2/models/en-de/generate", {"text_input": ""}, "'text_input' must be a non-empty string"),
        ]:
            status, _, body = server.request("POST", path, bad)
            assert status == 400 and message in json.loads(body)["error"], body


def test_broken_export_is_one_line(exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    from ptmkit_export import ExportDirError
    from ptmkit_export import Translator as ExportTranslator

    out = exported
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    (broken / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ExportDirError, match=r"tokenizer.json: cannot load tokenizer"):
        ExportTranslator(broken)
    (broken / "tokenizer.json").write_bytes((out / "tokenizer.json").read_bytes())
    (broken / "encoder.onnx").unlink()
    assert main(["translate", str(broken), "--text", "hello"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {broken / 'encoder.onnx'}: cannot load ONNX model") and len(err.strip().splitlines()) == 1, err
    with pytest.raises(ValueError, match="threads must be >= 1"):
        ExportTranslator(out, threads=0)
    # graphs and a manifest that do not belong together: refused at load, naming the file
    (broken / "encoder.onnx").write_bytes((out / "decoder.onnx").read_bytes())
    with pytest.raises(ExportDirError, match=r"encoder.onnx: a decoder graph \(it takes a key/value cache\)"):
        ExportTranslator(broken)
    (broken / "encoder.onnx").write_bytes((out / "encoder.onnx").read_bytes())
    manifest = json.loads((out / "manifest.json").read_text())
    layers, heads = manifest["decoder"]["layers"], manifest["decoder"]["heads"]
    for key, value, message in [("layers", layers + 3, f"the graph's cache has {layers} layer\\(s\\), the manifest's decoder.layers is {layers + 3}"),
                                ("heads", heads + 1, f"the graph's past_key_0 has {heads} on its heads axis, the manifest's decoder.heads is {heads + 1}")]:
        (broken / "manifest.json").write_text(json.dumps({**manifest, "decoder": {**manifest["decoder"], key: value}}))
        with pytest.raises(ExportDirError, match=r"decoder.onnx: does not match .*manifest.json: " + message):
            ExportTranslator(broken)
    for prefix, message in [("<s>", r"must be a list of token ids below \d+, got '<s>'"), ([10**6], r"must be a list of token ids below \d+, got \[1000000\]"),
                            ([True], r"must be a list of token ids below \d+, got \[True\]"), ([0] * (manifest["max_sequence_length"] - 1), r"holds \d+ tokens; max_sequence_length \d+ leaves room for")]:
        (broken / "manifest.json").write_text(json.dumps({**manifest, "source_prefix_ids": prefix}))
        with pytest.raises(ExportDirError, match=r"manifest.json: key 'source_prefix_ids' " + message):
            ExportTranslator(broken)
    variants = {**manifest["variants"], "fp32": {**manifest["variants"]["fp32"], "ok": False}}
    (broken / "manifest.json").write_text(json.dumps({**manifest, "variants": variants}))
    with pytest.warns(RuntimeWarning, match="variant 'fp32' did not pass the export's gate; using it anyway"):
        assert ExportTranslator(broken, variant="fp32").variant == "fp32"
