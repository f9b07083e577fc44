"""GloVe hyper-parameters (the ``[model]`` section of a run config)."""

from __future__ import annotations

import dataclasses

from ptmkit.api import check_non_negative, check_positive


@dataclasses.dataclass
class GloVeConfig:
    """GloVe (Pennington et al. 2014) with the reference implementation's defaults
    (stanfordnlp/GloVe ``demo.sh``: window 15, ``x_max`` 100, ``alpha`` 0.75, ``eta`` 0.05, 15
    iterations), except ``vector_size`` 100.

    Attributes:
        vector_size: dimensions.
        window: symmetric context window; a pair at distance ``d`` adds ``1 / d`` (windows stop
            at line ends, as ``cooccur.c``).
        min_count: words occurring fewer times are dropped.
        max_vocab: keep at most this many words (0: no limit).
        x_max: the weighting ``f(x) = (x / x_max) ** alpha`` caps at 1 from ``x_max`` up.
        alpha: exponent of the weighting.
        epochs: passes over the shuffled co-occurrence records.
        learning_rate: AdaGrad's ``eta``.
        batch_size: co-occurrence records per step.
        chunk_tokens: tokens counted at a time (co-occurrence counting memory).
        lowercase: lower-case the corpus.
        seed: initial vectors and the record shuffles (each epoch's drawn from ``(seed, epoch)``).
        jit_compile: XLA-compile the AdaGrad step.
        checkpoint_seconds: save the parameters and AdaGrad's accumulators at the end of an
            epoch once this many seconds of training have passed since the last save (0: after
            every epoch), in the run's ``checkpoint/``; ``ptmkit train ... --resume`` continues
            an interrupted run from there (the co-occurrences are counted again).
    """

    vector_size: int = 100
    window: int = 15
    min_count: int = 5
    max_vocab: int = 0
    x_max: float = 100.0
    alpha: float = 0.75
    epochs: int = 15
    learning_rate: float = 0.05
    batch_size: int = 4096
    chunk_tokens: int = 200_000
    lowercase: bool = False
    seed: int = 1
    jit_compile: bool = True
    checkpoint_seconds: float = 60.0

    def validate(self) -> None:
        check_positive(self, "model", "vector_size", "window", "min_count", "epochs", "batch_size", "chunk_tokens", "x_max", "alpha", "learning_rate")
        check_non_negative(self, "model", "max_vocab", "checkpoint_seconds")
