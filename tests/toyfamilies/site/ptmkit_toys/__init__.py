"""Two toy families and a next-token objective, as a third-party plugin would write them.

Nothing here is known to ptmkit's core: it reaches these classes only through the
``ptmkit.plugins`` entry point of the ``ptmkit-toys`` distribution beside this package.

* ``toy-decoder``: token embedding + learnt positions + one causal transformer decoder block
  (keras-hub's ``TransformerDecoder`` without cross-attention); its only input is ``token_ids``.
  ``pooled_output`` is the mean over non-padding positions (pad id 0): with causal attention a
  token's state ignores the padding after it, so right-padding leaves the output unchanged.
* ``toy-chars``: each token is read as up to 8 characters (``char_ids``, ``(batch, sequence,
  characters)``): character embeddings averaged per token, a dense layer and a causal 1-D
  convolution over tokens; a ``padding_mask`` input masks the pooling.
* ``toy_clm``: predict token ``t + 1`` from the state at ``t`` (a softmax over the vocabulary);
  its loss is a token-level negative log-likelihood, so ptmkit reports held-out perplexity.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import numpy as np


from ptmkit.api import SEQUENCE_OUTPUT, ConfigError, InputSpec, Limits, ModelFamily, Objective, OutputSpec, SpecialTokens, hookimpl

PAD, UNK = "<pad>", "<unk>"
CHARACTERS = 8


@dataclasses.dataclass
class ToyConfig:
    """Size of a toy model.

    Attributes:
        vocabulary_size: word-level vocabulary size, specials included.
        hidden_dim: hidden size.
        max_sequence_length: learnt positions (toy-decoder) / longest sequence.
    """

    vocabulary_size: int = 300
    hidden_dim: int = 16
    max_sequence_length: int = 64

    def validate(self) -> None:
        for name in ("vocabulary_size", "hidden_dim", "max_sequence_length"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"config key 'model.{name}' must be > 0, got {getattr(self, name)}")


def train_word_tokenizer(texts: Iterable[str], vocabulary_size: int, start: str, end: str) -> Any:
    """A lower-cased word-level tokenizer; ``start A end`` (pair: ``start A end B end``)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.WordLevel(unk_token=UNK))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(vocab_size=vocabulary_size, special_tokens=[PAD, UNK, start, end], show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    ids = {token: tokenizer.token_to_id(token) for token in (start, end)}
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{start} $A {end}", pair=f"{start} $A {end} $B:1 {end}:1", special_tokens=list(ids.items())
    )
    return tokenizer


def _masked_mean(hidden: Any, mask: Any) -> Any:
    from keras import ops

    weights = ops.expand_dims(ops.cast(mask, hidden.dtype), -1)
    return ops.sum(hidden * weights, axis=1) / ops.maximum(ops.sum(weights, axis=1), 1.0)


class _WordLevelFamily(ModelFamily):
    config_class = ToyConfig
    outputs = (OutputSpec("sequence_output", ("batch", "sequence", "hidden")), OutputSpec("pooled_output", ("batch", "hidden")))
    default_objectives = ("toy_clm",)
    start, end = "", ""

    def limits(self, config: ToyConfig) -> Limits:
        return Limits(config.max_sequence_length, config.vocabulary_size, "model.max_sequence_length")

    def train_tokenizer(self, texts: Iterable[str], config: ToyConfig) -> Any:
        return train_word_tokenizer(texts, config.vocabulary_size, self.start, self.end)

    def num_special_tokens(self, pair: bool) -> int:
        return 3 if pair else 2

    def pack(self, first: list[int], second: list[int] | None, sequence_length: int, specials: SpecialTokens) -> tuple[list[int], list[int]]:
        start, end = (specials[role] for role in self.special_token_names if role not in ("pad", "unk"))
        ids = [start, *first, end] + ([*second, end] if second is not None else [])
        segments = [0] * (len(first) + 2) + ([1] * (len(second) + 1) if second is not None else [])
        return ids[:sequence_length], segments[:sequence_length]


class ToyDecoder(_WordLevelFamily):
    """A causal decoder that reads token ids only."""

    name = "toy-decoder"
    description = "toy causal decoder: token_ids only, bos/eos"
    inputs = (InputSpec("token_ids", ("batch", "sequence"), "int32", field="ids"),)
    special_token_names = {"pad": PAD, "unk": UNK, "bos": "<bos>", "eos": "<eos>"}
    start, end = "<bos>", "<eos>"

    def build_backbone(self, config: ToyConfig) -> Any:
        import keras
        import keras_hub
        from keras import ops

        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        x = keras.layers.Embedding(config.vocabulary_size, config.hidden_dim, name="token_embedding")(token_ids)
        x = x + keras_hub.layers.PositionEmbedding(config.max_sequence_length, name="positions")(x)
        x = keras_hub.layers.TransformerDecoder(2 * config.hidden_dim, num_heads=2, name="decoder")(x)  # causal mask by default
        pooled = _masked_mean(x, ops.not_equal(token_ids, 0))
        backbone = keras.Model({"token_ids": token_ids}, {"sequence_output": x, "pooled_output": pooled}, name="toy_decoder")
        backbone.vocabulary_size = config.vocabulary_size
        return backbone


class ToyChars(_WordLevelFamily):
    """Tokens read as characters, ``(batch, sequence, characters)``."""

    name = "toy-chars"
    description = "toy character-input model: char_ids (batch, sequence, characters) and a padding mask"
    inputs = (
        InputSpec("char_ids", ("batch", "sequence", "characters"), "int32", field="char_ids", sizes={"characters": CHARACTERS}),
        InputSpec("padding_mask", ("batch", "sequence"), "int32", field="attention_mask"),
    )
    special_token_names = {"pad": PAD, "unk": UNK, "cls": "<s>", "sep": "</s>"}
    start, end = "<s>", "</s>"

    def build_backbone(self, config: ToyConfig) -> Any:
        import keras
        from keras import ops

        char_ids = keras.Input(shape=(None, CHARACTERS), dtype="int32", name="char_ids")
        padding_mask = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
        chars = keras.layers.Embedding(257, 8, name="char_embedding")(char_ids)  # (batch, sequence, characters, 8)
        present = ops.expand_dims(ops.cast(ops.not_equal(char_ids, 0), chars.dtype), -1)
        words = ops.sum(chars * present, axis=2) / ops.maximum(ops.sum(present, axis=2), 1.0)  # (batch, sequence, 8)
        x = keras.layers.Dense(config.hidden_dim, activation="tanh", name="word")(words)
        x = keras.layers.Conv1D(config.hidden_dim, 2, padding="causal", activation="tanh", name="context")(x)
        pooled = _masked_mean(x, padding_mask)
        backbone = keras.Model({"char_ids": char_ids, "padding_mask": padding_mask}, {"sequence_output": x, "pooled_output": pooled}, name="toy_chars")
        backbone.vocabulary_size = config.vocabulary_size
        return backbone


@dataclasses.dataclass
class NextTokenConfig:
    """The toy next-token objective has no settings."""


class NextToken(Objective):
    """Causal LM: the state at position t predicts token t + 1 (padding is not predicted)."""

    name = "toy_clm"
    description = "next-token prediction (toy)"
    requires = frozenset({SEQUENCE_OUTPUT})
    config_class = NextTokenConfig
    token_level_lm = True

    def prepare(self, batch: Any, rng: np.random.Generator, config: Any, specials: SpecialTokens, vocabulary_size: int) -> tuple[dict, dict, dict]:
        ids, mask = batch["token_ids"], batch["padding_mask"]
        targets = np.zeros_like(ids)
        targets[:, :-1] = ids[:, 1:]
        weights = np.zeros(ids.shape, np.float32)
        weights[:, :-1] = mask[:, 1:]
        return {}, {"toy_clm": targets}, {"toy_clm": weights}

    def build(self, backbone: Any, inputs: dict[str, Any], config: Any) -> tuple[dict, dict, dict, dict]:
        import keras

        logits = keras.layers.Dense(backbone.vocabulary_size, name="toy_clm", dtype="float32")(backbone(inputs)["sequence_output"])
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return {}, {"toy_clm": logits}, {"toy_clm": loss}, {"toy_clm": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]}


@hookimpl
def ptmkit_model_families() -> list[ModelFamily]:
    return [ToyDecoder(), ToyChars()]


@hookimpl
def ptmkit_objectives() -> list[Objective]:
    return [NextToken()]
