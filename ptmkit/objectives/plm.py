"""Permutation language modelling (Yang et al. 2019, "XLNet: Generalized Autoregressive
Pretraining for Language Understanding", sections 2.2-2.3).

A factorisation order ``z`` (a permutation of the sequence's positions) is drawn for each
sequence, and the tokens are predicted autoregressively in that order, each from the tokens
before it in ``z``, with the positions kept as they are: only the attention masks change.

- **Partial prediction** (section 2.3): only the last ``1/K`` of the order is predicted (``K`` =
  6, appendix A.3); the first ``(K-1)/K`` are context. Structural tokens (``<sep>``, ``<cls>``,
  padding) are never predicted (the reference implementation's ``non_func_tokens``).
- **Two-stream attention** (section 2.3): the *content* stream at position ``z_t`` attends to
  ``z_{<=t}`` (itself included: what later tokens read), the *query* stream to ``z_{<t}`` only
  (it knows the position it predicts, not the token). The query stream starts from a learnt
  vector; the backbone (a :class:`~ptmkit.contract.TwoStreamAttention`, capability
  ``two_stream_attention``) runs both, and a linear layer tied to the token embedding, with its
  own bias (XLNet's ``lm_loss``), turns the query stream's states into logits.

Attention masks, for position ``i`` of rank ``r(i)`` in the order: content ``m[i, j] = r(j) <=
r(i)``, query ``m[i, j] = r(j) < r(i)``; padding is ranked after every real token, and the
backbone masks it out as a key. ``perm_size`` > 0 permutes within consecutive blocks of that
many positions, the blocks in sequence order, each block's last ``1/K`` predicted (the reference
implementation's ``perm_size``, which it sets to ``reuse_len``, with ``seq_len % perm_size == 0``
asserted); 0 (the default) permutes the whole sequence, as the paper describes. Left as in the
paper but not here: Transformer-XL memory (segment recurrence) and the reference's span-based
choice of targets (``mask_alpha``, ``mask_beta``).

The trained backbone is an ordinary encoder (its content stream, without permutation) for
``finetune`` and ``export``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from ptmkit.contract import SEQUENCE_OUTPUT, TOKEN_EMBEDDING, TWO_STREAM_ATTENTION, Objective, SpecialTokens
from ptmkit.errors import ConfigError


@dataclasses.dataclass
class PermutationLMConfig:
    """Permutation-LM settings (section ``[objectives.plm]``); defaults are XLNet's.

    Attributes:
        partial_prediction: K: the last ``1/K`` of each factorisation order is predicted (XLNet,
            appendix A.3: 6). At least one token of a sequence is predicted, never all of its
            real tokens.
        perm_size: permute within consecutive blocks of this many positions (the reference
            implementation's ``perm_size``); ``train.sequence_length`` must be a multiple of it.
            0: one permutation of the whole sequence (the paper).
    """

    partial_prediction: float = 6.0
    perm_size: int = 0

    def validate(self) -> None:
        if not self.partial_prediction >= 1.0:
            raise ConfigError(
                f"config key 'objectives.plm.partial_prediction' must be >= 1, got {self.partial_prediction}"
            )
        if self.perm_size < 0:
            raise ConfigError(f"config key 'objectives.plm.perm_size' must be >= 0, got {self.perm_size}")

    def block(self, sequence_length: int) -> int:
        """The positions one permutation covers: ``perm_size``, or the whole sequence for 0."""
        return self.perm_size or sequence_length

    def predictions(self, sequence_length: int) -> int:
        """Prediction slots per sequence: ``round(block / K)`` (at least 1) per block."""
        block = self.block(sequence_length)
        return -(-sequence_length // block) * max(1, int(round(block / self.partial_prediction)))


def permutation_order(
    padding_mask: np.ndarray, structural: np.ndarray, rng: np.random.Generator, config: PermutationLMConfig
) -> tuple[np.ndarray, np.ndarray]:
    """Draw one factorisation order per sequence, its predicted tail last.

    Within each block (:attr:`PermutationLMConfig.perm_size`), the real tokens are put in a
    uniformly random order conditioned on the ``round(n / K)`` predicted ones (``n`` real
    non-structural tokens of the block; at least 1, at most all real tokens but one) coming last.
    Blocks follow one another; padding comes after every real token, in position order.

    Args:
        padding_mask: ``(batch, sequence)`` int, 1 on real tokens.
        structural: ``(batch, sequence)`` bool, True on tokens never predicted (specials).
        rng: the step's generator.

    Returns:
        ``(rank, target)``: ``(batch, sequence)`` int32, the place of each position in its
        sequence's order (a permutation of ``0 .. sequence - 1``), and bool, True on the
        positions predicted.
    """
    batch, length = padding_mask.shape
    block = config.block(length)
    real = padding_mask.astype(bool)
    rank = np.zeros((batch, length), np.int32)
    target = np.zeros((batch, length), bool)
    for row in range(batch):
        order: list[np.ndarray] = []
        for start in range(0, length, block):
            where = np.arange(start, min(start + block, length))
            present = where[real[row, where]]
            candidates = present[~structural[row, present]]
            count = min(
                max(1, int(round(candidates.size / config.partial_prediction))), candidates.size, present.size - 1
            )
            chosen = rng.choice(candidates, size=max(count, 0), replace=False) if count > 0 else np.zeros(0, np.int64)
            target[row, chosen] = True
            context = present[~np.isin(present, chosen)]
            order += [rng.permutation(context), rng.permutation(chosen)]
        order.append(np.flatnonzero(~real[row]))
        rank[row, np.concatenate(order).astype(np.int64)] = np.arange(length, dtype=np.int32)
    return rank, target


def attention_masks(rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two streams' masks for the orders ``rank`` (``(batch, sequence)``, :func:`permutation_order`).

    Returns:
        ``(content, query)``, each ``(batch, sequence, sequence)`` int32, 1 where position ``i``
        may attend to position ``j``: content ``rank[j] <= rank[i]`` (itself and what precedes it
        in the order), query ``rank[j] < rank[i]`` (not itself).
    """
    before = rank[:, None, :] < rank[:, :, None]
    same = rank[:, None, :] == rank[:, :, None]
    return (before | same).astype(np.int32), before.astype(np.int32)


def target_mapping(
    target: np.ndarray, token_ids: np.ndarray, predictions: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The predicted positions as one-hot rows, in position order.

    Args:
        target: ``(batch, sequence)`` bool, :func:`permutation_order`'s.
        token_ids: ``(batch, sequence)`` int, the (uncorrupted) tokens.
        predictions: slots per sequence; at least the most targets a row has.

    Returns:
        ``(mapping, ids, weights)``: ``(batch, predictions, sequence)`` float32 one-hot rows
        (all-zero rows pad the list), ``(batch, predictions)`` int32 target ids and float32
        weights (1 on a real prediction).
    """
    batch, length = target.shape
    mapping = np.zeros((batch, predictions, length), np.float32)
    ids = np.zeros((batch, predictions), np.int32)
    weights = np.zeros((batch, predictions), np.float32)
    for row in range(batch):
        where = np.flatnonzero(target[row])
        slots = np.arange(where.size)
        mapping[row, slots, where] = 1.0
        ids[row, slots] = token_ids[row, where]
        weights[row, slots] = 1.0
    return mapping, ids, weights


def permutation_batch(
    batch: Mapping[str, np.ndarray], rng: np.random.Generator, config: PermutationLMConfig, specials: SpecialTokens
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Orders, masks and targets for a packed batch (``token_ids``, ``padding_mask``).

    Returns:
        ``(inputs, ids, weights)``: ``permutation_rank`` (``(batch, sequence)`` int32, the
        orders; the model derives the two streams' masks from it, :func:`attention_masks`, which
        is ``sequence`` times smaller to feed than the masks) and ``target_mapping``
        (:func:`target_mapping`), the target ids and their weights.
    """
    token_ids, padding_mask = batch["token_ids"], batch["padding_mask"]
    structural = np.isin(token_ids, specials.structural())
    rank, target = permutation_order(padding_mask, structural, rng, config)
    mapping, ids, weights = target_mapping(target, token_ids, config.predictions(token_ids.shape[1]))
    return {"permutation_rank": rank, "target_mapping": mapping}, ids, weights


def graph_attention_masks(rank: Any) -> tuple[Any, Any]:
    """:func:`attention_masks` in the Keras graph: ``rank`` ``(batch, sequence)`` int tensor ->
    ``(content, query)`` ``(batch, sequence, sequence)`` int32 tensors."""
    from keras import ops

    before = ops.less(rank[:, None, :], rank[:, :, None])
    same = ops.equal(rank[:, None, :], rank[:, :, None])
    return ops.cast(ops.logical_or(before, same), "int32"), ops.cast(before, "int32")


@functools.cache
def _tied_head_class() -> type:
    import keras

    class TiedLMHead(keras.layers.Layer):
        """``x @ token_embedding^T + bias`` in float32; ``token_embedding`` a keras-hub
        ``ReversibleEmbedding`` (its ``reverse=True`` call)."""

        def __init__(self, token_embedding: Any, vocabulary_size: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.token_embedding = token_embedding
            self.vocabulary_size = vocabulary_size

        def build(self, input_shape: Any) -> None:
            self.bias = self.add_weight(shape=(self.vocabulary_size,), initializer="zeros", name="bias")

        def call(self, x: Any) -> Any:
            return keras.ops.cast(self.token_embedding(x, reverse=True), "float32") + self.bias

        def get_config(self) -> dict[str, Any]:  # the training model is saved as weights only
            return {**super().get_config(), "vocabulary_size": self.vocabulary_size}

    return TiedLMHead


def tied_lm_head(backbone: Any, states: Any, name: str) -> Any:
    """XLNet's ``lm_loss``: ``states @ token_embedding^T + bias``, ``(batch, predictions,
    vocabulary)`` float32 logits (the backbone's ``token_embedding`` is a keras-hub
    ``ReversibleEmbedding``; the bias is the head's own)."""
    head = _tied_head_class()(backbone.token_embedding, backbone.vocabulary_size, name=name, dtype="float32")
    return head(states)


class PermutationLM(Objective):
    """XLNet's permutation LM: the last 1/K of a random factorisation order predicted through the
    query stream of two-stream attention."""

    name = "plm"
    description = "permutation LM: random factorisation orders, two-stream attention, the last 1/6 of each order predicted (XLNet)"
    requires = frozenset({SEQUENCE_OUTPUT, TOKEN_EMBEDDING, TWO_STREAM_ATTENTION})
    config_class = PermutationLMConfig
    token_level_lm = True

    def check_sequence_length(self, config: PermutationLMConfig, sequence_length: int, source: str) -> None:
        if config.perm_size and sequence_length % config.perm_size:
            raise ConfigError(
                f"{source}: config key 'objectives.plm.perm_size' = {config.perm_size} must divide "
                f"'train.sequence_length' = {sequence_length} (the order is permuted within blocks of perm_size positions)"
            )

    def prepare(
        self,
        batch: Mapping[str, np.ndarray],
        rng: np.random.Generator,
        config: PermutationLMConfig,
        specials: SpecialTokens,
        vocabulary_size: int,
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
        inputs, ids, weights = permutation_batch(batch, rng, config, specials)
        return inputs, {"plm": ids}, {"plm": weights}

    def build(
        self, backbone: Any, inputs: dict[str, Any], config: PermutationLMConfig
    ) -> tuple[dict, dict, dict, dict]:
        import keras

        from ptmkit.objectives.mlm import prediction_loss

        extra = {
            "permutation_rank": keras.Input(shape=(None,), dtype="int32", name="permutation_rank"),
            "target_mapping": keras.Input(shape=(None, None), dtype="float32", name="target_mapping"),
        }
        content_mask, query_mask = graph_attention_masks(extra["permutation_rank"])
        states = backbone.query_stream_output(inputs, content_mask, query_mask, extra["target_mapping"])
        logits = tied_lm_head(backbone, states, "plm")
        metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        return extra, {"plm": logits}, {"plm": prediction_loss()}, {"plm": metrics}
