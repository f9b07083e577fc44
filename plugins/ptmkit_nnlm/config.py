"""NNLM hyper-parameters (the ``[model]`` section of a run config)."""

from __future__ import annotations

import dataclasses

from ptmkit.api import ConfigError, check_non_negative, check_positive


@dataclasses.dataclass
class NNLMConfig:
    """Bengio et al. 2003's neural probabilistic language model.

    Attributes:
        context: ``n - 1`` previous words the model conditions on (the paper's best: 4, ``n = 5``).
        vector_size: ``m``, dimensions of the shared word feature matrix ``C`` (the word vectors).
        hidden: ``h``, tanh hidden units (0: none, the paper's "no hidden layer" variant).
        direct: direct connections ``W`` from the concatenated features to the output.
        min_count: rarer words become ``<unk>``.
        max_vocab: keep at most this many words (0: no limit).
        epochs: passes over the training lines.
        batch_size: n-grams per step.
        learning_rate: Adam's step size (the paper used plain SGD with decay; Adam converges in
            the few epochs a CPU affords).
        heldout_lines: the last non-blank lines of the corpus, kept out of training (and out of
            the vocabulary count) for perplexity; 0: none.
        validation_lines: the non-blank lines just before the held-out ones, kept out of training
            (and out of the vocabulary count) to choose the epoch: with ``patience``, the
            validation cross-entropy is measured after every epoch (0: none).
        patience: stop when the validation cross-entropy has not improved for this many epochs,
            and keep the best epoch's weights (early stopping on validation data, as Bengio et
            al. 2003 trained; needs ``validation_lines``); 0: train every epoch, keep the last.
        lowercase: lower-case the corpus.
        seed: initialisation and shuffling (each epoch's order drawn from ``(seed, epoch)``).
        checkpoint_seconds: save the weights and Adam's state at the end of an epoch once this
            many seconds of training have passed since the last save (0: after every epoch), in
            the run's ``checkpoint/``; ``ptmkit train ... --resume`` continues an interrupted
            run from there.
    """

    context: int = 4
    vector_size: int = 60
    hidden: int = 100
    direct: bool = True
    min_count: int = 5
    max_vocab: int = 0
    epochs: int = 3
    batch_size: int = 256
    learning_rate: float = 1e-3
    heldout_lines: int = 200
    validation_lines: int = 0
    patience: int = 0
    lowercase: bool = False
    seed: int = 1
    checkpoint_seconds: float = 60.0

    def validate(self) -> None:
        check_positive(self, "model", "context", "vector_size", "min_count", "epochs", "batch_size", "learning_rate")
        check_non_negative(self, "model", "hidden", "max_vocab", "heldout_lines", "validation_lines", "patience", "checkpoint_seconds")
        if self.patience and not self.validation_lines:
            raise ConfigError(f"config key 'model.patience' = {self.patience} needs validation lines to watch: set 'model.validation_lines' (e.g. 200)")
        if not self.hidden and not self.direct:
            raise ConfigError("config keys 'model.hidden' = 0 and 'model.direct' = false leave no path to the output")
