"""``ptmkit import-hf DIR`` for Hugging Face Marian and BART checkpoints (``config.json``
``model_type`` ``marian`` or ``bart``, as ``MarianMTModel`` / ``BartForConditionalGeneration``
``.save_pretrained`` write them; transformers' ``modeling_marian.py`` and ``modeling_bart.py``).

Marian's encoder-decoder is the family's architecture with these settings, which the importer
writes into the run's config (each a family config key, ``ptmkit config transformer``):

* post-LN blocks (``normalization = "post"``), no layer norm on the embeddings nor after a stack;
* fixed sinusoids in the halves layout, all sines then all cosines (``sinusoid_layout =
  "halves"``), positions counted from 0 on both sides, ``max_position_embeddings`` of them;
* token embeddings times ``sqrt(d_model)`` only where ``scale_embedding`` is true
  (``scale_embeddings``; the OPUS-MT checkpoints set it, transformers' default does not);
* the feed-forward activation ``activation_function`` (``gelu``: exact erf GELU; ``swish`` /
  ``silu``; ``relu``) as ``activation``;
* one token embedding shared by encoder, decoder and output layer, plus ``final_logits_bias``
  (``final_logits_bias = true``);
* the decoder starts from ``decoder_start_token_id`` (``<pad>`` in every OPUS-MT checkpoint):
  ``decoder_start_token``; ``</s>`` ends a sentence and the encoder's input, ``<pad>`` pads.

Attention (``head_dim^-0.5`` scaling, key padding masks, the decoder's causal mask) and layer
norms (epsilon 1e-5) are keras-hub's, the same computation. Refused in one line naming the key:
another activation, untied or unshared embeddings (``share_encoder_decoder_embeddings``,
``tie_word_embeddings``, a ``decoder_vocab_size`` of its own), encoder and decoder of different
head counts or feed-forward sizes, an odd ``d_model``.

The tokenizer: the checkpoint's ``tokenizer.json`` as it is, else ``vocab.json`` (the ids) with
the pieces and scores of ``source.spm`` as a unigram ``tokenizers`` tokenizer (SentencePiece's
Viterbi segmentation; ids by ``vocab.json``, a piece missing there is ``<unk>``, as
``MarianTokenizer`` maps them); see :func:`load_tokenizer`.

BART (Lewis et al. 2020) is the same encoder-decoder with these differences, also written into the
run's config: learned positions (``positions = "learned"``; transformers stores two rows more, the
offset of ``BartLearnedPositionalEmbedding``, which the importer drops), a layer norm over the
embeddings plus positions in each stack (``embedding_layer_norm``), exact GELU by default, no
embedding scaling by default, sources read as ``<s> source </s>`` (``source_start_token``: the
token of ``bos_token_id``) and the decoder started from ``decoder_start_token_id`` (``</s>``).
BART's tokenizer is read from ``tokenizer.json`` (a fast tokenizer's ``save_pretrained`` writes it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.api import CheckpointError, check_positive_key, open_safetensors, read_hf_config, read_weight_shapes
from ptmkit_transformer.config import TransformerConfig

_REQUIRED = ("vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "encoder_ffn_dim", "max_position_embeddings")
#: transformers' ``activation_function`` values the backbone computes, and their Keras names.
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "silu", "silu": "silu"}
#: the specials the family reads by name: padding, unknown, end of sentence.
SPECIALS = ("<pad>", "<unk>", "</s>")


#: ``model_type`` -> the architecture's name in messages.
LAYOUTS = {"marian": "Marian", "bart": "BART"}


def model_type(directory: Path) -> str:
    """``config.json``'s ``model_type`` when it is one of :data:`LAYOUTS`, else ``"marian"``
    (whose reading then refuses it, naming the file)."""
    try:
        found = json.loads((directory / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return "marian"
    return found if found in LAYOUTS else "marian"


def read_seq2seq_config(directory: Path) -> tuple[TransformerConfig, dict[str, Any]]:
    """Map ``DIR/config.json`` (Marian or BART) onto a :class:`TransformerConfig` (module
    docstring); the ``decoder_start_token`` and ``source_start_token`` are set from the vocabulary
    later (:func:`import_hf`).

    Raises:
        CheckpointError: no config.json, another model type, a missing or non-positive key, a
            setting the family does not compute (naming the key).
    """
    layout = model_type(directory)
    path, hf = read_hf_config(directory, layout, LAYOUTS[layout], _REQUIRED)
    for key, twin in (("decoder_attention_heads", "encoder_attention_heads"), ("decoder_ffn_dim", "encoder_ffn_dim"), ("decoder_vocab_size", "vocab_size")):
        if hf.get(key) is not None and check_positive_key(path, hf, key) != hf[twin]:
            raise CheckpointError(f"{path}: key {key!r} = {hf[key]} differs from {twin!r} = {hf[twin]}, which the transformer family does not support")
    activation = hf.get("activation_function", "gelu")
    if activation not in ACTIVATIONS:
        raise CheckpointError(f"{path}: key 'activation_function' = {activation!r} is not supported (supported: {', '.join(ACTIVATIONS)})")
    for key in ("share_encoder_decoder_embeddings", "tie_word_embeddings"):
        if not hf.get(key, True):
            raise CheckpointError(f"{path}: key {key!r} is false; the transformer family shares one token embedding between encoder, decoder and output layer")
    if hf["d_model"] % hf["encoder_attention_heads"] or hf["d_model"] % 2:
        raise CheckpointError(f"{path}: key 'd_model' = {hf['d_model']} must be even and a multiple of 'encoder_attention_heads' = {hf['encoder_attention_heads']}")
    for key in ("decoder_start_token_id", "pad_token_id", "eos_token_id", *(("bos_token_id",) if layout == "bart" else ())):
        if not isinstance(hf.get(key), int) or isinstance(hf.get(key), bool) or not 0 <= hf[key] < hf["vocab_size"]:
            raise CheckpointError(f"{path}: key {key!r} must be a token id below vocab_size {hf['vocab_size']}, got {hf.get(key)!r}")
    config = TransformerConfig(
        vocabulary_size=hf["vocab_size"], encoder_layers=hf["encoder_layers"], decoder_layers=hf["decoder_layers"], hidden_dim=hf["d_model"],
        num_heads=hf["encoder_attention_heads"], intermediate_dim=hf["encoder_ffn_dim"], dropout=float(hf.get("dropout", 0.1)),
        positions="sinusoidal", normalization="post", max_sequence_length=hf["max_position_embeddings"], layer_norm_epsilon=1e-5,
        activation=ACTIVATIONS[activation], scale_embeddings=bool(hf.get("scale_embedding", False)), sinusoid_layout="halves",
        final_logits_bias=True,
    )
    if layout == "bart":
        config.positions, config.embedding_layer_norm = "learned", True
    return config, hf


#: BART's learned position tables hold this many rows before position 0 (``BartLearnedPositionalEmbedding.offset``).
BART_POSITION_OFFSET = 2


def expected_shapes(config: TransformerConfig) -> dict[str, tuple[int, ...]]:
    """The tensors of a ``MarianMTModel`` (or, with learned positions, a BART) checkpoint (without
    the ``model.`` prefix) and their shapes (torch ``Linear`` layout: weights are ``(out, in)``).
    BART's ``final_logits_bias`` is optional (transformers loads a checkpoint without it as zeros)."""
    h, f, v = config.hidden_dim, config.intermediate_dim, config.vocabulary_size
    shapes: dict[str, tuple[int, ...]] = {"shared.weight": (v, h)}
    if config.positions == "learned":
        for side in ("encoder", "decoder"):
            shapes[f"{side}.embed_positions.weight"] = (config.max_sequence_length + BART_POSITION_OFFSET, h)
            shapes.update({f"{side}.layernorm_embedding.weight": (h,), f"{side}.layernorm_embedding.bias": (h,)})
    else:
        shapes["final_logits_bias"] = (1, v)
    sublayers = {"encoder": ("self_attn",), "decoder": ("self_attn", "encoder_attn")}
    for side, count in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        for n in range(count):
            p = f"{side}.layers.{n}."
            for attention in sublayers[side]:
                for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    shapes.update({f"{p}{attention}.{proj}.weight": (h, h), f"{p}{attention}.{proj}.bias": (h,)})
                shapes.update({f"{p}{attention}_layer_norm.weight": (h,), f"{p}{attention}_layer_norm.bias": (h,)})
            shapes.update({f"{p}fc1.weight": (f, h), f"{p}fc1.bias": (f,), f"{p}fc2.weight": (h, f), f"{p}fc2.bias": (h,)})
            shapes.update({f"{p}final_layer_norm.weight": (h,), f"{p}final_layer_norm.bias": (h,)})
    return shapes


def _resolver(names: dict[str, Any]) -> Any:
    def resolve(key: str) -> str | None:
        return next((n for n in (key, f"model.{key}") if n in names), None)

    return resolve


def check_weights(directory: Path, config: TransformerConfig) -> dict[str, Any]:
    """Check that ``model.safetensors`` holds every tensor of ``config`` in its shape, and that
    any separate copies of the token embedding (``encoder.embed_tokens``, ``decoder.embed_tokens``,
    ``lm_head``, which older checkpoints save) equal ``shared``.

    Returns:
        ``{"file", "bytes", "tensors"}``.

    Raises:
        CheckpointError: no (or a pickled-only, or an unreadable) weights file, a missing tensor, a
            tensor of another shape, an embedding copy that differs from ``shared``.
    """
    from ptmkit.api import check_tensor_shapes

    path, names = read_weight_shapes(directory)
    resolve = _resolver(names)
    check_tensor_shapes(path, names, expected_shapes(config), resolve, f"{config.encoder_layers} + {config.decoder_layers} layers, d_model {config.hidden_dim}")
    bias = resolve("final_logits_bias")
    if bias and tuple(names[bias]) != (1, config.vocabulary_size):
        raise CheckpointError(f"{path}: {bias!r} has shape {list(names[bias])}, expected [1, {config.vocabulary_size}]")
    copies = [n for n in (resolve("encoder.embed_tokens.weight"), resolve("decoder.embed_tokens.weight"), resolve("lm_head.weight")) if n]
    if copies:
        with open_safetensors(path) as weights:
            shared = weights.get_tensor(resolve("shared.weight") or "")
            for name in copies:
                if not np.array_equal(weights.get_tensor(name), shared):
                    raise CheckpointError(f"{path}: {name!r} differs from 'model.shared.weight'; untied embeddings are not supported")
    return {"file": str(path), "bytes": path.stat().st_size, "tensors": len(names)}


def _attention(layer: Any, weights: Any, prefix: str, heads: int) -> None:
    """Fill a Keras ``MultiHeadAttention`` from torch's ``q_proj``/``k_proj``/``v_proj``/``out_proj``."""
    for dense, proj in ((layer._query_dense, "q_proj"), (layer._key_dense, "k_proj"), (layer._value_dense, "v_proj")):
        kernel = weights(f"{prefix}.{proj}.weight").T  # (in, out) = (hidden, heads * head_dim)
        dense.kernel.assign(kernel.reshape(kernel.shape[0], heads, -1))
        dense.bias.assign(weights(f"{prefix}.{proj}.bias").reshape(heads, -1))
    out = weights(f"{prefix}.out_proj.weight").T  # (heads * head_dim, hidden)
    layer._output_dense.kernel.assign(out.reshape(heads, -1, out.shape[1]))
    layer._output_dense.bias.assign(weights(f"{prefix}.out_proj.bias"))


def _norm(layer: Any, weights: Any, prefix: str) -> None:
    layer.gamma.assign(weights(f"{prefix}.weight"))
    layer.beta.assign(weights(f"{prefix}.bias"))


def port_weights(backbone: Any, path: Path, config: TransformerConfig) -> None:
    """Fill ``backbone`` (:func:`ptmkit_transformer.backbone.build_backbone` of ``config``) from
    the Marian or BART checkpoint's ``model.safetensors`` at ``path`` (already checked: :func:`check_weights`)."""
    with open_safetensors(path) as file:
        resolve = _resolver(set(file.keys()))

        def weights(key: str) -> np.ndarray:
            return np.asarray(file.get_tensor(resolve(key) or key), np.float32)

        backbone.token_embedding.embeddings.assign(weights("shared.weight"))
        if resolve("final_logits_bias"):
            backbone.logits_bias.bias.assign(weights("final_logits_bias").reshape(-1))
        if config.positions == "learned":
            for side in ("encoder", "decoder"):
                table = weights(f"{side}.embed_positions.weight")[BART_POSITION_OFFSET:]
                backbone.get_layer(f"{side}_position_embedding").position_embeddings.assign(table)
                _norm(backbone.get_layer(f"{side}_embedding_layer_norm"), weights, f"{side}.layernorm_embedding")
        for side, count in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
            for n in range(count):
                block, p = backbone.get_layer(f"{side}_layer_{n}"), f"{side}.layers.{n}."
                _attention(block._self_attention_layer, weights, f"{p}self_attn", config.num_heads)
                _norm(block._self_attention_layer_norm, weights, f"{p}self_attn_layer_norm")
                if side == "decoder":
                    _attention(block._cross_attention_layer, weights, f"{p}encoder_attn", config.num_heads)
                    _norm(block._cross_attention_layer_norm, weights, f"{p}encoder_attn_layer_norm")
                for dense, fc in ((block._feedforward_intermediate_dense, "fc1"), (block._feedforward_output_dense, "fc2")):
                    dense.kernel.assign(weights(f"{p}{fc}.weight").T)
                    dense.bias.assign(weights(f"{p}{fc}.bias"))
                _norm(block._feedforward_layer_norm, weights, f"{p}final_layer_norm")


def _spm_pieces(path: Path) -> tuple[dict[str, float], bytes]:
    """``({piece: score}, precompiled_charsmap)`` of the SentencePiece model at ``path``.

    Raises:
        CheckpointError: no ``sentencepiece`` package, or not a SentencePiece model.
    """
    import importlib.util

    if importlib.util.find_spec("sentencepiece") is None:
        raise CheckpointError(f"{path}: a SentencePiece model, which needs the sentencepiece package to read (pip install sentencepiece), or save the checkpoint's tokenizer.json")
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(path.read_bytes())
    except Exception as exc:  # protobuf's DecodeError
        raise CheckpointError(f"{path}: not a SentencePiece model ({type(exc).__name__})") from None
    if not proto.pieces:
        raise CheckpointError(f"{path}: no pieces; not a SentencePiece model")
    return {piece.piece: piece.score for piece in proto.pieces if piece.type in (1, 4)}, proto.normalizer_spec.precompiled_charsmap  # NORMAL, USER_DEFINED


def marian_tokenizer(vocab_path: Path, spm_path: Path) -> Any:
    """``vocab.json``'s ids over ``source.spm``'s pieces, as ``MarianTokenizer`` encodes a source
    (transformers' ``tokenization_marian.py``: SentencePiece pieces, then ids by ``vocab.json``):
    a ``tokenizers`` ``Unigram`` whose vocabulary is ``vocab.json`` in id order, each piece scored
    as in ``source.spm`` (pieces only the target side has: -1e9, never chosen while the source
    pieces can spell a word), SentencePiece's normalisation table, whitespace split and
    ``Metaspace`` (``▁`` before every word); the specials whole. No post-processor: the family
    appends ``</s>``.

    Raises:
        CheckpointError: ids that are not ``0 .. n-1``, a missing special, a ``source.spm`` piece
            that ``vocab.json`` lacks (its segmentation could not be reproduced), see :func:`_spm_pieces`.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

    vocab = json.loads(vocab_path.read_text(encoding="utf-8"))
    if not isinstance(vocab, dict) or sorted(vocab.values()) != list(range(len(vocab))):
        raise CheckpointError(f"{vocab_path}: not a {{piece: id}} object with the ids 0 .. n-1")
    missing = [token for token in SPECIALS if token not in vocab]
    if missing:
        raise CheckpointError(f"{vocab_path}: no {', '.join(missing)} token; a Marian vocabulary needs {', '.join(SPECIALS)}")
    scores, charsmap = _spm_pieces(spm_path)
    absent = [piece for piece in scores if piece not in vocab]
    if absent:
        raise CheckpointError(f"{spm_path}: piece {absent[0]!r} ({len(absent)} in all) is not in {vocab_path.name}; its segmentation cannot be reproduced exactly")
    pieces = sorted(vocab, key=vocab.__getitem__)
    tokenizer = Tokenizer(models.Unigram([(p, scores.get(p, -1e9)) for p in pieces], unk_id=vocab["<unk>"], byte_fallback=False))
    if charsmap:
        tokenizer.normalizer = normalizers.Precompiled(charsmap)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")])
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.add_special_tokens(list(SPECIALS))
    return tokenizer


def load_tokenizer(directory: Path, config: TransformerConfig) -> tuple[Any, Path | None, str]:
    """``(tokenizer, tokenizer.json to copy or None, where it came from)``: the checkpoint's
    ``tokenizer.json`` as it is, else :func:`marian_tokenizer` of ``vocab.json`` and ``source.spm``.

    Raises:
        CheckpointError: no tokenizer files, an unreadable one, a missing special, more ids than
            embedding rows.
    """
    from tokenizers import Tokenizer

    json_path, vocab, spm = directory / "tokenizer.json", directory / "vocab.json", directory / "source.spm"
    if json_path.is_file():
        try:
            tokenizer, source, where = Tokenizer.from_file(str(json_path)), json_path, str(json_path)
        except Exception as exc:  # tokenizers raises bare Exceptions
            raise CheckpointError(f"{json_path}: cannot be read as a tokenizer ({str(exc).splitlines()[0]})") from None
        missing = [token for token in SPECIALS if tokenizer.token_to_id(token) is None]
        if missing:
            raise CheckpointError(f"{json_path}: no {', '.join(missing)} token; the transformer family needs {', '.join(SPECIALS)}")
    elif vocab.is_file() and spm.is_file():
        tokenizer, source, where = marian_tokenizer(vocab, spm), None, "vocab.json + source.spm"
    else:
        raise CheckpointError(f"{directory}: no tokenizer.json, nor vocab.json and source.spm; the checkpoint's tokenizer is needed (BART: save it with its fast tokenizer, which writes tokenizer.json)")
    rows = max(tokenizer.get_vocab(with_added_tokens=True).values()) + 1
    if rows > config.vocabulary_size:
        raise CheckpointError(f"{json_path if source else vocab}: the vocabulary has ids up to {rows - 1}, the embedding matrix {config.vocabulary_size} rows (config.json vocab_size)")
    return tokenizer, source, where


def _check_special_ids(directory: Path, hf: dict[str, Any], tokenizer: Any) -> str:
    """The decoder's start token, once ``pad_token_id`` and ``eos_token_id`` are the
    vocabulary's ``<pad>`` and ``</s>`` (the family finds its specials by name).

    Raises:
        CheckpointError: naming the key whose id is another token.
    """
    path = directory / "config.json"
    for key, token in (("pad_token_id", "<pad>"), ("eos_token_id", "</s>")):
        if tokenizer.token_to_id(token) != hf[key]:
            raise CheckpointError(f"{path}: key {key!r} = {hf[key]} is not the vocabulary's {token} ({tokenizer.token_to_id(token)})")
    for key in ("decoder_start_token_id", *(("bos_token_id",) if hf.get("model_type") == "bart" else ())):
        if tokenizer.id_to_token(hf[key]) is None:
            raise CheckpointError(f"{path}: key {key!r} = {hf[key]} is no token of the vocabulary")
    return tokenizer.id_to_token(hf["decoder_start_token_id"])


#: Generation settings of transformers' ``generate`` that ptmkit's search does not apply.
FORCED_TOKENS = ("forced_bos_token_id", "forced_eos_token_id")


def warn_forced_tokens(directory: Path, hf: dict[str, Any]) -> list[str]:
    """Warn, naming the file and key, for each forced token that ``config.json`` or
    ``generation_config.json`` sets (bart-large-cnn forces ``<s>`` first): ptmkit's greedy and
    beam search force no token, so its outputs can differ from ``generate``'s there. Returns the
    warnings' texts."""
    import warnings

    found = []
    generation = directory / "generation_config.json"
    sources = [(directory / "config.json", hf)]
    if generation.is_file():
        try:
            sources.append((generation, json.loads(generation.read_text(encoding="utf-8"))))
        except (OSError, ValueError):
            pass  # not read by the import otherwise
    for path, settings in sources:
        for key in FORCED_TOKENS:
            if isinstance(settings, dict) and settings.get(key) is not None:
                found.append(f"{path}: key {key!r} = {settings[key]!r} is not applied: ptmkit's search forces no token, so its outputs can differ from transformers' generate there")
    for text in found:
        warnings.warn(text, stacklevel=3)
    return found


def import_hf(directory: str | os.PathLike[str], out: str | os.PathLike[str], console: Any = None) -> dict[str, Any]:
    """Import the Hugging Face Marian or BART checkpoint in ``directory`` as a ``transformer`` run in
    ``out`` (``ptmkit translate`` reads it).

    Every check runs before anything is written; the run is assembled beside ``out`` and moved
    into place at the end, so a failure leaves nothing behind.

    Returns:
        the run's manifest.

    Raises:
        CheckpointError: see :func:`read_seq2seq_config`, :func:`check_weights`, :func:`load_tokenizer`.
        RunDirError: ``out`` exists and is not an empty directory.
    """
    from ptmkit.api import assemble_import, check_import_paths
    from ptmkit_transformer.backbone import build_backbone

    source, target = check_import_paths(directory, out)
    config, hf = read_seq2seq_config(source)
    weights = check_weights(source, config)
    tokenizer, tokenizer_file, tokenizer_source = load_tokenizer(source, config)
    config.decoder_start_token = _check_special_ids(source, hf, tokenizer)
    if hf["model_type"] == "bart":
        config.source_start_token = tokenizer.id_to_token(hf["bos_token_id"])
    warn_forced_tokens(source, hf)
    description = (
        f"importing {source}: {LAYOUTS[hf['model_type']]} {config.encoder_layers} + {config.decoder_layers} layers, d_model {config.hidden_dim}, {config.num_heads} heads, "
        f"{config.activation}, vocabulary {config.vocabulary_size:,}, {config.max_sequence_length} positions"
    )
    return assemble_import(
        target, source, "transformer", config, weights, tokenizer, tokenizer_file, tokenizer_source,
        build_backbone=build_backbone, port_weights=lambda backbone: port_weights(backbone, Path(weights["file"]), config),
        description=description, inputs=["encoder_token_ids", "encoder_padding_mask", "decoder_token_ids", "decoder_padding_mask"], console=console,
    )
