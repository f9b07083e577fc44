"""``ptmkit compress --theseus-layers`` (progressive module replacing, Xu et al. 2020) and
``--share-layers`` (ALBERT's cross-layer sharing on a trained backbone, Lan et al. 2020), on a
fine-tuned four-block tiny BERT without dropout (so that a training-mode call is deterministic
but for the replacement draws)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from tinyconfig import DATA

TRAIN, DEV = DATA / "classify" / "polarity-200-train.txt", DATA / "classify" / "polarity-200-dev.txt"
HIDDEN, INTERMEDIATE = 32, 64
#: One keras-hub TransformerEncoder of tinyconfig's sizes: q, k, v, o (kernel + bias), two
#: layer norms (gamma + beta), two feed-forward dense layers (kernel + bias).
ATTENTION = 4 * (HIDDEN * HIDDEN + HIDDEN) + 2 * HIDDEN
FFN = (HIDDEN * INTERMEDIATE + INTERMEDIATE) + (INTERMEDIATE * HIDDEN + HIDDEN) + 2 * HIDDEN


@pytest.fixture(scope="module")
def predecessor(tiny_pretrained: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fine-tuned BERT of four blocks, no dropout anywhere: a randomly initialised backbone of
    the session's tiny run's sizes and tokenizer, written as a pre-trained run (no pre-training:
    nothing here depends on what it learnt), then fine-tuned."""
    from ptmkit.config import read_toml
    from ptmkit.plugins import get_registry
    from ptmkit.rundir import RunDir, staged_run, write_backbone_run
    from ptmkit.testing import finetune

    registry = get_registry()
    root = tmp_path_factory.mktemp("theseus")
    stored = read_toml(tiny_pretrained / "config.toml")
    stored["model"] = {**stored["model"], "num_layers": 4, "dropout": 0.0}
    backbone = registry.family("bert").build_backbone(registry.family("bert").config_class(**stored["model"]))
    with staged_run(root / "bert", "test") as run:
        write_backbone_run(run, registry, "bert", stored, None, backbone, tiny_pretrained / "tokenizer.json",
                           inputs=RunDir(tiny_pretrained).manifest()["inputs"])
    finetune(root / "bert", TRAIN, DEV, root / "ft", overrides=[
        "finetune.epochs=1", "finetune.sequence_length=16", "finetune.batch_size=32", "finetune.max_train_examples=32", "head.dropout=0.0",
    ])
    return root / "ft"


def _inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"token_ids": rng.integers(5, 600, (3, 16)).astype("int32"), "segment_ids": np.zeros((3, 16), "int32"),
            "padding_mask": np.array([[1] * 16, [1] * 9 + [0] * 7, [1] * 4 + [0] * 12], "int32")}


def test_the_replacement_rate_follows_the_linear_curriculum() -> None:
    import keras

    from ptmkit.training.theseus import ReplacementScheduler, default_slope, replacement_rate

    # p_t = min(1, k t + b): Xu et al. 2020, eq. 6, worked by hand
    assert [replacement_rate(t, 0.0006, 0.3) for t in (0, 1, 500, 1166, 1167, 5000)] == pytest.approx([0.3, 0.3006, 0.6, 0.9996, 1.0, 1.0])
    assert default_slope(0.3, 100) == pytest.approx(0.014) and replacement_rate(50, default_slope(0.3, 100), 0.3) == pytest.approx(1.0)
    rate = keras.Variable(0.0, trainable=False)
    scheduler, seen = ReplacementScheduler(rate, 0.25, 0.1, start=2), []
    for batch in range(4):  # a fit resumed after two steps: its first step is t = 2
        scheduler.on_train_batch_begin(batch)
        seen.append(float(rate.numpy()))
        scheduler.on_train_batch_end(batch)
    assert seen == pytest.approx([0.6, 0.85, 1.0, 1.0])


def test_at_p1_the_model_is_the_successor_at_p0_the_predecessor(predecessor: Path) -> None:
    import dataclasses

    import keras

    from ptmkit.plugins import get_registry
    from ptmkit.testing import load_classifier
    from ptmkit.training.finetune import build_classifier
    from ptmkit.training.theseus import initial_layers, replacing_model

    registry = get_registry()
    family = registry.family("bert")
    model, config, _, _ = load_classifier(predecessor)
    (backbone,) = [layer for layer in model.layers if isinstance(layer, keras.Model)]
    blocks = family.blocks(backbone)
    assert initial_layers(4, 2, "first") == [0, 1] and initial_layers(4, 2, "module") == [0, 2] and initial_layers(4, 1, "module") == [0]
    for init in ("first", "module"):  # each successor block starts as the predecessor block it is initialised from
        start = initial_layers(4, 2, init)
        _, successor = family.keep_layers(config.model, backbone, start)
        for block, index in zip(family.blocks(successor), start, strict=True):
            for got, want in zip(block.get_weights(), blocks[index].get_weights(), strict=True):
                np.testing.assert_array_equal(got, want)
    model_config, successor = family.keep_layers(config.model, backbone, [0, 1])
    classifier = build_classifier(registry, dataclasses.replace(config, model=model_config), successor, 2)
    kernel, bias = model.get_layer("logits").get_weights()
    model.get_layer("logits").set_weights([kernel * 100, bias])  # logits of order 1, not 0.01: a difference of 1e-6 is a real one
    for layer in classifier.layers:
        if layer.weights and layer is not successor:
            layer.set_weights(model.get_layer(layer.name).get_weights())
    training, rate = replacing_model(classifier, successor, family.blocks(successor), blocks)
    x = _inputs()
    alone = keras.ops.convert_to_numpy(classifier(x, training=False))
    whole = keras.ops.convert_to_numpy(model(x, training=False))
    assert np.max(np.abs(alone - whole)) > 1e-2  # the two differ, so the comparisons below can fail
    rate.assign(1.0)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(training(x, training=True)), alone, atol=1e-6)
    rate.assign(0.0)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(training(x, training=True)), whole, atol=1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(training(x, training=False)), alone, atol=1e-6)  # inference: the successor
    trained = {id(v) for block in family.blocks(successor) for v in block.weights}
    assert {id(v) for v in training.trainable_weights} == trained  # the reference optimises the successor blocks only


def test_the_kept_successor_is_an_ordinary_fine_tuned_run(predecessor: Path, tmp_path: Path) -> None:
    from ptmkit.testing import load_classifier, main

    out = tmp_path / "successor"
    assert main(["compress", str(predecessor), "--out", str(out), "--theseus-layers", "2", "--replace-rate", "0.5",
                 "--set", "finetune.max_train_examples=64", "--set", "finetune.epochs=1"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stage"] == "finetune" and manifest["compressed_from"]["method"] == "theseus"
    assert manifest["compressed_from"]["initialised_from"] == [0, 1] and manifest["compressed_from"]["slope"] == pytest.approx(0.5)  # 2 steps: 1 at t = 1
    assert manifest["parameters"]["before"] - manifest["parameters"]["after"] == 2 * (ATTENTION + FFN)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] == 2 and metrics["final_replacement_rate"] == 1.0 and 0.0 <= metrics["dev_agreement_with_teacher"] <= 1.0
    model, config, _, _ = load_classifier(out)
    assert config.model.num_layers == 2 and model.count_params() == manifest["parameters"]["after"]
    full, _, _, _ = load_classifier(predecessor)
    assert model.get_layer("logits").get_weights()[0].tolist() == full.get_layer("logits").get_weights()[0].tolist()  # the head is frozen


def test_shared_sublayers_are_one_set_and_the_export_is_smaller(predecessor: Path, tmp_path: Path) -> None:
    import keras

    from ptmkit.testing import load_classifier, main

    out = tmp_path / "shared"
    assert main(["compress", str(predecessor), "--out", str(out), "--share-layers", "all"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["compressed_from"] == {"path": str(predecessor.resolve()), "method": "share-layers", "sublayers": "all", "init": "mean"}
    assert manifest["parameters"]["before"] - manifest["parameters"]["after"] == 3 * (ATTENTION + FFN)
    model, config, _, _ = load_classifier(out)
    full, _, _, _ = load_classifier(predecessor)
    (backbone,) = [layer for layer in model.layers if isinstance(layer, keras.Model)]
    (original,) = [layer for layer in full.layers if isinstance(layer, keras.Model)]
    first = backbone.transformer_layers[0]
    for block in backbone.transformer_layers[1:]:
        assert block._self_attention_layer is first._self_attention_layer and block._feedforward_output_dense is first._feedforward_output_dense
    want = np.mean([b._feedforward_intermediate_dense.kernel.numpy() for b in original.transformer_layers], axis=0)
    np.testing.assert_allclose(first._feedforward_intermediate_dense.kernel.numpy(), want, atol=1e-7)
    assert config.model.shared_layers == "all" and model.count_params() == manifest["parameters"]["after"]
    assert main(["export", str(out)]) == 0
    exported = json.loads((out / "export" / "manifest.json").read_text())
    assert max(exported["variants"]["fp32"]["parity_max_abs_diff"].values()) <= 1e-4
    import onnx

    graph = onnx.load(str(out / "export" / "model.onnx")).graph
    stored = sum(int(np.prod(t.dims)) for t in graph.initializer if t.data_type == onnx.TensorProto.FLOAT)
    # the shared weights are stored once (tf2onnx folds a few reshaped copies of the shared attention kernels): 34,159 floats
    # for 31,042 parameters, where the unshared graph holds the 56,674
    assert manifest["parameters"]["after"] <= stored < 1.15 * manifest["parameters"]["after"] < manifest["parameters"]["before"]


def test_attention_or_feed_forward_sharing_drops_their_parameters_only(predecessor: Path) -> None:
    import keras

    from ptmkit.plugins import get_registry
    from ptmkit.testing import load_classifier

    family = get_registry().family("bert")
    model, config, _, _ = load_classifier(predecessor)
    (backbone,) = [layer for layer in model.layers if isinstance(layer, keras.Model)]
    before = backbone.count_params()
    for sublayers, per_block in (("attention", ATTENTION), ("ffn", FFN)):
        shared_config, shared = family.share_layers(config.model, backbone, sublayers, "first")
        assert before - shared.count_params() == 3 * per_block and shared_config.shared_layers == sublayers
        x = _inputs()
        if sublayers == "attention":  # block 0 keeps all its own weights: the first block's output is unchanged
            assert shared.transformer_layers[3]._self_attention_layer is shared.transformer_layers[0]._self_attention_layer
            assert shared.transformer_layers[3]._feedforward_output_dense is not shared.transformer_layers[0]._feedforward_output_dense
        tokens = shared.token_embedding(x["token_ids"])
        h = shared.embeddings_layer_norm(shared.embeddings_add((tokens, shared.position_embedding(tokens), shared.segment_embedding(x["segment_ids"]))))
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(shared.transformer_layers[0](h, padding_mask=x["padding_mask"])),
            keras.ops.convert_to_numpy(backbone.transformer_layers[0](h, padding_mask=x["padding_mask"])), atol=1e-6,
        )


@pytest.mark.parametrize(("args", "message"), [
    (["--theseus-layers", "3"], "error: --theseus-layers 3: give a number of successor blocks that divides the predecessor's 4 and is smaller"),
    (["--theseus-layers", "2", "--replace-rate", "1.5"], "error: --replace-rate 1.5: give the replacement probability at step 0, in [0, 1]"),
    (["--theseus-layers", "2", "--set", "model.num_layers=2"], "error: --set 'model.num_layers=2': module replacement keeps the predecessor's model and head; set finetune.* keys"),
    (["--share-layers", "mlp"], "error: --share-layers 'mlp': give one of all, attention, ffn"),
    (["--share-layers", "all", "--train", "x.tsv"], "error: --train, --dev and --set train the successor of --theseus-layers; the other methods train nothing"),
    (["--share-layers", "all", "--keep-layers", "0"], "error: ptmkit compress: give one of --keep-layers, --theseus-layers, --share-layers, or one of"),
])
def test_bad_options_are_refused_in_one_line(predecessor: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    from ptmkit.testing import main

    assert main(["compress", str(predecessor), "--out", str(tmp_path / "x"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and "\n" not in err
    assert not (tmp_path / "x").exists()


def test_runs_that_cannot_be_compressed_so_are_refused(tiny_pretrained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ptmkit.testing import main

    assert main(["compress", str(tiny_pretrained), "--out", str(tmp_path / "x"), "--theseus-layers", "1"]) == 2
    assert "is a pretrain run; module replacement compresses a fine-tuned run" in capsys.readouterr().err
    other = tmp_path / "albert"  # a run of a family without SharesLayers (ALBERT shares its own way)
    shutil.copytree(tiny_pretrained, other)
    manifest = json.loads((other / "manifest.json").read_text())
    (other / "manifest.json").write_text(json.dumps({**manifest, "family": "albert"}))
    assert main(["compress", str(other), "--out", str(tmp_path / "y"), "--share-layers", "all"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --share-layers: the albert family cannot share sublayers across its blocks (it does not implement SharesLayers)"
    )
    assert main(["compress", str(other), "--out", str(tmp_path / "y"), "--theseus-layers", "1"]) == 2
    assert "the albert family cannot replace blocks of its backbone (it does not implement ReplacesModules)" in capsys.readouterr().err
    assert not (tmp_path / "y").exists()
