"""BERT hyper-parameters (the ``[model]`` section of a run config)."""

from __future__ import annotations

import dataclasses

from ptmkit.api import SHARED_SUBLAYERS, ConfigError, check_positive

#: Feed-forward activations a BERT backbone supports (``model.hidden_activation``).
ACTIVATIONS = ("gelu", "gelu_approximate", "relu")


@dataclasses.dataclass
class BertConfig:
    """Size of a BERT encoder and of its WordPiece vocabulary.

    The defaults are a small BERT that pre-trains on two CPU cores in minutes (4 layers, hidden
    256, 4 heads: BERT-mini in Turc et al. 2019's naming; 5.4M parameters with an 8,000-token
    vocabulary, 3.2M of them outside the embeddings).

    Attributes:
        vocabulary_size: WordPiece vocabulary size, specials included.
        num_layers: transformer encoder layers.
        num_heads: attention heads; must divide ``hidden_dim``.
        hidden_dim: hidden size.
        intermediate_dim: feed-forward inner size (4 x hidden in BERT).
        dropout: dropout rate on embeddings, attention and feed-forward.
        max_sequence_length: number of position embeddings.
        num_segments: segment (token type) embeddings.
        hidden_activation: the feed-forward activation: ``"gelu"`` (exact, erf-based, as in BERT
            and Hugging Face's ``hidden_act = "gelu"``), ``"gelu_approximate"`` (the tanh
            approximation, Hugging Face's ``gelu_new`` / ``gelu_pytorch_tanh``) or ``"relu"``.
        layer_norm_epsilon: epsilon of every layer normalisation (BERT: 1e-12).
        lowercase: lower-case and strip accents before WordPiece (an "uncased" vocabulary); a
            cased vocabulary is neither lower-cased nor accent-stripped.
        min_frequency: a merge must occur this often in the corpus to enter the vocabulary.
        attention_heads: the heads left in each block after ``ptmkit compress --prune-heads``
            (each of size ``hidden_dim // num_heads``); empty: ``num_heads`` in every block.
        shared_layers: the sublayers every block shares with the first after ``ptmkit compress
            --share-layers`` (ALBERT's cross-layer sharing, Lan et al. 2020): ``"all"``,
            ``"attention"`` (the self-attention and its layer norm) or ``"ffn"`` (both
            feed-forward dense layers and their layer norm); empty: none.
    """

    vocabulary_size: int = 8000
    num_layers: int = 4
    num_heads: int = 4
    hidden_dim: int = 256
    intermediate_dim: int = 1024
    dropout: float = 0.1
    max_sequence_length: int = 512
    num_segments: int = 2
    hidden_activation: str = "gelu"
    layer_norm_epsilon: float = 1e-12
    lowercase: bool = True
    min_frequency: int = 2
    attention_heads: list[int] = dataclasses.field(default_factory=list)
    shared_layers: str = ""

    def validate(self) -> None:
        check_positive(self, "model", "vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim", "max_sequence_length")
        if self.hidden_dim % self.num_heads:
            raise ConfigError(
                f"config key 'model.num_heads' = {self.num_heads} must divide 'model.hidden_dim' = {self.hidden_dim}"
            )
        if self.attention_heads and (len(self.attention_heads) != self.num_layers or any(not 1 <= h <= self.num_heads for h in self.attention_heads)):
            raise ConfigError(
                f"config key 'model.attention_heads' = {self.attention_heads} must list {self.num_layers} head counts in [1, {self.num_heads}] (or be empty)"
            )
        if self.shared_layers not in ("", *SHARED_SUBLAYERS):
            raise ConfigError(f"config key 'model.shared_layers' must be one of {', '.join(SHARED_SUBLAYERS)} (or empty), got {self.shared_layers!r}")
        if self.shared_layers in ("all", "attention") and len(set(self.attention_heads)) > 1:
            raise ConfigError(f"config key 'model.shared_layers' = {self.shared_layers!r} shares attention across blocks whose heads differ ('model.attention_heads' = {self.attention_heads})")
        if self.hidden_activation not in ACTIVATIONS:
            raise ConfigError(
                f"config key 'model.hidden_activation' must be one of {', '.join(ACTIVATIONS)}, got {self.hidden_activation!r}"
            )
        if not 0.0 < self.layer_norm_epsilon < 1.0:
            raise ConfigError(f"config key 'model.layer_norm_epsilon' must be in (0, 1), got {self.layer_norm_epsilon}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"config key 'model.dropout' must be in [0, 1), got {self.dropout}")
