"""ptmkit's GPT plugin: the ``gpt`` family (GPT-1 and GPT-2 decoders on keras-hub layers), the
causal-LM objective ``clm`` and ``ptmkit generate``.

Registered under the entry-point group ``ptmkit.plugins`` exactly as a third-party plugin is; it
touches the core only through :mod:`ptmkit.api`. The ``clm`` objective serves any family whose
backbone offers :data:`~ptmkit_gpt.objectives.CAUSAL_SEQUENCE_OUTPUT`, and ``generate`` any run
of such a family.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ptmkit.api import (
    TOKEN_EMBEDDING,
    GraphOptimizer,
    Head,
    InputSpec,
    Limits,
    ModelFamily,
    Objective,
    OutputSpec,
    QuickstartPlan,
    SentenceFeatures,
    SpecialTokens,
    hookimpl,
    pooled_states,
)
from ptmkit_gpt.config import GPTConfig
from ptmkit_gpt.objectives import CAUSAL_SEQUENCE_OUTPUT, CausalLM
from ptmkit_gpt.tokenizer import END_OF_TEXT

__all__ = ["CAUSAL_SEQUENCE_OUTPUT", "CausalLM", "GPTConfig", "GPTFamily"]


class GPTFamily(ModelFamily):
    """GPT (Radford et al. 2018, 2019): byte-level BPE, a decoder-only transformer, inputs
    ``<|endoftext|> text``; ``<|endoftext|>`` is also the end-of-text and padding token."""

    name = "gpt"
    description = "GPT-2 / GPT-1 decoder (keras-hub layers) with a byte-level BPE tokenizer; causal LM, generation"
    config_class = GPTConfig
    inputs = (
        InputSpec("token_ids", ("batch", "sequence"), "int32", field="ids"),
        InputSpec("padding_mask", ("batch", "sequence"), "int32", field="attention_mask"),
    )
    outputs = (OutputSpec("sequence_output", ("batch", "sequence", "hidden")),)
    special_token_names = {"pad": END_OF_TEXT, "bos": END_OF_TEXT, "eos": END_OF_TEXT}
    provides = frozenset({TOKEN_EMBEDDING, CAUSAL_SEQUENCE_OUTPUT})
    default_objectives = ("clm",)
    hf_model_types = frozenset({"gpt2"})

    def sentence_features(self, run_dir: Path) -> SentenceFeatures:
        """Probe features: the last layer's ``sequence_output`` mean-pooled over the padding mask
        (:func:`ptmkit.api.pooled_states`), ``ptmkit embed``'s mean pooling."""
        return pooled_states(run_dir)

    def limits(self, config: GPTConfig) -> Limits:
        """``max_sequence_length`` position embeddings, ``vocabulary_size`` token embeddings."""
        return Limits(config.max_sequence_length, config.vocabulary_size, "model.max_sequence_length")

    def graph_optimizer(self, config: GPTConfig) -> GraphOptimizer:
        return GraphOptimizer("gpt2", config.num_heads, config.hidden_dim)

    def build_backbone(self, config: GPTConfig) -> Any:
        from ptmkit_gpt.backbone import build_backbone

        return build_backbone(config)

    def train_tokenizer(self, texts: Iterable[str], config: GPTConfig) -> Any:
        from ptmkit_gpt.tokenizer import train_byte_level_bpe

        return train_byte_level_bpe(texts, config.vocabulary_size, config.min_frequency)

    def import_checkpoint(self, directory: Path, out: Path, console: Any) -> dict[str, Any]:
        """A Hugging Face GPT-2 checkpoint as a pre-trained run (:func:`ptmkit_gpt.hf.import_hf`;
        ``ptmkit import-hf`` calls it for ``model_type: gpt2``)."""
        from ptmkit_gpt.hf import import_hf

        return import_hf(directory, out, console=console)

    def export_own(self, run_dir: Path, out: Path, options: dict[str, Any], console: Any) -> dict[str, Any] | None:
        """A pre-trained run exports as a decoder with a key/value cache
        (:func:`ptmkit_gpt.onnx_export.export_decoder`); a fine-tuned one (a classifier) takes the
        standard export."""
        from ptmkit.api import RunDir

        if RunDir(run_dir).manifest().get("stage") != "pretrain":
            return None
        from ptmkit_gpt.onnx_export import export_decoder

        return export_decoder(Path(run_dir), Path(out), options, console)

    def quickstart_plan(self, budget: str) -> QuickstartPlan:
        """``ptmkit quickstart --family gpt`` (:mod:`ptmkit_gpt.quickstart`): pre-training,
        held-out perplexity, ONNX export and a generation sample."""
        from ptmkit_gpt.quickstart import plan

        return plan(budget)

    def num_special_tokens(self, pair: bool) -> int:
        return 1

    def pack(
        self, first: list[int], second: list[int] | None, sequence_length: int, specials: SpecialTokens
    ) -> tuple[list[int], list[int]]:
        """``<|endoftext|> first (second)``: one stream, segment ids all 0."""
        token_ids = [specials["bos"], *first, *(second or [])][:sequence_length]
        return token_ids, [0] * len(token_ids)


@hookimpl
def ptmkit_model_families() -> list[ModelFamily]:
    """GPT."""
    return [GPTFamily()]


@hookimpl
def ptmkit_objectives() -> list[Objective]:
    """The causal-LM objective ``clm``."""
    return [CausalLM()]


@hookimpl
def ptmkit_heads() -> list[Head]:
    """Classification from the last token (:mod:`ptmkit_gpt.heads`)."""
    from ptmkit_gpt.heads import LastTokenClassification

    return [LastTokenClassification()]


@hookimpl
def ptmkit_register_commands(cli: Any) -> None:
    """``ptmkit generate RUN --prompt TEXT ...`` (:mod:`ptmkit_gpt.generate`)."""
    from ptmkit_gpt.generate import register

    register(cli)
