"""CoVe's training: ``ptmkit train cove --parallel EN-DE.tsv [--dev DEV.tsv] --out RUN
--set model.glove=GLOVE``.

The encoder (:class:`~ptmkit_cove.backbone.CoVeBackbone`) is trained as the encoder of an
attentional LSTM translation model (McCann et al. 2017, section 3; salesforce/cove trained it
with OpenNMT-py), by teacher forcing and cross-entropy:

    decoder states     h_t = LSTM(z_{t-1}, h_{t-1})                 z: target word embeddings
    attention          a_t = softmax(H (W_1 h_t + b_1))              H: CoVe(w), (source, 2 hidden)
    attentional state  h~_t = tanh(W_2 [H^T a_t; h_t] + b_2)
    prediction         p(y_t | y_<t, x) = softmax(W_out h~_t + b_out)

The paper also feeds ``h~_{t-1}`` into the decoder LSTM's input (input feeding); it is left out
here, so that the decoder stays one fused LSTM over the whole target. The GloVe table is frozen;
Adam with gradients clipped to norm 5. Each step draws ``batch_size`` pairs from a generator
seeded by ``(seed, step)``, each side cut to ``max_length`` words and padded to it.

Files written: ``tokenizer.json`` (the source vocabulary: GloVe's words), ``target_tokenizer.json``,
``backbone.weights.h5`` (the GloVe table and the biLSTM: what ``finetune``, ``probe`` and
``export`` read). No checkpoints: a run is short, and an interrupted one starts again.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.api import (
    BACKBONE_WEIGHTS,
    TOKENIZER,
    RunDir,
    atomic_save,
    read_parallel,
    seed_everything,
    train_word_level,
)
from ptmkit_cove.config import CoVeConfig

TARGET_TOKENIZER = "target_tokenizer.json"
TARGET_SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")


def translation_model(backbone: Any, config: CoVeConfig) -> Any:
    """The training model on ``backbone``: inputs ``token_ids``, ``padding_mask`` (source) and
    ``decoder_token_ids``, ``decoder_padding_mask`` (``<s> y_1 .. y_n``), all ``(batch, length)``
    int32; output ``logits`` ``(batch, target, target_vocabulary_size)`` float32 (module
    docstring), compiled with Adam and the sparse cross-entropy."""
    import keras
    from keras import ops

    names = ("token_ids", "padding_mask", "decoder_token_ids", "decoder_padding_mask")
    inputs = {name: keras.Input((None,), dtype="int32", name=name) for name in names}
    states = backbone({"token_ids": inputs["token_ids"], "padding_mask": inputs["padding_mask"]})["cove_output"]
    states = keras.layers.Dropout(config.dropout, name="encoder_dropout")(states)  # H: (batch, source, 2 hidden)
    h = keras.layers.Embedding(config.target_vocabulary_size, config.decoder_dim, name="target_embedding")(inputs["decoder_token_ids"])
    target_mask = ops.not_equal(inputs["decoder_padding_mask"], 0)
    for k in range(config.decoder_layers):
        h = keras.layers.LSTM(config.decoder_dim, return_sequences=True, name=f"decoder_lstm_{k}")(h, mask=target_mask)  # (batch, target, decoder)
    query = keras.layers.Dense(2 * config.hidden_dim, name="attention_query")(h)
    scores = ops.einsum("btd,bsd->bts", query, states)
    source_mask = ops.cast(ops.expand_dims(ops.not_equal(inputs["padding_mask"], 0), 1), scores.dtype)  # (batch, 1, source)
    alpha = ops.softmax(scores + (1.0 - source_mask) * -1e9, axis=-1)
    context = ops.einsum("bts,bsd->btd", alpha, states)
    attentional = keras.layers.Dense(config.decoder_dim, activation="tanh", name="attentional_state")(ops.concatenate([context, h], axis=-1))
    attentional = keras.layers.Dropout(config.dropout, name="attentional_dropout")(attentional)
    logits = keras.layers.Dense(config.target_vocabulary_size, name="target_softmax")(attentional)
    logits = keras.layers.Activation("linear", dtype="float32", name="logits")(logits)
    model = keras.Model(inputs, {"logits": logits}, name="cove_translation")
    model.compile(optimizer=keras.optimizers.Adam(config.learning_rate, clipnorm=5.0), loss={"logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True)})
    return model


def target_tokenizer(targets: list[str], config: CoVeConfig) -> Any:
    """A word-level vocabulary of the target side: ``<pad> <unk> <s> </s>`` (ids 0-3), then the
    most frequent words occurring at least ``target_min_frequency`` times.

    Raises:
        DataError: no target word is that frequent.
    """
    return train_word_level(targets, config.target_vocabulary_size, config.target_min_frequency, TARGET_SPECIALS, what="the targets",
                            key="model.target_min_frequency")


def pack(sources: list[list[int]], targets: list[list[int]], length: int) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """``(inputs, labels, weights)`` of pairs of ids, every array ``(batch, length + 1)``: sources
    cut to ``length`` words; decoder input ``<s> y_1 .. y_n`` and labels ``y_1 .. y_n </s>`` with
    ``n <= length`` (target ids 2 and 3 are ``<s>`` and ``</s>``); weights 1 on labels, rescaled
    to mean 1 so that Keras' mean over all positions is the mean over the real labels."""
    batch, width = len(sources), length + 1
    arrays = {name: np.zeros((batch, width), np.int32) for name in ("token_ids", "padding_mask", "decoder_token_ids", "decoder_padding_mask")}
    labels = np.zeros((batch, width), np.int32)
    for row, (source, target) in enumerate(zip(sources, targets, strict=True)):
        source, target = source[:length], target[:length]
        arrays["token_ids"][row, : len(source)] = source
        arrays["padding_mask"][row, : len(source)] = 1
        arrays["decoder_token_ids"][row, : len(target) + 1] = [2, *target]
        arrays["decoder_padding_mask"][row, : len(target) + 1] = 1
        labels[row, : len(target) + 1] = [*target, 3]
    weights = arrays["decoder_padding_mask"].astype(np.float32)
    return arrays, labels, weights * (weights.size / max(float(weights.sum()), 1.0))


def _encode(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    return [list(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False)]


def _prepare(run: RunDir, parallel: Path, config: CoVeConfig, console: Any) -> tuple[Any, list[list[int]], list[list[int]], dict[str, Any]]:
    """Read the GloVe vectors and the pairs, write both vocabularies; ``(backbone, sources,
    targets, metrics)`` with the GloVe table loaded into the backbone."""
    from ptmkit_cove.backbone import build_backbone
    from ptmkit_cove.glove import embedding_matrix, load_glove, source_tokenizer

    words, vectors = load_glove(config)  # refuses a missing or mismatched GloVe first, before reading the pairs
    pairs = read_parallel(parallel)
    tokenizer = source_tokenizer(words, config.lowercase)
    targets_tokenizer = target_tokenizer(pairs.targets, config)
    atomic_save(run / TOKENIZER, lambda tmp: tokenizer.save(str(tmp)))
    atomic_save(run / TARGET_TOKENIZER, lambda tmp: targets_tokenizer.save(str(tmp)))
    sources, targets = _encode(tokenizer, pairs.sources), _encode(targets_tokenizer, pairs.targets)
    words_in = sum(len(s) for s in sources)
    unknown = sum(s.count(1) for s in sources)
    cut = sum(1 for s, t in zip(sources, targets, strict=True) if len(s) > config.max_length or len(t) > config.max_length)
    if cut:
        warnings.warn(f"{parallel}: {cut:,} of {len(pairs):,} pairs have a side longer than model.max_length = {config.max_length} words, cut", stacklevel=2)
    console.print(f"GloVe: {len(words):,} words of {vectors.shape[1]} dimensions; {unknown / max(words_in, 1):.1%} of the {words_in:,} source words have no vector")
    seed_everything(config.seed)
    backbone = build_backbone(config)
    backbone.set_glove(embedding_matrix(vectors, config.vocabulary_size))
    metrics = {
        "glove_words": len(words), "glove_dim": int(vectors.shape[1]), "train_pairs": len(pairs), "pairs_cut": cut,
        "source_unknown_share": round(unknown / max(words_in, 1), 4), "target_vocabulary": targets_tokenizer.get_vocab_size(),
        "languages": "-".join(pairs.languages) if pairs.languages else None,
    }
    return backbone, sources, targets, metrics


def train_pairs(parallel: Path, dev: Path | None, run_dir: Path, config: CoVeConfig, console: Any, resume: bool = False) -> dict[str, Any]:
    """Train on ``parallel`` (module docstring); return the metrics: the mean training loss (nats
    per target word) of the first and last tenth of the steps, and with ``dev`` the dev loss
    before and after training.

    Raises:
        ConfigError: no ``model.glove``, or GloVe vectors of another dimension than ``model.glove_dim``.
        DataError: an unusable parallel, dev or GloVe file.
    """
    run = RunDir(run_dir)
    backbone, sources, targets, metrics = _prepare(run, parallel, config, console)
    model = translation_model(backbone, config)
    dev_ids = None
    if dev is not None:
        dev_pairs = read_parallel(dev)
        dev_ids = (_encode(run.load_tokenizer(), dev_pairs.sources), _encode(_load(run / TARGET_TOKENIZER), dev_pairs.targets))
        metrics["dev_loss_before"] = dev_loss(model, *dev_ids, config)
    losses = []
    started = time.perf_counter()
    for step in range(config.max_steps):
        rows = np.random.default_rng((config.seed, step)).integers(0, len(sources), config.batch_size)
        inputs, labels, weights = pack([sources[i] for i in rows], [targets[i] for i in rows], config.max_length)
        losses.append(float(model.train_on_batch(inputs, {"logits": labels}, sample_weight={"logits": weights})))
        if (step + 1) % max(1, config.max_steps // 10) == 0:
            console.print(f"step {step + 1}/{config.max_steps}: loss {np.mean(losses[-max(1, config.max_steps // 10):]):.3f}")
    seconds = time.perf_counter() - started
    tenth = max(1, config.max_steps // 10)
    metrics.update(
        steps=config.max_steps, train_seconds=round(seconds, 1), pairs_per_second=round(config.max_steps * config.batch_size / max(seconds, 1e-9), 1),
        train_loss_first=round(float(np.mean(losses[:tenth])), 4), train_loss_last=round(float(np.mean(losses[-tenth:])), 4),
        encoder_parameters=int(sum(np.prod(w.shape) for w in backbone.trainable_weights)),
    )
    if dev_ids is not None:
        metrics["dev_loss"] = dev_loss(model, *dev_ids, config)
    atomic_save(run / BACKBONE_WEIGHTS, lambda tmp: backbone.save_weights(str(tmp)))
    return metrics


def _load(path: Path) -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def dev_loss(model: Any, sources: list[list[int]], targets: list[list[int]], config: CoVeConfig) -> float:
    """The mean cross-entropy (nats) per target word (``</s>`` included) over every dev pair."""
    total, count = 0.0, 0.0
    for first in range(0, len(sources), 256):
        inputs, labels, weights = pack(sources[first : first + 256], targets[first : first + 256], config.max_length)
        logits = np.asarray(model(inputs, training=False)["logits"], np.float64)
        logits -= logits.max(-1, keepdims=True)
        nll = np.log(np.exp(logits).sum(-1)) - np.take_along_axis(logits, labels[..., None], -1)[..., 0]
        real = inputs["decoder_padding_mask"] > 0
        total, count = total + float(nll[real].sum()), count + float(real.sum())
    return round(total / max(count, 1.0), 4)
