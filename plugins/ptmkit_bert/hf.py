"""Import a Hugging Face-format BERT checkpoint (``config.json`` + ``model.safetensors``).

``ptmkit import-hf DIR --out RUN_DIR`` (and :func:`import_hf`) turns a local checkpoint directory,
as written by ``transformers``' ``save_pretrained`` or shipped by sentence-transformers, into a
ptmkit run directory of stage ``pretrain`` that ``ptmkit finetune``, ``ptmkit embed`` and
``ptmkit export`` read like one that ptmkit pre-trained:

* the config is mapped onto :class:`~ptmkit_bert.config.BertConfig`, the activation
  (``hidden_act``) and layer-norm epsilon (``layer_norm_eps``) included; anything the backbone
  cannot compute exactly (another ``model_type``, relative position embeddings, an unknown
  activation) is refused, naming the key;
* the weights are read with ``safetensors``' NumPy API (no torch, no pickle: ``pytorch_model.bin``
  is refused) and ported by keras-hub's own BERT converter
  (``keras_hub.src.utils.transformers.convert_bert.convert_weights``), after every tensor's
  presence and shape were checked against the config so that a mismatch names the tensor;
* the tokenizer is the one transformers' ``AutoTokenizer`` loads: ``tokenizer.json`` copied as
  it is (or built from ``vocab.txt`` and ``tokenizer_config.json`` as ``BertTokenizer`` builds
  it), with the special tokens of ``tokenizer_config.json`` / ``special_tokens_map.json``
  (BERT's ``[PAD]``... or SentencePiece's ``<pad>``...); every id it gives needs an embedding
  row, and the matrix may have more rows than the vocabulary has tokens, as in transformers;
* the sentence-transformers pooling (``modules.json``, ``1_Pooling/config.json``,
  ``sentence_bert_config.json``) is kept in ``pooling.json``: mean / CLS / max pooling, L2
  normalisation, maximum sequence length.

Parity: on sentence-transformers' all-MiniLM-L6-v2 the imported backbone's hidden states match
``transformers.BertModel`` on torch to within 1e-4 (``plugins/ptmkit_bert/tests/test_hf_import.py``, reference
numbers from ``benchmarks/hf_reference.py``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ptmkit.api import (
    CheckpointError,
    check_positive_key,
    check_tensor_shapes,
    load_checkpoint_wordpiece,
    read_hf_config,
    read_json,
    read_weight_shapes,
)
from ptmkit_bert.config import BertConfig

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"

#: Hugging Face ``hidden_act`` -> :attr:`BertConfig.hidden_activation`.
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_approximate", "gelu_pytorch_tanh": "gelu_approximate", "relu": "relu"}
_REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "max_position_embeddings")


def _read_json(path: Path) -> Any:
    return read_json(path, CheckpointError)


def read_bert_config(directory: Path) -> tuple[BertConfig, dict[str, Any]]:
    """Map ``DIR/config.json`` onto a :class:`BertConfig`.

    Returns:
        ``(config, hf_config)``: the ptmkit config and the raw Hugging Face dict.

    Raises:
        CheckpointError: no config.json, another architecture, a missing key, an activation or
            position-embedding type the backbone cannot compute, or a value out of range.
    """
    path, hf = read_hf_config(directory, "bert", "BERT", _REQUIRED)
    activation = hf.get("hidden_act", "gelu")
    if activation not in HF_ACTIVATIONS:
        raise CheckpointError(f"{path}: key 'hidden_act' = {activation!r} is not supported (supported: {', '.join(HF_ACTIVATIONS)})")
    position_type = hf.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise CheckpointError(f"{path}: key 'position_embedding_type' = {position_type!r} is not supported (only 'absolute')")
    for key in ("is_decoder", "add_cross_attention"):
        if hf.get(key):
            raise CheckpointError(f"{path}: key {key!r} is true; the BERT importer reads encoders only")
    check_positive_key(path, hf, "type_vocab_size", default=2)
    if hf["hidden_size"] % hf["num_attention_heads"]:
        raise CheckpointError(f"{path}: key 'num_attention_heads' = {hf['num_attention_heads']} does not divide 'hidden_size' = {hf['hidden_size']}")
    config = BertConfig(
        vocabulary_size=hf["vocab_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=hf["num_attention_heads"],
        hidden_dim=hf["hidden_size"],
        intermediate_dim=hf["intermediate_size"],
        dropout=float(hf.get("hidden_dropout_prob", 0.1)),
        max_sequence_length=hf["max_position_embeddings"],
        num_segments=hf.get("type_vocab_size", 2),
        hidden_activation=HF_ACTIVATIONS[activation],
        layer_norm_epsilon=float(hf.get("layer_norm_eps", 1e-12)),
    )
    return config, hf


def expected_shapes(config: BertConfig) -> dict[str, tuple[int, ...]]:
    """The tensors a Hugging Face ``BertModel`` checkpoint holds and their shapes (torch layout:
    Linear weights are ``(out, in)``), LayerNorm parameters under ``weight``/``bias``."""
    h, i = config.hidden_dim, config.intermediate_dim
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (config.vocabulary_size, h),
        "embeddings.position_embeddings.weight": (config.max_sequence_length, h),
        "embeddings.token_type_embeddings.weight": (config.num_segments, h),
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


def _resolve(key: str, names: dict[str, tuple[int, ...]]) -> str | None:
    """The checkpoint's name for ``key``: as is, with a ``bert.`` prefix, or LayerNorm as gamma/beta."""
    candidates = [key]
    if key.endswith("LayerNorm.weight"):
        candidates.append(key[: -len("weight")] + "gamma")
    if key.endswith("LayerNorm.bias"):
        candidates.append(key[: -len("bias")] + "beta")
    for candidate in candidates:
        for name in (candidate, f"bert.{candidate}"):
            if name in names:
                return name
    return None


def check_weights(directory: Path, config: BertConfig) -> dict[str, Any]:
    """Check that the checkpoint's weights file holds every tensor of ``config`` in its shape.

    Returns:
        ``{"file": str, "tensors": int, "pooler": bool}``; a missing pooler is allowed (it is
        initialised randomly, as ``transformers`` does, and reported).

    Raises:
        CheckpointError: no weights (or only a pickled ``pytorch_model.bin``), an unreadable or
            truncated file, a missing tensor or a tensor of another shape.
    """
    path, names = read_weight_shapes(directory)
    absent = check_tensor_shapes(
        path, names, expected_shapes(config), lambda key: _resolve(key, names),
        f"{config.num_layers} layers, hidden {config.hidden_dim}", optional=("pooler.",),
    )
    return {"file": str(path), "bytes": path.stat().st_size, "tensors": len(names), "pooler": "pooler." not in absent}


def load_tokenizer(directory: Path, config: BertConfig, hf: dict[str, Any]) -> tuple[Any, str, bool]:
    """The checkpoint's tokenizer, as transformers' ``AutoTokenizer`` loads it: the core's
    :func:`ptmkit.api.load_checkpoint_wordpiece` (``tokenizer.json`` as it is, else one built from
    ``vocab.txt`` and ``tokenizer_config.json``; every id needs an embedding row of ``config``).

    Returns:
        ``(tokenizers.Tokenizer, source file name, unchanged)``; ``unchanged`` when the run may
        copy ``tokenizer.json`` byte for byte.

    Raises:
        CheckpointError: neither file, an unreadable file, a token id without an embedding row,
            or a special token missing from the vocabulary.
    """
    return load_checkpoint_wordpiece(directory, config.vocabulary_size)


def read_pooling(directory: Path) -> dict[str, Any]:
    """The sentence-transformers pooling of the checkpoint (mean, no normalisation when absent).

    Returns:
        ``{"mode": "mean"|"cls"|"max", "normalize": bool, "max_sequence_length": int|None,
        "source": str}``.

    Raises:
        CheckpointError: a pooling config that is invalid JSON or asks for an unsupported mode.
    """
    pooling: dict[str, Any] = {"mode": "mean", "normalize": False, "max_sequence_length": None, "source": "default (mean)"}
    modules_path = directory / "modules.json"
    pooling_dir = "1_Pooling"
    if modules_path.is_file():
        modules = _read_json(modules_path)
        if isinstance(modules, list):
            pooling["normalize"] = any("Normalize" in str(m.get("type", "")) for m in modules if isinstance(m, dict))
            for m in modules:
                if isinstance(m, dict) and str(m.get("type", "")).endswith("Pooling") and m.get("path"):
                    pooling_dir = str(m["path"])
    pooling_path = directory / pooling_dir / "config.json"
    if pooling_path.is_file():
        options = _read_json(pooling_path)
        modes = [mode for mode, key in (("mean", "pooling_mode_mean_tokens"), ("cls", "pooling_mode_cls_token"), ("max", "pooling_mode_max_tokens")) if options.get(key)]
        unsupported = [key for key in ("pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken") if options.get(key)]
        if unsupported or len(modes) != 1:
            raise CheckpointError(f"{pooling_path}: pooling {unsupported or modes} is not supported (exactly one of mean, cls, max)")
        pooling.update(mode=modes[0], source=str(pooling_path.relative_to(directory)))
    st_config = directory / "sentence_bert_config.json"
    if st_config.is_file():
        length = _read_json(st_config).get("max_seq_length")
        if isinstance(length, int) and length > 0:
            pooling["max_sequence_length"] = length
    return pooling


def port_weights(backbone: Any, directory: Path, hf: dict[str, Any], pooler: bool) -> None:
    """Fill ``backbone`` from ``DIR/model.safetensors`` with keras-hub's BERT converter."""
    from keras_hub.src.utils.transformers.convert_bert import convert_weights
    from keras_hub.src.utils.transformers.safetensor_utils import SafetensorLoader

    class Loader(SafetensorLoader):  # type: ignore[misc]
        def port_weight(self, keras_variable: Any, hf_weight_key: str, hook_fn: Any = None) -> None:
            if not pooler and hf_weight_key.startswith("pooler."):
                return  # absent: keep the initialiser's values, as transformers does
            super().port_weight(keras_variable, hf_weight_key, hook_fn)

    with Loader(str(directory)) as loader:
        convert_weights(backbone, loader, hf)


def import_hf(directory: str | os.PathLike[str], out: str | os.PathLike[str], console: Any = None) -> dict[str, Any]:
    """Import the Hugging Face BERT checkpoint in ``directory`` as a ptmkit run in ``out``.

    Every check runs before anything is written; the run is assembled in a temporary directory
    beside ``out`` and moved into place at the end, so a failure leaves nothing behind.

    Returns:
        the run's manifest.

    Raises:
        CheckpointError: see :func:`read_bert_config`, :func:`check_weights`,
            :func:`load_tokenizer`, :func:`read_pooling`.
        RunDirError: ``out`` exists and is not an empty directory.
    """
    from ptmkit.api import POOLING, TOKENIZER, assemble_import, check_import_paths
    from ptmkit.api import wordpiece_special_tokens as special_tokens

    source, target = check_import_paths(directory, out)
    config, hf = read_bert_config(source)
    weights = check_weights(source, config)
    tokenizer, tokenizer_source, unchanged = load_tokenizer(source, config, hf)
    pooling = read_pooling(source)
    options = _read_json(source / "tokenizer_config.json") if (source / "tokenizer_config.json").is_file() else {}
    config.lowercase = bool(options.get("do_lower_case", config.lowercase))
    description = (
        f"importing {source}: BERT {config.num_layers} layers, hidden {config.hidden_dim}, {config.num_heads} heads, "
        f"vocabulary {config.vocabulary_size:,}, activation {config.hidden_activation}, layer-norm eps {config.layer_norm_epsilon:g}"
    )
    return assemble_import(
        target, source, "bert", config, weights, tokenizer, source / TOKENIZER if unchanged else None, tokenizer_source,
        build_backbone=_build_backbone, port_weights=lambda backbone: port_weights(backbone, source, hf, weights["pooler"]),
        description=description, inputs=["token_ids", "segment_ids", "padding_mask"], console=console,
        json_files={POOLING: pooling}, pooling=pooling, imported_from={"special_tokens": dict(special_tokens(tokenizer))},
    )


def _build_backbone(config: BertConfig) -> Any:
    """:func:`ptmkit_bert.backbone.build_backbone`, imported only once the checkpoint was checked
    (it imports Keras, and TensorFlow's start-up lines would follow a refusal's one line)."""
    from ptmkit_bert.backbone import build_backbone

    return build_backbone(config)
