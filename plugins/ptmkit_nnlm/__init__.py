"""ptmkit's NNLM plugin: the ``nnlm`` family, Bengio et al. 2003's neural probabilistic language
model (shared word features ``C``, tanh hidden layer, softmax, optional direct connections),
trained with Keras and measured by held-out perplexity; its feature matrix ``C`` is served as
static word vectors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ptmkit.api import InputSpec, ModelFamily, WordVectorFamily, hookimpl
from ptmkit_nnlm.config import NNLMConfig

__all__ = ["NNLMConfig", "NNLMFamily"]


class NNLMFamily(WordVectorFamily):
    """NNLM: an n-gram language model on learnt word features."""

    name = "nnlm"
    description = "Bengio et al. 2003 neural probabilistic language model (word features C as static vectors)"
    config_class = NNLMConfig
    scaling = (
        "trains itself on one host with Keras' train_on_batch over shuffled n-gram blocks; TensorFlow's CPU thread pools "
        "use the host's cores; it does not run under tf.distribute"
    )
    inputs = (InputSpec("context_ids", ("batch", "context"), "int32", field="context_ids"),)

    def train(self, corpus: Path, run_dir: Path, config: NNLMConfig, console: Any, resume: bool = False) -> dict[str, Any]:
        from ptmkit_nnlm.train import train_nnlm

        return train_nnlm(corpus, run_dir, config, console, resume)


@hookimpl
def ptmkit_model_families() -> list[ModelFamily]:
    """NNLM."""
    return [NNLMFamily()]
