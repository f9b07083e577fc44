"""The gpt family and the clm objective against references: keras-hub's GPT2Backbone and
GPT2CausalLM on the same weights, a NumPy forward pass of a post-LN (GPT-1) block, and held-out
per-word perplexity recomputed line by line from keras-hub's logits."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from inplugins import in_tree_plugins  # noqa: F401 - the fixture

pytestmark = pytest.mark.usefixtures("in_tree_plugins")


def keras_hub_twin(backbone):
    """keras-hub's GPT2CausalLM holding ``backbone``'s weights (same layer layout)."""
    import keras_hub

    twin = keras_hub.models.GPT2Backbone(
        backbone.vocabulary_size, backbone.num_layers, backbone.num_heads, backbone.hidden_dim, backbone.intermediate_dim,
        dropout=0.0, max_sequence_length=backbone.max_sequence_length,
    )
    twin.set_weights(backbone.get_weights())
    return keras_hub.models.GPT2CausalLM(backbone=twin, preprocessor=None)


def test_gpt2_backbone_is_keras_hubs_and_left_padding_keeps_positions() -> None:
    import keras

    from ptmkit_gpt.backbone import GPTBackbone

    keras.utils.set_random_seed(0)
    backbone = GPTBackbone(300, 2, 2, 32, 64, dropout=0.0, max_sequence_length=32)
    lm = keras_hub_twin(backbone)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 300, (3, 12)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 9:] = 0  # right padding
    ours = np.asarray(backbone.logits(backbone({"token_ids": ids, "padding_mask": mask})["sequence_output"]))
    theirs = np.asarray(lm({"token_ids": ids, "padding_mask": mask}))
    np.testing.assert_allclose(ours[mask == 1], theirs[mask == 1], atol=1e-5)
    # the same rows left-padded by 5: positions come from the mask, so the real positions agree
    left_ids = np.concatenate([np.zeros((3, 5), "int32"), ids], axis=1)
    left_mask = np.concatenate([np.zeros((3, 5), "int32"), np.ones_like(ids)], axis=1)
    shifted = np.asarray(backbone.logits(backbone({"token_ids": left_ids, "padding_mask": left_mask})["sequence_output"]))
    np.testing.assert_allclose(shifted[:, 5:], np.asarray(lm({"token_ids": ids, "padding_mask": np.ones_like(ids)})), atol=1e-4)
    restored = GPTBackbone.from_config(backbone.get_config())
    assert restored.get_config() == backbone.get_config()


def _layer_norm(x: np.ndarray, layer) -> np.ndarray:
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + layer.epsilon) * np.asarray(layer.gamma) + np.asarray(layer.beta)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _numpy_block(x: np.ndarray, layer, heads: int, pre_ln: bool) -> np.ndarray:
    """One decoder block in NumPy (Radford et al. 2018, fig. 1; 2019, section 2.3)."""
    attention = layer._self_attention_layer
    t, hidden = x.shape
    size = hidden // heads

    def dense(h, d):
        kernel, bias = np.asarray(d.kernel), np.asarray(d.bias)
        return np.einsum("th,h...->t...", h, kernel) + bias

    def attend(h):
        q, k, v = dense(h, attention.query_dense), dense(h, attention.key_dense), dense(h, attention.value_dense)  # (t, heads, size)
        scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(size)
        scores = np.where(np.tril(np.ones((t, t), bool)), scores, -np.inf)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        context = np.einsum("hqk,khd->qhd", weights, v)
        return np.einsum("qhd,hdo->qo", context, np.asarray(attention.output_dense.kernel)) + np.asarray(attention.output_dense.bias)

    def feedforward(h):
        inner = _gelu_tanh(h @ np.asarray(layer._feedforward_intermediate_dense.kernel) + np.asarray(layer._feedforward_intermediate_dense.bias))
        return inner @ np.asarray(layer._feedforward_output_dense.kernel) + np.asarray(layer._feedforward_output_dense.bias)

    if pre_ln:
        x = x + attend(_layer_norm(x, layer._self_attention_layer_norm))
        return x + feedforward(_layer_norm(x, layer._feedforward_layer_norm))
    x = _layer_norm(x + attend(x), layer._self_attention_layer_norm)
    return _layer_norm(x + feedforward(x), layer._feedforward_layer_norm)


@pytest.mark.parametrize("variant", ["gpt1", "gpt2"])
def test_backbone_matches_a_numpy_decoder(variant: str) -> None:
    import keras

    from ptmkit_gpt.backbone import build_backbone
    from ptmkit_gpt.config import GPTConfig

    keras.utils.set_random_seed(1)
    config = GPTConfig(variant=variant, vocabulary_size=300, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32, dropout=0.0, max_sequence_length=16)
    backbone = build_backbone(config)
    ids = np.random.default_rng(1).integers(0, 300, (1, 9)).astype("int32")
    ours = np.asarray(backbone({"token_ids": ids, "padding_mask": np.ones_like(ids)})["sequence_output"])[0]
    x = np.asarray(backbone.token_embedding.embeddings)[ids[0]] + np.asarray(backbone.position_embedding.position_embeddings)[:9]
    for layer in backbone.transformer_layers:
        x = _numpy_block(x, layer, 2, pre_ln=variant == "gpt2")
    if variant == "gpt2":
        x = _layer_norm(x, backbone.layer_norm)
    assert (backbone.layer_norm is None) == (variant == "gpt1")
    np.testing.assert_allclose(ours, x, atol=1e-4)


def test_score_windows_cover_every_token_once_with_half_a_window_of_context() -> None:
    from ptmkit_gpt.objectives import score_windows

    lines = [list(range(100, 100 + n)) for n in (1, 7, 8, 9, 30, 61)]
    window = 8
    for line, ids in enumerate(lines):
        scored = []
        for index, chunk, first in score_windows(lines, 0, window):
            if index != line:
                continue
            assert 1 <= first < len(chunk) <= window
            start = [0, *ids].index(chunk[0]) if chunk[0] != 0 else 0
            for position in range(first, len(chunk)):
                scored.append(start + position)
                assert position >= window // 2 or start == 0  # context of at least half a window
        assert sorted(scored) == list(range(1, len(ids) + 1)), (line, scored)


def test_clm_trains_and_reports_held_out_perplexities(gpt_run: tuple[Path, Path, dict]) -> None:
    """Per-word perplexity recomputed line by line from keras-hub's GPT2CausalLM on the run's
    weights, and the add-one unigram model from the training lines, on the held-out lines."""
    from ptmkit.api import RunDir, get_registry, read_corpus
    from ptmkit.testing import load_backbone

    run, corpus, metrics = gpt_run
    assert math.isfinite(metrics["heldout_clm_loss"]) and metrics["heldout_clm_perplexity"] == pytest.approx(math.exp(metrics["heldout_clm_loss"]), rel=1e-3)
    backbone, config, tokenizer, _ = load_backbone(get_registry(), RunDir(run))
    lm = keras_hub_twin(backbone)
    lines = list(read_corpus(corpus))
    heldout, training = lines[-12:], lines[:-12]
    bos = tokenizer.token_to_id("<|endoftext|>")
    total, unigram_total = 0.0, 0.0
    counts = Counter(i for text in training for i in tokenizer.encode(text, add_special_tokens=False).ids)
    denominator = sum(counts.values()) + tokenizer.get_vocab_size()
    for text in heldout:
        ids = [bos, *tokenizer.encode(text, add_special_tokens=False).ids]
        assert len(ids) <= 64  # one window a line
        logits = np.asarray(lm({"token_ids": np.asarray([ids], "int32"), "padding_mask": np.ones((1, len(ids)), "int32")}))[0].astype(np.float64)
        log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - logits.max(-1, keepdims=True)
        total += sum(log_probs[i - 1, ids[i]] for i in range(1, len(ids)))
        unigram_total += sum(math.log((counts[i] + 1) / denominator) for i in ids[1:])
    words = sum(len(text.split()) for text in heldout)
    assert metrics["heldout_lines"] == 12 and metrics["heldout_words"] == words
    assert metrics["heldout_word_perplexity"] == pytest.approx(math.exp(-total / words), rel=1e-4)
    assert metrics["heldout_bits_per_byte"] == pytest.approx(-total / math.log(2) / sum(len(t.encode()) for t in heldout), abs=1e-4)
    assert metrics["heldout_unigram_word_perplexity"] == pytest.approx(math.exp(-unigram_total / words), rel=1e-4)
    assert metrics["heldout_token_perplexity"] < 400  # 6 steps already beat the uniform distribution over the vocabulary
