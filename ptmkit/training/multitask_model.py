"""The multi-task model (:mod:`ptmkit.training.multitask`): one head per task on a shared
backbone; apart so that loading a fine-tuned run (:func:`ptmkit.training.finetune.load_classifier`)
does not import the multi-task trainer, which imports the fine-tuning module."""

from __future__ import annotations

from typing import Any

from ptmkit.config import RunConfig
from ptmkit.plugins import Registry
from ptmkit.rundir import MODEL_WEIGHTS, RunDir, load_weights

#: The output of task NAME in the multi-task graph.
OUTPUT_PREFIX = "logits_"


def build_multitask(registry: Registry, config: RunConfig, backbone: Any, label_counts: dict[str, int]) -> tuple[Any, dict[str, Any]]:
    """One ``finetune.head`` model per task on the shared ``backbone`` (with ``finetune.strategy``
    applied once), and the model of them all.

    Returns:
        ``(model, heads)``: ``model`` maps the backbone's inputs to a list of ``(batch, labels_i)``
        float32 logits, one per task in ``label_counts``' order; ``heads`` maps each task's name to
        its own ``keras.Model`` (``classifier_NAME``), sharing the backbone's weights.
    """
    import keras

    from ptmkit.training.pretrain import backbone_inputs
    from ptmkit.training.strategies import apply_strategy, prepare_backbone

    added = prepare_backbone(backbone, config.finetune, config.head)
    head = registry.head(config.finetune.head)
    heads = {}
    for name, count in label_counts.items():
        heads[name] = head.build(backbone, count, config.head)
        heads[name].name = f"classifier_{name}"
    apply_strategy(backbone, config.finetune, added)
    inputs = backbone_inputs(backbone)
    model = keras.Model(inputs, [heads[name](inputs) for name in label_counts], name="multitask")
    return model, heads


def load_multitask_weights(registry: Registry, run: RunDir, config: RunConfig, backbone: Any, manifest: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Rebuild a multi-task run's model on its loaded ``backbone`` (one head per task of the
    manifest's ``tasks``, in that order) and load the run's weights into it.

    Returns:
        ``(model, heads)`` as :func:`build_multitask` gives them.

    Raises:
        RunDirError: the run has no model weights, or they do not fit the model.
    """
    label_counts = {name: len(task["labels"]) for name, task in manifest["tasks"].items()}
    model, heads = build_multitask(registry, config, backbone, label_counts)
    load_weights(model, run.require(MODEL_WEIGHTS))
    return model, heads
