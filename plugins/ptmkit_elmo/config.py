"""ELMo hyper-parameters (the ``[model]`` section of a run config)."""

from __future__ import annotations

import dataclasses

from ptmkit.api import ConfigError, check_non_negative, check_positive
from ptmkit_elmo.tokenizer import MAX_CHARACTERS


@dataclasses.dataclass
class ELMoConfig:
    """Size of an ELMo biLM (Peters et al. 2018) and of its word vocabulary.

    Each word is read as its first 50 UTF-8 bytes (bilm-tf's ``max_characters_per_token``; the
    ``char_ids`` input's fixed size, :data:`ptmkit_elmo.tokenizer.MAX_CHARACTERS`); the
    vocabulary's longer words are counted in a warning when it is built.

    The defaults are the paper's architecture scaled down to train on a CPU within the quickstart's
    budget. The paper's (bilm-tf's ``elmo_2x4096_512_2048cnn_2xhighway``): 16-dimensional
    character embeddings; filters of widths 1-7 with 32, 32, 64, 128, 256, 512 and 1,024 filters
    (2,048 in all); 2 highway layers; a projection to 512; 2 biLSTM layers of 4,096 cells, each
    projected to 512, with a residual connection between the layers; 50 characters per token; a
    793,471-word softmax (sampled during training).

    Attributes:
        vocabulary_size: the softmax's words, the special tokens ``<pad>``, ``<unk>``, ``<S>``
            and ``</S>`` included: the most frequent of the input vocabulary; the LMs predict
            any other word as ``<unk>``.
        input_vocabulary_size: the words the character CNN reads by their spelling (the
            tokenizer's vocabulary, at least ``vocabulary_size``; words are whitespace-separated).
            Only a word outside it reads as ``<unk>``'s characters, as bilm-tf reads every word's
            own (its input side has no vocabulary).
        min_frequency: a word must occur this often in the corpus to enter the input vocabulary.
        lowercase: lower-case the text before splitting it into words.
        char_embedding_dim: dimensions of each character's embedding (the paper: 16).
        filter_widths: the character CNN's filter widths, in characters (the paper: 1 to 7).
        filter_counts: how many filters of each width, one number per entry of ``filter_widths``
            (the paper: 32, 32, 64, 128, 256, 512, 1024).
        highway_layers: highway layers (Srivastava et al. 2015) after the max-pooled filters (the
            paper: 2).
        projection_dim: the token representation's size after the character CNN's linear
            projection, and the size each LSTM layer's output is projected to (the paper: 512).
        lstm_dim: cells per LSTM layer and direction (the paper: 4,096).
        lstm_layers: biLSTM layers (the paper: 2); from the second on, each layer's input is
            added to its projected output (a residual connection).
        dropout: dropout on the token representation and on each LSTM layer's output that
            feeds the next layer (the paper: 0.1; bilm-tf also drops the top layer's output
            before the softmax).
    """

    vocabulary_size: int = 8000
    input_vocabulary_size: int = 50000
    min_frequency: int = 2
    lowercase: bool = False
    char_embedding_dim: int = 16
    filter_widths: list[int] = dataclasses.field(default_factory=lambda: [1, 2, 3, 4, 5, 6, 7])
    filter_counts: list[int] = dataclasses.field(default_factory=lambda: [16, 16, 32, 32, 64, 64, 64])
    highway_layers: int = 2
    projection_dim: int = 128
    lstm_dim: int = 512
    lstm_layers: int = 2
    dropout: float = 0.1

    def validate(self) -> None:
        check_positive(self, "model", "vocabulary_size", "input_vocabulary_size", "min_frequency", "char_embedding_dim", "projection_dim", "lstm_dim", "lstm_layers")
        check_non_negative(self, "model", "highway_layers")
        if self.vocabulary_size < 5:
            raise ConfigError(f"config key 'model.vocabulary_size' = {self.vocabulary_size} must be at least 5 (4 special tokens and a word)")
        if self.input_vocabulary_size < self.vocabulary_size:
            raise ConfigError(
                f"config key 'model.input_vocabulary_size' = {self.input_vocabulary_size} must be at least 'model.vocabulary_size' = {self.vocabulary_size}"
            )
        if not self.filter_widths or len(self.filter_widths) != len(self.filter_counts):
            raise ConfigError(
                f"config keys 'model.filter_widths' ({len(self.filter_widths)} entries) and 'model.filter_counts' ({len(self.filter_counts)}) "
                "must be non-empty and of one length"
            )
        for key in ("filter_widths", "filter_counts"):
            if any(v <= 0 for v in getattr(self, key)):
                raise ConfigError(f"config key 'model.{key}' must hold numbers > 0, got {getattr(self, key)}")
        if max(self.filter_widths) > MAX_CHARACTERS:
            raise ConfigError(f"config key 'model.filter_widths' has a filter of width {max(self.filter_widths)}, wider than the {MAX_CHARACTERS} characters read per word")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"config key 'model.dropout' must be in [0, 1), got {self.dropout}")
