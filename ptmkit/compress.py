"""``ptmkit compress``: a smaller pre-trained run cut from a larger one.

``--keep-layers 0,2,4`` keeps those blocks of the backbone, with their trained weights (the
family implements :class:`~ptmkit.contract.KeepsLayers`): DistilBERT's student initialisation
"from the teacher by taking one layer out of two" (Sanh et al. 2019, section 3). The result is an
ordinary pre-trained run: ``ptmkit finetune OUT ... --teacher FINE_TUNED_TEACHER`` then distils
into it (:mod:`ptmkit.training.distillation`), ``export`` and ``serve`` read it.

``--prune-heads FRACTION`` / ``--heads-per-layer N`` / ``--prune-heads-spec "0:1,3;2:0"`` remove
attention heads (the family implements :class:`~ptmkit.contract.PrunesHeads`), chosen by
importance or named: Michel, Levy and Neubig 2019, "Are Sixteen Heads Really Better than One?".
The importance of head ``h`` is ``sum over batches |dL/dxi_h|`` with a gate ``xi_h = 1`` on its
output (their eq. 2; Hugging Face's ``bertology.py`` sums the same per batch), ``L`` the
fine-tuned run's cross-entropy on a labelled file; scores are normalised by their L2 norm within
each layer (their section 4.2) before they are ranked across layers. The heads are physically
removed: the result is an ordinary run (fine-tuned, or pre-trained for a named spec) whose export
is smaller.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from ptmkit.config import read_toml
from ptmkit.contract import KeepsLayers, PrunesHeads
from ptmkit.errors import ConfigError, RunDirError
from ptmkit.plugins import Registry, get_registry
from ptmkit.rundir import (
    CONFIG,
    LABELS,
    MODEL_WEIGHTS,
    POOLING,
    TOKENIZER,
    RunDir,
    save_model_weights,
    staged_run,
    write_backbone_run,
)


def parse_layers(text: str) -> list[int]:
    """``"0,2,4"`` -> ``[0, 2, 4]``.

    Raises:
        ConfigError: an item that is not an integer.
    """
    try:
        return [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise ConfigError(f"--keep-layers {text!r}: give comma-separated block indices, e.g. 0,2,4") from None


def keep_layers_run(run_dir: str | Path, out: str | Path, layers: list[int], console: Console, registry: Registry | None = None) -> dict[str, Any]:
    """Write to ``out`` the pre-trained run of blocks ``layers`` of ``run_dir``'s backbone.

    Returns:
        the new run's manifest, with ``parameters`` before and after.

    Raises:
        RunDirError: ``run_dir`` is not a pre-trained run, or ``out`` is not empty.
        ConfigError: the family cannot keep layers, or ``layers`` is out of range or order.
    """
    from ptmkit.training.finetune import load_backbone
    from ptmkit.training.setup import quiet_tensorflow

    registry = registry or get_registry()
    source, target = RunDir(run_dir), Path(out)
    manifest = source.manifest()
    if manifest["stage"] != "pretrain":
        raise RunDirError(f"{source.path}: is a {manifest['stage']} run; compress a pre-trained (or imported) run")
    family = registry.family(manifest["family"])
    if not isinstance(family, KeepsLayers):
        raise ConfigError(f"--keep-layers: the {family.name} family cannot drop blocks of its backbone (it does not implement KeepsLayers)")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):  # before loading the backbone
        raise RunDirError(f"{target}: exists and is not an empty directory; choose another --out")
    quiet_tensorflow()
    backbone, config, _, _ = load_backbone(registry, source)
    model_config, smaller = family.keep_layers(config.model, backbone, layers)
    stored = read_toml(source.require(CONFIG))
    stored["model"] = _asdict(model_config)
    parameters = {"before": int(backbone.count_params()), "after": int(smaller.count_params())}
    console.print(f"kept blocks {','.join(map(str, layers))}: {parameters['before']:,} -> {parameters['after']:,} parameters")
    with staged_run(target, "compress") as run:
        if (source / POOLING).exists():
            shutil.copyfile(source / POOLING, run / POOLING)
        fields = {key: manifest[key] for key in ("inputs", "pooling") if key in manifest}
        written = write_backbone_run(
            run, registry, family.name, stored, None, smaller, source.require(TOKENIZER), **fields, parameters=parameters,
            compressed_from={"path": str(source.path.resolve()), "method": "keep-layers", "layers": layers},
        )
    return written


def _asdict(config: Any) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(config)


def parse_head_spec(text: str) -> dict[int, list[int]]:
    """``"0:1,3;2:0"`` -> ``{0: [1, 3], 2: [0]}``: block ``0``'s heads 1 and 3 and block 2's head 0.

    Raises:
        ConfigError: an item that is not ``BLOCK:HEAD,HEAD``, a block named twice, or no item.
    """
    spec: dict[int, list[int]] = {}
    for item in (part.strip() for part in text.split(";")):
        if not item:
            continue
        block, _, heads = item.partition(":")
        try:
            key, values = int(block), sorted({int(h) for h in heads.split(",") if h.strip()})
        except ValueError:
            raise ConfigError(f"--prune-heads-spec {text!r}: give BLOCK:HEAD,HEAD items separated by ';', e.g. 0:1,3;2:0") from None
        if key in spec or not values:
            raise ConfigError(f"--prune-heads-spec {text!r}: block {key} is named twice or with no heads")
        spec[key] = values
    if not spec:
        raise ConfigError(f"--prune-heads-spec {text!r}: names no head; give BLOCK:HEAD,HEAD items separated by ';', e.g. 0:1,3;2:0")
    return spec


def check_head_spec(spec: dict[int, list[int]], heads: list[int], option: str) -> None:
    """Refuse a spec that names a block or head that does not exist or removes every head of a block.

    Args:
        spec: block -> head indices to remove.
        heads: the number of heads in each block (:meth:`PrunesHeads.attention_heads`).

    Raises:
        ConfigError: one line naming the block and the counts.
    """
    for block, removed in spec.items():
        if not 0 <= block < len(heads):
            raise ConfigError(f"{option}: layer {block} does not exist (the backbone has {len(heads)} layers)")
        if any(not 0 <= h < heads[block] for h in removed):
            raise ConfigError(f"{option}: layer {block} has {heads[block]} heads (0-{heads[block] - 1}); cannot prune head {max(removed)}")
        if len(removed) >= heads[block]:
            raise ConfigError(f"{option}: layer {block} has {heads[block]} heads; cannot prune {len(removed)} of them (at least one must remain)")


def head_importance(model: Any, kernels: list[Any], x: dict[str, np.ndarray], y: np.ndarray, batch_size: int = 32) -> list[np.ndarray]:
    """Michel et al. 2019's head importance of a classifier on labelled examples.

    Args:
        model: a Keras classifier returning ``(batch, classes)`` logits.
        kernels: each block's attention output kernel ``(heads, head_dim, hidden)``
            (:meth:`PrunesHeads.head_output_kernels`), variables of ``model``.
        x: the model's inputs, each ``(examples, sequence)``.
        y: ``(examples,)`` int label ids.

    Returns:
        one float64 array per block, ``(heads,)``: ``sum over batches |dL/dxi_h|``, ``L`` the
        batch's mean cross-entropy, computed as ``sum(kernel[h] * dL/dkernel[h])`` (the gate
        scales the kernel's head slice); not normalised.
    """
    import tensorflow as tf  # the gradient tape: ptmkit trains on the TensorFlow backend

    scores = [np.zeros(int(k.shape[0]), np.float64) for k in kernels]
    for start in range(0, len(y), batch_size):
        batch = {name: tf.constant(values[start : start + batch_size]) for name, values in x.items()}
        with tf.GradientTape() as tape:
            logits = tf.cast(model(batch, training=False), tf.float32)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.constant(y[start : start + batch_size]), logits=logits))
        grads = tape.gradient(loss, [k.value for k in kernels])
        for score, kernel, grad in zip(scores, kernels, grads, strict=True):
            score += np.abs(np.sum(np.asarray(kernel.numpy(), np.float64) * np.asarray(grad, np.float64), axis=(1, 2)))
    return scores


def choose_heads(scores: list[np.ndarray], fraction: float | None = None, per_layer: int | None = None) -> dict[int, list[int]]:
    """The least important heads: ``per_layer`` lowest of each block, or the lowest ``fraction``
    of all heads after each block's scores are divided by their L2 norm (Michel et al. 2019,
    section 4.2), never the last head of a block (a block whose heads are all less important
    than the next candidate keeps its best one).

    Raises:
        ConfigError: ``fraction`` outside ``[0, 1)``, or ``per_layer`` >= some block's heads.
    """
    if per_layer is not None:
        for block, score in enumerate(scores):
            if per_layer >= len(score) or per_layer < 0:
                raise ConfigError(f"--heads-per-layer {per_layer}: layer {block} has {len(score)} heads; cannot prune {per_layer} of them (at least one must remain)")
        return {block: sorted(np.argsort(score, kind="stable")[:per_layer].tolist()) for block, score in enumerate(scores) if per_layer}
    if fraction is None or not 0.0 <= fraction < 1.0:
        raise ConfigError(f"--prune-heads {fraction}: give the fraction of all heads to remove, in [0, 1)")
    normalised = [score / (np.linalg.norm(score) or 1.0) for score in scores]
    ranked = sorted((value, block, head) for block, score in enumerate(normalised) for head, value in enumerate(score))
    budget = int(round(fraction * len(ranked)))
    chosen: dict[int, list[int]] = {}
    for _, block, head in ranked:
        if budget == 0:
            break
        if len(chosen.get(block, [])) + 1 < len(scores[block]):
            chosen.setdefault(block, []).append(head)
            budget -= 1
    return {block: sorted(heads) for block, heads in sorted(chosen.items())}


def _check_head_options(spec: dict[int, list[int]] | None, fraction: float | None, per_layer: int | None, data: str | Path | None) -> None:
    """Refuse, before any head is scored, all but one of the three options, a fraction outside
    ``[0, 1)``, a negative count, and ``data`` with ``spec`` (which scores nothing)."""
    if sum(option is not None for option in (spec, fraction, per_layer)) != 1:
        raise ConfigError("ptmkit compress: give one of --prune-heads FRACTION, --heads-per-layer N or --prune-heads-spec SPEC")
    if fraction is not None and not 0.0 <= fraction < 1.0:
        raise ConfigError(f"--prune-heads {fraction}: give the fraction of all heads to remove, in [0, 1)")
    if per_layer is not None and per_layer < 0:
        raise ConfigError(f"--heads-per-layer {per_layer}: give the number of heads to remove from every layer, >= 0")
    if spec is not None and data is not None:
        raise ConfigError("--data scores head importance; --prune-heads-spec names the heads itself: drop one of them")


def prune_heads_run(
    run_dir: str | Path, out: str | Path, console: Console, *, spec: dict[int, list[int]] | None = None, fraction: float | None = None,
    per_layer: int | None = None, data: str | Path | None = None, registry: Registry | None = None,
) -> dict[str, Any]:
    """Write to ``out`` ``run_dir`` without some of its attention heads.

    A fine-tuned run gives a fine-tuned run (its head kept); its heads are chosen by importance on
    ``data`` (default: the run's dev file) unless ``spec`` names them. A pre-trained run needs
    ``spec``.

    Args:
        spec: block -> heads to remove; or ``fraction`` of all heads; or ``per_layer`` heads of
            every block (exactly one of the three).
        data: a labelled file (the run's labels) to score the heads on.

    Returns:
        the new run's manifest, with ``parameters`` before and after and ``compressed_from``
        (method ``prune-heads``, the removed heads, and their importance when scored).

    Raises:
        RunDirError: ``run_dir`` is not a run, or ``out`` is not empty.
        ConfigError: the family cannot prune heads, a bad spec (a block losing all its heads,
            a head that does not exist), or importance asked of a pre-trained run.
    """
    from ptmkit.training.finetune import load_backbone, load_classifier
    from ptmkit.training.setup import quiet_tensorflow

    registry = registry or get_registry()
    source, target = RunDir(run_dir), Path(out)
    manifest = source.manifest()
    family = registry.family(manifest["family"])
    if not isinstance(family, PrunesHeads):
        flag = "--prune-heads-spec" if spec is not None else "--heads-per-layer" if per_layer is not None else "--prune-heads"
        raise ConfigError(f"{flag}: the {family.name} family cannot remove attention heads (it does not implement PrunesHeads)")
    _check_head_options(spec, fraction, per_layer, data)
    fine_tuned = bool(manifest.get("head"))
    if not fine_tuned and spec is None:
        raise ConfigError(f"{source.path}: head importance needs a fine-tuned run (a classifier); for a {manifest['stage']} run name the heads with --prune-heads-spec")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise RunDirError(f"{target}: exists and is not an empty directory; choose another --out")
    quiet_tensorflow()
    if fine_tuned:
        model, config, tokenizer, _ = load_classifier(source.path, registry)
        backbone = model.get_layer(_backbone_name(model))
    else:
        backbone, config, tokenizer, _ = load_backbone(registry, source)
        model = backbone
    heads = family.attention_heads(config.model)
    recorded: dict[str, Any] = {"path": str(source.path.resolve()), "method": "prune-heads"}
    if spec is not None:
        check_head_spec(spec, heads, "--prune-heads-spec")
    else:
        scores = _scored_heads(family, model, backbone, config, tokenizer, source, data or manifest["dev"])
        spec = choose_heads(scores, fraction=fraction, per_layer=per_layer)
        recorded["importance"] = [[round(float(v), 6) for v in score] for score in scores]
        recorded["data"] = str(Path(data or manifest["dev"]).resolve())
    recorded["heads"] = {str(block): removed for block, removed in sorted(spec.items())}
    model_config, smaller = family.prune_heads(config.model, backbone, spec)
    stored = read_toml(source.require(CONFIG))
    stored["model"] = _asdict(model_config)
    before = int(model.count_params())
    with staged_run(target, "compress") as run:
        if (source / POOLING).exists():
            shutil.copyfile(source / POOLING, run / POOLING)
        if not fine_tuned:
            parameters = {"before": before, "after": int(smaller.count_params())}
            fields = {key: manifest[key] for key in ("inputs", "pooling") if key in manifest}
            written = write_backbone_run(run, registry, family.name, stored, None, smaller, source.require(TOKENIZER), **fields,
                                         parameters=parameters, compressed_from=recorded)
        else:
            parameters, written = _write_pruned_classifier(registry, run, source, manifest, config, model, smaller, model_config, stored, recorded, before)
    removed = sum(len(h) for h in spec.values())
    console.print(f"pruned {removed} of {sum(heads)} heads: {parameters['before']:,} -> {parameters['after']:,} parameters")
    return written


def _backbone_name(model: Any) -> str:
    """The classifier's backbone sub-model: its one layer that is itself a model."""
    import keras

    (name,) = [layer.name for layer in model.layers if isinstance(layer, keras.Model)]
    return name


def _scored_heads(family: Any, model: Any, backbone: Any, config: Any, tokenizer: Any, source: RunDir, data: str | Path) -> list[np.ndarray]:
    from ptmkit.data.tokenization import encode_texts
    from ptmkit.training.finetune import load_labelled

    texts, _, y = load_labelled(data, source.read_json(LABELS))
    x = encode_texts(tokenizer, texts, config.finetune.sequence_length, family.inputs, family.special_tokens(tokenizer).padding_id)
    return head_importance(model, family.head_output_kernels(backbone), x, y, config.finetune.batch_size)


def _write_pruned_classifier(
    registry: Registry, run: RunDir, source: RunDir, manifest: dict[str, Any], config: Any, model: Any, smaller: Any,
    model_config: Any, stored: dict[str, Any], recorded: dict[str, Any], before: int,
) -> tuple[dict[str, int], dict[str, Any]]:
    """The pruned backbone under the run's head (its weights copied), written as a fine-tuned run."""
    import dataclasses

    from ptmkit.config import to_toml
    from ptmkit.io import atomic_save, atomic_write_text
    from ptmkit.training.finetune import build_classifier

    labels = source.read_json(LABELS)
    pruned = build_classifier(registry, dataclasses.replace(config, model=model_config), smaller, len(labels))
    for layer in pruned.layers:  # the head's layers: same names, same shapes
        if layer.weights and layer is not smaller:
            layer.set_weights(model.get_layer(layer.name).get_weights())
    parameters = {"before": before, "after": int(pruned.count_params())}
    atomic_write_text(run / CONFIG, to_toml(stored))
    shutil.copyfile(source.require(TOKENIZER), run / TOKENIZER)
    run.write_json(LABELS, labels)
    atomic_save(run / MODEL_WEIGHTS, lambda tmp: save_model_weights(pruned, tmp))
    fields = {key: value for key, value in manifest.items() if key not in ("format", "ptmkit_version", "created")}
    return parameters, run.write_manifest(**fields, parameters=parameters, compressed_from=recorded)
