"""ULMFiT's AWD-LSTM hyper-parameters (the ``[model]`` section of a run config)."""

from __future__ import annotations

import dataclasses
import math

from ptmkit.api import ConfigError, check_non_negative, check_positive


@dataclasses.dataclass
class ULMFiTConfig:
    """Size of an AWD-LSTM language model (Merity et al. 2017) and of its word vocabulary, with
    the dropouts ULMFiT trains it with (Howard and Ruder 2018; fastai's ``awd_lstm_lm_config``).

    The paper's model: a 400-dimensional embedding, 3 LSTM layers of 1,150 cells (fastai: 1,152),
    the last one 400 wide so that the output layer is the embedding transposed (tied weights), a
    vocabulary of the 60,000 most frequent words of Wikitext-103. The defaults here are that
    architecture scaled down to train on a CPU in minutes.

    Attributes:
        vocabulary_size: words in the vocabulary (and the softmax), the special tokens ``<pad>``,
            ``<unk>``, ``<s>`` and ``</s>`` included: the most frequent of the corpus.
        min_frequency: a word must occur this often in the corpus to enter the vocabulary.
        lowercase: lower-case the text before splitting it into words (whitespace).
        embedding_dim: the embedding's width, and the last LSTM layer's (tied input and output
            embeddings; the paper: 400).
        hidden_dim: cells of every LSTM layer but the last (the paper: 1,150).
        num_layers: LSTM layers (the paper: 3).
        embedding_dropout: the probability that a word's whole embedding row is zeroed for a
            batch (Gal and Ghahramani 2016's dropout on words; fastai's ``embed_p``, 0.02 in its
            LM config).
        input_dropout: locked (variational) dropout on the embeddings: one mask per sequence and
            feature, the same at every time step (fastai's ``input_p``: 0.25).
        weight_dropout: DropConnect (Wan et al. 2013) on each LSTM layer's hidden-to-hidden
            weights, one mask per batch shared by every time step (fastai's ``weight_p``: 0.2).
        hidden_dropout: locked dropout on the output of every LSTM layer but the last (fastai's
            ``hidden_p``: 0.15).
        output_dropout: locked dropout on the last layer's output before the tied softmax
            (fastai's ``output_p``: 0.1); concat pooling reads the states before it.
        decoder_bias: give the tied softmax a bias of its own (fastai's decoder has one): it
            holds each word's log-prior, which the tied weights alone learn slowly.
        ar_alpha: activation regularisation (AR; Merity et al. 2017, section 4.6; fastai's
            ``alpha``: 2): while training, ``ar_alpha * mean(d ** 2)`` is added to the loss, ``d``
            the last LSTM layer's output after ``output_dropout``, the mean over tokens (padding
            left out) and features; 0 turns it off. Held-out losses and perplexities leave it out.
            It applies wherever the backbone trains: both LM stages and the classifier (as
            fastai's text classifier does).
        tar_beta: temporal activation regularisation (TAR; fastai's ``beta``: 1): while
            training, ``tar_beta * mean((h_t - h_{t-1}) ** 2)`` is added to the loss, ``h`` the
            last layer's output before dropout, over consecutive tokens; 0 turns it off.
    """

    vocabulary_size: int = 8000
    min_frequency: int = 2
    lowercase: bool = False
    embedding_dim: int = 128
    hidden_dim: int = 256
    num_layers: int = 3
    embedding_dropout: float = 0.02
    input_dropout: float = 0.25
    weight_dropout: float = 0.2
    hidden_dropout: float = 0.15
    output_dropout: float = 0.1
    decoder_bias: bool = True
    ar_alpha: float = 2.0
    tar_beta: float = 1.0

    def validate(self) -> None:
        check_positive(self, "model", "vocabulary_size", "min_frequency", "embedding_dim", "hidden_dim", "num_layers")
        if self.vocabulary_size < 5:
            raise ConfigError(f"config key 'model.vocabulary_size' = {self.vocabulary_size} must be at least 5 (4 special tokens and a word)")
        for key in ("embedding_dropout", "input_dropout", "weight_dropout", "hidden_dropout", "output_dropout"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise ConfigError(f"config key 'model.{key}' must be in [0, 1), got {getattr(self, key)}")
        check_non_negative(self, "model", "ar_alpha", "tar_beta")
        for key in ("ar_alpha", "tar_beta"):
            if not math.isfinite(getattr(self, key)):
                raise ConfigError(f"config key 'model.{key}' must be finite (0 turns it off), got {getattr(self, key)}")
