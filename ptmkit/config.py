"""Typed run configuration: TOML files and ``--set key=value`` overrides, validated with errors
that name the key.

A run config has these sections (every key optional, defaults below and in the family's config)::

    family = "bert"
    [model]              # the family's config dataclass (e.g. ptmkit_bert.BertConfig)
    [train]              # TrainConfig: pre-training
    [objectives.mlm]     # one section per objective, its config dataclass
    [finetune]           # FinetuneConfig
    [head]               # the head's config dataclass

Values are checked against the dataclass field types (``int``, ``float``, ``bool``, ``str``,
``list[str]``); an unknown key gets a "did you mean" suggestion.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import tomllib
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ptmkit.errors import ConfigError

if TYPE_CHECKING:
    from ptmkit.plugins import Registry


@dataclasses.dataclass
class TrainConfig:
    """Pre-training settings (section ``[train]``).

    Attributes:
        objectives: objective names; empty means the family's defaults (``["mlm"]`` for BERT).
        batch_size: sequences per step.
        sequence_length: tokens per sequence, specials included.
        max_steps: optimizer steps in total.
        learning_rate: peak learning rate, reached after warm-up, then linear decay to 0.
        warmup_ratio: fraction of ``max_steps`` spent warming up linearly from 0.
        weight_decay: AdamW decoupled weight decay (not applied to LayerNorm and biases).
        seed: seeds Python, NumPy, TensorFlow/Keras and the masking; same seed, same run.
        checkpoint_every: steps between checkpoints (what ``--resume`` continues from).
        heldout_lines: corpus lines (documents/paragraphs) held out for MLM evaluation.
        mixed_precision: the Keras dtype policy of the computation; variables stay float32.
            ``"float32"`` (or ``false``); ``"bf16"`` (``mixed_bfloat16``: bfloat16 matmuls, on
            CPUs with AVX-512 BF16 / AMX through oneDNN, and on Ampere or newer GPUs); ``"fp16"``
            (or ``true``; ``mixed_float16`` with dynamic loss scaling, for GPUs). Logits and losses
            are computed in float32 either way. Stored as the Keras policy name.
        jit_compile: XLA compilation of the train step (for GPUs).
        distribute: ``none``; ``mirrored`` (``tf.distribute.MirroredStrategy``: the GPUs of one
            host); or ``multi-worker`` (``tf.distribute.MultiWorkerMirroredStrategy``: several
            hosts, each described by the ``TF_CONFIG`` environment variable). ``batch_size``,
            ``learning_rate`` and ``max_steps`` stay global: each replica takes
            ``batch_size / replicas`` sequences a step (docs/scale.md).
        schedule: the learning-rate schedule: ``linear`` (warm-up over ``warmup_ratio`` of the
            steps, then linear decay to 0) or ``slanted_triangular`` (Howard and Ruder 2018,
            equation 3: a rise over ``warmup_ratio`` of the steps, the paper's ``cut_frac``, then a
            linear fall to ``learning_rate / schedule_ratio``).
        schedule_ratio: with ``slanted_triangular``, how much smaller the lowest rate is than
            the peak (the paper's ``ratio``: 32).
        init: a finished pre-training run of the same family to start from (``--init RUN``): its
            tokenizer, its ``[model]`` config and its backbone's weights; the corpus is new
            (continued pre-training, e.g. on a target domain's own texts). Empty: start from scratch.
    """

    objectives: list[str] = dataclasses.field(default_factory=list)
    batch_size: int = 32
    sequence_length: int = 128
    max_steps: int = 300
    learning_rate: float = 1e-3
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    seed: int = 42
    checkpoint_every: int = 100
    heldout_lines: int = 200
    mixed_precision: bool | str = "float32"
    jit_compile: bool = False
    distribute: str = "none"
    schedule: str = "linear"
    schedule_ratio: float = 32.0
    init: str = ""

    def validate(self) -> None:
        self.mixed_precision = precision_policy(self.mixed_precision, "train")
        check_positive(self, "train", "batch_size", "sequence_length", "max_steps", "checkpoint_every")
        check_unit_interval(self, "train", "warmup_ratio")
        check_choice(self, "train", "distribute", ("none", "mirrored", "multi-worker"))
        check_schedule(self, "train")


#: ``train.schedule`` and ``finetune.schedule``: learning-rate schedules (:mod:`ptmkit.training.schedule`).
SCHEDULES = ("linear", "slanted_triangular")


def check_schedule(cfg: Any, section: str) -> None:
    """Check ``schedule`` and ``schedule_ratio`` of ``cfg`` (``section`` names them).

    Raises:
        ConfigError: an unknown schedule, a ratio below 1, or a slanted triangular schedule whose
            ``warmup_ratio`` (its ``cut_frac``) is 1.
    """
    check_choice(cfg, section, "schedule", SCHEDULES)
    if not cfg.schedule_ratio >= 1.0:
        raise ConfigError(f"config key '{section}.schedule_ratio' must be >= 1, got {cfg.schedule_ratio}")
    if cfg.schedule == "slanted_triangular" and cfg.warmup_ratio >= 1.0:
        raise ConfigError(f"config key '{section}.warmup_ratio' = {cfg.warmup_ratio} is the slanted triangular schedule's cut_frac; it must be below 1")


#: ``finetune.distill``: what a student learns from ``--teacher`` (:mod:`ptmkit.training.distillation`):
#: its logits only (soft targets), also its blocks' states and attention scores (TinyBERT), or also
#: its last block's attention distributions and value relations (MiniLM).
DISTILL_METHODS = ("logits", "tinybert", "minilm")
#: ``finetune.distill_loss``: the soft-target term between the teacher's and the student's logits:
#: Hinton et al.'s T^2-scaled KL (TinyBERT's soft cross-entropy with ``--distill tinybert``), or
#: Tang et al. 2019's squared error between raw logits.
DISTILL_LOSSES = ("kl", "mse")

#: ``finetune.strategy``: which weights fine-tuning trains (:mod:`ptmkit.training.strategies`).
STRATEGIES = ("full", "features", "adapters", "lora")
#: How multi-task fine-tuning picks each batch's task (``finetune.task_sampling``; :mod:`ptmkit.training.multitask`).
TASK_SAMPLINGS = ("proportional", "temperature", "uniform")


@dataclasses.dataclass
class FinetuneConfig:
    """Fine-tuning settings (section ``[finetune]``); see :class:`TrainConfig` for shared keys.

    Attributes:
        head: the head's name: ``classification`` for transformer runs; on other runs the installed
            head that fits them (``fasttext`` for word vectors).
        epochs: passes over the training set.
        batch_size: examples per step.
        sequence_length: tokens per example, specials included (longer texts are truncated).
        learning_rate: peak learning rate, reached after warm-up, then linear decay to 0.
        warmup_ratio: fraction of all fine-tuning steps (epochs x batches) spent warming up
            linearly from 0.
        seed: seeds Python, NumPy, TensorFlow/Keras: the head's initialisation, dropout and the
            example order.
        max_train_examples: use at most this many training examples (0: all), chosen with ``seed``.
        adam_epsilon: AdamW's epsilon, added to the bias-corrected root as in PyTorch (see :class:`ptmkit.training.schedule.AdamW`).
        checkpoint_every: steps between checkpoints (what ``--resume`` continues from); 0: at the
            end of each epoch only.
        distill_temperature: with ``--teacher``, the softmax temperature T of the soft targets
            (Hinton et al. 2015; DistilBERT: 2).
        distill_alpha: with ``--teacher``, the weight of the soft-target term (T^2-scaled KL;
            with ``distill = "tinybert"`` the soft cross-entropy, TinyBERT's eq. 10); the gold
            labels' cross-entropy gets ``1 - distill_alpha``.
        distill_loss: with ``--teacher``, the soft-target term (:data:`DISTILL_LOSSES`): ``kl``
            (default; the T^2-scaled KL above) or ``mse``, the squared L2 distance between the
            student's and the teacher's raw logits, ``sum_c (z_s - z_t)_c^2`` per example (Tang et
            al. 2019, "Distilling Task-Specific Knowledge from BERT into Simple Neural Networks",
            eq. 2; ``distill_temperature`` unused), still mixed with the gold labels' cross-entropy
            by ``distill_alpha``.
        distill: with ``--teacher``, what the student learns (:data:`DISTILL_METHODS`):
            ``logits`` (the soft targets alone), ``tinybert`` (also embeddings, hidden states
            through a learned projection and attention scores, layer to layer; Jiao et al. 2020)
            or ``minilm`` (also the last block's attention distributions and value relations;
            Wang et al. 2020). The layer methods need a teacher and student whose families expose
            their attention (:class:`ptmkit.contract.ExposesAttention`) and one vocabulary.
        distill_intermediate_weight: with ``tinybert`` or ``minilm``, the weight of the sum of the
            intermediate losses added to the prediction layer's.
        distill_intermediate_epochs: with ``tinybert`` or ``minilm``, TinyBERT's two stages: the
            first this many epochs train on the intermediate losses alone, the rest on the
            prediction layer alone (below ``epochs``); 0 (default): both together every step.
        strategy: which weights train (:mod:`ptmkit.training.strategies`): ``full`` (all),
            ``features`` (the backbone frozen: feature extraction; the same as ``head.freeze_backbone``),
            ``adapters`` (Houlsby et al. 2019 bottleneck adapters after each block's attention and
            feed-forward sublayers; only they, the layer norms and the head train) or ``lora``
            (Hu et al. 2021 low-rank updates of the ``lora_targets`` projections; only they and the
            head train).
        adapter_size: with ``strategy = "adapters"``, the bottleneck width m of each adapter
            (Houlsby et al. 2019: 8 to 256; google-research/adapter-bert: 64).
        adapter_init_scale: with ``adapters``, the standard deviation of the adapters' truncated
            normal weights (biases 0), small so that each adapter starts near the identity
            (adapter-bert's ``init_scale``, 1e-3).
        lora_rank: with ``strategy = "lora"``, the rank r of each update ``(alpha / r) * A @ B``.
        lora_alpha: with ``lora``, the scale numerator alpha (Hugging Face peft's ``lora_alpha``;
            the update is multiplied by ``alpha / r``).
        lora_targets: with ``lora``, the layer names (shell patterns, ``fnmatch``) of the dense
            projections to update; keras' attention names its projections ``query``, ``key``,
            ``value`` and ``attention_output`` (the default, ``query`` and ``value``, is the paper's).
        layer_lr_decay: discriminative fine-tuning, with any strategy: block ``i`` of L (from 0)
            learns at ``learning_rate * layer_lr_decay ** (L - i)``, the embeddings at
            ``layer_lr_decay ** (L + 1)`` times it, the head at the full rate (ULMFiT: 1/2.6 = 0.385;
            ELECTRA: 0.8); 1 (default): one rate for all.
        gradual_unfreezing: with any strategy, ULMFiT's gradual unfreezing (Howard and Ruder 2018,
            section 3.3): epoch 0 trains the head only, epoch 1 also the last block, and one block
            more each epoch down to the embeddings (epoch L + 1); a frozen weight gets no gradient
            and no decay (set ``epochs`` >= L + 2 to train them all).
        schedule: the learning-rate schedule, as ``train.schedule``: ``linear`` or
            ``slanted_triangular`` (ULMFiT's, Howard and Ruder 2018, equation 3; ``warmup_ratio``
            is its ``cut_frac``, the paper's 0.1).
        schedule_ratio: with ``slanted_triangular``, the peak over the lowest rate (the paper's 32).
        sparsity: final sparsity of every kernel, reached by gradual magnitude pruning (Zhu &
            Gupta 2017's polynomial schedule, :mod:`ptmkit.training.sparsity`); 0: no pruning.
        sparsity_begin: the fraction of all fine-tuning steps at which magnitude pruning starts.
        sparsity_end: the fraction of all fine-tuning steps at which it reaches ``sparsity``.
        sparsity_every: steps between pruning steps (Zhu & Gupta's delta t).
        task_sampling: multi-task fine-tuning (``--task``, :mod:`ptmkit.training.multitask`): the
            rule that picks each batch's task: ``proportional`` to the task's training examples
            (MT-DNN, Liu et al. 2019), ``temperature`` (``p_i`` proportional to
            ``n_i ** (1 / task_temperature)``) or ``uniform``.
        task_temperature: with ``task_sampling = "temperature"``, T (1: proportional; larger
            values move the shares towards uniform).
        qat: quantisation-aware fine-tuning (Zafrir et al. 2019, Q8BERT,
            :mod:`ptmkit.training.qat`): the inputs and weights of every dense layer and the
            embedding tables are fake-quantised to symmetric int8 with a straight-through
            gradient; the saved weights are the fake-quantised ones (on the int8 grid), for
            ``ptmkit export --int8 --per-tensor``. With strategy ``full`` or ``features``.
        qat_ema_decay: with ``qat``, the decay of the moving average of each dense layer's input
            ``max|x|`` that sets its input scale (Q8BERT: 0.9999).
        qat_reduce_range: with ``qat``, weights in ``[-64, 64]`` (ONNX Runtime's reduced-range
            int8, ``ptmkit export --int8 --reduce-range``, the export's default on CPUs without
            VNNI) instead of Q8BERT's ``[-127, 127]`` (``--no-reduce-range``); set it as the export
            will, so that the export finds the same integers.
    """

    head: str = "classification"
    epochs: int = 3
    batch_size: int = 32
    sequence_length: int = 64
    learning_rate: float = 5e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    adam_epsilon: float = 1e-6
    seed: int = 42
    max_train_examples: int = 0
    checkpoint_every: int = 0
    mixed_precision: bool | str = "float32"
    jit_compile: bool = False
    distill_temperature: float = 2.0
    distill_alpha: float = 0.5
    distill_loss: str = "kl"
    distill: str = "logits"
    distill_intermediate_weight: float = 1.0
    distill_intermediate_epochs: int = 0
    strategy: str = "full"
    adapter_size: int = 64
    adapter_init_scale: float = 1e-3
    lora_rank: int = 8
    lora_alpha: float = 8.0
    lora_targets: list[str] = dataclasses.field(default_factory=lambda: ["query", "value"])
    layer_lr_decay: float = 1.0
    gradual_unfreezing: bool = False
    schedule: str = "linear"
    schedule_ratio: float = 32.0
    sparsity: float = 0.0
    sparsity_begin: float = 0.0
    sparsity_end: float = 0.75
    sparsity_every: int = 10
    task_sampling: str = "proportional"
    task_temperature: float = 2.0
    qat: bool = False
    qat_ema_decay: float = 0.9999
    qat_reduce_range: bool = False

    def validate(self) -> None:
        self.mixed_precision = precision_policy(self.mixed_precision, "finetune")
        check_positive(self, "finetune", "epochs", "batch_size", "sequence_length", "distill_temperature")
        check_choice(self, "finetune", "strategy", STRATEGIES)
        check_schedule(self, "finetune")
        check_positive(self, "finetune", "adapter_size", "adapter_init_scale", "lora_rank", "lora_alpha", "layer_lr_decay")
        if self.layer_lr_decay > 1:
            raise ConfigError(f"config key 'finetune.layer_lr_decay' must be in (0, 1], got {self.layer_lr_decay}")
        if not self.lora_targets:
            raise ConfigError("config key 'finetune.lora_targets' is empty; name at least one layer (e.g. query,value)")
        check_unit_interval(self, "finetune", "distill_alpha")
        check_choice(self, "finetune", "distill", DISTILL_METHODS)
        check_choice(self, "finetune", "distill_loss", DISTILL_LOSSES)
        check_non_negative(self, "finetune", "distill_intermediate_weight", "distill_intermediate_epochs")
        if self.distill_intermediate_epochs >= self.epochs:
            raise ConfigError(
                f"config key 'finetune.distill_intermediate_epochs' = {self.distill_intermediate_epochs} must be below "
                f"finetune.epochs = {self.epochs} (the prediction layer trains in the epochs after it)"
            )
        check_positive(self, "finetune", "sparsity_every", "task_temperature")
        check_choice(self, "finetune", "task_sampling", TASK_SAMPLINGS)
        if not 0.0 <= self.sparsity < 1.0:
            raise ConfigError(f"config key 'finetune.sparsity' must be in [0, 1), got {self.sparsity}")
        if not 0.0 <= self.sparsity_begin < self.sparsity_end <= 1.0:
            raise ConfigError(f"config keys 'finetune.sparsity_begin' = {self.sparsity_begin} and 'finetune.sparsity_end' = {self.sparsity_end} must satisfy 0 <= begin < end <= 1")
        check_non_negative(self, "finetune", "checkpoint_every")
        check_unit_interval(self, "finetune", "warmup_ratio")
        if not 0.0 < self.qat_ema_decay < 1.0:
            raise ConfigError(f"config key 'finetune.qat_ema_decay' must be in (0, 1), got {self.qat_ema_decay}")
        if self.qat and self.strategy not in ("full", "features"):
            raise ConfigError(
                f"config key 'finetune.qat' (--qat) with finetune.strategy = {self.strategy!r}: its added weights multiply outside "
                f"Dense/EinsumDense layers and would train unquantised; use strategy full or features"
            )


@dataclasses.dataclass
class RunConfig:
    """A whole run's configuration: the family name and one validated dataclass per section."""

    family: str
    model: Any
    train: TrainConfig
    objectives: dict[str, Any]
    finetune: FinetuneConfig
    head: Any

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (what ``config.toml`` in a run directory holds)."""
        return {
            "family": self.family,
            "model": dataclasses.asdict(self.model),
            "train": dataclasses.asdict(self.train),
            "objectives": {name: dataclasses.asdict(cfg) for name, cfg in self.objectives.items()},
            "finetune": dataclasses.asdict(self.finetune),
            "head": dataclasses.asdict(self.head),
        }


PRECISION_POLICIES = {
    "float32": "float32",
    "fp32": "float32",
    "bf16": "mixed_bfloat16",
    "mixed_bfloat16": "mixed_bfloat16",
    "fp16": "mixed_float16",
    "mixed_float16": "mixed_float16",
}


def precision_policy(value: bool | str, section: str) -> str:
    """The Keras dtype policy name that ``SECTION.mixed_precision`` asks for.

    ``false`` and ``true`` are the key's older boolean spelling (``float32`` / ``mixed_float16``).

    Raises:
        ConfigError: a string that is none of ``float32``, ``bf16``, ``fp16`` (or the policy names).
    """
    if isinstance(value, bool):
        return "mixed_float16" if value else "float32"
    if value not in PRECISION_POLICIES:
        raise ConfigError(
            f"{section}.mixed_precision must be one of float32, bf16, fp16 "
            f"(or mixed_bfloat16, mixed_float16), got {value!r}"
        )
    return PRECISION_POLICIES[value]


def check_positive(cfg: Any, section: str, *names: str) -> None:
    """Refuse a value that is not > 0: for a config dataclass's ``validate()``.

    Args:
        cfg: the config dataclass instance.
        section: its section in the run config (``"model"``, ``"train"``, ...), for the message.
        names: the fields to check (numbers).

    Raises:
        ConfigError: ``config key 'SECTION.NAME' must be > 0, got VALUE`` for the first failing field.
    """
    for name in names:
        if getattr(cfg, name) <= 0:
            raise ConfigError(f"config key '{section}.{name}' must be > 0, got {getattr(cfg, name)}")


def check_non_negative(cfg: Any, section: str, *names: str) -> None:
    """Refuse a value that is < 0 (0 often means "off" or "no limit"); see :func:`check_positive`.

    Raises:
        ConfigError: ``config key 'SECTION.NAME' must be >= 0, got VALUE``.
    """
    for name in names:
        if getattr(cfg, name) < 0:
            raise ConfigError(f"config key '{section}.{name}' must be >= 0, got {getattr(cfg, name)}")


def check_unit_interval(cfg: Any, section: str, *names: str) -> None:
    """Refuse a fraction outside ``[0, 1]``; see :func:`check_positive`.

    Raises:
        ConfigError: ``config key 'SECTION.NAME' must be in [0, 1], got VALUE``.
    """
    for name in names:
        if not 0.0 <= getattr(cfg, name) <= 1.0:
            raise ConfigError(f"config key '{section}.{name}' must be in [0, 1], got {getattr(cfg, name)}")


def check_choice(cfg: Any, section: str, name: str, choices: typing.Iterable[str]) -> None:
    """Refuse a value that is not one of ``choices``; see :func:`check_positive`.

    Raises:
        ConfigError: ``config key 'SECTION.NAME' must be one of A, B, got 'VALUE'``.
    """
    choices = tuple(choices)
    if getattr(cfg, name) not in choices:
        raise ConfigError(f"config key '{section}.{name}' must be one of {', '.join(choices)}, got {getattr(cfg, name)!r}")


def read_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file.

    Raises:
        ConfigError: the file is missing or unreadable, or is not valid TOML (the message names file
            and line) or not UTF-8.
    """
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: not UTF-8 (byte {exc.start})") from None
    except OSError as exc:  # a directory, no permission
        raise ConfigError(f"{path}: cannot read the config file ({exc.strerror or exc})") from None


def parse_override(text: str) -> tuple[list[str], Any]:
    """Parse ``section.key=value``; the value is read as a TOML literal, else as a string.

    Raises:
        ConfigError: no ``=`` or an empty key.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. --set train.max_steps=100")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of ``data`` with each ``--set key=value`` applied (keys are checked later)."""
    import copy

    data = copy.deepcopy(data)
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"--set {text!r}: '{part}' is a value, not a section")
            node = child
        node[path[-1]] = value
    return data


def build_dataclass(cls: type, data: Any, where: str, source: str = "config") -> Any:
    """Build dataclass ``cls`` from a dict, checking every key and value type.

    Args:
        cls: the dataclass type.
        data: dict of values (missing keys take the defaults).
        where: the section's dotted name, for messages (``"train"``).
        source: the file or ``--set`` the values came from, for messages.

    Raises:
        ConfigError: an unknown key (with a suggestion), or a value of the wrong type.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: '{where}' must be a section (a table), got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            raise ConfigError(f"{source}: unknown config key '{where}.{key}'{_suggest(key, fields, where)}")
        values[key] = _check_type(value, hints[key], f"{where}.{key}", source)
    obj = cls(**values)
    if hasattr(obj, "validate"):
        try:
            obj.validate()
        except ConfigError as exc:  # name where the values came from, like every other message here
            raise ConfigError(f"{source}: {exc}") from None
    return obj


def _suggest(key: str, choices: Any, section: str = "") -> str:
    """A "did you mean" for an unknown ``key``, as the user types it (``section.key``), or the known keys."""
    close = difflib.get_close_matches(key, list(choices), n=1)
    prefix = f"{section}." if section else ""
    return f" (did you mean '{prefix}{close[0]}'?)" if close else f" (known keys: {', '.join(sorted(choices))})"


def _check_type(value: Any, hint: Any, key: str, source: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        options = tuple(o for o in options if o is not type(None))
        if len(options) > 1:  # ``bool | str``: the first type the value fits
            for option in options:
                try:
                    return _check_type(value, option, key, source)
                except ConfigError:
                    continue
            names = " or ".join(getattr(o, "__name__", str(o)) for o in options)
            raise ConfigError(f"{source}: config key '{key}' must be {names}, got {value!r} ({type(value).__name__})")
        hint = options[0]
        origin = typing.get_origin(hint)
    if origin is list:
        (item,) = typing.get_args(hint)
        if isinstance(value, str):  # --set train.objectives=mlm,nsp
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list):
            raise ConfigError(f"{source}: config key '{key}' must be a list, got {value!r}")
        return [_check_type(v, item, key, source) for v in value]
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
        if ok and not math.isfinite(value):  # TOML's nan and inf pass every "> 0" check
            raise ConfigError(f"{source}: config key '{key}' must be a finite number, got {value!r}")
    elif hint is str:
        ok = isinstance(value, str)
    else:
        ok = True
    if not ok:
        name = getattr(hint, "__name__", str(hint))
        raise ConfigError(f"{source}: config key '{key}' must be {name}, got {value!r} ({type(value).__name__})")
    return value


TOP_LEVEL_KEYS = ("family", "model", "train", "objectives", "finetune", "head")


def build_run_config(
    data: dict[str, Any], *, family_config: type, objective_configs: dict[str, type], head_configs: dict[str, type], source: str
) -> RunConfig:
    """Validate a whole run config dict (see the module docstring for its sections).

    Args:
        data: the parsed TOML merged with overrides.
        family_config: the family's config dataclass.
        objective_configs: config dataclass per installed objective name.
        head_configs: config dataclass per installed head name.
        source: the file the data came from, for messages.

    Raises:
        ConfigError: unknown section or key, wrong type, or an unknown objective or head name.
    """
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            raise ConfigError(f"{source}: unknown config key '{key}'{_suggest(key, TOP_LEVEL_KEYS)}")
    train = build_dataclass(TrainConfig, data.get("train"), "train", source)
    finetune = build_dataclass(FinetuneConfig, data.get("finetune"), "finetune", source)
    raw_objectives = data.get("objectives") or {}
    if not isinstance(raw_objectives, dict):
        raise ConfigError(f"{source}: 'objectives' must be a section of [objectives.NAME] tables")
    for name in list(raw_objectives) + train.objectives:
        if name not in objective_configs:
            raise ConfigError(f"{source}: unknown objective '{name}'{_suggest(name, objective_configs)}")
    objectives = {
        name: build_dataclass(cls, raw_objectives.get(name), f"objectives.{name}", source)
        for name, cls in objective_configs.items()
    }
    if finetune.head not in head_configs:
        raise ConfigError(f"{source}: unknown head 'finetune.head = {finetune.head}'{_suggest(finetune.head, head_configs)}")
    return RunConfig(
        family=str(data.get("family", "")),
        model=build_dataclass(family_config, data.get("model"), "model", source),
        train=train,
        objectives=objectives,
        finetune=finetune,
        head=build_dataclass(head_configs[finetune.head], data.get("head"), "head", source),
    )


_TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _toml_escape(char: str) -> str:
    """One character of a TOML basic string: quote, backslash and control characters escaped."""
    if char in _TOML_ESCAPES:
        return _TOML_ESCAPES[char]
    if ord(char) < 0x20 or ord(char) == 0x7F:
        return f"\\u{ord(char):04X}"
    return char


def field_docs(cls: type) -> dict[str, str]:
    """Each field's description, by attribute name, as one line of plain text (reST roles and
    double backquotes reduced to single backquotes).

    Two sources, as Sphinx autodoc and mkdocstrings read them: the class docstring's
    ``Attributes:`` section (Google style), and a field's own docstring, a string literal right
    under its definition (a line ``lowercase: bool = True``, then the docstring on the next),
    which wins where both describe a field. Base classes' fields are included.
    """
    import re

    docs = _attributes_section(cls)
    docs.update(_attribute_docstrings(cls))
    plain = {}
    for name, text in docs.items():
        text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
        plain[name] = text.replace("``", "`")
    return plain


def _attribute_docstrings(cls: type) -> dict[str, str]:
    """``{name: docstring}`` of the string literals right under annotated class attributes
    (PEP 257's "attribute docstrings"), base classes first; none when the source is unavailable."""
    import ast
    import inspect
    import itertools
    import textwrap

    found: dict[str, str] = {}
    for klass in reversed(cls.__mro__[:-1]):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign | ast.Assign)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
                for target in targets:
                    if isinstance(target, ast.Name):
                        found[target.id] = " ".join(inspect.cleandoc(after.value.value).split())
    return found


def _attributes_section(cls: type) -> dict[str, str]:
    """``{name: text}`` of the entries of ``cls``'s docstring ``Attributes:`` section."""
    docs: dict[str, list[str]] = {}
    current, indent, inside = None, 0, False
    for line in (cls.__doc__ or "").splitlines():
        stripped = line.strip()
        if stripped == "Attributes:":
            inside, current = True, None
            continue
        if not inside:
            continue
        depth = len(line) - len(line.lstrip())
        if not stripped:
            continue
        name, colon, text = stripped.partition(":")
        if current is not None and depth < indent:  # back to the docstring's margin: a new section
            inside = False
        elif colon and name.isidentifier() and (current is None or depth == indent):
            current, indent = name, depth
            docs[current] = [text.strip()]
        elif current is not None and depth > indent:
            docs[current].append(stripped)
        else:  # a new section ends Attributes
            inside = False
    return {name: " ".join(parts) for name, parts in docs.items()}


def to_toml(data: dict[str, Any], comments: dict[str, dict[str, str]] | None = None) -> str:
    """Write a nested dict of scalars, lists of scalars and tables as TOML.

    ``comments`` maps a table's dotted name (``"model"``, ``"objectives.mlm"``) to ``{key: text}``:
    each such key is written after a ``# text`` comment (wrapped at 100 columns).
    """
    import textwrap

    lines: list[str] = []

    def scalar(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (int, float)):
            return repr(value)
        if isinstance(value, str):
            return '"' + "".join(_toml_escape(c) for c in value) + '"'
        if isinstance(value, list):
            return "[" + ", ".join(scalar(v) for v in value) + "]"
        if value is None:
            raise ConfigError("TOML has no null: leave the key out instead")
        raise ConfigError(f"cannot write {type(value).__name__} as TOML")

    def table(prefix: str, node: dict[str, Any]) -> None:
        plain = {k: v for k, v in node.items() if not isinstance(v, dict)}
        nested = {k: v for k, v in node.items() if isinstance(v, dict)}
        if prefix and (plain or not nested):
            lines.append(f"\n[{prefix}]")
        notes = (comments or {}).get(prefix, {})
        for key, value in plain.items():
            if value is not None:
                if key in notes:
                    lines.extend(textwrap.wrap(notes[key], 100, initial_indent="# ", subsequent_indent="# "))
                lines.append(f"{key} = {scalar(value)}")
        for key, value in nested.items():
            table(f"{prefix}.{key}" if prefix else key, value)

    table("", data)
    return "\n".join(lines).lstrip("\n") + "\n"


def choose_head(registry: Registry, family: Any, config_path: str | Path | None, overrides: list[str]) -> list[str]:
    """``overrides`` with ``finetune.head`` set to the head to use on ``family``'s runs.

    A head named by ``--set finetune.head=NAME`` or the ``--config`` file must fit the family (its
    ``requires`` among the family's ``provides``). Otherwise the default head is used when it
    fits, else the one installed head that does.

    Raises:
        ConfigError: the named head does not fit, or no head (or several) fits the family.
    """
    from ptmkit.contract import capabilities

    named: str | None = None
    for override in overrides:
        key, _, value = override.partition("=")
        if key.strip() == "finetune.head":
            named = value.strip().strip('"')
    if named is None and config_path is not None:
        section = read_toml(config_path).get("finetune")
        named = section.get("head") if isinstance(section, dict) else None
    fitting = registry.heads_for(family)
    if named is not None:
        if named in registry.heads and named not in fitting:
            raise ConfigError(
                f"finetune.head = {named!r} needs {sorted(registry.head(named).requires)}, which {family.name} runs do not provide; "
                f"heads for them: {', '.join(fitting) or 'none installed'}"
            )
        return overrides
    default = FinetuneConfig().head
    if default in fitting:
        return overrides
    if len(fitting) != 1:
        raise ConfigError(
            f"no fine-tune head fits {family.name} runs (they offer {sorted(capabilities(family))})"
            if not fitting else f"several heads fit {family.name} runs ({', '.join(fitting)}); choose one with --set finetune.head=NAME"
        )
    return [*overrides, f"finetune.head={fitting[0]}"]
