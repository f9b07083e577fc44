"""RoBERTa hyper-parameters (the ``[model]`` section of a run config)."""

from __future__ import annotations

import dataclasses

from ptmkit.api import ConfigError, check_positive

#: Feed-forward activations a RoBERTa backbone computes (``model.hidden_activation``).
ACTIVATIONS = ("gelu", "gelu_approximate", "relu")


@dataclasses.dataclass
class RobertaConfig:
    """Size of a RoBERTa encoder and of its byte-level BPE vocabulary.

    RoBERTa (Liu et al. 2019) is BERT's architecture trained differently: a byte-level BPE
    vocabulary (section 4.4), dynamic masking (4.1), no next-sentence prediction (4.2), and a
    layer-norm epsilon of 1e-5. The defaults are the size of the BERT and GPT families' defaults
    (4 layers, hidden 256, 4 heads; 5.4M parameters with an 8,000-token vocabulary), so that the
    families compare at equal size.

    Attributes:
        vocabulary_size: byte-level BPE vocabulary size, specials and the 256 bytes included.
        num_layers: transformer encoder layers.
        num_heads: attention heads; must divide ``hidden_dim``.
        hidden_dim: hidden size.
        intermediate_dim: feed-forward inner size (4 x hidden in RoBERTa).
        dropout: dropout rate on embeddings, attention and feed-forward.
        max_sequence_length: number of position embeddings a sequence may use (a Hugging Face
            checkpoint's ``max_position_embeddings`` less its ``padding_idx + 1`` reserved rows).
        hidden_activation: ``"gelu"`` (exact, erf-based: RoBERTa's and Hugging Face's
            ``hidden_act = "gelu"``), ``"gelu_approximate"`` (tanh form) or ``"relu"``.
        layer_norm_epsilon: epsilon of every layer normalisation (RoBERTa: 1e-5).
        min_frequency: a merge must occur this often in the corpus to enter the vocabulary.
    """

    vocabulary_size: int = 8000
    num_layers: int = 4
    num_heads: int = 4
    hidden_dim: int = 256
    intermediate_dim: int = 1024
    dropout: float = 0.1
    max_sequence_length: int = 512
    hidden_activation: str = "gelu"
    layer_norm_epsilon: float = 1e-5
    min_frequency: int = 2

    def validate(self) -> None:
        check_positive(self, "model", "vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim", "max_sequence_length")
        if self.hidden_dim % self.num_heads:
            raise ConfigError(f"config key 'model.num_heads' = {self.num_heads} must divide 'model.hidden_dim' = {self.hidden_dim}")
        if self.vocabulary_size < 261:
            raise ConfigError(f"config key 'model.vocabulary_size' = {self.vocabulary_size} must be at least 261 (256 bytes and 5 special tokens)")
        if self.hidden_activation not in ACTIVATIONS:
            raise ConfigError(f"config key 'model.hidden_activation' must be one of {', '.join(ACTIVATIONS)}, got {self.hidden_activation!r}")
        if not 0.0 < self.layer_norm_epsilon < 1.0:
            raise ConfigError(f"config key 'model.layer_norm_epsilon' must be in (0, 1), got {self.layer_norm_epsilon}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"config key 'model.dropout' must be in [0, 1), got {self.dropout}")
