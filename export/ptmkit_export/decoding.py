"""Decoder exports with a key/value cache (``task == "generation"``): the backend that
:mod:`ptmkit_export.generation`'s search loop runs on, with ONNX Runtime only (no TensorFlow).

The export's graph takes ``token_ids`` ``(batch, sequence)`` int32 (the new tokens),
``padding_mask`` ``(batch, past_sequence + sequence)`` int32 (the whole mask, past included) and
per layer ``i`` the cache ``past_key_{i}``/``past_value_{i}`` ``(batch, heads, past_sequence,
head_dim)`` float32; it returns ``logits`` ``(batch, sequence, vocabulary)`` and
``present_key_{i}``/``present_value_{i}`` (the cache with the new positions), the layout of
Hugging Face optimum's decoder exports. The manifest's ``decoder`` object gives ``layers``,
``heads``, ``head_dim``, ``bos_token_id``, ``eos_token_id`` and ``prepend_bos``.

:class:`CachedDecoder` turns that graph into ``next_logits(token_ids, padding_mask)``: it keeps
the cache of the last call and, when a call's rows extend earlier rows by one token (greedy and
sampling steps; beam search reorders rows, so each row is matched to the earlier row it extends),
feeds only the new column; any other call recomputes from an empty cache. An encoder-decoder's
decoder also reads the encoder's output: :attr:`CachedDecoder.context` holds such extra inputs
(:mod:`ptmkit_export.translation`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

#: ``task`` of a decoder export with a key/value cache.
GENERATION_TASK = "generation"
#: Keys of the manifest's ``decoder`` object, with their JSON types.
DECODER_KEYS: dict[str, type] = {"layers": int, "heads": int, "head_dim": int, "bos_token_id": int, "eos_token_id": int, "prepend_bos": bool}


def cache_names(layers: int, kind: str) -> list[str]:
    """``["{kind}_key_0", "{kind}_value_0", ...]`` for ``kind`` ``past`` or ``present``."""
    return [f"{kind}_{part}_{i}" for i in range(layers) for part in ("key", "value")]


def cache_mismatch(session: Any, layers: int, heads: int, head_dim: int) -> str | None:
    """What in ``session``'s inputs contradicts a cache of ``layers`` x ``heads`` x ``head_dim``
    (the manifest's ``decoder``), or None: a graph and a manifest that do not belong together
    would otherwise fail at the first call with ONNX Runtime's message."""
    shapes = {value.name: value.shape for value in session.get_inputs()}
    past = [name for name in shapes if name.startswith("past_")]
    if set(past) != set(cache_names(layers, "past")):
        found = sum(name.startswith("past_key_") for name in past)
        return f"the graph's cache has {found} layer(s), the manifest's decoder.layers is {layers}"
    shape = shapes["past_key_0"]
    if len(shape) != 4:
        return f"past_key_0 has {len(shape)} axes, not (batch, heads, past_sequence, head_dim)"
    for axis, key, value in ((1, "heads", heads), (3, "head_dim", head_dim)):
        if isinstance(shape[axis], int) and shape[axis] != value:
            return f"the graph's past_key_0 has {shape[axis]} on its {key} axis, the manifest's decoder.{key} is {value}"
    return None


class CachedDecoder:
    """``next_logits`` over a decoder export's session, feeding its key/value cache.

    Args:
        session: an ``onnxruntime.InferenceSession`` of the graph (module docstring).
        layers, heads, head_dim: the cache's shape (the manifest's ``decoder``).

    Attributes:
        context: extra inputs fed to every call, by name (an encoder-decoder's
            ``encoder_sequence_output`` and ``encoder_padding_mask``): arrays of one row per batch
            row, or of one row that every row shares (a sentence's beams). With per-row context a
            call's rows must each extend the same row of the last call to use the cache.
        cached_steps: calls answered from the cache (one new column each).
        full_steps: calls recomputed from an empty cache.
    """

    def __init__(self, session: Any, layers: int, heads: int, head_dim: int) -> None:
        self.session = session
        self.heads, self.head_dim = heads, head_dim
        self._past_names = cache_names(layers, "past")
        self._outputs = ["logits", *cache_names(layers, "present")]
        self._ids: np.ndarray | None = None
        self._mask: np.ndarray | None = None
        self._cache: list[np.ndarray] = []
        self.context: dict[str, np.ndarray] = {}
        self.cached_steps = 0
        self.full_steps = 0

    def reset(self) -> None:
        """Forget the cache."""
        self._ids, self._mask, self._cache = None, None, []

    def _extends(self, token_ids: np.ndarray, mask: np.ndarray) -> np.ndarray | None:
        """For each row, the earlier row it extends by one token, or None when some row does not."""
        if self._ids is None or self._mask is None or token_ids.shape[1] != self._ids.shape[1] + 1:
            return None
        if token_ids.shape[0] == self._ids.shape[0] and np.array_equal(token_ids[:, :-1], self._ids) and np.array_equal(mask[:, :-1], self._mask):
            return np.arange(token_ids.shape[0])  # each row extends itself (greedy, sampling)
        if any(value.shape[0] > 1 for value in self.context.values()):
            return None  # rows with their own context (an encoder's states): equal prefixes may hold different caches
        known = {(ids.tobytes(), m.tobytes()): row for row, (ids, m) in enumerate(zip(self._ids, self._mask, strict=True))}
        found = [known.get((ids.tobytes(), m.tobytes())) for ids, m in zip(token_ids[:, :-1], mask[:, :-1], strict=True)]
        return None if any(row is None for row in found) else np.asarray(found)

    def run(self, token_ids: np.ndarray, mask: np.ndarray, past: list[np.ndarray] | None = None) -> list[np.ndarray]:
        """One session call: the new ``token_ids`` with the whole ``mask`` and the ``past`` cache
        (None: empty); returns ``[logits, present_key_0, present_value_0, ...]``."""
        if past is None:
            empty = np.zeros((token_ids.shape[0], self.heads, 0, self.head_dim), np.float32)
            past = [empty] * len(self._past_names)
        feeds = {"token_ids": token_ids.astype(np.int32), "padding_mask": mask.astype(np.int32), **dict(zip(self._past_names, past, strict=True))}
        rows = token_ids.shape[0]
        for name, value in self.context.items():
            feeds[name] = value if value.shape[0] == rows else np.repeat(value, rows, axis=0)
        return [np.asarray(value) for value in self.session.run(self._outputs, feeds)]

    def next_logits(self, token_ids: np.ndarray, padding_mask: np.ndarray) -> np.ndarray:
        """``(batch, vocabulary)`` float32 logits of the token after each row's last position
        (:data:`ptmkit_export.generation.NextLogits`)."""
        token_ids, padding_mask = np.asarray(token_ids, np.int32), np.asarray(padding_mask, np.int32)
        rows = self._extends(token_ids, padding_mask)
        if rows is None:
            outputs = self.run(token_ids, padding_mask)
            self.full_steps += 1
        else:
            outputs = self.run(token_ids[:, -1:], padding_mask, [tensor[rows] for tensor in self._cache])
            self.cached_steps += 1
        self._ids, self._mask, self._cache = token_ids, padding_mask, outputs[1:]
        return outputs[0][:, -1, :].astype(np.float32)


def encode_prompts(
    tokenizer: Any, prompts: list[str], bos: int, prepend_bos: bool, max_length: int | None, truncate: str = "error"
) -> list[list[int]]:
    """Token ids of each prompt for generation: ``bos`` first when ``prepend_bos`` or the prompt
    is empty, cut from the left (``truncate="left"``, with a :class:`UserWarning`) or refused
    (``"error"``) when it leaves none of the ``max_length`` positions to generate into.

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` (special tokens are not added).

    Raises:
        ValueError: a prompt too long with ``truncate="error"``, naming it; an unknown ``truncate``.
    """
    import warnings

    if truncate not in ("error", "left"):
        raise ValueError(f"--truncate {truncate!r}: expected one of error, left")
    room = (max_length or 1 << 30) - 1
    out = []
    for number, (prompt, encoding) in enumerate(zip(prompts, tokenizer.encode_batch(list(prompts), add_special_tokens=False), strict=True), 1):
        ids = list(encoding.ids)
        if prepend_bos or not ids:
            ids = [bos, *ids]
        if len(ids) > room:
            if truncate == "error":
                raise ValueError(
                    f"prompt {number} ({prompt[:40]!r}...): {len(ids)} tokens, more than the {room} the model's "
                    f"{max_length} positions leave for it; --truncate left cuts it from the left"
                )
            warnings.warn(f"prompt {number}: {len(ids)} tokens cut from the left to the last {room}", stacklevel=2)
            ids = ids[-room:]
        out.append(ids)
    return out


def cut_at_stops(text: str, stops: list[str]) -> str:
    """``text`` up to the first occurrence of any of ``stops``."""
    return text[: min((text.index(s) for s in stops if s in text), default=len(text))]


def _stop_prefix(text: str, stops: Sequence[str]) -> int:
    """Length of the longest end of ``text`` that begins one of ``stops`` (a stop string that the
    next tokens may complete)."""
    return max((k for stop in stops for k in range(1, len(stop)) if text.endswith(stop[:k])), default=0)


def text_chunks(steps: Iterable[list[int]], decode: Callable[[list[int]], str], stops: Sequence[str] = ()) -> Iterator[str]:
    """The text of one row's new tokens, one piece per step of ``steps`` (and a last piece for
    what was held back), as the steps add tokens.

    The pieces join to ``cut_at_stops(decode(all tokens), stops)``, the text
    :meth:`ptmkit_export.Predictor.generate` returns. A piece is ``""`` while the text ends in
    U+FFFD (an incomplete UTF-8 character: a byte-level token may carry part of one) or in the
    beginning of a stop string, as Hugging Face's ``TextIteratorStreamer`` holds back an
    unfinished word. Assumes, as byte-level BPE guarantees, that decoding more tokens only extends
    the text of fewer (the held-back end aside).

    Args:
        steps: per step, the token ids it added (``[]`` allowed).
        decode: token ids -> text (a ``tokenizers.Tokenizer``'s ``decode``).
        stops: stop strings; the text ends before the first one.
    """
    tokens: list[int] = []
    sent = ""
    for added in steps:
        tokens += added
        text = cut_at_stops(decode(tokens), list(stops)).rstrip("\ufffd") if added else sent
        text = text[: len(text) - _stop_prefix(text, stops)]
        piece = text[len(sent) :] if len(text) > len(sent) and text.startswith(sent) else ""
        sent += piece
        yield piece
    final = cut_at_stops(decode(tokens), list(stops)) if tokens else ""
    if len(final) > len(sent) and final.startswith(sent):
        yield final[len(sent) :]
