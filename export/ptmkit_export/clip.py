"""Cut a long text to the prefix a model reads, before tokenizing it (no onnxruntime needed).

Used by the lean runtime (:class:`ptmkit_export.Predictor`, the server) and by ptmkit's own
encoders (``ptmkit.data.tokenization.encode_texts``, ``ptmkit.embedding.embed_texts``).
"""

from __future__ import annotations

import re
from typing import Any

#: Characters per token a text's prefix starts at before it is tokenized (:func:`clip_text`); the
#: prefix grows fourfold until it holds enough tokens.
CLIP_CHARS_PER_TOKEN = 16
#: Extra tokens a prefix cut inside a word must hold, so that the cut word cannot reach the kept ones.
CLIP_MARGIN_TOKENS = 16
_LAST_SPACE = re.compile(r"\s\S*\Z")


def clip_text(tokenizer: Any, text: str, max_tokens: int) -> str:
    """The shortest prefix of ``text`` found to tokenize to the same first ``max_tokens`` tokens.

    Tokenizing a whole text before truncating it costs memory in proportion to the text (a 26 MB
    line took 4 GB); a model reads at most ``max_tokens`` of them. The prefix is cut at
    whitespace (pre-tokenizers split there, so the tokens before the cut are the text's own) and
    must give more than ``max_tokens`` tokens; a cut inside a word (no whitespace in the last half)
    must give :data:`CLIP_MARGIN_TOKENS` more. It starts at ``max_tokens *``
    :data:`CLIP_CHARS_PER_TOKEN` characters and grows fourfold until it does, or is the text.

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` without truncation or padding (see
            :func:`plain_copy`).
        text: the text.
        max_tokens: tokens the model reads, specials included.

    Returns:
        ``text`` itself when short, else a prefix of it.
    """
    chars = max_tokens * CLIP_CHARS_PER_TOKEN
    while len(text) > chars:
        prefix = text[:chars]
        space = _LAST_SPACE.search(prefix)
        inside_word = space is None or space.start() < chars // 2
        if not inside_word:
            prefix = prefix[: space.start()]  # type: ignore[union-attr]
        tokens = len(tokenizer.encode(prefix, add_special_tokens=False).ids)
        if tokens > max_tokens + (CLIP_MARGIN_TOKENS if inside_word else 0):
            return prefix
        chars *= 4
    return text


def plain_copy(tokenizer: Any) -> Any:
    """A copy of ``tokenizer`` without truncation or padding, for :func:`clip_text`."""
    from tokenizers import Tokenizer

    plain = Tokenizer.from_str(tokenizer.to_str())
    plain.no_truncation()
    plain.no_padding()
    return plain
