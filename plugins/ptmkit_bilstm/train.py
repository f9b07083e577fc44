"""``ptmkit train bilstm``: the student's vocabulary and initial weights, from a corpus and a run
of static word vectors (no gradient step: the student trains in ``ptmkit finetune``).

The corpus is plain text, or a labelled file (fastText ``__label__`` lines, TSV, ...: its texts).
The vocabulary is ``<pad>`` (id 0), ``<unk>`` (id 1), then the corpus's words (split on
whitespace, lower-cased when ``model.lowercase`` or the vectors' run says so) that occur
``model.min_count`` times, most frequent first, at most ``model.max_words``. A word with a vector
in the run starts from it; a word without one starts from a normal draw with the vectors' standard
deviation; ``<pad>`` and ``<unk>`` start at zero. At fine-tuning and serving time a word outside
the vocabulary is ``<unk>``: any text tokenizes, whatever the teacher's tokenizer made of it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.api import (
    BACKBONE_WEIGHTS,
    CONFIG,
    TOKENIZER,
    ConfigError,
    DataError,
    ProvidesWordVectors,
    RunDir,
    RunDirError,
    atomic_save,
    atomic_write_text,
    get_registry,
    is_labelled,
    read_corpus,
    read_multilabelled,
    read_toml,
    to_toml,
)
from ptmkit_bilstm.config import PAD, UNK, BiLSTMConfig


def load_vectors(config: BiLSTMConfig) -> tuple[Any, bool]:
    """``(WordVectors, lowercased)`` of ``config.word_vectors``: its vectors and whether its run
    lower-cased its corpus.

    Raises:
        ConfigError: no ``model.word_vectors``, or no such directory.
        RunDirError: not a finished run of a family that provides word vectors.
    """
    if not config.word_vectors:
        raise ConfigError("config key 'model.word_vectors' is empty: set it to a word2vec, GloVe, fastText or NNLM run (--set model.word_vectors=RUN)")
    path = Path(config.word_vectors).expanduser()
    if not path.is_dir():
        raise ConfigError(f"config key 'model.word_vectors' = {config.word_vectors!r}: no such run directory")
    manifest = RunDir(path).manifest()
    family = get_registry().family(manifest["family"])
    if not isinstance(family, ProvidesWordVectors):
        raise RunDirError(f"{path}: a {family.name} run holds no static word vectors; model.word_vectors needs a word2vec, GloVe, fastText or NNLM run")
    model = (read_toml(path / CONFIG).get("model") or {}) if (path / CONFIG).exists() else {}
    return family.load_word_vectors(path), bool(model.get("lowercase", False))


def word_tokenizer(words: list[str], lowercase: bool) -> Any:
    """A word-level ``tokenizers.Tokenizer``: ``<pad>`` 0, ``<unk>`` 1, then ``words``; split on
    whitespace, unknown words to ``<unk>``; no post-processor (the student reads a text's words alone)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    vocabulary = {PAD: 0, UNK: 1, **{word: i + 2 for i, word in enumerate(words)}}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocabulary, unk_token=UNK))
    if lowercase:
        tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens([PAD, UNK])
    return tokenizer


def embedding_matrix(words: list[str], vectors: Any, seed: int) -> tuple[np.ndarray, set[str]]:
    """``((len(words) + 2, dim) float32, found)``: zero rows for ``<pad>`` and ``<unk>``, then each
    word's vector, or a normal draw with the vectors' standard deviation for a word without one;
    ``found``: the words with a vector."""
    rng = np.random.default_rng(seed)
    scale = float(np.std(vectors.vectors)) if len(vectors) else 1.0
    matrix = np.zeros((len(words) + 2, vectors.dim), np.float32)
    found = set()
    for i, word in enumerate(words):
        vector = vectors.vector(word)
        if vector is None:
            matrix[i + 2] = rng.normal(0.0, scale, vectors.dim)
        else:
            matrix[i + 2] = vector
            found.add(word)
    return matrix, found


def train_bilstm(corpus: Path, run_dir: Path, config: BiLSTMConfig, console: Any) -> dict[str, Any]:
    """Write the student's tokenizer, config (its ``vocabulary_size``, ``embedding_dim`` and
    ``lowercase`` filled in) and initial backbone weights into ``run_dir``; return the metrics.

    Raises:
        ConfigError, RunDirError: see :func:`load_vectors`.
        DataError: a corpus without a word that occurs ``min_count`` times.
    """
    from ptmkit_bilstm.backbone import build_backbone

    vectors, lowercased = load_vectors(config)
    lowercase = config.lowercase or lowercased
    counts: Counter[str] = Counter()
    texts = read_multilabelled(corpus)[0] if is_labelled(corpus) else read_corpus(corpus)  # a labelled file: its texts, labels left out
    for text in texts:
        counts.update((text.lower() if lowercase else text).split())
    words = [word for word, count in counts.most_common() if count >= config.min_count and word not in (PAD, UNK)]
    words = words[: config.max_words] if config.max_words else words
    if not words:
        raise DataError(f"{corpus}: no word occurs model.min_count = {config.min_count} times")
    matrix, found = embedding_matrix(words, vectors, config.seed)
    config = dataclasses.replace(config, lowercase=lowercase, vocabulary_size=len(words) + 2, embedding_dim=vectors.dim)
    run = RunDir(run_dir)
    atomic_write_text(run / CONFIG, to_toml({**read_toml(run / CONFIG), "model": dataclasses.asdict(config)}))
    import keras

    keras.utils.set_random_seed(config.seed)
    backbone = build_backbone(config)
    backbone.get_layer("word_embeddings").set_weights([matrix])
    tokenizer = word_tokenizer(words, lowercase)
    atomic_save(run / TOKENIZER, lambda tmp: tokenizer.save(str(tmp)))
    atomic_save(run / BACKBONE_WEIGHTS, lambda tmp: backbone.save_weights(str(tmp)))
    tokens = sum(counts.values())
    covered = sum(counts[word] for word in found)
    console.print(
        f"bilstm vocabulary: {len(words):,} corpus words, {len(found):,} with a {vectors.dim}-dimensional vector from {config.word_vectors} "
        f"({covered / tokens:.1%} of the corpus's {tokens:,} tokens), {len(words) - len(found):,} drawn at random"
    )
    return {
        "words": len(words), "words_with_vectors": len(found), "token_coverage": round(covered / tokens, 4), "corpus_tokens": tokens,
        "embedding_dim": vectors.dim, "parameters": int(backbone.count_params()),
    }
