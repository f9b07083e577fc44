"""ptmkit's CoVe plugin: the ``cove`` family (McCann et al. 2017, "Learned in Translation:
Contextualized Word Vectors"; reference implementation salesforce/cove).

A 2-layer biLSTM over frozen GloVe vectors (:mod:`ptmkit_cove.backbone`) is trained as the
encoder of an attentional LSTM translation model on English-German sentence pairs
(``ptmkit train cove --parallel data/parallel/en-de-train-10k.tsv --set model.glove=RUN_OR_FILE``,
:mod:`ptmkit_cove.train`). Downstream, each word is ``[GloVe(w); CoVe(w)]`` (the backbone's
``sequence_output``): ``ptmkit finetune`` trains a head on it with the encoder frozen (the paper's
recipe, :attr:`CoVeFamily.head_defaults`), ``ptmkit probe`` mean-pools it, and ``ptmkit export``
converts the encoder through the standard Keras -> ONNX path, its LSTMs as fused ONNX ``LSTM``
nodes (:attr:`CoVeFamily.fuse_lstm_export`).

Not here: the paper's input feeding in the decoder (left out to keep a fused decoder LSTM), its
biattentive classification network (the benchmark's head is a biLSTM with max pooling,
``benchmarks/cove_supersense.py``), and translation with the trained decoder.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ptmkit.api import (
    InputSpec,
    Limits,
    ModelFamily,
    OutputSpec,
    SentenceFeatures,
    SpecialTokens,
    hookimpl,
    pooled_states,
)
from ptmkit_cove.config import CoVeConfig
from ptmkit_cove.glove import PAD, UNK

__all__ = ["CoVeConfig", "CoVeFamily"]


class CoVeFamily(ModelFamily):
    """CoVe: a biLSTM over frozen GloVe, the encoder of an attentional LSTM translation model."""

    name = "cove"
    fuse_lstm_export = True  # the biLSTM exports as fused ONNX LSTM nodes, not tf2onnx's Loop
    description = "CoVe (McCann et al. 2017): 2-layer biLSTM over frozen GloVe, trained as an NMT encoder; [GloVe; CoVe] features"
    config_class = CoVeConfig
    inputs = (
        InputSpec("token_ids", ("batch", "sequence"), "int32", field="ids"),
        InputSpec("padding_mask", ("batch", "sequence"), "int32", field="attention_mask"),
    )
    outputs = (
        OutputSpec("sequence_output", ("batch", "sequence", "hidden")),
        OutputSpec("pooled_output", ("batch", "hidden")),
        OutputSpec("cove_output", ("batch", "sequence", "cove")),
        OutputSpec("glove_output", ("batch", "sequence", "glove")),
    )
    special_token_names = {"pad": PAD, "unk": UNK}
    # the paper's transfer (section 5): CoVe is fixed, the task model learns on [GloVe; CoVe]
    head_defaults = {"pooling": "mean", "freeze_backbone": True}

    def limits(self, config: CoVeConfig) -> Limits:
        """No position limit (LSTMs); token ids index the ``vocabulary_size`` rows of the GloVe table."""
        return Limits(None, config.vocabulary_size)

    def build_backbone(self, config: CoVeConfig) -> Any:
        from ptmkit_cove.backbone import build_backbone

        return build_backbone(config)

    def train_tokenizer(self, texts: Iterable[str], config: CoVeConfig) -> Any:
        """CoVe's vocabulary is its GloVe vectors' words (:func:`ptmkit_cove.glove.source_tokenizer`)."""
        from ptmkit_cove.glove import load_glove, source_tokenizer

        return source_tokenizer(load_glove(config)[0], config.lowercase)

    def train_pairs(self, parallel: Path, dev: Path | None, run_dir: Path, config: CoVeConfig, console: Any, resume: bool = False) -> dict[str, Any]:
        """Translation training of the encoder (:func:`ptmkit_cove.train.train_pairs`)."""
        from ptmkit_cove.train import train_pairs

        return train_pairs(parallel, dev, run_dir, config, console, resume)

    def has_checkpoint(self, run_dir: Path) -> bool:
        """Always False: a CoVe run keeps no checkpoints (it trains in minutes)."""
        return False

    def sentence_features(self, run_dir: Path) -> SentenceFeatures:
        """Probe features: ``[GloVe(w); CoVe(w)]`` (``sequence_output``) mean-pooled over the
        words of the text (:func:`ptmkit.api.pooled_states`), ``glove_dim + 2 * hidden_dim`` wide."""
        return pooled_states(run_dir, "sequence_output")

    def num_special_tokens(self, pair: bool) -> int:
        return 0

    def pack(self, first: list[int], second: list[int] | None, sequence_length: int, specials: SpecialTokens) -> tuple[list[int], list[int]]:
        """A text's word ids as they are (a pair: both texts' words, segment ids 0 then 1); CoVe reads words only."""
        ids = [*first, *(second or [])]
        segments = [0] * len(first) + [1] * len(second or [])
        return ids[:sequence_length], segments[:sequence_length]


@hookimpl
def ptmkit_model_families() -> list[ModelFamily]:
    """CoVe."""
    return [CoVeFamily()]
