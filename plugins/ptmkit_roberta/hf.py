"""``ptmkit import-hf DIR`` for Hugging Face RoBERTa checkpoints (``config.json`` ``model_type: roberta``).

The weights (``model.safetensors`` as ``RobertaModel`` or ``RobertaForMaskedLM.save_pretrained``
writes them, with or without the ``roberta.`` prefix) are read with ``safetensors``' NumPy API
(no torch, no pickle), every tensor's shape checked against ``config.json`` first so that a
mismatch is one line naming the tensor, and ported into
:class:`ptmkit_roberta.backbone.RobertaBackbone` by keras-hub's own converter
(``keras_hub.src.utils.transformers.convert_roberta.convert_weights``). Two things that converter
leaves out are added here, exactly:

* Hugging Face numbers positions from ``padding_idx + 1`` (``create_position_ids_from_input_ids``)
  and adds ``token_type_embeddings[0]`` to every token (RoBERTa has one token type); the backbone's
  position ``i`` holds ``position_embeddings[padding_idx + 1 + i] + token_type_embeddings[0]``
  (both are summed before the embedding layer norm, so the sum is the same computation);
* the pooler (``pooler.dense``), when the checkpoint has one (``RobertaForMaskedLM`` has none: it
  is then initialised randomly and reported, as transformers does).

The tokenizer is the checkpoint's ``tokenizer.json`` as it is, else the byte-level BPE that
``vocab.json`` and ``merges.txt`` define with RoBERTa's post-processor (as ``RobertaTokenizerFast``
builds it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.api import CheckpointError, check_positive_key, check_tensor_shapes, read_hf_config, read_weight_shapes
from ptmkit_roberta.config import RobertaConfig
from ptmkit_roberta.tokenizer import SPECIAL_TOKEN_NAMES

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
_REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "max_position_embeddings")
#: Hugging Face ``hidden_act`` -> :attr:`RobertaConfig.hidden_activation`.
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_approximate", "gelu_pytorch_tanh": "gelu_approximate", "relu": "relu"}


def read_roberta_config(directory: Path) -> tuple[RobertaConfig, dict[str, Any]]:
    """Map ``DIR/config.json`` onto a :class:`RobertaConfig` (``max_sequence_length`` =
    ``max_position_embeddings - pad_token_id - 1``).

    Raises:
        CheckpointError: no config.json, another model type, a missing or non-positive key, or an
            activation, position-embedding type or decoder option the backbone does not compute.
    """
    path, hf = read_hf_config(directory, "roberta", "RoBERTa", _REQUIRED)
    check_positive_key(path, hf, "type_vocab_size", default=1)
    pad = hf.get("pad_token_id", 1)
    if not isinstance(pad, int) or isinstance(pad, bool) or not 0 <= pad < hf["max_position_embeddings"] - 1:
        raise CheckpointError(f"{path}: key 'pad_token_id' = {pad!r} leaves no position embedding (max_position_embeddings {hf['max_position_embeddings']})")
    if hf["hidden_size"] % hf["num_attention_heads"]:
        raise CheckpointError(f"{path}: key 'num_attention_heads' = {hf['num_attention_heads']} does not divide 'hidden_size' = {hf['hidden_size']}")
    activation = hf.get("hidden_act", "gelu")
    if activation not in HF_ACTIVATIONS:
        raise CheckpointError(f"{path}: key 'hidden_act' = {activation!r} is not supported (supported: {', '.join(HF_ACTIVATIONS)})")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"{path}: key 'position_embedding_type' = {hf['position_embedding_type']!r} is not supported (only 'absolute')")
    for key in ("is_decoder", "add_cross_attention"):
        if hf.get(key):
            raise CheckpointError(f"{path}: key {key!r} is true; the RoBERTa importer reads encoders only")
    config = RobertaConfig(
        vocabulary_size=hf["vocab_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=hf["num_attention_heads"],
        hidden_dim=hf["hidden_size"],
        intermediate_dim=hf["intermediate_size"],
        dropout=float(hf.get("hidden_dropout_prob", 0.1)),
        max_sequence_length=hf["max_position_embeddings"] - pad - 1,
        hidden_activation=HF_ACTIVATIONS[activation],
        layer_norm_epsilon=float(hf.get("layer_norm_eps", 1e-5)),
    )
    return config, hf


def expected_shapes(config: RobertaConfig, hf: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """The tensors of a ``RobertaModel`` checkpoint and their shapes (torch layout: Linear weights
    are ``(out, in)``), without the ``roberta.`` prefix."""
    h, i = config.hidden_dim, config.intermediate_dim
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (config.vocabulary_size, h),
        "embeddings.position_embeddings.weight": (hf["max_position_embeddings"], h),
        "embeddings.token_type_embeddings.weight": (hf.get("type_vocab_size", 1), h),
        "embeddings.LayerNorm.weight": (h,),
        "embeddings.LayerNorm.bias": (h,),
    }
    for n in range(config.num_layers):
        p = f"encoder.layer.{n}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            shapes[f"{p}{name}.weight"], shapes[f"{p}{name}.bias"] = (h, h), (h,)
        shapes[f"{p}intermediate.dense.weight"], shapes[f"{p}intermediate.dense.bias"] = (i, h), (i,)
        shapes[f"{p}output.dense.weight"], shapes[f"{p}output.dense.bias"] = (h, i), (h,)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[f"{p}{name}.weight"], shapes[f"{p}{name}.bias"] = (h,), (h,)
    shapes["pooler.dense.weight"], shapes["pooler.dense.bias"] = (h, h), (h,)
    return shapes


def _resolve(key: str, names: Any) -> str | None:
    """The checkpoint's name for ``key`` (``RobertaModel``'s name): as is or under ``roberta.``."""
    key = key.removeprefix("roberta.")
    return next((name for name in (key, f"roberta.{key}") if name in names), None)


def check_weights(directory: Path, config: RobertaConfig, hf: dict[str, Any]) -> dict[str, Any]:
    """Check that ``model.safetensors`` holds every tensor of ``config`` in its shape.

    Returns:
        ``{"file", "bytes", "tensors", "pooler"}``; ``pooler`` False when the checkpoint has none.

    Raises:
        CheckpointError: no (or a pickled-only, or an unreadable) weights file, a missing tensor or
            a tensor of another shape than ``config.json`` implies.
    """
    path, shapes = read_weight_shapes(directory)
    absent = check_tensor_shapes(
        path, shapes, expected_shapes(config, hf), lambda key: _resolve(key, shapes),
        f"{config.num_layers} layers, hidden {config.hidden_dim}", optional=("pooler.",),
    )
    return {"file": str(path), "bytes": path.stat().st_size, "tensors": len(shapes), "pooler": "pooler." not in absent}


def load_tokenizer(directory: Path, config: RobertaConfig) -> tuple[Any, Path | None]:
    """The checkpoint's tokenizer: ``tokenizer.json`` (returned with its path, to copy as it is),
    else RoBERTa's byte-level BPE from ``vocab.json`` + ``merges.txt`` (path None).

    Raises:
        CheckpointError: no tokenizer files, an unreadable one, a missing special token, or a
            token id without an embedding row.
    """
    from tokenizers import Tokenizer, models, processors

    from ptmkit.api import byte_level_tokenizer

    json_path, vocab, merges = directory / "tokenizer.json", directory / "vocab.json", directory / "merges.txt"
    where = json_path if json_path.is_file() else vocab
    try:
        if json_path.is_file():
            tokenizer, source = Tokenizer.from_file(str(json_path)), json_path
        elif vocab.is_file() and merges.is_file():
            tokenizer, source = byte_level_tokenizer(models.BPE.from_file(str(vocab), str(merges))), None
            tokenizer.add_special_tokens(list(SPECIAL_TOKEN_NAMES.values()))
            cls, sep = SPECIAL_TOKEN_NAMES["cls"], SPECIAL_TOKEN_NAMES["sep"]
            tokenizer.post_processor = processors.RobertaProcessing((sep, tokenizer.token_to_id(sep)), (cls, tokenizer.token_to_id(cls)))
        else:
            raise CheckpointError(f"{directory}: no tokenizer.json, nor vocab.json and merges.txt; the checkpoint's tokenizer is needed")
    except CheckpointError:
        raise
    except Exception as exc:  # tokenizers raises bare Exceptions
        raise CheckpointError(f"{where}: cannot be read as a tokenizer ({str(exc).splitlines()[0]})") from None
    missing = [token for token in SPECIAL_TOKEN_NAMES.values() if tokenizer.token_to_id(token) is None]
    if missing:
        raise CheckpointError(f"{where}: no {', '.join(missing)} token; a RoBERTa vocabulary needs {', '.join(SPECIAL_TOKEN_NAMES.values())}")
    vocabulary = tokenizer.get_vocab(with_added_tokens=True)
    rows = max(vocabulary.values()) + 1
    if rows > config.vocabulary_size:
        raise CheckpointError(f"{where}: the vocabulary has ids up to {rows - 1}, the embedding matrix {config.vocabulary_size} rows ({CONFIG_FILE} vocab_size)")
    return tokenizer, source


def port_weights(backbone: Any, directory: Path, hf: dict[str, Any], pooler: bool) -> None:
    """Fill ``backbone`` from ``DIR/model.safetensors``: keras-hub's RoBERTa converter, then the
    positions (offset ``pad_token_id + 1``, token type 0 folded in) and the pooler."""
    from keras_hub.src.utils.transformers.convert_roberta import convert_weights
    from keras_hub.src.utils.transformers.safetensor_utils import SafetensorLoader

    from ptmkit.api import open_safetensors

    class Loader(SafetensorLoader):  # type: ignore[misc]
        def get_tensor(self, hf_weight_key: str) -> Any:
            file = self.safetensor_files.get(WEIGHTS_FILE) or self.enter_context(open_safetensors(directory / WEIGHTS_FILE))
            self.safetensor_files[WEIGHTS_FILE] = file
            return file.get_tensor(_resolve(hf_weight_key, set(file.keys())) or hf_weight_key)

        def port_weight(self, keras_variable: Any, hf_weight_key: str, hook_fn: Any = None) -> None:
            if hf_weight_key.endswith("position_embeddings.weight"):
                return  # below, with the checkpoint's own offset
            super().port_weight(keras_variable, hf_weight_key, hook_fn)

    with Loader(str(directory), fname=WEIGHTS_FILE) as loader:
        convert_weights(backbone, loader, hf)
        offset = hf.get("pad_token_id", 1) + 1
        positions = loader.get_tensor("embeddings.position_embeddings.weight")[offset : offset + backbone.max_sequence_length]
        token_type = loader.get_tensor("embeddings.token_type_embeddings.weight")[0]
        backbone.embeddings.position_embedding.position_embeddings.assign(positions + token_type[np.newaxis, :])
        if pooler:
            backbone.pooled_dense.kernel.assign(np.transpose(loader.get_tensor("pooler.dense.weight")))
            backbone.pooled_dense.bias.assign(loader.get_tensor("pooler.dense.bias"))


def import_hf(directory: str | os.PathLike[str], out: str | os.PathLike[str], console: Any = None) -> dict[str, Any]:
    """Import the Hugging Face RoBERTa checkpoint in ``directory`` as a ``roberta`` run in ``out``.

    Every check runs before anything is written; the run is assembled beside ``out`` and moved
    into place at the end, so a failure leaves nothing behind.

    Returns:
        the run's manifest.

    Raises:
        CheckpointError: see :func:`read_roberta_config`, :func:`check_weights`, :func:`load_tokenizer`.
        RunDirError: ``out`` exists and is not an empty directory.
    """
    from ptmkit.api import assemble_import, check_import_paths
    from ptmkit_roberta.backbone import build_backbone

    source, target = check_import_paths(directory, out)
    config, hf = read_roberta_config(source)
    weights = check_weights(source, config, hf)
    tokenizer, tokenizer_file = load_tokenizer(source, config)
    description = (
        f"importing {source}: RoBERTa {config.num_layers} layers, hidden {config.hidden_dim}, {config.num_heads} heads, "
        f"vocabulary {config.vocabulary_size:,}, {config.max_sequence_length} positions"
        + ("" if weights["pooler"] else "; no pooler in the checkpoint (initialised randomly)")
    )
    return assemble_import(
        target, source, "roberta", config, weights, tokenizer, tokenizer_file, str(tokenizer_file or "vocab.json + merges.txt"),
        build_backbone=build_backbone, port_weights=lambda backbone: port_weights(backbone, source, hf, weights["pooler"]),
        description=description, inputs=["token_ids", "padding_mask"], console=console,
    )
