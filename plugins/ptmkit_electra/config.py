"""ELECTRA hyper-parameters (the ``[model]`` section of a run config)."""

from __future__ import annotations

import dataclasses

from ptmkit.api import ConfigError, check_positive

#: Feed-forward activations an ELECTRA backbone computes (``model.hidden_activation``).
ACTIVATIONS = ("gelu", "gelu_approximate", "relu")


@dataclasses.dataclass
class ElectraConfig:
    """Size of an ELECTRA discriminator and of its WordPiece vocabulary.

    ELECTRA (Clark et al. 2020) is BERT's encoder with a token-embedding width of its own
    (``embedding_dim``, the paper's and Hugging Face's ``embedding_size``) projected to the hidden
    size when the two differ; ELECTRA-Small has embeddings of 128 under a hidden size of 256
    (Table 6). The defaults are ELECTRA-Small's widths (hidden 256, embedding 128, 4 heads,
    feed-forward 1024) at 4 layers instead of 12, the size of the BERT and RoBERTa families'
    defaults, so that they compare at equal depth; a tiny ``--set`` config pre-trains in seconds.

    Attributes:
        vocabulary_size: WordPiece vocabulary size, specials included.
        num_layers: transformer encoder layers.
        num_heads: attention heads; must divide ``hidden_dim``.
        hidden_dim: hidden size of the encoder.
        embedding_dim: width of the token, position and segment embeddings; projected to
            ``hidden_dim`` by a dense layer when different (ELECTRA-Small: 128).
        intermediate_dim: feed-forward inner size (4 x hidden in ELECTRA).
        dropout: dropout rate on embeddings, attention and feed-forward.
        max_sequence_length: number of position embeddings.
        num_segments: segment (token type) embeddings.
        hidden_activation: ``"gelu"`` (exact, erf-based: ELECTRA's and Hugging Face's
            ``hidden_act = "gelu"``), ``"gelu_approximate"`` (tanh form) or ``"relu"``.
        layer_norm_epsilon: epsilon of every layer normalisation (ELECTRA: 1e-12).
        lowercase: lower-case and strip accents before WordPiece (an "uncased" vocabulary, as
            ELECTRA's released models).
        min_frequency: a merge must occur this often in the corpus to enter the vocabulary.
    """

    vocabulary_size: int = 8000
    num_layers: int = 4
    num_heads: int = 4
    hidden_dim: int = 256
    embedding_dim: int = 128
    intermediate_dim: int = 1024
    dropout: float = 0.1
    max_sequence_length: int = 512
    num_segments: int = 2
    hidden_activation: str = "gelu"
    layer_norm_epsilon: float = 1e-12
    lowercase: bool = True
    min_frequency: int = 2

    def validate(self) -> None:
        check_positive(
            self, "model", "vocabulary_size", "num_layers", "num_heads", "hidden_dim", "embedding_dim", "intermediate_dim",
            "max_sequence_length", "num_segments",
        )
        if self.hidden_dim % self.num_heads:
            raise ConfigError(f"config key 'model.num_heads' = {self.num_heads} must divide 'model.hidden_dim' = {self.hidden_dim}")
        if self.vocabulary_size < 6:
            raise ConfigError(f"config key 'model.vocabulary_size' = {self.vocabulary_size} must be at least 6 (5 special tokens and one more)")
        if self.hidden_activation not in ACTIVATIONS:
            raise ConfigError(f"config key 'model.hidden_activation' must be one of {', '.join(ACTIVATIONS)}, got {self.hidden_activation!r}")
        if not 0.0 < self.layer_norm_epsilon < 1.0:
            raise ConfigError(f"config key 'model.layer_norm_epsilon' must be in (0, 1), got {self.layer_norm_epsilon}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"config key 'model.dropout' must be in [0, 1), got {self.dropout}")
