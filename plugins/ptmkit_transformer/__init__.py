"""ptmkit's Transformer plugin: the ``transformer`` family, the encoder-decoder of Vaswani et al.
2017 on keras-hub layers, trained on sentence pairs with the ``translation`` objective
(:mod:`ptmkit_transformer.objectives`) or pre-trained on a corpus with a denoising one (BART, T5
span corruption, MASS: :mod:`ptmkit_transformer.denoising`), and ``ptmkit translate``.

Registered under the entry-point group ``ptmkit.plugins`` exactly as a third-party plugin is; it
touches the core only through :mod:`ptmkit.api`. Translation reuses the runtime's search loop
(:mod:`ptmkit_export.generation`), the one GPT's ``ptmkit generate`` decodes with.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ptmkit.api import TOKEN_EMBEDDING, InputSpec, Limits, ModelFamily, OutputSpec, hookimpl
from ptmkit_transformer.config import TransformerConfig
from ptmkit_transformer.tokenizer import BOS, EOS, PAD, UNK

__all__ = ["TransformerConfig", "TransformerFamily"]


class TransformerFamily(ModelFamily):
    """The Transformer (Vaswani et al. 2017): a shared BPE vocabulary with tied embeddings, an
    encoder over ``source </s>`` (imported BART: ``<s> source </s>``) and a decoder over ``<s>
    target`` attending to it."""

    name = "transformer"
    description = "Transformer encoder-decoder (Vaswani et al. 2017, keras-hub layers), shared BPE; translation, greedy/beam search; BART/T5/MASS denoising pre-training; Marian and BART import"
    config_class = TransformerConfig
    inputs = (
        InputSpec("encoder_token_ids", ("batch", "source"), "int32", field="ids"),
        InputSpec("encoder_padding_mask", ("batch", "source"), "int32", field="attention_mask"),
        InputSpec("decoder_token_ids", ("batch", "target"), "int32", field="ids"),
        InputSpec("decoder_padding_mask", ("batch", "target"), "int32", field="attention_mask"),
    )
    outputs = (
        OutputSpec("encoder_sequence_output", ("batch", "source", "hidden")),
        OutputSpec("decoder_sequence_output", ("batch", "target", "hidden")),
    )
    special_token_names = {"pad": PAD, "unk": UNK, "bos": BOS, "eos": EOS}
    provides = frozenset({TOKEN_EMBEDDING})
    hf_model_types = frozenset({"marian", "bart"})

    def limits(self, config: TransformerConfig) -> Limits:
        """``max_sequence_length`` tokens a side, ``vocabulary_size`` token embeddings."""
        return Limits(config.max_sequence_length, config.vocabulary_size, "model.max_sequence_length")

    def build_backbone(self, config: TransformerConfig) -> Any:
        from ptmkit_transformer.backbone import build_backbone

        return build_backbone(config)

    def train_tokenizer(self, texts: Iterable[str], config: TransformerConfig) -> Any:
        from ptmkit_transformer.tokenizer import train_shared_bpe

        return train_shared_bpe(texts, config.vocabulary_size, config.min_frequency)

    def train_pairs(self, parallel: Path, dev: Path | None, run_dir: Path, config: TransformerConfig, console: Any, resume: bool = False) -> dict[str, Any]:
        """Translation training (:func:`ptmkit_transformer.train.train_pairs`)."""
        from ptmkit_transformer.train import train_pairs

        return train_pairs(parallel, dev, run_dir, config, console, resume)

    def train(self, corpus: Path, run_dir: Path, config: TransformerConfig, console: Any, resume: bool = False) -> dict[str, Any]:
        """Denoising pre-training on a monolingual corpus (:func:`ptmkit_transformer.train.train_corpus`)."""
        from ptmkit_transformer.train import train_corpus

        return train_corpus(corpus, run_dir, config, console, resume)

    def has_checkpoint(self, run_dir: Path) -> bool:
        return (Path(run_dir) / "checkpoints" / "latest.json").exists()

    def evaluate_pairs(self, run_dir: Path, parallel: Path, options: dict[str, Any], console: Any) -> dict[str, Any]:
        """BLEU and chrF of the run's translations (:func:`ptmkit_transformer.translate.evaluate_run`)."""
        from ptmkit_transformer.translate import evaluate_run

        return evaluate_run(Path(run_dir), Path(parallel), options, console)

    def export_own(self, run_dir: Path, out: Path, options: dict[str, Any], console: Any) -> dict[str, Any] | None:
        """The encoder and the decoder with a key/value cache, for the lean runtime's
        ``Translator`` (:func:`ptmkit_transformer.onnx_export.export_translation`)."""
        from ptmkit_transformer.onnx_export import export_translation

        return export_translation(Path(run_dir), Path(out), options, console)

    def import_checkpoint(self, directory: Path, out: Path, console: Any) -> dict[str, Any]:
        """A Hugging Face Marian or BART checkpoint as a translation run (:func:`ptmkit_transformer.hf.import_hf`;
        ``ptmkit import-hf`` calls it for ``model_type`` ``marian`` and ``bart``)."""
        from ptmkit_transformer.hf import import_hf

        return import_hf(directory, out, console=console)


@hookimpl
def ptmkit_model_families() -> list[ModelFamily]:
    """The Transformer encoder-decoder."""
    return [TransformerFamily()]


@hookimpl
def ptmkit_register_commands(cli: Any) -> None:
    """``ptmkit translate RUN --text SENTENCE ...`` (:mod:`ptmkit_transformer.translate`)."""
    from ptmkit_transformer.translate import register

    register(cli)
