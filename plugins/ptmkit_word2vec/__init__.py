"""ptmkit's word2vec plugin: the ``word2vec`` family (Mikolov et al. 2013), skip-gram and CBOW
with negative sampling and/or hierarchical softmax, sub-sampling, dynamic windows and a linearly
decaying learning rate.

Registered under the entry-point group ``ptmkit.plugins`` exactly as a third-party plugin is. The
family trains itself (:class:`ptmkit.contract.TrainsItself`) and provides static word
vectors (:class:`ptmkit.contract.ProvidesWordVectors`), so ``ptmkit evaluate``, ``embed --words`` and
``export --vectors`` / ``--onnx`` serve its runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ptmkit.api import ModelFamily, WordVectorFamily, hookimpl
from ptmkit_word2vec.config import Word2VecConfig

__all__ = ["Word2VecConfig", "Word2VecFamily"]


class Word2VecFamily(WordVectorFamily):
    """word2vec: one vector per word, trained to predict its neighbours (or be predicted by them)."""

    name = "word2vec"
    scaling = WordVectorFamily.PRODUCER_AND_STEP
    description = "word2vec skip-gram / CBOW, negative sampling or hierarchical softmax (static word vectors)"
    config_class = Word2VecConfig

    def train(self, corpus: Path, run_dir: Path, config: Word2VecConfig, console: Any, resume: bool = False) -> dict[str, Any]:
        from ptmkit_word2vec.train import train_word2vec

        return train_word2vec(corpus, run_dir, config, console, resume)


@hookimpl
def ptmkit_model_families() -> list[ModelFamily]:
    """word2vec."""
    return [Word2VecFamily()]
