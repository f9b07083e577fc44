"""Encoding texts for a backbone with a Hugging Face tokenizer (fine-tuning and export checks)."""

from __future__ import annotations

from typing import Any

import numpy as np

# Which attribute of a ``tokenizers.Encoding`` feeds which backbone input.
ENCODING_FIELDS = {"token_ids": "ids", "segment_ids": "type_ids", "padding_mask": "attention_mask"}


def encode_texts(tokenizer: Any, texts: list[str], sequence_length: int, input_names: tuple[str, ...], pad_id: int) -> dict[str, np.ndarray]:
    """Encode ``texts`` with the tokenizer's post-processor (specials), truncated together and
    padded to ``sequence_length``.

    Returns:
        one ``(len(texts), sequence_length)`` int32 array per input name.
    """
    from ptmkit_export.clip import clip_text, plain_copy

    tokenizer = plain_copy(tokenizer)  # truncation/padding settings stay local
    texts = [clip_text(tokenizer, text, sequence_length) for text in texts]  # a long text: its prefix, same tokens
    tokenizer.enable_truncation(max_length=sequence_length)
    tokenizer.enable_padding(pad_id=pad_id, length=sequence_length)
    encodings = tokenizer.encode_batch(texts)
    return {name: np.asarray([getattr(e, ENCODING_FIELDS[name]) for e in encodings], dtype=np.int32) for name in input_names}
