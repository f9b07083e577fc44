"""Progressive module replacing: Xu et al. 2020, "BERT-of-Theseus: Compressing BERT by Progressive
Module Replacing" (reference implementation JetRunner/BERT-of-Theseus).

A fine-tuned predecessor of ``L`` blocks is compressed into a successor of ``S`` blocks, ``S``
dividing ``L``: successor block ``i`` stands for the predecessor's module of ``n = L / S``
consecutive blocks ``i*n .. i*n + n - 1``. During training each module is, independently and
once per step for the whole batch, replaced by its successor block with probability ``p``
(:class:`ModuleReplacement`), which rises on the paper's linear curriculum (their eq. 6)::

    p_t = min(1, k * t + b)

``t`` the number of optimisation steps already taken (the reference's
``LinearReplacementScheduler`` is stepped after each update, so the first step runs at ``b``).
Once ``p`` reaches 1 the successor trains alone (the paper's successor fine-tuning). As in the
reference's ``run_glue.py``, only the successor blocks train: the embeddings, the predecessor's
blocks, the pooler and the classifier keep their fine-tuned weights, and the successor shares
them. At inference (``training=False``) every module is its successor block, so the model is the
successor alone.

Written once for every family that declares :class:`~ptmkit.contract.ReplacesModules`: the
successor backbone is the family's :meth:`~ptmkit.contract.KeepsLayers.keep_layers`, and the
training model is the successor's own functional graph (re-run as ``keras.models.clone_model``
does, sharing its layers) with each successor block called through a :class:`ModuleReplacement`.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops, tree

from ptmkit.errors import ConfigError


def replacement_rate(step: int, k: float, base: float) -> float:
    """The linear curriculum ``min(1, k * step + base)`` (Xu et al. 2020, eq. 6).

    >>> [round(replacement_rate(t, 0.1, 0.3), 4) for t in (0, 1, 5, 7, 100)]
    [0.3, 0.4, 0.8, 1.0, 1.0]
    """
    return min(1.0, k * step + base)


def default_slope(base: float, total_steps: int) -> float:
    """The ``k`` for which ``p`` reaches 1 after half of ``total_steps``, leaving the other half to
    the successor alone: ``(1 - base) / (total_steps / 2)``."""
    return (1.0 - base) / max(1.0, total_steps / 2)


class ModuleReplacement(keras.layers.Layer):
    """One predecessor module (a run of consecutive blocks) and the successor block that replaces
    it with probability ``rate`` while training.

    Args:
        successor: the successor block (trained).
        predecessors: the predecessor's blocks it replaces, in order (frozen by the caller).
        rate: a scalar float32 ``keras.Variable`` shared by every module (the scheduler sets it).
        seed: int. Seeds the module's Bernoulli draws.

    Call arguments:
        inputs: ``(batch, sequence, hidden)``, then the keyword inputs every block takes.
        training: with ``True`` one Bernoulli(``rate``) draw per call decides for the whole batch
            (the reference's ``self.bernoulli.sample()``); otherwise the successor runs.

    Returns:
        ``(batch, sequence, hidden)``.
    """

    def __init__(self, successor: Any, predecessors: list[Any], rate: Any, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(dtype=successor.dtype_policy, name=f"{successor.name}_replacing", **kwargs)
        self.successor = successor
        self.predecessors = list(predecessors)
        self.rate = rate
        self.seed_generator = keras.random.SeedGenerator(seed)

    def build(self, input_shape: Any = None) -> None:
        self.built = True

    def _predecessor(self, inputs: Any, training: Any, kwargs: dict[str, Any]) -> Any:
        x = inputs
        for block in self.predecessors:
            x = block(x, training=training, **kwargs)
        return x

    def call(self, inputs: Any, training: Any = None, **kwargs: Any) -> Any:
        if not training:
            return self.successor(inputs, training=training, **kwargs)
        replace = ops.less(keras.random.uniform((), seed=self.seed_generator), ops.cast(self.rate, "float32"))
        return ops.cond(
            replace,
            lambda: self.successor(inputs, training=training, **kwargs),
            lambda: self._predecessor(inputs, training, kwargs),
        )

    def compute_output_shape(self, input_shape: Any, *args: Any, **kwargs: Any) -> Any:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        """The layer's name and dtype only: it wraps live layers and is never rebuilt from a config
        (the run keeps the successor alone)."""
        return {"name": self.name, "dtype": self.dtype_policy.name}


class ReplacementScheduler(keras.callbacks.Callback):
    """Set ``rate`` to :func:`replacement_rate` before each training step.

    Args:
        rate: the modules' shared rate variable.
        k, base: the curriculum's slope and starting rate.
        start: the global step the fit starts after.
    """

    def __init__(self, rate: Any, k: float, base: float, start: int = 0) -> None:
        super().__init__()
        self.rate, self.k, self.base, self.step = rate, k, base, start

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.rate.assign(replacement_rate(self.step, self.k, self.base))

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.step += 1


def check_successor_layers(predecessor_layers: int, successor_layers: int) -> int:
    """The module size ``n = predecessor_layers / successor_layers``.

    Raises:
        ConfigError: ``successor_layers`` not in ``[1, predecessor_layers)`` or not a divisor.
    """
    if not 1 <= successor_layers < predecessor_layers or predecessor_layers % successor_layers:
        raise ConfigError(
            f"--theseus-layers {successor_layers}: give a number of successor blocks that divides the predecessor's "
            f"{predecessor_layers} and is smaller (each successor block replaces predecessor_layers / successor_layers blocks)"
        )
    return predecessor_layers // successor_layers


def initial_layers(predecessor_layers: int, successor_layers: int, init: str) -> list[int]:
    """The predecessor blocks the successor's blocks start as: ``"first"``, blocks ``0 .. S - 1``
    (the reference's ``deepcopy(model.bert.encoder.layer[ix]) for ix in range(scc_n_layer)``), or
    ``"module"``, the first block of each module (``0, n, 2n, ...``, DistilBERT's every other
    layer for ``n = 2``).

    Raises:
        ConfigError: another ``init``.
    """
    n = check_successor_layers(predecessor_layers, successor_layers)
    if init == "first":
        return list(range(successor_layers))
    if init == "module":
        return list(range(0, predecessor_layers, n))
    raise ConfigError(f"--theseus-init {init!r}: give first (the reference's blocks 0 .. S-1) or module (the first block of each module)")


def _rewired(model: Any, swap: dict[int, Any]) -> Any:
    """A functional model of ``model``'s graph on new inputs, each layer called as in ``model`` but
    those whose id is in ``swap`` replaced by theirs; every other layer is shared. What
    ``keras.models.clone_model(model, clone_function=...)`` does, without its attempt to rebuild a
    subclass of ``Functional`` (a backbone class) from its config."""
    inputs = tree.map_structure(lambda x: keras.Input(batch_shape=x.shape, dtype=x.dtype, name=x.name), model.input)
    outputs = model._run_through_graph(inputs, operation_fn=lambda layer: swap.get(id(layer), layer))
    return keras.Model(inputs, outputs, name=f"{model.name}_replacing")


def replacing_model(classifier: Any, backbone: Any, successor_blocks: list[Any], predecessor_blocks: list[Any], seed: int = 0) -> tuple[Any, Any]:
    """The training model: ``classifier`` (a head on the successor ``backbone``) with successor
    block ``i`` called through a :class:`ModuleReplacement` of predecessor blocks ``i*n ..
    i*n + n - 1``; everything but the successor blocks frozen.

    Args:
        classifier: the successor classifier, a functional model calling ``backbone`` once.
        backbone: the successor backbone (functional), whose graph calls ``successor_blocks``.
        successor_blocks, predecessor_blocks: the blocks, in order; ``len(predecessor_blocks)``
            a multiple of ``len(successor_blocks)``.

    Returns:
        ``(model, rate)``: the model (sharing every layer of ``classifier``) and the rate variable
        its modules read (1.0 until a :class:`ReplacementScheduler` sets it).
    """
    n = len(predecessor_blocks) // len(successor_blocks)
    rate = keras.Variable(1.0, dtype="float32", trainable=False, name="replacement_rate")
    wrappers = {
        id(block): ModuleReplacement(block, predecessor_blocks[i * n : (i + 1) * n], rate, seed=seed + i)
        for i, block in enumerate(successor_blocks)
    }
    mixed_backbone = _rewired(backbone, wrappers)
    model = _rewired(classifier, {id(backbone): mixed_backbone})
    trained = {id(v) for block in successor_blocks for v in block.weights}
    for variable in model.weights:
        variable.trainable = id(variable) in trained
    for block in predecessor_blocks:
        for variable in block.weights:
            variable.trainable = False
    return model, rate
