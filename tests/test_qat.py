"""Quantisation-aware fine-tuning (``finetune.qat``, Q8BERT): the fake quantiser against a hand
computation, its straight-through gradient, the input thresholds' moving average, a QAT run whose
int8 export sits closer to its Keras model than a post-training int8 export of a plain run, and
the refusals."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest
from tinyconfig import DATA

TRAIN, DEV = DATA / "classify" / "polarity-200-train.txt", DATA / "classify" / "polarity-200-dev.txt"


def test_fake_quantisation_is_q8berts_symmetric_int8_by_hand() -> None:
    from ptmkit.training.qat import fake_quantize, fake_quantize_weights

    # threshold 2: S = 127 / 2 = 63.5; x S = 31.75, -63.5, 16.51, 127, 190.5 -> 32, -64 (half to even), 17, 127, 127
    x = np.array([0.5, -1.0, 0.26, 2.0, 3.0], np.float32)
    expected = np.array([32, -64, 17, 127, 127], np.float32) / 63.5
    np.testing.assert_allclose(keras.ops.convert_to_numpy(fake_quantize(x, 2.0)), expected, rtol=1e-6)
    # weights: S = 127 / max|W| = 127 / 0.4 = 317.5; W S = 31.75, -127, 79.375, 9.525 -> 32, -127, 79, 10
    w = np.array([[0.1, -0.4], [0.25, 0.03]], np.float32)
    expected_w = np.array([[32, -127], [79, 10]], np.float32) * 0.4 / 127
    np.testing.assert_allclose(keras.ops.convert_to_numpy(fake_quantize_weights(w)), expected_w, rtol=1e-6)


def test_the_gradient_passes_straight_through() -> None:
    import tensorflow as tf

    from ptmkit.training.qat import fake_quantize, fake_quantize_weights

    x = tf.Variable([0.5, -1.0, 0.26, 1.9])
    weights = tf.constant([3.0, -1.0, 0.5, 2.0])
    with tf.GradientTape(persistent=True) as tape:
        y = tf.reduce_sum(weights * fake_quantize(x, 2.0))
        z = tf.reduce_sum(weights * fake_quantize_weights(x))
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), weights.numpy())  # d/dx = 1 inside the range
    np.testing.assert_array_equal(tape.gradient(z, x).numpy(), weights.numpy())  # the scale's max|x| gets none


def test_input_thresholds_follow_the_moving_average_and_inference_reads_them() -> None:
    from ptmkit.training.qat import apply_fake_quantisation, fake_quantize, fake_quantize_weights

    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(2, name="d")(inputs))
    dense = model.get_layer("d")
    qat = apply_fake_quantisation(model, ema_decay=0.75)
    first, second = np.array([[1.0, -4.0, 2.0]], np.float32), np.array([[0.5, 8.0, -1.0]], np.float32)
    model(first, training=True)
    assert float(qat.thresholds[0].numpy()) == 4.0  # the first batch sets it
    model(second, training=True)
    assert float(qat.thresholds[0].numpy()) == pytest.approx(4.0 - 0.25 * (4.0 - 8.0))  # 5.0
    out = keras.ops.convert_to_numpy(model(second, training=False))
    assert float(qat.thresholds[0].numpy()) == pytest.approx(5.0)  # inference does not move it
    kernel = keras.ops.convert_to_numpy(fake_quantize_weights(dense.kernel))
    expected = keras.ops.convert_to_numpy(fake_quantize(second, 5.0)) @ kernel + dense.bias.numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def _int8_gap(run: Path) -> float:
    """Mean |int8 ONNX logits - Keras logits| of ``run`` on the dev file: the run converted and
    quantised as ``ptmkit export --int8 --per-tensor --reduce-range`` does (without its gate's
    timings), weights in [-64, 64] with one scale per matrix."""
    import onnxruntime as ort

    from ptmkit.console import default_console
    from ptmkit.data.tokenization import encode_texts
    from ptmkit.exporting.convert import convert_run
    from ptmkit.exporting.source import load_model, read_run
    from ptmkit.plugins import get_registry
    from ptmkit.training.finetune import load_labelled
    from ptmkit_export.quantize import quantize_int8

    registry = get_registry()
    source = read_run(run, registry, None, 0, ["int8"])
    model = load_model(source, registry)
    convert_run(model, run / "model.onnx", source, default_console())
    quantize_int8(run / "model.onnx", run / "model.int8.onnx", per_channel=False, reduce_range=True)
    manifest = source.run.manifest()
    tokenizer = source.run.load_tokenizer()
    family = registry.family(manifest["family"])
    texts, _, _ = load_labelled(DEV, manifest["labels"])
    x = encode_texts(tokenizer, texts, manifest["sequence_length"], family.inputs, family.special_tokens(tokenizer).padding_id)
    session = ort.InferenceSession(str(run / "model.int8.onnx"), providers=["CPUExecutionProvider"])
    int8 = session.run(None, {i.name: x[i.name] for i in session.get_inputs()})[0]
    return float(np.mean(np.abs(int8 - model.predict(x, verbose=0))))


def test_a_qat_run_saves_int8_grid_weights_and_exports_closer_than_post_training_int8(tiny_pretrained: Path, tmp_path: Path) -> None:
    from ptmkit.rundir import RunDir
    from ptmkit.training.finetune import load_classifier

    recipe = ["finetune.epochs=1", "finetune.sequence_length=32", "finetune.learning_rate=1e-3", "finetune.max_train_examples=64"]
    runs = {}
    for name, extra in (("qat", ["finetune.qat=true", "finetune.qat_reduce_range=true"]), ("plain", [])):
        from ptmkit.training.finetune import finetune

        runs[name] = tmp_path / name
        metrics = finetune(tiny_pretrained, TRAIN, DEV, runs[name], overrides=[*recipe, *extra])
        assert metrics.get("qat", False) is (name == "qat")
    summary = RunDir(runs["qat"]).manifest()["qat"]
    assert (summary["product_layers"], summary["embedding_tables"]) == (8, 2)  # q k v out ff1 ff2 pooler logits; token, segment
    model, _, _, _ = load_classifier(runs["qat"])
    kernels = [v.numpy() for v in model.weights if v.path.endswith("/kernel") or v.path.endswith("token_embedding/embeddings")]
    assert len(kernels) == 9
    for w in kernels:  # on the grid max|W| / 64: W * 64 / max|W| is an integer
        grid = w * 64 / np.abs(w).max()
        assert np.abs(grid - np.round(grid)).max() < 1e-3
    gaps = {name: _int8_gap(run) for name, run in runs.items()}
    # weights quantised to the same integers at export: only the activations' rounding is left
    print("mean |int8 - keras| logits", gaps)
    assert gaps["qat"] < 0.8 * gaps["plain"], gaps


def test_qat_refuses_what_it_cannot_serve(tiny_pretrained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ptmkit.cli import main
    from ptmkit.errors import ConfigError
    from ptmkit.training.qat import apply_fake_quantisation

    args = ["finetune", str(tiny_pretrained), "--train", str(TRAIN), "--dev", str(DEV), "--out", str(tmp_path / "x"), "--qat"]
    assert main([*args, "--strategy", "lora"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "finetune.qat" in err and "'lora'" in err
    assert not (tmp_path / "x").exists()
    assert main([*args, "--set", "finetune.qat_ema_decay=1"]) == 2
    assert "'finetune.qat_ema_decay' must be in (0, 1)" in capsys.readouterr().err
    inputs = keras.Input((4, 3))
    recurrent = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.LSTM(5, name="lstm")(inputs)))
    with pytest.raises(ConfigError, match=r"finetune.qat: lstm_cell \(LSTMCell\) hold weight matrices outside Dense"):
        apply_fake_quantisation(recurrent)
