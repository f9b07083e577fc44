"""ptmkit's BiLSTM plugin: the ``bilstm`` family, the student of Tang et al. 2019 ("Distilling
Task-Specific Knowledge from BERT into Simple Neural Networks"): word embeddings initialised from
a run of static word vectors (word2vec, GloVe, fastText, NNLM) and trained, one biLSTM layer, its
final forward and backward states concatenated (or max-pooled), a ReLU layer, then logits.

Two commands make the distilled student::

    ptmkit train bilstm --corpus TRAIN_TEXTS --set model.word_vectors=W2V_RUN --out student0
    ptmkit finetune student0 --train TRAIN --dev DEV --out student --teacher TEACHER \\
        --set finetune.distill_loss=mse

``train`` builds the vocabulary from the corpus and copies the vectors into the embedding table
(:mod:`ptmkit_bilstm.train`; no gradient step); ``finetune`` trains the whole student through the
core's Keras fine-tuning, so distillation (``--teacher``, ``finetune.distill_loss = "mse"``: the
paper's loss), export (the biLSTM as fused ONNX ``LSTM`` nodes, :attr:`BiLSTMFamily.fuse_lstm_export`),
int8 quantisation, ``predict`` and ``serve`` work as for any classifier. Layer-to-layer
distillation (``--distill tinybert|minilm``) is refused: the student has no attention to match.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ptmkit.api import InputSpec, Limits, ModelFamily, OutputSpec, SpecialTokens, hookimpl
from ptmkit_bilstm.config import PAD, UNK, BiLSTMConfig

__all__ = ["BiLSTMConfig", "BiLSTMFamily"]


class BiLSTMFamily(ModelFamily):
    """Tang et al. 2019's BiLSTM student on static word vectors (see the module docstring)."""

    name = "bilstm"
    description = "BiLSTM student (Tang et al. 2019): word2vec/GloVe/fastText-initialised embeddings, one biLSTM layer, a ReLU layer"
    config_class = BiLSTMConfig
    scaling = "builds its vocabulary and initial weights in one process (no training step); fine-tuning trains it like any Keras classifier"
    fuse_lstm_export = True  # rows are padded on the right: the biLSTM exports as fused ONNX LSTM nodes
    inputs = (
        InputSpec("token_ids", ("batch", "sequence"), "int32", field="ids"),
        InputSpec("padding_mask", ("batch", "sequence"), "int32", field="attention_mask"),
    )
    outputs = (
        OutputSpec("sequence_output", ("batch", "sequence", "hidden")),
        OutputSpec("pooled_output", ("batch", "hidden")),
    )
    special_token_names = {"pad": PAD, "unk": UNK}
    # Adam at 1e-3 without weight decay: a recurrent student trains from scratch, not from a
    # pre-trained encoder (the core's defaults are BERT's 5e-5 and 0.01)
    finetune_defaults = {"learning_rate": 1e-3, "weight_decay": 0.0, "sequence_length": 64}

    def limits(self, config: BiLSTMConfig) -> Limits:
        """No position limit (an LSTM); token ids index the ``vocabulary_size`` rows of the table."""
        return Limits(None, config.vocabulary_size or None)

    def build_backbone(self, config: BiLSTMConfig) -> Any:
        from ptmkit_bilstm.backbone import build_backbone

        return build_backbone(config)

    def train(self, corpus: Path, run_dir: Path, config: BiLSTMConfig, console: Any, resume: bool = False) -> dict[str, Any]:
        """The vocabulary and initial weights (:func:`ptmkit_bilstm.train.train_bilstm`)."""
        from ptmkit_bilstm.train import train_bilstm

        return train_bilstm(corpus, run_dir, config, console)

    def num_special_tokens(self, pair: bool) -> int:
        return 0

    def pack(self, first: list[int], second: list[int] | None, sequence_length: int, specials: SpecialTokens) -> tuple[list[int], list[int]]:
        """A text's word ids as they are (a pair: both texts' words, segment ids 0 then 1)."""
        ids = [*first, *(second or [])]
        segments = [0] * len(first) + [1] * len(second or [])
        return ids[:sequence_length], segments[:sequence_length]


@hookimpl
def ptmkit_model_families() -> list[ModelFamily]:
    """The BiLSTM student."""
    return [BiLSTMFamily()]
