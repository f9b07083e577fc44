"""What a plugin provides: model families, objectives, heads and corpus readers.

These are plain classes a plugin subclasses (or instantiates) and returns from its hooks (see
:mod:`ptmkit.hookspecs`). Nothing here imports TensorFlow or Keras: a plugin is loaded cheaply and
only the stage that needs a backbone builds one.

Capabilities tie the pieces together without the core knowing any model by name: a family lists
what its backbone ``provides`` (e.g. ``sequence_output``, ``pooled_output``, ``token_embedding``);
objectives and heads list what they ``require``. An objective or head serves every family whose
backbone provides what it requires.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

if TYPE_CHECKING:
    import keras
    import numpy as np
    import tokenizers
    from rich.console import Console

    from ptmkit.wordvectors import WordVectors


# Capability names a backbone can provide.
SEQUENCE_OUTPUT = "sequence_output"  # (batch, sequence, hidden) float
POOLED_OUTPUT = "pooled_output"  # (batch, hidden) float
TOKEN_EMBEDDING = "token_embedding"  # the backbone's token-embedding layer, for tied output heads
WORD_VECTORS = "word_vectors"  # static word vectors: the family implements ModelFamily.load_word_vectors
ROW_CLASSIFIER = "row_classifier"  # its runs classify bags of rows: the family implements ModelFamily.load_row_classifier


class RowClassifier(NamedTuple):
    """A trained text classifier over bags of matrix rows (fastText's supervised model, Joulin et
    al. 2017), as ``ptmkit export`` needs it; see :mod:`ptmkit_export.bag_of_rows` for how texts
    become rows.

    Its logits are ``mean(input_matrix[rows of the text]) @ output_matrix`` (the mean over the
    rows whose ``row_mask`` is 1; the zero vector for a text without rows).

    Attributes:
        model: a ``keras.Model`` computing that, with inputs ``row_ids`` ``(batch, n)`` int32 and
            ``row_mask`` ``(batch, n)`` float32 (1 on real rows) and one output, ``(batch,
            len(labels))`` float32 logits; the export checks its ONNX graph against it.
        input_matrix: ``(rows, dim)`` float32: word rows, then hashed rows.
        output_matrix: ``(dim, len(labels))`` float32.
        words: the vocabulary; ``words[i]`` owns row ``i``; hashed rows follow.
        labels: label names, index = logit column.
        featurizer: the keyword arguments of :class:`ptmkit_export.bag_of_rows.BagOfRows` besides
            ``words``: ``lowercase``, ``minn``, ``maxn``, ``bucket``, ``word_ngrams``.
        dev: the labelled dev file the run was measured on, or None.
    """

    model: Any
    input_matrix: np.ndarray
    output_matrix: np.ndarray
    words: list[str]
    labels: list[str]
    featurizer: dict[str, Any]
    dev: str | None


class SpecialTokens(NamedTuple):
    """Ids of the special tokens a family's tokenizer defines (``-1`` when it has none)."""

    pad: int
    unk: int
    cls: int
    sep: int
    mask: int


class ModelFamily:
    """A model family: its config, backbone, tokenizer and the heads/objectives that fit it.

    Subclass and set the class attributes; return an instance from
    :func:`~ptmkit.hookspecs.ptmkit_model_families`.

    Attributes:
        name: str. What users type (``ptmkit train NAME``); unique across installed plugins.
        description: str. One line for ``ptmkit plugins``.
        config_class: a dataclass type holding the family's hyper-parameters (the ``[model]``
            section of a run config). It may define ``validate(self) -> None`` raising
            :class:`ptmkit.errors.ConfigError`.
        provides: frozenset of capability names the backbone offers.
        default_objectives: tuple of objective names used when the user names none.
        input_names: tuple of the backbone's input names, in order (``token_ids``,
            ``segment_ids``, ``padding_mask`` for BERT), each ``(batch, sequence)`` int32.
        trains_itself: bool. True when the family brings its own training loop (:meth:`train`):
            ``ptmkit train NAME`` then calls it instead of the generic tokenizer + objectives
            pre-training loop (static word vectors: word2vec's SGD over word windows, GloVe's
            AdaGrad over co-occurrence counts). Such a family reads all its hyper-parameters,
            training ones included, from its ``config_class`` (the ``[model]`` section).
        resumable: bool. A family that trains itself and saves checkpoints in its run directory:
            ``ptmkit train NAME --resume`` calls :meth:`train` with ``resume=True``, and an
            interrupted run's directory is kept when :meth:`has_checkpoint` says there is one
            to continue from (else removed, as for other families that train themselves).

    Families of static word vectors list :data:`WORD_VECTORS` in ``provides`` and implement
    :meth:`load_word_vectors`; ``ptmkit evaluate``, ``ptmkit embed --words`` and ``ptmkit export
    --vectors`` / ``--onnx`` then serve them without knowing the family. Families whose runs are
    bag-of-rows text classifiers list :data:`ROW_CLASSIFIER` and implement
    :meth:`load_row_classifier`; ``ptmkit export`` then writes their ONNX model and featurizer.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    config_class: ClassVar[type]
    provides: ClassVar[frozenset[str]] = frozenset()
    default_objectives: ClassVar[tuple[str, ...]] = ()
    input_names: ClassVar[tuple[str, ...]] = ("token_ids", "segment_ids", "padding_mask")
    trains_itself: ClassVar[bool] = False
    resumable: ClassVar[bool] = False

    def train(self, corpus: Path, run_dir: Path, config: Any, console: Console, resume: bool = False) -> dict[str, Any]:
        """Train on ``corpus`` and write the family's files into ``run_dir`` (when ``trains_itself``).

        The core has created ``run_dir`` and written ``config.toml``; after this returns it writes
        ``metrics.json`` (the returned dict) and the manifest, last. If this raises, the core
        removes the run directory it created, unless the family is ``resumable`` and
        :meth:`has_checkpoint`.

        Args:
            corpus: a text file (``.gz``/``.bz2`` too) or directory; read it with
                :func:`ptmkit.data.readers.read_corpus` (streamed, blank lines skipped).
            run_dir: the run directory.
            config: an instance of ``config_class``, validated.
            console: where progress lines go.
            resume: continue from the checkpoint in ``run_dir`` (only passed, as ``True``, to
                ``resumable`` families, and only when :meth:`has_checkpoint`).

        Returns:
            dict of measured numbers (JSON-serialisable scalars): e.g. ``words_per_second``,
            ``vocabulary_size``, ``tokens``.

        Raises:
            DataError: an unusable corpus (one line naming the file, with what was seen).
            ConfigError: settings that cannot work together.
        """
        raise NotImplementedError

    def has_checkpoint(self, run_dir: Path) -> bool:
        """Whether ``run_dir`` holds a checkpoint :meth:`train` can resume from (``resumable``
        families); False by default."""
        return False

    def load_word_vectors(self, run_dir: Path) -> WordVectors:
        """The static word vectors of a finished run of this family (families providing
        :data:`WORD_VECTORS`).

        Returns:
            a :class:`ptmkit.wordvectors.WordVectors`: words most frequent first, the ``(rows,
            dim)`` float32 lookup matrix and each word's rows (one row; a subword family's
            ``rows`` also answers out-of-vocabulary words).

        Raises:
            RunDirError: missing or corrupted files.
        """
        raise NotImplementedError

    def load_row_classifier(self, run_dir: Path) -> RowClassifier:
        """The trained classifier of a finished run of this family (families providing
        :data:`ROW_CLASSIFIER`), weights loaded.

        Raises:
            RunDirError: missing or corrupted files.
        """
        raise NotImplementedError

    def build_backbone(self, config: Any) -> keras.Model:
        """Build the backbone (a functional ``keras.Model``) from ``config``."""
        raise NotImplementedError

    def train_tokenizer(self, texts: Iterable[str], config: Any) -> tokenizers.Tokenizer:
        """Train a tokenizer on a stream of texts; its post-processor adds the family's specials."""
        raise NotImplementedError

    def special_tokens(self, tokenizer: tokenizers.Tokenizer) -> SpecialTokens:
        """Return the ids of the special tokens in ``tokenizer``."""
        raise NotImplementedError

    def pack(
        self, first: list[int], second: list[int] | None, sequence_length: int, specials: SpecialTokens
    ) -> tuple[list[int], list[int]]:
        """Pack one or two segments of token ids (without specials) into ``(token_ids, segment_ids)``.

        The result is at most ``sequence_length`` long and not padded; the caller truncates the
        segments so that they fit (:meth:`num_special_tokens` tells how many specials are added).
        """
        raise NotImplementedError

    def num_special_tokens(self, pair: bool) -> int:
        """How many special tokens :meth:`pack` adds to one segment (``pair=False``) or two."""
        raise NotImplementedError


class WordVectorFamily(ModelFamily):
    """A family of static word vectors that trains itself (:attr:`ModelFamily.trains_itself`).

    Provides :data:`WORD_VECTORS`; inputs ``row_ids``/``row_mask`` (the rows summed into a word's
    vector: one for a word, its n-grams too for a subword family); :meth:`load_word_vectors`
    reads the run's ``vocabulary.tsv`` and vector matrix with
    :func:`ptmkit.wordvectors.load_run_vectors`. Subclasses set ``name``, ``description``,
    ``config_class`` and implement :meth:`ModelFamily.train`.
    """

    provides: ClassVar[frozenset[str]] = frozenset({WORD_VECTORS})
    input_names: ClassVar[tuple[str, ...]] = ("row_ids", "row_mask")
    trains_itself: ClassVar[bool] = True

    def load_word_vectors(self, run_dir: Path) -> WordVectors:
        from ptmkit.wordvectors import load_run_vectors

        return load_run_vectors(run_dir)

    def has_checkpoint(self, run_dir: Path) -> bool:
        """Whether ``run_dir`` holds an epoch checkpoint
        (:class:`ptmkit.training.wordvectors.EpochCheckpoints`, where the in-tree families that
        set ``resumable`` save theirs)."""
        from ptmkit.rundir import has_epoch_checkpoint

        return has_epoch_checkpoint(run_dir)


class Objective:
    """A pre-training objective (masked LM, next-sentence prediction, ...).

    An objective does two things: it adds inputs and targets to a packed batch (in NumPy, in the
    data pipeline), and it adds outputs, losses and metrics on top of a backbone.

    Attributes:
        name: str. E.g. ``"mlm"``; selected with ``--objective``.
        description: str.
        requires: frozenset of backbone capabilities it needs.
        config_class: dataclass of its hyper-parameters (section ``[objectives.NAME]``).
        needs_segment_pairs: bool. True when instances must be segment pairs with an
            ``is_random_next`` flag (next-sentence prediction).
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    requires: ClassVar[frozenset[str]] = frozenset()
    config_class: ClassVar[type]
    needs_segment_pairs: ClassVar[bool] = False

    def prepare(
        self,
        batch: Mapping[str, np.ndarray],
        rng: np.random.Generator,
        config: Any,
        specials: SpecialTokens,
        vocabulary_size: int,
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Return ``(inputs, targets, sample_weights)`` this objective adds to a packed batch.

        ``batch`` holds ``token_ids``, ``segment_ids``, ``padding_mask`` (``(batch, sequence)``
        int32) and ``is_random_next`` (``(batch,)`` int32). Returned ``inputs`` replace or extend
        the batch's model inputs (masked LM replaces ``token_ids``); ``targets`` and
        ``sample_weights`` are keyed by this objective's output names.
        """
        raise NotImplementedError

    def build(
        self, backbone: keras.Model, inputs: dict[str, Any], config: Any
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, list[Any]]]:
        """Return ``(extra_inputs, outputs, losses, metrics)`` on top of ``backbone``.

        ``inputs`` are the backbone's ``keras.Input`` tensors; ``extra_inputs`` are further
        ``keras.Input`` tensors this objective needs (masked LM's ``mask_positions``).
        ``outputs``, ``losses`` and ``metrics`` are keyed by output name.
        """
        raise NotImplementedError


class TrainedHead(NamedTuple):
    """What :meth:`Head.train` returns.

    Attributes:
        model_config: the ``[model]`` section of the fine-tuned run (a dict of scalars), a valid
            config of the head's :attr:`Head.run_family`.
        logits: a function from a list of texts to their ``(len(texts), labels)`` float32 logits;
            ``ptmkit finetune`` measures dev and test accuracy and macro-F1 with it.
    """

    model_config: dict[str, Any]
    logits: Callable[[list[str]], np.ndarray]


class Head:
    """A fine-tune head on top of a backbone (sequence classification, ...).

    Attributes:
        name: str. E.g. ``"classification"``.
        requires: frozenset of backbone capabilities it needs.
        config_class: dataclass of its hyper-parameters (section ``[head]``).
        trains_itself: bool. True for a head on static word vectors (``requires`` holds
            :data:`WORD_VECTORS`) with its own training loop (:meth:`train`) instead of a Keras
            model on a backbone; its hyper-parameters are all in ``config_class``.
        run_family: str. For a head that trains itself: the family whose runs it writes (one
            providing :data:`ROW_CLASSIFIER`, so that ``ptmkit export`` and ``ptmkit predict`` serve
            them).
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    requires: ClassVar[frozenset[str]] = frozenset()
    config_class: ClassVar[type]
    trains_itself: ClassVar[bool] = False
    run_family: ClassVar[str] = ""

    def build(self, backbone: keras.Model, num_labels: int, config: Any) -> keras.Model:
        """Return a model taking the backbone's inputs and returning ``logits``,
        ``(batch, num_labels)`` float32."""
        raise NotImplementedError

    def train(
        self, vectors: WordVectors, pretrained_config: Any, texts: list[str], label_ids: np.ndarray, labels: list[str], config: Any, run_dir: Path, console: Console
    ) -> TrainedHead:
        """Train a classifier initialised from ``vectors`` (heads that train themselves) and write
        its files into ``run_dir``.

        The core has read the labelled files and created ``run_dir``; after this returns it
        measures dev and test accuracy and macro-F1 with the returned ``logits`` and writes
        ``config.toml`` (family :attr:`run_family`, ``[model]`` the returned ``model_config``),
        ``labels.json``, ``metrics.json`` and the manifest, last.

        Args:
            vectors: the pre-trained run's word vectors (every row of its matrix).
            pretrained_config: the pre-trained run's ``[model]`` config (e.g. its ``lowercase``).
            texts: training texts.
            label_ids: ``(len(texts),)`` int32 indices into ``labels``.
            labels: label names, sorted.
            config: an instance of ``config_class``, validated.
            run_dir: the fine-tuned run directory.
            console: where progress lines go.

        Raises:
            ConfigError: settings that cannot work with these vectors.
        """
        raise NotImplementedError


class Record(NamedTuple):
    """One item of a corpus or labelled file: its 1-based line number, text and label (or None).

    ``labels`` holds every label of a line that has several (a fastText line
    ``__label__a __label__b text``: ``label == "a"``, ``labels == ("a", "b")``); it is empty when
    the reader gives one label only. :meth:`all_labels` gives either as a tuple.
    """

    line: int
    text: str
    label: str | None
    labels: tuple[str, ...] = ()

    def all_labels(self) -> tuple[str, ...]:
        """Every label of the item, in the line's order; ``()`` for an unlabelled one."""
        return self.labels or (() if self.label is None else (self.label,))


@dataclasses.dataclass(frozen=True)
class CorpusReader:
    """Reads one file format into :class:`Record` items.

    Attributes:
        name: str. E.g. ``"text"``, ``"fasttext"``, ``"tsv"``.
        suffixes: file suffixes it handles (``".tsv"``), compared after stripping ``.gz``/``.bz2``.
        read: callable ``(lines, source) -> Iterator[Record]``; ``lines`` iterates over the
            file's decoded lines (invalid UTF-8 replaced, line ends kept), ``source`` the file name for messages. It
            skips blank lines and raises :class:`ptmkit.errors.DataError` naming ``source`` and the
            line for malformed ones.
        labelled: bool. True when its records carry labels.
    """

    name: str
    suffixes: tuple[str, ...]
    read: Callable[[Iterable[str], str], Iterator[Record]]
    labelled: bool = False

