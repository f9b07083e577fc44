"""ptmkit's GloVe plugin: the ``glove`` family (Pennington et al. 2014), word vectors fitted by
weighted least squares to the log of window co-occurrence counts, with AdaGrad.

Registered under the entry-point group ``ptmkit.plugins``; it trains itself and provides static
word vectors (``W + W~``), so ``ptmkit evaluate``, ``embed --words`` and ``export`` serve its runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ptmkit.api import ModelFamily, WordVectorFamily, hookimpl
from ptmkit_glove.config import GloVeConfig

__all__ = ["GloVeConfig", "GloVeFamily"]


class GloVeFamily(WordVectorFamily):
    """GloVe: global log-bilinear regression on co-occurrence counts."""

    name = "glove"
    description = "GloVe: weighted least squares on log co-occurrences, AdaGrad (static word vectors)"
    config_class = GloVeConfig

    def train(self, corpus: Path, run_dir: Path, config: GloVeConfig, console: Any, resume: bool = False) -> dict[str, Any]:
        from ptmkit_glove.train import train_glove

        return train_glove(corpus, run_dir, config, console, resume)


@hookimpl
def ptmkit_model_families() -> list[ModelFamily]:
    """GloVe."""
    return [GloVeFamily()]
