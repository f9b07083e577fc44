"""Frozen sentence features of a run, for ``ptmkit probe`` (:class:`~ptmkit.contract.ProvidesSentenceFeatures`).

Two recipes serve every in-tree family; a family calls the one that fits its runs:

* :func:`averaged_word_vectors`: the mean of a text's word vectors (static vectors: NNLM,
  word2vec, GloVe, fastText), the baseline of Arora et al. 2017 and of SentEval's bag-of-vectors
  rows (Conneau & Kiela 2018) without their weighting;
* :func:`pooled_states`: a backbone output mean-pooled over the tokens of the text (the padding
  mask), ``ptmkit embed``'s mean pooling; an output with a layers axis (ELMo's ``hidden_states``)
  is averaged over its layers first.

Importing this module imports neither TensorFlow nor Keras.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ptmkit.contract import SEQUENCE_OUTPUT, SentenceFeatures

if TYPE_CHECKING:
    from ptmkit.wordvectors import WordVectors


def averaged_word_vectors(vectors: WordVectors, lowercase: bool = False) -> SentenceFeatures:
    """Features: the mean of the vectors of a text's words.

    A text is split on whitespace (lower-cased first when ``lowercase``: the run's own
    ``model.lowercase``, as its training read the corpus). Words without a vector (out of
    vocabulary in a family without subwords) are skipped; a subword family's unknown word gets
    its n-gram vector (:meth:`ptmkit.wordvectors.WordVectors.vector`). A text without any word
    vector gets the zero vector.

    Returns:
        :class:`SentenceFeatures` of kind ``"averaged word vectors"``, ``vectors.dim`` wide.
    """
    dim = vectors.dim

    def featurize(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), dim), np.float32)
        cache: dict[str, np.ndarray | None] = {}
        for i, text in enumerate(texts):
            found = []
            for word in (text.lower() if lowercase else text).split():
                if word not in cache:
                    cache[word] = vectors.vector(word)
                vector = cache[word]
                if vector is not None:
                    found.append(vector)
            if found:
                out[i] = np.mean(np.asarray(found, np.float32), axis=0)
        return out

    return SentenceFeatures("averaged word vectors", dim, featurize)


def pooled_states(run_dir: str | Path, output: str = SEQUENCE_OUTPUT, batch_size: int = 32) -> SentenceFeatures:
    """Features: the backbone's ``output`` of a pre-trained (or imported) run, mean-pooled over
    the text's tokens (the tokenizer's attention mask; padding left out), float32.

    ``output`` is ``(batch, sequence, hidden)`` or ``(batch, layers, sequence, hidden)``; the
    latter is averaged over its layers first (:func:`ptmkit.embedding.build_embedding_model`).
    Texts are tokenized with the run's specials and cut to the embedding length
    (:func:`ptmkit.embedding.embedding_settings`: ``pooling.json``'s, else 128, within the
    family's limit). With ``output="sequence_output"`` the features are ``ptmkit embed``'s mean
    pooling without normalisation (an imported sentence-transformers run's L2 normalisation is
    not applied: the probe compares every run's hidden states the same way).

    Raises:
        RunDirError: a fine-tuned run (probe its parent), or missing or corrupted files.
        ConfigError: ``output`` is not an output of the run's backbone.
    """
    from ptmkit.embedding import build_embedding_model, embed_texts, embedding_settings
    from ptmkit.errors import ConfigError
    from ptmkit.plugins import get_registry
    from ptmkit.rundir import RunDir
    from ptmkit.training.finetune import load_backbone
    from ptmkit.training.setup import quiet_tensorflow

    _, tokenizer, pooling, manifest = embedding_settings(run_dir)
    quiet_tensorflow()
    registry = get_registry()
    family = registry.family(manifest["family"])
    backbone, *_ = load_backbone(registry, RunDir(run_dir))
    if output not in backbone.output:
        raise ConfigError(
            f"{run_dir}: the {family.name} backbone has no output {output!r} (it has {', '.join(sorted(backbone.output))})"
        )
    mask = family.input("attention_mask")
    model = build_embedding_model(backbone, {"mode": "mean", "normalize": False}, mask.name if mask else None, output)
    length = int(pooling["max_sequence_length"])
    pad_id = family.special_tokens(tokenizer).padding_id
    dim = int(model.output.shape[-1])
    layers = backbone.output[output].shape
    kind = f"mean-pooled {output}" + (f" (mean of {layers[1]} layers)" if len(layers) == 4 else "")

    def featurize(texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, dim), np.float32)
        return embed_texts(model, tokenizer, texts, length, family.inputs, pad_id, batch_size)

    return SentenceFeatures(kind, dim, featurize)


def run_lowercase(run_dir: str | Path) -> bool:
    """The run's ``model.lowercase`` (``config.toml``), False when it has none."""
    from ptmkit.config import read_toml

    path = Path(run_dir) / "config.toml"
    if not path.is_file():
        return False
    model: Any = read_toml(path).get("model")
    return bool(model.get("lowercase", False)) if isinstance(model, dict) else False
