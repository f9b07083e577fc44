r"""The public surface for plugin authors: everything a plugin imports from ptmkit, in one module.

A plugin (built-in or third-party) imports ``ptmkit.api`` and nothing else of ptmkit (its tests
may also import :mod:`ptmkit.testing`); a test walks the AST of every built-in plugin and fails on
any other ``ptmkit.*`` import. What is not listed in ``__all__`` is internal and may change
without notice. The names come in groups:

Hook markers
    :data:`hookimpl` marks a plugin's hook implementations; the hooks themselves are documented in
    :mod:`ptmkit.hookspecs`.

Contract types (:mod:`ptmkit.contract`)
    What a plugin returns from its hooks: :class:`ModelFamily` (and :class:`WordVectorFamily` for
    static word vectors), :class:`Objective`, :class:`Head` and :class:`TrainedHead`,
    :class:`CorpusReader` and :class:`Record`, :class:`RowClassifier`. What a family declares:
    its inputs (:class:`InputSpec`: named axes, dtype, the tokenizer field of
    :data:`TOKENIZER_FIELDS` it comes from), its outputs (:class:`OutputSpec`), its special
    tokens (:class:`SpecialTokens`, roles of :data:`SPECIAL_TOKEN_ROLES`), its :class:`Limits`
    and its ONNX Runtime :class:`GraphOptimizer`. What it can do, as ``typing.Protocol``\ s
    checked with ``isinstance``: :class:`TrainsItself`, :class:`Resumable`, :class:`TrainsOnPairs`,
    :class:`EvaluatesPairs`,
    :class:`ProvidesWordVectors`, :class:`ProvidesSentenceFeatures` (with :class:`SentenceFeatures`), :class:`ClassifiesRows`, :class:`ImportsCheckpoints`, :class:`WritesOwnExport`, :class:`HasQuickstart` (families, with :class:`QuickstartPlan`), :class:`TrainsOnWordVectors`
    (heads), :class:`ScoresHeldoutLines` (objectives, with :class:`HeldoutLines`), :class:`AttendsWithMask`, :class:`InitialisesOutputBias` (with :func:`train_token_counts` and :func:`unigram_log_prior`), :class:`EmbedsLanguages` and :class:`TwoStreamAttention` (backbones), :class:`KeepsLayers`, :class:`PrunesHeads`, :class:`ReplacesModules` and :class:`SharesLayers` (``ptmkit compress``; the sublayer kinds :data:`SHARED_SUBLAYERS`), :class:`ExposesAttention` (per-block states, attention scores and values for layer-to-layer distillation), :class:`SharesEmbeddings` (a generator on the backbone's embeddings, ``rtd``); :func:`pooled_states` and :func:`averaged_word_vectors` build a family's :class:`SentenceFeatures` (:mod:`ptmkit.features`); :func:`capabilities` lists what a family offers objectives and heads
    (:data:`SEQUENCE_OUTPUT`, :data:`POOLED_OUTPUT`, :data:`HIDDEN_STATES`, :data:`TOKEN_EMBEDDING`, :data:`WORD_VECTORS`, :data:`SELF_ATTENTION_MASK`, :data:`POSITIONS_AND_LANGUAGES`, :data:`TWO_STREAM_ATTENTION`).

Errors (:mod:`ptmkit.errors`)
    :class:`PtmkitError` and its kinds (:class:`ConfigError`, :class:`DataError`,
    :class:`RunDirError`, :class:`PluginError`, :class:`ExportError`): raise one with a complete
    one-line message and the CLI prints it and exits with code 2.

Configuration (:mod:`ptmkit.config`)
    Validators for a family's ``validate()`` that raise :class:`ConfigError` naming the key
    (:func:`check_positive`, :func:`check_non_negative`, :func:`check_unit_interval`,
    :func:`check_choice`); :func:`read_toml`, :func:`to_toml`, :func:`build_dataclass`; the core
    sections :class:`TrainConfig` and :class:`FinetuneConfig`; :func:`resolve_config`, which builds
    a validated :class:`RunConfig` for a family from a file, ``--set`` overrides and a base.

Run directories and the registry (:mod:`ptmkit.rundir`, :mod:`ptmkit.plugins`)
    :class:`RunDir` and the names of the files in it (:data:`CONFIG`, :data:`TOKENIZER`,
    :data:`BACKBONE_WEIGHTS`, :data:`MODEL_WEIGHTS`, :data:`LABELS`, :data:`METRICS`,
    :data:`POOLING`, :data:`MANIFEST`), :func:`load_weights`, :func:`save_model_weights`; :func:`staged_run`, :func:`write_backbone_run`, :func:`imported_run_config` (a run written whole or not at all: imports, ``compress``); :func:`generator_width` (ELECTRA's generator size, for a family's ``scale_config``); :func:`feedforward_activation` (:data:`FEEDFORWARD_ACTIVATIONS`, exact GELU as :func:`gelu_erf`: transformer blocks that tf2onnx converts); :func:`get_registry` for an
    importer that records which plugin owns the family it writes.

IO and console (:mod:`ptmkit.io`, :mod:`ptmkit.console`)
    Atomic writes (:func:`atomic_path`, :func:`atomic_save`, :func:`atomic_write_text`,
    :func:`atomic_write_json`, :func:`staging_directory`): an interrupted run never leaves a half file that looks whole;
    :func:`read_json` (a JSON file, or one line naming it), :func:`read_utf8_lines` (a `--file` of texts); :func:`default_console`.

Hugging Face checkpoints (:mod:`ptmkit.hf_checkpoints`), for a family's ``import-hf``
    :class:`CheckpointError`; :func:`check_import_paths`, :func:`read_hf_config`,
    :func:`check_positive_key`, :func:`read_weight_shapes`, :func:`check_tensor_shapes`,
    :func:`porting_weights`, :func:`write_imported_run`: the steps every importer shares, each
    refusing in one line naming the file and key or tensor; :func:`assemble_import` (the run
    config, the console line, the backbone, the port and the run, in that order) and
    :func:`open_safetensors` (the weights through safetensors' NumPy API);
    :func:`load_checkpoint_unigram` (a checkpoint's ``tokenizer.json`` or ``spiece.model``).

Data and training glue (:mod:`ptmkit.data.readers`, :mod:`ptmkit.training`)
    :func:`read_corpus`, :func:`read_labelled`, :func:`read_multilabelled`, :func:`is_labelled`
    (every installed corpus format); :func:`read_parallel` and :class:`ParallelCorpus` (sentence
    pairs); :func:`train_byte_level_bpe`, :func:`byte_level_tokenizer`
    (byte-level BPE, for every family that learns its vocabulary on bytes); :func:`train_wordpiece`,
    :func:`wordpiece_special_tokens`, :data:`WORDPIECE_SPECIALS`, :func:`load_checkpoint_wordpiece`
    (WordPiece, for every family whose vocabulary is WordPiece, and its import from a checkpoint); :func:`train_unigram`,
    :func:`unigram_tokenizer` (SentencePiece-style unigram pieces: ALBERT, T5, XLNet); :func:`train_word_level` (a whitespace word vocabulary: ELMo, CoVe, ULMFiT); :func:`derive_inputs` (a family's declared inputs from
    token ids, segment ids and a padding mask); :func:`pack_cls_sep` (BERT's ``[CLS] A [SEP] B [SEP]``
    packing with segment ids) and :class:`ClsSepInputs` (a family's ``pack`` and
    ``num_special_tokens`` for it); :func:`quiet_tensorflow`, :func:`seed_everything`;
    :func:`macro_f1`, :func:`top1_gold` (precision at 1 on lines with several labels);
    :class:`AdamW`; checkpoint and resume of a Keras ``fit`` (:class:`CheckpointCallback`,
    :func:`restore_state`, :func:`latest_step`, :func:`interrupt_note`, :func:`step_dataset`:
    batch ``i`` is global step ``start + i``; :func:`build_training_state`: the optimizer's and
    metrics' variables made before ``fit``, whose first trace is then its only one) and
    :class:`ProgressCallback` (these loaded lazily: they import Keras).

Word-vector toolkit (shared by the word2vec, fastText, GloVe and NNLM families)
    Vocabulary and corpus encoding (:class:`Vocabulary`, :func:`build_vocabulary`,
    :func:`encode_corpus`, :class:`EncodedCorpus`, :func:`noise_table`, :func:`huffman_codes`),
    word-prediction objectives (:class:`OutputLayer`, :class:`WindowExamples`, :class:`Subwords`),
    their trainer (:func:`prepare_corpus`, :func:`train_word_prediction`, :class:`SGDSchedule`,
    :func:`auto_updates_per_call`), the compiled CPU trainer of word2vec and fastText (:func:`train_kernel`,
    :class:`KernelSchedule` with ``HOGBATCH`` or ``PAIRS`` updates, :func:`resolve_backend`,
    :func:`cpu_threads`; loaded on first use: they import numba), resumable epochs (:class:`ResumableEpochs`, the epoch loop
    every trainer shares; :func:`epoch_rng`, :class:`EpochCheckpoints`, :func:`tokens_sha1`,
    :func:`vocabulary_fingerprint`) and the vector files a run holds
    (:class:`WordVectors`, :data:`VOCABULARY_FILE`, :data:`VECTORS_FILE`, :func:`save_matrix`,
    :func:`load_matrix`).

ONNX export (:mod:`ptmkit.exporting`), for a family that writes its own export (:class:`WritesOwnExport`)
    :func:`convert_to_onnx` (a Keras model to one ONNX file with the declared inputs; with
    ``fuse_lstm=True`` its Keras ``LSTM`` layers become fused ONNX ``LSTM`` nodes, as the
    standard export does for a family declaring :attr:`ModelFamily.fuse_lstm_export`) and
    :func:`recurrence` (what carries a graph's recurrence, for its manifest); loaded on first use.
    :class:`OnnxGraph` and :func:`attention_weights` (:mod:`ptmkit.exporting.graph_builder`): a
    graph written by hand from a model's weights, e.g. a decoder with a key/value cache.

Importing this module imports neither TensorFlow nor Keras: a plugin stays cheap to load.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ptmkit import __version__, hookimpl
from ptmkit.activations import FEEDFORWARD_ACTIVATIONS, feedforward_activation, gelu_erf
from ptmkit.config import (
    FinetuneConfig,
    RunConfig,
    TrainConfig,
    build_dataclass,
    check_choice,
    check_non_negative,
    check_positive,
    check_unit_interval,
    read_toml,
    to_toml,
)
from ptmkit.console import default_console
from ptmkit.contract import (
    HIDDEN_STATES,
    POOLED_OUTPUT,
    POSITIONS_AND_LANGUAGES,
    SELF_ATTENTION_MASK,
    SEQUENCE_OUTPUT,
    SHARED_SUBLAYERS,
    SPECIAL_TOKEN_ROLES,
    TOKEN_EMBEDDING,
    TOKENIZER_FIELDS,
    TWO_STREAM_ATTENTION,
    WORD_VECTORS,
    AttendsWithMask,
    ClassifiesRows,
    CorpusReader,
    EmbedsLanguages,
    EvaluatesPairs,
    ExposesAttention,
    GraphOptimizer,
    HasQuickstart,
    Head,
    HeldoutLines,
    ImportsCheckpoints,
    InitialisesOutputBias,
    InputSpec,
    KeepsLayers,
    Limits,
    ModelFamily,
    Objective,
    OutputSpec,
    ProvidesSentenceFeatures,
    ProvidesWordVectors,
    PrunesHeads,
    QuickstartPlan,
    Record,
    ReplacesModules,
    Resumable,
    RowClassifier,
    ScoresHeldoutLines,
    SentenceFeatures,
    SharesEmbeddings,
    SharesLayers,
    SpecialTokens,
    TrainedHead,
    TrainsItself,
    TrainsOnPairs,
    TrainsOnWordVectors,
    TwoStreamAttention,
    WritesOwnExport,
    capabilities,
)
from ptmkit.data.byte_level_bpe import byte_level_tokenizer, train_byte_level_bpe
from ptmkit.data.parallel import ParallelCorpus, read_parallel
from ptmkit.data.readers import is_labelled, read_corpus, read_labelled, read_multilabelled
from ptmkit.data.tokenization import ClsSepInputs, derive_inputs, pack_cls_sep, train_word_level
from ptmkit.data.unigram import train_unigram, unigram_tokenizer
from ptmkit.data.wordpiece import SPECIALS as WORDPIECE_SPECIALS
from ptmkit.data.wordpiece import load_checkpoint_wordpiece, train_wordpiece, wordpiece_special_tokens
from ptmkit.errors import ConfigError, DataError, ExportError, PluginError, PtmkitError, RunDirError
from ptmkit.exporting.graph_builder import OnnxGraph, attention_weights
from ptmkit.features import averaged_word_vectors, pooled_states
from ptmkit.hf_checkpoints import (
    CheckpointError,
    assemble_import,
    check_import_paths,
    check_positive_key,
    check_tensor_shapes,
    load_checkpoint_unigram,
    open_safetensors,
    porting_weights,
    read_hf_config,
    read_weight_shapes,
    write_imported_run,
)
from ptmkit.io import (
    atomic_path,
    atomic_save,
    atomic_write_json,
    atomic_write_text,
    read_json,
    read_utf8_lines,
    staging_directory,
)
from ptmkit.objectives.rtd import generator_width
from ptmkit.plugins import get_registry
from ptmkit.rundir import (
    BACKBONE_WEIGHTS,
    CONFIG,
    LABELS,
    MANIFEST,
    METRICS,
    MODEL_WEIGHTS,
    POOLING,
    TOKENIZER,
    RunDir,
    load_weights,
    save_model_weights,
    staged_run,
    write_backbone_run,
)
from ptmkit.training.finetune import macro_f1, top1_gold
from ptmkit.training.pretrain import imported_run_config, resolve_config, train_token_counts, unigram_log_prior
from ptmkit.training.setup import quiet_tensorflow, seed_everything
from ptmkit.wordvectors import VECTORS_FILE, VOCABULARY_FILE, WordVectors, load_matrix, save_matrix
from ptmkit.wordvectors.family import WordVectorFamily
from ptmkit.wordvectors.training import (
    EpochCheckpoints,
    ResumableEpochs,
    SGDSchedule,
    auto_updates_per_call,
    epoch_rng,
    prepare_corpus,
    tokens_sha1,
    train_word_prediction,
    vocabulary_fingerprint,
)
from ptmkit.wordvectors.vocabulary import (
    EncodedCorpus,
    Vocabulary,
    build_vocabulary,
    encode_corpus,
    huffman_codes,
    noise_table,
)
from ptmkit.wordvectors.word_prediction import OutputLayer, Subwords, WindowExamples

if TYPE_CHECKING:
    from ptmkit.exporting.convert import convert_to_onnx
    from ptmkit.exporting.recurrent import recurrence
    from ptmkit.training.checkpoint import CheckpointCallback, interrupt_note, latest_step, restore_state
    from ptmkit.training.pretrain import build_training_state, step_dataset
    from ptmkit.training.progress import ProgressCallback
    from ptmkit.training.schedule import AdamW
    from ptmkit.wordvectors.kernel import KernelSchedule, cpu_threads, resolve_backend, train_kernel

__all__ = [
    "pack_cls_sep",
    "train_word_level",
    "ClsSepInputs",
    # hook markers
    "__version__",
    "hookimpl",
    # contract types
    "HIDDEN_STATES",
    "POOLED_OUTPUT",
    "POSITIONS_AND_LANGUAGES",
    "SEQUENCE_OUTPUT",
    "SPECIAL_TOKEN_ROLES",
    "SELF_ATTENTION_MASK",
    "TOKEN_EMBEDDING",
    "TOKENIZER_FIELDS",
    "TWO_STREAM_ATTENTION",
    "WORD_VECTORS",
    "ClassifiesRows",
    "HasQuickstart",
    "ImportsCheckpoints",
    "WritesOwnExport",
    "CorpusReader",
    "GraphOptimizer",
    "Head",
    "HeldoutLines",
    "InputSpec",
    "Limits",
    "ModelFamily",
    "Objective",
    "QuickstartPlan",
    "OutputSpec",
    "ProvidesSentenceFeatures",
    "ProvidesWordVectors",
    "Record",
    "SentenceFeatures",
    "Resumable",
    "RowClassifier",
    "ScoresHeldoutLines",
    "AttendsWithMask",
    "InitialisesOutputBias",
    "EmbedsLanguages",
    "TwoStreamAttention",
    "KeepsLayers",
    "PrunesHeads",
    "ReplacesModules",
    "SharesLayers",
    "ExposesAttention",
    "SHARED_SUBLAYERS",
    "SharesEmbeddings",
    "SpecialTokens",
    "TrainedHead",
    "TrainsItself",
    "TrainsOnPairs",
    "EvaluatesPairs",
    "TrainsOnWordVectors",
    "capabilities",
    "WordVectorFamily",
    "averaged_word_vectors",
    "pooled_states",
    # errors
    "ConfigError",
    "DataError",
    "ExportError",
    "PluginError",
    "PtmkitError",
    "RunDirError",
    # configuration
    "FinetuneConfig",
    "RunConfig",
    "TrainConfig",
    "build_dataclass",
    "check_choice",
    "check_non_negative",
    "check_positive",
    "check_unit_interval",
    "read_toml",
    "resolve_config",
    "train_token_counts",
    "unigram_log_prior",
    "to_toml",
    # run directories and the registry
    "BACKBONE_WEIGHTS",
    "CONFIG",
    "LABELS",
    "MANIFEST",
    "METRICS",
    "MODEL_WEIGHTS",
    "POOLING",
    "TOKENIZER",
    "RunDir",
    "get_registry",
    "load_weights",
    "save_model_weights",
    "generator_width",
    "FEEDFORWARD_ACTIVATIONS",
    "feedforward_activation",
    "gelu_erf",
    "CheckpointError",
    "assemble_import",
    "check_import_paths",
    "check_positive_key",
    "check_tensor_shapes",
    "open_safetensors",
    "load_checkpoint_unigram",
    "porting_weights",
    "read_hf_config",
    "read_weight_shapes",
    "write_imported_run",
    "staged_run",
    "write_backbone_run",
    "imported_run_config",
    # io and console
    "atomic_path",
    "atomic_save",
    "atomic_write_json",
    "read_json",
    "read_utf8_lines",
    "staging_directory",
    "atomic_write_text",
    "default_console",
    # data and training glue
    "AdamW",
    "CheckpointCallback",
    "ProgressCallback",
    "interrupt_note",
    "latest_step",
    "restore_state",
    "step_dataset",
    "build_training_state",
    "macro_f1",
    "top1_gold",
    "quiet_tensorflow",
    "read_corpus",
    "read_parallel",
    "ParallelCorpus",
    "derive_inputs",
    "byte_level_tokenizer",
    "train_byte_level_bpe",
    "train_unigram",
    "unigram_tokenizer",
    "WORDPIECE_SPECIALS",
    "train_wordpiece",
    "wordpiece_special_tokens",
    "load_checkpoint_wordpiece",
    "is_labelled",
    "read_labelled",
    "read_multilabelled",
    "seed_everything",
    # word-vector toolkit
    "VECTORS_FILE",
    "VOCABULARY_FILE",
    "EncodedCorpus",
    "EpochCheckpoints",
    "ResumableEpochs",
    "OutputLayer",
    "SGDSchedule",
    "Subwords",
    "Vocabulary",
    "WindowExamples",
    "WordVectors",
    "auto_updates_per_call",
    "build_vocabulary",
    "encode_corpus",
    "epoch_rng",
    "huffman_codes",
    "load_matrix",
    "noise_table",
    "prepare_corpus",
    "save_matrix",
    "tokens_sha1",
    "train_word_prediction",
    "vocabulary_fingerprint",
    "KernelSchedule",
    "cpu_threads",
    "resolve_backend",
    "train_kernel",
    # onnx export
    "convert_to_onnx",
    "recurrence",
    "OnnxGraph",
    "attention_weights",
]


def __getattr__(name: str) -> Any:
    """Names whose modules import Keras (or numba), loaded on first use (PEP 562)."""
    if name == "AdamW":
        from ptmkit.training.schedule import AdamW

        return AdamW
    if name in ("CheckpointCallback", "interrupt_note", "latest_step", "restore_state"):
        from ptmkit.training import checkpoint

        return getattr(checkpoint, name)
    if name in ("KernelSchedule", "cpu_threads", "resolve_backend", "train_kernel"):
        from ptmkit.wordvectors import kernel

        return getattr(kernel, name)
    if name == "ProgressCallback":
        from ptmkit.training.progress import ProgressCallback

        return ProgressCallback
    if name == "convert_to_onnx":
        from ptmkit.exporting.convert import convert_to_onnx

        return convert_to_onnx
    if name == "recurrence":
        from ptmkit.exporting.recurrent import recurrence

        return recurrence
    if name in ("step_dataset", "build_training_state"):
        from ptmkit.training import pretrain

        return getattr(pretrain, name)
    raise AttributeError(f"module 'ptmkit.api' has no attribute {name!r}")
