"""Model inputs from token ids: the tokenizer fields a family's declared inputs come from.

Training (``ptmkit``) and the runtime (:class:`ptmkit_export.Predictor`, the server) make a
model's inputs with these same functions, so an input is computed alike wherever it is fed. A
field is one of:

* ``ids``: token ids ``(batch, sequence)``;
* ``type_ids``: segment ids ``(batch, sequence)`` (0 for the first segment, 1 for the second);
* ``attention_mask``: ``(batch, sequence)``, 1 on tokens and 0 on padding;
* ``char_ids``: ``(batch, sequence, characters)``, each token's UTF-8 bytes plus 1 (0 pads a
  token shorter than ``characters``; longer ones are cut), as in ELMo's character inputs (Peters
  et al. 2018, which reserves its own ids for bos/eos/padding: here the tokenizer's special
  tokens are spelt out like any other token). WordPiece's ``##`` continuation prefix is dropped.
  The characters are those of the token's vocabulary entry, looked up by id (training reads ids
  from its tokenized corpus): a word the vocabulary lacks reads as its unknown token.

NumPy only: the lean runtime imports it without TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

#: The fields this module derives.
FIELDS = ("ids", "type_ids", "attention_mask", "char_ids")
#: ``char_ids`` values are in ``[0, CHARACTER_VOCABULARY)``: 0 is padding, byte ``b`` is ``b + 1``.
CHARACTER_VOCABULARY = 257


def character_table(vocabulary: Sequence[str], characters: int) -> np.ndarray:
    """The ``(len(vocabulary), characters)`` int32 ``char_ids`` of each token id's string.

    Args:
        vocabulary: token strings, index = token id (``tokenizer.id_to_token``).
        characters: the size of the ``characters`` axis.
    """
    table = np.zeros((len(vocabulary), characters), np.int32)
    for i, token in enumerate(vocabulary):
        data = (token[2:] if token.startswith("##") and len(token) > 2 else token).encode("utf-8")[:characters]
        table[i, : len(data)] = np.frombuffer(data, np.uint8).astype(np.int32) + 1
    return table


def tokenizer_character_table(tokenizer: Any, characters: int) -> np.ndarray:
    """:func:`character_table` of a ``tokenizers.Tokenizer``'s vocabulary (ids without a token: zeros)."""
    size = tokenizer.get_vocab_size()
    return character_table([tokenizer.id_to_token(i) or "" for i in range(size)], characters)


def derive(
    field: str,
    token_ids: np.ndarray,
    segment_ids: np.ndarray | None,
    padding_mask: np.ndarray,
    dtype: Any = np.int32,
    characters: np.ndarray | None = None,
) -> np.ndarray:
    """One input from ``(batch, sequence)`` token ids, segment ids and padding mask.

    Args:
        field: one of :data:`FIELDS`.
        characters: the :func:`character_table` (``char_ids`` only); padded positions get zeros.

    Raises:
        ValueError: an unknown field, or ``char_ids`` without ``characters``.
    """
    if field == "ids":
        values = token_ids
    elif field == "type_ids":
        values = np.zeros_like(token_ids) if segment_ids is None else segment_ids
    elif field == "attention_mask":
        values = padding_mask
    elif field == "char_ids":
        if characters is None:
            raise ValueError("the char_ids field needs a character table")
        values = characters[np.clip(token_ids, 0, len(characters) - 1)] * (np.asarray(padding_mask)[..., None] != 0)
    else:
        raise ValueError(f"unknown input field {field!r}; fields derived from token ids: {', '.join(FIELDS)}")
    return np.ascontiguousarray(values, dtype=dtype)


def from_encodings(encodings: Sequence[Any], inputs: Sequence[Mapping[str, Any]], characters: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Model inputs from equally long ``tokenizers.Encoding`` items.

    Args:
        encodings: padded to one length (``tokenizer.enable_padding``).
        inputs: the export manifest's input specs: ``name``, ``dtype`` and ``encoding`` (the field).
        characters: the :func:`character_table`, when an input is ``char_ids``.

    Returns:
        ``{name: array}``: ``(len(encodings), length)`` arrays, ``(..., characters)`` for ``char_ids``.
    """
    ids = np.asarray([e.ids for e in encodings], np.int64)
    type_ids = np.asarray([e.type_ids for e in encodings], np.int64)
    mask = np.asarray([e.attention_mask for e in encodings], np.int64)
    return {spec["name"]: derive(spec["encoding"], ids, type_ids, mask, np.dtype(spec["dtype"]), characters) for spec in inputs}
