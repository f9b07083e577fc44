"""Layer-to-layer distillation (``ptmkit finetune --teacher RUN --distill tinybert|minilm``): what
BERT's :class:`~ptmkit.contract.ExposesAttention` returns against keras-hub's own attention, the
TinyBERT and MiniLM losses against a NumPy computation of their formulas (TinyBERT's
``task_distill.py``; MiniLM's eqs. 5-7), a student whose intermediate losses fall, and the
refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "classify"
TRAIN, DEV = DATA / "polarity-200-train.txt", DATA / "polarity-200-dev.txt"
SHORT = ["--set", "finetune.sequence_length=32", "--set", "finetune.learning_rate=1e-2", "--set", "finetune.max_train_examples=32", "--set", "finetune.batch_size=16"]


def _softmax(z: np.ndarray) -> np.ndarray:
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def _masked_log_softmax(scores: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    z = np.where(allowed, scores, -np.inf)
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def test_bert_exposes_the_scores_values_and_states_its_attention_computes() -> None:
    from keras import ops

    from ptmkit_bert import BertFamily
    from ptmkit_bert.config import BertConfig

    family = BertFamily()
    backbone = family.build_backbone(BertConfig(vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=8, intermediate_dim=16, max_sequence_length=16))
    rng = np.random.default_rng(0)
    x = {"token_ids": rng.integers(0, 50, (3, 7)).astype("int32"), "segment_ids": rng.integers(0, 2, (3, 7)).astype("int32"), "padding_mask": np.ones((3, 7), "int32")}
    x["padding_mask"][1, 5:] = 0
    x["padding_mask"][2, 3:] = 0
    out = family.attention_internals(backbone)(x)
    assert len(out["hidden_states"]) == 3 and len(out["attention_scores"]) == 2
    np.testing.assert_allclose(out["hidden_states"][-1], backbone(x)["sequence_output"], atol=1e-6)
    mask = np.asarray(out["attention_mask"])
    np.testing.assert_array_equal(mask, np.broadcast_to(x["padding_mask"][:, None, :], (3, 7, 7)))
    for block, layer in enumerate(backbone.transformer_layers):
        states = out["hidden_states"][block]
        output, probabilities = layer(states, padding_mask=x["padding_mask"], return_attention_scores=True)  # keras' softmax probabilities
        np.testing.assert_allclose(out["hidden_states"][block + 1], output, atol=1e-6)
        recomputed = np.exp(_masked_log_softmax(np.asarray(out["attention_scores"][block]), mask[:, None] > 0))
        np.testing.assert_allclose(recomputed, probabilities, atol=1e-5)
        # the values: the attention layer's output is its output projection of probabilities @ values
        attention = layer._self_attention_layer
        context = np.einsum("bhqk,bhkd->bqhd", recomputed, np.asarray(out["values"][block]))
        expected = attention(states, states, attention_mask=ops.convert_to_tensor(mask > 0))
        np.testing.assert_allclose(attention._output_dense(context), expected, atol=1e-5)


def _internals(rng: np.random.Generator, blocks: int, width: int, heads: int, head_dim: int, padding: np.ndarray) -> dict:
    batch, sequence = padding.shape
    return {
        "hidden_states": [rng.normal(size=(batch, sequence, width)).astype("float32") for _ in range(blocks + 1)],
        "attention_scores": [rng.normal(size=(batch, heads, sequence, sequence)).astype("float32") * 2 for _ in range(blocks)],
        "values": [rng.normal(size=(batch, heads, sequence, head_dim)).astype("float32") for _ in range(blocks)],
        "attention_mask": np.broadcast_to(padding[:, None, :], (batch, sequence, sequence)).astype("float32"),
    }


def _padding() -> np.ndarray:
    padding = np.ones((2, 5), "float32")
    padding[1, 3:] = 0
    return padding


def test_the_tinybert_losses_are_task_distills_mse_sums_under_the_uniform_mapping() -> None:
    from keras import ops

    from ptmkit.training.distillation import teacher_layer_step, tinybert_losses

    rng, padding = np.random.default_rng(1), _padding()
    student, teacher = _internals(rng, 2, 3, 2, 4, padding), _internals(rng, 4, 5, 2, 6, padding)
    w, b = rng.normal(size=(3, 5)).astype("float32"), rng.normal(size=5).astype("float32")
    step = teacher_layer_step(2, 4, "tinybert")
    losses = tinybert_losses(student, teacher, lambda h: ops.matmul(ops.convert_to_tensor(h), w) + b, step)
    # task_distill.py: reps[i * k] for i in 0..M through fit_dense, atts[i * k + k - 1], scores of masked keys (-10000 added) zeroed
    masked = padding[:, None, None, :] == 0
    reps = [np.mean((student["hidden_states"][i] @ w + b - teacher["hidden_states"][i * 2]) ** 2) for i in range(3)]
    atts = [
        np.mean((np.where(masked, 0.0, student["attention_scores"][i]) - np.where(masked, 0.0, teacher["attention_scores"][i * 2 + 1])) ** 2)
        for i in range(2)
    ]
    got = {name: float(ops.convert_to_numpy(value)) for name, value in losses.items()}
    assert got == pytest.approx({"embeddings": reps[0], "hidden_states": reps[1] + reps[2], "attention": sum(atts)}, rel=1e-5)


def test_the_minilm_losses_are_per_head_kl_of_attention_and_value_relations() -> None:
    from keras import ops

    from ptmkit.training.distillation import minilm_losses

    rng, padding = np.random.default_rng(2), _padding()
    student, teacher = _internals(rng, 1, 3, 2, 4, padding), _internals(rng, 3, 5, 2, 6, padding)  # widths and depths differ

    def kl(t_scores: np.ndarray, s_scores: np.ndarray) -> float:
        allowed = padding[:, None, None, :] > 0
        log_t, log_s = _masked_log_softmax(t_scores, allowed), _masked_log_softmax(s_scores, allowed)
        with np.errstate(invalid="ignore"):  # -inf - -inf on masked keys, dropped
            rows = np.where(allowed, np.exp(log_t) * (log_t - log_s), 0.0).sum(-1)  # (batch, heads, queries)
        per_example = [rows[b][:, padding[b] > 0].mean() for b in range(2)]  # 1 / (A_h |x|) sum over heads and tokens
        return float(np.mean(per_example))

    def relation(v: np.ndarray) -> np.ndarray:
        return v @ np.swapaxes(v, -1, -2) / np.sqrt(v.shape[-1])

    got = {name: float(ops.convert_to_numpy(value)) for name, value in minilm_losses(student, teacher).items()}
    expected = {
        "attention": kl(teacher["attention_scores"][-1], student["attention_scores"][-1]),
        "value_relation": kl(relation(teacher["values"][-1]), relation(student["values"][-1])),
    }
    assert got == pytest.approx(expected, rel=1e-5)
    assert expected["attention"] > 0.05
    same = minilm_losses(student, {**student})
    assert float(ops.convert_to_numpy(same["attention"])) == pytest.approx(0.0, abs=1e-6)


def test_tinyberts_prediction_loss_is_the_soft_cross_entropy_at_t() -> None:
    import keras

    from ptmkit.training.distillation import DistillationLoss, distillation_targets

    rng = np.random.default_rng(3)
    student, teacher, labels = rng.normal(size=(4, 3)) * 2, rng.normal(size=(4, 3)) * 2, rng.integers(0, 3, 4)
    soft = -(_softmax(teacher / 2.0) * np.log(_softmax(student / 2.0))).sum(-1)
    hard = -np.log(_softmax(student))[np.arange(4), labels]
    loss = DistillationLoss(2.0, 0.75, soft="ce")(distillation_targets(labels, teacher), student.astype("float32"))
    assert float(keras.ops.convert_to_numpy(loss)) == pytest.approx(np.mean(0.75 * soft + 0.25 * hard), rel=1e-5)


def test_the_two_stages_switch_the_prediction_and_intermediate_losses_off_in_turn() -> None:
    import keras
    import tensorflow as tf

    from ptmkit.training.distillation import DistillationLoss, LayerDistillation, distillation_targets, stage_scales
    from ptmkit_bert import BertFamily
    from ptmkit_bert.config import BertConfig

    assert [stage_scales(t, 2) for t in (0, 1, 2, 9)] == [(1.0, 0.0), (1.0, 0.0), (0.0, 1.0), (0.0, 1.0)] and stage_scales(3, 0) == (1.0, 1.0)
    family = BertFamily()
    student = family.build_backbone(BertConfig(vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16, max_sequence_length=16))
    teacher = family.build_backbone(BertConfig(vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=12, intermediate_dim=16, max_sequence_length=16))
    inputs = {name: keras.Input((None,), dtype="int32", name=name) for name in ("token_ids", "segment_ids", "padding_mask")}
    head = keras.layers.Dense(2, name="head")
    classifier = keras.Model(inputs, head(student(inputs)["pooled_output"]))
    model = LayerDistillation(classifier, family.attention_internals(student), family.attention_internals(teacher), "tinybert", {n: n for n in inputs}, 2)
    rng = np.random.default_rng(4)
    x = {"token_ids": rng.integers(0, 50, (2, 6)).astype("int32"), "segment_ids": np.zeros((2, 6), "int32"), "padding_mask": np.ones((2, 6), "int32")}
    y = distillation_targets(np.array([0, 1]), rng.normal(size=(2, 2)))

    def gradients(intermediate: float, prediction: float) -> tuple[float, float, float]:
        model.intermediate_scale.assign(intermediate)
        model.prediction_scale.assign(prediction)
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            added = sum(model.losses)
            loss = DistillationLoss(2.0, 1.0, soft="ce")(y, logits) + added
        head_gradient, projection_gradient = tape.gradient(loss, [head.kernel, model.projection.kernel])
        return float(added), float(np.abs(head_gradient).sum()), float(np.abs(projection_gradient).sum())

    added, head_gradient, projection_gradient = gradients(1.0, 0.0)  # stage 1: the head learns nothing
    assert added > 0 and head_gradient == 0 and projection_gradient > 0
    added, head_gradient, projection_gradient = gradients(0.0, 1.0)  # stage 2: the intermediate losses are off
    assert added == 0 and head_gradient > 0 and projection_gradient == 0
    # MiniLM's training model on the same pair (other widths and depths, two heads in each last block): no projection
    minilm = LayerDistillation(classifier, family.attention_internals(student), family.attention_internals(teacher), "minilm", {n: n for n in inputs}, 2)
    measured = minilm.measure(x)
    assert minilm.projection is None and set(measured) == {"attention", "value_relation"} and all(v > 0 for v in measured.values())


def test_the_layer_mapping_needs_a_multiple() -> None:
    from ptmkit.errors import ConfigError
    from ptmkit.training.distillation import teacher_layer_step

    assert teacher_layer_step(4, 12, "tinybert") == 3
    with pytest.raises(ConfigError, match=r"^--distill minilm: the teacher's 5 blocks are not a multiple of the student's 2 "):
        teacher_layer_step(2, 5, "minilm")


@pytest.fixture(scope="module")
def pair(tiny_pretrained: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A teacher fine-tuned from the tiny pre-trained BERT, and that run as the student (one
    vocabulary; the mapping of more teacher blocks is the NumPy test's)."""
    from ptmkit.training.finetune import finetune

    out = tmp_path_factory.mktemp("layer-distillation") / "teacher"
    finetune(tiny_pretrained, TRAIN, DEV, out, overrides=["finetune.epochs=1", "finetune.sequence_length=32", "finetune.learning_rate=1e-3", "finetune.max_train_examples=64"])
    return out, tiny_pretrained


def test_a_tinybert_student_reduces_its_intermediate_losses(pair: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ptmkit.cli import main

    teacher, student = pair
    out = tmp_path / "tinybert"
    args = ["finetune", str(student), "--train", str(TRAIN), "--dev", str(DEV), "--out", str(out), "--teacher", str(teacher), "--distill", "tinybert"]
    stages = ["--set", "finetune.epochs=3", "--set", "finetune.distill_intermediate_epochs=2", "--set", "finetune.distill_alpha=1.0"]
    assert main([*args, *SHORT, *stages]) == 0
    assert "two stages: intermediate losses alone for steps 1..4, then the prediction layer alone" in capsys.readouterr().err
    losses = json.loads((out / "metrics.json").read_text())["intermediate_losses"]
    assert losses["method"] == "tinybert" and set(losses["before"]) == {"embeddings", "hidden_states", "attention"}
    assert sum(losses["after"].values()) < 0.8 * sum(losses["before"].values())
    assert 'distill = "tinybert"' in (out / "config.toml").read_text()
    # the run is an ordinary one-block classifier: no projection, no teacher in its weights
    from ptmkit.training.finetune import load_classifier

    model, config, _, _ = load_classifier(out)
    assert config.model.num_layers == 1 and len(model.weights) == len(load_classifier(teacher)[0].weights) and not any("distill_projection" in v.path for v in model.weights)


def test_layer_distillation_refusals_are_one_line(
    pair: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tokenizers

    from ptmkit.cli import main
    from ptmkit.contract import ExposesAttention
    from ptmkit_bert import BertFamily

    teacher, student = pair
    args = ["finetune", str(student), "--train", str(TRAIN), "--dev", str(DEV), "--out", str(tmp_path / "s")]
    assert main([*args, "--distill", "tinybert"]) == 2
    assert capsys.readouterr().err.strip() == "error: --distill tinybert (finetune.distill) distils a teacher's layers into the student; give --teacher FINE_TUNED_RUN"
    assert main([*args, "--teacher", str(teacher), "--distill", "patience"]) == 2
    assert capsys.readouterr().err.strip() == "error: --distill must be one of logits, tinybert, minilm, got 'patience'"
    other = tmp_path / "other-vocabulary"
    shutil.copytree(teacher, other)
    tokenizer = tokenizers.Tokenizer.from_file(str(other / "tokenizer.json"))
    tokenizer.add_tokens(["zyzzyva"])
    tokenizer.save(str(other / "tokenizer.json"))
    assert main([*args, "--teacher", str(other), "--distill", "minilm"]) == 2
    size = tokenizer.get_vocab_size()
    assert capsys.readouterr().err.strip() == (
        f"error: --teacher {other}: its vocabulary ({size:,} tokens) differs from the student's ({size - 1:,}); --distill minilm runs the "
        "teacher on the student's token ids, so both need one tokenizer (--distill logits takes any)"
    )
    monkeypatch.delattr(BertFamily, "attention_internals")
    ExposesAttention._abc_caches_clear()  # isinstance on a protocol of methods caches by class
    try:
        assert main([*args, "--teacher", str(teacher), "--distill", "tinybert"]) == 2
    finally:
        monkeypatch.undo()
        ExposesAttention._abc_caches_clear()
    assert capsys.readouterr().err.strip() == (
        "error: --distill tinybert: the student's family 'bert' does not expose its blocks' states and attention "
        "(it does not implement ExposesAttention.attention_internals); --distill logits works with any family"
    )
    assert not (tmp_path / "s").exists()
