"""Knowledge distillation from a fine-tuned teacher's soft targets (Hinton, Vinyals & Dean 2015,
"Distilling the Knowledge in a Neural Network", section 2; the task-stage loss of DistilBERT,
Sanh et al. 2019, and of Tang et al. 2019's BiLSTM students).

``ptmkit finetune STUDENT_PARENT ... --teacher TEACHER_RUN`` fine-tunes the student on

    L = alpha * T^2 * KL(softmax(z_t / T) || softmax(z_s / T)) + (1 - alpha) * CE(y, softmax(z_s))

with ``z_t`` the teacher's logits for the example (computed once, before training, by the
teacher's own tokenizer and sequence length), ``z_s`` the student's and ``y`` the gold label;
``T^2`` keeps the soft term's gradients on the scale of the hard one's as ``T`` changes (Hinton et
al.). ``finetune.distill_temperature`` is ``T``, ``finetune.distill_alpha`` is ``alpha``. The
student is any run ``finetune`` takes (smaller, of another family); its result is an ordinary
fine-tuned run, exported and served like any.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from keras import ops


@keras.saving.register_keras_serializable(package="ptmkit")
class DistillationLoss(keras.losses.Loss):
    """The loss of the module docstring, per example.

    ``y_true`` is ``(batch, 1 + classes)`` float32: the gold label id in column 0, the teacher's
    logits after it (:func:`distillation_targets`); ``y_pred`` the student's ``(batch, classes)``
    logits.
    """

    def __init__(self, temperature: float = 2.0, alpha: float = 0.5, name: str = "distillation", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.temperature = float(temperature)
        self.alpha = float(alpha)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        labels = ops.cast(y_true[:, 0], "int32")
        temperature = self.temperature
        teacher = ops.log_softmax(ops.cast(y_true[:, 1:], "float32") / temperature, axis=-1)
        student = ops.log_softmax(ops.cast(y_pred, "float32") / temperature, axis=-1)
        soft = ops.sum(ops.exp(teacher) * (teacher - student), axis=-1) * temperature**2
        hard = keras.losses.sparse_categorical_crossentropy(labels, ops.cast(y_pred, "float32"), from_logits=True)
        return self.alpha * soft + (1.0 - self.alpha) * hard

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "temperature": self.temperature, "alpha": self.alpha}


def label_accuracy(y_true: Any, y_pred: Any) -> Any:
    """Top-1 accuracy against the gold label in column 0 of distillation targets."""
    return ops.cast(ops.equal(ops.argmax(y_pred, axis=-1), ops.cast(y_true[:, 0], "int64")), "float32")


def distillation_targets(labels: np.ndarray, teacher_logits: np.ndarray) -> np.ndarray:
    """``(examples, 1 + classes)`` float32: label ids, then the teacher's logits."""
    return np.concatenate([labels.astype(np.float32)[:, None], teacher_logits.astype(np.float32)], axis=1)
