"""Fine-tuning strategies (``finetune.strategy``, :mod:`ptmkit.training.strategies`) on the tiny
BERT run (1 block, hidden 32, 2 heads, feed-forward 64): trainable parameters against a count by
hand, LoRA at its start against the base model bit for bit, merged LoRA against unmerged, an
adapter against a NumPy transcription of its formula, and whole fine-tunings whose frozen weights
must come out unchanged."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "classify"
TRAIN, DEV = DATA / "polarity-200-train.txt", DATA / "polarity-200-dev.txt"
HIDDEN, FEEDFORWARD, LAYERS, LABELS = 32, 64, 1, 2
TINY_FINETUNE = ["finetune.epochs=1", "finetune.batch_size=16", "finetune.sequence_length=16", "finetune.max_train_examples=48", "finetune.learning_rate=1e-2"]


def _backbone(run: Path) -> tuple[Any, Any]:
    from ptmkit.plugins import get_registry
    from ptmkit.rundir import RunDir
    from ptmkit.training.finetune import load_backbone

    backbone, config, _, _ = load_backbone(get_registry(), RunDir(run))
    return backbone, config


def _classifier(run: Path, **finetune: Any) -> tuple[Any, Any]:
    from ptmkit.plugins import get_registry
    from ptmkit.training.finetune import build_classifier

    backbone, config = _backbone(run)
    config = dataclasses.replace(config, finetune=dataclasses.replace(config.finetune, **finetune))
    return build_classifier(get_registry(), config, backbone, LABELS), backbone


def _inputs(seed: int = 0, batch: int = 3, length: int = 12) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    padding = np.ones((batch, length), np.int32)
    padding[0, 8:] = 0
    return {"token_ids": rng.integers(5, 600, (batch, length)).astype(np.int32), "segment_ids": np.zeros((batch, length), np.int32), "padding_mask": padding}


def test_trainable_parameters_are_what_each_strategy_trains_counted_by_hand(tiny_pretrained: Path) -> None:
    from ptmkit.training.strategies import parameter_counts

    head = HIDDEN * LABELS + LABELS  # the logits layer; the pooler is the backbone's
    adapter = HIDDEN * 8 + 8 + 8 * HIDDEN + HIDDEN  # down (kernel, bias), up (kernel, bias), m = 8
    layer_norms = 2 * HIDDEN * (1 + 2 * LAYERS)  # the embeddings' and two per block, gamma and beta
    lora = 4 * (HIDDEN + HIDDEN)  # A (inputs, r) and B (r, heads * head_dim), r = 4
    counts = {strategy: parameter_counts(_classifier(tiny_pretrained, strategy=strategy, adapter_size=8, lora_rank=4)[0])
              for strategy in ("full", "features", "adapters", "lora")}
    total = counts["full"]["parameters"]
    assert counts["full"]["trainable_parameters"] == total
    assert counts["features"] == {"parameters": total, "trainable_parameters": head, "trainable_share": round(head / total, 6)}
    assert counts["adapters"]["parameters"] == total + 2 * LAYERS * adapter
    assert counts["adapters"]["trainable_parameters"] == 2 * LAYERS * adapter + layer_norms + head
    assert counts["lora"]["parameters"] == total + 2 * LAYERS * lora  # query and value
    assert counts["lora"]["trainable_parameters"] == 2 * LAYERS * lora + head


def test_lora_starts_as_the_base_model_exactly_and_merges_to_the_same_outputs(tiny_pretrained: Path) -> None:
    from ptmkit.training.strategies import LowRankUpdate, merge_lora, prepare_backbone

    backbone, config = _backbone(tiny_pretrained)
    x = _inputs()
    base = np.asarray(backbone(x)["sequence_output"])
    updates = prepare_backbone(backbone, dataclasses.replace(config.finetune, strategy="lora", lora_rank=4, lora_alpha=16.0))
    assert sorted(u.inner.name for u in updates) == ["query", "value"] and all(isinstance(u, LowRankUpdate) for u in updates)
    assert np.array_equal(np.asarray(backbone(x)["sequence_output"]), base)  # B = 0: bit for bit
    rng = np.random.default_rng(1)
    for update in updates:
        update.lora_b.assign(rng.normal(0, 0.5, update.lora_b.shape).astype("float32"))
    unmerged = np.asarray(backbone(x)["sequence_output"])
    assert np.abs(unmerged - base).max() > 1e-2  # the update does change the model
    query = updates[0] if updates[0].inner.name == "query" else updates[1]
    kernel = np.asarray(query.inner.kernel)
    expected = kernel + (16.0 / 4) * (np.asarray(query.lora_a) @ np.asarray(query.lora_b)).reshape(kernel.shape)
    assert merge_lora(backbone) == 2
    np.testing.assert_allclose(np.asarray(query.inner.kernel), expected, rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.asarray(backbone(x)["sequence_output"]), unmerged, rtol=0, atol=1e-5)
    assert not any(isinstance(layer, LowRankUpdate) for layer in vars(backbone.transformer_layers[0]._self_attention_layer).values())


def test_an_adapter_is_its_formula_and_starts_near_the_identity(tiny_pretrained: Path) -> None:
    from ptmkit.training.strategies import BottleneckAdapter, prepare_backbone

    adapter = BottleneckAdapter(4, init_scale=0.3)
    h = np.random.default_rng(2).normal(size=(2, 5, HIDDEN)).astype("float32")
    out = np.asarray(adapter(h))
    down, up = adapter.down.get_weights(), adapter.up.get_weights()
    z = h @ down[0] + down[1]
    gelu = 0.5 * z * (1 + np.vectorize(__import__("math").erf)(z / np.sqrt(2)))
    np.testing.assert_allclose(out, h + gelu @ up[0] + up[1], rtol=0, atol=1e-5)

    backbone, config = _backbone(tiny_pretrained)
    x = _inputs()
    base = np.asarray(backbone(x)["sequence_output"])
    adapters = prepare_backbone(backbone, dataclasses.replace(config.finetune, strategy="adapters", adapter_size=8))
    assert len(adapters) == 2 * LAYERS
    moved = np.abs(np.asarray(backbone(x)["sequence_output"]) - base).max()
    assert 0 < moved < 1e-3  # weights of deviation 1e-3: near, not at, the identity


def test_a_lora_target_that_names_no_layer_is_refused_with_the_candidates(tiny_pretrained: Path) -> None:
    from ptmkit.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        _classifier(tiny_pretrained, strategy="lora", lora_targets=["query", "qurey"])
    assert str(caught.value) == (
        "finetune.lora_targets: 'qurey' matches no dense layer of the backbone's blocks; candidates: "
        "attention_output, feedforward_intermediate_dense, feedforward_output_dense, key, query, value"
    )


def _weights(model: Any) -> dict[str, np.ndarray]:
    return {v.path: np.asarray(v) for v in model.weights}


#: Layer-wise learning rates ride along with one strategy (any strategy takes them).
DECAY = {"adapters": ["finetune.layer_lr_decay=0.5"]}


@pytest.mark.parametrize("strategy", ["features", "adapters", "lora"])
def test_fine_tuning_changes_only_what_the_strategy_trains(tiny_pretrained: Path, tmp_path: Path, strategy: str) -> None:
    from ptmkit.training.finetune import finetune, load_classifier

    out = tmp_path / strategy
    metrics = finetune(tiny_pretrained, TRAIN, DEV, out, overrides=[*TINY_FINETUNE, f"finetune.strategy={strategy}", "finetune.adapter_size=8", "finetune.lora_rank=4", *DECAY.get(strategy, [])])
    tuned, _, _, _ = load_classifier(out)
    backbone, _ = _backbone(tiny_pretrained)
    before, after = _weights(backbone), _weights(tuned)
    changed = {path for path in before if not np.array_equal(before[path], after[path])}
    if strategy == "adapters":  # of the pre-trained weights only the layer norms train
        assert changed and all("layer_norm" in path for path in changed), sorted(changed)
    else:  # features and LoRA change no pre-trained weight
        assert changed == set()
    added = {path: value for path, value in after.items() if path not in before and "logits" not in path}
    assert len(added) == {"features": 0, "adapters": 2 * LAYERS * 4, "lora": 2 * LAYERS * 2}[strategy]
    if strategy == "lora":
        assert all(np.abs(value).max() > 0 for path, value in added.items() if path.endswith("lora_b"))  # B, 0 at the start, trained
    assert metrics["strategy"] == strategy and metrics["trainable_parameters"] == {"features": 66, "adapters": 2 * 552 + 192 + 66, "lora": 2 * 256 + 66}[strategy]
    assert json.loads((out / "metrics.json").read_text())["trainable_share"] == metrics["trainable_share"] < 0.05


@pytest.fixture(scope="module")
def lora_run(tiny_pretrained: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ptmkit.training.finetune import finetune

    out = tmp_path_factory.mktemp("lora") / "run"
    finetune(tiny_pretrained, TRAIN, DEV, out, overrides=[*TINY_FINETUNE, "finetune.strategy=lora", "finetune.lora_rank=4", "finetune.lora_targets=query,value,attention_output"])
    return out


def test_a_lora_run_exports_merged_and_unmerged_to_the_same_logits(lora_run: Path, tmp_path: Path) -> None:
    from ptmkit.exporting import export_run
    from ptmkit_export import Predictor

    unmerged = export_run(lora_run, tmp_path / "unmerged")
    merged = export_run(lora_run, tmp_path / "merged", merge_lora=True)
    assert (unmerged["lora"], merged["lora"]) == ("unmerged", "merged")
    assert max(unmerged["variants"]["fp32"]["parity_max_abs_diff"].values()) <= 1e-4  # ONNX against Keras, unmerged
    texts = [line.partition(" ")[2] for line in DEV.read_text(encoding="utf-8").splitlines()]
    a, b = Predictor(tmp_path / "unmerged", variant="fp32").logits(texts), Predictor(tmp_path / "merged", variant="fp32").logits(texts)
    np.testing.assert_allclose(b, a, rtol=0, atol=1e-5)
    import onnx

    shapes = {name: sorted(tuple(i.dims) for i in onnx.load(str(tmp_path / name / "model.onnx")).graph.initializer) for name in ("unmerged", "merged")}
    assert not any(4 in dims for dims in shapes["merged"])  # no factor of rank 4 left in the merged graph
    assert shapes["unmerged"] == shapes["merged"]  # tf2onnx folds the constant W + (alpha/r) A B of the unmerged one too


def test_merge_lora_on_a_run_without_lora_is_refused_in_one_line(tiny_pretrained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Through the CLI: ``--strategy`` (an unknown one refused in one line), then ``export --merge-lora``."""
    from ptmkit.cli import main

    run = tmp_path / "features"
    args = ["finetune", str(tiny_pretrained), "--train", str(TRAIN), "--dev", str(DEV), "--out", str(run), *(f"--set={item}" for item in TINY_FINETUNE)]
    assert main([*args, "--strategy", "lorra"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == "error: --strategy must be one of full, features, adapters, lora, got 'lorra'"
    assert main([*args, "--strategy", "features"]) == 0
    assert json.loads((run / "metrics.json").read_text())["trainable_parameters"] == HIDDEN * LABELS + LABELS
    capsys.readouterr()
    assert main(["export", str(run), "--merge-lora"]) != 0
    assert capsys.readouterr().err.strip() == f"error: --merge-lora: {run} was not fine-tuned with finetune.strategy = 'lora'; there is nothing to merge"


def test_an_adapter_run_exports_and_quantizes_like_any_other(tiny_pretrained: Path, tmp_path: Path) -> None:
    from ptmkit.data.tokenization import encode_texts
    from ptmkit.exporting import export_run
    from ptmkit.plugins import get_registry
    from ptmkit.training.finetune import finetune, load_classifier
    from ptmkit_export import Predictor

    run = tmp_path / "adapters"
    finetune(tiny_pretrained, TRAIN, DEV, run, overrides=[*TINY_FINETUNE, "finetune.strategy=adapters", "finetune.adapter_size=8"])
    manifest = export_run(run, tmp_path / "export", int8=True)
    assert max(manifest["variants"]["fp32"]["parity_max_abs_diff"].values()) <= 1e-4
    assert manifest["variants"]["int8"]["agreement_ok"] is True  # its speed on a 32-wide model is noise: not asserted
    texts = [line.partition(" ")[2] for line in DEV.read_text(encoding="utf-8").splitlines()][:8]
    model, config, tokenizer, _ = load_classifier(run)
    family = get_registry().family("bert")
    x = encode_texts(tokenizer, texts, config.finetune.sequence_length, family.inputs, family.special_tokens(tokenizer).padding_id)
    np.testing.assert_allclose(Predictor(tmp_path / "export", variant="fp32").logits(texts), np.asarray(model.predict(x, verbose=0)), rtol=0, atol=1e-4)


@pytest.mark.parametrize("family", ["roberta", "gpt"])
def test_adapters_and_lora_fit_other_families_blocks(family: str) -> None:
    """The same code on an encoder of another family and on a decoder (keras-hub's
    TransformerDecoder, causal), counted by hand from their configs; an output at the start of
    LoRA is the base model's bit for bit."""
    import dataclasses as dc

    import keras

    from ptmkit.config import FinetuneConfig
    from ptmkit.plugins import get_registry
    from ptmkit.training.strategies import apply_strategy, parameter_counts, prepare_backbone

    spec = get_registry().family(family)
    config = dc.replace(spec.config_class(), num_layers=2, hidden_dim=32, num_heads=2, intermediate_dim=64, vocabulary_size=100, max_sequence_length=16)
    h, layers = config.hidden_dim, config.num_layers
    expected = {"adapters": 2 * layers * (2 * h * 8 + 8 + h) + 2 * h * (1 + 2 * layers), "lora": 2 * layers * 4 * (h + h)}
    for strategy, trainable in expected.items():
        keras.utils.set_random_seed(0)
        backbone = spec.build_backbone(config)
        x = {name: np.ones((2, 8), np.int32) for name in spec.input_names}
        base = np.asarray(backbone(x)["sequence_output"])
        ft = FinetuneConfig(strategy=strategy, adapter_size=8, lora_rank=4)
        added = prepare_backbone(backbone, ft)
        apply_strategy(backbone, ft, added)
        assert parameter_counts(backbone)["trainable_parameters"] == trainable, strategy
        if strategy == "lora":
            assert np.array_equal(np.asarray(backbone(x)["sequence_output"]), base)


def test_layer_wise_learning_rates_scale_each_variables_step_and_decay(tiny_pretrained: Path) -> None:
    """ULMFiT's discriminative fine-tuning / ELECTRA's layer-wise decay: the factors of the tiny
    BERT (1 block) by hand, and an AdamW step of a variable at factor 0.25 a quarter of the same
    variable's step at factor 1 (the decoupled weight decay included)."""
    import keras

    from ptmkit.training.schedule import AdamW
    from ptmkit.training.strategies import layer_lr_multipliers

    backbone, _ = _backbone(tiny_pretrained)
    factors = layer_lr_multipliers(backbone, 0.5)
    assert factors.keys() == {v.path for v in backbone.weights}
    by_value: dict[float, set[str]] = {}
    for path, factor in factors.items():
        by_value.setdefault(factor, set()).add(path.split("/")[0])
    assert by_value == {0.25: {"token_embedding", "position_embedding", "segment_embedding", "embeddings_layer_norm"}, 0.5: {"transformer_layer_0", "pooled_dense"}}

    start = np.array([1.0, -2.0, 3.0], "float32")
    full, quarter = keras.Variable(start, name="full"), keras.Variable(start, name="quarter")
    optimizer = AdamW(learning_rate=0.1, weight_decay=0.01, learning_rate_multipliers={"quarter": 0.25})
    gradient = np.array([0.5, 0.1, -0.3], "float32")
    for _ in range(2):
        optimizer.apply([gradient, gradient], [full, quarter])
    moved_full, moved_quarter = np.asarray(full) - start, np.asarray(quarter) - start
    assert np.abs(moved_full).min() > 0.1
    np.testing.assert_allclose(moved_quarter, 0.25 * moved_full, rtol=2e-3)  # the decay term is second order: w shrinks by lr f wd


def test_layer_lr_decay_on_a_backbone_without_blocks_is_refused(tiny_pretrained: Path) -> None:
    import keras

    from ptmkit.errors import ConfigError
    from ptmkit.training.strategies import layer_lr_multipliers

    inputs = keras.Input((4,))
    with pytest.raises(ConfigError, match=r"^finetune.layer_lr_decay = 0.8 works block by block; the backbone has no transformer blocks"):
        layer_lr_multipliers(keras.Model(inputs, keras.layers.Dense(2)(inputs)), 0.8)


@pytest.mark.parametrize(("strategy", "refusal"), [("adapters", "the backbone has no transformer block"), ("lora", "matches no dense layer")])
def test_a_backbone_without_blocks_is_refused_before_freeze_backbone_is_blamed(strategy: str, refusal: str) -> None:
    """ELMo's classifier head freezes its backbone by default; telling the user to unfreeze it for
    adapters or LoRA would only lead to the refusal that the backbone has nothing to adapt."""
    import keras

    from ptmkit.config import FinetuneConfig
    from ptmkit.errors import ConfigError
    from ptmkit.heads.classification import ClassificationConfig
    from ptmkit.training.strategies import prepare_backbone

    inputs = keras.Input((4,))
    backbone = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    with pytest.raises(ConfigError, match=refusal):
        prepare_backbone(backbone, FinetuneConfig(strategy=strategy), ClassificationConfig(freeze_backbone=True))


def test_features_read_a_chosen_layer_or_a_mix_of_a_transformers_layers(tiny_pretrained: Path) -> None:
    """``head.layers`` on BERT, which has no ``hidden_states`` output: the embeddings then each
    block's output, as Hugging Face's ``output_hidden_states``; index -1 is ``sequence_output``,
    index 0 the embeddings (the input of block 0), and a mix learns over both."""
    import keras

    from ptmkit.errors import ConfigError
    from ptmkit.heads.classification import ClassificationConfig, SequenceClassification
    from ptmkit.training.strategies import hidden_states_model

    backbone, _ = _backbone(tiny_pretrained)
    x = _inputs()
    states = np.asarray(hidden_states_model(backbone)(x))
    assert states.shape == (3, 1 + LAYERS, 12, HIDDEN)
    np.testing.assert_array_equal(states[:, -1], np.asarray(backbone(x)["sequence_output"]))
    block = backbone.transformer_layers[0]
    np.testing.assert_allclose(np.asarray(block(keras.ops.convert_to_tensor(states[:, 0]), padding_mask=x["padding_mask"])), states[:, 1], atol=1e-5)

    def pooled(layers: str) -> np.ndarray:
        head = SequenceClassification().build(backbone, LABELS, ClassificationConfig(layers=layers, pooling="mean", freeze_backbone=True))
        return np.asarray(keras.Model(head.inputs, head.get_layer("head_dropout").input)(x))

    mask = x["padding_mask"][..., None].astype("float32")
    for layers, index in (("0", 0), ("-1", 1)):
        np.testing.assert_allclose(pooled(layers), (states[:, index] * mask).sum(1) / mask.sum(1), atol=1e-5)
    np.testing.assert_allclose(pooled("mix"), (states.mean(1) * mask).sum(1) / mask.sum(1), atol=1e-5)  # w = 0: equal weights, gamma 1
    with pytest.raises(ConfigError, match=r"^head.layers = 2: the backbone has 2 layers \(the embeddings and each block: 0 to 1, or -1 to -2\)$"):
        pooled("2")


def test_gradual_unfreezing_holds_each_block_until_its_epoch(tiny_pretrained: Path, tmp_path: Path) -> None:
    """ULMFiT's gradual unfreezing: the first steps by hand on the tiny BERT (1 block, so the
    block and the pooler from epoch 1, the embeddings from epoch 2); an AdamW variable held to step
    2 neither steps nor decays before it; one epoch of fine-tuning leaves the backbone untouched."""
    import keras

    from ptmkit.training.finetune import finetune, load_classifier
    from ptmkit.training.schedule import AdamW
    from ptmkit.training.strategies import unfreeze_steps

    backbone, _ = _backbone(tiny_pretrained)
    starts = {path.split("/")[0]: step for path, step in unfreeze_steps(backbone, 3).items()}
    assert starts == {"token_embedding": 6, "position_embedding": 6, "segment_embedding": 6, "embeddings_layer_norm": 6, "transformer_layer_0": 3, "pooled_dense": 3}

    start = np.array([1.0, -2.0], "float32")
    now, later = keras.Variable(start, name="now"), keras.Variable(start, name="later")
    optimizer = AdamW(learning_rate=0.1, weight_decay=0.1, unfreeze_steps={"later": 2})
    gradient = np.array([0.5, -0.5], "float32")
    for step in range(3):
        optimizer.apply([gradient, gradient], [now, later])
        assert np.array_equal(np.asarray(later), start) == (step < 2), step
    assert not np.array_equal(np.asarray(now), start)

    out = tmp_path / "gradual"
    finetune(tiny_pretrained, TRAIN, DEV, out, overrides=[*TINY_FINETUNE, "finetune.gradual_unfreezing=true"])
    before, after = _weights(backbone), _weights(load_classifier(out)[0])
    assert {path for path in before if not np.array_equal(before[path], after[path])} == set()
    assert [path for path in after if path not in before] == ["logits/kernel", "logits/bias"]
