"""ALBERT hyper-parameters (the ``[model]`` section of a run config)."""

from __future__ import annotations

import dataclasses

from ptmkit.api import ConfigError, check_positive

#: Feed-forward activations an ALBERT backbone computes (``model.hidden_activation``).
ACTIVATIONS = ("gelu_approximate", "gelu", "relu")


@dataclasses.dataclass
class AlbertConfig:
    """Size of an ALBERT encoder and of its unigram (SentencePiece-style) vocabulary.

    ALBERT (Lan et al. 2020, "ALBERT: A Lite BERT for Self-supervised Learning of Language
    Representations") is BERT with two parameter reductions (section 3.1): a **factorised
    embedding** (tokens are embedded in ``embedding_dim`` = E and projected to ``hidden_dim`` = H,
    so the vocabulary costs V x E + E x H instead of V x H) and **cross-layer parameter sharing**
    (the ``num_layers`` transformer layers reuse the weights of ``num_groups`` groups of
    ``inner_group_num`` layers each; ALBERT shares everything: one group of one layer). Its
    defaults are the BERT family's size (4 layers, hidden 256, 4 heads, an 8,000-token
    vocabulary) with E = 128 and all layers shared: 2.0M parameters against BERT's 5.4M
    (``docs/families/albert.md`` has the table).

    Attributes:
        vocabulary_size: unigram vocabulary size, specials included.
        num_layers: transformer layers applied (Hugging Face ``num_hidden_layers``); a multiple
            of ``num_groups``. Layer ``i`` uses the weights of group ``i // (num_layers / num_groups)``.
        num_groups: groups of distinct layer weights (Hugging Face ``num_hidden_groups``; ALBERT: 1).
        inner_group_num: transformer layers inside one group, applied in turn each time the group
            is (Hugging Face ``inner_group_num``; ALBERT: 1). A forward pass runs
            ``num_layers * inner_group_num`` layers and holds ``num_groups * inner_group_num``.
        num_heads: attention heads; must divide ``hidden_dim``.
        embedding_dim: token, position and segment embedding size E (ALBERT: 128 at every H).
        hidden_dim: hidden size H.
        intermediate_dim: feed-forward inner size (4 x hidden in ALBERT).
        dropout: dropout rate on embeddings, attention and feed-forward (ALBERT and Hugging
            Face's ``AlbertConfig``: 0, section 4.9).
        max_sequence_length: number of position embeddings.
        num_segments: segment (token type) embeddings.
        hidden_activation: the feed-forward activation: ``"gelu_approximate"`` (the tanh form,
            ALBERT's and Hugging Face's ``hidden_act = "gelu_new"``), ``"gelu"`` (exact, erf) or
            ``"relu"``.
        layer_norm_epsilon: epsilon of every layer normalisation (ALBERT: 1e-12).
        lowercase: lower-case before the unigram model (ALBERT's ``do_lower_case``).
        strip_accents: NFKD and drop accents before the unigram model (ALBERT's
            ``keep_accents = False``).
    """

    vocabulary_size: int = 8000
    num_layers: int = 4
    num_groups: int = 1
    inner_group_num: int = 1
    num_heads: int = 4
    embedding_dim: int = 128
    hidden_dim: int = 256
    intermediate_dim: int = 1024
    dropout: float = 0.0
    max_sequence_length: int = 512
    num_segments: int = 2
    hidden_activation: str = "gelu_approximate"
    layer_norm_epsilon: float = 1e-12
    lowercase: bool = True
    strip_accents: bool = True

    def validate(self) -> None:
        check_positive(
            self,
            "model",
            "vocabulary_size",
            "num_layers",
            "num_groups",
            "inner_group_num",
            "num_heads",
            "embedding_dim",
            "hidden_dim",
            "intermediate_dim",
            "max_sequence_length",
            "num_segments",
        )
        if self.num_layers % self.num_groups:
            raise ConfigError(
                f"config key 'model.num_groups' = {self.num_groups} must divide 'model.num_layers' = {self.num_layers}"
            )
        if self.hidden_dim % self.num_heads:
            raise ConfigError(
                f"config key 'model.num_heads' = {self.num_heads} must divide 'model.hidden_dim' = {self.hidden_dim}"
            )
        if self.vocabulary_size < 10:
            raise ConfigError(
                f"config key 'model.vocabulary_size' = {self.vocabulary_size} must be at least 10 (5 special tokens and some pieces)"
            )
        if self.hidden_activation not in ACTIVATIONS:
            raise ConfigError(
                f"config key 'model.hidden_activation' must be one of {', '.join(ACTIVATIONS)}, got {self.hidden_activation!r}"
            )
        if not 0.0 < self.layer_norm_epsilon < 1.0:
            raise ConfigError(f"config key 'model.layer_norm_epsilon' must be in (0, 1), got {self.layer_norm_epsilon}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"config key 'model.dropout' must be in [0, 1), got {self.dropout}")
