"""Sampled softmax for the biLM's shared output layer (Jean et al. 2015, "On using very large
target vocabulary for neural machine translation"; bilm-tf trains with
``tf.nn.sampled_softmax_loss``, 8,192 candidates of its 793,471 words drawn per direction and
batch from a log-uniform distribution over the frequency-sorted vocabulary).

Each training step draws ``S = num_sampled`` candidate words per direction (one set shared by
every position of the batch), with replacement, from

    Q(k) = (log(k + 2) - log(k + 1)) / log(V + 1)        (Zipf-like: ids sorted by frequency)

and keeps the distinct ones: word ``k`` is in the set with probability ``pi_k = 1 - (1 - Q(k))^S``
(TensorFlow's expected count for its ``unique=True`` samplers, there with the number of draws it
took to find ``S`` distinct words). Each position is scored on its target ``t`` and the set only,
every logit corrected by ``-log pi``::

    s_t = h . w_t + b_t - log pi_t                        (the target)
    s_k = h . w_k + b_k - log pi_k                        (each distinct candidate; dropped where k == t)
    loss = logsumexp([s_t, s_k ...]) - s_t  =  log(exp(l_t) + pi_t Z) - l_t

where ``Z = sum over the set of exp(l_k) / pi_k`` is the Horvitz-Thompson estimate of the other
words' ``sum exp(l_k)``: for a frequent target (``pi_t`` near 1) the loss estimates the full
softmax's, for a rare one it is lower (TensorFlow: "generally an underestimate of the full softmax
loss"). Given the same distinct candidates and expected counts this is ``tf.nn.sampled_softmax_loss``
(``remove_accidental_hits=True``), which bilm-tf calls with ``unique=True``; the fixed number of
draws here keeps every op compilable by XLA (``train.jit_compile``; TensorFlow's candidate samplers
are not), at the price of fewer distinct candidates (1,024 draws over 8,000 words: about 530).
With replacement and without dropping the repeats (TensorFlow's ``unique=False``) a frequent
target's expected count ``S Q(t)`` exceeds 1 and biases its logit upwards. At evaluation
(``training=False``) the layer computes the full softmax's cross-entropy, so held-out losses and
perplexities are always the full model's.
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops


def log_uniform_probability(ids: Any, range_max: int) -> Any:
    """``Q(k)`` of the log-uniform (Zipfian) sampler over ids ``[0, range_max)``, float32, the
    shape of ``ids`` (TensorFlow's ``LogUniformSampler``)."""
    k = ops.cast(ids, "float32")
    return (ops.log(k + 2.0) - ops.log(k + 1.0)) / math.log(range_max + 1.0)


def log_uniform_candidates(num_sampled: int, range_max: int, seed: Any) -> Any:
    """``num_sampled`` ids in ``[0, range_max)`` drawn with replacement from
    :func:`log_uniform_probability` (inverse CDF: ``floor(exp(u log(range_max + 1))) - 1``),
    ``(num_sampled,)`` int32. ``seed``: a ``keras.random.SeedGenerator`` or an int."""
    u = keras.random.uniform((num_sampled,), seed=seed)
    ids = ops.floor(ops.exp(u * math.log(range_max + 1.0))) - 1.0
    return ops.cast(ops.clip(ids, 0, range_max - 1), "int32")


def inclusion_probability(ids: Any, num_sampled: int, range_max: int) -> Any:
    """``pi_k = 1 - (1 - Q(k))^num_sampled``: the probability that ``num_sampled`` draws of
    :func:`log_uniform_candidates` include id ``k``, float32, the shape of ``ids``."""
    return -ops.expm1(num_sampled * ops.log1p(-log_uniform_probability(ids, range_max)))


def sampled_softmax_nll(states: Any, targets: Any, kernel: Any, bias: Any, sampled: Any, true_expected: Any, sampled_expected: Any) -> Any:
    """Per-row sampled softmax cross-entropy (module docstring), in nats; a candidate drawn again
    counts once, a candidate equal to the row's target not at all.

    Args:
        states: ``(rows, dim)`` float32.
        targets: ``(rows,)`` int, in ``[0, vocabulary)``.
        kernel: ``(dim, vocabulary)`` float32 (a Keras ``Dense`` kernel; ``tf.nn`` takes its transpose).
        bias: ``(vocabulary,)`` float32.
        sampled: ``(num_sampled,)`` int: the candidates.
        true_expected: ``(rows,)`` float32: each target's expected count (inclusion probability).
        sampled_expected: ``(num_sampled,)`` float32: each candidate's.

    Returns:
        ``(rows,)`` float32.
    """
    sampled = ops.cast(sampled, "int32")
    true_weights = ops.take(ops.transpose(kernel), targets, axis=0)  # (rows, dim)
    true_logits = ops.sum(states * true_weights, axis=-1) + ops.take(bias, targets) - ops.log(true_expected)
    sampled_logits = ops.matmul(states, ops.take(kernel, sampled, axis=1)) + ops.take(bias, sampled) - ops.log(sampled_expected)  # (rows, num_sampled)
    count = sampled.shape[0]
    earlier = ops.triu(ops.ones((count, count), "int32"), k=1) > 0  # [i, j]: i < j
    repeat = ops.any(ops.logical_and(ops.equal(ops.expand_dims(sampled, 1), ops.expand_dims(sampled, 0)), earlier), axis=0)  # (num_sampled,)
    hits = ops.equal(ops.expand_dims(ops.cast(targets, "int32"), 1), ops.expand_dims(sampled, 0))  # an accidental hit is the target, not a negative
    sampled_logits = ops.where(ops.logical_or(hits, ops.expand_dims(repeat, 0)), -1e30, sampled_logits)
    logits = ops.concatenate([ops.expand_dims(true_logits, 1), sampled_logits], axis=1)
    return ops.logsumexp(logits, axis=1) - true_logits


@keras.saving.register_keras_serializable(package="ptmkit_elmo")
class BiLMSoftmaxLoss(keras.layers.Layer):
    """The biLM's per-prediction negative log-likelihood through a shared ``Dense`` softmax:
    sampled (module docstring) while training, full at evaluation.

    Args:
        softmax: the backbone's ``Dense(vocabulary_size)`` softmax layer (its variables are the
            backbone's; this layer holds none of them).
        num_sampled: int. Candidates drawn per direction and step (``< vocabulary_size``).
        seed: int or None. The sampler's seed.

    Call arguments:
        states: ``(batch, directions, sequence, dim)`` float: each direction's top LSTM states.
        targets: ``(batch, directions, sequence)`` int: word ids already mapped into the softmax
            (ids ``< vocabulary_size``).
        training: bool.

    Returns:
        ``(batch, directions, sequence)`` float32, nats.
    """

    def __init__(self, softmax: Any, num_sampled: int, seed: int | None = None, **kwargs: Any) -> None:
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        # a plain attribute that Keras does not track: the softmax's variables stay the backbone's only
        object.__setattr__(self, "_softmax", softmax)
        self.num_sampled = int(num_sampled)
        self.vocabulary_size = int(softmax.units)
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, states: Any, targets: Any, training: bool | None = None) -> Any:
        kernel, bias = ops.cast(self._softmax.kernel, "float32"), ops.cast(self._softmax.bias, "float32")
        states = ops.cast(states, "float32")
        shape = ops.shape(targets)
        if not training:
            logits = ops.matmul(states, kernel) + bias
            return keras.losses.sparse_categorical_crossentropy(targets, logits, from_logits=True)
        losses = []
        for direction in range(states.shape[1]):  # bilm-tf draws one candidate set per direction
            rows = ops.reshape(states[:, direction], (-1, states.shape[-1]))
            ids = ops.reshape(targets[:, direction], (-1,))
            sampled = log_uniform_candidates(self.num_sampled, self.vocabulary_size, self.seed_generator)
            true_expected = inclusion_probability(ids, self.num_sampled, self.vocabulary_size)
            sampled_expected = inclusion_probability(sampled, self.num_sampled, self.vocabulary_size)
            nll = sampled_softmax_nll(rows, ids, kernel, bias, sampled, true_expected, sampled_expected)
            losses.append(ops.reshape(nll, (shape[0], shape[2])))
        return ops.stack(losses, axis=1)

    def compute_output_shape(self, states_shape: Any, targets_shape: Any) -> Any:
        return tuple(targets_shape)
