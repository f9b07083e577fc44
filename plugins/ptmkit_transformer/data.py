"""Sentence pairs for the transformer family: token ids, and the checks that refuse a file of
another language pair than the run's (by its header, or by mostly unknown tokens)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ptmkit.api import ConfigError, DataError, ParallelCorpus

#: A dev file whose tokens are mostly ``<unk>`` is refused: another language pair than the run's.
MAX_UNKNOWN_SHARE = 0.5


def check_languages(train: ParallelCorpus, other: ParallelCorpus, train_path: Path, other_path: Path) -> None:
    """Refuse ``other`` when both files' headers name their languages and the pairs differ.

    Raises:
        DataError: naming both files and both pairs.
    """
    if train.languages and other.languages and train.languages != other.languages:
        raise DataError(
            f"{other_path}:1: a {'-'.join(other.languages)} file, but the run translates {'-'.join(train.languages)} ({train_path})"
        )


def encode(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """Token ids of each text, without specials."""
    return [list(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False)]


def check_known(tokenizer: Any, ids: list[list[int]], unk: int, path: Path) -> None:
    """Refuse pairs whose tokens are mostly unknown to the run's vocabulary.

    Raises:
        DataError: more than :data:`MAX_UNKNOWN_SHARE` of the tokens are ``<unk>``.
    """
    total = sum(len(row) for row in ids)
    unknown = sum(row.count(unk) for row in ids)
    if total and unknown / total > MAX_UNKNOWN_SHARE:
        raise DataError(f"{path}: {unknown / total:.0%} of its tokens are unknown to the run's vocabulary; another language pair than the run's?")


def cut_count(ids: list[list[int]], limit: int) -> int:
    """How many rows are longer than ``limit - 1`` tokens (room for ``</s>`` or ``<s>``)."""
    return sum(1 for row in ids if len(row) > limit - 1)


def source_prefix(tokenizer: Any, config: Any) -> tuple[int, ...]:
    """The ids put before every source: ``model.source_start_token``'s, or none.

    Raises:
        ConfigError: the token is not in the vocabulary.
    """
    if not config.source_start_token:
        return ()
    token_id = tokenizer.token_to_id(config.source_start_token)
    if token_id is None:
        raise ConfigError(f"config key 'model.source_start_token' = {config.source_start_token!r} is not a token of the run's vocabulary")
    return (token_id,)
