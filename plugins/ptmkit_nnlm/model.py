"""The NNLM of Bengio, Ducharme, Vincent & Jauvin 2003 ("A Neural Probabilistic Language Model",
JMLR 3), in Keras 3:

    x = [C(w_{t-n+1}), ..., C(w_{t-1})]            (batch, (n-1) m)
    y = b + W x + U tanh(d + H x)                   (batch, V) logits
    P(w_t | context) = softmax(y)

``C`` is the shared word feature matrix (the word vectors); ``W`` are the optional direct
connections.
"""

from __future__ import annotations

from typing import Any


def build_nnlm(vocabulary_size: int, context: int, vector_size: int, hidden: int, direct: bool) -> Any:
    """The model: input ``context_ids`` ``(batch, context)`` int32, output ``logits`` ``(batch, V)`` float32."""
    import keras

    ids = keras.Input(shape=(context,), dtype="int32", name="context_ids")
    features = keras.layers.Embedding(vocabulary_size, vector_size, name="C")(ids)
    x = keras.layers.Flatten(name="concatenate")(features)
    parts = []
    if hidden:
        h = keras.layers.Dense(hidden, activation="tanh", name="H")(x)
        parts.append(keras.layers.Dense(vocabulary_size, name="U")(h))
    if direct:
        parts.append(keras.layers.Dense(vocabulary_size, use_bias=not hidden, name="W")(x))
    logits = parts[0] if len(parts) == 1 else keras.layers.Add(name="logits")(parts)
    return keras.Model(ids, logits, name="nnlm")
