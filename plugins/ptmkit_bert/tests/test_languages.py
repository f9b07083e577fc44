"""The BERT backbone as an :class:`~ptmkit.api.EmbedsLanguages` (XLM's translation LM): each token's
position embedding is read at its given position id and its segment embedding at its language id,
through the backbone's own weights; positions ``0 .. n-1`` and segment ids give ``sequence_output``."""

from __future__ import annotations

import numpy as np

from ptmkit.api import POSITIONS_AND_LANGUAGES, EmbedsLanguages, capabilities
from ptmkit_bert import BertFamily
from ptmkit_bert.backbone import build_backbone
from ptmkit_bert.config import BertConfig


def test_positions_and_languages_index_the_embedding_tables() -> None:
    import keras

    assert POSITIONS_AND_LANGUAGES in capabilities(BertFamily())
    config = BertConfig(vocabulary_size=50, num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32, max_sequence_length=16, num_segments=3)
    backbone = build_backbone(config)
    assert isinstance(backbone, EmbedsLanguages) and backbone.num_languages == 3
    rng = np.random.default_rng(0)
    inputs = {
        "token_ids": rng.integers(5, 50, (2, 8)).astype("int32"),
        "segment_ids": np.array([[0] * 4 + [1] * 4, [0] * 8], "int32"),
        "padding_mask": np.array([[1] * 8, [1] * 5 + [0] * 3], "int32"),
    }

    def run(position_ids: np.ndarray, language_ids: np.ndarray) -> np.ndarray:
        return np.asarray(keras.ops.convert_to_numpy(backbone.sequence_output_with_languages(inputs, position_ids, language_ids)))

    full = np.asarray(keras.ops.convert_to_numpy(backbone(inputs)["sequence_output"]))
    arange = np.broadcast_to(np.arange(8, dtype="int32"), (2, 8))
    np.testing.assert_allclose(run(arange, inputs["segment_ids"]), full, atol=1e-6)

    # Positions restarting at the second sentence and languages 2 / 1: a NumPy transcription of the
    # embedding sum and its layer norm, then the backbone's own transformer blocks.
    positions = np.array([[0, 1, 2, 3, 0, 1, 2, 3], [0, 1, 2, 0, 1, 2, 3, 4]], "int32")
    languages = np.array([[2] * 4 + [1] * 4, [1] * 8], "int32")
    weights = {w.path: np.asarray(keras.ops.convert_to_numpy(w)) for w in backbone.weights}
    table = next(v for k, v in weights.items() if k.endswith("token_embedding/embeddings"))
    position_table = next(v for k, v in weights.items() if "position_embedding" in k)
    segment_table = next(v for k, v in weights.items() if k.endswith("segment_embedding/embeddings"))
    x = table[inputs["token_ids"]] + position_table[positions] + segment_table[languages]
    norm = backbone.embeddings_layer_norm
    gamma, beta = (np.asarray(keras.ops.convert_to_numpy(w)) for w in (norm.gamma, norm.beta))
    x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + norm.epsilon) * gamma + beta
    for layer in backbone.transformer_layers:
        x = np.asarray(keras.ops.convert_to_numpy(layer(x, padding_mask=inputs["padding_mask"])))
    got = run(positions, languages)
    np.testing.assert_allclose(got, x, atol=1e-5)
    assert np.abs(got - full).max() > 1e-2  # the positions and languages do change the states
