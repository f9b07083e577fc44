"""XLNet hyper-parameters (the ``[model]`` section of a run config)."""

from __future__ import annotations

import dataclasses

from ptmkit.api import ConfigError, check_positive

#: Feed-forward activations an XLNet backbone computes (``model.hidden_activation``).
ACTIVATIONS = ("gelu", "gelu_approximate", "relu")


@dataclasses.dataclass
class XLNetConfig:
    """Size of an XLNet encoder and of its unigram (SentencePiece-style) vocabulary.

    XLNet (Yang et al. 2019, "XLNet: Generalized Autoregressive Pretraining for Language
    Understanding") is a Transformer-XL encoder (Dai et al. 2019): no position embeddings, but
    sinusoidal encodings of the *relative* distance between query and key with two learnt biases
    per head (content and position), relative segment encodings (same segment or not) with a
    third bias, and post-LN blocks. Pre-trained by permutation LM through two-stream attention
    (the core's ``plm``). The defaults are the size every ptmkit transformer family starts from
    (4 layers, hidden 256, 4 heads, an 8,000-piece vocabulary).

    Attributes:
        vocabulary_size: unigram vocabulary size, specials included.
        num_layers: transformer layers (Hugging Face ``n_layer``).
        num_heads: attention heads (``n_head``); must divide ``hidden_dim``.
        hidden_dim: hidden size (``d_model``).
        intermediate_dim: feed-forward inner size (``d_inner``; 4 x hidden in XLNet).
        dropout: dropout on embeddings, relative encodings, attention outputs and feed-forward
            (XLNet and Hugging Face's ``XLNetConfig``: 0.1).
        hidden_activation: the feed-forward activation (``ff_activation``): ``"gelu"`` (exact,
            erf; XLNet's), ``"gelu_approximate"`` (tanh, ``gelu_new``) or ``"relu"``.
        layer_norm_epsilon: epsilon of every layer normalisation (XLNet: 1e-12).
        clamp_len: relative distances beyond it are clamped to it (``clamp_len``); -1: no clamp
            (XLNet's default).
        lowercase: lower-case before the unigram model (XLNet is cased: false).
        strip_accents: NFKD and drop accents before the unigram model (XLNet's
            ``keep_accents = False``: true).
    """

    vocabulary_size: int = 8000
    num_layers: int = 4
    num_heads: int = 4
    hidden_dim: int = 256
    intermediate_dim: int = 1024
    dropout: float = 0.1
    hidden_activation: str = "gelu"
    layer_norm_epsilon: float = 1e-12
    clamp_len: int = -1
    lowercase: bool = False
    strip_accents: bool = True

    def validate(self) -> None:
        check_positive(self, "model", "vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim")
        if self.hidden_dim % self.num_heads:
            raise ConfigError(
                f"config key 'model.num_heads' = {self.num_heads} must divide 'model.hidden_dim' = {self.hidden_dim}"
            )
        if self.hidden_dim % 2:
            raise ConfigError(
                f"config key 'model.hidden_dim' = {self.hidden_dim} must be even (sine and cosine halves of the relative encodings)"
            )
        if self.vocabulary_size < 20:
            raise ConfigError(
                f"config key 'model.vocabulary_size' = {self.vocabulary_size} must be at least 20 (9 special tokens and some pieces)"
            )
        if self.hidden_activation not in ACTIVATIONS:
            raise ConfigError(
                f"config key 'model.hidden_activation' must be one of {', '.join(ACTIVATIONS)}, got {self.hidden_activation!r}"
            )
        if not 0.0 < self.layer_norm_epsilon < 1.0:
            raise ConfigError(f"config key 'model.layer_norm_epsilon' must be in (0, 1), got {self.layer_norm_epsilon}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"config key 'model.dropout' must be in [0, 1), got {self.dropout}")
        if self.clamp_len == 0 or self.clamp_len < -1:
            raise ConfigError(f"config key 'model.clamp_len' must be -1 (no clamp) or positive, got {self.clamp_len}")
