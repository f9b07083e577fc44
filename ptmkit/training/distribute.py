"""Pre-training on several devices and hosts with ``tf.distribute``; ptmkit only wires it.

``train.distribute`` (or ``ptmkit train ... --distribute``) picks the strategy:

- ``none``: Keras' default (one device);
- ``mirrored``: ``tf.distribute.MirroredStrategy``, the GPUs of one host (one CPU replica without);
- ``multi-worker``: ``tf.distribute.MultiWorkerMirroredStrategy``, one process per host, each told
  the cluster and its own place in it by ``TF_CONFIG`` (the TensorFlow convention).

The model is built and compiled under ``strategy.scope()``; Keras runs the step on every replica
and all-reduces the gradients (sum of per-replica losses each scaled by ``1 / replicas``: the
global batch's mean, as one device computes it).

``train.batch_size``, ``learning_rate`` and ``max_steps`` are global. Every worker builds the
step's whole global batch from ``(seed, step)`` (:func:`ptmkit.data.pretraining.step_rng`, the
sample weights normalised over the global batch) and keeps the rows of its own replicas
(:func:`replica_rows`): replica ``r`` of ``R`` takes rows ``r * B/R .. (r + 1) * B/R``, so one
step's replicas cover its batch exactly once, and the run follows the single-device run step
for step (tests/test_distribute.py).

The run directory is shared by all workers (a network file system or a ReadWriteMany volume on
Kubernetes): the chief (task 0) prepares it (tokenizer, token files), writes the checkpoints and
the final weights; the other workers read it and write nothing.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from ptmkit.errors import ConfigError

STRATEGIES = ("none", "mirrored", "multi-worker")
#: What ``TF_CONFIG`` must look like, as the errors show it.
TF_CONFIG_SHAPE = '{"cluster": {"worker": ["host0:2222", "host1:2222"]}, "task": {"type": "worker", "index": 0}}'


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Where this process stands: ``kind`` (one of :data:`STRATEGIES`), ``num_workers`` processes
    in the job and this one's ``worker_index`` (0 is the chief: a ``chief`` task, else worker 0,
    as ``tf.distribute`` numbers them)."""

    kind: str
    num_workers: int = 1
    worker_index: int = 0

    @property
    def is_chief(self) -> bool:
        return self.worker_index == 0


def read_cluster(kind: str, environ: Mapping[str, str] | None = None) -> Cluster:
    """Check ``kind`` and, for ``multi-worker``, the ``TF_CONFIG`` environment variable, without
    importing TensorFlow.

    ``TF_CONFIG`` is JSON: ``cluster`` maps ``worker`` (and optionally one ``chief``) to lists of
    ``"host:port"`` strings; ``task`` gives this process's ``type`` and ``index`` in them.

    Raises:
        ConfigError: an unknown ``kind``; ``TF_CONFIG`` missing, not JSON, or not of that shape
            (one line showing :data:`TF_CONFIG_SHAPE`).
    """
    if kind not in STRATEGIES:
        raise ConfigError(f"--distribute: {kind!r} is not one of {', '.join(STRATEGIES)}")
    if kind != "multi-worker":
        return Cluster(kind)
    environ = os.environ if environ is None else environ
    raw = environ.get("TF_CONFIG", "").strip()
    if not raw:
        raise ConfigError(f"--distribute multi-worker: the TF_CONFIG environment variable is not set; each worker needs one like {TF_CONFIG_SHAPE}")
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"TF_CONFIG: not JSON ({exc.msg} at character {exc.pos}); expected {TF_CONFIG_SHAPE}") from None
    problem = _tf_config_problem(config)
    if problem:
        raise ConfigError(f"TF_CONFIG: {problem}; expected {TF_CONFIG_SHAPE}")
    cluster, task = config["cluster"], config["task"]
    chiefs = len(cluster.get("chief", []))
    index = task["index"] + (chiefs if task["type"] == "worker" else 0)
    return Cluster(kind, chiefs + len(cluster["worker"]), index)


def _tf_config_problem(config: Any) -> str | None:
    """What is wrong with a parsed ``TF_CONFIG`` (None when nothing is)."""
    if not isinstance(config, dict) or not isinstance(config.get("cluster"), dict) or not isinstance(config.get("task"), dict):
        return "needs a 'cluster' object and a 'task' object"
    cluster, task = config["cluster"], config["task"]
    for role, addresses in cluster.items():
        if role not in ("chief", "worker"):
            return f"cluster role {role!r} is not used by MultiWorkerMirroredStrategy (only 'chief' and 'worker')"
        if not isinstance(addresses, list) or not addresses or not all(isinstance(a, str) and a.rpartition(":")[2].isdigit() for a in addresses):
            return f"cluster.{role} must be a non-empty list of 'host:port' strings, got {addresses!r}"
    if "worker" not in cluster:
        return "cluster has no 'worker' list"
    if len(cluster.get("chief", [])) > 1:
        return "cluster.chief may hold one address"
    role, index = task.get("type"), task.get("index")
    if role not in cluster:
        return f"task.type {role!r} is not a role of the cluster ({', '.join(cluster)})"
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(cluster[role]):
        return f"task.index {index!r} is not an index of cluster.{role} (0 .. {len(cluster[role]) - 1})"
    return None


def check_global_batch(batch_size: int, replicas: int, what: str) -> int:
    """Each replica's share of the global ``batch_size``.

    Raises:
        ConfigError: ``replicas`` (``what``: "2 workers", "4 GPUs") does not divide it.
    """
    if batch_size % replicas:
        lower, upper = batch_size - batch_size % replicas, batch_size + replicas - batch_size % replicas
        raise ConfigError(
            f"config key 'train.batch_size' = {batch_size} (the global batch) is not divisible by the {replicas} replicas ({what}); "
            f"use a multiple of {replicas}, e.g. {lower or upper} or {upper}"
        )
    return batch_size // replicas


def make_strategy(cluster: Cluster) -> Any:
    """The ``tf.distribute`` strategy of ``cluster.kind`` (None for ``none``).

    Create it before any other TensorFlow operation: the multi-worker strategy configures the
    collective ops of the runtime, which is only possible before it starts.
    """
    if cluster.kind == "none":
        return None
    import tensorflow as tf

    if cluster.kind == "mirrored":
        return tf.distribute.MirroredStrategy()
    return tf.distribute.MultiWorkerMirroredStrategy()


def barrier(strategy: Any) -> None:
    """Wait until every worker got here (an all-reduce of one number): the other workers wait
    while the chief prepares the run directory."""
    import tensorflow as tf

    value = strategy.run(tf.function(lambda: tf.constant(1.0)))
    strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)


def describe(cluster: Cluster, strategy: Any, batch_size: int, learning_rate: float, max_steps: int) -> str:
    """One line: the strategy, the replicas, the global batch and each replica's and worker's
    share; the learning rate and steps, which are global and unchanged."""
    replicas = strategy.num_replicas_in_sync
    per_replica = batch_size // replicas
    where = f"{cluster.num_workers} workers x {replicas // cluster.num_workers} replica(s)" if cluster.kind == "multi-worker" else f"{replicas} replica(s) on this host"
    me = f"; this is worker {cluster.worker_index}{' (chief)' if cluster.is_chief else ''}" if cluster.kind == "multi-worker" else ""
    return (
        f"distribute: {cluster.kind}, {where}; global batch {batch_size} sequences = {per_replica} per replica, "
        f"{batch_size // cluster.num_workers} per worker; learning rate {learning_rate:g} and {max_steps} steps are global{me}"
    )


Batch = tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]


def replica_rows(batch: Batch, replica: int, replicas: int) -> Batch:
    """Rows ``replica * B/replicas .. (replica + 1) * B/replicas`` of every array of a global
    ``(inputs, targets, sample_weights)`` batch (axis 0 is the batch, ``B`` rows)."""
    size = len(next(iter(batch[0].values()))) // replicas
    rows = slice(replica * size, (replica + 1) * size)
    x, y, w = batch
    return {k: v[rows] for k, v in x.items()}, {k: v[rows] for k, v in y.items()}, {k: v[rows] for k, v in w.items()}


def worker_batches(make: Callable[[int], Batch], start: int, stop: int, worker: int, workers: int, local_replicas: int) -> Iterator[Batch]:
    """What worker ``worker`` of ``workers`` feeds its ``local_replicas`` replicas for global steps
    ``start .. stop - 1``: per step, the slices of the global batch ``make(step)`` of its global
    replicas ``worker * local_replicas + j`` for ``j`` in order (``tf.distribute`` hands a
    worker's elements to its devices in turn)."""
    replicas = workers * local_replicas
    for step in range(start, stop):
        batch = make(step)
        for j in range(local_replicas):
            yield replica_rows(batch, worker * local_replicas + j, replicas)


def distributed_dataset(strategy: Any, make: Callable[[int], Batch], start: int, stop: int) -> Any:
    """Steps ``start .. stop - 1`` as a ``tf.distribute`` dataset for Keras' ``fit``
    (``strategy.distribute_datasets_from_function``: each worker's input pipeline produces its
    replicas' slices, :func:`worker_batches`; nothing is auto-sharded)."""
    import tensorflow as tf

    sample = replica_rows(make(start), 0, strategy.num_replicas_in_sync)
    signature = tuple({k: tf.TensorSpec(v.shape, tf.as_dtype(v.dtype)) for k, v in part.items()} for part in sample)

    def dataset_fn(context: Any) -> Any:
        local = strategy.num_replicas_in_sync // context.num_input_pipelines

        def generate() -> Iterator[Batch]:
            return worker_batches(make, start, stop, context.input_pipeline_id, context.num_input_pipelines, local)

        return tf.data.Dataset.from_generator(generate, output_signature=signature)

    return strategy.distribute_datasets_from_function(dataset_fn)


def prepare_for_fit(model: Any, strategy: Any, batch: Batch) -> None:
    """Work around two gaps of Keras 3's TensorFlow trainer under ``tf.distribute`` (Keras 3.15):

    - it builds a distributed model from a batch it averages with one ``strategy.reduce`` over the
      whole ``(inputs, targets, weights)`` structure, which fails on dicts
      (keras-team/keras#20329, open): the model's metrics, losses and optimizer are built here
      under ``strategy.scope()`` from one replica's ``batch``, and that step is skipped;
    - under ``MultiWorkerMirroredStrategy`` it averages each step's logs with
      ``strategy.reduce("MEAN", value, axis=0)``, which fails on scalars: the logs of the train
      step are given shape ``(1,)`` (one value per replica, averaged into a scalar).
    """
    import tensorflow as tf

    with strategy.scope():
        model._symbolic_build(data_batch=batch)
    model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        train_step = model.train_step
        model.train_step = lambda data: {k: tf.reshape(v, (1,)) for k, v in train_step(data).items()}
