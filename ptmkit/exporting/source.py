"""Stage 0 of ``ptmkit export``, read the run: the Keras model and everything the later stages
need of the run, read once into an :class:`ExportSource`.

A fine-tuned run (its manifest names a ``head``) exports its head's ``logits``; a run without a
head (pre-trained, or imported with ``ptmkit import-hf``) exports sentence ``embeddings`` with its
pooling (:mod:`ptmkit.embedding`). The family's declarations (:class:`ptmkit.contract.ModelFamily`)
give the inputs, the padding id, the model's limits and ONNX Runtime's optimizer model type.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ptmkit.contract import GraphOptimizer, Limits, ModelFamily
from ptmkit.errors import ExportError
from ptmkit.rundir import RunDir

if TYPE_CHECKING:
    from ptmkit.plugins import Registry


@dataclass(frozen=True)
class ExportSource:
    """A run as the export stages see it (everything but the Keras model, which the caller drops
    as soon as the parity check is done).

    Attributes:
        run: the run directory.
        family: the run's model family.
        run_manifest: the run's manifest (``family``, ``head``, ``labels``, ``dev``, ...).
        tokenizer: the run's ``tokenizers.Tokenizer``.
        output: the graph's output name: ``"logits"`` (a head) or ``"embeddings"``.
        task: the head's name, or ``"embedding"``.
        labels: the head's labels (empty for embeddings).
        sequence_length: the fine-tuning length (a head) or the pooling's ``max_sequence_length``.
        task_manifest: the export manifest's task fields (``labels``, ``outputs``, ``pooling``).
        graph_optimizer: ONNX Runtime's fusion settings, or None (the family declares none).
        padding_id: the tokenizer's padding token id.
        limits: what the model's weights allow (:class:`ptmkit.contract.Limits`).
        vocabulary_size: token ids of random parity inputs lie in ``[0, vocabulary_size)``.
        characters: the ``char_ids`` table, or None (no character input).
        mask_input: the name of the padding-mask input, or None.
        dev_file: the file the variants are gated on, or None.
    """

    run: RunDir
    family: ModelFamily
    run_manifest: dict[str, Any]
    tokenizer: Any
    output: str
    task: str
    labels: list[str]
    sequence_length: int
    task_manifest: dict[str, Any]
    graph_optimizer: GraphOptimizer | None
    padding_id: int
    limits: Limits
    vocabulary_size: int
    characters: np.ndarray | None
    mask_input: str | None
    dev_file: str | Path | None


def read_run(run_dir: str | Path, registry: Registry, dev: str | Path | None, optimize: int, wanted: list[str]) -> tuple[Any, ExportSource]:
    """Load the run's Keras model (its head's, or the backbone with its pooling) and describe it.

    Args:
        run_dir: the run directory.
        registry: the plugin registry.
        dev: the ``--dev`` file, or None for the run's own dev file.
        optimize: the ``--optimize`` level (2-3 need the family's optimizer model type).
        wanted: the variants to gate against fp32 (``optimized``, ``int8``, ``fp16``): they need a
            dev file.

    Returns:
        ``(Keras model, ExportSource)``.

    Raises:
        RunDirError: missing or corrupted files.
        ExportError: ``--optimize 2-3`` for a family without an optimizer model type; variants
            to gate and no dev file.
    """
    from ptmkit.data.tokenization import character_table
    from ptmkit.training.finetune import load_classifier

    run = RunDir(run_dir)
    task_manifest: dict[str, Any]
    if run.manifest().get("head"):
        model, config, tokenizer, run_manifest = load_classifier(run_dir, registry)
        output, task, labels = "logits", run_manifest["head"], run_manifest["labels"]
        sequence_length = int(run_manifest["sequence_length"])
        task_manifest = {"labels": labels, "outputs": [{"name": output, "dtype": "float32", "shape": ["batch", len(labels)]}]}
    else:
        from ptmkit.embedding import load_embedder

        model, tokenizer, pooling, run_manifest = load_embedder(run_dir)
        config = None
        output, task, labels = "embeddings", "embedding", []
        sequence_length = int(pooling["max_sequence_length"])
        width = int(model.output.shape[-1])
        task_manifest = {"labels": [], "pooling": pooling, "outputs": [{"name": output, "dtype": "float32", "shape": ["batch", width]}]}
    family = registry.family(run_manifest["family"])
    if config is None:
        from ptmkit.config import read_toml
        from ptmkit.training.pretrain import resolve_config

        config = resolve_config(registry, run_manifest["family"], base=read_toml(run.require("config.toml")))
    graph_optimizer = family.graph_optimizer(config.model)
    if optimize >= 2 and graph_optimizer is None:
        raise ExportError(f"--optimize {optimize} fuses transformer layers with ONNX Runtime's optimizer, for which the {family.name} family declares no model type (use --optimize 1)")
    specials = family.special_tokens(tokenizer)
    limits = family.limits(config.model)
    vocabulary_size = int(limits.vocabulary_size or tokenizer.get_vocab_size())
    characters = character_table(tokenizer, family.inputs)
    mask_spec = family.input("attention_mask")
    dev_file = dev or run_manifest.get("dev")
    if wanted and not dev_file:
        raise ExportError(f"{run.path}: no dev file recorded in the run; pass --dev FILE (texts, one per line) for the fp32-vs-{wanted[0]} check")
    source = ExportSource(
        run=run, family=family, run_manifest=run_manifest, tokenizer=tokenizer, output=output, task=task, labels=labels,
        sequence_length=sequence_length, task_manifest=task_manifest, graph_optimizer=graph_optimizer, padding_id=specials.padding_id,
        limits=limits, vocabulary_size=vocabulary_size, characters=characters, mask_input=mask_spec.name if mask_spec else None, dev_file=dev_file,
    )
    return model, source
