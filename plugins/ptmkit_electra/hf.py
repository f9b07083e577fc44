"""``ptmkit import-hf DIR`` for Hugging Face ELECTRA discriminators (``config.json`` ``model_type: electra``).

The weights (``model.safetensors`` as ``ElectraModel`` or ``ElectraForPreTraining.save_pretrained``
writes them, with or without the ``electra.`` prefix) are read with ``safetensors``' NumPy API
(no torch, no pickle), every tensor's shape checked against ``config.json`` first so that a
mismatch is one line naming the tensor, and ported into
:class:`ptmkit_electra.backbone.ElectraBackbone` by keras-hub's BERT converter
(``keras_hub.src.utils.transformers.convert_bert.convert_weights``: the layer names are the
same), plus the embedding projection (``embeddings_project``) when ``embedding_size`` is not
``hidden_size``. An ELECTRA checkpoint has no pooler: the backbone's ``pooled_dense`` keeps its
initialisation (as the reference implementation's fine-tuning starts it) and the manifest says so.
The discriminator head of ``ElectraForPreTraining`` (``discriminator_predictions.*``) is not part
of the backbone and is left out, as a generator's ``generator_predictions.*`` would be.

The tokenizer is the checkpoint's WordPiece, read as transformers' ``AutoTokenizer`` reads it
(:func:`ptmkit.api.load_checkpoint_wordpiece`: ``tokenizer.json`` as it is, else ``vocab.txt``
and ``tokenizer_config.json``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.api import CheckpointError, check_positive_key, check_tensor_shapes, read_hf_config, read_weight_shapes
from ptmkit_electra.config import ElectraConfig

WEIGHTS_FILE = "model.safetensors"
_REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "max_position_embeddings")
#: Hugging Face ``hidden_act`` -> :attr:`ElectraConfig.hidden_activation`.
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_approximate", "gelu_pytorch_tanh": "gelu_approximate", "relu": "relu"}


def read_electra_config(directory: Path) -> tuple[ElectraConfig, dict[str, Any]]:
    """Map ``DIR/config.json`` onto an :class:`ElectraConfig` (``embedding_dim`` from
    ``embedding_size``, which defaults to 128 as in transformers' ``ElectraConfig``).

    Raises:
        CheckpointError: no config.json, another model type, a missing or non-positive key, or an
            activation, position-embedding type or decoder option the backbone does not compute.
    """
    path, hf = read_hf_config(directory, "electra", "ELECTRA", _REQUIRED)
    check_positive_key(path, hf, "type_vocab_size", default=2)
    check_positive_key(path, hf, "embedding_size", default=128)
    if hf["hidden_size"] % hf["num_attention_heads"]:
        raise CheckpointError(f"{path}: key 'num_attention_heads' = {hf['num_attention_heads']} does not divide 'hidden_size' = {hf['hidden_size']}")
    activation = hf.get("hidden_act", "gelu")
    if activation not in HF_ACTIVATIONS:
        raise CheckpointError(f"{path}: key 'hidden_act' = {activation!r} is not supported (supported: {', '.join(HF_ACTIVATIONS)})")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"{path}: key 'position_embedding_type' = {hf['position_embedding_type']!r} is not supported (only 'absolute')")
    for key in ("is_decoder", "add_cross_attention"):
        if hf.get(key):
            raise CheckpointError(f"{path}: key {key!r} is true; the ELECTRA importer reads encoders only")
    config = ElectraConfig(
        vocabulary_size=hf["vocab_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=hf["num_attention_heads"],
        hidden_dim=hf["hidden_size"],
        embedding_dim=hf.get("embedding_size", 128),
        intermediate_dim=hf["intermediate_size"],
        dropout=float(hf.get("hidden_dropout_prob", 0.1)),
        max_sequence_length=hf["max_position_embeddings"],
        num_segments=hf.get("type_vocab_size", 2),
        hidden_activation=HF_ACTIVATIONS[activation],
        layer_norm_epsilon=float(hf.get("layer_norm_eps", 1e-12)),
    )
    return config, hf


def expected_shapes(config: ElectraConfig) -> dict[str, tuple[int, ...]]:
    """The tensors of an ``ElectraModel`` checkpoint and their shapes (torch layout: Linear
    weights are ``(out, in)``), without the ``electra.`` prefix."""
    h, e, i = config.hidden_dim, config.embedding_dim, config.intermediate_dim
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (config.vocabulary_size, e),
        "embeddings.position_embeddings.weight": (config.max_sequence_length, e),
        "embeddings.token_type_embeddings.weight": (config.num_segments, e),
        "embeddings.LayerNorm.weight": (e,),
        "embeddings.LayerNorm.bias": (e,),
    }
    if e != h:
        shapes["embeddings_project.weight"], shapes["embeddings_project.bias"] = (h, e), (h,)
    for n in range(config.num_layers):
        p = f"encoder.layer.{n}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            shapes[f"{p}{name}.weight"], shapes[f"{p}{name}.bias"] = (h, h), (h,)
        shapes[f"{p}intermediate.dense.weight"], shapes[f"{p}intermediate.dense.bias"] = (i, h), (i,)
        shapes[f"{p}output.dense.weight"], shapes[f"{p}output.dense.bias"] = (h, i), (h,)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[f"{p}{name}.weight"], shapes[f"{p}{name}.bias"] = (h,), (h,)
    return shapes


def _resolve(key: str, names: Any) -> str | None:
    """The checkpoint's name for ``key`` (``ElectraModel``'s name): as is or under ``electra.``."""
    key = key.removeprefix("electra.")
    return next((name for name in (key, f"electra.{key}") if name in names), None)


def check_weights(directory: Path, config: ElectraConfig) -> dict[str, Any]:
    """Check that ``model.safetensors`` holds every tensor of ``config`` in its shape.

    Returns:
        ``{"file", "bytes", "tensors", "pooler"}``; ``pooler`` is False (ELECTRA has none).

    Raises:
        CheckpointError: no (or a pickled-only, or an unreadable) weights file, a missing tensor or
            a tensor of another shape than ``config.json`` implies.
    """
    path, shapes = read_weight_shapes(directory)
    check_tensor_shapes(
        path, shapes, expected_shapes(config), lambda key: _resolve(key, shapes),
        f"{config.num_layers} layers, hidden {config.hidden_dim}, embedding {config.embedding_dim}",
    )
    return {"file": str(path), "bytes": path.stat().st_size, "tensors": len(shapes), "pooler": False}


def port_weights(backbone: Any, directory: Path, hf: dict[str, Any]) -> None:
    """Fill ``backbone`` from ``DIR/model.safetensors``: keras-hub's BERT converter (same layer
    names) without the pooler, then the embedding projection."""
    from keras_hub.src.utils.transformers.convert_bert import convert_weights
    from keras_hub.src.utils.transformers.safetensor_utils import SafetensorLoader

    from ptmkit.api import open_safetensors

    class Loader(SafetensorLoader):  # type: ignore[misc]
        def get_tensor(self, hf_weight_key: str) -> Any:
            file = self.safetensor_files.get(WEIGHTS_FILE) or self.enter_context(open_safetensors(directory / WEIGHTS_FILE))
            self.safetensor_files[WEIGHTS_FILE] = file
            return file.get_tensor(_resolve(hf_weight_key, set(file.keys())) or hf_weight_key)

        def port_weight(self, keras_variable: Any, hf_weight_key: str, hook_fn: Any = None) -> None:
            if hf_weight_key.startswith("pooler."):
                return  # none in an ELECTRA checkpoint: the initialiser's values stay
            super().port_weight(keras_variable, hf_weight_key, hook_fn)

    with Loader(str(directory), fname=WEIGHTS_FILE) as loader:
        convert_weights(backbone, loader, hf)
        if backbone.embedding_dim != backbone.hidden_dim:
            backbone.embeddings_projection.kernel.assign(np.transpose(loader.get_tensor("embeddings_project.weight")))
            backbone.embeddings_projection.bias.assign(loader.get_tensor("embeddings_project.bias"))


def import_hf(directory: str | os.PathLike[str], out: str | os.PathLike[str], console: Any = None) -> dict[str, Any]:
    """Import the Hugging Face ELECTRA discriminator in ``directory`` as an ``electra`` run in ``out``.

    Every check runs before anything is written; the run is assembled beside ``out`` and moved
    into place at the end, so a failure leaves nothing behind.

    Returns:
        the run's manifest.

    Raises:
        CheckpointError: see :func:`read_electra_config`, :func:`check_weights` and
            :func:`ptmkit.api.load_checkpoint_wordpiece`.
        RunDirError: ``out`` exists and is not an empty directory.
    """
    from ptmkit.api import TOKENIZER, assemble_import, check_import_paths, load_checkpoint_wordpiece, read_json
    from ptmkit_electra.backbone import build_backbone

    source, target = check_import_paths(directory, out)
    config, hf = read_electra_config(source)
    weights = check_weights(source, config)
    tokenizer, tokenizer_source, unchanged = load_checkpoint_wordpiece(source, config.vocabulary_size)
    options = source / "tokenizer_config.json"
    config.lowercase = bool((read_json(options, CheckpointError) if options.is_file() else {}).get("do_lower_case", config.lowercase))
    description = (
        f"importing {source}: ELECTRA {config.num_layers} layers, hidden {config.hidden_dim}, embedding {config.embedding_dim}, "
        f"{config.num_heads} heads, vocabulary {config.vocabulary_size:,}; no pooler in the checkpoint (initialised randomly)"
    )
    return assemble_import(
        target, source, "electra", config, weights, tokenizer, source / TOKENIZER if unchanged else None, tokenizer_source,
        build_backbone=build_backbone, port_weights=lambda backbone: port_weights(backbone, source, hf),
        description=description, inputs=["token_ids", "segment_ids", "padding_mask"], console=console,
    )
