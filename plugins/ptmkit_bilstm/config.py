"""BiLSTM student hyper-parameters (the ``[model]`` section of a run config)."""

from __future__ import annotations

import dataclasses

from ptmkit.api import ConfigError, check_choice, check_non_negative, check_positive

#: ``model.pooling``: what the ReLU layer reads (:class:`~ptmkit_bilstm.backbone.BiLSTMBackbone`).
POOLINGS = ("last", "max")
#: Special tokens of the vocabulary: ``<pad>`` (id 0) and ``<unk>`` (id 1), before the words.
PAD, UNK = "<pad>", "<unk>"


@dataclasses.dataclass
class BiLSTMConfig:
    """The BiLSTM student of Tang et al. 2019 ("Distilling Task-Specific Knowledge from BERT into
    Simple Neural Networks", section 3.1): word embeddings initialised from word2vec and trained,
    one bidirectional LSTM layer, its last forward and backward states concatenated, a ReLU layer,
    then the classification head's logits.

    ``ptmkit train bilstm --corpus TEXTS --set model.word_vectors=RUN`` builds the vocabulary from
    ``TEXTS`` (the task's texts: the paper's students read the task's words) and copies each word's
    vector from ``RUN``; ``ptmkit finetune`` then trains everything, with ``--teacher`` to distil.

    Attributes:
        word_vectors: a finished run of a family that provides static word vectors (word2vec,
            GloVe, fastText, NNLM: :class:`ptmkit.api.ProvidesWordVectors`). Required.
        max_words: at most this many corpus words enter the vocabulary, most frequent first (0: all).
        min_count: a corpus word must occur this often to enter it.
        lowercase: lower-case texts before looking words up; always on when ``word_vectors``'s
            run lower-cased (its ``model.lowercase``).
        vocabulary_size: rows of the embedding table: ``<pad>``, ``<unk>``, then the words.
            Written by ``ptmkit train bilstm`` (leave 0).
        embedding_dim: the vectors' dimension. Written by ``ptmkit train bilstm`` (leave 0).
        units: LSTM units a direction (the paper's SST-2 student: 150).
        hidden_dim: width of the ReLU layer on the pooled states (ours; the paper names the layer,
            not this value here).
        pooling: ``last`` (the paper's: the forward state at each text's last word, the backward
            at its first, concatenated) or ``max`` (the maximum over the words of each of the
            ``2 * units`` features).
        dropout: dropout on the pooled states before the ReLU layer (training only).
        trainable_embeddings: the embedding table trains (the paper's: initialised from word2vec
            and fine-tuned).
        seed: the random seed of the backbone's initial weights and of the initial rows
            of corpus words without a vector (normal, the vectors' own standard deviation).
    """

    word_vectors: str = ""
    max_words: int = 50000
    min_count: int = 1
    lowercase: bool = False
    vocabulary_size: int = 0
    embedding_dim: int = 0
    units: int = 150
    hidden_dim: int = 200
    pooling: str = "last"
    dropout: float = 0.1
    trainable_embeddings: bool = True
    seed: int = 1

    def validate(self) -> None:
        check_positive(self, "model", "min_count", "units", "hidden_dim")
        check_non_negative(self, "model", "max_words", "vocabulary_size", "embedding_dim")
        check_choice(self, "model", "pooling", POOLINGS)
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"config key 'model.dropout' must be in [0, 1), got {self.dropout}")
