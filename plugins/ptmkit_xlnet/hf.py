"""``ptmkit import-hf DIR`` for Hugging Face XLNet checkpoints (``config.json`` ``model_type: xlnet``).

The weights (``model.safetensors`` as ``XLNetModel``, ``XLNetLMHeadModel`` or
``XLNetForSequenceClassification.save_pretrained`` writes them, with or without the
``transformer.`` prefix) are read with ``safetensors``' NumPy API (no torch, no pickle), every
tensor's shape checked against ``config.json`` first so that a mismatch is one line naming the
tensor, and ported into :class:`ptmkit_xlnet.backbone.XLNetBackbone`: ``word_embedding``,
``mask_emb`` (the query stream's start), and per layer ``rel_attn.{q,k,v,o,r}`` (each ``(d_model,
n_head, d_head)``, keras-hub's ``EinsumDense`` layout as it is), the biases ``r_w_bias``
(content), ``r_r_bias`` (position), ``r_s_bias`` (segment), ``seg_embed``, the two layer norms
and the feed-forward ``layer_1`` / ``layer_2`` (transposed). The sequence summary
(``sequence_summary.summary``, the tanh dense of ``pooled_output``) is ported when the
checkpoint has one (``XLNetModel`` has none: it is then initialised randomly and reported).

Only the bidirectional encoder is imported (``attn_type: "bi"``); Transformer-XL memory
(``mem_len``) is not used, as ``XLNetModel`` does not use it without ``mems``.

The tokenizer is the checkpoint's ``tokenizer.json`` as it is (what ``XLNetTokenizer``
``save_pretrained`` writes), else the unigram model of its ``spiece.model`` (which needs the
``sentencepiece`` package to read) in the layout of the core's :func:`ptmkit.api.unigram_tokenizer`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.api import CheckpointError, check_tensor_shapes, load_checkpoint_unigram, read_hf_config, read_weight_shapes
from ptmkit_xlnet.config import XLNetConfig
from ptmkit_xlnet.tokenizer import SPECIAL_TOKEN_NAMES

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
SPIECE_FILE = "spiece.model"
_REQUIRED = ("vocab_size", "d_model", "n_layer", "n_head", "d_inner")
#: Hugging Face ``ff_activation`` -> :attr:`XLNetConfig.hidden_activation`.
HF_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
    "relu": "relu",
}
#: Keras layer / weight -> the checkpoint's tensor under ``layer.{i}.``, and whether it is transposed.
_LAYER_TENSORS = {
    ("rel_attn/query", "kernel"): ("rel_attn.q", False),
    ("rel_attn/key", "kernel"): ("rel_attn.k", False),
    ("rel_attn/value", "kernel"): ("rel_attn.v", False),
    ("rel_attn/attention_output", "kernel"): ("rel_attn.o", False),
    ("rel_attn/encoding", "kernel"): ("rel_attn.r", False),
    ("", "content_attention_bias"): ("rel_attn.r_w_bias", False),
    ("", "positional_attention_bias"): ("rel_attn.r_r_bias", False),
    ("", "segment_attention_bias"): ("rel_attn.r_s_bias", False),
    ("", "segment_encoding"): ("rel_attn.seg_embed", False),
    ("layer_norm_rel_attn", "gamma"): ("rel_attn.layer_norm.weight", False),
    ("layer_norm_rel_attn", "beta"): ("rel_attn.layer_norm.bias", False),
    ("layer_norm_ff", "gamma"): ("ff.layer_norm.weight", False),
    ("layer_norm_ff", "beta"): ("ff.layer_norm.bias", False),
    ("feedforward_intermediate_dense", "kernel"): ("ff.layer_1.weight", True),
    ("feedforward_intermediate_dense", "bias"): ("ff.layer_1.bias", False),
    ("feedforward_output_dense", "kernel"): ("ff.layer_2.weight", True),
    ("feedforward_output_dense", "bias"): ("ff.layer_2.bias", False),
}


def read_xlnet_config(directory: Path) -> tuple[XLNetConfig, dict[str, Any]]:
    """Map ``DIR/config.json`` onto an :class:`XLNetConfig`.

    Raises:
        CheckpointError: no config.json, another model type, a missing or non-positive key, heads
            that do not divide ``d_model``, a ``d_head`` other than ``d_model / n_head``, an
            activation the backbone does not compute, or a unidirectional ``attn_type``.
    """
    path, hf = read_hf_config(directory, "xlnet", "XLNet", _REQUIRED)
    if hf["d_model"] % hf["n_head"]:
        raise CheckpointError(f"{path}: key 'n_head' = {hf['n_head']} does not divide 'd_model' = {hf['d_model']}")
    if hf.get("d_head", hf["d_model"] // hf["n_head"]) != hf["d_model"] // hf["n_head"]:
        raise CheckpointError(
            f"{path}: key 'd_head' = {hf['d_head']} is not 'd_model' / 'n_head' = {hf['d_model'] // hf['n_head']}"
        )
    activation = hf.get("ff_activation", "gelu")
    if activation not in HF_ACTIVATIONS:
        raise CheckpointError(
            f"{path}: key 'ff_activation' = {activation!r} is not supported (supported: {', '.join(HF_ACTIVATIONS)})"
        )
    if hf.get("attn_type", "bi") != "bi":
        raise CheckpointError(
            f"{path}: key 'attn_type' = {hf['attn_type']!r} is not supported (only 'bi', XLNet's bidirectional encoder)"
        )
    clamp = hf.get("clamp_len", -1)
    config = XLNetConfig(
        vocabulary_size=hf["vocab_size"],
        num_layers=hf["n_layer"],
        num_heads=hf["n_head"],
        hidden_dim=hf["d_model"],
        intermediate_dim=hf["d_inner"],
        dropout=float(hf.get("dropout", 0.1)),
        hidden_activation=HF_ACTIVATIONS[activation],
        layer_norm_epsilon=float(hf.get("layer_norm_eps", 1e-12)),
        clamp_len=clamp if isinstance(clamp, int) and clamp > 0 else -1,
    )
    return config, hf


def expected_shapes(config: XLNetConfig) -> dict[str, tuple[int, ...]]:
    """The tensors of an ``XLNetModel`` checkpoint and their shapes (torch layout: Linear weights
    are ``(out, in)``), without the ``transformer.`` prefix."""
    d, i, n = config.hidden_dim, config.intermediate_dim, config.num_heads
    head = d // n
    shapes: dict[str, tuple[int, ...]] = {"word_embedding.weight": (config.vocabulary_size, d), "mask_emb": (1, 1, d)}
    for layer in range(config.num_layers):
        p = f"layer.{layer}."
        for name in ("q", "k", "v", "o", "r"):
            shapes[f"{p}rel_attn.{name}"] = (d, n, head)
        for name in ("r_w_bias", "r_r_bias", "r_s_bias"):
            shapes[f"{p}rel_attn.{name}"] = (n, head)
        shapes[f"{p}rel_attn.seg_embed"] = (2, n, head)
        for name in ("rel_attn.layer_norm", "ff.layer_norm"):
            shapes[f"{p}{name}.weight"], shapes[f"{p}{name}.bias"] = (d,), (d,)
        shapes[f"{p}ff.layer_1.weight"], shapes[f"{p}ff.layer_1.bias"] = (i, d), (i,)
        shapes[f"{p}ff.layer_2.weight"], shapes[f"{p}ff.layer_2.bias"] = (d, i), (d,)
    shapes["sequence_summary.summary.weight"], shapes["sequence_summary.summary.bias"] = (d, d), (d,)
    return shapes


def _resolve(key: str, names: Any) -> str | None:
    """The checkpoint's name for ``key`` (``XLNetModel``'s name): as is or under ``transformer.``
    (the sequence summary is outside the ``transformer.`` prefix in the task models)."""
    return next((name for name in (key, f"transformer.{key}") if name in names), None)


def check_weights(directory: Path, config: XLNetConfig) -> dict[str, Any]:
    """Check that ``model.safetensors`` holds every tensor of ``config`` in its shape.

    Returns:
        ``{"file", "bytes", "tensors", "sequence_summary"}``; ``sequence_summary`` False when the
        checkpoint has none.

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
        f"{config.num_layers} layers, hidden {config.hidden_dim}, {config.num_heads} heads",
        optional=("sequence_summary.",),
    )
    return {
        "file": str(path),
        "bytes": path.stat().st_size,
        "tensors": len(shapes),
        "sequence_summary": "sequence_summary." not in absent,
    }


def load_tokenizer(directory: Path, config: XLNetConfig) -> tuple[Any, Path | None]:
    """The checkpoint's tokenizer: ``tokenizer.json`` (returned with its path, to copy as it is),
    else the unigram model of ``spiece.model`` (path None), cased and accent-stripped unless
    ``tokenizer_config.json`` says otherwise (transformers' ``XLNetTokenizer``), with XLNet's
    template (:func:`ptmkit.api.load_checkpoint_unigram`).

    Raises:
        CheckpointError: as :func:`ptmkit.api.load_checkpoint_unigram` raises.
    """
    from ptmkit_xlnet.tokenizer import SPECIAL_TOKENS, xlnet_post_processor

    return load_checkpoint_unigram(
        directory,
        config.vocabulary_size,
        list(SPECIAL_TOKEN_NAMES.values()),
        "an XLNet",
        xlnet_post_processor,
        lowercase_default=False,
        never_split=SPECIAL_TOKENS,
    )


def port_weights(backbone: Any, directory: Path, summary: bool) -> None:
    """Fill ``backbone`` from ``DIR/model.safetensors`` (the module docstring's map; the sequence
    summary only when the checkpoint has one)."""
    from ptmkit.api import open_safetensors

    with open_safetensors(directory / WEIGHTS_FILE) as file:
        names = set(file.keys())

        def tensor(key: str, transpose: bool = False) -> np.ndarray:
            value = np.asarray(file.get_tensor(_resolve(key, names) or key), dtype=np.float32)
            return value.T if transpose else value

        backbone.token_embedding.embeddings.assign(tensor("word_embedding.weight"))
        backbone.query_start.mask_emb.assign(tensor("mask_emb"))
        for index, layer in enumerate(backbone.transformer_layers):
            for (path, weight), (key, transpose) in _LAYER_TENSORS.items():
                owner = layer
                for part in filter(None, path.split("/")):
                    owner = owner.relative_attention if part == "rel_attn" else getattr(owner, _ATTRIBUTES[part])
                variable = getattr(owner, weight)
                variable.assign(tensor(f"layer.{index}.{key}", transpose))
        if summary:
            backbone.sequence_summary.kernel.assign(tensor("sequence_summary.summary.weight", True))
            backbone.sequence_summary.bias.assign(tensor("sequence_summary.summary.bias"))


#: Keras sub-layer names -> their attributes on keras-hub's ``XLNetEncoder`` /
#: ``TwoStreamRelativeAttention``.
_ATTRIBUTES = {
    "query": "_query_dense",
    "key": "_key_dense",
    "value": "_value_dense",
    "attention_output": "_output_dense",
    "encoding": "_encoding_dense",
    "layer_norm_rel_attn": "layer_norm",
    "layer_norm_ff": "layer_norm_ff",
    "feedforward_intermediate_dense": "feedforward_intermediate_dense",
    "feedforward_output_dense": "feedforward_output_dense",
}


def import_hf(directory: str | os.PathLike[str], out: str | os.PathLike[str], console: Any = None) -> dict[str, Any]:
    """Import the Hugging Face XLNet checkpoint in ``directory`` as an ``xlnet`` run in ``out``.

    Every check runs before anything is written; the run is assembled beside ``out`` and moved
    into place at the end, so a failure leaves nothing behind.

    Returns:
        the run's manifest.

    Raises:
        CheckpointError: see :func:`read_xlnet_config`, :func:`check_weights`, :func:`load_tokenizer`.
        RunDirError: ``out`` exists and is not an empty directory.
    """
    from ptmkit.api import assemble_import, check_import_paths
    from ptmkit_xlnet.backbone import build_backbone

    source, target = check_import_paths(directory, out)
    config, _ = read_xlnet_config(source)
    weights = check_weights(source, config)
    tokenizer, tokenizer_file = load_tokenizer(source, config)
    description = (
        f"importing {source}: XLNet {config.num_layers} layers, hidden {config.hidden_dim}, {config.num_heads} heads, "
        f"vocabulary {config.vocabulary_size:,}"
        + ("" if weights["sequence_summary"] else "; no sequence summary in the checkpoint (initialised randomly)")
    )
    return assemble_import(
        target,
        source,
        "xlnet",
        config,
        weights,
        tokenizer,
        tokenizer_file,
        str(tokenizer_file or SPIECE_FILE),
        build_backbone=build_backbone,
        port_weights=lambda backbone: port_weights(backbone, source, weights["sequence_summary"]),
        description=description,
        inputs=["token_ids", "segment_ids", "padding_mask"],
        console=console,
    )
