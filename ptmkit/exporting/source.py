"""Stage 0 of ``ptmkit export``, read the run: the Keras model and everything the later stages
need of the run, read once into an :class:`ExportSource`.

A fine-tuned run (its manifest names a ``head``) exports its head's ``logits``; a run without a
head (pre-trained, or imported with ``ptmkit import-hf``) exports sentence ``embeddings`` with its
pooling (:mod:`ptmkit.embedding`). The family's declarations (:class:`ptmkit.contract.ModelFamily`)
give the inputs, the padding id, the model's limits and ONNX Runtime's optimizer model type.
"""

from __future__ import annotations

import dataclasses
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
        merge_lora: fold a LoRA run's low-rank updates into its kernels before converting
            (``--merge-lora``, :func:`ptmkit.training.strategies.merge_lora`).
        outputs: a multi-task run's graph outputs, ``logits_NAME`` per task in its manifest's
            order; empty for one output (``output``). ``output``, ``labels`` and ``dev_file`` are
            then the first task's: the variants are gated on it.
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
    merge_lora: bool = False
    outputs: tuple[str, ...] = ()


def read_run(
    run_dir: str | Path, registry: Registry, dev: str | Path | None, optimize: int, wanted: list[str], merge_lora: bool = False,
) -> ExportSource:
    """Describe the run for the export stages, without TensorFlow (:func:`load_model` loads the
    Keras model; the embedding width is filled in from the converted graph, :func:`with_width`).

    Args:
        run_dir: the run directory.
        registry: the plugin registry.
        dev: the ``--dev`` file, or None for the run's own dev file.
        optimize: the ``--optimize`` level (2-3 need the family's optimizer model type).
        wanted: the variants to gate against fp32 (``optimized``, ``int8``, ``fp16``): they need a
            dev file.
        merge_lora: ``--merge-lora``: the run must be fine-tuned with ``finetune.strategy = "lora"``.

    Raises:
        RunDirError: missing or corrupted files; a fine-tuned run without a head.
        ExportError: ``--optimize 2-3`` for a family without an optimizer model type; variants
            to gate and no dev file; ``merge_lora`` on a run without LoRA.
    """
    from ptmkit.data.tokenization import character_table

    run = RunDir(run_dir)
    task_manifest: dict[str, Any]
    outputs: tuple[str, ...] = ()
    if "tasks" in run.manifest():
        config, tokenizer, run_manifest = _classifier_settings(run, registry)
        tasks = run_manifest["tasks"]
        first = next(iter(tasks))
        outputs = tuple(task["output"] for task in tasks.values())
        output, task, labels = tasks[first]["output"], run_manifest["head"], tasks[first]["labels"]
        sequence_length = int(run_manifest["sequence_length"])
        task_manifest = {
            "labels": labels, "default_task": first, "tasks": {name: {"labels": t["labels"], "output": t["output"]} for name, t in tasks.items()},
            "outputs": [{"name": t["output"], "dtype": "float32", "shape": ["batch", len(t["labels"])]} for t in tasks.values()],
        }
        dev = dev or tasks[first]["dev"]
    elif run.manifest().get("head"):
        config, tokenizer, run_manifest = _classifier_settings(run, registry)
        output, task, labels = "logits", run_manifest["head"], run_manifest["labels"]
        sequence_length = int(run_manifest["sequence_length"])
        task_manifest = {"labels": labels, "outputs": [{"name": output, "dtype": "float32", "shape": ["batch", len(labels)]}]}
        if config.finetune.strategy == "lora":
            task_manifest["lora"] = "merged" if merge_lora else "unmerged"
    else:
        from ptmkit.embedding import embedding_settings

        config, tokenizer, pooling, run_manifest = embedding_settings(run_dir)
        output, task, labels = "embeddings", "embedding", []
        sequence_length = int(pooling["max_sequence_length"])
        task_manifest = {"labels": [], "pooling": pooling, "outputs": [{"name": output, "dtype": "float32", "shape": ["batch", None]}]}
    if merge_lora and "lora" not in task_manifest:
        raise ExportError(f"--merge-lora: {run.path} was not fine-tuned with finetune.strategy = 'lora'; there is nothing to merge")
    family = registry.family(run_manifest["family"])
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
    return ExportSource(
        run=run, family=family, run_manifest=run_manifest, tokenizer=tokenizer, output=output, task=task, labels=labels,
        sequence_length=sequence_length, task_manifest=task_manifest, graph_optimizer=graph_optimizer, padding_id=specials.padding_id,
        limits=limits, vocabulary_size=vocabulary_size, characters=characters, mask_input=mask_spec.name if mask_spec else None, dev_file=dev_file,
        merge_lora=merge_lora, outputs=outputs,
    )


def _classifier_settings(run: RunDir, registry: Registry) -> tuple[Any, Any, dict[str, Any]]:
    """``(config, tokenizer, manifest)`` of a fine-tuned run, read without building its model."""
    from ptmkit.config import read_toml
    from ptmkit.rundir import CONFIG
    from ptmkit.training.pretrain import resolve_config

    manifest = run.manifest()
    config = resolve_config(registry, manifest["family"], None, None, base=read_toml(run.require(CONFIG)))
    return config, run.load_tokenizer(), manifest


def load_model(source: ExportSource, registry: Registry) -> Any:
    """The Keras model the export converts: the head's (``logits``), or the backbone with its
    pooling (``embeddings``, :func:`ptmkit.embedding.load_embedder`); a LoRA run's updates are
    folded into its kernels when ``source.merge_lora``. Imports TensorFlow.

    Raises:
        RunDirError: missing or corrupted weights.
    """
    if source.output == "logits" or source.outputs:
        from ptmkit.training.finetune import load_classifier

        model = load_classifier(source.run.path, registry)[0]
        if source.merge_lora:
            from ptmkit.training.strategies import merge_lora

            merge_lora(model)
        return model
    from ptmkit.embedding import load_embedder

    return load_embedder(source.run.path)[0]


def with_width(source: ExportSource, width: int) -> ExportSource:
    """``source`` with the embedding width (``embeddings``' last axis, read from the converted
    graph) in its manifest's output shape; a head's ``logits`` already have theirs."""
    if source.output != "embeddings":
        return source
    (output,) = source.task_manifest["outputs"]
    task_manifest = {**source.task_manifest, "outputs": [{**output, "shape": ["batch", int(width)]}]}
    return dataclasses.replace(source, task_manifest=task_manifest)
