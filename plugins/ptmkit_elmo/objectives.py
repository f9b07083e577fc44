"""The bidirectional language model objective of ELMo (Peters et al. 2018, section 3.1)::

    L = mean over real predictions of  -log P(t_{k+1} | t_1..t_k)     (forward LM)
                                  and  -log P(t_{k-1} | t_k..t_N)     (backward LM)

Token ids index the input vocabulary; the softmax covers its first ``backbone.vocabulary_size``
ids (the most frequent words), and a target beyond them is ``<unk>`` (:func:`softmax_targets`).
Both directions predict through the backbone's one softmax (:attr:`ELMoBackbone.softmax`): the
objective's single output ``bilm`` stacks them, ``(batch, 2, sequence, vocabulary)`` logits
(row 0 forward, row 1 backward), so that Keras' mean over its real predictions is the mean of
both losses (a window of ``n`` tokens gives ``n - 1`` predictions each way).

On the held-out lines (:meth:`BiLM.score_lines`, the lines the NNLM and GPT families are measured
on) each line ``<S> w_1 .. w_n </S>`` is scored on its ``n`` words, forward from ``<S>`` and
backward from ``</S>``, and the run reports

- ``heldout_forward_word_perplexity``, ``heldout_backward_word_perplexity``:
  ``exp(-sum log P / words)``, words counted with ``str.split()`` (a word outside the softmax
  is predicted as ``<unk>``; ``heldout_unknown_words`` counts them, and
  ``heldout_unspelt_words`` those outside the input vocabulary too, which the character CNN
  reads as ``<unk>``'s characters);
- ``heldout_word_perplexity``: their geometric mean, ``exp`` of the mean of the two mean NLLs;
- ``heldout_unigram_word_perplexity``: the add-one smoothed unigram model of the training
  split's words over the softmax's words (the rest counted as ``<unk>``), the floor a language
  model must beat.

A line longer than ``train.sequence_length - 2`` words is scored in consecutive chunks of that
many words, each wrapped in ``<S> .. </S>`` (no context crosses a chunk's edge).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ptmkit.api import ConfigError, HeldoutLines, Objective, SpecialTokens, check_positive, derive_inputs

#: ``<unk>``'s id in an ELMo vocabulary (:mod:`ptmkit_elmo.tokenizer`: ``<pad>``, ``<unk>``, ``<S>``, ``</S>`` first).
UNK_ID = 1

#: The backbone capabilities the objective reads (the declared outputs of the ``elmo`` family).
FORWARD_OUTPUT, BACKWARD_OUTPUT = "forward_output", "backward_output"

#: The extra training input of a sampled-softmax run: the targets, ``(batch, 2, sequence)`` int32.
TARGETS_INPUT = "bilm_targets"


#: ``objectives.bilm.softmax`` values.
SOFTMAX_KINDS = ("full", "sampled")


@dataclasses.dataclass
class BiLMConfig:
    """Bidirectional-LM settings (section ``[objectives.bilm]``). Every real token of a window but
    the first is a forward target and every one but the last a backward one.

    Attributes:
        softmax: the training loss's softmax: ``"full"`` (every word's logit, every step) or
            ``"sampled"`` (Jean et al. 2015, as bilm-tf trains: the target and ``num_sampled``
            candidates drawn per direction and step from a log-uniform distribution over the
            frequency-sorted vocabulary; :mod:`ptmkit_elmo.softmax`). Held-out losses and
            perplexities always use the full softmax; a sampled run reports no accuracy.
        num_sampled: candidates per direction and step with ``softmax = "sampled"``, fewer than
            ``model.vocabulary_size`` (bilm-tf: 8,192 of 793,471 words); drawn with replacement,
            so the frequent words recur (1,024 draws over 8,000 words give about 530 distinct).
    """

    softmax: str = "full"
    num_sampled: int = 1024

    def validate(self) -> None:
        if self.softmax not in SOFTMAX_KINDS:
            raise ConfigError(f"config key 'objectives.bilm.softmax' must be one of {', '.join(SOFTMAX_KINDS)}, got {self.softmax!r}")
        check_positive(self, "objectives.bilm", "num_sampled")


def bidirectional_targets(token_ids: np.ndarray, padding_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward targets of a right-padded batch.

    Args:
        token_ids: ``(batch, sequence)`` int32.
        padding_mask: ``(batch, sequence)``, 1 on tokens.

    Returns:
        ``(targets, weights)``, ``(batch, 2, sequence)`` int32 and float32: ``targets[:, 0, i] =
        token_ids[:, i + 1]`` (weight 1 where position ``i + 1`` is a token) and ``targets[:, 1, i]
        = token_ids[:, i - 1]`` (weight 1 where position ``i >= 1`` is a token); 0 where the weight is 0.
    """
    batch, length = token_ids.shape
    targets = np.zeros((batch, 2, length), np.int32)
    weights = np.zeros((batch, 2, length), np.float32)
    mask = np.asarray(padding_mask) != 0
    targets[:, 0, :-1], weights[:, 0, :-1] = token_ids[:, 1:], mask[:, 1:]
    targets[:, 1, 1:], weights[:, 1, 1:] = token_ids[:, :-1], mask[:, 1:]
    targets *= weights.astype(np.int32)  # no target where nothing is predicted
    return targets, weights


def softmax_targets(targets: Any, softmax_size: int, unk: int) -> Any:
    """``targets`` (NumPy or Keras tensors of ids) with every id ``>= softmax_size`` replaced by
    ``unk``: the words the character CNN reads but the softmax does not predict."""
    from keras import ops

    if isinstance(targets, np.ndarray):
        return np.where(targets < softmax_size, targets, unk)
    return ops.where(ops.less(targets, softmax_size), targets, unk)


class BiLM(Objective):
    """Forward and backward LMs through one shared softmax, with per-word held-out perplexity."""

    name = "bilm"
    description = "bidirectional LM (ELMo): forward predicts the next word, backward the previous; per-word perplexity both ways"
    requires = frozenset({FORWARD_OUTPUT, BACKWARD_OUTPUT})
    config_class = BiLMConfig
    token_level_lm = True

    def prepare(
        self, batch: Mapping[str, np.ndarray], rng: np.random.Generator, config: BiLMConfig, specials: SpecialTokens, vocabulary_size: int
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
        targets, weights = bidirectional_targets(batch["token_ids"], batch["padding_mask"])
        extra = {TARGETS_INPUT: targets} if config.softmax == "sampled" else {}  # the sampled loss is computed in the graph
        return extra, {"bilm": targets}, {"bilm": weights}

    def build(self, backbone: Any, inputs: dict[str, Any], config: BiLMConfig) -> tuple[dict, dict, dict, dict]:
        """The stacked logits and the full cross-entropy (``softmax = "full"``), or the per-prediction
        NLL of :class:`~ptmkit_elmo.softmax.BiLMSoftmaxLoss` (``"sampled"``; targets as an extra input).

        Raises:
            ConfigError: ``objectives.bilm.num_sampled`` is not below ``model.vocabulary_size``.
        """
        import keras
        from keras import ops

        outputs = backbone(inputs)
        softmax_size, unk = int(backbone.vocabulary_size), UNK_ID
        if config.softmax == "sampled":
            from ptmkit_elmo.softmax import BiLMSoftmaxLoss

            if config.num_sampled >= softmax_size:
                raise ConfigError(
                    f"config key 'objectives.bilm.num_sampled' = {config.num_sampled} must be less than 'model.vocabulary_size' = {softmax_size} "
                    "(or set objectives.bilm.softmax = \"full\")"
                )
            targets = keras.Input(shape=(2, None), dtype="int32", name=TARGETS_INPUT)
            states = ops.stack([outputs[FORWARD_OUTPUT], outputs[BACKWARD_OUTPUT]], axis=1)
            nll = BiLMSoftmaxLoss(backbone.softmax, config.num_sampled, name="bilm")(states, softmax_targets(targets, softmax_size, unk))

            def per_prediction(y_true: Any, y_pred: Any) -> Any:
                return y_pred

            return {TARGETS_INPUT: targets}, {"bilm": nll}, {"bilm": per_prediction}, {"bilm": []}
        both = ops.stack([backbone.logits(outputs[FORWARD_OUTPUT]), backbone.logits(outputs[BACKWARD_OUTPUT])], axis=1)
        logits = keras.layers.Activation("linear", dtype="float32", name="bilm")(both)

        def loss(y_true: Any, y_pred: Any) -> Any:
            return keras.losses.sparse_categorical_crossentropy(softmax_targets(y_true, softmax_size, unk), y_pred, from_logits=True)

        def accuracy(y_true: Any, y_pred: Any) -> Any:
            return keras.metrics.sparse_categorical_accuracy(softmax_targets(y_true, softmax_size, unk), y_pred)

        return {}, {"bilm": logits}, {"bilm": loss}, {"bilm": [keras.metrics.MeanMetricWrapper(accuracy, name="accuracy")]}

    def score_lines(self, backbone: Any, heldout: HeldoutLines, config: BiLMConfig) -> dict[str, Any]:
        """Forward, backward and geometric-mean per-word perplexity of the held-out lines (module
        docstring), with the unigram reference."""
        texts = heldout.texts
        line_ids = [e.ids for e in heldout.tokenizer.encode_batch(texts, add_special_tokens=False)]
        forward, backward = line_log_likelihoods(backbone, heldout, line_ids)
        softmax_size, unk = int(backbone.vocabulary_size), heldout.specials["unk"]
        counts = heldout.token_counts.astype(np.float64)
        counts = np.concatenate([counts[:softmax_size], np.zeros(max(0, softmax_size - len(counts)))])
        counts[unk] += heldout.token_counts[softmax_size:].sum()  # the softmax's <unk> stands for every word beyond it
        unigram = np.log((counts + 1.0) / (counts + 1.0).sum())  # add-one (Laplace) smoothing over the softmax's words
        line_targets = [softmax_targets(np.asarray(ids, np.int64), softmax_size, unk) for ids in line_ids]
        unigram_ll = float(sum(unigram[ids].sum() for ids in line_targets if len(ids)))
        words = max(sum(len(text.split()) for text in texts), 1)
        nll_forward, nll_backward = -float(forward.sum()) / words, -float(backward.sum()) / words
        return {
            "heldout_lines": len(texts),
            "heldout_words": words,
            "heldout_unknown_words": int(sum(np.count_nonzero(ids == unk) for ids in line_targets)),
            "heldout_unspelt_words": int(sum(ids.count(unk) for ids in line_ids)),
            "heldout_forward_word_perplexity": round(math.exp(nll_forward), 3),
            "heldout_backward_word_perplexity": round(math.exp(nll_backward), 3),
            "heldout_word_perplexity": round(math.exp((nll_forward + nll_backward) / 2), 3),
            "heldout_unigram_word_perplexity": round(math.exp(-unigram_ll / words), 3),
        }


def _chunks(line_ids: list[list[int]], size: int) -> list[tuple[int, list[int]]]:
    """``(line index, at most size ids)``: each line cut into consecutive chunks."""
    return [(line, ids[start : start + size]) for line, ids in enumerate(line_ids) for start in range(0, len(ids), size)]


def line_log_likelihoods(backbone: Any, heldout: HeldoutLines, line_ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """``(forward, backward)``, each ``(lines,)`` float64: the sum over each line's words of
    ``log P(w_i | <S>, w_<i)`` and ``log P(w_i | w_>i, </S>)`` in nats under ``backbone``."""
    from keras import ops

    from ptmkit_export.fields import tokenizer_character_table

    specials = heldout.specials
    spec = next(s for s in heldout.inputs if s.field == "char_ids")
    characters = tokenizer_character_table(heldout.tokenizer, int(spec.sizes[spec.axes[-1]]))
    chunks = _chunks(line_ids, max(1, heldout.sequence_length - 2))
    totals = np.zeros((2, len(line_ids)), np.float64)
    for first in range(0, len(chunks), heldout.batch_size):
        batch = chunks[first : first + heldout.batch_size]
        length = max(len(ids) for _, ids in batch) + 2
        token_ids = np.full((len(batch), length), specials.padding_id, np.int32)
        mask = np.zeros((len(batch), length), np.int32)
        for row, (_, ids) in enumerate(batch):
            token_ids[row, : len(ids) + 2] = [specials["bos"], *ids, specials["eos"]]
            mask[row, : len(ids) + 2] = 1
        outputs = backbone(derive_inputs(heldout.inputs, token_ids, None, mask, characters), training=False)
        for direction, (key, shift) in enumerate(((FORWARD_OUTPUT, -1), (BACKWARD_OUTPUT, 1))):
            log_probs = np.asarray(ops.log_softmax(ops.cast(backbone.logits(outputs[key]), "float32"), axis=-1))
            for row, (line, ids) in enumerate(batch):
                positions = np.arange(1, len(ids) + 1)  # the words; forward reads them from position i - 1, backward from i + 1
                targets = softmax_targets(token_ids[row, positions], log_probs.shape[-1], specials["unk"])
                totals[direction, line] += float(log_probs[row, positions + shift, targets].sum())
    return totals[0], totals[1]
