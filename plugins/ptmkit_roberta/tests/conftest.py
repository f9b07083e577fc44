"""Fixtures of the roberta plugin's tests."""

from __future__ import annotations

#: A RoBERTa small enough to pre-train in seconds.
TINY_ROBERTA = [
    "model.num_layers=2",
    "model.hidden_dim=32",
    "model.num_heads=2",
    "model.intermediate_dim=64",
    "model.vocabulary_size=400",
    "model.max_sequence_length=64",
    "model.min_frequency=1",
]
