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
from ptmkit.errors import ConfigError, Interrupted, RunDirError
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
    _refuse_multitask(source, manifest, "attention-head pruning")
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
    with staged_run(target, "compress") as run:
        parameters, written = _write_smaller(registry, run, source, manifest, config, model, smaller, model_config, stored, recorded)
    removed = sum(len(h) for h in spec.values())
    console.print(f"pruned {removed} of {sum(heads)} heads: {parameters['before']:,} -> {parameters['after']:,} parameters")
    return written


def _write_smaller(
    registry: Registry, run: RunDir, source: RunDir, manifest: dict[str, Any], config: Any, model: Any, smaller: Any,
    model_config: Any, stored: dict[str, Any], recorded: dict[str, Any],
) -> tuple[dict[str, int], dict[str, Any]]:
    """Write the compressed backbone ``smaller`` into ``run``: a pre-trained run when ``model`` is
    a backbone, else under the fine-tuned run's head (:func:`_write_pruned_classifier`)."""
    before = int(model.count_params())
    if (source / POOLING).exists():
        shutil.copyfile(source / POOLING, run / POOLING)
    if manifest.get("head"):
        return _write_pruned_classifier(registry, run, source, manifest, config, model, smaller, model_config, stored, recorded, before)
    parameters = {"before": before, "after": int(smaller.count_params())}
    fields = {key: manifest[key] for key in ("inputs", "pooling") if key in manifest}
    written = write_backbone_run(run, registry, manifest["family"], stored, None, smaller, source.require(TOKENIZER), **fields,
                                 parameters=parameters, compressed_from=recorded)
    return parameters, written


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


def share_layers_run(run_dir: str | Path, out: str | Path, sublayers: str, console: Console, init: str = "mean", registry: Registry | None = None) -> dict[str, Any]:
    """Write to ``out`` ``run_dir`` with the ``sublayers`` of all its blocks tied to one set:
    ALBERT's cross-layer parameter sharing (Lan et al. 2020, section 3.1) applied to a trained
    backbone. A fine-tuned run gives a fine-tuned run (its head kept), a pre-trained one a
    pre-trained one.

    Args:
        sublayers: ``all``, ``attention`` or ``ffn`` (:data:`~ptmkit.contract.SHARED_SUBLAYERS`).
        init: ``mean`` (the element-wise mean of the blocks' weights) or ``first`` (block 0's).

    Returns:
        the new run's manifest, with ``parameters`` before and after and ``compressed_from``
        (method ``share-layers``, the sublayers and the initialisation).

    Raises:
        RunDirError: ``run_dir`` is not a run, or ``out`` is not empty.
        ConfigError: an unknown ``sublayers`` or ``init``; the family cannot share layers.
    """
    from ptmkit.contract import SHARED_SUBLAYERS, SharesLayers
    from ptmkit.training.finetune import load_backbone, load_classifier
    from ptmkit.training.setup import quiet_tensorflow

    registry = registry or get_registry()
    source, target = RunDir(run_dir), Path(out)
    manifest = source.manifest()
    if sublayers not in SHARED_SUBLAYERS:
        raise ConfigError(f"--share-layers {sublayers!r}: give one of {', '.join(SHARED_SUBLAYERS)}")
    if init not in ("mean", "first"):
        raise ConfigError(f"--share-init {init!r}: give mean (the blocks' weights averaged) or first (block 0's)")
    family = registry.family(manifest["family"])
    if not isinstance(family, SharesLayers):
        raise ConfigError(f"--share-layers: the {family.name} family cannot share sublayers across its blocks (it does not implement SharesLayers)")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise RunDirError(f"{target}: exists and is not an empty directory; choose another --out")
    quiet_tensorflow()
    if manifest.get("head"):
        model, config, _, _ = load_classifier(source.path, registry)
        backbone = model.get_layer(_backbone_name(model))
    else:
        backbone, config, _, _ = load_backbone(registry, source)
        model = backbone
    model_config, shared = family.share_layers(config.model, backbone, sublayers, init)
    stored = read_toml(source.require(CONFIG))
    stored["model"] = _asdict(model_config)
    recorded = {"path": str(source.path.resolve()), "method": "share-layers", "sublayers": sublayers, "init": init}
    with staged_run(target, "compress") as run:
        parameters, written = _write_smaller(registry, run, source, manifest, config, model, shared, model_config, stored, recorded)
    console.print(f"shared the {sublayers} sublayers of every block ({init} init): {parameters['before']:,} -> {parameters['after']:,} parameters")
    return written


def theseus_run(
    run_dir: str | Path, out: str | Path, layers: int, console: Console, *, train: str | Path | None = None, dev: str | Path | None = None,
    overrides: list[str] | None = None, base_rate: float = 0.3, slope: float | None = None, init: str = "first", registry: Registry | None = None,
) -> dict[str, Any]:
    """Compress fine-tuned run ``run_dir`` (the predecessor) into ``layers`` blocks by progressive
    module replacing (:mod:`ptmkit.training.theseus`; Xu et al. 2020) trained on ``train``, and
    write the successor alone to ``out`` as a fine-tuned run.

    Args:
        layers: the successor's blocks; divides the predecessor's.
        train, dev: labelled files (the predecessor's labels); default: the predecessor's own.
        overrides: ``finetune.*`` keys over the predecessor's (epochs, learning rate, batch size...).
        base_rate: ``b``, the replacement probability at step 0.
        slope: ``k``, its rise per step; None: reach 1 after half the steps
            (:func:`~ptmkit.training.theseus.default_slope`).
        init: ``first`` or ``module`` (:func:`~ptmkit.training.theseus.initial_layers`).

    Returns:
        the new run's manifest, with ``parameters`` before and after and ``compressed_from``
        (method ``theseus``); its ``metrics.json`` holds the successor's dev accuracy, the
        predecessor's and their agreement.

    Raises:
        RunDirError: ``run_dir`` is not a fine-tuned run, or ``out`` is not empty.
        ConfigError: the family cannot replace modules; ``layers`` does not divide the
            predecessor's blocks; a rate outside ``[0, 1]``, a negative slope, a key outside
            ``[finetune]``.
    """
    from ptmkit.contract import ReplacesModules
    from ptmkit.training.setup import quiet_tensorflow
    from ptmkit.training.theseus import initial_layers

    registry = registry or get_registry()
    source, target = RunDir(run_dir), Path(out)
    manifest = source.manifest()
    family = registry.family(manifest["family"])
    if not isinstance(family, ReplacesModules):
        raise ConfigError(f"--theseus-layers: the {family.name} family cannot replace blocks of its backbone (it does not implement ReplacesModules)")
    if not manifest.get("head"):
        raise RunDirError(f"{source.path}: is a {manifest['stage']} run; module replacement compresses a fine-tuned run (the predecessor, with its head)")
    _refuse_multitask(source, manifest, "module replacement")
    _check_theseus_options(base_rate, slope, overrides or [])
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise RunDirError(f"{target}: exists and is not an empty directory; choose another --out")
    quiet_tensorflow()
    model, config, tokenizer, _ = _predecessor(registry, source, overrides or [])
    backbone = model.get_layer(_backbone_name(model))
    blocks = family.blocks(backbone)
    start = initial_layers(len(blocks), layers, init)
    model_config, successor = family.keep_layers(config.model, backbone, start)
    data = _labelled_inputs(family, tokenizer, config.finetune, source, train or manifest["train"], dev or manifest["dev"])
    recorded = {"path": str(source.path.resolve()), "method": "theseus", "layers": layers, "initialised_from": start, "base_rate": base_rate,
                "train": str(Path(train or manifest["train"]).resolve())}
    stored = read_toml(source.require(CONFIG))
    stored["model"], stored["finetune"] = _asdict(model_config), _asdict(config.finetune)
    with staged_run(target, "compress") as run:
        metrics = _replace_modules(registry, run, config, model, model_config, successor, blocks, data, base_rate, slope, console)
        recorded["slope"] = metrics.pop("slope")
        run.write_json("metrics.json", metrics)
        parameters, written = _write_smaller(registry, run, source, manifest, config, model, successor, model_config, stored, recorded)
    console.print(
        f"successor of {layers} blocks: {parameters['before']:,} -> {parameters['after']:,} parameters; dev accuracy "
        f"{metrics['dev_accuracy']:.4f} (predecessor {metrics['teacher_dev_accuracy']:.4f}, agreement {metrics['dev_agreement_with_teacher']:.4f})"
    )
    return written


def _check_theseus_options(base_rate: float, slope: float | None, overrides: list[str]) -> None:
    if not 0.0 <= base_rate <= 1.0:
        raise ConfigError(f"--replace-rate {base_rate}: give the replacement probability at step 0, in [0, 1]")
    if slope is not None and slope < 0:
        raise ConfigError(f"--replace-slope {slope}: give the probability's rise per step, >= 0")
    for override in overrides:
        if override.partition("=")[0].strip().split(".")[0] != "finetune":
            raise ConfigError(f"--set {override!r}: module replacement keeps the predecessor's model and head; set finetune.* keys")


def _predecessor(registry: Registry, source: RunDir, overrides: list[str]) -> tuple[Any, Any, Any, dict[str, Any]]:
    """The fine-tuned predecessor's classifier, and its config with ``overrides`` applied."""
    import dataclasses

    from ptmkit.training.finetune import load_classifier
    from ptmkit.training.pretrain import resolve_config

    model, config, tokenizer, manifest = load_classifier(source.path, registry)
    if overrides:
        changed = resolve_config(registry, manifest["family"], None, overrides, base=read_toml(source.require(CONFIG)))
        config = dataclasses.replace(config, finetune=changed.finetune)
    return model, config, tokenizer, manifest


def _labelled_inputs(family: Any, tokenizer: Any, ft: Any, source: RunDir, train: str | Path, dev: str | Path) -> dict[str, Any]:
    """``{"x_train", "y_train", "x_dev", "y_dev", "labels"}``: the files encoded at ``ft.sequence_length``
    with the run's labels."""
    from ptmkit.data.tokenization import encode_texts
    from ptmkit.training.finetune import load_labelled

    labels = source.read_json(LABELS)
    pad = family.special_tokens(tokenizer).padding_id
    texts, _, y_train = load_labelled(train, labels)
    dev_texts, _, y_dev = load_labelled(dev, labels)
    if ft.max_train_examples and len(texts) > ft.max_train_examples:  # as finetune chooses them
        keep = np.sort(np.random.default_rng(ft.seed).permutation(len(texts))[: ft.max_train_examples])
        texts, y_train = [texts[i] for i in keep], y_train[keep]
    encode = lambda rows: encode_texts(tokenizer, rows, ft.sequence_length, family.inputs, pad)  # noqa: E731
    return {"x_train": encode(texts), "y_train": y_train, "x_dev": encode(dev_texts), "y_dev": y_dev, "labels": len(labels)}


def _replace_modules(
    registry: Registry, run: RunDir, config: Any, model: Any, model_config: Any, successor: Any, blocks: list[Any],
    data: dict[str, Any], base_rate: float, slope: float | None, console: Console,
) -> dict[str, Any]:
    """Train ``successor``'s blocks by module replacement in ``run`` (its checkpoints and logs);
    return the metrics (successor and predecessor dev accuracy, agreement, steps, seconds, slope)."""
    import dataclasses

    from ptmkit.training.finetune import _fit_classifier, build_classifier
    from ptmkit.training.setup import seed_everything
    from ptmkit.training.theseus import ReplacementScheduler, default_slope, replacing_model

    ft = config.finetune
    seed_everything(ft.seed)
    teacher = np.argmax(model.predict(data["x_dev"], batch_size=128, verbose=0), axis=-1)
    classifier = build_classifier(registry, dataclasses.replace(config, model=model_config), successor, data["labels"])
    for layer in classifier.layers:  # the predecessor's head: same names, same shapes
        if layer.weights and layer is not successor:
            layer.set_weights(model.get_layer(layer.name).get_weights())
    successor_blocks = registry.family(config.family).blocks(successor)
    training, rate = replacing_model(classifier, successor, successor_blocks, blocks, seed=ft.seed)
    total = -(-len(data["y_train"]) // ft.batch_size) * ft.epochs
    k = default_slope(base_rate, total) if slope is None else slope
    console.print(f"module replacement: {len(blocks)} -> {len(successor_blocks)} blocks, p_t = min(1, {k:.4g} t + {base_rate}) over {total} steps")
    try:
        seconds = _fit_classifier(
            training, ft, data["x_train"], data["y_train"], data["x_dev"], data["y_dev"], run, console, ["ptmkit", "compress"],
            extra=lambda start: [ReplacementScheduler(rate, k, base_rate, start)],
        )
    except Interrupted:  # its note offers a resume; the staged run is removed instead
        raise Interrupted("interrupted: module replacement does not resume; nothing was written (run the command again)") from None
    shutil.rmtree(run / "checkpoints", ignore_errors=True)
    predictions = np.argmax(classifier.predict(data["x_dev"], batch_size=128, verbose=0), axis=-1)
    return {
        "dev_accuracy": round(float(np.mean(predictions == data["y_dev"])), 4),
        "teacher_dev_accuracy": round(float(np.mean(teacher == data["y_dev"])), 4),
        "dev_agreement_with_teacher": round(float(np.mean(teacher == predictions)), 4),
        "train_examples": len(data["y_train"]), "dev_examples": len(data["y_dev"]), "steps": total,
        "final_replacement_rate": round(float(rate.numpy()), 6), "train_seconds": round(seconds, 1), "slope": k,
    }


def _refuse_multitask(source: RunDir, manifest: dict[str, Any], method: str) -> None:
    """Raise RunDirError for a multi-task run (``ptmkit finetune --task``): ``method`` reads one head."""
    if "tasks" in manifest:
        raise RunDirError(
            f"{source.path}: is a multi-task run ({', '.join(manifest['tasks'])}); {method} works on a run with one head: fine-tune one task "
            f"from it (ptmkit finetune {source.path} --train FILE --dev FILE --out RUN) and compress that"
        )
