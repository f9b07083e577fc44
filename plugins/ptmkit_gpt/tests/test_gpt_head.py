"""The last-token classification head (GPT-1's recipe): its logits are the output layer on the
extract token's state, recomputed here from the backbone, and ``head.lm_loss_weight`` adds that
weight times the texts' causal-LM loss, recomputed in NumPy from the tied embedding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from inplugins import in_tree_plugins  # noqa: F401 - the fixture

from ptmkit.testing import write_tiny_labelled

pytestmark = pytest.mark.usefixtures("in_tree_plugins")


def test_finetune_picks_the_last_token_head(gpt_run, tmp_path: Path) -> None:
    from ptmkit.testing import finetune, load_classifier

    run, _, _ = gpt_run
    (tmp_path / "data").mkdir()
    train, dev = write_tiny_labelled(tmp_path / "data")
    overrides = ["finetune.epochs=1", "finetune.sequence_length=24", "finetune.batch_size=8", "head.lm_loss_weight=0.5"]
    metrics = finetune(run, train, dev, tmp_path / "tuned", overrides=overrides)
    assert 0.0 <= metrics["dev_accuracy"] <= 1.0 and metrics["labels"] == 2
    model, config, tokenizer, manifest = load_classifier(tmp_path / "tuned")
    assert manifest["head"] == "last-token-classification" and config.head.lm_loss_weight == 0.5
    encoding = tokenizer.encode("the cat saw the bridge")
    assert encoding.ids[0] == encoding.ids[-1] == tokenizer.token_to_id("<|endoftext|>")  # start and extract tokens


def test_logits_and_auxiliary_loss_are_the_papers() -> None:
    import keras

    from ptmkit_gpt.backbone import GPTBackbone
    from ptmkit_gpt.heads import LastTokenClassification, LastTokenClassificationConfig

    keras.utils.set_random_seed(5)
    backbone = GPTBackbone(200, 1, 2, 16, 32, dropout=0.0, max_sequence_length=16)
    model = LastTokenClassification().build(backbone, 3, LastTokenClassificationConfig(dropout=0.0, lm_loss_weight=0.5))
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 200, (4, 10)).astype("int32")
    mask = np.ones_like(ids)
    for row, length in enumerate([10, 7, 3, 1]):
        mask[row, length:] = 0
    labels = np.array([0, 2, 1, 2])
    x = {"token_ids": ids, "padding_mask": mask}
    hidden = np.asarray(backbone(x)["sequence_output"], np.float64)
    dense = model.get_layer("logits")
    last = hidden[np.arange(4), mask.sum(1) - 1]
    expected_logits = last @ np.asarray(dense.kernel) + np.asarray(dense.bias)
    np.testing.assert_allclose(np.asarray(model(x)), expected_logits, atol=1e-5)

    def nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
        top = logits.max(-1, keepdims=True)
        log_z = np.log(np.exp(logits - top).sum(-1)) + top[..., 0]
        return log_z - np.take_along_axis(logits, targets[..., None], -1)[..., 0]

    lm = nll(hidden[:, :-1] @ np.asarray(backbone.token_embedding.embeddings, np.float64).T, ids[:, 1:].astype(np.int64))
    weights = mask[:, 1:]
    classification = nll(expected_logits, labels).mean()
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    loss = model.evaluate(x, labels, verbose=0, batch_size=4)
    assert loss == pytest.approx(classification + 0.5 * (lm * weights).sum() / weights.sum(), rel=1e-4)
