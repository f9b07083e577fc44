"""The AWD-LSTM backbone of ULMFiT (Merity et al. 2017, "Regularizing and Optimizing LSTM Language
Models"; Howard and Ruder 2018, "Universal Language Model Fine-tuning for Text Classification";
reference implementation: fastai's ``text/models/awdlstm.py``), in the order data flows:

    token_ids (batch, sequence)
      -> embedding with embedding dropout        (batch, sequence, embedding_dim)
      -> locked dropout (input_dropout)
      -> LSTM layers with DropConnect on their hidden-to-hidden weights (weight_dropout),
         hidden_dim cells each but the last (embedding_dim cells, for the tied softmax),
         locked dropout (hidden_dropout) between them
      -> h: the last layer's states              (batch, sequence, embedding_dim)

Outputs (float32):

- ``sequence_output`` ``(batch, sequence, embedding_dim)``: ``h`` after locked dropout
  (``output_dropout``; none at inference); position ``i`` reads positions ``<= i`` only, so the
  core's causal-LM objective ``clm`` trains it, its logits ``h @ E^T`` through the tied embedding
  (:attr:`ULMFiTBackbone.token_embedding`, fastai's ``tie_weights``) plus the decoder's own bias, as
  fastai's;
- ``pooled_output`` ``(batch, 3 * embedding_dim)``: ULMFiT's concat pooling (section 3.3)
  ``[h_T; maxpool(h); meanpool(h)]`` over the row's tokens, ``h_T`` the state at its last token
  (:class:`ConcatPooling`).

While training, the backbone adds AWD-LSTM's activation regularisers to the training loss
(``add_loss``, :class:`ActivationRegularization`): AR ``ar_alpha * mean(sequence_output ** 2)`` and
TAR ``tar_beta * mean((h_t - h_{t-1}) ** 2)``, both over the row's tokens only; Keras' reported
training ``loss`` includes them, held-out losses and perplexities (``training=False``) do not.

Padding (``padding_mask`` 0, on the right) never reaches a real token's state: a padded step
carries the previous state on unchanged (Keras' masked ``LSTM``). Dropout of every kind is drawn only when training; at
inference the layers compute the plain LSTM.
"""

from __future__ import annotations

import warnings
from typing import Any

import keras
import keras_hub
from keras import ops

# The classifier (concat pooling) does not read the LM's decoder bias: Keras would warn at every
# fine-tuning that it gets no gradient.
warnings.filterwarnings("ignore", message=r"Gradients do not exist for variables \['token_embedding/decoder_bias'\]")


@keras.saving.register_keras_serializable(package="ptmkit_ulmfit")
class DroppedEmbedding(keras.layers.ReversibleEmbedding):
    """An embedding whose whole rows (words) are dropped for a batch while training: embedding
    dropout (Merity et al. 2017, section 4.3; fastai's ``EmbeddingDropout``), ``E' = E * m /
    (1 - p)`` with ``m`` ``(vocabulary, 1)`` Bernoulli(1 - p), then the lookup; every occurrence
    of a dropped word in the batch reads zeros. ``reverse=True`` gives logits ``x @ E^T`` through
    the undropped embedding (the tied softmax) plus, with ``decoder_bias``, a bias ``b``
    ``(input_dim,)``: ``x @ E^T + b``, fastai's tied decoder (``nn.Linear(emb_sz, vocab_sz)`` whose
    weight is the encoder's, whose bias is its own). Without ``b`` the log-prior of each word must
    come from ``h @ E^T`` alone, with ``h`` an LSTM output in (-1, 1) and ``E`` drawn from
    U(-0.1, 0.1): a short run's predictions then stay close to uniform, worse than the unigram model.

    Args:
        input_dim, output_dim: int. Vocabulary and embedding sizes.
        dropout: float. p.
        decoder_bias: bool. Give the reverse (logits) call a bias of its own, zeros at first.

    Call arguments:
        inputs: ``(batch, sequence)`` int32 ids; with ``reverse``, ``(..., output_dim)`` float.
    """

    def __init__(
        self, input_dim: int, output_dim: int, dropout: float = 0.0, seed: int | None = None, decoder_bias: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(input_dim, output_dim, **kwargs)
        self.dropout = float(dropout)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.decoder_bias = bool(decoder_bias)

    def build(self, input_shape: Any = None) -> None:
        super().build(input_shape)
        if self.decoder_bias:
            self.bias = self.add_weight(shape=(self.input_dim,), initializer="zeros", name="decoder_bias")

    def save_own_variables(self, store: Any) -> None:
        # ReversibleEmbedding saves the variables of its serialization spec only
        super().save_own_variables(store)
        if self.decoder_bias and self.built:
            store["decoder_bias"] = self.bias

    def load_own_variables(self, store: Any) -> None:
        super().load_own_variables(store)
        if self.decoder_bias and self.built:
            self.bias.assign(store["decoder_bias"])

    def call(self, inputs: Any, reverse: bool = False, training: Any = None) -> Any:
        if reverse:
            logits = super().call(inputs, reverse=True)
            return logits + ops.cast(self.bias, logits.dtype) if self.decoder_bias else logits
        if not (training and self.dropout > 0):
            return super().call(inputs)
        keep = ops.cast(keras.random.uniform((self.input_dim, 1), seed=self.seed_generator) >= self.dropout, self.embeddings.dtype)
        weights = ops.cast(self.embeddings * keep / (1.0 - self.dropout), self.compute_dtype)
        return ops.take(weights, ops.cast(inputs, "int32"), axis=0)

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(dropout=self.dropout, seed=self.seed, decoder_bias=self.decoder_bias)
        return config


@keras.saving.register_keras_serializable(package="ptmkit_ulmfit")
class LockedDropout(keras.layers.Layer):
    """Locked (variational) dropout (Gal and Ghahramani 2016; Merity et al. 2017, section 4.2):
    one mask per sequence and feature, ``(batch, 1, features)``, the same at every time step;
    kept values are scaled by ``1 / (1 - rate)``. The identity at inference.

    Args:
        rate: float. The drop probability.

    Call arguments:
        inputs: ``(batch, sequence, features)`` float. Returns the same shape.
    """

    def __init__(self, rate: float, seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rate = float(rate)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, inputs: Any, training: Any = None) -> Any:
        if not (training and self.rate > 0):
            return inputs
        shape = ops.shape(inputs)
        keep = keras.random.uniform((shape[0], 1, shape[2]), seed=self.seed_generator) >= self.rate
        return inputs * ops.cast(keep, inputs.dtype) / (1.0 - self.rate)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(rate=self.rate, seed=self.seed)
        return config


@keras.saving.register_keras_serializable(package="ptmkit_ulmfit")
class WeightDropLSTM(keras.layers.LSTM):
    """Keras' ``LSTM`` (``return_sequences``) with DropConnect on its hidden-to-hidden weights
    (Merity et al. 2017, section 2; fastai's ``WeightDropout`` around ``nn.LSTM``): while
    training, ``W_hh`` is replaced by ``W_hh * m / (1 - p)`` with one Bernoulli mask ``m`` per
    batch, shared by every time step; at inference it is ``W_hh``, and the layer is a plain
    ``LSTM`` (cuDNN's kernel on a GPU, an ONNX ``LSTM`` node when exported: :attr:`exports_as_lstm`).

    The cell is Keras' (and PyTorch's ``nn.LSTM``), gates in the order input, forget, cell,
    output::

        z = x_t W_ih + h_{t-1} W_hh + b;  i, f, g, o = split(z)
        c_t = sigmoid(f) c_{t-1} + sigmoid(i) tanh(g);  h_t = sigmoid(o) tanh(c_t)

    ``W_ih`` is ``cell.kernel`` ``(input, 4 units)``, ``W_hh`` ``cell.recurrent_kernel`` ``(units,
    4 units)``, ``b`` ``cell.bias`` ``(4 units,)`` (PyTorch's ``b_ih + b_hh``). A masked step
    carries the state on; the state starts at 0.

    Args:
        units: int. Cells.
        weight_dropout: float. p.

    Call arguments:
        sequences: ``(batch, sequence, input)`` float.
        mask: ``(batch, sequence)`` bool, True on tokens.

    Returns:
        ``(batch, sequence, units)``, every step's ``h_t``.
    """

    #: At inference ``call`` is ``LSTM``'s: the ONNX export may write the layer as a fused node.
    exports_as_lstm = True

    def __init__(self, units: int, weight_dropout: float = 0.0, seed: int | None = None, **kwargs: Any) -> None:
        kwargs["return_sequences"] = True
        super().__init__(units, **kwargs)
        self.weight_dropout = float(weight_dropout)
        self.weight_seed = seed
        self.weight_seed_generator = keras.random.SeedGenerator(seed)

    def recurrent_weights(self, training: Any = None) -> Any:
        """``W_hh``, DropConnect-ed when ``training`` (a new mask at each call)."""
        weights = self.cell.recurrent_kernel
        if training and self.weight_dropout > 0:
            keep = keras.random.uniform(tuple(weights.shape), seed=self.weight_seed_generator) >= self.weight_dropout
            weights = weights * ops.cast(keep, weights.dtype) / (1.0 - self.weight_dropout)
        return weights

    def call(self, sequences: Any, initial_state: Any = None, mask: Any = None, training: Any = False) -> Any:
        if not (training and self.weight_dropout > 0):
            return super().call(sequences, initial_state=initial_state, mask=mask, training=training)
        # fastai's WeightDropout: the module computes with the dropped tensor in place of its
        # weight for this call (the cell and cuDNN's path both read cell.recurrent_kernel)
        cell, kept = self.cell, self.cell.recurrent_kernel
        object.__setattr__(cell, "recurrent_kernel", self.recurrent_weights(training))
        try:
            return super().call(sequences, initial_state=initial_state, mask=mask, training=training)
        finally:
            object.__setattr__(cell, "recurrent_kernel", kept)

    def compute_mask(self, sequences: Any, mask: Any = None) -> Any:
        return None  # the backbone passes the padding mask to each layer itself

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(weight_dropout=self.weight_dropout, seed=self.weight_seed)
        config.pop("return_sequences", None)
        return config


@keras.saving.register_keras_serializable(package="ptmkit_ulmfit")
class ConcatPooling(keras.layers.Layer):
    """ULMFiT's concat pooling (Howard and Ruder 2018, section 3.3; fastai's ``masked_concat_pool``):
    ``[h_T; max_t h_t; mean_t h_t]`` over the positions where ``padding_mask`` is 1, ``h_T`` the
    state at the row's last such position (rows right-padded). A row without tokens gives zeros.

    Call arguments:
        states: ``(batch, sequence, hidden)`` float.
        padding_mask: ``(batch, sequence)`` int, 1 on tokens.

    Returns:
        ``(batch, 3 * hidden)``.
    """

    def call(self, states: Any, padding_mask: Any) -> Any:
        mask = ops.cast(padding_mask, states.dtype)
        count = ops.sum(mask, axis=1, keepdims=True)  # (batch, 1)
        last = ops.maximum(ops.cast(count, "int32") - 1, 0)  # (batch, 1) index of the last token
        final = ops.squeeze(ops.take_along_axis(states, ops.expand_dims(last, -1), axis=1), axis=1)
        weights = ops.expand_dims(mask, -1)
        maximum = ops.max(ops.where(weights > 0, states, ops.full_like(states, -1e9)), axis=1)
        mean = ops.sum(states * weights, axis=1) / ops.maximum(count, 1.0)
        has_tokens = ops.cast(count > 0, states.dtype)
        return ops.concatenate([final * has_tokens, maximum * has_tokens, mean], axis=-1)

    def compute_output_shape(self, states_shape: Any, padding_mask_shape: Any = None) -> Any:
        return (states_shape[0], 3 * states_shape[-1])


@keras.saving.register_keras_serializable(package="ptmkit_ulmfit")
class ActivationRegularization(keras.layers.Layer):
    """AWD-LSTM's activation regularisers (Merity et al. 2017, section 4.6; fastai's
    ``RNNRegularizer``): while training, adds to the model's loss (``add_loss``)

    - AR ``alpha * mean(d ** 2)``, ``d`` the last LSTM layer's output after its locked dropout
      (the states the tied softmax reads), the mean over the row's tokens and the features;
    - TAR ``beta * mean((h_t - h_{t-1}) ** 2)``, ``h`` the last layer's raw (un-dropped) output,
      the mean over the consecutive pairs ``(t - 1, t)`` of tokens and the features.

    fastai and Merity et al. take the mean over every position of their (unpadded) LM batches;
    here padding (``padding_mask`` 0) is left out of both means, so a padded row is regularised as
    its unpadded self. A term whose coefficient is 0 is not computed. The layer returns ``dropped``
    unchanged, and adds nothing at inference.

    Args:
        alpha: float. AR's coefficient (fastai's and Merity et al.'s: 2).
        beta: float. TAR's coefficient (fastai's and Merity et al.'s: 1).

    Call arguments:
        dropped: ``(batch, sequence, hidden)`` float, ``d``.
        raw: ``(batch, sequence, hidden)`` float, ``h``.
        padding_mask: ``(batch, sequence)`` int, 1 on tokens.

    Returns:
        ``dropped``.
    """

    def __init__(self, alpha: float = 0.0, beta: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.alpha = float(alpha)
        self.beta = float(beta)

    def call(self, dropped: Any, raw: Any, padding_mask: Any, training: Any = None) -> Any:
        if training and (self.alpha > 0 or self.beta > 0):
            for loss in activation_penalties(dropped, raw, padding_mask, self.alpha, self.beta):
                self.add_loss(loss)
        return dropped

    def compute_output_shape(self, dropped_shape: Any, raw_shape: Any = None, padding_mask_shape: Any = None) -> Any:
        return dropped_shape

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(alpha=self.alpha, beta=self.beta)
        return config


def activation_penalties(dropped: Any, raw: Any, padding_mask: Any, alpha: float, beta: float) -> list[Any]:
    """``[AR, TAR]`` float32 scalars of :class:`ActivationRegularization` (a term whose
    coefficient is 0 left out); ``dropped``, ``raw`` ``(batch, sequence, hidden)``,
    ``padding_mask`` ``(batch, sequence)``, 1 on tokens."""
    mask = ops.cast(ops.not_equal(padding_mask, 0), "float32")
    features = ops.cast(ops.shape(raw)[-1], "float32")
    penalties = []
    if alpha > 0:
        squares = ops.sum(ops.square(ops.cast(dropped, "float32")), axis=-1)  # (batch, sequence)
        penalties.append(alpha * ops.sum(squares * mask) / ops.maximum(ops.sum(mask) * features, 1.0))
    if beta > 0:
        h = ops.cast(raw, "float32")
        steps = ops.sum(ops.square(h[:, 1:] - h[:, :-1]), axis=-1)  # (batch, sequence - 1)
        pairs = mask[:, 1:] * mask[:, :-1]
        penalties.append(beta * ops.sum(steps * pairs) / ops.maximum(ops.sum(pairs) * features, 1.0))
    return penalties


@keras.saving.register_keras_serializable(package="ptmkit_ulmfit")
class ULMFiTBackbone(keras_hub.models.Backbone):
    """An AWD-LSTM; see the module docstring for the layers and outputs.

    Args:
        vocabulary_size, embedding_dim, hidden_dim, num_layers, embedding_dropout, input_dropout,
        weight_dropout, hidden_dropout, output_dropout, decoder_bias, ar_alpha, tar_beta: as
        :class:`~ptmkit_ulmfit.config.ULMFiTConfig` (``ar_alpha`` and ``tar_beta`` default to 0
        here, so that a backbone config saved before them means what it meant; the family's
        config gives 2 and 1).

    Examples:
        >>> backbone = ULMFiTBackbone(50, 8, 12, 2)
        >>> out = backbone({"token_ids": np.ones((2, 5), "int32"), "padding_mask": np.ones((2, 5), "int32")})
        >>> tuple(out["sequence_output"].shape), tuple(out["pooled_output"].shape)
        ((2, 5, 8), (2, 24))
    """

    def __init__(
        self, vocabulary_size: int, embedding_dim: int, hidden_dim: int, num_layers: int, embedding_dropout: float = 0.0, input_dropout: float = 0.0,
        weight_dropout: float = 0.0, hidden_dropout: float = 0.0, output_dropout: float = 0.0, decoder_bias: bool = True,
        ar_alpha: float = 0.0, tar_beta: float = 0.0, dtype: Any = None, **kwargs: Any,
    ) -> None:
        settings = dict(
            vocabulary_size=vocabulary_size, embedding_dim=embedding_dim, hidden_dim=hidden_dim, num_layers=num_layers,
            embedding_dropout=embedding_dropout, input_dropout=input_dropout, weight_dropout=weight_dropout,
            hidden_dropout=hidden_dropout, output_dropout=output_dropout, decoder_bias=decoder_bias, ar_alpha=ar_alpha, tar_beta=tar_beta,
        )
        # fastai draws the embedding from U(-0.1, 0.1) (AWD_LSTM.initrange)
        self.token_embedding = DroppedEmbedding(
            vocabulary_size, embedding_dim, embedding_dropout, embeddings_initializer=keras.initializers.RandomUniform(-0.1, 0.1), dtype=dtype,
            decoder_bias=decoder_bias, name="token_embedding",
        )
        self.lstm_layers = [
            WeightDropLSTM(embedding_dim if k == num_layers - 1 else hidden_dim, weight_dropout, dtype=dtype, name=f"lstm_{k}") for k in range(num_layers)
        ]
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        padding_mask = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
        x = LockedDropout(input_dropout, dtype=dtype, name="input_dropout")(self.token_embedding(token_ids))
        mask = ops.not_equal(padding_mask, 0)
        for k, lstm in enumerate(self.lstm_layers):
            x = lstm(x, mask=mask)
            if k < num_layers - 1:
                x = LockedDropout(hidden_dropout, dtype=dtype, name=f"hidden_dropout_{k}")(x)
        dropped = LockedDropout(output_dropout, dtype=dtype, name="output_dropout")(x)
        outputs = {
            "sequence_output": ActivationRegularization(ar_alpha, tar_beta, dtype=dtype, name="activation_regularization")(dropped, x, padding_mask),
            "pooled_output": ConcatPooling(dtype=dtype, name="concat_pooling")(x, padding_mask),
        }
        kwargs.setdefault("name", "ulmfit_backbone")
        super().__init__(inputs={"token_ids": token_ids, "padding_mask": padding_mask}, outputs=outputs, dtype=dtype, **kwargs)
        for key, value in settings.items():
            setattr(self, key, value)

    def layer_blocks(self) -> list[Any]:
        """The LSTM layers, input side first: the blocks of discriminative learning rates and
        gradual unfreezing (the embedding is below the first; the head above the last)."""
        return list(self.lstm_layers)

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update({key: getattr(self, key) for key in (
            "vocabulary_size", "embedding_dim", "hidden_dim", "num_layers", "embedding_dropout", "input_dropout",
            "weight_dropout", "hidden_dropout", "output_dropout", "decoder_bias", "ar_alpha", "tar_beta",
        )})
        return config

    def init_output_bias(self, log_prior: Any) -> None:
        """Start the tied decoder's bias at ``log_prior`` ``(vocabulary_size,)`` (the training
        tokens' log unigram prior: :class:`ptmkit.api.InitialisesOutputBias`); nothing without
        ``decoder_bias``."""
        if self.decoder_bias:
            self.token_embedding.bias.assign(ops.cast(log_prior, self.token_embedding.bias.dtype))

    def logits(self, sequence_output: Any) -> Any:
        """Next-word logits ``(batch, sequence, vocabulary_size)`` through the tied embedding (and
        its decoder bias)."""
        return self.token_embedding(sequence_output, reverse=True)


def build_backbone(config: Any) -> ULMFiTBackbone:
    """A :class:`ULMFiTBackbone` of ``config``'s (:class:`~ptmkit_ulmfit.config.ULMFiTConfig`) size."""
    return ULMFiTBackbone(
        vocabulary_size=config.vocabulary_size, embedding_dim=config.embedding_dim, hidden_dim=config.hidden_dim, num_layers=config.num_layers,
        embedding_dropout=config.embedding_dropout, input_dropout=config.input_dropout, weight_dropout=config.weight_dropout,
        hidden_dropout=config.hidden_dropout, output_dropout=config.output_dropout, decoder_bias=config.decoder_bias,
        ar_alpha=config.ar_alpha, tar_beta=config.tar_beta,
    )
