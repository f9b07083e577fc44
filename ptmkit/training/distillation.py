"""Knowledge distillation from a fine-tuned teacher's soft targets (Hinton, Vinyals & Dean 2015,
"Distilling the Knowledge in a Neural Network", section 2; the task-stage loss of DistilBERT,
Sanh et al. 2019, and of Tang et al. 2019's BiLSTM students).

``ptmkit finetune STUDENT_PARENT ... --teacher TEACHER_RUN`` fine-tunes the student on

    L = alpha * T^2 * KL(softmax(z_t / T) || softmax(z_s / T)) + (1 - alpha) * CE(y, softmax(z_s))

with ``z_t`` the teacher's logits for the example (computed once, before training, by the
teacher's own tokenizer and sequence length), ``z_s`` the student's and ``y`` the gold label;
``T^2`` keeps the soft term's gradients on the scale of the hard one's as ``T`` changes (Hinton et
al.). ``finetune.distill_temperature`` is ``T``, ``finetune.distill_alpha`` is ``alpha``. With
``finetune.distill_loss = "mse"`` the soft term is instead Tang et al. 2019's squared error
between raw logits, ``||z_s - z_t||^2`` (their eq. 2, which they found best for a BiLSTM student;
no temperature). The
student is any run ``finetune`` takes (smaller, of another family); its result is an ordinary
fine-tuned run, exported and served like any.

**Layer-to-layer distillation** (``finetune.distill``, ``--distill``) adds, at each training step,
losses between what the teacher's and the student's blocks compute, for families whose backbones
are :class:`~ptmkit.contract.ExposesAttention` (both must be, with the same vocabulary: the
teacher reads the student's token ids). The teacher's blocks run frozen inside the training step;
the student's run once more for them besides the pass that gives its logits (two dropout draws).
With ``M`` student blocks and ``N`` teacher blocks (``N`` a multiple of ``M``, ``k = N / M``):

- ``tinybert`` (Jiao et al. 2020, "TinyBERT", section 3.1, eqs. 7-10; reference
  huawei-noah/Pretrained-Language-Model ``TinyBERT/task_distill.py``): the uniform mapping
  ``g(m) = m * k``. ``L_embd = MSE(E_S W, E_T)``; ``L_hidn = sum_m MSE(H_S^m W, H_T^{g(m)})`` for
  ``m = 1 .. M`` with one learned ``W`` (student width -> teacher width, the reference's
  ``fit_dense``, shared by the embeddings and every layer, discarded after training);
  ``L_attn = sum_m MSE(A_S^m, A_T^{g(m)})`` over student blocks ``m = 1 .. M`` on the pre-softmax
  scores ``q k^T / sqrt(d_k)`` with masked keys set to 0 (the reference adds -10000 to masked
  scores, then zeroes every score <= -100); each MSE is the mean over all its elements. The
  prediction layer is the soft cross-entropy at temperature ``T``, eq. 10 (``alpha`` of it, with
  ``1 - alpha`` of the gold labels' cross-entropy).
- ``minilm`` (Wang et al. 2020, "MiniLM: Deep Self-Attention Distillation", section 3.1, eqs.
  5-7): on the last block of each, ``L_AT``, the KL divergence from the teacher's attention
  distribution to the student's, and ``L_VR``, the same between value relations
  ``softmax(V V^T / sqrt(d_k))``, each per head, averaged over heads and (non-padding) query
  positions; widths may differ, the head counts must match. The prediction layer is the soft
  targets' loss above.

The step's loss is the prediction loss plus ``finetune.distill_intermediate_weight`` times the sum
of those terms. With ``finetune.distill_intermediate_epochs = E > 0`` training runs TinyBERT's
two stages instead (the reference runs ``task_distill.py`` twice, without and with
``--pred_distill``): the first ``E`` epochs on the intermediate terms alone, the rest on the
prediction loss alone (:func:`stage_scales`, :class:`DistillationStages`).
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from keras import ops

from ptmkit.errors import ConfigError


@keras.saving.register_keras_serializable(package="ptmkit")
class DistillationLoss(keras.losses.Loss):
    """The loss of the module docstring, per example.

    ``y_true`` is ``(batch, 1 + classes)`` float32: the gold label id in column 0, the teacher's
    logits after it (:func:`distillation_targets`); ``y_pred`` the student's ``(batch, classes)``
    logits. ``soft = "kl"``: the soft term is ``T^2 * KL`` (Hinton et al.); ``"ce"``: the soft
    cross-entropy ``-sum_c softmax(z_t / T)_c log softmax(z_s / T)_c`` (TinyBERT's eq. 10, no
    ``T^2``); ``"mse"``: ``sum_c (z_s - z_t)_c^2`` on raw logits (Tang et al. 2019, eq. 2; the
    temperature is unused). Each is ``alpha`` of the loss, the gold labels' cross-entropy ``1 - alpha``.
    """

    def __init__(self, temperature: float = 2.0, alpha: float = 0.5, soft: str = "kl", name: str = "distillation", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.temperature = float(temperature)
        self.alpha = float(alpha)
        self.soft = soft

    def call(self, y_true: Any, y_pred: Any) -> Any:
        labels = ops.cast(y_true[:, 0], "int32")
        temperature = self.temperature
        teacher = ops.log_softmax(ops.cast(y_true[:, 1:], "float32") / temperature, axis=-1)
        student = ops.log_softmax(ops.cast(y_pred, "float32") / temperature, axis=-1)
        if self.soft == "mse":
            soft = ops.sum(ops.square(ops.cast(y_pred, "float32") - ops.cast(y_true[:, 1:], "float32")), axis=-1)
        elif self.soft == "ce":
            soft = -ops.sum(ops.exp(teacher) * student, axis=-1)
        else:
            soft = ops.sum(ops.exp(teacher) * (teacher - student), axis=-1) * temperature**2
        hard = keras.losses.sparse_categorical_crossentropy(labels, ops.cast(y_pred, "float32"), from_logits=True)
        return self.alpha * soft + (1.0 - self.alpha) * hard

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "temperature": self.temperature, "alpha": self.alpha, "soft": self.soft}


def label_accuracy(y_true: Any, y_pred: Any) -> Any:
    """Top-1 accuracy against the gold label in column 0 of distillation targets."""
    return ops.cast(ops.equal(ops.argmax(y_pred, axis=-1), ops.cast(y_true[:, 0], "int64")), "float32")


def distillation_targets(labels: np.ndarray, teacher_logits: np.ndarray) -> np.ndarray:
    """``(examples, 1 + classes)`` float32: label ids, then the teacher's logits."""
    return np.concatenate([labels.astype(np.float32)[:, None], teacher_logits.astype(np.float32)], axis=1)


#: A score of a masked key: its softmax probability is exactly 0 in float32.
_MASKED = -1e9


def teacher_layer_step(student_layers: int, teacher_layers: int, method: str) -> int:
    """``k = N / M``, the uniform mapping's step (TinyBERT's ``g(m) = m * N / M``).

    Raises:
        ConfigError: ``N`` not a multiple of ``M``.
    """
    if teacher_layers % student_layers:
        raise ConfigError(
            f"--distill {method}: the teacher's {teacher_layers} blocks are not a multiple of the student's {student_layers} "
            f"(the uniform layer mapping g(m) = m * N / M needs one)"
        )
    return teacher_layers // student_layers


def stage_scales(step: int, boundary: int) -> tuple[float, float]:
    """``(intermediate, prediction)`` loss scales at global ``step`` (0-based) when the first
    ``boundary`` steps are TinyBERT's intermediate stage: ``(1, 0)`` before it, ``(0, 1)`` after;
    ``(1, 1)`` (both every step) when ``boundary`` is 0.

    >>> [stage_scales(t, 2) for t in (0, 1, 2)], stage_scales(5, 0)
    ([(1.0, 0.0), (1.0, 0.0), (0.0, 1.0)], (1.0, 1.0))
    """
    if not boundary:
        return 1.0, 1.0
    return (1.0, 0.0) if step < boundary else (0.0, 1.0)


class DistillationStages(keras.callbacks.Callback):
    """Set a :class:`LayerDistillation`'s loss scales to :func:`stage_scales` before each step.

    Args:
        model: the training model (its ``intermediate_scale`` and ``prediction_scale``).
        boundary: the steps of the intermediate stage.
        start: the global step the fit starts after (a resumed run's).
    """

    def __init__(self, model: Any, boundary: int, start: int = 0) -> None:
        super().__init__()
        self.scales, self.boundary, self.step = (model.intermediate_scale, model.prediction_scale), boundary, start

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        for variable, value in zip(self.scales, stage_scales(self.step, self.boundary), strict=True):
            variable.assign(value)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.step += 1


def _mse(a: Any, b: Any) -> Any:
    return ops.mean(ops.square(ops.cast(a, "float32") - ops.cast(b, "float32")))


def tinybert_losses(student: dict[str, Any], teacher: dict[str, Any], projection: Any, step: int) -> dict[str, Any]:
    """TinyBERT's intermediate losses (module docstring), scalars.

    Args:
        student, teacher: :meth:`~ptmkit.contract.ExposesAttention.attention_internals` outputs
            (``M`` and ``M * step`` blocks; each matched pair with as many heads).
        projection: a callable mapping ``(batch, sequence, student hidden)`` to the teacher's
            width (the learned ``W``).
        step: ``k = N / M``.

    Returns:
        ``{"embeddings", "hidden_states", "attention"}``: ``L_embd``, ``L_hidn`` (summed over
        ``m = 1 .. M``) and ``L_attn`` (summed over the student's blocks).
    """
    states, teacher_states = student["hidden_states"], teacher["hidden_states"]
    hidden = sum(_mse(projection(states[m]), teacher_states[m * step]) for m in range(1, len(states)))
    student_mask, teacher_mask = student["attention_mask"][:, None], teacher["attention_mask"][:, None]
    attention = sum(
        _mse(ops.where(student_mask > 0, scores, 0.0), ops.where(teacher_mask > 0, teacher["attention_scores"][(m + 1) * step - 1], 0.0))
        for m, scores in enumerate(student["attention_scores"])
    )
    return {"embeddings": _mse(projection(states[0]), teacher_states[0]), "hidden_states": hidden, "attention": attention}


def _relation_kl(teacher_scores: Any, student_scores: Any, mask: Any) -> Any:
    """Mean over the batch of ``KL(softmax_T || softmax_S)`` over keys, per head and query row,
    averaged over heads and the query positions that are real (the mask's diagonal), masked keys
    excluded. ``*_scores``: ``(batch, heads, sequence, sequence)``; ``mask``: ``(batch, sequence,
    sequence)``."""
    allowed = mask[:, None] > 0
    log_t = ops.log_softmax(ops.where(allowed, ops.cast(teacher_scores, "float32"), _MASKED), axis=-1)
    log_s = ops.log_softmax(ops.where(allowed, ops.cast(student_scores, "float32"), _MASKED), axis=-1)
    kl = ops.sum(ops.where(allowed, ops.exp(log_t) * (log_t - log_s), 0.0), axis=-1)  # (batch, heads, queries)
    queries = ops.diagonal(mask, axis1=1, axis2=2)  # (batch, sequence): 1 on real positions
    per_example = ops.sum(ops.mean(kl, axis=1) * queries, axis=-1) / ops.maximum(ops.sum(queries, axis=-1), 1.0)
    return ops.mean(per_example)


def value_relation(values: Any) -> Any:
    """``V V^T / sqrt(d_k)`` per head, the scores of MiniLM's value relation (eq. 6, before the
    softmax): ``values`` ``(batch, heads, sequence, d_k)`` -> ``(batch, heads, sequence, sequence)``."""
    values = ops.cast(values, "float32")
    return ops.einsum("bhqd,bhkd->bhqk", values, values) / float(values.shape[-1]) ** 0.5


def minilm_losses(student: dict[str, Any], teacher: dict[str, Any]) -> dict[str, Any]:
    """MiniLM's losses on the last blocks (module docstring), scalars: ``{"attention",
    "value_relation"}`` (``L_AT``, ``L_VR``)."""
    mask = student["attention_mask"]
    return {
        "attention": _relation_kl(teacher["attention_scores"][-1], student["attention_scores"][-1], mask),
        "value_relation": _relation_kl(value_relation(teacher["values"][-1]), value_relation(student["values"][-1]), mask),
    }


class LayerDistillation(keras.Model):
    """The training model of layer-to-layer distillation: the student classifier's logits, plus
    ``weight`` times the sum of the method's intermediate losses as a Keras added loss while
    training (the compiled loss is the prediction layer's). While training, the added loss is
    scaled by ``intermediate_scale`` and the prediction loss's gradient by ``prediction_scale``
    (non-trainable scalars, 1 unless :class:`DistillationStages` sets them: the logits pass
    through as ``s * z + (1 - s) * stop_gradient(z)``, the same values).

    Args:
        student: the student classifier (a head on the student backbone); its weights are the run's.
        student_internals, teacher_internals: the backbones'
            :meth:`~ptmkit.contract.ExposesAttention.attention_internals` models; the teacher's is
            frozen.
        method: ``"tinybert"`` or ``"minilm"``.
        teacher_inputs: the teacher's input name -> the student input it reads.
        step: ``N / M`` (:func:`teacher_layer_step`).
        weight: the intermediate losses' weight.

    Call: ``inputs`` the student's input dict -> ``(batch, classes)`` logits.
    """

    def __init__(
        self, student: Any, student_internals: Any, teacher_internals: Any, method: str, teacher_inputs: dict[str, str],
        step: int, weight: float = 1.0, **kwargs: Any,
    ) -> None:
        super().__init__(name="layer_distillation", **kwargs)
        self.student, self.student_internals, self.teacher_internals = student, student_internals, teacher_internals
        self.teacher_internals.trainable = False
        self.method, self.teacher_inputs, self.step, self.weight = method, dict(teacher_inputs), int(step), float(weight)
        self.intermediate_scale = keras.Variable(1.0, dtype="float32", trainable=False, name="intermediate_scale")
        self.prediction_scale = keras.Variable(1.0, dtype="float32", trainable=False, name="prediction_scale")
        self.projection = None
        if method == "tinybert":  # the reference's fit_dense: nn.Linear, BERT's normal(0.02) initialisation
            widths = [int(model.output["hidden_states"][0].shape[-1]) for model in (student_internals, teacher_internals)]
            self.projection = keras.layers.Dense(
                widths[1], kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02), dtype="float32", name="distill_projection"
            )
            self.projection.build((None, None, widths[0]))

    def intermediate_losses(self, inputs: dict[str, Any], training: bool = False) -> dict[str, Any]:
        """The method's intermediate losses on ``inputs`` (scalars, by name)."""
        student = self.student_internals(inputs, training=training)
        teacher = self.teacher_internals({name: inputs[source] for name, source in self.teacher_inputs.items()}, training=False)
        teacher = keras.tree.map_structure(ops.stop_gradient, teacher)
        if self.method == "tinybert":
            return tinybert_losses(student, teacher, lambda x: self.projection(ops.cast(x, "float32")), self.step)
        return minilm_losses(student, teacher)

    def call(self, inputs: dict[str, Any], training: bool = False) -> Any:
        logits = self.student(inputs, training=training)
        if not training:
            return logits
        self.add_loss(self.weight * self.intermediate_scale * sum(self.intermediate_losses(inputs, training=True).values()))
        scale = ops.cast(self.prediction_scale, logits.dtype)
        return scale * logits + (1.0 - scale) * ops.stop_gradient(logits)

    def measure(self, inputs: dict[str, np.ndarray]) -> dict[str, float]:
        """The intermediate losses on ``inputs`` without dropout, as floats (6 significant digits)."""
        losses = self.intermediate_losses({name: ops.convert_to_tensor(v) for name, v in inputs.items()}, training=False)
        return {name: float(f"{float(ops.convert_to_numpy(value)):.6g}") for name, value in losses.items()}
