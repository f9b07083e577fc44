"""Feed-forward activations of transformer blocks, by the names a family's config uses.

Written so that tf2onnx converts them and onnxruntime's transformer optimizer fuses them: exact
GELU goes through ``Erf`` (TensorFlow lowers ``keras.activations.gelu(approximate=False)`` to
``Erfc``, which tf2onnx cannot convert). Importing this module does not import Keras.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The names :func:`feedforward_activation` accepts: ``gelu`` (exact, as BERT and Hugging Face's
#: ``gelu``), ``gelu_approximate`` (the tanh form, Hugging Face's ``gelu_new``) and ``relu``.
FEEDFORWARD_ACTIVATIONS = ("gelu", "gelu_approximate", "relu")


def gelu_erf(x: Any) -> Any:
    """Exact GELU, ``0.5 * x * (1 + erf(x / sqrt(2)))`` (Hendrycks & Gimpel 2016), any shape and
    float dtype; written with ``erf`` as BERT's reference implementation and Hugging Face are."""
    from keras import ops

    return 0.5 * x * (1.0 + ops.erf(x * 0.7071067811865476))


def feedforward_activation(name: str) -> Callable[[Any], Any]:
    """The activation called ``name`` (one of :data:`FEEDFORWARD_ACTIVATIONS`).

    Raises:
        ValueError: an unknown name, listing the known ones.
    """
    if name == "gelu":
        import keras

        # registered so that a layer's config names it (``ptmkit>gelu_erf``) and loads it back
        return keras.saving.register_keras_serializable(package="ptmkit")(gelu_erf)
    if name == "gelu_approximate":
        from keras_hub.src.utils.keras_utils import gelu_approximate

        return gelu_approximate  # keras-hub's: gelu(x, approximate=True)
    if name == "relu":
        import keras

        return keras.activations.relu
    raise ValueError(f"hidden_activation must be one of {', '.join(FEEDFORWARD_ACTIVATIONS)}, got {name!r}")
