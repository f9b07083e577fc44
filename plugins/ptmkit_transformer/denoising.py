"""The denoising objectives of the transformer family: ``bart``, ``t5_span`` and ``mass``, which
pre-train the encoder-decoder on a monolingual corpus (``ptmkit train transformer --corpus FILE
--objective bart``).

Each turns a document (a corpus line: its sentences' token ids, no specials) into a
``(source, target)`` pair with the noise functions of :mod:`ptmkit_transformer.noising`; the
pairs are then packed, and trained with the loss and schedule, exactly as the ``translation``
objective's (:func:`ptmkit_transformer.objectives.pack_pairs`)::

    bart     source: the noised document          target: the document        (Lewis et al. 2020)
    t5_span  source: kept runs and sentinels      target: sentinels and spans  (Raffel et al. 2020)
    mass     source: the fragment masked          target: the fragment         (Song et al. 2019)

so the decoder reads ``<s> target`` and predicts ``target </s>``. For MASS this means the decoder's
first input is ``<s>`` where the paper's Figure 1 has ``[M]`` (the rest is the fragment shifted
right, as in the paper), its positions count from the fragment's start rather than the sentence's,
and it also predicts ``</s>`` after the fragment.

The documents of step ``k`` and every noise draw are a pure function of ``(seed, k)``
(:func:`noised_pairs`), so a resumed run sees the batches the uninterrupted one does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from ptmkit.api import ConfigError
from ptmkit_transformer import noising
from ptmkit_transformer.config import TransformerConfig

DENOISING = ("bart", "t5_span", "mass")
MASK = "<mask>"
#: Sentence boundaries of a corpus line (BART permutes sentences "based on full stops").
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")


def sentinel(index: int) -> str:
    """The ``index``-th sentinel token, T5's spelling: ``<extra_id_0>``, ``<extra_id_1>``, ..."""
    return f"<extra_id_{index}>"


def sentinel_count(config: TransformerConfig) -> int:
    """The most noise spans T5's span corruption makes in a source of at most
    ``max_sequence_length - 1`` tokens (:func:`ptmkit_transformer.noising.t5_noise_counts`):
    how many sentinels the vocabulary holds."""
    lengths = range(2, config.max_sequence_length)
    return max([1, *(noising.t5_noise_counts(n, config.t5_noise_density, config.t5_mean_span_length)[1] for n in lengths)])


def denoising_specials(config: TransformerConfig) -> list[str]:
    """The specials a denoising run's vocabulary adds after the family's four: ``<mask>`` and
    :func:`sentinel_count` sentinels (ids 4, 5, ...), whatever the objective, so that a run may
    continue with another denoising objective on the same vocabulary."""
    return [MASK, *(sentinel(i) for i in range(sentinel_count(config)))]


def special_ids(tokenizer: Any, config: TransformerConfig) -> dict[str, Any]:
    """``{"mask": id, "sentinels": [ids]}`` of the run's vocabulary.

    Raises:
        ConfigError: a vocabulary without them (an ``--init`` run trained for translation only).
    """
    ids = {token: tokenizer.token_to_id(token) for token in denoising_specials(config)}
    missing = [token for token, value in ids.items() if value is None]
    if missing:
        raise ConfigError(f"config key 'model.init': the run's vocabulary has no {missing[0]} token; denoising needs a vocabulary trained with it")
    return {"mask": ids[MASK], "sentinels": [ids[sentinel(i)] for i in range(sentinel_count(config))]}


def split_text(text: str) -> list[str]:
    """A corpus line's sentences, cut after ``.``, ``!`` or ``?`` followed by white space."""
    return [piece for piece in SENTENCE_END.split(text.strip()) if piece]


def fit_document(sentences: Sequence[Sequence[int]], limit: int) -> list[list[int]]:
    """The leading sentences of a document that fit in ``limit`` tokens (the first one cut when it
    alone is longer), so that the target is never cut and the source is its noised version."""
    kept: list[list[int]] = []
    total = 0
    for sentence in sentences:
        if total + len(sentence) > limit:
            if not kept:
                kept.append(list(sentence[:limit]))
            break
        kept.append(list(sentence))
        total += len(sentence)
    return [s for s in kept if s]


def noise_document(sentences: Sequence[Sequence[int]], rng: np.random.Generator, config: TransformerConfig, ids: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """``(source, target)`` int64 token ids of one document under ``config.objective`` (module
    docstring), the draws taken from ``rng`` in this order: BART's noises in
    :data:`~ptmkit_transformer.config.BART_NOISES` order; T5's two segmentations; MASS's start."""
    document = np.concatenate([np.asarray(s, np.int64) for s in sentences])
    if config.objective == "t5_span":
        return noising.t5_span_corruption(document, rng, ids["sentinels"], config.t5_noise_density, config.t5_mean_span_length)
    if config.objective == "mass":
        encoder, _, fragment = noising.mass_fragment(document, rng, ids["mask"], config.mass_ratio)
        return encoder, fragment
    source = document
    for name in config.noises():
        if name == "sentence_permutation":
            source = noising.sentence_permutation(sentences, rng)
        elif name == "text_infilling":
            source = noising.text_infilling(source, rng, ids["mask"], config.bart_infilling_ratio, config.bart_poisson_lambda)
        elif name == "token_masking":
            source = noising.token_masking(source, rng, ids["mask"], config.bart_masking_ratio)
        elif name == "token_deletion":
            source = noising.token_deletion(source, rng, config.bart_deletion_ratio)
        else:
            source = noising.document_rotation(source, rng)
    return source, document


def step_rng(seed: int, step: int) -> np.random.Generator:
    """The noise draws of (0-based) step ``step``: a generator seeded with ``(seed, step)``."""
    return np.random.default_rng([seed, 29, step])


def noised_pairs(documents: Sequence[Sequence[Sequence[int]]], rows: Sequence[int], step: int, config: TransformerConfig, ids: dict[str, Any]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``(sources, targets)`` of step ``step``: the documents ``rows`` noised in order with
    :func:`step_rng`."""
    rng = step_rng(config.seed, step)
    pairs = [noise_document(documents[i], rng, config, ids) for i in rows]
    return [p[0] for p in pairs], [p[1] for p in pairs]
