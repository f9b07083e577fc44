"""``ptmkit export --optimize/--int8/--static/--fp16``: variants, the gate, the manifest, bad flags.

On ptmkit's own tiny BERT (1 layer, 2 heads, hidden 32, exact GELU) fine-tuned on the polarity
sample, and on the tiny pre-trained run as an embedding export.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from tinyconfig import DATA

from ptmkit.cli import main

DEV = DATA / "classify" / "polarity-200-dev.txt"
TRAIN = DATA / "classify" / "polarity-200-train.txt"


@pytest.fixture(scope="module")
def tiny_finetuned(tiny_pretrained: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ptmkit.training.finetune import finetune

    out = tmp_path_factory.mktemp("variants") / "polarity"
    finetune(tiny_pretrained, TRAIN, DEV, out, overrides=["finetune.epochs=1", "finetune.sequence_length=32"])
    return out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--int8", "--static"], "--static needs --calibration FILE"),
        (["--int8", "--static", "--calibration", "/nonexistent/calib.txt"], "/nonexistent/calib.txt: calibration file not found"),
        (["--optimize", "5"], "--optimize must be one of 0, 1, 2, 3, got 5"),
        (["--static", "--calibration", str(DEV)], "--static, --calibration configure int8 quantization; add --int8"),
        (["--int8", "--static", "--calibration", str(DEV), "--method", "kl"], "--method must be one of minmax, entropy, percentile"),
        (["--fused-layer-norm", "--exact-gelu"], "--fused-layer-norm, --exact-gelu configure int8 quantization; add --int8"),
    ],
)
def test_bad_flags_exit_2_before_converting(tiny_finetuned: Path, tmp_path: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(tiny_finetuned), "--out", str(tmp_path / "export"), *extra]) == 2
    err = capsys.readouterr()
    text = err.err + err.out
    assert message in text and "Traceback" not in text
    assert len([line for line in text.splitlines() if line.strip()]) == 1
    assert not (tmp_path / "export").exists()


def test_exclude_unknown_node_exits_2(tiny_finetuned: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(tiny_finetuned), "--out", str(tmp_path / "export"), "--int8", "--exclude-nodes", "no_such_node"]) == 2
    err = capsys.readouterr().err
    assert "error: --exclude-nodes: no node named 'no_such_node' in the graph; quantizable MatMul nodes: " in err
    assert not (tmp_path / "export").exists()


def test_optimize_int8_fp16_variants_and_gate(tiny_finetuned: Path, tmp_path: Path) -> None:
    from ptmkit.exporting import export_run
    from ptmkit_export import Predictor

    manifest = export_run(tiny_finetuned, tmp_path / "export", int8=True, optimize=2, fp16=True)
    directory = Path(manifest["directory"])
    assert sorted(p.name for p in directory.iterdir()) == [
        "manifest.json", "model.fp16.onnx", "model.int8.onnx", "model.onnx", "model.opt.onnx", "tokenizer.json",
    ]
    variants = manifest["variants"]
    assert list(variants) == ["fp32", "optimized", "int8", "fp16"]
    optimization = variants["optimized"]["optimization"]
    # One layer: Attention, EmbedLayerNormalization, 2 SkipLayerNormalization, exact GELU + its bias -> BiasGelu.
    fused = {op: n for op, n in optimization["fused"].items() if n}
    assert fused == {"Attention": 1, "SkipLayerNormalization": 2, "EmbedLayerNormalization": 1, "BiasGelu": 1}
    assert optimization["passes"] == {
        "gemm_to_matmul": 6, "tensordot_to_matmul": 2, "layer_normalization": 3, "attention": 1, "embed_layer_normalization": 1, "gelu": 1,
    }
    assert optimization["attention_fused"] is True
    quantization = variants["int8"]["quantization"]
    assert quantization["mode"] == "dynamic" and quantization["source_variant"] == "optimized"
    # q, k, v in QAttention; attention output, 2 feed-forward and the head's 2 Dense as MatMulInteger.
    assert quantization["float_weight_matmul"] == 0 and quantization["quantized_attention"] == 1 and quantization["quantized_matmul"] == 5
    assert quantization["reduce_range_source"] == "auto" and isinstance(quantization["reduce_range"], bool)
    # The default int8 graph: SkipLayerNormalization split into Add + LayerNormalization, BiasGelu -> FastGelu.
    assert quantization["skip_layer_norm_unfused"] == 2 and quantization["gelu_approximated"] == 1
    int8_ops = {node.op_type for node in onnx.load(str(directory / "model.int8.onnx")).graph.node}
    assert "SkipLayerNormalization" not in int8_ops and "BiasGelu" not in int8_ops
    assert {"LayerNormalization", "FastGelu", "QAttention", "MatMulInteger"} <= int8_ops
    for name in ("optimized", "int8", "fp16"):
        entry = variants[name]
        assert 0.0 <= entry["dev_agreement_with_fp32"] <= 1.0 and entry["latency_ms_b1x128"] > 0
        assert entry["throughput_seq_per_s_b32x128"] > 0 and entry["fp32_paired_latency_ms_b1x128"] > 0
        assert entry["ok"] is (not entry["problems"])
    assert variants["optimized"]["dev_agreement_with_fp32"] == 1.0
    assert [row["variant"] for row in manifest["gate"]["rows"]] == list(variants)
    stored = json.loads((directory / "manifest.json").read_text())
    assert stored["variants"] == variants and stored["gate"] == manifest["gate"]

    # Each variant's outputs track fp32's through the lean runtime.
    texts = ["a gorgeous , witty , seductive movie .", "dull , plodding and utterly forgettable .", "ok"]
    fp32 = Predictor(directory, variant="fp32").logits(texts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a variant the gate marked not ok (timing noise)
        np.testing.assert_allclose(Predictor(directory, variant="optimized").logits(texts), fp32, atol=1e-4)
        np.testing.assert_allclose(Predictor(directory, variant="fp16").logits(texts), fp32, atol=2e-2)
        assert np.abs(Predictor(directory, variant="int8").logits(texts) - fp32).max() < 0.5

    # The default variant is one the gate passed; a failed one warns when asked for by name.
    def edit(change: dict[str, dict[str, object]]) -> None:
        data = json.loads((directory / "manifest.json").read_text())
        for name, fields in change.items():
            data["variants"][name].update(fields)
        (directory / "manifest.json").write_text(json.dumps(data))

    edit({"int8": {"ok": True, "problems": []}, "optimized": {"ok": True, "problems": []}})
    assert Predictor(directory).variant == "int8"
    edit({"int8": {"ok": False, "problems": ["top-1 agreement with fp32 is only 0.5"]}})
    assert Predictor(directory).variant == "optimized"
    edit({"optimized": {"ok": False, "problems": ["slower than fp32"]}})
    assert Predictor(directory).variant == "fp32"
    with pytest.warns(RuntimeWarning, match=r"variant 'int8' did not pass the export's gate \(top-1 agreement with fp32 is only 0.5\)"):
        Predictor(directory, variant="int8")


def test_static_int8_from_the_cli(tiny_finetuned: Path, tmp_path: Path) -> None:
    out = tmp_path / "export"
    argv = ["export", str(tiny_finetuned), "--out", str(out), "--optimize", "2", "--int8", "--static", "--calibration", str(TRAIN),
            "--method", "entropy", "--per-tensor", "--no-reduce-range"]
    assert main(argv) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    quantization = manifest["variants"]["int8"]["quantization"]
    assert quantization["mode"] == "static-qdq" and quantization["method"] == "entropy" and quantization["per_channel"] is False
    # From the optimised graph (contrib ops ONNX shape inference cannot type): activations are quantized too.
    assert quantization["source_variant"] == "optimized" and quantization["quantize_linear"] > 0
    assert quantization["reduce_range"] is False and quantization["reduce_range_source"] == "--no-reduce-range"
    ops = {node.op_type for node in onnx.load(str(out / "model.int8.onnx")).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    assert manifest["variants"]["int8"]["dev_agreement_with_fp32"] >= 0.9


def test_int8_fused_layer_norm_exact_gelu_and_int4_from_the_cli(tiny_finetuned: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnx_ir")
    out = tmp_path / "export"
    assert main(["export", str(tiny_finetuned), "--out", str(out), "--optimize", "2", "--int8", "--fused-layer-norm", "--exact-gelu", "--int4"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert list(manifest["variants"]) == ["fp32", "optimized", "int8", "int4"]
    quantization = manifest["variants"]["int8"]["quantization"]
    assert quantization["skip_layer_norm_unfused"] == 0 and quantization["gelu_approximated"] == 0
    int8_ops = [node.op_type for node in onnx.load(str(out / "model.int8.onnx")).graph.node]
    assert int8_ops.count("SkipLayerNormalization") == 2 and int8_ops.count("BiasGelu") == 1
    int4 = manifest["variants"]["int4"]
    # Attention output, 2 feed-forward layers and the head's 2 Dense; q/k/v stay in the fp32 Attention.
    assert int4["quantization"]["mode"] == "int4-weight-only" and int4["quantization"]["matmul_nbits"] == 5
    assert int4["quantization"]["block_size"] == 32 and int4["quantization"]["source_variant"] == "optimized"
    assert [node.op_type for node in onnx.load(str(out / "model.int4.onnx")).graph.node].count("MatMulNBits") == 5
    assert int4["dev_agreement_with_fp32"] >= 0.95
    assert [row["variant"] for row in manifest["gate"]["rows"]] == ["fp32", "optimized", "int8", "int4"]


def test_embedding_export_with_optimize(tiny_pretrained: Path, tmp_path: Path) -> None:
    from ptmkit.exporting import ExportError, export_run

    with pytest.raises(ExportError, match="no dev file recorded in the run; pass --dev FILE .* fp32-vs-optimized check"):
        export_run(tiny_pretrained, tmp_path / "none", optimize=1)
    manifest = export_run(tiny_pretrained, tmp_path / "export", optimize=1, dev=DEV)
    entry = manifest["variants"]["optimized"]
    assert entry["optimization"]["fused"]["LayerNormalization"] == 3
    assert entry["dev_mean_cosine_to_fp32"] > 0.99999


def test_conversion_matches_keras_model_export(tiny_finetuned: Path, tmp_path: Path) -> None:
    """convert_to_onnx (tf2onnx's large_model mode, optimizer garbage collected per pass, for
    memory) writes the graph Keras' own model.export(format="onnx") writes, with the same outputs."""
    import collections

    import onnxruntime as ort
    import tensorflow as tf
    import tf2onnx.optimizer

    from ptmkit.exporting import convert_to_onnx, random_inputs
    from ptmkit.plugins import get_registry
    from ptmkit.training.finetune import load_classifier

    model, config, _, manifest = load_classifier(tiny_finetuned, get_registry())
    inputs = get_registry().family(manifest["family"]).inputs
    names = [spec.name for spec in inputs]
    optimize_graph = tf2onnx.optimizer.optimize_graph
    convert_to_onnx(model, tmp_path / "ptmkit.onnx", inputs)
    assert tf2onnx.optimizer.optimize_graph is optimize_graph  # the scoped patch is undone
    signature = [{name: tf.TensorSpec((None, None), tf.int32, name=name) for name in names}]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model.export(str(tmp_path / "keras.onnx"), format="onnx", input_signature=signature, verbose=False)
    ours, keras_graph = onnx.load(str(tmp_path / "ptmkit.onnx")), onnx.load(str(tmp_path / "keras.onnx"))
    assert collections.Counter(n.op_type for n in ours.graph.node) == collections.Counter(n.op_type for n in keras_graph.graph.node)
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in ours.graph.initializer)  # one self-contained file
    feeds = random_inputs(np.random.default_rng(0), inputs, 4, 20, int(config.model.vocabulary_size), 0)
    got = ort.InferenceSession(str(tmp_path / "ptmkit.onnx"), providers=["CPUExecutionProvider"]).run(["logits"], feeds)[0]
    expected = np.asarray(model(feeds, training=False))
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


def test_conversion_runs_in_a_child_process_and_writes_the_same_export(tiny_finetuned: Path, tmp_path: Path) -> None:
    """A process that has not imported TensorFlow (``ptmkit export``) converts in a child process and
    never imports it: the export's peak memory is the larger process's, not both summed
    (``benchmarks/export_memory.py``). The child's export matches an in-process one: same parity
    differences, same outputs on the same inputs."""
    import os
    import subprocess
    import sys

    import onnxruntime as ort
    from rich.console import Console

    from ptmkit.exporting import export_run

    script = (
        "import json, sys; from rich.console import Console; from ptmkit.exporting import export_run; "
        "m = export_run(sys.argv[1], sys.argv[2], console=Console(quiet=True)); "
        "print(json.dumps({'tensorflow': 'tensorflow' in sys.modules, 'parity': m['variants']['fp32']['parity_max_abs_diff']}))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-c", script, str(tiny_finetuned), str(tmp_path / "child")], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    child = json.loads(done.stdout.strip().splitlines()[-1])
    here = export_run(tiny_finetuned, tmp_path / "here", console=Console(quiet=True), isolate=False)
    assert child["tensorflow"] is False
    assert child["parity"] == here["variants"]["fp32"]["parity_max_abs_diff"]
    rng = np.random.default_rng(3)
    feeds = {"token_ids": rng.integers(5, 100, (3, 11)).astype(np.int32), "padding_mask": np.ones((3, 11), np.int32), "segment_ids": np.zeros((3, 11), np.int32)}
    outputs = [ort.InferenceSession(str(tmp_path / d / "model.onnx")).run(["logits"], feeds)[0] for d in ("child", "here")]
    np.testing.assert_allclose(outputs[0], outputs[1], rtol=0, atol=1e-6)


def test_an_error_in_the_child_process_is_raised_with_its_message(tiny_finetuned: Path, tmp_path: Path) -> None:
    import shutil

    from rich.console import Console

    from ptmkit.errors import RunDirError
    from ptmkit.exporting import export_run

    run = tmp_path / "run"
    shutil.copytree(tiny_finetuned, run, ignore=shutil.ignore_patterns("export"))
    (run / "model.weights.h5").write_bytes(b"not an HDF5 file")
    with pytest.raises(RunDirError, match=r"model\.weights\.h5: corrupted or incompatible weights file"):
        export_run(run, tmp_path / "out", console=Console(quiet=True), isolate=True)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
