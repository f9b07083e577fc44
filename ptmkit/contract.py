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

    Families of static word vectors list :data:`WORD_VECTORS` in ``provides`` and implement
    :meth:`load_word_vectors`; ``ptmkit evaluate``, ``ptmkit embed --words`` and ``ptmkit export
    --vectors`` / ``--onnx`` then serve them without knowing the family.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    config_class: ClassVar[type]
    provides: ClassVar[frozenset[str]] = frozenset()
    default_objectives: ClassVar[tuple[str, ...]] = ()
    input_names: ClassVar[tuple[str, ...]] = ("token_ids", "segment_ids", "padding_mask")
    trains_itself: ClassVar[bool] = False

    def train(self, corpus: Path, run_dir: Path, config: Any, console: Console) -> dict[str, Any]:
        """Train on ``corpus`` and write the family's files into ``run_dir`` (when ``trains_itself``).

        The core has created ``run_dir`` and written ``config.toml``; after this returns it writes
        ``metrics.json`` (the returned dict) and the manifest, last. If this raises, the core
        removes the run directory it created.

        Args:
            corpus: a text file (``.gz``/``.bz2`` too) or directory; read it with
                :func:`ptmkit.data.readers.read_corpus` (streamed, blank lines skipped).
            run_dir: the run directory.
            config: an instance of ``config_class``, validated.
            console: where progress lines go.

        Returns:
            dict of measured numbers (JSON-serialisable scalars): e.g. ``words_per_second``,
            ``vocabulary_size``, ``tokens``.

        Raises:
            DataError: an unusable corpus (one line naming the file, with what was seen).
            ConfigError: settings that cannot work together.
        """
        raise NotImplementedError

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


class Head:
    """A fine-tune head on top of a backbone (sequence classification, ...).

    Attributes:
        name: str. E.g. ``"classification"``.
        requires: frozenset of backbone capabilities it needs.
        config_class: dataclass of its hyper-parameters (section ``[head]``).
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    requires: ClassVar[frozenset[str]] = frozenset()
    config_class: ClassVar[type]

    def build(self, backbone: keras.Model, num_labels: int, config: Any) -> keras.Model:
        """Return a model taking the backbone's inputs and returning ``logits``,
        ``(batch, num_labels)`` float32."""
        raise NotImplementedError


class Record(NamedTuple):
    """One item of a corpus or labelled file: its 1-based line number, text and label (or None)."""

    line: int
    text: str
    label: str | None


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

