"""Causal language modelling (Radford et al. 2018, section 3.1): predict each token from the
tokens before it, ``L = -sum_i log P(u_i | u_1 .. u_{i-1})``.

It serves any family whose backbone offers :data:`CAUSAL_SEQUENCE_OUTPUT` (a ``sequence_output``
whose position ``i`` sees positions ``<= i`` only) and :data:`~ptmkit.api.TOKEN_EMBEDDING`
(logits through the tied token embedding, ``h @ E^T``, as GPT-1 and GPT-2 compute them).

Besides the window-level held-out loss every objective gets, it scores the held-out lines one by
one (:meth:`CausalLM.score_lines`): each line ``<|endoftext|> u_1 .. u_n`` is scored on its own
``n`` tokens, and the run reports

- ``heldout_token_perplexity``: ``exp(-sum log P / tokens)``;
- ``heldout_word_perplexity``: ``exp(-sum log P / words)``, words counted with ``str.split()``
  (a line's token log-likelihoods summed, over its whitespace words), comparable across
  tokenizers and with the NNLM family's word-level perplexity on the same lines;
- ``heldout_bits_per_byte``: ``-sum log2 P / UTF-8 bytes`` (Graves 2013; Gao et al. 2020);
- ``heldout_unigram_word_perplexity``: the same per-word figure for the unigram model of the
  training split's tokens (add-one smoothed), the floor a language model must beat;
- ``heldout_unknown_tokens``: with a tokenizer that has an unknown token (a closed vocabulary,
  e.g. ULMFiT's words), how many held-out tokens are it (scored as it, as in training).

A line longer than ``train.sequence_length`` tokens is scored with overlapping windows of that
length, the window moving by half its length, each token once, with at least half a window of
context (Hugging Face's "perplexity of fixed-length models" recipe).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ptmkit.api import SEQUENCE_OUTPUT, TOKEN_EMBEDDING, HeldoutLines, Objective, SpecialTokens, derive_inputs

#: The capability of a backbone whose ``sequence_output`` at position i depends on positions <= i only.
CAUSAL_SEQUENCE_OUTPUT = "causal_sequence_output"


@dataclasses.dataclass
class CausalLMConfig:
    """Causal-LM settings (section ``[objectives.clm]``); it has none yet: every real token after
    the first of a window is a target."""

    def validate(self) -> None:
        return None


def shift_targets(token_ids: np.ndarray, padding_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Next-token targets and weights of a packed batch.

    Args:
        token_ids: ``(batch, sequence)`` int32, right-padded.
        padding_mask: ``(batch, sequence)``, 1 on tokens.

    Returns:
        ``(targets, weights)``: ``(batch, sequence)`` int32, ``targets[:, i] = token_ids[:, i + 1]``
        (0 at the last position), and float32 weights, 1 where position ``i + 1`` is a token.
    """
    targets = np.zeros_like(token_ids, dtype=np.int32)
    weights = np.zeros(token_ids.shape, np.float32)
    targets[:, :-1] = token_ids[:, 1:]
    weights[:, :-1] = padding_mask[:, 1:]
    return targets, weights


def score_windows(line_ids: list[list[int]], bos: int, window: int) -> list[tuple[int, list[int], int]]:
    """Windows covering each line ``[bos] + ids`` so that every token of ``ids`` is predicted once.

    Returns:
        ``(line index, window ids, first scored position)``: the window's positions from ``first``
        on (at least 1) are predicted from the positions before them in the window.
    """
    windows = []
    stride = max(1, window // 2)
    for line, ids in enumerate(line_ids):
        sequence = [bos, *ids]
        scored = 1  # the next position of ``sequence`` to predict
        start = 0
        while scored < len(sequence):
            chunk = sequence[start : start + window]
            windows.append((line, chunk, scored - start))
            scored = start + len(chunk)
            start = max(start + stride, scored - window + stride) if scored < len(sequence) else start
    return windows


class CausalLM(Objective):
    """Next-token prediction through the tied token embedding, with line-level held-out scores."""

    name = "clm"
    description = "causal LM: each token from the ones before it (GPT); per-token, per-word perplexity and bits per byte"
    requires = frozenset({SEQUENCE_OUTPUT, CAUSAL_SEQUENCE_OUTPUT, TOKEN_EMBEDDING})
    config_class = CausalLMConfig
    token_level_lm = True

    def prepare(
        self, batch: Mapping[str, np.ndarray], rng: np.random.Generator, config: CausalLMConfig, specials: SpecialTokens, vocabulary_size: int
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
        targets, weights = shift_targets(batch["token_ids"], batch["padding_mask"])
        return {}, {"clm": targets}, {"clm": weights}

    def build(self, backbone: Any, inputs: dict[str, Any], config: CausalLMConfig) -> tuple[dict, dict, dict, dict]:
        import keras

        sequence_output = backbone(inputs)["sequence_output"]
        logits = keras.layers.Activation("linear", dtype="float32", name="clm")(backbone.token_embedding(sequence_output, reverse=True))
        # with the core's relative sample weights (mean 1 per step) the default reduction is the
        # mean over the real targets, so that exp(loss) is the per-token perplexity
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        return {}, {"clm": logits}, {"clm": loss}, {"clm": metrics}

    def score_lines(self, backbone: Any, heldout: HeldoutLines, config: CausalLMConfig) -> dict[str, Any]:
        """Per-token and per-word perplexity and bits per byte of the held-out lines (module
        docstring), with the unigram reference."""
        texts = heldout.texts
        line_ids = [e.ids for e in heldout.tokenizer.encode_batch(texts, add_special_tokens=False)]
        log_likelihood = line_log_likelihoods(backbone, heldout, line_ids)
        counts = heldout.token_counts.astype(np.float64) + 1.0  # add-one (Laplace) smoothing
        unigram = np.log(counts / counts.sum())
        unigram_ll = np.array([unigram[ids].sum() if ids else 0.0 for ids in line_ids])
        tokens = sum(len(ids) for ids in line_ids)
        words = sum(len(text.split()) for text in texts)
        size = sum(len(text.encode("utf-8")) for text in texts)
        total = float(log_likelihood.sum())
        unknown = {} if heldout.specials.unk is None else {"heldout_unknown_tokens": sum(ids.count(heldout.specials.unk) for ids in line_ids)}
        return {
            "heldout_lines": len(texts),
            "heldout_scored_tokens": tokens,
            **unknown,
            "heldout_words": words,
            "heldout_bytes": size,
            "heldout_token_perplexity": round(math.exp(-total / max(tokens, 1)), 3),
            "heldout_word_perplexity": round(math.exp(-total / max(words, 1)), 3),
            "heldout_bits_per_byte": round(-total / math.log(2) / max(size, 1), 4),
            "heldout_unigram_word_perplexity": round(math.exp(-float(unigram_ll.sum()) / max(words, 1)), 3),
        }


def line_log_likelihoods(backbone: Any, heldout: HeldoutLines, line_ids: list[list[int]]) -> np.ndarray:
    """``(lines,)`` float64: each line's ``sum log P(u_i | <|endoftext|>, u_<i)`` in nats under
    ``backbone`` (:func:`score_windows` windows of ``heldout.sequence_length``)."""
    bos = heldout.specials["bos"]
    windows = score_windows(line_ids, bos, heldout.sequence_length)
    totals = np.zeros(len(line_ids), np.float64)
    pad = heldout.specials.padding_id
    for first in range(0, len(windows), heldout.batch_size):
        batch = windows[first : first + heldout.batch_size]
        length = max(len(ids) for _, ids, _ in batch)
        token_ids = np.full((len(batch), length), pad, np.int32)
        mask = np.zeros((len(batch), length), np.int32)
        for row, (_, ids, _) in enumerate(batch):
            token_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1
        hidden = backbone(derive_inputs(heldout.inputs, token_ids, None, mask), training=False)["sequence_output"]
        log_probs = np.asarray(log_softmax(backbone.token_embedding(hidden, reverse=True)))
        for row, (line, ids, scored) in enumerate(batch):
            positions = np.arange(scored, len(ids))
            totals[line] += float(log_probs[row, positions - 1, np.asarray(ids)[positions]].sum())
    return totals


def log_softmax(logits: Any) -> Any:
    """``log_softmax`` over the last axis, in float32."""
    from keras import ops

    return ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
