"""fastText's supervised classifier (Joulin et al. 2017, "Bag of Tricks for Efficient Text
Classification"): a text is the mean of its word rows (and hashed character n-gram and word n-gram
rows), a linear
layer without bias maps it to label scores, softmax loss (or one-vs-all: ``loss = "ova"``), SGD
with a learning rate decaying linearly to 0. Trained on ``__label__`` files (or TSV/CSV/JSON lines with ``label`` and ``text``).

Reference implementation: facebookresearch/fastText (``./fasttext supervised``): the defaults below
are its own (dim 100, lr 0.1, 5 epochs, minCount 1, wordNgrams 1, no character n-grams (minn 0,
maxn 0), 2,000,000 buckets); character n-gram rows are ``nwords + fnv1a(ngram) % bucket``
(``Dictionary::addSubwords``: a known word's own row then its n-grams, an unknown word its n-grams
only), word n-gram rows are ``nwords + h % bucket`` with
``h = h * 116049371 + hash(next word)`` over 64-bit unsigned arithmetic (``Dictionary::addWordNgrams``);
the input gradient is divided by the number of rows (``Model::update`` for supervised models),
which is what the mean's derivative gives. Examples are updated in mini-batches with a summed
loss, so each example moves the parameters by its own full step, as in fastText's per-example
updates.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from ptmkit.api import ConfigError, DataError
from ptmkit_export.bag_of_rows import EOS, pad_rows
from ptmkit_fasttext.subwords import fnv1a, ngram_rows

NGRAM_MULTIPLIER = 116049371
#: fastText's ``-loss`` values this plugin trains, and the activation that turns each one's logits
#: into probabilities (``Loss::computeOutput``: softmax, or a sigmoid per label).
LOSS_ACTIVATIONS = {"softmax": "softmax", "ova": "sigmoid"}


@dataclasses.dataclass
class FastTextClassifierConfig:
    """fastText supervised hyper-parameters (``[model]``).

    Attributes:
        vector_size: dimensions of the word rows.
        word_ngrams: longest word n-gram (1: words only, 2: words and bigrams).
        minn: shortest character n-gram (with ``maxn > 0``).
        maxn: longest character n-gram (0: none, fastText's supervised default).
        bucket: hash buckets for word and character n-grams (used when ``word_ngrams > 1`` or
            ``maxn > 0``; both kinds share them, as in fastText).
        min_count: rarer words are dropped.
        epochs: passes over the training file.
        learning_rate: initial SGD learning rate, decaying linearly to 0.
        batch_size: examples per step (summed loss: each example takes a full step).
        dev: a labelled file to measure accuracy on after training ("" for none).
        lowercase: lower-case the texts.
        seed: initialisation and shuffling.
        loss: fastText's ``-loss``: ``softmax`` (one label per text; a line with several trains
            on one drawn per epoch) or ``ova`` (one-vs-all, ``Loss::OneVsAllLoss``: a sigmoid per
            label and binary cross-entropy summed over all labels, every label of a line a
            positive: multi-label; probabilities are per-label sigmoids).
        eos: end every text with fastText's end-of-line word ``</s>``, as fastText reads every
            line (its row is in every text's mean); ``ova`` always does (:attr:`end_of_line`).
            Off by default for ``softmax``, as runs before the key were trained; on for models
            imported from a fastText ``.bin``.
    """

    vector_size: int = 100
    word_ngrams: int = 1
    minn: int = 0
    maxn: int = 0
    bucket: int = 2_000_000
    min_count: int = 1
    epochs: int = 5
    learning_rate: float = 0.1
    batch_size: int = 16
    dev: str = ""
    lowercase: bool = False
    seed: int = 1
    loss: str = "softmax"
    eos: bool = False

    def validate(self) -> None:
        if self.loss not in LOSS_ACTIVATIONS:
            raise ConfigError(f"config key 'model.loss' = {self.loss!r}: expected one of {', '.join(map(repr, LOSS_ACTIVATIONS))} (fastText's -loss)")
        for name in ("vector_size", "word_ngrams", "min_count", "epochs", "learning_rate", "batch_size"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"config key 'model.{name}' must be > 0, got {getattr(self, name)}")
        if self.minn < 0 or self.maxn < 0:
            raise ConfigError(f"config keys 'model.minn' = {self.minn} and 'model.maxn' = {self.maxn} must be >= 0")
        if self.maxn and not 1 <= self.minn <= self.maxn:
            raise ConfigError(f"config keys 'model.minn' = {self.minn} and 'model.maxn' = {self.maxn}: need 1 <= minn <= maxn (or maxn = 0)")
        if (self.word_ngrams > 1 or self.maxn > 0) and self.bucket <= 0:
            raise ConfigError("config key 'model.bucket' must be > 0 when 'model.word_ngrams' > 1 or 'model.maxn' > 0")

    @property
    def end_of_line(self) -> bool:
        """Whether texts end with fastText's ``</s>`` word: for ``ova``, as fastText reads every
        line (its row is then shared by all texts, a learned bias of each label, which one-vs-all
        needs: without it, ptmkit's ova reached 0.35 dev accuracy where fastText reached 0.43 on
        WordNet supersenses, 43 labels; with it 0.46). ``softmax`` runs with ``eos`` only, as
        runs before the key were trained."""
        return self.eos or self.loss == "ova"

    def tokens(self, text: str) -> list[str]:
        """The words of ``text`` as training and serving read them: lower-cased when configured,
        split at whitespace, then ``</s>`` when :attr:`end_of_line`."""
        words = (text.lower() if self.lowercase else text).split()
        return [*words, EOS] if self.end_of_line else words

    @property
    def buckets(self) -> int:
        """Hash rows after the word rows: ``bucket`` when any n-grams are used, else 0."""
        return self.bucket if self.word_ngrams > 1 or self.maxn > 0 else 0


def text_rows(words: list[str], index: dict[str, int], word_ngrams: int, bucket: int, minn: int = 0, maxn: int = 0) -> list[int]:
    """Input rows of a text (fastText's ``Dictionary::getLine`` for supervised models).

    For each word in order: an in-vocabulary word's row, then (``maxn > 0``) its character n-gram
    rows (``addSubwords``; an out-of-vocabulary word contributes its n-gram rows only); then the
    word n-gram rows (``addWordNgrams``, over the hashes of all its words, known or not).

    Args:
        words: the text's tokens.
        index: word -> row of the vocabulary (rows ``0 .. len(index) - 1``).
        word_ngrams: longest word n-gram (1: none).
        bucket: hashed rows after the word rows.
        minn, maxn: character n-gram lengths (``maxn = 0``: none).

    Returns:
        list of int rows in ``[0, len(index) + bucket)``.
    """
    rows: list[int] = []
    for w in words:
        if w in index:
            rows.append(index[w])
        if maxn > 0:
            rows.extend(ngram_rows(w, minn, maxn, bucket, len(index)))
    if word_ngrams > 1:
        hashes = [fnv1a(w.encode("utf-8")) for w in words]
        nwords = len(index)
        for i in range(len(hashes)):
            h = hashes[i]
            for j in range(i + 1, min(len(hashes), i + word_ngrams)):
                h = (h * NGRAM_MULTIPLIER + hashes[j]) & 0xFFFFFFFFFFFFFFFF
                rows.append(nwords + h % bucket)
    return rows


def row_embedding(rows: int, vector_size: int, name: str) -> Any:
    """An ``Embedding`` whose lookup gathers only the rows asked for (TensorFlow's
    ``ResourceGather``). Keras' own reads the whole matrix first, which TensorFlow then copies
    before the same step's sparse update writes it: 80 ms a step for 2,000,000 x 100 rows
    (fastText's buckets), 3.7 ms this way."""
    import keras

    class Embedding(keras.layers.Embedding):  # type: ignore[misc]  # the class name keys the weights file: same as Keras'
        def call(self, inputs: Any) -> Any:
            if keras.backend.backend() != "tensorflow":
                return super().call(inputs)
            import tensorflow as tf

            return tf.nn.embedding_lookup(self.embeddings.value, inputs)

    return Embedding(rows, vector_size, name=name)


def build_classifier(rows: int, vector_size: int, labels: int, initial: np.ndarray | None = None) -> Any:
    """``row_ids``/``row_mask`` ``(batch, n)`` -> ``logits`` ``(batch, labels)``: masked mean of the
    rows, then a linear map without bias (fastText's output matrix, zero-initialised)."""
    import keras

    row_ids = keras.Input(shape=(None,), dtype="int32", name="row_ids")
    row_mask = keras.Input(shape=(None,), dtype="float32", name="row_mask")
    embedding = row_embedding(rows, vector_size, name="input_rows")
    total = keras.ops.einsum("bn,bnd->bd", row_mask, embedding(row_ids))
    mean = total / keras.ops.maximum(keras.ops.sum(row_mask, axis=1, keepdims=True), 1.0)
    logits = keras.layers.Dense(labels, use_bias=False, kernel_initializer="zeros", name="output")(mean)
    model = keras.Model({"row_ids": row_ids, "row_mask": row_mask}, logits, name="fasttext_classifier")
    if initial is not None:
        embedding.set_weights([initial])
    return model


def draw_targets(targets: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """One label id per example, drawn uniformly among the example's labels: fastText's rule for
    a line with several labels under softmax loss (``FastText::supervised``:
    ``uniform_int_distribution(0, labels.size() - 1)`` at every update).

    Args:
        targets: each example's label ids, ``(labels of the example,)`` int arrays, non-empty.
        rng: draws ``rng.integers(0, lengths)``, one number per example.

    Returns:
        ``(examples,)`` int32.
    """
    lengths = np.asarray([len(t) for t in targets])
    choice = rng.integers(0, lengths)
    return np.asarray([t[c] for t, c in zip(targets, choice, strict=True)], np.int32)


def label_matrix(y: np.ndarray | list[np.ndarray], num_labels: int) -> np.ndarray:
    """``(examples, num_labels)`` float32 targets: 1 for each of an example's labels, else 0.

    Args:
        y: ``(examples,)`` int label ids, or each example's label ids (int arrays).
    """
    targets = [np.atleast_1d(t) for t in y]
    matrix = np.zeros((len(targets), num_labels), np.float32)
    for i, t in enumerate(targets):
        matrix[i, t] = 1.0
    return matrix


def one_vs_all_loss() -> Any:
    """fastText's ``OneVsAllLoss``: ``sum over labels of -log(sigmoid(z))`` for positives and
    ``-log(1 - sigmoid(z))`` for the others, summed over the batch too (each example and label
    takes its full SGD step, as fastText's per-example ``binaryLogistic`` updates; its gradient
    ``sigmoid(z) - target`` is theirs). Keras' ``BinaryCrossentropy`` averages over the labels,
    which would scale the step by ``1 / labels``."""
    import keras

    class OneVsAll(keras.losses.Loss):  # type: ignore[misc]
        def call(self, y_true: Any, logits: Any) -> Any:
            return keras.ops.sum(keras.ops.binary_crossentropy(y_true, logits, from_logits=True), axis=-1)

    return OneVsAll(reduction="sum", name="one_vs_all")


def fit_classifier(
    features: list[list[int]], y: np.ndarray | list[np.ndarray], initial: np.ndarray, num_labels: int, config: FastTextClassifierConfig, rng: np.random.Generator, console: Console
) -> tuple[Any, float]:
    """Train the classifier: ``config.epochs`` passes in a new random order each, mini-batches of
    ``config.batch_size`` examples with a summed loss, SGD decaying linearly from
    ``config.learning_rate`` to 0 (fastText's ``Model::update``; the output matrix starts at 0).
    The loss is ``config.loss``'s: softmax cross-entropy, or for ``ova`` the binary cross-entropy
    of each label's sigmoid summed over all labels (``OneVsAllLoss::forward``: every label a
    ``binaryLogistic`` step, positive when it is one of the example's labels).

    Args:
        features: each example's rows (:func:`text_rows`).
        y: ``(examples,)`` int32 label ids, or each example's label ids (a list of int arrays):
            then every epoch, after drawing its order, draws one label per example uniformly
            (:func:`draw_targets`, fastText's rule for lines with several labels under softmax);
            under ``ova`` all of an example's labels are its positives.
        initial: ``(rows, vector_size)`` float32 initial input matrix.
        num_labels: output columns.
        rng: draws the example orders.

    Returns:
        ``(model, mean training loss of the last epoch)``.
    """
    import keras

    model = build_classifier(initial.shape[0], initial.shape[1], num_labels, initial)
    steps = config.epochs * math.ceil(len(features) / config.batch_size)
    schedule = keras.optimizers.schedules.PolynomialDecay(config.learning_rate, steps, end_learning_rate=0.0, power=1.0)
    ova = config.loss == "ova"
    model.compile(optimizer=keras.optimizers.SGD(schedule), loss=one_vs_all_loss() if ova else keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum"))
    multi_hot = label_matrix(y, num_labels) if ova else None
    total = 0.0
    for epoch in range(config.epochs):
        order = rng.permutation(len(features))
        labels = multi_hot if multi_hot is not None else y if isinstance(y, np.ndarray) else draw_targets(y, rng)
        total = 0.0
        for start in range(0, len(order), config.batch_size):
            batch = order[start : start + config.batch_size]
            total += float(model.train_on_batch(pad_rows([features[i] for i in batch]), labels[batch]))
        console.print(f"epoch {epoch + 1}/{config.epochs}: loss {total / len(features):.4f}")
        if not math.isfinite(total):
            raise ConfigError(
                f"training diverged in epoch {epoch + 1} (loss {total}) with learning_rate {config.learning_rate:g}, batch_size {config.batch_size} and "
                f"loss {config.loss!r}: a batch's summed steps overshoot; lower the learning rate or the batch size (fastText's updates are batch_size 1)"
            )
    return model, total / len(features)


def train_classifier(corpus: Path, run_dir: Path, config: FastTextClassifierConfig, console: Console) -> dict[str, Any]:
    """Train on a labelled file; write ``vocabulary.tsv``, ``labels.json``, ``classifier.weights.h5``.

    Every label of a line counts, as in fastText: the label set holds them all, and a line with
    several trains, at each epoch, on one of them drawn uniformly (:func:`draw_targets`), or
    under ``loss = "ova"`` on all of them at once. The dev accuracy is fastText's precision at 1:
    the top label is right when it is one of the line's; ``ova`` adds precision and recall of the
    labels whose sigmoid is >= 0.5 (``fasttext test FILE -1 0.5``).

    Raises:
        DataError: an unreadable labelled file, or one without labels.
    """
    from ptmkit.api import (
        Vocabulary,
        atomic_save,
        atomic_write_json,
        quiet_tensorflow,
        read_multilabelled,
        save_model_weights,
        seed_everything,
    )

    quiet_tensorflow()
    seed_everything(config.seed)
    texts, label_sets = read_multilabelled(corpus)
    split = [config.tokens(t) for t in texts]
    counts = Counter(w for words in split for w in words)
    kept = sorted(((w, c) for w, c in counts.items() if c >= config.min_count), key=lambda item: -item[1])
    vocabulary = Vocabulary([w for w, _ in kept], np.asarray([c for _, c in kept], np.int64), sum(counts.values()), len(counts), len(texts))
    names = sorted({label for labels in label_sets for label in labels})
    if len(names) < 2:
        raise DataError(f"{corpus}: needs at least two labels to train a classifier, found {names}")
    label_id = {name: i for i, name in enumerate(names)}
    buckets = config.buckets
    features = [text_rows(words, vocabulary.index, config.word_ngrams, buckets, config.minn, config.maxn) for words in split]
    multi = sum(len(labels) > 1 for labels in label_sets)
    targets = [np.asarray([label_id[label] for label in labels], np.int32) for labels in label_sets]
    y: np.ndarray | list[np.ndarray] = targets if multi or config.loss == "ova" else np.concatenate(targets)
    rng = np.random.default_rng(config.seed)
    rows = len(vocabulary) + buckets
    initial = rng.uniform(-1.0 / config.vector_size, 1.0 / config.vector_size, (rows, config.vector_size)).astype(np.float32)
    several = f" ({multi:,} with several labels: {'all positives' if config.loss == 'ova' else 'one drawn per epoch'})" if multi else ""
    console.print(f"{len(texts):,} training texts{several}, {len(names)} labels, {len(vocabulary):,} words, {buckets:,} n-gram buckets")
    model, loss = fit_classifier(features, y, initial, len(names), config, rng, console)
    metrics: dict[str, Any] = {"train_examples": len(texts), "labels": len(names), "multi_label_examples": multi, "vocabulary_size": len(vocabulary), "final_train_loss": round(loss, 4)}
    if config.dev:
        majority = Counter(label for labels in label_sets for label in labels).most_common(1)[0][0]
        metrics.update(_dev_metrics(model, config, vocabulary.index, names, majority))
        console.print(f"dev accuracy {metrics['dev_accuracy']} ({metrics['dev_examples']:,} texts; majority class {metrics['dev_majority_baseline']})")
    vocabulary.save(run_dir / "vocabulary.tsv")
    atomic_write_json(run_dir / "labels.json", names)
    atomic_save(run_dir / "classifier.weights.h5", lambda tmp: save_model_weights(model, tmp))
    return metrics


def _dev_metrics(model: Any, config: FastTextClassifierConfig, index: dict[str, int], names: list[str], majority: str) -> dict[str, Any]:
    """Accuracy (precision at 1 for lines with several labels), macro-F1 and the majority-class
    baseline on ``config.dev``."""
    from ptmkit.api import macro_f1, read_multilabelled, top1_gold

    dev_texts, dev_labels = read_multilabelled(config.dev)
    unknown = sorted({label for labels in dev_labels for label in labels} - set(names))
    dev_features = [text_rows(config.tokens(t), index, config.word_ngrams, config.buckets, config.minn, config.maxn) for t in dev_texts]
    logits = model.predict(pad_rows(dev_features), batch_size=256, verbose=0)
    predicted = np.argmax(logits, axis=1)
    gold = top1_gold(predicted, dev_labels, names)
    extra = multilabel_scores(logits >= 0.0, dev_labels, names) if config.loss == "ova" else {}
    return extra | {
        "dev_examples": len(dev_texts),
        "dev_accuracy": round(float(np.mean(predicted == gold)), 4),
        "dev_macro_f1": round(macro_f1(gold, predicted, len(names)), 4),
        "dev_majority_baseline": round(float(np.mean([majority in labels for labels in dev_labels])), 4),
        "dev_labels_unseen_in_training": unknown,
    }


def multilabel_scores(chosen: np.ndarray, gold: list[list[str]], names: list[str]) -> dict[str, float]:
    """Micro precision and recall of the chosen labels (fastText's ``fasttext test FILE -1 0.5``
    for an ``ova`` model: the labels whose sigmoid is >= 0.5, i.e. logit >= 0).

    Args:
        chosen: ``(examples, labels)`` bool.
        gold: each example's label names (names not in ``names`` count as missed).
    """
    index = {name: i for i, name in enumerate(names)}
    truth = np.zeros_like(chosen, dtype=bool)
    for i, labels in enumerate(gold):
        truth[i, [index[label] for label in labels if label in index]] = True
    hits = int(np.sum(chosen & truth))
    wanted = sum(len(labels) for labels in gold)
    return {"dev_precision_at_0.5": round(hits / max(1, int(chosen.sum())), 4), "dev_recall_at_0.5": round(hits / max(1, wanted), 4)}


def featurizer_arguments(config: FastTextClassifierConfig) -> dict[str, Any]:
    """The run's :class:`ptmkit_export.bag_of_rows.BagOfRows` arguments (besides the words)."""
    return {"lowercase": config.lowercase, "minn": config.minn, "maxn": config.maxn, "bucket": config.buckets, "word_ngrams": config.word_ngrams, "end_of_line": config.end_of_line}


def load_row_classifier(run_dir: Path) -> Any:
    """A finished ``fasttext-supervised`` run (trained, or fine-tuned from word vectors) as a
    :class:`ptmkit.contract.RowClassifier`: its config's ``[model]``, ``vocabulary.tsv``,
    ``labels.json`` and ``classifier.weights.h5``.

    Raises:
        RunDirError: a missing or corrupted file.
        ConfigError: an invalid ``config.toml``.
    """
    from ptmkit.api import (
        RowClassifier,
        RunDir,
        RunDirError,
        Vocabulary,
        build_dataclass,
        load_weights,
        quiet_tensorflow,
        read_toml,
    )

    quiet_tensorflow()
    run = RunDir(run_dir)
    manifest = run.manifest()
    config_file = run.require("config.toml")
    config = build_dataclass(FastTextClassifierConfig, read_toml(config_file).get("model"), "model", str(config_file))
    vocabulary = Vocabulary.load(run.require("vocabulary.tsv"))
    labels = run.read_json("labels.json")
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        raise RunDirError(f"{run / 'labels.json'}: expected a list of label names")
    model = build_classifier(len(vocabulary) + config.buckets, config.vector_size, len(labels))
    load_weights(model, run.require("classifier.weights.h5"))
    dev = manifest.get("dev") or config.dev or None
    input_matrix = model.get_layer("input_rows").get_weights()[0]
    output_matrix = model.get_layer("output").get_weights()[0]
    return RowClassifier(model, input_matrix, output_matrix, vocabulary.words, labels, featurizer_arguments(config), dev, LOSS_ACTIVATIONS[config.loss])


def save_imported_classifier(model: Any, source: Path, out: Path) -> dict[str, Any]:
    """Write a fastText supervised ``.bin`` (:class:`ptmkit_fasttext.binfile.FastTextModel`) as a
    ``fasttext-supervised`` run in the existing empty directory ``out``: ``vocabulary.tsv`` (its
    words, ``</s>`` included), ``labels.json`` (its labels in output-row order, without
    ``__label__``), ``config.toml`` (``[model]``: its dim, n-gram settings and loss, ``eos =
    true``: fastText reads every line's end as ``</s>``) and ``classifier.weights.h5`` (its input
    matrix and output matrix, transposed). Predictions then equal ``fasttext predict``'s: a
    softmax, or for ``-loss ova`` a sigmoid per label (fastText's own looks the sigmoid up in a
    512-entry table, up to 0.0078 away).

    Raises:
        DataError: a loss other than softmax or ova (``hs``, ``ns``), or word n-grams
            (``wordNgrams > 1``: fastText sign-extends 32-bit word hashes into its 64-bit n-gram
            hash; ptmkit's rows do not, so about half of the bigrams would read other rows).
    """
    from ptmkit.api import Vocabulary, atomic_save, atomic_write_json, atomic_write_text

    args = model.args
    if args["loss"] not in LOSS_ACTIVATIONS:
        raise DataError(f"{source}: a -loss {args['loss']} classifier; ptmkit serves fastText classifiers trained with -loss {' or '.join(LOSS_ACTIVATIONS)}")
    if int(args["word_ngrams"]) > 1:
        raise DataError(
            f"{source}: wordNgrams {args['word_ngrams']}: fastText sign-extends 32-bit word hashes into its word n-gram hash and ptmkit's "
            "featurizer does not yet, so its bigram rows would differ; only wordNgrams 1 models import as classifiers"
        )
    minn, maxn, bucket = int(args["minn"]), int(args["maxn"]), int(args["bucket"])
    config = FastTextClassifierConfig(vector_size=int(args["dim"]), minn=minn if maxn else 0, maxn=maxn, bucket=bucket if maxn else 0, loss=str(args["loss"]), eos=True)
    config.validate()
    rows = len(model.words) + config.buckets
    input_matrix = model.input[:rows]  # without n-grams fastText may keep bucket rows nothing reads
    labels = [label.removeprefix("__label__") for label in model.labels]
    keras_model = build_classifier(rows, config.vector_size, len(labels), np.asarray(input_matrix, np.float32))
    keras_model.get_layer("output").set_weights([np.ascontiguousarray(model.output.T, np.float32)])
    Vocabulary(model.words, model.counts, model.ntokens, len(model.words), 0).save(out / "vocabulary.tsv")
    atomic_write_json(out / "labels.json", labels)
    atomic_save(out / "classifier.weights.h5", lambda tmp: keras_model.save_weights(str(tmp)))
    values = {k: v for k, v in dataclasses.asdict(config).items() if k not in ("dev",)}
    body = "".join(f"{k} = {str(v).lower() if isinstance(v, bool) else repr(v) if isinstance(v, str) else v}\n" for k, v in values.items())
    atomic_write_text(out / "config.toml", f'family = "fasttext-supervised"\n# imported from {source.resolve()}\n\n[model]\n{body}')
    return {"words": len(model.words), "labels": len(labels), "dim": config.vector_size, "loss": config.loss, "minn": config.minn, "maxn": maxn, "bucket": config.buckets}
