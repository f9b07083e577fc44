"""Per-run Keras set-up: seeds, precision policy, thread settings, quiet TensorFlow logs."""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator


def quiet_tensorflow() -> None:
    """Import TensorFlow without its C++ start-up chatter (oneDNN and CUDA probing notes); nothing
    when ``KERAS_BACKEND`` names another backend.

    Those lines are written by absl before its logging is configured, so no environment
    variable silences them: standard error is pointed at /dev/null while TensorFlow imports,
    unless ``TF_CPP_MIN_LOG_LEVEL`` is 0 (``--debug`` leaves everything visible).
    """
    import sys

    if os.environ.setdefault("KERAS_BACKEND", "tensorflow") != "tensorflow":
        return  # Keras runs on another backend (e.g. JAX on a GPU machine without TensorFlow)
    if "tensorflow" in sys.modules or os.environ.get("TF_CPP_MIN_LOG_LEVEL", "3") == "0":
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # runtime notes such as oneDNN's int64 fallback
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            import tensorflow as tf

            tf.config.list_physical_devices()  # CUDA probing logs here too
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy, TensorFlow and Keras (``keras.utils.set_random_seed``)."""
    import keras
    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    keras.utils.set_random_seed(seed)


@contextlib.contextmanager
def precision(policy: str) -> Iterator[None]:
    """Keras' global dtype policy set to ``policy`` (``float32``, ``mixed_bfloat16`` or
    ``mixed_float16``: the normalised ``mixed_precision`` of a validated config, see
    :func:`ptmkit.config.precision_policy`) inside the block, the previous one restored after it,
    so that a bf16 run does not leave the rest of the process in bf16."""
    import keras

    previous = keras.mixed_precision.global_policy().name
    keras.mixed_precision.set_global_policy(policy)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)
