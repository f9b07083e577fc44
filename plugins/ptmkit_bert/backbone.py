"""The BERT backbone: keras-hub's ``BertBackbone`` built from a :class:`BertConfig`.

Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding". Inputs ``token_ids``, ``segment_ids``, ``padding_mask``: ``(batch, sequence)``
int32. Outputs ``sequence_output`` ``(batch, sequence, hidden_dim)`` and ``pooled_output``
``(batch, hidden_dim)`` (tanh dense on the ``[CLS]`` state), float32.
"""

from __future__ import annotations

from typing import Any

from ptmkit_bert.config import BertConfig


def build_backbone(config: BertConfig) -> Any:
    """Return a ``keras_hub.models.BertBackbone`` of the configured size."""
    import keras_hub

    return keras_hub.models.BertBackbone(
        vocabulary_size=config.vocabulary_size,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        hidden_dim=config.hidden_dim,
        intermediate_dim=config.intermediate_dim,
        dropout=config.dropout,
        max_sequence_length=config.max_sequence_length,
        num_segments=config.num_segments,
    )
