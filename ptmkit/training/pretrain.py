"""``ptmkit train FAMILY``: tokenizer training, corpus tokenization, pre-training, evaluation.

Stages, each skipped when its output already exists (``--resume``):

1. ``config.toml``: the resolved config.
2. ``tokenizer.json``: trained by the family on the streamed corpus.
3. ``tokens/``: the corpus tokenized once to flat files (:mod:`ptmkit.data.pretraining`).
4. Keras ``fit`` over ``max_steps`` steps with checkpoints every ``checkpoint_every`` steps.
5. Held-out evaluation (masked-LM accuracy and perplexity on the last ``heldout_lines``
   paragraphs), ``backbone.weights.h5``, ``metrics.json`` and the manifest, last.
"""

from __future__ import annotations

import math
import shlex
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

from rich.console import Console

from ptmkit.config import (
    FinetuneConfig,
    RunConfig,
    TrainConfig,
    apply_overrides,
    build_run_config,
    field_docs,
    read_toml,
    to_toml,
)
from ptmkit.console import default_console
from ptmkit.contract import (
    BuildsOnFamily,
    HeldoutLines,
    InitialisesOutputBias,
    InputSpec,
    Resumable,
    ScoresHeldoutLines,
    TrainsItself,
    TrainsOnPairs,
    TrainsOnWordVectors,
    capabilities,
)
from ptmkit.data.readers import read_corpus
from ptmkit.errors import ConfigError, DataError, PluginError, PtmkitError, RunDirError
from ptmkit.io import atomic_save, atomic_write_text
from ptmkit.plugins import Registry, get_registry
from ptmkit.rundir import BACKBONE_WEIGHTS, CONFIG, METRICS, STEP_LOG, TOKENIZER, RunDir, load_weights
from ptmkit.training.distribute import STRATEGIES, Cluster, barrier, check_global_batch, make_strategy, read_cluster
from ptmkit.training.setup import precision


def resolve_config(
    registry: Registry,
    family_name: str,
    config_path: str | Path | None = None,
    overrides: list[str] | None = None,
    base: dict[str, Any] | None = None,
) -> RunConfig:
    """Read ``config_path`` (TOML) over ``base``, apply ``--set`` overrides and validate.

    Raises:
        ConfigError: unreadable TOML, an unknown key, a wrong type, an objective or head that
            the family's backbone cannot serve.
        PluginError: an unknown family.
    """
    family = registry.family(family_name)
    data: dict[str, Any] = dict(base or {})
    source = "config"
    if config_path is not None:
        source = str(config_path)
        from_file = read_toml(config_path)
        if own_loop(family):
            _refuse_core_training_sections(family_name, source, list(from_file))
        data = _merge(data, from_file)
    if own_loop(family) and overrides:
        _refuse_core_training_sections(family_name, "--set", [o.partition("=")[0].strip().split(".")[0] for o in overrides])
    if data.get("family", family_name) != family_name:
        raise ConfigError(f"{source}: family = {data['family']!r} but the command trains {family_name!r}")
    data["family"] = family_name
    data = _with_head_defaults(registry, family, data, overrides or [])
    if family.objective_defaults:  # the family's objective settings under the file's and --set's
        data = _merge({"objectives": {name: dict(values) for name, values in family.objective_defaults.items()}}, data)
    if getattr(family, "train_defaults", None):  # the family's pre-training recipe, under the file's and --set's
        data = _merge({"train": dict(family.train_defaults)}, data)
    if getattr(family, "finetune_defaults", None):  # the family's fine-tuning recipe, under the file's and --set's
        data = _merge({"finetune": dict(family.finetune_defaults)}, data)

    def build(data: dict[str, Any], source: str) -> RunConfig:
        return build_run_config(
            data,
            family_config=family.config_class,
            objective_configs={n: o.config_class for n, o in registry.objectives.items()},
            head_configs={n: h.config_class for n, h in registry.heads.items()},
            source=source,
        )

    config = build(data, source)
    if not overrides:
        _check_across_keys(registry, family, config, source)
        return config
    final = build(apply_overrides(data, overrides), "--set")  # validated on their own, so that an error names --set, not the file
    try:
        _check_across_keys(registry, family, final, "--set")
    except ConfigError:
        try:  # a clash the --config file had before --set: name the file too, not --set alone
            _check_across_keys(registry, family, config, source)
        except ConfigError:
            _check_across_keys(registry, family, final, f"{source} and --set" if config_path is not None else "--set")
        raise
    return final


def _check_across_keys(registry: Registry, family: Any, config: RunConfig, source: str) -> None:
    """Refuse what no single key's check sees: a sequence length over the family's limit, the
    objectives the backbone cannot train together, or a length an objective cannot use.

    Raises:
        ConfigError: one line starting with ``source``.
    """
    limits = family.limits(config.model)
    limit = limits.max_sequence_length
    for section in () if own_loop(family) else ("train", "finetune"):  # a family with its own loop reads neither
        length = getattr(config, section).sequence_length
        if limit is not None and length > limit:
            what = f"'{limits.max_sequence_length_key}' = {limit}" if limits.max_sequence_length_key else f"the model's limit of {limit} positions"
            raise ConfigError(f"{source}: config key '{section}.sequence_length' = {length} exceeds {what}")
    names = config.train.objectives or list(family.default_objectives)
    check_objectives(registry, family, names, source)
    if not own_loop(family):
        for name in names:
            registry.objective(name).check_sequence_length(config.objectives[name], config.train.sequence_length, source)


def check_objectives(registry: Registry, family: Any, names: list[str], source: str) -> None:
    """Refuse an objective list that ``family``'s backbone cannot train in one batch.

    Raises:
        ConfigError: one line starting with ``source`` (``--objective``, ``--set``, the config
            file): an objective listed twice, unknown, needing a capability the backbone lacks,
            or clashing with another (:func:`_refuse_clashing_objectives`).
    """
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(f"{source}: objective {repeated[0]!r} is listed twice; give each objective once")
    for name in names:
        if name not in registry.objectives:
            raise ConfigError(f"{source}: unknown objective {name!r} (installed: {', '.join(sorted(registry.objectives))})")
        if name not in registry.objectives_for(family):
            raise ConfigError(
                f"{source}: objective {name!r} needs {sorted(registry.objective(name).requires)}, which the "
                f"{family.name} backbone does not provide (it provides {sorted(capabilities(family))}); "
                f"it supports {registry.objectives_for(family)}"
            )
    _refuse_clashing_objectives(registry, names, source)


def _with_head_defaults(registry: Registry, family: Any, data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``data`` over the family's :attr:`~ptmkit.contract.ModelFamily.head_defaults` that the
    chosen head (``finetune.head`` of ``overrides``, else of ``data``, else the default head) has."""
    import dataclasses

    if not family.head_defaults:
        return data
    head = (data.get("finetune") or {}).get("head", FinetuneConfig().head)
    for override in overrides:
        key, _, value = override.partition("=")
        if key.strip() == "finetune.head":
            head = value.strip().strip('"')
    if head not in registry.heads:
        return data
    fields = {f.name for f in dataclasses.fields(registry.heads[head].config_class)}
    defaults = {key: value for key, value in family.head_defaults.items() if key in fields}
    return _merge({"head": defaults}, data) if defaults else data


def _refuse_clashing_objectives(registry: Registry, names: list[str], source: str) -> None:
    """Two objectives that both corrupt the token ids (mlm and span), or both build segment pairs
    (nsp and sop; tlm's pairs come from a parallel file), cannot share a batch; an objective that trains alone (rtd) shares it with none."""
    alone = [name for name in names if registry.objective(name).trains_alone]
    if alone and len(names) > 1:
        others = ", ".join(repr(name) for name in names if name != alone[0])
        raise ConfigError(f"{source}: objective {alone[0]!r} trains alone (its backbone reads the corrupted tokens it makes); drop {others}")
    for attributes, what in ((("corrupts_token_ids",), "corrupt the input tokens"), (("needs_segment_pairs", "needs_parallel_pairs"), "build the segment pairs")):
        clashing = [name for name in names if any(getattr(registry.objective(name), a) for a in attributes)]
        if len(clashing) > 1:
            raise ConfigError(f"{source}: objectives {' and '.join(map(repr, clashing))} both {what} of a batch; keep one of them")


def own_key(family: Any, key: str) -> bool:
    """Whether ``family`` has its own loop (:func:`own_loop`) and a ``[model]`` key ``key``: such
    a family takes ``--objective NAME`` as ``model.objective`` and ``--init RUN`` as
    ``model.init`` (its loop then loads the run's weights and tokenizer itself)."""
    import dataclasses

    config_class = getattr(family, "config_class", None)
    return own_loop(family) and dataclasses.is_dataclass(config_class) and key in {f.name for f in dataclasses.fields(config_class)}


def own_loop(family: Any) -> bool:
    """Whether ``family`` trains with its own loop and reads its training keys from ``[model]``
    (:class:`~ptmkit.contract.TrainsItself` on a corpus, :class:`~ptmkit.contract.TrainsOnPairs`
    on sentence pairs)."""
    return isinstance(family, TrainsItself | TrainsOnPairs)


def _refuse_core_training_sections(family_name: str, source: str, sections: list[str]) -> None:
    """A family that trains itself reads its training keys from [model]: [train] and
    [objectives] would be silently ignored, so they are refused."""
    for section in ("train", "objectives"):
        if section in sections:
            raise ConfigError(
                f"{source}: [{section}] is for the core's pre-training loop; the {family_name} family takes its training keys "
                f"in [model] (`ptmkit config {family_name}` lists them)"
            )


def imported_run_config(registry: Any, family: str, model_config: Any) -> Any:
    """The run config of a checkpoint imported into ``family``: the family's defaults with
    ``model_config`` as ``[model]``, and the default ``[train]`` / ``[finetune]`` sequence lengths
    cut to the checkpoint's limit (the family's :meth:`~ptmkit.contract.ModelFamily.limits`;
    kept when it has none, e.g. relative positions)."""
    import dataclasses

    limit = registry.family(family).limits(model_config).max_sequence_length
    limit = max(TrainConfig.sequence_length, FinetuneConfig.sequence_length) if limit is None else limit
    lengths = {section: {"sequence_length": min(cls.sequence_length, limit)} for section, cls in (("train", TrainConfig), ("finetune", FinetuneConfig))}
    return resolve_config(registry, family, base={"model": dataclasses.asdict(model_config), **lengths})


def describe_config(
    registry: Registry,
    family_name: str,
    config_path: str | Path | None = None,
    overrides: list[str] | None = None,
    finetune: bool = False,
) -> str:
    """``family_name``'s run config as commented TOML: every key with its value (defaults, then
    ``config_path`` and ``overrides``) after its description from the config class's docstring.

    What ``ptmkit train`` reads: ``family`` and ``[model]``, plus ``[train]`` and the sections of
    the objectives it will train for a family that pre-trains through the core (transformers). With
    ``finetune``, what ``ptmkit finetune`` reads instead: ``[finetune]`` and ``[head]`` of the
    head that fits the family (:func:`ptmkit.config.choose_head`; a head that trains
    itself reads only ``finetune.head`` of ``[finetune]``); the model is the pre-trained run's.
    The output is valid input for ``--config``.

    Raises:
        ConfigError, PluginError: as :func:`resolve_config`; no head fits the family
            (``finetune``).
    """
    family = registry.family(family_name)
    if finetune:
        from ptmkit.config import choose_head

        overrides = choose_head(registry, family, config_path, list(overrides or []))
    config = resolve_config(registry, family_name, config_path, overrides)
    data = config.to_dict()
    keep = ["family"]
    comments: dict[str, dict[str, str]] = {}
    if finetune:
        head = registry.heads[config.finetune.head]
        keep += ["finetune", "head"]
        comments["finetune"] = {**field_docs(TrainConfig), **field_docs(FinetuneConfig)}
        comments["head"] = field_docs(head.config_class)
        if isinstance(head, TrainsOnWordVectors):  # its epochs, rates and sizes are [head] keys
            data["finetune"] = {"head": config.finetune.head}
    else:
        keep.append("model")
        comments["model"] = field_docs(family.config_class)
        if not own_loop(family):
            keep += ["train", "objectives"]
            comments["train"] = field_docs(TrainConfig)
            names = config.train.objectives or list(family.default_objectives)
            data["objectives"] = {name: data["objectives"][name] for name in names}
            comments.update({f"objectives.{name}": field_docs(registry.objective(name).config_class) for name in names})
    if finetune:
        header = (
            f"# ptmkit fine-tuning config for {family_name} runs: `ptmkit finetune RUN_DIR ... --config FILE` reads it (the "
            f"model is the run's); `--set section.key=value` overrides a key.\n"
        )
    else:
        header = f"# ptmkit run config for {family_name}: `ptmkit train {family_name} ... --config FILE` reads it; `--set section.key=value` overrides a key.\n"
        if isinstance(family, TrainsItself):
            header += f"# Scaling: {scaling_note(family)}.\n"
    return header + to_toml({key: data[key] for key in keep}, comments)


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in update.items():
        merged[key] = _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
    return merged


def build_pretraining_model(registry: Registry, config: RunConfig) -> tuple[Any, Any, dict[str, tuple[Any, Any]]]:
    """Build ``(backbone, training_model, objectives)`` for ``config`` (compiled).

    ``objectives`` maps each objective name to ``(Objective, its config)``.
    """
    import keras

    from ptmkit.training.schedule import adamw

    family = registry.family(config.family)
    objectives = selected_objectives(registry, config)
    backbone = family.build_backbone(config.model)
    shared = SharedForward(backbone)  # objectives on the same inputs share one forward pass
    inputs = keras_inputs(family.inputs)
    all_inputs, outputs, losses, metrics = dict(inputs), {}, {}, {}
    for objective, objective_config in objectives.values():
        if isinstance(objective, BuildsOnFamily):  # a companion model of the family (ELECTRA's generator)
            extra, out, loss, metric = objective.build_on_family(family, config.model, shared, inputs, objective_config)
        else:
            extra, out, loss, metric = objective.build(shared, inputs, objective_config)
        all_inputs.update(extra)
        outputs.update(out)
        losses.update(loss)
        metrics.update(metric)
    model = keras.Model(all_inputs, outputs, name=f"{config.family}_pretraining")
    train = config.train
    model.compile(
        optimizer=adamw(train.learning_rate, train.weight_decay, train.max_steps, train.warmup_ratio, schedule=train.schedule, ratio=train.schedule_ratio),
        loss=losses,
        weighted_metrics=metrics,
        jit_compile=train.jit_compile,
    )
    return backbone, model, objectives


class SharedForward:
    """The backbone as the objectives see it while the training model is built: a call on the
    very inputs (the same symbolic tensors, no other arguments) of an earlier call returns that
    call's outputs, so that objectives reading the same forward pass (masked LM's
    ``sequence_output`` and a sentence objective's ``pooled_output``) share one. Each call of a
    functional backbone is a node of the training graph, run at every step: without this, two
    objectives ran the whole backbone twice per step (and a backbone whose layers are reused,
    ``num_layers`` calls of one shared layer, twice as many shared-layer calls). A call on other
    inputs (ELECTRA's discriminator on corrupted ids) or with other arguments runs the backbone
    again, as it must. Every other attribute is the backbone's (``token_embedding``, sizes,
    ``sequence_output_with_attention_mask`` ...).

    Args:
        backbone: the family's functional ``keras.Model``.
    """

    def __init__(self, backbone: Any) -> None:
        self._backbone = backbone
        self._calls: dict[tuple[tuple[str, int], ...], tuple[Any, Any]] = {}

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs or not isinstance(inputs, dict):
            return self._backbone(inputs, *args, **kwargs)
        key = tuple(sorted((name, id(tensor)) for name, tensor in inputs.items()))
        if key not in self._calls:  # the inputs are kept with the outputs: their ids stay theirs
            self._calls[key] = (dict(inputs), self._backbone(inputs))
        return self._calls[key][1]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backbone, name)


def selected_objectives(registry: Registry, config: RunConfig) -> dict[str, tuple[Any, Any]]:
    """Each objective the run trains (``train.objectives``, else the family's defaults), by name:
    ``(Objective, its config)``."""
    names = config.train.objectives or list(registry.family(config.family).default_objectives)
    return {name: (registry.objective(name), config.objectives[name]) for name in names}


def keras_inputs(inputs: tuple[InputSpec, ...] | list[InputSpec]) -> dict[str, Any]:
    """One ``keras.Input`` per declared input: its shape without the batch axis (``None`` for
    dynamic axes), its dtype and name."""
    import keras

    return {spec.name: keras.Input(shape=spec.shape, dtype=spec.dtype, name=spec.name) for spec in inputs}


def backbone_inputs(backbone: Any) -> dict[str, Any]:
    """Fresh ``keras.Input`` tensors shaped like ``backbone``'s dict of inputs (for a model built
    on a backbone: a head, the sentence embedder)."""
    import keras

    return {name: keras.Input(shape=tuple(t.shape[1:]), dtype=t.dtype, name=name) for name, t in backbone.input.items()}


def step_dataset(make: Any, start: int, stop: int) -> Any:
    """Batches ``start .. stop`` as a Keras ``PyDataset`` whose index ``i`` is global step ``start + i``."""
    import keras

    class StepDataset(keras.utils.PyDataset):
        def __init__(self) -> None:
            super().__init__(workers=1, use_multiprocessing=False)

        def __len__(self) -> int:
            return stop - start

        def __getitem__(self, index: int) -> Any:
            return make(start + index)

    return StepDataset()


def build_training_state(model: Any, batch: Any) -> None:
    """Create, before ``fit``, the variables Keras would create inside the first trace of the train
    step: the optimizer's slots, the compiled metrics' and losses' state.

    Without a ``tf.distribute`` strategy Keras (3.15) defers building them to that trace; a
    ``tf.function`` that creates variables on its first call is traced a second time without them,
    so every ``fit`` traced its train step twice (half of a tiny run's seconds, and the first step's
    wait at any size). This runs Keras' own symbolic build (what ``fit`` does under a strategy) on
    ``batch`` (the first step's ``(x, y[, sample_weight])``); a no-op when Keras has built them
    already (a restored checkpoint) or when its trainer lacks that method (a later Keras: it only
    costs the second trace).
    """
    symbolic_build = getattr(model, "_symbolic_build", None)
    if symbolic_build is not None and getattr(model, "_distribute_strategy", None) is None:
        symbolic_build(data_batch=batch)


def fit_steps(model: Any, make: Any, start: int, stop: int, callbacks: list[Any]) -> None:
    """``model.fit`` over global steps ``start .. stop``: ``make(step)`` is the batch of ``step``
    (a :func:`step_dataset`, in order), the training state built first (:func:`build_training_state`),
    no Keras progress bar (``callbacks`` report)."""
    build_training_state(model, make(start))
    # shuffle=False: batch i is step start + i; Keras would otherwise permute a PyDataset's indices
    model.fit(step_dataset(make, start, stop), epochs=1, shuffle=False, verbose=0, callbacks=callbacks)


def pretrain(
    family_name: str,
    corpus: str | Path | None,
    out: str | Path,
    config_path: str | Path | None = None,
    overrides: list[str] | None = None,
    objectives: list[str] | None = None,
    resume: bool = False,
    console: Console | None = None,
    registry: Registry | None = None,
    tokenizer: str | Path | None = None,
    distribute: str | None = None,
    parallel: str | Path | None = None, dev: str | Path | None = None, init: str | Path | None = None,
) -> dict[str, Any]:
    """Pre-train a model of family ``family_name`` on ``corpus`` (or, for a family that
    :class:`~ptmkit.contract.TrainsOnPairs`, on the sentence pairs of ``parallel``); write the run
    to ``out``.

    Args:
        family_name: an installed family (``ptmkit plugins`` lists them).
        corpus: text file (``.gz``/``.bz2`` too) or directory, one document or paragraph per line;
            None for a family that trains on pairs.
        out: the run directory to create (or to continue with ``resume``).
        config_path: optional TOML run config.
        overrides: ``section.key=value`` strings applied over the config.
        objectives: objective names (default: the family's, e.g. ``["mlm"]``); for a family with
            its own loop and a ``model.objective`` key, one name, set as ``model.objective``.
        resume: continue an interrupted run in ``out`` from its newest checkpoint.
        tokenizer: an existing ``tokenizer.json`` to use instead of training one (either way one
            seed gives one run, bit for bit: ``tests/test_reproducibility.py``).
        distribute: ``none``, ``mirrored`` or ``multi-worker`` (sets ``train.distribute``;
            :mod:`ptmkit.training.distribute`); refused by families that train themselves.
        parallel: ``SOURCE<TAB>TARGET`` pairs (:mod:`ptmkit.data.parallel`), for a family that
            :class:`~ptmkit.contract.TrainsOnPairs` (and only for one; or ``corpus`` if it also trains itself).
        dev: held-out pairs of such a family.
        init: a finished pre-training run to continue (``train.init``, :func:`init_source`; for a
            family with its own loop and a ``model.init`` key, ``model.init``: :func:`own_key`).

    Returns:
        the metrics written to ``metrics.json`` (a multi-worker run's other workers write
        nothing and return ``{"worker": index, "steps": max_steps}``).

    Raises:
        ConfigError, DataError, PluginError, RunDirError: with a one-line message.
    """
    from ptmkit.training.setup import quiet_tensorflow

    console = console or default_console()
    registry = registry or get_registry()
    family = registry.family(family_name)
    trains_itself = own_loop(family)
    _check_flags(registry, family, corpus, parallel, dev, distribute, tokenizer, resume, objectives)
    run = RunDir(out)
    extra, base, tokenizer = _flag_settings(family, objectives, distribute, init, tokenizer)
    cluster = Cluster("none") if trains_itself else _cluster(registry, family_name, run, config_path, (overrides or []) + extra, resume)
    stored = _stored_config(run, family_name, trains_itself, resume, shared=not cluster.is_chief)
    config = _run_config(registry, family_name, run, stored, config_path, (overrides or []) + extra, base)
    _check_paths(corpus, parallel, dev)
    corpus, pairs = (corpus, False) if trains_itself else _core_data(registry, family, config, corpus, parallel, dev)  # --parallel, as pairs?
    if cluster.kind == "multi-worker":
        check_global_batch(config.train.batch_size, cluster.num_workers, f"{cluster.num_workers} workers in TF_CONFIG")
    quiet_tensorflow()  # after the checks above: a wrong path or key is refused without importing TensorFlow
    if isinstance(family, TrainsOnPairs) and parallel is not None:
        return _train_on_pairs(registry, family, config, Path(parallel), None if dev is None else Path(dev), run, console, resume)
    assert corpus is not None
    if trains_itself:
        return _train_family(registry, family, config, Path(corpus), run, console, resume)
    strategy = make_strategy(cluster)  # before any TensorFlow operation (collective ops are set up at start)
    if strategy is not None:
        replicas = strategy.num_replicas_in_sync
        check_global_batch(config.train.batch_size, replicas, f"{cluster.num_workers} worker(s) x {replicas // cluster.num_workers} device(s)")
    if not cluster.is_chief:  # the chief prepares the shared run directory; the others wait, then read it
        barrier(strategy)
        return _fit(registry, config, family, run.load_tokenizer(), run, corpus, console, strategy, cluster)
    tokenizer = _given_tokenizer(tokenizer, run, resume)
    word_objectives = [name for name, (o, c) in selected_objectives(registry, config).items() if o.needs_word_starts(c)]
    trained = _prepare_run(run, family, config, corpus, tokenizer, console, word_objectives, parallel_pairs=pairs)
    if cluster.kind == "multi-worker":
        barrier(strategy)
    return _fit(registry, config, family, trained, run, corpus, console, strategy, cluster)


def _flag_settings(
    family: Any, objectives: list[str] | None, distribute: str | None, init: str | Path | None, tokenizer: str | Path | None,
) -> tuple[list[str], dict[str, Any] | None, str | Path | None]:
    """``(--set overrides, base config, tokenizer file)`` that ``--objective``, ``--distribute``
    and ``--init`` (:func:`init_source`) amount to."""
    section = "model" if own_loop(family) else "train"  # a family with its own loop: own_key
    key = "objective" if own_loop(family) else "objectives"
    extra = ([f"{section}.{key}={','.join(objectives)}"] if objectives else []) + ([f"train.distribute={distribute}"] if distribute is not None else [])
    if init is None:
        return extra, None, tokenizer
    base, tokenizer = init_source(family, init, tokenizer)
    return [*extra, f"{section}.init={Path(init).resolve()}"], base, tokenizer


def _check_flags(
    registry: Registry, family: Any, corpus: str | Path | None, parallel: str | Path | None, dev: str | Path | None,
    distribute: str | None, tokenizer: str | Path | None, resume: bool, objectives: list[str] | None,
) -> None:
    """Refuse flags ``family`` cannot take: the wrong data flag (:func:`_check_data_flags`), an
    unknown strategy, objectives it cannot train (:func:`_check_objective_flag`), and for a family
    with its own loop ``--distribute``, ``--tokenizer``, or ``--resume`` without checkpoints.

    Raises:
        ConfigError: one line naming the flag.
    """
    if own_loop(family):  # a core-trained family's data flag depends on its objectives: checked with its config
        _check_data_flags(family, corpus, parallel, dev)
    _check_objective_flag(registry, family, objectives)
    if distribute is not None and distribute not in STRATEGIES:
        raise ConfigError(f"--distribute: expected one of {', '.join(STRATEGIES)}, got {distribute!r}")
    if not own_loop(family):
        return
    if distribute is not None:
        raise ConfigError(f"--distribute: {scaling_note(family)}; drop --distribute")
    if tokenizer is not None:
        raise ConfigError(f"--tokenizer: the {family.name} family builds its own vocabulary; drop --tokenizer")
    if resume and not isinstance(family, Resumable | TrainsOnPairs):
        raise ConfigError(f"--resume: the {family.name} family trains in one pass without checkpoints; drop --resume (and delete an interrupted run directory)")


def _check_objective_flag(registry: Registry, family: Any, objectives: list[str] | None) -> None:
    """Refuse ``--objective`` on a family with its own objective, or naming objectives that
    :func:`check_objectives` refuses (the error names ``--objective``, not ``--set``)."""
    if not objectives:
        return
    if own_loop(family) and own_key(family, "objective") and len(objectives) == 1:
        try:  # model.objective: the family's config validates the name
            family.config_class(objective=objectives[0]).validate()
        except ConfigError as error:
            raise ConfigError(f"--objective: {error}") from None
        return
    if own_loop(family):
        raise ConfigError(
            f"--objective: the {family.name} family trains with its own objective; choose it with its [model] keys "
            f"(ptmkit config {family.name}) and drop --objective"
            + (" (one objective: it sets model.objective)" if own_key(family, "objective") else "")
        )
    check_objectives(registry, family, objectives, "--objective")


def _check_paths(corpus: str | Path | None, parallel: str | Path | None, dev: str | Path | None) -> None:
    """Raises DataError naming the first data file given that does not exist."""
    for path, what in ((corpus, "corpus file or directory"), (parallel, "parallel file"), (dev, "dev file")):
        if path is not None and not Path(path).exists():
            raise DataError(f"{path}: no such {what}")


def _given_tokenizer(tokenizer: str | Path | None, run: RunDir, resume: bool) -> str | Path | None:
    """``--tokenizer``, or None when a resumed run already holds it (the same file).

    Raises:
        ConfigError: a resumed run whose tokenizer differs from ``--tokenizer``.
    """
    if tokenizer is not None and resume and (run / TOKENIZER).exists():
        if _read_tokenizer(Path(tokenizer)).to_str() != run.load_tokenizer().to_str():
            raise ConfigError(f"--resume: --tokenizer {tokenizer} differs from the run's {run / TOKENIZER}; drop --tokenizer")
        return None  # the run's own, the same
    return tokenizer


def _train_on_pairs(
    registry: Registry, family: Any, config: RunConfig, pairs: Path, dev_pairs: Path | None, run: RunDir, console: Console, resume: bool,
) -> dict[str, Any]:
    """Train a family that :class:`~ptmkit.contract.TrainsOnPairs` through :func:`_train_family`."""
    extra_flags = [] if dev_pairs is None else ["--dev", str(dev_pairs)]
    return _train_family(
        registry, family, config, pairs, run, console, resume,
        train=lambda model_config, res: family.train_pairs(pairs, dev_pairs, run.path, model_config, console, **({"resume": True} if res else {})),
        data_flags=["--parallel", str(pairs), *extra_flags],
    )


def scaling_note(family: Any) -> str:
    """How a family that trains itself uses a machine (its ``scaling`` attribute, else a default)."""
    return f"the {family.name} family " + (getattr(family, "scaling", None) or "trains itself on one host, outside tf.distribute")


def _cluster(registry: Registry, family_name: str, run: RunDir, config_path: str | Path | None, overrides: list[str], resume: bool) -> Cluster:
    """The run's :class:`~ptmkit.training.distribute.Cluster`: ``train.distribute`` of the config
    the command resolves to (the stored one when resuming), and ``TF_CONFIG`` for multi-worker.

    Raises:
        ConfigError: as :func:`resolve_config`, :func:`~ptmkit.training.distribute.read_cluster`.
    """
    stored = read_toml(run / CONFIG) if resume and (run / CONFIG).is_file() else None
    if stored is not None and stored.get("family") != family_name:
        return Cluster("none")  # _stored_config says what is wrong
    return read_cluster(_run_config(registry, family_name, run, stored, config_path, overrides).train.distribute)


def _core_data(
    registry: Registry, family: Any, config: RunConfig, corpus: str | Path | None, parallel: str | Path | None, dev: str | Path | None
) -> tuple[str | Path | None, bool]:
    """The data a core-trained run reads, after :func:`_check_data_flags`: ``(parallel, True)``
    when one of its objectives trains on sentence pairs, else ``(corpus, False)``.

    Raises:
        ConfigError: the wrong data flag (:func:`_check_data_flags`).
        DataError: a corpus with no text at all (empty, all blank): its reader's one-line error,
            before TensorFlow loads (reading stops at the first text).
    """
    pairs_objective = _pairs_objective(registry, config)
    _check_data_flags(family, corpus, parallel, dev, pairs_objective, _pairs_objectives(registry))
    if pairs_objective is None and corpus is not None:
        next(iter(read_corpus(corpus)), None)
    return (parallel, True) if pairs_objective is not None else (corpus, False)


def _pairs_objectives(registry: Registry) -> list[str]:
    """The installed objectives that :attr:`~ptmkit.contract.Objective.needs_parallel_pairs`."""
    return sorted(name for name, objective in registry.objectives.items() if objective.needs_parallel_pairs)


def _pairs_objective(registry: Registry, config: RunConfig) -> str | None:
    """The run's objective that trains on the pairs of a parallel file, or None."""
    return next((name for name, (objective, _) in selected_objectives(registry, config).items() if objective.needs_parallel_pairs), None)


def _check_data_flags(
    family: Any, corpus: str | Path | None, parallel: str | Path | None, dev: str | Path | None,
    pairs_objective: str | None = None, pairs_objectives: list[str] | None = None,
) -> None:
    """A family that :class:`~ptmkit.contract.TrainsOnPairs` takes ``--parallel`` (and ``--dev``),
    or, when it also :class:`~ptmkit.contract.TrainsItself`, ``--corpus`` instead; a run whose ``pairs_objective`` :attr:`~ptmkit.contract.Objective.needs_parallel_pairs`
    ``--parallel`` alone (its held-out pairs are the file's last), every other run ``--corpus``.

    Raises:
        ConfigError: the wrong data flag for the family or objective, or none.
    """
    name = family.name
    if pairs_objective is not None:
        if corpus is not None:
            raise ConfigError(f"--corpus: objective {pairs_objective!r} trains on sentence pairs; give --parallel FILE (SOURCE<TAB>TARGET lines) instead")
        if parallel is None:
            raise ConfigError(f"objective {pairs_objective!r} trains on sentence pairs: give --parallel FILE (SOURCE<TAB>TARGET lines)")
        if dev is not None:
            raise ConfigError(f"--dev: objective {pairs_objective!r} holds out the last pairs of --parallel (train.heldout_lines); drop --dev")
        return
    if isinstance(family, TrainsOnPairs) and isinstance(family, TrainsItself):
        if (corpus is None) == (parallel is None):
            raise ConfigError(f"the {name} family trains on sentence pairs (--parallel FILE) or pre-trains on a text corpus (--corpus FILE): give one of them")
        if dev is not None and parallel is None:
            raise ConfigError(f"--dev: held-out pairs go with --parallel; the {name} family's --corpus runs take none")
        return
    if isinstance(family, TrainsOnPairs):
        if corpus is not None:
            raise ConfigError(f"--corpus: the {name} family trains on sentence pairs; give --parallel FILE (SOURCE<TAB>TARGET lines) instead")
        if parallel is None:
            raise ConfigError(f"the {name} family trains on sentence pairs: give --parallel FILE (SOURCE<TAB>TARGET lines)")
        return
    for flag, value in (("--parallel", parallel), ("--dev", dev)):
        if value is not None:
            hint = f" (unless its objective trains on them: --objective {' or '.join(pairs_objectives)})" if pairs_objectives and flag == "--parallel" else ""
            raise ConfigError(f"{flag}: the {name} family trains on a monolingual --corpus, not on sentence pairs{hint}")
    if corpus is None:
        raise ConfigError(f"the {name} family trains on a text corpus: give --corpus FILE")


def stage_name(family: Any, stage: str, default: str) -> str:
    """What ``family`` calls a run of ``stage`` in messages (:attr:`~ptmkit.contract.ModelFamily.stage_names`), else ``default``."""
    return str(getattr(family, "stage_names", {}).get(stage, default))


def init_source(family: Any, init: str | Path, tokenizer: str | Path | None) -> tuple[dict[str, Any], Path]:
    """``({"model": the init run's [model]}, its tokenizer file)`` for ``--init``, after checking
    that ``init`` is a finished pre-training run of ``family``.

    Raises:
        ConfigError: ``--tokenizer`` with ``--init``, or a family with its own training loop and no
            ``model.init`` key (:func:`own_key`).
        RunDirError: ``init`` holds no finished run (the message names the stage to run first,
            :func:`stage_name`), or one that is not a pre-training run.
        PluginError: ``init`` is another family's run.
    """
    if own_loop(family) and not own_key(family, "init"):
        raise ConfigError(f"--init: the {family.name} family trains with its own loop; --init continues a run the core pre-trains")
    if tokenizer is not None:
        raise ConfigError(f"--init {init}: the run's own tokenizer is used; drop --tokenizer")
    source = RunDir(init)
    wanted = stage_name(family, "pretrain", f"{family.name} pre-training run")
    if not (source / "manifest.json").exists():
        unfinished = " (unfinished: no manifest.json)" if (source / CONFIG).exists() else ""
        raise RunDirError(f"--init {init}: no finished {wanted} there{unfinished}; train it first: ptmkit train {family.name} --corpus CORPUS --out {init}")
    manifest = source.manifest()
    if manifest["family"] != family.name:
        raise PluginError(f"--init {init}: is a {manifest['family']!r} run, not {family.name!r}; continue a {wanted}")
    if manifest["stage"] not in ("pretrain", "import"):
        raise RunDirError(f"--init {init}: is a {manifest['stage']} run; --init continues a {wanted}")
    return {"model": read_toml(source.require(CONFIG)).get("model", {})}, source.require(TOKENIZER)


def init_lineage(init: str) -> dict[str, Any]:
    """The manifest fields of a run continued from ``init`` (``train.init``; empty: none): ``init``
    and ``corpora``, the corpora of every run in the chain, oldest first."""
    if not init:
        return {}
    parent = RunDir(init).manifest()
    return {"init": init, "corpora": [*parent.get("corpora", [parent.get("corpus")])]}


def _stored_config(run: RunDir, family_name: str, trains_itself: bool, resume: bool, shared: bool = False) -> dict[str, Any] | None:
    """The run's stored ``config.toml`` when resuming (None otherwise), after checking that
    ``run`` may be started or resumed. ``shared``: a multi-worker run's other worker, which
    finds the directory its chief is filling.

    Raises:
        RunDirError: ``run`` is a file, holds a finished run, is not empty (without ``resume``)
            or has nothing to resume.
        PluginError: the run to resume is another family's.
    """
    if run.path.exists() and not run.path.is_dir():
        raise RunDirError(f"{run.path}: exists and is not a directory; choose another --out")
    if (run / "manifest.json").exists():
        hint = "" if trains_itself else " (or raise train.max_steps in a new run)"
        raise RunDirError(f"{run.path}: already holds a finished run; choose another --out{hint}")
    if not resume:
        if not shared and run.path.exists() and any(run.path.iterdir()):
            raise RunDirError(f"{run.path}: exists and is not empty; use --resume to continue it, or another --out")
        return None
    if not (run / CONFIG).exists():
        raise RunDirError(f"{run.path}: nothing to resume (no {CONFIG}); start the run without --resume")
    stored = read_toml(run / CONFIG)
    if stored.get("family") != family_name:
        raise PluginError(f"{run / CONFIG}: the run is a {stored.get('family')!r} run, not {family_name!r}")
    return stored


def _run_config(
    registry: Registry, family_name: str, run: RunDir, stored: dict[str, Any] | None, config_path: str | Path | None, overrides: list[str],
    base: dict[str, Any] | None = None,
) -> RunConfig:
    """The run's config: the ``stored`` one of a resumed run (the command retyped with
    ``--resume``: its flags must say what the run says, :func:`check_resume_flags`), else
    ``config_path`` with ``overrides`` over ``base`` (an ``--init`` run's ``[model]``)."""
    if stored is None:
        return resolve_config(registry, family_name, config_path, overrides, base=base)
    check_resume_flags(registry, family_name, run / CONFIG, stored, config_path, overrides)
    return resolve_config(registry, family_name, None, None, base=stored)


def _prepare_run(
    run: RunDir, family: Any, config: RunConfig, corpus: str | Path, tokenizer: str | Path | None, console: Console, word_objectives: list[str] | None = None,
    parallel_pairs: bool = False,
) -> Any:
    """Write the run's ``config.toml``, its tokenizer (``tokenizer``'s file, or one trained;
    kept when the run has one) and ``tokens/``; return the tokenizer. A run directory this call
    created is removed again when a step fails (nothing was trained yet), e.g. when
    ``word_objectives`` (objectives that read word starts) meet a tokenizer without them.
    With ``parallel_pairs``, ``corpus`` is a parallel file, tokenized a side a line
    (:func:`ptmkit.data.pretraining.corpus_texts`)."""
    created = not run.path.exists()
    try:
        run.path.mkdir(parents=True, exist_ok=True)
        atomic_write_text(run / CONFIG, to_toml(config.to_dict()))
        if tokenizer is not None:
            loaded = _read_tokenizer(Path(tokenizer))
            family.special_tokens(loaded)  # refuse a vocabulary without the family's specials
            atomic_save(run / TOKENIZER, lambda tmp: loaded.save(str(tmp)))
        trained, num_lines = _tokenizer(run, family, config, corpus, console, parallel_pairs)
        if word_objectives:
            from ptmkit.data.tokenization import word_start_table

            if word_start_table(trained) is None:
                raise ConfigError(
                    f"objective {word_objectives[0]!r} masks whole words, but the tokenizer's {type(trained.model).__name__} model marks no word "
                    "continuations (a WordPiece '##' continuing_subword_prefix, or a Metaspace '▁' before words); use token-level masking or such a tokenizer"
                )
        tokens_dir = run / "tokens"
        if not (tokens_dir / "tokens.json").exists():
            from ptmkit.data.pretraining import corpus_texts, tokenize_corpus

            with console.status("tokenizing the corpus"):
                texts = corpus_texts(corpus, parallel_pairs)
                summary = tokenize_corpus(texts, trained, tokens_dir, num_lines, config.train.heldout_lines, 2 if parallel_pairs else 1)
            console.print(
                f"tokenized {summary['train']['lines']:,} lines ({summary['train']['tokens']:,} tokens) for training, "
                f"{summary['heldout']['lines']:,} held out ({summary['heldout']['tokens']:,} tokens)"
            )
    except PtmkitError:
        if created:  # nothing was trained yet: leave no half-made run directory behind
            shutil.rmtree(run.path, ignore_errors=True)
        raise
    return trained


def check_resume_flags(
    registry: Registry, family_name: str, stored_path: Path, stored: dict[str, Any], config_path: str | Path | None, overrides: list[str]
) -> None:
    """Accept the ``--config``/``--set`` flags of a resumed command when every key they give equals
    the run's stored config (the user retyped the interrupted command with ``--resume``).

    Raises:
        ConfigError: naming the first key whose value differs from ``stored_path``'s, and where
            the new value came from; or a flag that is invalid on its own.
    """
    if config_path is None and not overrides:
        return
    kept = resolve_config(registry, family_name, None, None, base=stored).to_dict()
    for source, given in (
        (str(config_path), resolve_config(registry, family_name, config_path, None, base=stored).to_dict() if config_path else kept),
        ("--set", resolve_config(registry, family_name, config_path, overrides, base=stored).to_dict()),
    ):
        for key, old, new in _differences(kept, given):
            raise ConfigError(
                f"--resume: {source} sets '{key}' = {new!r}, but the run in {stored_path.parent} has {old!r} ({stored_path}); "
                "a resumed run keeps its config: drop that flag, or start a new run with another --out"
            )


def _differences(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[tuple[str, Any, Any]]:
    """``(dotted key, old value, new value)`` for every leaf where ``old`` and ``new`` differ."""
    found = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            found += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            found.append((f"{prefix}{key}", a, b))
    return found


def _train_family(
    registry: Registry, family: Any, config: RunConfig, corpus: Path, run: RunDir, console: Console, resume: bool = False,
    train: Any = None, data_flags: list[str] | None = None,
) -> dict[str, Any]:
    """Hand training to a family with its own loop (:class:`~ptmkit.contract.TrainsItself`, or
    ``train(model_config, resume)`` for one that :class:`~ptmkit.contract.TrainsOnPairs`, whose
    command line takes ``data_flags`` instead of ``--corpus``); with ``resume``, to continue from
    the checkpoint in ``run`` (:class:`~ptmkit.contract.Resumable`). When the family's loop saved
    ``backbone.weights.h5``, the manifest names it (``weights``) with the declared ``inputs``, as a
    core-trained run's does, so that ``finetune``, ``probe`` and ``export`` load the run."""
    import dataclasses

    def has_checkpoint() -> bool:
        return isinstance(family, Resumable | TrainsOnPairs) and family.has_checkpoint(run.path)

    if train is None:
        def train(model_config: Any, res: bool) -> dict[str, Any]:
            return family.train(corpus, run.path, model_config, console, **({"resume": True} if res else {}))

    if resume and not has_checkpoint():
        raise RunDirError(f"{run.path}: no checkpoint to resume from (the run stopped before saving one); delete the directory and start the run again")
    created = not run.path.exists()
    try:
        run.path.mkdir(parents=True, exist_ok=True)
        if not resume:
            atomic_write_text(run / CONFIG, to_toml({"family": config.family, "model": dataclasses.asdict(config.model)}))
        metrics = train(config.model, resume)
    except BaseException as error:  # an error or an interruption: keep the run only if it can resume
        if created and not has_checkpoint():
            shutil.rmtree(run.path, ignore_errors=True)
        elif has_checkpoint() and not isinstance(error, PtmkitError):
            command = shlex.join(["ptmkit", "train", config.family, *(data_flags or ["--corpus", str(corpus)]), "--out", str(run.path), "--resume"])
            console.print(f"the run's last checkpoint is in {run.path}; `{command}` continues it", markup=False, highlight=False)
        raise
    run.write_json(METRICS, metrics)
    plugin = registry.owner("family", config.family)
    run.write_manifest(
        stage="pretrain",
        family=config.family,
        plugin={"name": plugin.name, "distribution": plugin.distribution, "version": plugin.version},
        objectives=[],
        head=None,
        **({"parallel": str(corpus.resolve())} if data_flags else {"corpus": str(corpus.resolve())}),
        trainer="family",
        **init_lineage(str(getattr(config.model, "init", "") or "")),  # a family that takes --init as model.init
        # a family whose loop saved a backbone: finetune, probe and export load it as a core-trained run's
        **({"inputs": list(family.input_names), "weights": BACKBONE_WEIGHTS} if (run / BACKBONE_WEIGHTS).exists() else {}),
    )
    return metrics


def _read_tokenizer(path: Path) -> Any:
    from tokenizers import Tokenizer

    if not path.exists():
        raise DataError(f"{path}: no such tokenizer file")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:
        raise DataError(f"{path}: cannot be read as a tokenizers file ({exc})") from None


def _tokenizer(run: RunDir, family: Any, config: RunConfig, corpus: str | Path, console: Console, parallel_pairs: bool = False) -> tuple[Any, int]:
    from ptmkit.data.pretraining import corpus_texts, load_token_file

    counter = {"lines": 0}

    def counted() -> Any:
        for text in corpus_texts(corpus, parallel_pairs):
            counter["lines"] += 1
            yield text

    if (run / TOKENIZER).exists():
        tokenizer = run.load_tokenizer()
        if (run / "tokens" / "tokens.json").exists():
            splits = [load_token_file(run / "tokens", s) for s in ("train", "heldout")]
            return tokenizer, sum(len(s.offsets) - 1 for s in splits)
        return tokenizer, sum(1 for _ in corpus_texts(corpus, parallel_pairs))
    started = time.perf_counter()
    with console.status("training the tokenizer"):
        tokenizer = family.train_tokenizer(counted(), config.model)
    atomic_save(run / TOKENIZER, lambda tmp: tokenizer.save(str(tmp)))
    console.print(
        f"trained a {tokenizer.get_vocab_size():,}-token vocabulary on {counter['lines']:,} lines "
        f"in {time.perf_counter() - started:.1f}s -> {run / TOKENIZER}"
    )
    return tokenizer, counter["lines"]


def _fit(registry: Registry, config: RunConfig, *args: Any) -> dict[str, Any]:
    """:func:`_fit_steps` under the run's dtype policy (``train.mixed_precision``), restored after."""
    with precision(config.train.mixed_precision):
        return _fit_steps(registry, config, *args)


def _fit_steps(
    registry: Registry, config: RunConfig, family: Any, tokenizer: Any, run: RunDir, corpus: str | Path, console: Console,
    strategy: Any = None, cluster: Cluster | None = None,
) -> dict[str, Any]:
    """Pre-train (Keras ``fit``, under ``strategy.scope()`` when distributed) from the newest
    checkpoint to ``train.max_steps``; on the chief, evaluate and write the run (:func:`_finish`)."""
    import contextlib

    from ptmkit.data.pretraining import InstanceSampler, load_token_file, make_step, sampler_options, step_rng
    from ptmkit.data.tokenization import character_table, word_start_table
    from ptmkit.training.checkpoint import latest_step, restore_state
    from ptmkit.training.distribute import describe
    from ptmkit.training.progress import ProgressCallback
    from ptmkit.training.setup import seed_everything

    cluster = cluster or Cluster("none")
    train = config.train
    seed_everything(train.seed)
    scope = strategy.scope if strategy is not None else contextlib.nullcontext
    with scope():
        backbone, model, objectives = build_pretraining_model(registry, config)
    specials = family.special_tokens(tokenizer)
    vocabulary_size = family.limits(config.model).vocabulary_size or tokenizer.get_vocab_size()
    if tokenizer.get_vocab_size() > vocabulary_size:
        raise ConfigError(f"the tokenizer has {tokenizer.get_vocab_size()} tokens, more than the model's {vocabulary_size} token embeddings ([model] config)")
    characters = character_table(tokenizer, family.inputs)
    options = sampler_options(objectives, word_start_table(tokenizer))
    sampler = InstanceSampler(load_token_file(run / "tokens", "train"), family, specials, train.sequence_length, **options)

    def make(step: int) -> Any:
        return make_step(sampler, objectives, step_rng(train.seed, step), train.batch_size, vocabulary_size, family.inputs, characters=characters)

    checkpoints = run / "checkpoints"
    with scope():  # the optimizer's variables are built here when a checkpoint is restored
        start = restore_state(model, checkpoints) if latest_step(checkpoints) else 0
    if start:
        console.print(f"resuming from step {start} ({checkpoints})")
    elif train.init:
        _load_init_weights(backbone, train.init, console)
    elif isinstance(backbone, InitialisesOutputBias):
        backbone.init_output_bias(unigram_log_prior(train_token_counts(run, vocabulary_size)))
    if strategy is not None:
        console.print(describe(cluster, strategy, train.batch_size, train.learning_rate, train.max_steps))
    tokens_per_step = train.batch_size * train.sequence_length
    chief = cluster.is_chief  # the only one that writes into the (shared) run directory
    progress = ProgressCallback("pre-training", start, train.max_steps, tokens_per_step, console, reset_metrics=True, step_log=run / STEP_LOG if chief else None)
    started = time.perf_counter()
    if start < train.max_steps:
        _run_fit(model, make, start, config, run, corpus, progress, strategy, chief, "--parallel" if options["parallel_pairs"] else "--corpus")
    train_seconds = time.perf_counter() - started
    sampler.close()
    if not chief:
        return {"worker": cluster.worker_index, "steps": train.max_steps}
    if strategy is not None:  # evaluate and save on one device: a plain copy of the trained model
        trained = model
        backbone, model, _ = build_pretraining_model(registry, config)
        model.set_weights(trained.get_weights())
    metrics: dict[str, Any] = {
        "steps": train.max_steps,
        "resumed_from_step": start,
        "train_seconds_this_session": round(train_seconds, 1),
        "tokens_per_second": round(progress.tokens_per_second, 1),
        "parameters": int(backbone.count_params()),
    }
    metrics.update(
        evaluate_heldout(model, run, family, specials, objectives, config, vocabulary_size, characters=characters, word_starts=options["word_starts"])
    )
    metrics.update(score_heldout_lines(backbone, run, family, tokenizer, specials, objectives, config, corpus, vocabulary_size))
    _finish(registry, config, family, backbone, run, corpus, objectives, metrics)
    return metrics


def train_token_counts(run: RunDir, vocabulary_size: int) -> Any:
    """``(vocabulary_size,)`` int64: how often each token id occurs in the run's training tokens."""
    import numpy as np

    from ptmkit.data.pretraining import load_token_file

    train = load_token_file(run / "tokens", "train")
    token_counts = np.zeros(vocabulary_size, np.int64)
    ids = np.memmap(train.path, dtype=train.dtype, mode="r") if train.num_tokens else np.zeros(0, np.int32)
    for start in range(0, len(ids), 1 << 22):  # in chunks: memory stays flat however large the corpus
        token_counts += np.bincount(ids[start : start + (1 << 22)], minlength=vocabulary_size)[:vocabulary_size]
    return token_counts


def unigram_log_prior(token_counts: Any) -> Any:
    """``(vocabulary,)`` float32: ``log((c + 1) / sum(c + 1))`` of ``token_counts`` (add-one
    smoothed, natural log), what :class:`~ptmkit.contract.InitialisesOutputBias` takes."""
    import numpy as np

    counts = np.asarray(token_counts, np.float64) + 1.0
    return np.log(counts / counts.sum()).astype(np.float32)


def _load_init_weights(backbone: Any, init: str, console: Console) -> None:
    """Load the backbone weights of the ``train.init`` run (``--init``) into ``backbone``."""
    source = RunDir(init)
    load_weights(backbone, source.require(source.manifest().get("weights", BACKBONE_WEIGHTS)))
    console.print(f"starting from the weights of {init}")


def _run_fit(
    model: Any, make: Any, start: int, config: RunConfig, run: RunDir, corpus: str | Path, progress: Any, strategy: Any, chief: bool, data_flag: str = "--corpus"
) -> None:
    """Keras ``fit`` over steps ``start .. train.max_steps``: the step's batch as it is (no
    strategy) or each replica's slice of it (:mod:`ptmkit.training.distribute`); checkpoints and
    TensorBoard logs on the ``chief`` only. ``data_flag`` gives ``corpus`` in the command that
    resumes an interrupted run (``--parallel`` for sentence pairs)."""
    import keras

    from ptmkit.training.checkpoint import CheckpointCallback, interrupt_note
    from ptmkit.training.distribute import distributed_dataset, prepare_for_fit, replica_rows

    train = config.train
    checkpoints = run / "checkpoints"
    # Objectives that do not use the pooler (masked LM alone) leave it without gradients.
    warnings.filterwarnings("ignore", message=r"Gradients do not exist for variables \['pooled_dense")
    command = ["ptmkit", "train", config.family, data_flag, str(corpus), "--out", str(run.path), "--resume"]
    callbacks: list[Any] = [progress]
    if chief:  # the checkpoint first: a step's checkpoint is written before its progress line
        callbacks = [
            CheckpointCallback(checkpoints, start, train.max_steps, train.checkpoint_every),
            progress,
            keras.callbacks.TensorBoard(log_dir=str(run / "logs"), update_freq=max(1, train.checkpoint_every // 10)),
        ]
    with interrupt_note(checkpoints, train.max_steps, command):
        if strategy is None:
            fit_steps(model, make, start, train.max_steps, callbacks)
        else:
            prepare_for_fit(model, strategy, replica_rows(make(start), 0, strategy.num_replicas_in_sync))
            dataset = distributed_dataset(strategy, make, start, train.max_steps)
            model.fit(dataset, epochs=1, steps_per_epoch=train.max_steps - start, shuffle=False, verbose=0, callbacks=callbacks)


def _finish(
    registry: Registry, config: RunConfig, family: Any, backbone: Any, run: RunDir, corpus: str | Path, objectives: dict[str, Any], metrics: dict[str, Any]
) -> None:
    """Write the backbone's weights, ``metrics.json`` and the manifest (last); keep only the last checkpoint."""
    atomic_save(run / BACKBONE_WEIGHTS, lambda tmp: backbone.save_weights(str(tmp)))
    run.write_json(METRICS, metrics)
    plugin = registry.owner("family", config.family)
    run.write_manifest(
        stage="pretrain",
        family=config.family,
        plugin={"name": plugin.name, "distribution": plugin.distribution, "version": plugin.version},
        objectives=list(objectives),
        head=None,
        corpus=str(Path(corpus).resolve()),
        inputs=list(family.input_names),
        weights=BACKBONE_WEIGHTS,
        **_lineage(config.train.init, corpus),
    )
    for old in sorted((run / "checkpoints").glob("ckpt-*.npz"))[:-1]:  # a finished run keeps its last state only
        old.unlink()


def _lineage(init: str, corpus: str | Path) -> dict[str, Any]:
    """:func:`init_lineage` with this run's ``corpus`` last (empty for a run from scratch)."""
    fields = init_lineage(init)
    if fields:
        fields["corpora"].append(str(Path(corpus).resolve()))
    return fields


def evaluate_heldout(
    model: Any, run: RunDir, family: Any, specials: Any, objectives: dict[str, Any], config: RunConfig, vocabulary_size: int,
    max_batches: int = 20, characters: Any = None, word_starts: Any = None,
) -> dict[str, Any]:
    """Each objective's held-out loss and metrics (masked-LM and NSP accuracy, ...), with fixed masks.

    Windows tile the held-out split from its start (no overlap); masks come from a generator
    separate from training's, so the numbers are comparable across runs with one seed. An
    objective whose loss is a token-level negative log-likelihood
    (:attr:`~ptmkit.contract.Objective.token_level_lm`) also gets ``heldout_NAME_perplexity``,
    ``exp(loss)``. ``word_starts``: the tokenizer's word-start table, for objectives that mask
    whole words (:func:`ptmkit.data.tokenization.word_start_table`).
    """
    from ptmkit.data.pretraining import InstanceSampler, load_token_file, make_step, sampler_options, step_rng

    train = config.train
    heldout = load_token_file(run / "tokens", "heldout")
    if heldout.num_tokens == 0:
        return {}
    sampler = InstanceSampler(heldout, family, specials, train.sequence_length, **sampler_options(objectives, word_starts))
    starts = sampler.starts(max_batches * train.batch_size)
    x, y, w = make_step(sampler, objectives, step_rng(train.seed, 0, stream=1), len(starts), vocabulary_size, family.inputs, starts, characters)
    sampler.close()
    results = model.evaluate(x, y, sample_weight=w, batch_size=train.batch_size, verbose=0, return_dict=True)
    if len(model.outputs) == 1:  # Keras prefixes metrics with the output name only when there are several
        (name,) = objectives
        results = {k if k.startswith(name) else f"{name}_{k}": v for k, v in results.items()}
        results["loss"] = results[f"{name}_loss"]
    out = {f"heldout_{k}": round(float(v), 4) for k, v in results.items()}
    for name, (objective, _) in objectives.items():
        if objective.token_level_lm and f"heldout_{name}_loss" in out:
            out[f"heldout_{name}_perplexity"] = round(math.exp(out[f"heldout_{name}_loss"]), 2)
    out["heldout_sequences"] = len(starts)
    return out



def score_heldout_lines(
    backbone: Any, run: RunDir, family: Any, tokenizer: Any, specials: Any, objectives: dict[str, Any], config: RunConfig,
    corpus: str | Path, vocabulary_size: int,
) -> dict[str, Any]:
    """What each objective that :class:`~ptmkit.contract.ScoresHeldoutLines` measures on the
    held-out lines (the last lines of ``corpus``, as many as the run's held-out split holds)."""
    scorers = [(objective, objective_config) for objective, objective_config in objectives.values() if isinstance(objective, ScoresHeldoutLines)]
    if not scorers:
        return {}
    import collections

    from ptmkit.data.pretraining import load_token_file

    count = len(load_token_file(run / "tokens", "heldout").offsets) - 1
    if count == 0:
        return {}
    texts = list(collections.deque(read_corpus(corpus), maxlen=count))
    heldout = HeldoutLines(
        texts, tokenizer, specials, tuple(family.inputs), config.train.sequence_length, config.train.batch_size, train_token_counts(run, vocabulary_size)
    )
    metrics: dict[str, Any] = {}
    for objective, objective_config in scorers:
        metrics.update(objective.score_lines(backbone, heldout, objective_config))
    return metrics
