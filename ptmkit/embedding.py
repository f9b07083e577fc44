"""Sentence embeddings from a backbone: pooling over the sequence output, optional L2 normalisation.

The pooling a checkpoint was trained with (sentence-transformers' ``1_Pooling/config.json`` and
``Normalize`` module, Reimers & Gurevych 2019, "Sentence-BERT") is kept in the run directory's
``pooling.json``; a run without one gets mean pooling without normalisation. The same Keras model
is what ``ptmkit export`` converts to ONNX for a run that has no head, so Keras and ONNX Runtime
compute the same embeddings.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.contract import InputSpec
from ptmkit.errors import ConfigError
from ptmkit.rundir import POOLING, RunDir

POOLING_MODES = ("mean", "cls", "max")
DEFAULT_POOLING: dict[str, Any] = {"mode": "mean", "normalize": False, "max_sequence_length": None}
DEFAULT_SEQUENCE_LENGTH = 128  # when neither pooling.json nor the caller gives one


def read_pooling(run: RunDir) -> dict[str, Any]:
    """The run's pooling settings (``pooling.json``, else :data:`DEFAULT_POOLING`).

    Raises:
        RunDirError: ``pooling.json`` is not valid JSON.
        ConfigError: its ``mode`` is not one of :data:`POOLING_MODES`.
    """
    pooling = dict(DEFAULT_POOLING)
    if (run / POOLING).exists():
        pooling.update(run.read_json(POOLING))
    if pooling["mode"] not in POOLING_MODES:
        raise ConfigError(f"{run / POOLING}: key 'mode' = {pooling['mode']!r}; expected one of {', '.join(POOLING_MODES)}")
    return pooling


def build_embedding_model(backbone: Any, pooling: dict[str, Any], mask_input: str | None = None, output: str = "sequence_output") -> Any:
    """A Keras model: the backbone's inputs -> ``embeddings``, ``(batch, hidden)`` float32.

    ``output`` names the backbone output pooled: ``(batch, sequence, hidden)``, or ``(batch,
    layers, sequence, hidden)`` (e.g. ``hidden_states``), which is first averaged over its layers
    (a scalar mix with equal weights and scale 1, Peters et al. 2018, eq. 1).

    ``mean``: the average of ``sequence_output`` over positions where the ``mask_input`` (the
    family's ``attention_mask`` input) is 1 (the count clamped at 1e-9, as sentence-transformers
    does; every position without a mask input); ``cls``: the first position; ``max``: the maximum
    over unmasked positions. ``normalize``: divided by the L2 norm, clamped at 1e-12
    (``torch.nn.functional.normalize``).
    """
    import keras
    from keras import ops

    from ptmkit.training.pretrain import backbone_inputs

    inputs = backbone_inputs(backbone)
    hidden = backbone(inputs)[output]
    if len(hidden.shape) == 4:
        hidden = ops.mean(hidden, axis=1)
    if mask_input is not None:
        mask = ops.expand_dims(ops.cast(inputs[mask_input], hidden.dtype), -1)
    else:
        mask = ops.ones_like(hidden[..., :1])
    mode = pooling["mode"]
    if mode == "mean":
        pooled = ops.sum(hidden * mask, axis=1) / ops.maximum(ops.sum(mask, axis=1), 1e-9)
    elif mode == "cls":
        pooled = hidden[:, 0, :]
    else:
        pooled = ops.max(hidden - (1.0 - mask) * 1e9, axis=1)
    if pooling.get("normalize"):
        pooled = pooled / ops.maximum(ops.sqrt(ops.sum(ops.square(pooled), axis=-1, keepdims=True)), 1e-12)
    outputs = keras.layers.Identity(name="embeddings", dtype="float32")(pooled)
    return keras.Model(inputs, outputs, name="embedder")


def embedding_settings(run_dir: str | Path) -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    """What :func:`load_embedder` builds its model from, read without TensorFlow.

    Returns:
        ``(config, tokenizer, pooling, manifest)``: the run's resolved config, its
        ``tokenizers.Tokenizer``, its pooling with ``pooling["max_sequence_length"]`` filled in (the
        smaller of the pooling's length and the family's ``max_sequence_length``), its manifest.

    Raises:
        RunDirError: a fine-tuned run (embed its parent), a family whose backbone has no
            ``sequence_output`` (an encoder-decoder), or missing/corrupted files.
    """
    from ptmkit.config import read_toml
    from ptmkit.errors import RunDirError
    from ptmkit.plugins import get_registry
    from ptmkit.rundir import CONFIG
    from ptmkit.training.pretrain import resolve_config

    run = RunDir(run_dir)
    manifest = run.manifest()
    if manifest["stage"] != "pretrain":
        raise RunDirError(f"{run.path}: is a {manifest['stage']} run; sentence embeddings come from a pre-trained or imported backbone (its parent: {manifest.get('parent', '?')})")
    pooling = read_pooling(run)
    registry = get_registry()
    config = resolve_config(registry, manifest["family"], None, None, base=read_toml(run.require(CONFIG)))
    family = registry.family(manifest["family"])
    offered = [spec.name for spec in family.outputs]
    if "sequence_output" not in offered:
        raise RunDirError(
            f"{run.path}: a {family.name} run has no sentence embeddings (its backbone gives {', '.join(offered)}, "
            "no sequence_output to pool into one)"
        )
    limit = family.limits(config.model).max_sequence_length or DEFAULT_SEQUENCE_LENGTH
    pooling["max_sequence_length"] = min(int(pooling.get("max_sequence_length") or DEFAULT_SEQUENCE_LENGTH), int(limit))
    return config, run.load_tokenizer(), pooling, manifest


def load_embedder(run_dir: str | Path) -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    """The embedding model of a run holding a pre-trained (or imported) backbone.

    Returns:
        ``(model, tokenizer, pooling, manifest)``; ``pooling["max_sequence_length"]`` is filled in
        (:func:`embedding_settings`).

    Raises:
        RunDirError: a fine-tuned run (embed its parent), or missing/corrupted files.
    """
    from ptmkit.plugins import get_registry
    from ptmkit.training.finetune import load_backbone
    from ptmkit.training.setup import quiet_tensorflow

    _, tokenizer, pooling, manifest = embedding_settings(run_dir)
    quiet_tensorflow()
    registry = get_registry()
    backbone, *_ = load_backbone(registry, RunDir(run_dir))
    mask = registry.family(manifest["family"]).input("attention_mask")
    return build_embedding_model(backbone, pooling, mask.name if mask else None), tokenizer, pooling, manifest


def embed_texts(model: Any, tokenizer: Any, texts: list[str], sequence_length: int, inputs: Sequence[InputSpec], pad_id: int, batch_size: int = 32) -> np.ndarray:
    """Embed ``texts`` with a model from :func:`build_embedding_model`.

    Texts are encoded with the tokenizer's specials, truncated to ``sequence_length`` tokens and
    padded to the longest text of each batch (padding does not change mean/cls/max pooling).

    Returns:
        ``(len(texts), hidden)`` float32.
    """
    from ptmkit.data.tokenization import character_table, manifest_inputs
    from ptmkit_export.clip import clip_text, plain_copy
    from ptmkit_export.fields import from_encodings

    tokenizer = plain_copy(tokenizer)
    texts = [clip_text(tokenizer, text, sequence_length) for text in texts]  # a long text: its prefix, same tokens
    tokenizer.enable_truncation(max_length=sequence_length)
    tokenizer.enable_padding(pad_id=pad_id, pad_token=tokenizer.id_to_token(pad_id) or "")
    characters = character_table(tokenizer, inputs)
    specs = manifest_inputs(inputs)
    chunks = []
    for start in range(0, len(texts), batch_size):
        encodings = tokenizer.encode_batch(texts[start : start + batch_size])
        feeds = from_encodings(encodings, specs, characters)
        chunks.append(np.asarray(model(feeds, training=False), np.float32))
    return np.concatenate(chunks) if chunks else np.zeros((0, 0), np.float32)
