"""CoVe hyper-parameters (the ``[model]`` section of a run config)."""

from __future__ import annotations

import dataclasses

from ptmkit.api import ConfigError, check_positive

#: Special tokens of the source vocabulary: ids 0 and 1, before the GloVe words.
SOURCE_SPECIALS = 2


@dataclasses.dataclass
class CoVeConfig:
    """CoVe (McCann et al. 2017): a 2-layer biLSTM over frozen GloVe vectors, trained as the encoder
    of an attentional LSTM translation model, then used as ``[GloVe(w); CoVe(w)]`` features.

    The paper's (salesforce/cove's ``MTLSTM``): 300-dimensional GloVe (840B tokens), 2 biLSTM
    layers of 300 units a direction, a 2-layer LSTM decoder with attention, trained on WMT'16
    English-German (CoVe-L) with dropout 0.2. The defaults are scaled down to train on the shipped
    10,000 English-German pairs within a couple of minutes on a CPU, on 100-dimensional vectors
    (``ptmkit train glove``'s default ``vector_size``). Like every family that trains itself,
    the training keys sit here too.

    Attributes:
        glove: the input vectors, frozen: a ``ptmkit train glove`` run directory (or any run whose
            family provides word vectors), or a GloVe text file (``word v_1 ... v_d`` a line, most
            frequent word first; a word2vec ``count dim`` first line is skipped). Required.
        glove_dim: the vectors' dimension; a file or run of another dimension is refused.
        vocabulary_size: source ids: ``<pad>``, ``<unk>`` and the first ``vocabulary_size - 2``
            words of ``glove`` (the embedding table's rows; rows of absent words stay zero).
        lowercase: lower-case source text before looking words up (for lower-cased vectors).
        hidden_dim: units of each encoder LSTM layer and direction; CoVe(w) is ``2 * hidden_dim``
            wide (the paper: 300).
        lstm_layers: encoder biLSTM layers (the paper: 2); each reads the previous one's
            forward and backward states.
        target_vocabulary_size: target-side words of the decoder's softmax, ``<pad>``, ``<unk>``,
            ``<s>`` and ``</s>`` included; the most frequent of the training targets.
        target_min_frequency: a target word must occur this often to enter that vocabulary.
        decoder_dim: units of each decoder LSTM layer, and of the attentional state.
        decoder_layers: decoder LSTM layers (the paper: 2).
        dropout: dropout between the encoder's biLSTM layers, on its output and on the attentional
            state (the paper: 0.2).
        max_length: words kept per side of a training pair (longer sides are cut, and counted).
        batch_size: pairs per training step.
        max_steps: training steps (Adam).
        learning_rate: Adam's step size.
        seed: the initial weights and each step's pairs.
    """

    glove: str = ""
    glove_dim: int = 100
    vocabulary_size: int = 20000
    lowercase: bool = False
    hidden_dim: int = 100
    lstm_layers: int = 2
    target_vocabulary_size: int = 6000
    target_min_frequency: int = 2
    decoder_dim: int = 128
    decoder_layers: int = 1
    dropout: float = 0.2
    max_length: int = 24
    batch_size: int = 32
    max_steps: int = 400
    learning_rate: float = 2e-3
    seed: int = 1

    def validate(self) -> None:
        check_positive(
            self, "model", "glove_dim", "vocabulary_size", "hidden_dim", "lstm_layers", "target_vocabulary_size", "target_min_frequency",
            "decoder_dim", "decoder_layers", "max_length", "batch_size", "max_steps", "learning_rate",
        )
        if self.vocabulary_size <= SOURCE_SPECIALS:
            raise ConfigError(f"config key 'model.vocabulary_size' = {self.vocabulary_size} must be at least 3 (<pad>, <unk> and a word)")
        if self.target_vocabulary_size < 5:
            raise ConfigError(f"config key 'model.target_vocabulary_size' = {self.target_vocabulary_size} must be at least 5 (4 special tokens and a word)")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"config key 'model.dropout' must be in [0, 1), got {self.dropout}")
