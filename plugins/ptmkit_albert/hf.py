"""``ptmkit import-hf DIR`` for Hugging Face ALBERT checkpoints (``config.json`` ``model_type: albert``).

The weights (``model.safetensors`` as ``AlbertModel`` or ``AlbertForMaskedLM`` /
``AlbertForPreTraining.save_pretrained`` writes them, with or without the ``albert.`` prefix) are
read with ``safetensors``' NumPy API (no torch, no pickle), every tensor's shape checked against
``config.json`` first so that a mismatch is one line naming the tensor, and ported into
:class:`ptmkit_albert.backbone.AlbertBackbone` by keras-hub's own converter
(``keras_hub.src.utils.transformers.convert_albert.convert_weights``: the factorised embedding,
``embedding_hidden_mapping_in``, and one set of weights per ``albert_layer_groups.G.albert_layers.I``).
Positions are Hugging Face's (``0, 1, ...``, absolute); the pooler (``pooler``) is ported when the
checkpoint has one (``AlbertForMaskedLM`` has none: it is then initialised randomly and reported,
as transformers does).

The tokenizer is the checkpoint's ``tokenizer.json`` as it is (what ``AlbertTokenizer`` /
``AlbertTokenizerFast.save_pretrained`` writes), else the unigram model of its ``spiece.model``
(which needs the ``sentencepiece`` package to read) in the layout of the core's
:func:`ptmkit.api.unigram_tokenizer`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ptmkit.api import (
    CheckpointError,
    check_positive_key,
    check_tensor_shapes,
    load_checkpoint_unigram,
    read_hf_config,
    read_weight_shapes,
)
from ptmkit_albert.config import AlbertConfig
from ptmkit_albert.tokenizer import SPECIAL_TOKEN_NAMES

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
SPIECE_FILE = "spiece.model"
_REQUIRED = (
    "vocab_size",
    "embedding_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
)
#: Hugging Face ``hidden_act`` -> :attr:`AlbertConfig.hidden_activation`.
HF_ACTIVATIONS = {
    "gelu_new": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
    "gelu": "gelu",
    "relu": "relu",
}


def read_albert_config(directory: Path) -> tuple[AlbertConfig, dict[str, Any]]:
    """Map ``DIR/config.json`` onto an :class:`AlbertConfig`.

    Raises:
        CheckpointError: no config.json, another model type, a missing or non-positive key, groups
            that do not divide the layers, or an activation or position-embedding type the backbone
            does not compute.
    """
    path, hf = read_hf_config(directory, "albert", "ALBERT", _REQUIRED)
    for key in ("num_hidden_groups", "inner_group_num"):
        check_positive_key(path, hf, key, default=1)
    check_positive_key(path, hf, "type_vocab_size", default=2)
    if hf["num_hidden_layers"] % hf.get("num_hidden_groups", 1):
        raise CheckpointError(
            f"{path}: key 'num_hidden_groups' = {hf['num_hidden_groups']} does not divide 'num_hidden_layers' = {hf['num_hidden_layers']}"
        )
    if hf["hidden_size"] % hf["num_attention_heads"]:
        raise CheckpointError(
            f"{path}: key 'num_attention_heads' = {hf['num_attention_heads']} does not divide 'hidden_size' = {hf['hidden_size']}"
        )
    activation = hf.get("hidden_act", "gelu_new")
    if activation not in HF_ACTIVATIONS:
        raise CheckpointError(
            f"{path}: key 'hidden_act' = {activation!r} is not supported (supported: {', '.join(HF_ACTIVATIONS)})"
        )
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(
            f"{path}: key 'position_embedding_type' = {hf['position_embedding_type']!r} is not supported (only 'absolute')"
        )
    config = AlbertConfig(
        vocabulary_size=hf["vocab_size"],
        num_layers=hf["num_hidden_layers"],
        num_groups=hf.get("num_hidden_groups", 1),
        inner_group_num=hf.get("inner_group_num", 1),
        num_heads=hf["num_attention_heads"],
        embedding_dim=hf["embedding_size"],
        hidden_dim=hf["hidden_size"],
        intermediate_dim=hf["intermediate_size"],
        dropout=float(hf.get("hidden_dropout_prob", 0.0)),
        max_sequence_length=hf["max_position_embeddings"],
        num_segments=hf.get("type_vocab_size", 2),
        hidden_activation=HF_ACTIVATIONS[activation],
        layer_norm_epsilon=float(hf.get("layer_norm_eps", 1e-12)),
    )
    return config, hf


def expected_shapes(config: AlbertConfig) -> dict[str, tuple[int, ...]]:
    """The tensors of an ``AlbertModel`` checkpoint and their shapes (torch layout: Linear weights
    are ``(out, in)``), without the ``albert.`` prefix."""
    e, h, i = config.embedding_dim, config.hidden_dim, config.intermediate_dim
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (config.vocabulary_size, e),
        "embeddings.position_embeddings.weight": (config.max_sequence_length, e),
        "embeddings.token_type_embeddings.weight": (config.num_segments, e),
        "embeddings.LayerNorm.weight": (e,),
        "embeddings.LayerNorm.bias": (e,),
        "encoder.embedding_hidden_mapping_in.weight": (h, e),
        "encoder.embedding_hidden_mapping_in.bias": (h,),
    }
    for g in range(config.num_groups):
        for n in range(config.inner_group_num):
            p = f"encoder.albert_layer_groups.{g}.albert_layers.{n}."
            for name in ("attention.query", "attention.key", "attention.value", "attention.dense"):
                shapes[f"{p}{name}.weight"], shapes[f"{p}{name}.bias"] = (h, h), (h,)
            shapes[f"{p}ffn.weight"], shapes[f"{p}ffn.bias"] = (i, h), (i,)
            shapes[f"{p}ffn_output.weight"], shapes[f"{p}ffn_output.bias"] = (h, i), (h,)
            for name in ("attention.LayerNorm", "full_layer_layer_norm"):
                shapes[f"{p}{name}.weight"], shapes[f"{p}{name}.bias"] = (h,), (h,)
    shapes["pooler.weight"], shapes["pooler.bias"] = (h, h), (h,)
    return shapes


def _resolve(key: str, names: Any) -> str | None:
    """The checkpoint's name for ``key`` (``AlbertModel``'s name): as is or under ``albert.``."""
    key = key.removeprefix("albert.")
    return next((name for name in (key, f"albert.{key}") if name in names), None)


def check_weights(directory: Path, config: AlbertConfig) -> dict[str, Any]:
    """Check that ``model.safetensors`` holds every tensor of ``config`` in its shape.

    Returns:
        ``{"file", "bytes", "tensors", "pooler"}``; ``pooler`` False when the checkpoint has none.

    Raises:
        CheckpointError: no (or a pickled-only, or an unreadable) weights file, a missing tensor or
            a tensor of another shape than ``config.json`` implies.
    """
    path, shapes = read_weight_shapes(directory)
    absent = check_tensor_shapes(
        path,
        shapes,
        expected_shapes(config),
        lambda key: _resolve(key, shapes),
        f"{config.num_groups} group(s) of {config.inner_group_num} layer(s), embedding {config.embedding_dim}, hidden {config.hidden_dim}",
        optional=("pooler.",),
    )
    return {"file": str(path), "bytes": path.stat().st_size, "tensors": len(shapes), "pooler": "pooler." not in absent}


def load_tokenizer(directory: Path, config: AlbertConfig) -> tuple[Any, Path | None]:
    """The checkpoint's tokenizer: ``tokenizer.json`` (returned with its path, to copy as it is),
    else the unigram model of ``spiece.model`` (path None), lower-cased and accent-stripped unless
    ``tokenizer_config.json`` says otherwise (transformers' ``AlbertTokenizer``), with ALBERT's
    template (:func:`ptmkit.api.load_checkpoint_unigram`).

    Raises:
        CheckpointError: as :func:`ptmkit.api.load_checkpoint_unigram` raises.
    """
    from ptmkit_albert.tokenizer import albert_post_processor

    return load_checkpoint_unigram(
        directory, config.vocabulary_size, list(SPECIAL_TOKEN_NAMES.values()), "an ALBERT", albert_post_processor, lowercase_default=True
    )


def port_weights(backbone: Any, directory: Path, pooler: bool) -> None:
    """Fill ``backbone`` from ``DIR/model.safetensors`` with keras-hub's ALBERT converter (the
    pooler only when the checkpoint has one)."""
    from keras_hub.src.utils.transformers.convert_albert import convert_weights
    from keras_hub.src.utils.transformers.safetensor_utils import SafetensorLoader

    from ptmkit.api import open_safetensors

    class Loader(SafetensorLoader):  # type: ignore[misc]
        def get_tensor(self, hf_weight_key: str) -> Any:
            file = self.safetensor_files.get(WEIGHTS_FILE) or self.enter_context(open_safetensors(directory / WEIGHTS_FILE))
            self.safetensor_files[WEIGHTS_FILE] = file
            return file.get_tensor(_resolve(hf_weight_key, set(file.keys())) or hf_weight_key)

        def port_weight(self, keras_variable: Any, hf_weight_key: str, hook_fn: Any = None) -> None:
            if hf_weight_key.removeprefix("albert.").startswith("pooler.") and not pooler:
                return  # kept as initialised, and reported
            super().port_weight(keras_variable, hf_weight_key, hook_fn)

    with Loader(str(directory), fname=WEIGHTS_FILE) as loader:
        convert_weights(backbone, loader, {})


def import_hf(directory: str | os.PathLike[str], out: str | os.PathLike[str], console: Any = None) -> dict[str, Any]:
    """Import the Hugging Face ALBERT checkpoint in ``directory`` as an ``albert`` run in ``out``.

    Every check runs before anything is written; the run is assembled beside ``out`` and moved
    into place at the end, so a failure leaves nothing behind.

    Returns:
        the run's manifest.

    Raises:
        CheckpointError: see :func:`read_albert_config`, :func:`check_weights`, :func:`load_tokenizer`.
        RunDirError: ``out`` exists and is not an empty directory.
    """
    from ptmkit.api import assemble_import, check_import_paths
    from ptmkit_albert.backbone import build_backbone

    source, target = check_import_paths(directory, out)
    config, _ = read_albert_config(source)
    weights = check_weights(source, config)
    tokenizer, tokenizer_file = load_tokenizer(source, config)
    description = (
        f"importing {source}: ALBERT {config.num_layers} layers ({config.num_groups} group(s) of {config.inner_group_num}), "
        f"embedding {config.embedding_dim}, hidden {config.hidden_dim}, {config.num_heads} heads, vocabulary {config.vocabulary_size:,}"
        + ("" if weights["pooler"] else "; no pooler in the checkpoint (initialised randomly)")
    )
    return assemble_import(
        target, source, "albert", config, weights, tokenizer, tokenizer_file, str(tokenizer_file or SPIECE_FILE),
        build_backbone=build_backbone, port_weights=lambda backbone: port_weights(backbone, source, weights["pooler"]),
        description=description, inputs=["token_ids", "segment_ids", "padding_mask"], console=console,
    )
