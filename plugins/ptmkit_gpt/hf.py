"""``ptmkit import-hf DIR`` for Hugging Face GPT-2 checkpoints (``config.json`` ``model_type: gpt2``).

The weights (``model.safetensors``, as ``GPT2LMHeadModel.save_pretrained`` writes them, with or
without the ``transformer.`` prefix) are ported into :class:`ptmkit_gpt.backbone.GPTBackbone`
by keras-hub's own converter (``keras_hub.src.utils.transformers.convert_gpt2.convert_weights``),
which the backbone's layer layout was made for, after every tensor's shape has been checked
against ``config.json`` so that a mismatch is one line naming the tensor. The tokenizer is the
checkpoint's ``tokenizer.json`` as it is, else the byte-level BPE that ``vocab.json`` and
``merges.txt`` define (GPT-2's, as ``GPT2TokenizerFast`` builds it).

GPT-2's output layer is its token embedding (``tie_word_embeddings``, the default); a checkpoint
with untied output weights is imported only when ``lm_head.weight`` equals the embedding.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.api import CheckpointError, open_safetensors, read_hf_config, read_weight_shapes
from ptmkit_gpt.config import GPTConfig
from ptmkit_gpt.tokenizer import END_OF_TEXT

_REQUIRED = ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head")
#: transformers' ``activation_function`` values the backbone computes: GPT-2's tanh GELU.
ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")


def read_gpt2_config(directory: Path) -> tuple[GPTConfig, dict[str, Any]]:
    """Map ``DIR/config.json`` onto a :class:`GPTConfig` (``variant = "gpt2"``, ``prepend_bos =
    false``: GPT-2's prompts start with their own tokens).

    Raises:
        CheckpointError: no config.json, another model type, a missing or non-positive key, an
            activation or attention option the backbone does not compute.
    """
    path, hf = read_hf_config(directory, "gpt2", "GPT-2", _REQUIRED)
    if hf["n_embd"] % hf["n_head"]:
        raise CheckpointError(f"{path}: key 'n_head' = {hf['n_head']} does not divide 'n_embd' = {hf['n_embd']}")
    activation = hf.get("activation_function", "gelu_new")
    if activation not in ACTIVATIONS:
        raise CheckpointError(f"{path}: key 'activation_function' = {activation!r} is not supported (supported: {', '.join(ACTIVATIONS)})")
    for key, default in (("scale_attn_by_inverse_layer_idx", False), ("add_cross_attention", False)):
        if hf.get(key, default):
            raise CheckpointError(f"{path}: key {key!r} is true, which the GPT-2 importer does not support")
    config = GPTConfig(
        variant="gpt2",
        vocabulary_size=hf["vocab_size"],
        num_layers=hf["n_layer"],
        num_heads=hf["n_head"],
        hidden_dim=hf["n_embd"],
        intermediate_dim=hf.get("n_inner") or 4 * hf["n_embd"],
        dropout=float(hf.get("resid_pdrop", 0.1)),
        max_sequence_length=hf["n_positions"],
        layer_norm_epsilon=float(hf.get("layer_norm_epsilon", 1e-5)),
        prepend_bos=False,
    )
    return config, hf


def expected_shapes(config: GPTConfig) -> dict[str, tuple[int, ...]]:
    """The tensors of a ``GPT2Model`` checkpoint and their shapes (GPT-2's ``Conv1D`` layout:
    weights are ``(in, out)``)."""
    h, i = config.hidden_dim, config.intermediate_dim
    shapes: dict[str, tuple[int, ...]] = {"wte.weight": (config.vocabulary_size, h), "wpe.weight": (config.max_sequence_length, h)}
    for n in range(config.num_layers):
        p = f"h.{n}."
        shapes.update({f"{p}ln_1.weight": (h,), f"{p}ln_1.bias": (h,), f"{p}ln_2.weight": (h,), f"{p}ln_2.bias": (h,)})
        shapes.update({f"{p}attn.c_attn.weight": (h, 3 * h), f"{p}attn.c_attn.bias": (3 * h,)})
        shapes.update({f"{p}attn.c_proj.weight": (h, h), f"{p}attn.c_proj.bias": (h,)})
        shapes.update({f"{p}mlp.c_fc.weight": (h, i), f"{p}mlp.c_fc.bias": (i,), f"{p}mlp.c_proj.weight": (i, h), f"{p}mlp.c_proj.bias": (h,)})
    shapes.update({"ln_f.weight": (h,), "ln_f.bias": (h,)})
    return shapes


def check_weights(directory: Path, config: GPTConfig, hf: dict[str, Any]) -> dict[str, Any]:
    """Check that ``model.safetensors`` holds every tensor of ``config`` in its shape, and that
    the output layer is the token embedding.

    Returns:
        ``{"file", "bytes", "tensors"}``.

    Raises:
        CheckpointError: no (or a pickled-only, or an unreadable) weights file, a missing tensor, a
            tensor of another shape, untied output weights missing or different from ``wte``.
    """
    from ptmkit.api import check_tensor_shapes

    path, names = read_weight_shapes(directory)

    def resolve(key: str) -> str | None:
        return next((n for n in (key, f"transformer.{key}") if n in names), None)

    check_tensor_shapes(path, names, expected_shapes(config), resolve, f"{config.num_layers} layers, n_embd {config.hidden_dim}")
    if not hf.get("tie_word_embeddings", True):
        head = resolve("lm_head.weight")
        if head is None:
            raise CheckpointError(f"{path}: tie_word_embeddings is false but there is no 'lm_head.weight' tensor")
        with open_safetensors(path) as weights:
            if not np.array_equal(weights.get_tensor(head), weights.get_tensor(resolve("wte.weight") or "")):
                raise CheckpointError(f"{path}: 'lm_head.weight' differs from the token embedding; untied output weights are not supported")
    return {"file": str(path), "bytes": path.stat().st_size, "tensors": len(names)}


def load_tokenizer(directory: Path, config: GPTConfig) -> tuple[Any, Path | None]:
    """The checkpoint's tokenizer: ``tokenizer.json`` (returned with its path, to copy as it is),
    else GPT-2's byte-level BPE from ``vocab.json`` + ``merges.txt`` (path None).

    Raises:
        CheckpointError: no tokenizer files, an unreadable one, no ``<|endoftext|>`` token, or
            more tokens than embedding rows.
    """
    from tokenizers import Tokenizer, models

    from ptmkit_gpt.tokenizer import byte_level_tokenizer

    json_path, vocab, merges = directory / "tokenizer.json", directory / "vocab.json", directory / "merges.txt"
    try:
        if json_path.is_file():
            tokenizer, source = Tokenizer.from_file(str(json_path)), json_path
        elif vocab.is_file() and merges.is_file():
            tokenizer, source = byte_level_tokenizer(models.BPE.from_file(str(vocab), str(merges))), None
            tokenizer.add_special_tokens([END_OF_TEXT])
        else:
            raise CheckpointError(f"{directory}: no tokenizer.json, nor vocab.json and merges.txt; the checkpoint's tokenizer is needed")
    except CheckpointError:
        raise
    except Exception as exc:  # tokenizers raises bare Exceptions
        raise CheckpointError(f"{json_path if json_path.is_file() else vocab}: cannot be read as a tokenizer ({str(exc).splitlines()[0]})") from None
    where = json_path if json_path.is_file() else vocab
    if tokenizer.token_to_id(END_OF_TEXT) is None:
        raise CheckpointError(f"{where}: no {END_OF_TEXT} token, which GPT-2 starts and ends texts with")
    if tokenizer.get_vocab_size() > config.vocabulary_size:
        raise CheckpointError(f"{where}: the vocabulary has {tokenizer.get_vocab_size()} tokens, the embedding matrix {config.vocabulary_size} rows")
    return tokenizer, source


def port_weights(backbone: Any, directory: Path, hf: dict[str, Any]) -> None:
    """Fill ``backbone`` from ``DIR/model.safetensors`` with keras-hub's GPT-2 converter."""
    from keras_hub.src.utils.transformers.convert_gpt2 import convert_weights
    from keras_hub.src.utils.transformers.safetensor_utils import SafetensorLoader

    with SafetensorLoader(str(directory)) as loader:
        convert_weights(backbone, loader, hf)


def import_hf(directory: str | os.PathLike[str], out: str | os.PathLike[str], console: Any = None) -> dict[str, Any]:
    """Import the Hugging Face GPT-2 checkpoint in ``directory`` as a ``gpt`` run in ``out``.

    Every check runs before anything is written; the run is assembled beside ``out`` and moved
    into place at the end, so a failure leaves nothing behind.

    Returns:
        the run's manifest.

    Raises:
        CheckpointError: see :func:`read_gpt2_config`, :func:`check_weights`, :func:`load_tokenizer`.
        RunDirError: ``out`` exists and is not an empty directory.
    """
    from ptmkit.api import assemble_import, check_import_paths
    from ptmkit_gpt.backbone import build_backbone

    source, target = check_import_paths(directory, out)
    config, hf = read_gpt2_config(source)
    weights = check_weights(source, config, hf)
    tokenizer, tokenizer_file = load_tokenizer(source, config)
    description = (
        f"importing {source}: GPT-2 {config.num_layers} layers, n_embd {config.hidden_dim}, {config.num_heads} heads, "
        f"vocabulary {config.vocabulary_size:,}, {config.max_sequence_length} positions"
    )
    return assemble_import(
        target, source, "gpt", config, weights, tokenizer, tokenizer_file, str(tokenizer_file or "vocab.json + merges.txt"),
        build_backbone=build_backbone, port_weights=lambda backbone: port_weights(backbone, source, hf),
        description=description, inputs=["token_ids", "padding_mask"], console=console,
    )
