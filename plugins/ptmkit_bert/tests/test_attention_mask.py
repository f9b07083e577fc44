"""The BERT backbone as an :class:`~ptmkit.api.AttendsWithMask`: the mask restricts attention and
nothing else (all ones gives ``sequence_output``; under a causal mask position ``i`` does not see
later tokens), through the backbone's own weights."""

from __future__ import annotations

import numpy as np

from ptmkit.api import SELF_ATTENTION_MASK, AttendsWithMask, capabilities
from ptmkit_bert import BertFamily
from ptmkit_bert.backbone import build_backbone
from ptmkit_bert.config import BertConfig


def test_the_attention_mask_restricts_attention_and_nothing_else() -> None:
    import keras

    assert SELF_ATTENTION_MASK in capabilities(BertFamily())
    backbone = build_backbone(BertConfig(vocabulary_size=50, num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32, max_sequence_length=16))
    assert isinstance(backbone, AttendsWithMask)
    rng = np.random.default_rng(0)
    inputs = {
        "token_ids": rng.integers(5, 50, (2, 8)).astype("int32"),
        "segment_ids": np.array([[0] * 4 + [1] * 4, [0] * 8], "int32"),
        "padding_mask": np.array([[1] * 8, [1] * 5 + [0] * 3], "int32"),
    }

    def run(x: dict[str, np.ndarray], mask: np.ndarray) -> np.ndarray:
        return np.asarray(keras.ops.convert_to_numpy(backbone.sequence_output_with_attention_mask(x, mask)))

    full = np.asarray(keras.ops.convert_to_numpy(backbone(inputs)["sequence_output"]))
    assert np.array_equal(run(inputs, np.ones((2, 8, 8), "int32")), full)
    causal = np.broadcast_to(np.tril(np.ones((8, 8), "int32")), (2, 8, 8))
    before = run(inputs, causal)
    changed = {**inputs, "token_ids": inputs["token_ids"].copy()}
    changed["token_ids"][:, 5:] = 7  # only positions 5.. differ
    after = run(changed, causal)
    np.testing.assert_allclose(after[:, :5], before[:, :5], atol=1e-6)  # earlier positions cannot see them
    assert np.abs(after[0, 5:] - before[0, 5:]).max() > 1e-3
    assert np.abs(run(inputs, causal)[0, :4] - full[0, :4]).max() > 1e-3  # the mask does change what is seen
