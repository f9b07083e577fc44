"""ELECTRA's replaced-token detection (``rtd``): corruption statistics, the loss, the saved
backbone, a run end to end and its bad input.

References: Clark et al. 2020 (ELECTRA), section 2 (loss ``gen + lambda * disc``, lambda = 50; a
sample equal to the original counts as original) and the reference implementation
(``pretrain_helpers.mask``: 15% of tokens, 85% of them ``[MASK]``; ``get_generator_config``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from tinyconfig import REPO, TINY

from ptmkit.cli import main
from ptmkit.contract import SpecialTokens
from ptmkit.objectives.rtd import ReplacedTokenDetection, ReplacedTokenDetectionConfig

SPECIALS = SpecialTokens(pad=0, unk=1, cls=2, sep=3, mask=4)
VOCABULARY = 50
POLARITY_TRAIN = REPO / "data" / "classify" / "polarity-200-train.txt"
POLARITY_DEV = REPO / "data" / "classify" / "polarity-200-dev.txt"


def packed_batch(rng: np.random.Generator, rows: int = 64, length: int = 128) -> dict[str, np.ndarray]:
    """``[CLS] tokens [SEP] [PAD]...`` rows of random lengths, ids in ``[5, VOCABULARY)``."""
    token_ids = np.zeros((rows, length), np.int32)
    padding = np.zeros((rows, length), np.int32)
    for row in range(rows):
        real = int(rng.integers(length // 2, length + 1))
        token_ids[row, :real] = rng.integers(5, VOCABULARY, size=real)
        token_ids[row, 0], token_ids[row, real - 1] = SPECIALS["cls"], SPECIALS["sep"]
        padding[row, :real] = 1
    return {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids), "padding_mask": padding}


def corrupt(batch: dict[str, np.ndarray], rng: np.random.Generator, logits: np.ndarray) -> tuple[dict, np.ndarray, np.ndarray]:
    """``prepare`` then the model's sampling and replacement layer on ``logits``
    ``(rows, predictions, VOCABULARY)``: ``(inputs, corrupted, is_replaced)`` as NumPy arrays."""
    from ptmkit.objectives.rtd_layers import SampleAndReplace

    inputs, _, _ = ReplacedTokenDetection().prepare(batch, rng, ReplacedTokenDetectionConfig(), SPECIALS, VOCABULARY)
    layer = SampleAndReplace(seed=int(rng.integers(1 << 30)))
    corrupted, is_replaced = layer(inputs["token_ids"], logits, inputs["mask_positions"], inputs["rtd_mask_ids"], inputs["rtd_mask_weights"])
    return inputs, np.asarray(corrupted), np.asarray(is_replaced)


def test_corruption_statistics_on_many_draws() -> None:
    rng = np.random.default_rng(0)
    selected = candidates = masked = 0
    agreeing_samples = 0
    for _ in range(20):  # 1,280 sequences, about 14,000 replaced positions
        batch = packed_batch(rng)
        original = batch["token_ids"]
        predictions = math.ceil(0.15 * original.shape[1])
        # A uniform generator: a sample equals the original 1 time in VOCABULARY (labelled original).
        logits = np.zeros((len(original), predictions, VOCABULARY), np.float32)
        inputs, corrupted, is_replaced = corrupt(batch, rng, logits)
        positions, weights, ids = inputs["mask_positions"], inputs["rtd_mask_weights"], inputs["rtd_mask_ids"]
        real = batch["padding_mask"].astype(bool) & ~np.isin(original, SPECIALS.structural())
        hit = np.zeros_like(real)
        for row in range(len(original)):
            chosen = positions[row, weights[row] > 0]
            hit[row, chosen] = True
            assert np.array_equal(ids[row, weights[row] > 0], original[row, chosen])
        # 15% of the real tokens of each row (BERT's rounding), never a special or padding token.
        assert not (hit & ~real).any()
        per_row = hit.sum(1) / real.sum(1)
        assert np.abs(per_row - 0.15).max() <= 0.5 / real.sum(1).min() + 1e-9
        selected += hit.sum()
        candidates += real.sum()
        masked += (inputs["token_ids"][hit] == SPECIALS["mask"]).sum()
        # Tokens change only at selected positions; the labels mark exactly the changed ones.
        assert np.array_equal(corrupted[~hit], original[~hit])
        assert np.array_equal(is_replaced.astype(bool), corrupted != original)
        agreeing_samples += (hit & (corrupted == original)).sum()
    assert selected / candidates == pytest.approx(0.15, abs=0.002)
    assert masked / selected == pytest.approx(0.85, abs=0.015)  # the rest keep their token (ELECTRA)
    # Uniform samples over 50 ids equal the original 1 time in 50.
    assert agreeing_samples / selected == pytest.approx(1 / VOCABULARY, abs=0.006)


def test_a_sample_equal_to_the_original_counts_as_original() -> None:
    rng = np.random.default_rng(1)
    batch = packed_batch(rng, rows=16)
    predictions = math.ceil(0.15 * 128)
    inputs, _, _ = ReplacedTokenDetection().prepare(batch, np.random.default_rng(2), ReplacedTokenDetectionConfig(), SPECIALS, VOCABULARY)
    logits = np.full((16, predictions, VOCABULARY), -1e4, np.float32)
    sure = np.arange(predictions) % 2 == 0  # a certain generator: the original at even slots, id 5 or 6 at odd
    rows, slots = np.nonzero(np.broadcast_to(sure, (16, predictions)))
    logits[rows, slots, inputs["rtd_mask_ids"][rows, slots]] = 0.0
    other = np.where(inputs["rtd_mask_ids"] == 5, 6, 5)
    rows, slots = np.nonzero(np.broadcast_to(~sure, (16, predictions)))
    logits[rows, slots, other[rows, slots]] = 0.0
    _, corrupted, is_replaced = corrupt(batch, np.random.default_rng(2), logits)
    weights = inputs["rtd_mask_weights"] > 0
    for row in range(16):
        at = inputs["mask_positions"][row]
        assert (is_replaced[row, at[weights[row] & sure]] == 0).all()
        assert (is_replaced[row, at[weights[row] & ~sure]] == 1).all()
        assert np.array_equal(corrupted[row, at[weights[row] & ~sure]], other[row, weights[row] & ~sure])
    assert is_replaced.sum() == (weights & ~sure).sum()


def test_gumbel_samples_follow_the_softmax() -> None:
    import keras

    from ptmkit.objectives.rtd_layers import gumbel_sample

    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05], np.float32))
    draws = np.asarray(gumbel_sample(np.broadcast_to(logits, (40_000, 4)), 1.0, keras.random.SeedGenerator(3)))
    frequencies = np.bincount(draws, minlength=4) / draws.size
    np.testing.assert_allclose(frequencies, [0.5, 0.3, 0.15, 0.05], atol=0.01)  # 4 sigma at n = 40,000
    hot = np.asarray(gumbel_sample(np.broadcast_to(logits, (40_000, 4)), 0.25, keras.random.SeedGenerator(3)))
    expected = np.exp(logits / 0.25) / np.exp(logits / 0.25).sum()
    np.testing.assert_allclose(np.bincount(hot, minlength=4) / hot.size, expected, atol=0.01)


def test_discriminator_loss_is_binary_cross_entropy() -> None:
    import keras

    from ptmkit.objectives.rtd import bce

    rng = np.random.default_rng(4)
    logit = rng.normal(0, 3, size=(4, 9)).astype(np.float32)
    label = (rng.random((4, 9)) < 0.3).astype(np.float32)
    reference = keras.losses.binary_crossentropy(label[..., None], logit[..., None], from_logits=True)
    np.testing.assert_allclose(np.asarray(bce(None, np.stack([logit, label], -1))), np.asarray(reference), rtol=1e-5, atol=1e-6)


def test_bert_generator_configs_are_electras() -> None:
    """google/electra-base-generator and -large-generator (Hugging Face config.json): hidden 256,
    4 heads, intermediate 1024, from discriminators of hidden 768 (ratio 1/3) and 1024 (1/4)."""
    from ptmkit_bert import BertConfig, BertFamily

    for hidden, heads, ratio in ((768, 12, 1 / 3), (1024, 16, 0.25)):
        scaled = BertFamily().scale_config(BertConfig(hidden_dim=hidden, num_heads=heads, intermediate_dim=4 * hidden, num_layers=12), ratio)
        assert (scaled.hidden_dim, scaled.num_heads, scaled.intermediate_dim, scaled.num_layers) == (256, 4, 1024, 12)
    tiny = BertFamily().scale_config(BertConfig(hidden_dim=32, num_heads=2, intermediate_dim=64), 0.25)
    assert (tiny.hidden_dim, tiny.num_heads, tiny.intermediate_dim) == (8, 1, 32)


def test_loss_is_generator_plus_lambda_discriminator(tiny_corpus: Path, tmp_path: Path) -> None:
    assert ReplacedTokenDetectionConfig().discriminator_weight == 50.0  # the paper's lambda
    weight = 10.0  # another lambda, to see that the key is the one applied
    metrics = rtd_run(tiny_corpus, tmp_path / "run", [f"objectives.rtd.discriminator_weight={weight}", "train.max_steps=2"])
    assert metrics["heldout_rtd_loss"] == pytest.approx(weight * metrics["heldout_rtd_disc_loss"], rel=1e-3)
    total = metrics["heldout_rtd_generator_loss"] + weight * metrics["heldout_rtd_disc_loss"]
    assert metrics["heldout_loss"] == pytest.approx(total, rel=1e-3)


def rtd_run(corpus: Path, out: Path, overrides: list[str]) -> dict:
    from ptmkit.training.pretrain import pretrain

    return pretrain("bert", corpus, out, overrides=[*TINY, *overrides], objectives=["rtd"])


def test_train_then_finetune_an_rtd_run(tiny_corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    code = main(["train", "bert", "--corpus", str(tiny_corpus), "--out", str(out), *sum((["--set", o] for o in [*TINY, "train.max_steps=30", "train.learning_rate=3e-3", "train.objectives=rtd"]), [])])
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("rtd_generator_loss", "rtd_generator_accuracy", "rtd_loss", "rtd_disc_loss", "rtd_accuracy", "rtd_replaced_share"):
        assert np.isfinite(metrics[f"heldout_{key}"]), key
    # Both learn: the generator below an untrained head's ln(600), the discriminator below ln(2)
    # (measured at 20 steps: 6.11 and 0.52); replaced share at most 15% of tokens.
    assert metrics["heldout_rtd_generator_loss"] < math.log(600) - 0.2
    assert metrics["heldout_rtd_disc_loss"] < math.log(2) - 0.1
    assert 0.05 < metrics["heldout_rtd_replaced_share"] <= 0.15
    # The saved backbone is the discriminator alone: exactly the weights of a backbone of the run's config.
    import h5py

    from ptmkit.config import read_toml
    from ptmkit.plugins import get_registry
    from ptmkit.training.pretrain import resolve_config

    registry = get_registry()
    config = resolve_config(registry, "bert", base=read_toml(out / "config.toml"))
    backbone = registry.family("bert").build_backbone(config.model)
    with h5py.File(out / "backbone.weights.h5") as file:
        sizes: list[int] = []
        file.visititems(lambda name, item: sizes.append(item.size) if isinstance(item, h5py.Dataset) else None)
    assert sum(sizes) == backbone.count_params() == metrics["parameters"]
    backbone.load_weights(out / "backbone.weights.h5")
    # The training checkpoint keeps the generator: it loads into the training model (--resume).
    from ptmkit.training.checkpoint import restore_state
    from ptmkit.training.pretrain import build_pretraining_model

    discriminator, model, _ = build_pretraining_model(registry, config)
    assert restore_state(model, out / "checkpoints") == 30
    # The generator's output layer is the discriminator's token embedding (shared, ELECTRA 3.2).
    assert model.get_layer("rtd_generator").token_embedding is discriminator.token_embedding
    generator = model.get_layer("rtd_generator_backbone")
    assert generator.get_layer("token_embedding").output_dim == 8  # a quarter of the discriminator's 32
    tuned = tmp_path / "tuned"
    settings = ["finetune.epochs=1", "finetune.batch_size=16", "finetune.sequence_length=32", "finetune.learning_rate=1e-3"]
    code = main(["finetune", str(out), "--train", str(POLARITY_TRAIN), "--dev", str(POLARITY_DEV), "--out", str(tuned), *sum((["--set", o] for o in settings), [])])
    assert code == 0
    assert 0.0 <= json.loads((tuned / "metrics.json").read_text())["dev_accuracy"] <= 1.0


@pytest.mark.parametrize(
    ("objectives", "message"),
    [
        ("rtd,mlm", "objective 'rtd' trains alone (its backbone reads the corrupted tokens it makes); drop 'mlm'"),
        ("nsp,rtd", "objective 'rtd' trains alone (its backbone reads the corrupted tokens it makes); drop 'nsp'"),
    ],
)
def test_rtd_with_another_objective_is_refused(tiny_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], objectives: str, message: str) -> None:
    code = main(["train", "bert", "--corpus", str(tiny_corpus), "--out", str(tmp_path / "run"), "--set", f"train.objectives={objectives}"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_bad_generator_ratio_is_refused(tiny_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "bert", "--corpus", str(tiny_corpus), "--out", str(tmp_path / "run"), "--set", "train.objectives=rtd", "--set", "objectives.rtd.generator_hidden_ratio=0"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "objectives.rtd.generator_hidden_ratio' must be in (0, 1], got 0" in err


def test_a_family_that_cannot_scale_its_config_gets_a_generator_of_its_size() -> None:
    from ptmkit.contract import ModelFamily
    from ptmkit.objectives.rtd import generator_config
    from ptmkit_bert import BertConfig, BertFamily

    class Fixed(ModelFamily):  # scale_config is the contract's default: None
        name = "fixed"

    config = BertConfig(hidden_dim=64, num_heads=2, intermediate_dim=128)
    assert generator_config(Fixed(), config, 0.25) is config
    assert generator_config(BertFamily(), config, 1.0) is config
    assert generator_config(BertFamily(), config, 0.5).hidden_dim == 32


def test_a_family_that_shares_embeddings_gets_its_generator_on_the_discriminators_embeddings() -> None:
    """:class:`~ptmkit.contract.SharesEmbeddings`: the objective asks the family for a generator
    on the backbone's embeddings (ELECTRA 3.2) at the scaled config; without it, a backbone of its own."""
    import keras

    from ptmkit.contract import SharesEmbeddings
    from ptmkit_bert import BertConfig, BertFamily

    asked = []

    class Sharing(BertFamily):
        def build_on_embeddings(self, model_config, backbone):  # a one-layer encoder on the backbone's token table
            asked.append(model_config.hidden_dim)
            inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in self.input_names}
            states = keras.layers.Dense(model_config.hidden_dim)(backbone.token_embedding(inputs["token_ids"]))
            return keras.Model(inputs, {"sequence_output": states})

    assert isinstance(Sharing(), SharesEmbeddings) and not isinstance(BertFamily(), SharesEmbeddings)
    config = BertConfig(vocabulary_size=VOCABULARY, num_layers=1, hidden_dim=32, num_heads=2, intermediate_dim=64, max_sequence_length=16)
    for family, shared in ((Sharing(), True), (BertFamily(), False)):
        backbone = family.build_backbone(config)
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in family.input_names}
        extra, outputs, _, _ = ReplacedTokenDetection().build_on_family(family, config, backbone, inputs, ReplacedTokenDetectionConfig())
        generator = keras.Model({**inputs, **extra}, outputs).get_layer("rtd_generator_backbone")
        assert any(layer is backbone.token_embedding for layer in generator.layers) is shared
    assert asked == [8]  # a quarter of 32
