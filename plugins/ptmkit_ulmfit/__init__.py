"""ptmkit's ULMFiT plugin: the ``ulmfit`` family (Howard and Ruder 2018, "Universal Language Model
Fine-tuning for Text Classification"), an AWD-LSTM language model (Merity et al. 2017; reference
implementation: fastai's ``AWD_LSTM``) trained and fine-tuned through the core:

1. general-domain LM: ``ptmkit train ulmfit --corpus WIKI --out LM``, the core's causal-LM
   objective ``clm`` on the backbone's ``sequence_output`` and tied embedding;
2. target-domain LM fine-tuning: ``ptmkit train ulmfit --init LM --corpus TASK_TEXTS --out LM2``
   (the core's continued pre-training: LM's tokenizer, ``[model]`` and weights, a new corpus);
3. the classifier: ``ptmkit finetune LM2 ...`` on the backbone's ``pooled_output``, ULMFiT's
   concat pooling, with the paper's fine-tuning (:attr:`ULMFiTFamily.finetune_defaults`, each
   switchable by ``--set``): discriminative learning rates (``finetune.layer_lr_decay = 1/2.6``:
   lr / 2.6 per layer down), the slanted triangular schedule (``finetune.schedule``, cut_frac 0.1,
   ratio 32) and gradual unfreezing (``finetune.gradual_unfreezing``).

The LM stages train on the same schedule at learning rate 0.003 (:attr:`ULMFiTFamily.train_defaults`);
the tied decoder has a bias of its own that a fresh LM starts at the log unigram prior of its
training words (:meth:`ULMFiTBackbone.init_output_bias`, the core's ``InitialisesOutputBias``).

While training, AR and TAR, AWD-LSTM's activation regularisers (Merity et al. 2017, section 4.6;
fastai's ``RNNRegularizer``), add ``model.ar_alpha * mean(d ** 2)`` (``d`` the last LSTM layer's
dropped output) and ``model.tar_beta * mean((h_t - h_{t-1}) ** 2)`` (``h`` its raw output) to the
loss, padding left out (defaults 2 and 1, fastai's); held-out losses and perplexities leave them
out. They apply in every stage the backbone trains in, the classifier included, as in the paper's
own scripts (fastai's ``courses/dl2/imdb_scripts/train_clas.py``: ``seq2seq_reg, alpha=2, beta=1``)
and fastai's ``text_classifier_learner``.

A stage run out of order is refused in one line naming the missing stage
(:attr:`ULMFiTFamily.stage_names`): ``--init`` or ``ptmkit finetune`` on a directory without a
finished general-domain LM.

Not here: the bidirectional (forward + backward) ensemble of the paper's best results. The standard ONNX export writes the LSTM layers as fused ``LSTM`` nodes (:attr:`ULMFiTFamily.fuse_lstm_export`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ptmkit.api import (
    TOKEN_EMBEDDING,
    InputSpec,
    Limits,
    ModelFamily,
    OutputSpec,
    SentenceFeatures,
    SpecialTokens,
    hookimpl,
    pooled_states,
)
from ptmkit_ulmfit.config import ULMFiTConfig
from ptmkit_ulmfit.tokenizer import BOS, EOS, PAD, UNK

__all__ = ["CAUSAL_SEQUENCE_OUTPUT", "ULMFiTConfig", "ULMFiTFamily"]

#: The capability the causal-LM objective ``clm`` needs (``ptmkit_gpt.objectives``' name; a
#: capability is a string, so this plugin declares it without importing another plugin).
CAUSAL_SEQUENCE_OUTPUT = "causal_sequence_output"


class ULMFiTFamily(ModelFamily):
    """ULMFiT: a word-level AWD-LSTM language model and its concat-pooled classifier."""

    name = "ulmfit"
    fuse_lstm_export = True  # the AWD-LSTM's layers export as fused ONNX LSTM nodes, not tf2onnx's Loop
    description = "ULMFiT (Howard & Ruder 2018): AWD-LSTM LM (weight drop, locked/embedding dropout, AR/TAR), --init target-LM fine-tuning, concat pooling"
    config_class = ULMFiTConfig
    inputs = (
        InputSpec("token_ids", ("batch", "sequence"), "int32", field="ids"),
        InputSpec("padding_mask", ("batch", "sequence"), "int32", field="attention_mask"),
    )
    outputs = (
        OutputSpec("sequence_output", ("batch", "sequence", "hidden")),
        OutputSpec("pooled_output", ("batch", "pooled")),
    )
    special_token_names = {"pad": PAD, "unk": UNK, "bos": BOS, "eos": EOS}
    provides = frozenset({TOKEN_EMBEDDING, CAUSAL_SEQUENCE_OUTPUT})
    default_objectives = ("clm",)
    # Howard and Ruder 2018, section 3.2-3.3: lr / 2.6 per layer down, STLR (cut_frac 0.1, ratio
    # 32), one more layer unfrozen each epoch; the core's AdamW (the paper: Adam, beta_1 0.7)
    finetune_defaults = {
        "layer_lr_decay": round(1 / 2.6, 6), "schedule": "slanted_triangular", "warmup_ratio": 0.1, "schedule_ratio": 32.0,
        "gradual_unfreezing": True, "learning_rate": 0.01, "epochs": 6, "weight_decay": 0.01,
    }
    # the LM stages: fastai trains the AWD-LSTM LM with Adam on a one-cycle schedule; measured
    # here (300 steps, docs/families/ulmfit.md), 0.003 beat 0.01 and 0.03
    train_defaults = {"learning_rate": 0.003, "schedule": "slanted_triangular", "warmup_ratio": 0.1, "schedule_ratio": 32.0}
    stage_names = {"pretrain": "general-domain language model (ULMFiT stage 1)"}

    def sentence_features(self, run_dir: Path) -> SentenceFeatures:
        """Probe features: the last LSTM layer's states mean-pooled over the text's words
        (:func:`ptmkit.api.pooled_states`)."""
        return pooled_states(run_dir)

    def limits(self, config: ULMFiTConfig) -> Limits:
        """No position limit (LSTMs); token ids index the ``vocabulary_size`` words."""
        return Limits(None, config.vocabulary_size)

    def build_backbone(self, config: ULMFiTConfig) -> Any:
        from ptmkit_ulmfit.backbone import build_backbone

        return build_backbone(config)

    def train_tokenizer(self, texts: Iterable[str], config: ULMFiTConfig) -> Any:
        from ptmkit_ulmfit.tokenizer import train_word_vocabulary

        return train_word_vocabulary(texts, config.vocabulary_size, config.min_frequency, config.lowercase)

    def num_special_tokens(self, pair: bool) -> int:
        return 2 if pair else 1

    def pack(self, first: list[int], second: list[int] | None, sequence_length: int, specials: SpecialTokens) -> tuple[list[int], list[int]]:
        """``<s> first`` (a pair: ``<s> first </s> second``, segment ids 0 then 1), as the
        tokenizer's post-processor encodes a text."""
        ids = [specials["bos"], *first]
        segments = [0] * len(ids)
        if second is not None:
            ids += [specials["eos"], *second]
            segments += [1] * (len(second) + 1)
        return ids[:sequence_length], segments[:sequence_length]


@hookimpl
def ptmkit_model_families() -> list[ModelFamily]:
    """ULMFiT."""
    return [ULMFiTFamily()]
