"""What a plugin provides: model families, objectives, heads and corpus readers.

These are plain classes a plugin subclasses (or instantiates) and returns from its hooks (see
:mod:`ptmkit.hookspecs`). Nothing here imports TensorFlow or Keras, nor any other ptmkit module:
a plugin is loaded cheaply and only the stage that needs a backbone builds one.

**Declarations.** A family *declares* what the core would otherwise have to assume, and the core
derives everything from the declaration: ``keras.Input`` tensors, the packed batch's fields, the
ONNX trace signature, the random inputs of the export's parity check, the export manifest (which
the runtime, the server and the Triton repository read), and the ONNX Runtime optimizer's model
type. A decoder that reads only token ids, with bos/eos tokens and 1,024 positions::

    class TinyGPT(ModelFamily):
        name = "tiny-gpt"
        config_class = TinyGPTConfig
        inputs = (InputSpec("token_ids", ("batch", "sequence"), "int32", field="ids"),)
        outputs = (OutputSpec("sequence_output", ("batch", "sequence", "hidden")),)
        special_token_names = {"bos": "<|endoftext|>", "eos": "<|endoftext|>"}

        def limits(self, config):
            return Limits(max_sequence_length=config.n_positions, vocabulary_size=config.vocab_size)

        def graph_optimizer(self, config):  # ONNX Runtime's fusions for GPT-2-like graphs
            return GraphOptimizer("gpt2", config.n_head, config.n_embd)

and a character-level encoder (ELMo's character CNN reads ``(batch, sequence, characters)``)::

    inputs = (
        InputSpec("char_ids", ("batch", "sequence", "characters"), field="char_ids", sizes={"characters": 50}),
        InputSpec("padding_mask", field="attention_mask"),
    )

An input's ``field`` says where its values come from: an attribute of a Hugging Face
``tokenizers.Encoding`` (``ids``, ``type_ids``, ``attention_mask``), ``char_ids`` (each token's
UTF-8 bytes, see :mod:`ptmkit_export.fields`), or a family's own featurizer (``row_ids``,
``row_mask`` of a bag-of-rows model; ``context_ids`` of an n-gram model).

**Capabilities.** What a family or head can do beyond building a backbone is a small
:class:`typing.Protocol`, checked with ``isinstance``: :class:`TrainsItself`, :class:`Resumable`,
:class:`ProvidesWordVectors`, :class:`ProvidesSentenceFeatures`, :class:`ClassifiesRows`, :class:`WritesOwnExport`, :class:`TrainsOnWordVectors`,
:class:`TrainsOnPairs`, :class:`EvaluatesPairs`,
:class:`ScoresHeldoutLines` (objectives), :class:`AttendsWithMask`, :class:`InitialisesOutputBias`, :class:`EmbedsLanguages` and :class:`TwoStreamAttention` (backbones), :class:`KeepsLayers`, :class:`PrunesHeads`, :class:`ReplacesModules`, :class:`SharesLayers`, :class:`ExposesAttention`,
:class:`SharesEmbeddings`. A family has the capability by defining the protocol's methods; there is no flag to keep in step.

**Matching.** Objectives and heads list the backbone capabilities they ``require`` (e.g.
``sequence_output``, ``pooled_output``, ``token_embedding``); a family offers its declared
outputs' names, its ``provides`` and :data:`WORD_VECTORS` when it :class:`ProvidesWordVectors`
(:func:`capabilities`). An objective or head serves every family that offers what it requires.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol, runtime_checkable

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
WORD_VECTORS = "word_vectors"  # static word vectors: offered by families that are ProvidesWordVectors
SELF_ATTENTION_MASK = "self_attention_mask"  # the backbone is an AttendsWithMask (UniLM's masks)
HIDDEN_STATES = "hidden_states"  # (batch, layers, sequence, hidden) float: each layer's states, for a scalar mix
POSITIONS_AND_LANGUAGES = "positions_and_languages"  # the backbone is an EmbedsLanguages (XLM's TLM)
TWO_STREAM_ATTENTION = "two_stream_attention"  # the backbone is a TwoStreamAttention (permutation LM's content and query streams)

#: The tokenizer fields the core and the runtime derive inputs from (:mod:`ptmkit_export.fields`).
TOKENIZER_FIELDS = ("ids", "type_ids", "attention_mask", "char_ids")
#: The roles a special token can have, each optional.
SPECIAL_TOKEN_ROLES = ("pad", "unk", "bos", "eos", "cls", "sep", "mask")


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One input of a family's backbone (and of its exported graph).

    Attributes:
        name: str. The ``keras.Input`` and ONNX graph input name (``token_ids``).
        axes: named axes, ``batch`` first: ``("batch", "sequence")`` or ``("batch", "sequence",
            "characters")``. Axes without a size in ``sizes`` are dynamic.
        dtype: ``"int32"`` (or ``"int64"``, ``"float32"``).
        field: where the values come from: one of :data:`TOKENIZER_FIELDS` (``ids`` token ids,
            ``type_ids`` segment ids, ``attention_mask`` 1 on tokens and 0 on padding,
            ``char_ids`` each token's UTF-8 bytes + 1, 0-padded to the ``characters`` size), or
            a family's own featurizer's field.
        sizes: fixed sizes of axes other than ``batch`` (``{"characters": 50}``).
    """

    name: str
    axes: tuple[str, ...] = ("batch", "sequence")
    dtype: str = "int32"
    field: str = "ids"
    sizes: Mapping[str, int] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.axes or self.axes[0] != "batch":
            raise ValueError(f"input {self.name!r}: axes must start with 'batch', got {self.axes}")
        unknown = set(self.sizes) - set(self.axes[1:])
        if unknown:
            raise ValueError(f"input {self.name!r}: sizes name axes it does not have: {sorted(unknown)}")

    @property
    def shape(self) -> tuple[int | None, ...]:
        """The shape without the batch axis, ``None`` for dynamic axes (a ``keras.Input`` shape)."""
        return tuple(self.sizes.get(axis) for axis in self.axes[1:])


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    """One output of a family's backbone (its output dict's key).

    Attributes:
        name: str. E.g. ``sequence_output``; also a capability objectives and heads can require.
        axes: named axes, e.g. ``("batch", "sequence", "hidden")`` or ``("batch", "hidden")``.
        dtype: ``"float32"`` unless the backbone says otherwise.
    """

    name: str
    axes: tuple[str, ...]
    dtype: str = "float32"


class Limits(NamedTuple):
    """What the model's weights allow, from its config (``None``: unbounded or unknown).

    Attributes:
        max_sequence_length: the most tokens a sequence may hold (a transformer's position
            embeddings; an imported checkpoint's ``max_position_embeddings``). Training and
            fine-tuning lengths, export trace and parity shapes stay within it.
        vocabulary_size: token ids are in ``[0, vocabulary_size)``.
        max_sequence_length_key: the config key the length limit comes from, for messages
            (``"model.max_sequence_length"``).
    """

    max_sequence_length: int | None = None
    vocabulary_size: int | None = None
    max_sequence_length_key: str | None = None


class GraphOptimizer(NamedTuple):
    """How ONNX Runtime's transformer optimizer fuses a family's exported graph
    (``onnxruntime.transformers.optimizer.optimize_model``).

    Attributes:
        model_type: ONNX Runtime's model type (``"bert"``, ``"gpt2"``, ``"bart"``, ...).
        num_heads: attention heads.
        hidden_size: hidden width.
    """

    model_type: str
    num_heads: int
    hidden_size: int


class SpecialTokens(Mapping[str, int]):
    """Ids of the special tokens a family's tokenizer defines, keyed by role.

    Every role of :data:`SPECIAL_TOKEN_ROLES` is optional: ``specials.bos`` is the id or None.
    ``specials["cls"]`` raises ``KeyError`` when the tokenizer has no such token.

    >>> specials = SpecialTokens(pad=0, unk=1, cls=2, sep=3, mask=4)
    >>> specials.sep, specials.bos, specials.padding_id, sorted(specials)
    (3, None, 0, ['cls', 'mask', 'pad', 'sep', 'unk'])

    Raises:
        ValueError: an unknown role, or an id that is not a non-negative int.
    """

    def __init__(self, ids: Mapping[str, int | None] | None = None, /, **more: int | None) -> None:
        merged = {**(ids or {}), **more}
        unknown = sorted(set(merged) - set(SPECIAL_TOKEN_ROLES))
        if unknown:
            raise ValueError(f"unknown special-token role(s) {unknown}; roles are {', '.join(SPECIAL_TOKEN_ROLES)}")
        self._ids: dict[str, int] = {}
        for role, value in merged.items():
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"special token {role!r}: id must be a non-negative int, got {value!r}")
            self._ids[role] = value

    def __getitem__(self, role: str) -> int:
        return self._ids[role]

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def __getattr__(self, role: str) -> int | None:
        if role in SPECIAL_TOKEN_ROLES:
            return self.__dict__["_ids"].get(role)
        raise AttributeError(role)

    def __repr__(self) -> str:
        return f"SpecialTokens({', '.join(f'{k}={v}' for k, v in self._ids.items())})"

    @property
    def padding_id(self) -> int:
        """The id padded positions hold: ``pad``, else 0 (padding is masked out, or, without a
        mask input, the family reads the pad positions as it was trained to)."""
        return self._ids.get("pad", 0)

    def structural(self) -> list[int]:
        """Ids of the tokens packing adds (``pad``, ``bos``, ``eos``, ``cls``, ``sep``), which no
        token-level objective predicts."""
        return sorted({self._ids[r] for r in ("pad", "bos", "eos", "cls", "sep") if r in self._ids})


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
            ``words``: ``lowercase``, ``minn``, ``maxn``, ``bucket``, ``word_ngrams`` and
            optionally ``end_of_line`` (texts end with fastText's ``</s>`` word).
        dev: the labelled dev file the run was measured on, or None.
        activation: how the logits become probabilities: ``"softmax"`` over the labels (one
            label per text; the default) or ``"sigmoid"`` of each logit (independent labels,
            e.g. a one-vs-all loss); written to the export's manifest as ``activation``.
    """

    model: Any
    input_matrix: np.ndarray
    output_matrix: np.ndarray
    words: list[str]
    labels: list[str]
    featurizer: dict[str, Any]
    dev: str | None
    activation: str = "softmax"


class ModelFamily:
    """A model family: its config, backbone, tokenizer and the heads/objectives that fit it.

    Subclass and set the class attributes; return an instance from
    :func:`~ptmkit.hookspecs.ptmkit_model_families`. A family whose runs the core pre-trains
    (tokenizer + objectives) implements :meth:`build_backbone`, :meth:`train_tokenizer`,
    :meth:`pack` and :meth:`num_special_tokens`; a family with its own training loop implements
    :class:`TrainsItself` instead.

    Attributes:
        name: str. What users type (``ptmkit train NAME``); unique across installed plugins.
        description: str. One line for ``ptmkit plugins``.
        config_class: a dataclass type holding the family's hyper-parameters (the ``[model]``
            section of a run config). It may define ``validate(self) -> None`` raising
            :class:`ptmkit.errors.ConfigError`.
        inputs: the backbone's inputs, in order (:class:`InputSpec`); BERT's are ``token_ids``
            (``ids``), ``segment_ids`` (``type_ids``) and ``padding_mask`` (``attention_mask``),
            each ``(batch, sequence)`` int32.
        outputs: the backbone's output dict (:class:`OutputSpec`); each name is a capability.
        special_token_names: role -> token string (``{"cls": "[CLS]", ...}``), each role of
            :data:`SPECIAL_TOKEN_ROLES` optional; :meth:`special_tokens` looks them up.
        provides: frozenset of further capability names (``token_embedding``: the backbone
            exposes its embedding layer for tied output heads).
        default_objectives: tuple of objective names used when the user names none.
        hf_model_types: frozenset of Hugging Face ``config.json`` ``model_type`` values whose
            checkpoints this family's :meth:`ImportsCheckpoints.import_checkpoint` reads;
            ``ptmkit import-hf DIR`` hands a checkpoint to the family that declares its type.
        head_defaults: ``[head]`` values this family's runs start from instead of the head's own
            defaults (keys of the chosen head's config; others are ignored), e.g. a family whose
            paper fine-tunes frozen, mixed layers: ``{"layers": "mix", "freeze_backbone": True}``.
            A ``--config`` file or ``--set`` still overrides them.
        objective_defaults: ``[objectives.NAME]`` values this family's runs start from instead of
            the objective's own defaults, by objective name (keys of its config), e.g. a family
            whose paper masks n-grams: ``{"mlm": {"max_ngram": 3}}``. A ``--config`` file or
            ``--set`` still overrides them.
        fuse_lstm_export: the standard ONNX export writes each Keras ``LSTM`` layer of the
            backbone as one fused ONNX ``LSTM`` node with ``sequence_lens`` from its mask (default
            False: tf2onnx writes a masked LSTM as a ``Loop``). Declare it only when every mask
            an LSTM layer reads has each row's padding at its end
            (:mod:`ptmkit.exporting.recurrent`); the manifest's ``recurrence`` says what the graph holds.
        train_defaults: ``[train]`` values this family's pre-training runs start from instead of
            the core's defaults, e.g. a family whose paper trains its language model at a higher
            rate on another schedule: ``{"learning_rate": 0.01, "schedule": "slanted_triangular"}``.
            A ``--config`` file or ``--set`` still overrides them; a resumed run keeps its own.
        finetune_defaults: ``[finetune]`` values this family's runs start from instead of the
            core's defaults, e.g. a family whose paper fine-tunes with discriminative rates and a
            slanted triangular schedule: ``{"layer_lr_decay": 0.3846, "schedule":
            "slanted_triangular"}``. A pre-training run records them in its config, which its
            fine-tunings start from; a ``--config`` file or ``--set`` still overrides them.
        stage_names: what the family calls its runs in one-line errors about a stage run out of
            order, by stage: ``"pretrain"`` (the run ``ptmkit train FAMILY --init RUN`` and
            ``ptmkit finetune RUN`` need first), e.g. ``{"pretrain": "general-domain language
            model"}``; the default names the stage ``"FAMILY pre-training run"``.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    config_class: ClassVar[type]
    inputs: ClassVar[tuple[InputSpec, ...]] = ()
    outputs: ClassVar[tuple[OutputSpec, ...]] = ()
    special_token_names: ClassVar[Mapping[str, str]] = {}
    provides: ClassVar[frozenset[str]] = frozenset()
    default_objectives: ClassVar[tuple[str, ...]] = ()
    hf_model_types: ClassVar[frozenset[str]] = frozenset()
    head_defaults: ClassVar[Mapping[str, Any]] = {}
    objective_defaults: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    fuse_lstm_export: ClassVar[bool] = False
    train_defaults: ClassVar[Mapping[str, Any]] = {}
    finetune_defaults: ClassVar[Mapping[str, Any]] = {}
    stage_names: ClassVar[Mapping[str, str]] = {}

    @property
    def input_names(self) -> tuple[str, ...]:
        """The declared inputs' names, in order."""
        return tuple(spec.name for spec in self.inputs)

    def input(self, field: str) -> InputSpec | None:
        """The declared input fed from ``field`` (e.g. ``attention_mask``), or None."""
        return next((spec for spec in self.inputs if spec.field == field), None)

    def limits(self, config: Any) -> Limits:
        """What ``config``'s weights allow (:class:`Limits`); unbounded by default."""
        return Limits()

    def graph_optimizer(self, config: Any) -> GraphOptimizer | None:
        """ONNX Runtime's transformer-optimizer settings for ``config``'s exported graph (its model
        type, e.g. ``"bert"``, head count and hidden size), or None (the default): ``ptmkit export
        --optimize 2``/``3`` then refuse, and ``--optimize 1`` runs ptmkit's portable passes only."""
        return None

    def scale_config(self, config: Any, width_ratio: float) -> Any | None:
        """A config of this family ``width_ratio`` times as wide as ``config`` (hidden size,
        feed-forward size and heads scaled, vocabulary and positions kept), for a companion model
        such as ELECTRA's generator (:mod:`ptmkit.objectives.rtd`); None (the default) when the
        family cannot scale its config, and the companion then has ``config``'s size."""
        return None

    def build_backbone(self, config: Any) -> keras.Model:
        """Build the backbone (a functional ``keras.Model`` with :attr:`inputs` as a dict of
        inputs and :attr:`outputs` as a dict of outputs) from ``config``."""
        raise NotImplementedError

    def train_tokenizer(self, texts: Iterable[str], config: Any) -> tokenizers.Tokenizer:
        """Train a tokenizer on a stream of texts; its post-processor adds the family's specials."""
        raise NotImplementedError

    def special_tokens(self, tokenizer: tokenizers.Tokenizer) -> SpecialTokens:
        """The ids of :attr:`special_token_names` in ``tokenizer``.

        Raises:
            DataError: a declared special token is missing from the vocabulary.
        """
        from ptmkit.errors import DataError

        ids = {}
        for role, token in self.special_token_names.items():
            token_id = tokenizer.token_to_id(token)
            if token_id is None:
                raise DataError(f"tokenizer has no {token} token ({role}); a {self.name} vocabulary needs {', '.join(self.special_token_names.values())}")
            ids[role] = token_id
        return SpecialTokens(ids)

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


@runtime_checkable
class TrainsItself(Protocol):
    """A family with its own training loop: ``ptmkit train NAME`` calls :meth:`train` instead of
    the core's tokenizer + objectives pre-training (static word vectors: word2vec's SGD over word
    windows, GloVe's AdaGrad over co-occurrence counts). Such a family reads all its
    hyper-parameters, training ones included, from its ``config_class`` (the ``[model]`` section).
    """

    def train(self, corpus: Path, run_dir: Path, config: Any, console: Console, resume: bool = False) -> dict[str, Any]:
        """Train on ``corpus`` and write the family's files into ``run_dir``.

        The core has created ``run_dir`` and written ``config.toml``; after this returns it writes
        ``metrics.json`` (the returned dict) and the manifest, last. If this raises, the core
        removes the run directory it created, unless the family is :class:`Resumable` and
        ``has_checkpoint``.

        Args:
            corpus: a text file (``.gz``/``.bz2`` too) or directory; read it with
                :func:`ptmkit.data.readers.read_corpus` (streamed, blank lines skipped).
            run_dir: the run directory.
            config: an instance of ``config_class``, validated.
            console: where progress lines go.
            resume: continue from the checkpoint in ``run_dir`` (only passed, as ``True``, to
                :class:`Resumable` families, and only when ``has_checkpoint``).

        Returns:
            dict of measured numbers (JSON-serialisable scalars): e.g. ``words_per_second``.

        Raises:
            DataError: an unusable corpus (one line naming the file, with what was seen).
            ConfigError: settings that cannot work together.
        """
        ...


@runtime_checkable
class Resumable(TrainsItself, Protocol):
    """A family that trains itself and saves checkpoints in its run directory: ``ptmkit train
    NAME --resume`` calls ``train(..., resume=True)``, and an interrupted run's directory is kept
    when :meth:`has_checkpoint` says there is one to continue from."""

    def has_checkpoint(self, run_dir: Path) -> bool:
        """Whether ``run_dir`` holds a checkpoint ``train`` can resume from."""
        ...


@runtime_checkable
class TrainsOnPairs(Protocol):
    """A family that trains on sentence pairs with its own loop (an encoder-decoder learning to
    translate): ``ptmkit train NAME --parallel FILE [--dev FILE]`` calls :meth:`train_pairs`
    instead of the core's pre-training on a monolingual ``--corpus``. Like :class:`TrainsItself`,
    it reads every hyper-parameter, training ones included, from its ``config_class`` (``[model]``).
    Parallel files are read with :func:`ptmkit.data.parallel.read_parallel`."""

    def train_pairs(self, parallel: Path, dev: Path | None, run_dir: Path, config: Any, console: Console, resume: bool = False) -> dict[str, Any]:
        """Train on the pairs of ``parallel`` and write the family's files into ``run_dir``.

        The core has created ``run_dir`` and written ``config.toml``; after this returns it writes
        ``metrics.json`` (the returned dict) and the manifest, last. If this raises, the core
        removes the run directory it created unless :meth:`has_checkpoint`. A backbone saved
        as ``backbone.weights.h5`` (:data:`ptmkit.rundir.BACKBONE_WEIGHTS`) makes the run one
        that ``finetune``, ``probe`` and ``export`` load like a core-trained one.

        Args:
            parallel: the training pairs (``SOURCE<TAB>TARGET`` lines).
            dev: held-out pairs measured during and after training, or None.
            run_dir: the run directory.
            config: an instance of ``config_class``, validated.
            console: where progress lines go.
            resume: continue from the checkpoint in ``run_dir`` (passed only when
                :meth:`has_checkpoint`).

        Returns:
            dict of measured numbers (JSON-serialisable scalars).

        Raises:
            DataError: an unusable parallel file (one line naming ``file:line``).
            ConfigError: settings that cannot work together.
        """
        ...

    def has_checkpoint(self, run_dir: Path) -> bool:
        """Whether ``run_dir`` holds a checkpoint :meth:`train_pairs` can resume from."""
        ...


@runtime_checkable
class EvaluatesPairs(Protocol):
    """A family whose runs map a source sentence to a target one (translation): ``ptmkit evaluate
    RUN --parallel FILE`` scores the run's outputs on the pairs of ``FILE`` against their targets."""

    def evaluate_pairs(self, run_dir: Path, parallel: Path, options: dict[str, Any], console: Console) -> dict[str, Any]:
        """Score the run in ``run_dir`` on the pairs of ``parallel``.

        Args:
            options: ``ptmkit evaluate``'s options by keyword (``num_beams``, ``max_length``, ...).

        Returns:
            the scores (JSON-serialisable), with ``report``: the lines to print, one a score.

        Raises:
            RunDirError: not a finished run this family can evaluate.
            DataError: an unusable parallel file.
        """
        ...


@runtime_checkable
class ProvidesWordVectors(Protocol):
    """A family whose runs hold static word vectors: ``ptmkit evaluate``, ``embed --words``,
    ``export --vectors`` / ``--onnx`` and heads requiring :data:`WORD_VECTORS` serve them."""

    def load_word_vectors(self, run_dir: Path) -> WordVectors:
        """The static word vectors of a finished run: a :class:`ptmkit.wordvectors.WordVectors`
        (words most frequent first, the ``(rows, dim)`` float32 matrix and each word's rows).

        Raises:
            RunDirError: missing or corrupted files.
        """
        ...


class SentenceFeatures(NamedTuple):
    """Frozen sentence features of a run, what ``ptmkit probe`` trains its classifier on.

    Attributes:
        kind: str. One line saying what the features are, for tables (``"averaged word vectors"``,
            ``"mean-pooled sequence_output"``).
        dim: int. The feature dimension.
        featurize: a function from a list of texts to their ``(len(texts), dim)`` float32
            features; deterministic (no dropout), the same text always gives the same row.
    """

    kind: str
    dim: int
    featurize: Callable[[list[str]], np.ndarray]


@runtime_checkable
class ProvidesSentenceFeatures(Protocol):
    """A family whose finished runs give a fixed-size feature vector per text: ``ptmkit probe``
    trains the same logistic regression on any such run (the lineage table). The core's helpers
    :func:`ptmkit.features.averaged_word_vectors` and :func:`ptmkit.features.pooled_states`
    build the usual ones (averaged static word vectors; hidden states mean-pooled over the
    padding mask, layers averaged first for a ``(batch, layers, sequence, hidden)`` output)."""

    def sentence_features(self, run_dir: Path) -> SentenceFeatures:
        """The sentence features of the finished run in ``run_dir``, weights loaded.

        Raises:
            RunDirError: not a run whose features this family can give (a fine-tuned run, a
                missing or corrupted file); one line naming the directory.
        """
        ...


@runtime_checkable
class ClassifiesRows(Protocol):
    """A family whose runs are bag-of-rows text classifiers; ``ptmkit export`` writes their ONNX
    model and featurizer (:mod:`ptmkit.exporting.rows`)."""

    def load_row_classifier(self, run_dir: Path) -> RowClassifier:
        """The trained classifier of a finished run, weights loaded.

        Raises:
            RunDirError: missing or corrupted files.
        """
        ...


@runtime_checkable
class WritesOwnExport(Protocol):
    """A family that writes the ONNX export of some of its runs itself (e.g. a graph with inputs
    and outputs the standard Keras -> tf2onnx path does not give, such as a decoder's key/value
    cache). ``ptmkit export`` asks it first; a family that declines (returns None) gets the
    standard export."""

    def export_own(self, run_dir: Path, out: Path, options: dict[str, Any], console: Console) -> dict[str, Any] | None:
        """Write the export of the run in ``run_dir`` into ``out``, or decline.

        Args:
            run_dir: a finished run of this family.
            out: the export directory to write (atomically: nothing there on failure).
            options: ``ptmkit export``'s options by keyword (``int8``, ``optimize``, ``fp16``,
                ``dev``, ...); refuse those it cannot honour with an ``ExportError``.
            console: where to report progress.

        Returns:
            the export's manifest with ``directory`` and ``summary`` added, or None when this
            run takes the standard export.

        Raises:
            ExportError: an option it cannot honour; the graph failed a check.
        """
        ...


class QuickstartPlan(NamedTuple):
    """A family's own quickstart tour (``ptmkit quickstart --family NAME``): the core pre-trains
    the family on the shipped Wikipedia paragraphs with ``pretrain_overrides``, reports the
    held-out metrics its objectives measure (perplexity and the like), exports the run to ONNX
    (fp32 and int8) and, for an export that generates text, continues ``prompts``.

    Attributes:
        pretrain_overrides: ``--set`` overrides of the pre-training (``KEY=VALUE`` strings), sized
            so that the tour fits its budget.
        estimates: seconds each stage takes on two quiet CPU cores, by stage: ``pretrain``,
            ``export``, ``sample`` (announced with the time left, as the BERT tour does).
        prompts: texts to continue after the export (a generation sample); none for a family
            that does not generate.
        generate: keyword arguments of ``Predictor.generate`` for the sample (``max_new_tokens``,
            ``strategy``, ``temperature``, ``top_k``, ``seed``, ...).
        int8: export an int8 variant too, its gate reading the corpus as ``--dev`` (its first
            lines: prompts, for a decoder's greedy-token agreement).
    """

    pretrain_overrides: list[str]
    estimates: dict[str, float]
    prompts: list[str] = []
    generate: dict[str, Any] = {}
    int8: bool = True


@runtime_checkable
class HasQuickstart(Protocol):
    """A family with a quickstart tour of its own (:class:`QuickstartPlan`)."""

    def quickstart_plan(self, budget: str) -> QuickstartPlan:
        """The tour at ``budget`` (``full``: about ten minutes on two quiet cores; ``small``:
        a shorter one).

        Raises:
            ConfigError: a budget this family has no plan for, naming the ones it has.
        """
        ...


@runtime_checkable
class ImportsCheckpoints(Protocol):
    """A family that turns a checkpoint in another tool's format (Hugging Face, Facebook fastText,
    ...) into a run directory of its own, which ``finetune``, ``export`` and ``embed`` then read.
    The core calls it where it needs a real pre-trained run (the quickstart) without importing the
    plugin; the plugin's own command (``ptmkit import-hf``) calls the same method."""

    def import_checkpoint(self, directory: Path, out: Path, console: Console) -> dict[str, Any]:
        """Write a finished run of this family into ``out`` from the checkpoint in ``directory``.

        Returns:
            the run's manifest.

        Raises:
            DataError: an unreadable or unsupported checkpoint (one line naming the file).
            RunDirError: ``out`` exists and is not empty.
        """
        ...


def capabilities(family: ModelFamily) -> frozenset[str]:
    """What ``family`` offers objectives and heads: its declared outputs' names, its
    ``provides``, and :data:`WORD_VECTORS` when it :class:`ProvidesWordVectors`."""
    offered = set(family.provides) | {spec.name for spec in family.outputs}
    if isinstance(family, ProvidesWordVectors):
        offered.add(WORD_VECTORS)
    return frozenset(offered)


class Objective:
    """A pre-training objective (masked LM, next-sentence prediction, ...).

    An objective does two things: it adds inputs and targets to a packed batch (in NumPy, in the
    data pipeline), and it adds outputs, losses and metrics on top of a backbone.

    Attributes:
        name: str. E.g. ``"mlm"``; selected with ``--objective``.
        description: str.
        requires: frozenset of backbone capabilities it needs.
        config_class: dataclass of its hyper-parameters (section ``[objectives.NAME]``).
        needs_segment_pairs: bool. True when instances must be segment pairs, ``A`` then ``B``
            (next-sentence and sentence-order prediction). The pairs' construction follows the
            objective's config: ``random_next_rate`` (B from another line, flag
            ``is_random_next``) and ``swap_rate`` (A and B consecutive, swapped, flag
            ``is_swapped``); at most one such objective per run.
        corrupts_token_ids: bool. True when :meth:`prepare` replaces the batch's ``token_ids``
            (masked LM, span masking); at most one such objective per run. A config with
            ``masking = "static"`` makes the sampler draw fixed windows (BERT's instances, made
            once; :func:`ptmkit.data.pretraining.sampler_options`).
        needs_parallel_pairs: bool. True when instances are the sentence pairs of a parallel file
            (``SOURCE<TAB>TARGET``, :mod:`ptmkit.data.parallel`), each packed as the segment pair
            ``source, target`` (XLM's translation LM): ``ptmkit train FAMILY --parallel FILE``
            then pre-trains on that file instead of a ``--corpus`` (the tokenizer learns both
            sides); at most one such objective per run.
        trains_alone: bool. True when no other objective can share its runs (replaced-token
            detection: its backbone reads the generator's corrupted ids, not the batch's).
        token_level_lm: bool. True when its loss is the mean negative log-likelihood (nats) of
            the tokens it predicts (masked LM, causal LM): ``exp(loss)`` is then reported as the
            held-out perplexity.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    requires: ClassVar[frozenset[str]] = frozenset()
    config_class: ClassVar[type]
    needs_segment_pairs: ClassVar[bool] = False
    corrupts_token_ids: ClassVar[bool] = False
    needs_parallel_pairs: ClassVar[bool] = False
    trains_alone: ClassVar[bool] = False
    token_level_lm: ClassVar[bool] = False

    def check_sequence_length(self, config: Any, sequence_length: int, source: str) -> None:
        """Refuse a training ``train.sequence_length`` this objective cannot use with ``config``
        (e.g. one its blocks must divide); called when the run's config is resolved, before
        anything is trained. Accepts every length by default.

        Raises:
            ConfigError: one line starting with ``source`` naming both keys.
        """

    def needs_word_starts(self, config: Any) -> bool:
        """Whether :meth:`prepare` reads the batch's ``word_start`` with ``config`` (whole-word and
        span masking); a tokenizer that cannot mark word starts is then refused before training."""
        return False

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
        int32), ``is_random_next`` and ``is_swapped`` (``(batch,)`` int32), whatever the family's
        inputs, and ``word_start`` (``(batch, sequence)`` int32, 1 where a token begins a word)
        when :meth:`needs_word_starts`.
        Returned ``inputs`` are keyed by token field names, ``token_ids`` replacing the batch's
        ids (masked LM corrupts them; the core then derives the family's declared inputs, e.g.
        ``char_ids``, from the corrupted ids), or by extra input names (``mask_positions``);
        ``targets`` and ``sample_weights`` are keyed by this objective's output names.
        Sample weights are relative (1 for a real prediction, 0 for a padding slot): the core
        rescales each output's weights to mean 1 over the step
        (:func:`ptmkit.data.pretraining.relative_weights`), so a loss with Keras' default
        reduction is the weighted mean over the real predictions.
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


@runtime_checkable
class BuildsOnFamily(Protocol):
    """An objective that builds more than heads on the backbone: a companion model of the run's
    own family (ELECTRA's generator, built through :meth:`ModelFamily.build_backbone` from
    :meth:`ModelFamily.scale_config`). The core calls :meth:`build_on_family` instead of
    :meth:`Objective.build`; the companion is trained with the run and not saved as its backbone."""

    def build_on_family(
        self, family: ModelFamily, model_config: Any, backbone: keras.Model, inputs: dict[str, Any], config: Any
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, list[Any]]]:
        """As :meth:`Objective.build`, with the run's ``family`` and its ``[model]`` config."""
        ...


class HeldoutLines(NamedTuple):
    """The held-out lines of a pre-training run, for objectives that score whole lines
    (:class:`ScoresHeldoutLines`).

    Attributes:
        texts: the held-out lines as the corpus reader gives them (the last
            ``train.heldout_lines`` non-blank lines of the corpus: the lines every family's
            held-out figures are measured on).
        tokenizer: the run's ``tokenizers.Tokenizer``.
        specials: the tokenizer's special token ids.
        inputs: the family's declared inputs (fill them with :func:`ptmkit.api.derive_inputs`).
        sequence_length: the training sequence length: the longest window to feed the backbone.
        batch_size: sequences per backbone call.
        token_counts: ``(vocabulary_size,)`` int64: how often each token id occurs in the
            training split (for a unigram reference).
    """

    texts: list[str]
    tokenizer: Any
    specials: SpecialTokens
    inputs: tuple[InputSpec, ...]
    sequence_length: int
    batch_size: int
    token_counts: np.ndarray


@runtime_checkable
class KeepsLayers(Protocol):
    """A family whose backbone is a stack of blocks that can be cut down to some of them, with
    their trained weights: what ``ptmkit compress --keep-layers`` needs (DistilBERT initialises its
    student "from the teacher by taking one layer out of two", Sanh et al. 2019, section 3)."""

    def keep_layers(self, model_config: Any, backbone: keras.Model, layers: list[int]) -> tuple[Any, keras.Model]:
        """A backbone of blocks ``layers`` (0-based, increasing) of ``backbone``, in that order.

        Args:
            model_config: ``backbone``'s ``[model]`` config.
            backbone: the trained backbone.
            layers: indices of the blocks to keep.

        Returns:
            ``(model_config, backbone)``: the smaller config and a backbone built from it that
            holds ``backbone``'s weights for everything but the dropped blocks.

        Raises:
            ConfigError: an index out of range, repeated or out of order.
        """
        ...


@runtime_checkable
class PrunesHeads(Protocol):
    """A family whose backbone's blocks use multi-head attention whose heads can be removed one by
    one, with the other heads' trained weights: what ``ptmkit compress --prune-heads`` needs
    (Michel, Levy and Neubig 2019, "Are Sixteen Heads Really Better than One?")."""

    def attention_heads(self, model_config: Any) -> list[int]:
        """The number of attention heads in each block, first block first."""
        ...

    def head_output_kernels(self, backbone: keras.Model) -> list[Any]:
        """Each block's attention output projection kernel, a ``keras.Variable`` of shape
        ``(heads, head_dim, hidden)``: head ``h``'s context vectors go through ``kernel[h]``, so
        gating head ``h``'s output by ``xi_h`` is scaling ``kernel[h]`` by ``xi_h``, and
        ``dL/dxi_h = sum(kernel[h] * dL/dkernel[h])`` at ``xi = 1`` (the importance score of
        Michel et al. 2019, eq. 2, read from the ordinary weight gradients)."""
        ...

    def prune_heads(self, model_config: Any, backbone: keras.Model, heads: dict[int, list[int]]) -> tuple[Any, keras.Model]:
        """A backbone without the attention heads ``heads`` (block -> 0-based head indices).

        Args:
            model_config: ``backbone``'s ``[model]`` config.
            backbone: the trained backbone.
            heads: the heads to remove, by block; every block keeps at least one head (the
                caller checks with :meth:`attention_heads`).

        Returns:
            ``(model_config, backbone)``: the config recording the heads left in each block, and
            a backbone built from it whose attention layers hold the kept heads' query, key, value
            and output weights (physically smaller), everything else as in ``backbone``. It
            computes what ``backbone`` computes with the removed heads' outputs zeroed.
        """
        ...


@runtime_checkable
class ReplacesModules(KeepsLayers, Protocol):
    """A family whose backbone is a functional stack of blocks, each called once, in order, on the
    previous block's output (plus the same keyword inputs, e.g. a padding mask), that can be cut
    down to some of them (:class:`KeepsLayers`): what ``ptmkit compress --theseus-layers`` needs to
    replace blocks of a predecessor by successor blocks during fine-tuning (Xu et al. 2020,
    "BERT-of-Theseus: Compressing BERT by Progressive Module Replacing")."""

    def blocks(self, backbone: keras.Model) -> list[Any]:
        """``backbone``'s blocks in the order its graph calls them: Keras layers, each called as
        ``block(x, **inputs)`` with ``x`` ``(batch, sequence, hidden)`` and returning the same
        shape, so that any run of consecutive blocks can stand in for another."""
        ...


#: What ``ptmkit compress --share-layers`` ties across blocks (:class:`SharesLayers`): every
#: weight of a block, its attention sublayer (projections and their layer norm), or its
#: feed-forward sublayer (both dense layers and their layer norm): ALBERT's all-shared,
#: shared-attention and shared-FFN (Lan et al. 2020, table 4).
SHARED_SUBLAYERS = ("all", "attention", "ffn")


@runtime_checkable
class SharesLayers(Protocol):
    """A family whose backbone's blocks can share sublayers across depth, ALBERT's cross-layer
    parameter sharing (Lan et al. 2020, section 3.1) applied to a trained backbone: what
    ``ptmkit compress --share-layers`` needs."""

    def share_layers(self, model_config: Any, backbone: keras.Model, sublayers: str, init: str) -> tuple[Any, keras.Model]:
        """A backbone whose blocks all use one set of the ``sublayers`` weights.

        Args:
            model_config: ``backbone``'s ``[model]`` config.
            backbone: the trained backbone.
            sublayers: one of :data:`SHARED_SUBLAYERS`.
            init: ``"mean"``: the shared weights are the element-wise mean of every block's;
                ``"first"``: the first block's.

        Returns:
            ``(model_config, backbone)``: the config recording the sharing (so that
            ``build_backbone`` rebuilds it and a saved run loads), and a backbone of it whose
            blocks hold the same weight objects for ``sublayers`` (counted once), every other
            weight as in ``backbone``.

        Raises:
            ConfigError: the backbone cannot share them (e.g. blocks of different shapes).
        """
        ...


@runtime_checkable
class ExposesAttention(Protocol):
    """A family whose backbone is a stack of multi-head self-attention blocks that can show what
    each block computes: its input and output states, its attention scores and its values. What
    layer-to-layer distillation needs (``ptmkit finetune --teacher RUN --distill tinybert|minilm``:
    Jiao et al. 2020, "TinyBERT", section 3.1; Wang et al. 2020, "MiniLM", section 3.1), in the
    teacher and the student alike; :mod:`ptmkit.training.distillation` computes every loss from
    what this returns."""

    def attention_internals(self, backbone: keras.Model) -> keras.Model:
        """A functional model of ``backbone``'s inputs (a dict, the family's declared inputs)
        that calls ``backbone``'s own layers (gradients reach its weights), returning a dict:

        - ``hidden_states``: a list of ``L + 1`` ``(batch, sequence, hidden)`` float tensors: the
          embeddings (the first block's input), then each block's output (Hugging Face's
          ``output_hidden_states`` layout);
        - ``attention_scores``: a list of ``L`` ``(batch, heads_l, sequence, sequence)`` float
          tensors, block ``l``'s pre-softmax scores ``q k^T / sqrt(d_k)`` (query axis, then key
          axis), before any mask is applied;
        - ``values``: a list of ``L`` ``(batch, heads_l, sequence, d_k)`` float tensors, block
          ``l``'s value vectors per head;
        - ``attention_mask``: ``(batch, sequence, sequence)`` float, 1 where query ``i`` may
          attend to key ``j`` (the padding mask of the keys for a bidirectional encoder).

        The softmax over keys of the scores, with masked keys given probability 0, is the
        attention distribution each block's attention layer applies to its values (before its
        attention dropout).
        """
        ...


@runtime_checkable
class SharesEmbeddings(Protocol):
    """A family that can build a backbone on another backbone's input embeddings (the same layers
    and variables): what replaced-token detection needs to share the embeddings between its
    generator and the discriminator as ELECTRA does (Clark et al. 2020, section 3.2: "we share
    the embeddings (both the token and positional embeddings) of the generator and
    discriminator"). A family without it gets a generator with its own input embeddings."""

    def build_on_embeddings(self, model_config: Any, backbone: keras.Model) -> keras.Model:
        """A backbone of ``model_config`` whose input embeddings are ``backbone``'s.

        Args:
            model_config: the new backbone's ``[model]`` config (e.g. a narrower generator's,
                from :meth:`ModelFamily.scale_config`); its embedding sizes are ``backbone``'s.
            backbone: the backbone whose embedding layers are reused (trained together).

        Returns:
            a Keras model taking the family's declared inputs and returning at least
            ``sequence_output`` ``(batch, sequence, model_config's hidden size)``.
        """
        ...


@runtime_checkable
class AttendsWithMask(Protocol):
    """A backbone (the Keras model a family builds) that can run its self-attention under an
    arbitrary ``(batch, sequence, sequence)`` mask, beside its padding mask: what objectives that
    mix attention patterns in one model need (UniLM's bidirectional, left-to-right and
    sequence-to-sequence masks). A family whose backbones are one offers
    :data:`SELF_ATTENTION_MASK` in its ``provides``."""

    def sequence_output_with_attention_mask(self, inputs: dict[str, Any], attention_mask: Any) -> Any:
        """The backbone's ``sequence_output`` with attention restricted by ``attention_mask``.

        Args:
            inputs: the backbone's inputs by name (symbolic or eager tensors), as its call takes.
            attention_mask: ``(batch, sequence, sequence)`` int, 1 where query position ``i`` may
                attend to key position ``j``; combined with ``padding_mask`` (both must allow).

        Returns:
            ``(batch, sequence, hidden)`` float, through the backbone's own layers and weights.
        """
        ...


@runtime_checkable
class InitialisesOutputBias(Protocol):
    """A backbone whose language-model output layer has a bias of its own (ULMFiT's tied decoder)
    that a fresh pre-training run starts at the log unigram prior of its training tokens, so that
    the first step predicts the unigram model rather than the uniform distribution ("init well":
    Karpathy 2019, *A Recipe for Training Neural Networks*; the standard initialisation of a
    classifier's output bias to the log class prior). Without it, a short run spends its steps
    learning word frequencies, and a tied softmax whose inputs are bounded (an LSTM's outputs in
    (-1, 1)) learns them by saturating its states to one constant vector, which carries no context.
    The core calls it once, before the first step of a run that neither resumes nor continues
    another (``--init``)."""

    def init_output_bias(self, log_prior: Any) -> None:
        """Set the output bias from ``log_prior``: ``(vocabulary_size,)`` float32, the log of each
        token id's add-one smoothed share of the training tokens (natural log; sums to 1 in
        probability)."""
        ...


@runtime_checkable
class EmbedsLanguages(Protocol):
    """A backbone (the Keras model a family builds) that can embed each token at a given position id
    and with a given language id instead of positions ``0 .. sequence - 1`` and its segment ids:
    what cross-lingual objectives over concatenated sentence pairs need (XLM's translation LM,
    Lample & Conneau 2019, section 3.3: "we also reset the positional embeddings of target
    sentences" and add "language embeddings" to the input). A family whose backbones are one
    offers :data:`POSITIONS_AND_LANGUAGES` in its ``provides``.

    Attributes:
        num_languages: int. How many language embeddings it holds: language ids are in
            ``[0, num_languages)``.
    """

    num_languages: int

    def sequence_output_with_languages(self, inputs: dict[str, Any], position_ids: Any, language_ids: Any) -> Any:
        """The backbone's ``sequence_output`` with each token's position and language embeddings
        taken from ``position_ids`` and ``language_ids``.

        Args:
            inputs: the backbone's inputs by name (symbolic or eager tensors), as its call takes.
            position_ids: ``(batch, sequence)`` int32 in ``[0, max_sequence_length)``.
            language_ids: ``(batch, sequence)`` int32 in ``[0, num_languages)``.

        Returns:
            ``(batch, sequence, hidden)`` float, through the backbone's own layers and weights;
            with ``position_ids`` ``0 .. sequence - 1`` and the language embeddings the ones its
            plain call uses, equal to ``sequence_output``.
        """
        ...


@runtime_checkable
class TwoStreamAttention(Protocol):
    """A backbone that can run two streams of self-attention (Yang et al. 2019, "XLNet", section
    2.3): the content stream under a ``(batch, sequence, sequence)`` mask that lets a token see
    itself, and a query stream, started from a learnt vector at each position to predict, under
    a mask that hides the token itself, attending to the content stream; what a permutation
    language model needs. A family whose backbones are one offers :data:`TWO_STREAM_ATTENTION`
    in its ``provides``."""

    def query_stream_output(self, inputs: dict[str, Any], content_mask: Any, query_mask: Any, target_mapping: Any) -> Any:
        """The query stream's last states at the positions ``target_mapping`` selects.

        Args:
            inputs: the backbone's inputs by name (symbolic or eager tensors), as its call takes.
            content_mask: ``(batch, sequence, sequence)`` int, 1 where content position ``i``
                may attend to position ``j``; combined with ``padding_mask`` (both must allow).
            query_mask: ``(batch, sequence, sequence)`` int, the same for the query stream at
                position ``i``.
            target_mapping: ``(batch, predictions, sequence)`` float, one-hot rows: prediction
                ``p`` is made at the position where row ``p`` is 1 (an all-zero row: no prediction).

        Returns:
            ``(batch, predictions, hidden)`` float, through the backbone's own layers and weights.
        """
        ...


@runtime_checkable
class ScoresHeldoutLines(Protocol):
    """An objective that also measures the trained backbone line by line on the held-out lines
    (per-word perplexity, bits per byte, ...), beyond the window-level held-out loss every
    objective gets. The core calls :meth:`score_lines` after training, before the run's
    ``metrics.json`` is written."""

    def score_lines(self, backbone: keras.Model, heldout: HeldoutLines, config: Any) -> dict[str, Any]:
        """Measure ``backbone`` on ``heldout`` (``config``: this objective's config).

        Returns:
            dict of JSON-serialisable scalars, merged into the run's metrics (keys ``heldout_*``).
        """
        ...


class TrainedHead(NamedTuple):
    """What :meth:`Head.train` returns.

    Attributes:
        model_config: the ``[model]`` section of the fine-tuned run (a dict of scalars), a valid
            config of the head's :attr:`TrainsOnWordVectors.run_family`.
        logits: a function from a list of texts to their ``(len(texts), labels)`` float32 logits;
            ``ptmkit finetune`` measures dev and test accuracy and macro-F1 with it.
    """

    model_config: dict[str, Any]
    logits: Callable[[list[str]], np.ndarray]


class Head:
    """A fine-tune head on top of a backbone (sequence classification, ...).

    A head on static word vectors with its own training loop instead of a Keras model on a
    backbone implements :class:`TrainsOnWordVectors` (and requires :data:`WORD_VECTORS`).

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


@runtime_checkable
class TrainsOnWordVectors(Protocol):
    """A head that trains a classifier on static word vectors with its own loop; its
    hyper-parameters are all in its ``config_class``.

    Attributes:
        run_family: str. The family whose runs it writes (one that :class:`ClassifiesRows`, so
            that ``ptmkit export`` and ``ptmkit predict`` serve them).
    """

    run_family: str

    def train(
        self, vectors: WordVectors, pretrained_config: Any, texts: list[str], label_ids: np.ndarray, labels: list[str], config: Any, run_dir: Path, console: Console
    ) -> TrainedHead:
        """Train a classifier initialised from ``vectors`` and write its files into ``run_dir``.

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
        ...


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

