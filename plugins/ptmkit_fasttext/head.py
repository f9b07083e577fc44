"""The ``fasttext`` fine-tune head: fastText's supervised classifier (Joulin et al. 2017)
initialised from a word-vector run, like ``./fasttext supervised -pretrainedVectors``.

``ptmkit finetune RUN_DIR`` on a run of any family with static word vectors (fastText, word2vec,
GloVe, ...) trains it. The input matrix starts as the run's whole matrix: its word rows and, for
fastText, its character n-gram bucket rows, hashed with the run's ``minn`` / ``maxn`` /
``bucket`` (fastText's ``-pretrainedVectors`` reads a ``.vec`` and so copies word vectors only,
which ``head.subwords = false`` does). Words
of the training set the run does not know get rows after the run's words, drawn as fastText
draws them (uniform in ``[-1/dim, 1/dim]``); the output matrix starts at 0. Training is the
supervised model's (:func:`ptmkit_fasttext.supervised.fit_classifier`). The fine-tuned run is a
``fasttext-supervised`` run, which ``ptmkit export`` and ``ptmkit predict`` serve.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.api import WORD_VECTORS, ConfigError, Head, TrainedHead


@dataclasses.dataclass
class FastTextHeadConfig:
    """The ``[head]`` section of ``ptmkit finetune`` with the ``fasttext`` head: fastText's
    supervised defaults. ``vector_size``, ``minn``, ``maxn`` and ``bucket`` come from the vectors.

    Attributes:
        word_ngrams: longest word n-gram (1: words only); word n-grams hash into the vectors'
            buckets (fastText), or into ``bucket`` new rows for vectors without buckets.
        bucket: word n-gram rows for vectors without buckets (word2vec, GloVe) when
            ``word_ngrams > 1``.
        min_count: training words rarer than this that the vectors do not know get no row.
        epochs: passes over the training file.
        learning_rate: initial SGD learning rate, decaying linearly to 0.
        batch_size: examples per step (summed loss: each example takes a full step).
        lowercase: lower-case the texts (always on when the pre-trained run lower-cased).
        subwords: use the vectors' character n-gram rows (fastText runs); false: word rows only,
            as ``-pretrainedVectors`` with a ``.vec`` file.
        seed: initialisation of new rows and the example order.
        loss: fastText's ``-loss``: ``softmax`` or ``ova`` (one-vs-all: a sigmoid per label;
            see :class:`ptmkit_fasttext.supervised.FastTextClassifierConfig`).
    """

    word_ngrams: int = 1
    bucket: int = 2_000_000
    min_count: int = 1
    epochs: int = 5
    learning_rate: float = 0.1
    batch_size: int = 16
    lowercase: bool = False
    subwords: bool = True
    seed: int = 1
    loss: str = "softmax"

    def validate(self) -> None:
        from ptmkit_fasttext.supervised import LOSS_ACTIVATIONS

        if self.loss not in LOSS_ACTIVATIONS:
            raise ConfigError(f"config key 'head.loss' = {self.loss!r}: expected one of {', '.join(map(repr, LOSS_ACTIVATIONS))} (fastText's -loss)")
        for name in ("word_ngrams", "bucket", "min_count", "epochs", "learning_rate", "batch_size"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"config key 'head.{name}' must be > 0, got {getattr(self, name)}")


class FastTextHead(Head):
    """fastText's classifier on pre-trained word vectors (see the module docstring)."""

    name = "fasttext"
    description = "fastText supervised classifier initialised from static word vectors (-pretrainedVectors, n-gram rows too)"
    requires = frozenset({WORD_VECTORS})
    config_class = FastTextHeadConfig
    run_family = "fasttext-supervised"

    def train(
        self, vectors: Any, pretrained_config: Any, texts: list[str], label_ids: np.ndarray, labels: list[str], config: FastTextHeadConfig, run_dir: Path, console: Any
    ) -> TrainedHead:
        from ptmkit.api import Vocabulary, atomic_save, quiet_tensorflow, save_model_weights, seed_everything
        from ptmkit_fasttext.supervised import FastTextClassifierConfig, fit_classifier, pad_rows, text_rows

        quiet_tensorflow()
        seed_everything(config.seed)
        lowercase = config.lowercase or bool(getattr(pretrained_config, "lowercase", False))
        subwords = config.subwords and bool(getattr(vectors, "subword_family", False))
        minn, maxn, parent_bucket = (int(vectors.minn), int(vectors.maxn), int(vectors.bucket)) if subwords else (0, 0, 0)
        if maxn == 0 and config.word_ngrams == 1:
            parent_bucket = 0  # rows nothing would index
        bucket = (parent_bucket or config.bucket) if maxn > 0 or config.word_ngrams > 1 else 0
        model_config = FastTextClassifierConfig(
            vector_size=vectors.dim, word_ngrams=config.word_ngrams, minn=minn if maxn else 0, maxn=maxn, bucket=bucket, min_count=config.min_count,
            epochs=config.epochs, learning_rate=config.learning_rate, batch_size=config.batch_size, lowercase=lowercase, seed=config.seed,
            loss=config.loss,
        )
        model_config.validate()

        split = [model_config.tokens(t) for t in texts]  # ova: ending with fastText's </s>
        counts = Counter(w for words in split for w in words)
        new = sorted(((w, c) for w, c in counts.items() if c >= config.min_count and w not in vectors.index), key=lambda item: -item[1])
        words = list(vectors.words) + [w for w, _ in new]
        index = {w: i for i, w in enumerate(words)}
        known = len(vectors.words)
        dim = vectors.dim
        rng = np.random.default_rng(config.seed)
        initial = np.empty((len(words) + bucket, dim), np.float32)
        # With n-grams, a word's own row (its vector is the mean with its n-gram rows); without, its
        # vector (fastText's .vec), which is the same row for word2vec or GloVe.
        initial[:known] = vectors.matrix[:known] if subwords else vectors.vectors[:known]
        initial[known : len(words)] = (rng.random((len(new), dim), dtype=np.float32) * 2.0 - 1.0) / dim
        if bucket and bucket == parent_bucket:
            initial[len(words) :] = vectors.matrix[known:]
        else:
            for start in range(len(words), len(initial), 1 << 18):  # word n-gram rows of vectors without buckets
                stop = min(start + (1 << 18), len(initial))
                initial[start:stop] = (rng.random((stop - start, dim), dtype=np.float32) * 2.0 - 1.0) / dim
        features = [text_rows(tokens, index, model_config.word_ngrams, bucket, model_config.minn, maxn) for tokens in split]
        in_vectors = sum(c for w, c in counts.items() if w in vectors.index)
        console.print(
            f"{len(texts):,} training texts, {len(labels)} labels; {known:,} pre-trained words + {len(new):,} new, {bucket:,} n-gram buckets"
            f"{' (pre-trained)' if bucket and bucket == parent_bucket else ''}; {in_vectors / max(1, sum(counts.values())):.1%} of training tokens pre-trained"
            f"{', lower-cased' if lowercase else ''}"
        )
        model, loss = fit_classifier(features, label_ids, initial, len(labels), model_config, rng, console)
        del initial
        all_counts = np.asarray([counts.get(w, 0) for w in words], np.int64)
        Vocabulary(words, all_counts, sum(counts.values()), len(counts), len(texts)).save(run_dir / "vocabulary.tsv")
        atomic_save(run_dir / "classifier.weights.h5", lambda tmp: save_model_weights(model, tmp))

        def logits(batch: list[str]) -> np.ndarray:
            rows = [text_rows(model_config.tokens(t), index, model_config.word_ngrams, bucket, model_config.minn, maxn) for t in batch]
            return np.asarray(model.predict(pad_rows(rows), batch_size=256, verbose=0), np.float32)

        console.print(f"final training loss {loss:.4f}")
        return TrainedHead(dataclasses.asdict(model_config), logits)
