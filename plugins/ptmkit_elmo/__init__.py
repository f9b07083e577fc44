"""ptmkit's ELMo plugin: the ``elmo`` family (Peters et al. 2018, "Deep contextualized word
representations"; reference implementation allenai/bilm-tf) and its bidirectional-LM objective
``bilm``.

A character CNN reads each word's characters (the core's ``char_ids`` input, ``(batch, sequence,
50)``), a 2-layer biLSTM with projections and a residual connection builds forward and backward
states, and one softmax over the word vocabulary predicts the next word from the forward states
and the previous word from the backward ones (:mod:`ptmkit_elmo.backbone`,
:mod:`ptmkit_elmo.objectives`). ``ptmkit finetune`` on an ELMo run mixes the frozen biLM's layers
with a learnt scalar mix (the paper's recipe: the ``[head]`` defaults of :attr:`ELMoFamily.head_defaults`).

``ptmkit export`` writes the four LSTM layers as fused ONNX ``LSTM`` nodes with ``sequence_lens``
from the padding mask (:attr:`ELMoFamily.fuse_lstm_export`; :mod:`ptmkit.exporting.recurrent`),
equal to Keras within 1e-4 at every step, padded ones included; tf2onnx alone writes each masked
LSTM as a ``Loop``. The manifest's ``recurrence`` records which.

``objectives.bilm.softmax = "sampled"`` trains through a sampled softmax (Jean et al. 2015, as
bilm-tf trains; :mod:`ptmkit_elmo.softmax`); held-out figures always use the full softmax.

Not yet here: the characters of words outside the input vocabulary (the core's ``char_ids``
spell them as ``<unk>``). CoVe is its own family (``ptmkit_cove``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ptmkit.api import (
    HIDDEN_STATES,
    InputSpec,
    Limits,
    ModelFamily,
    Objective,
    OutputSpec,
    SentenceFeatures,
    SpecialTokens,
    hookimpl,
    pooled_states,
)
from ptmkit_elmo.config import ELMoConfig
from ptmkit_elmo.objectives import BACKWARD_OUTPUT, FORWARD_OUTPUT, UNK_ID, BiLM
from ptmkit_elmo.tokenizer import BOS, EOS, MAX_CHARACTERS, PAD, UNK

__all__ = ["BiLM", "ELMoConfig", "ELMoFamily"]


class ELMoFamily(ModelFamily):
    """ELMo: character-CNN token encoder, biLSTM, forward and backward LMs sharing a softmax."""

    name = "elmo"
    description = "ELMo biLM (Peters et al. 2018): character CNN, 2-layer biLSTM, forward + backward LM; scalar-mix features"
    config_class = ELMoConfig
    inputs = (
        InputSpec("char_ids", ("batch", "sequence", "characters"), "int32", field="char_ids", sizes={"characters": MAX_CHARACTERS}),
        InputSpec("padding_mask", ("batch", "sequence"), "int32", field="attention_mask"),
    )
    outputs = (
        OutputSpec("sequence_output", ("batch", "sequence", "hidden")),
        OutputSpec(HIDDEN_STATES, ("batch", "layers", "sequence", "hidden")),
        OutputSpec("pooled_output", ("batch", "hidden")),
        OutputSpec(FORWARD_OUTPUT, ("batch", "sequence", "projection")),
        OutputSpec(BACKWARD_OUTPUT, ("batch", "sequence", "projection")),
    )
    special_token_names = {"pad": PAD, "unk": UNK, "bos": BOS, "eos": EOS}
    default_objectives = ("bilm",)
    # the paper's fine-tuning recipe (section 3.3): the biLM frozen, its layers mixed by learnt
    # softmax-normalised weights and a scale, the task model on the mix
    head_defaults = {"layers": "mix", "pooling": "mean", "freeze_backbone": True}
    # the four LSTM layers export as fused ONNX LSTM nodes: every mask they read is the padding
    # mask, each row's padding at its end
    fuse_lstm_export = True

    def sentence_features(self, run_dir: Path) -> SentenceFeatures:
        """Probe features: the biLM's layers (the character-CNN token layer and each biLSTM layer,
        ``hidden_states``) averaged with equal weights, the paper's scalar mix before any task
        learns its weights (Peters et al. 2018, eq. 1), mean-pooled over the words of the text
        (:func:`ptmkit.api.pooled_states`)."""
        return pooled_states(run_dir, HIDDEN_STATES)

    def limits(self, config: ELMoConfig) -> Limits:
        """No position limit (LSTMs); token ids index the ``input_vocabulary_size`` words."""
        return Limits(None, config.input_vocabulary_size)

    def build_backbone(self, config: ELMoConfig) -> Any:
        from ptmkit_elmo.backbone import build_backbone

        return build_backbone(config)

    def train_tokenizer(self, texts: Iterable[str], config: ELMoConfig) -> Any:
        from ptmkit_elmo.tokenizer import train_word_vocabulary

        return train_word_vocabulary(texts, config.input_vocabulary_size, config.min_frequency, config.lowercase)

    def special_tokens(self, tokenizer: Any) -> SpecialTokens:
        """The ids of ``<pad>``, ``<unk>``, ``<S>``, ``</S>``; ``<unk>`` must be id 1 (the
        objective maps the words beyond the softmax to it).

        Raises:
            DataError: a special token is missing, or ``<unk>`` is not id 1.
        """
        from ptmkit.api import DataError

        specials = super().special_tokens(tokenizer)
        if specials["unk"] != UNK_ID:
            raise DataError(f"tokenizer: {UNK} has id {specials['unk']}; an elmo vocabulary has it at id {UNK_ID} (<pad>, <unk>, <S>, </S> first)")
        return specials

    def num_special_tokens(self, pair: bool) -> int:
        return 3 if pair else 2

    def pack(self, first: list[int], second: list[int] | None, sequence_length: int, specials: SpecialTokens) -> tuple[list[int], list[int]]:
        """``<S> first </S>`` (a pair: ``<S> first </S> second </S>``, segment ids 0 then 1)."""
        ids = [specials["bos"], *first, specials["eos"]]
        segments = [0] * len(ids)
        if second is not None:
            ids += [*second, specials["eos"]]
            segments += [1] * (len(second) + 1)
        return ids[:sequence_length], segments[:sequence_length]


@hookimpl
def ptmkit_model_families() -> list[ModelFamily]:
    """ELMo."""
    return [ELMoFamily()]


@hookimpl
def ptmkit_objectives() -> list[Objective]:
    """The bidirectional-LM objective ``bilm``."""
    return [BiLM()]
