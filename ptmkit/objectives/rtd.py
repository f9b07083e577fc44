"""Replaced-token detection (ELECTRA, Clark et al. 2020, section 2 and appendix A).

A small **generator** (a masked LM of the run's own family, built through the family's
``build_backbone`` from a narrower config, :meth:`~ptmkit.contract.ModelFamily.scale_config`)
predicts the tokens at 15% masked positions; a token **sampled** from its softmax (Gumbel-max,
no gradient through the sample) replaces each masked position; the **discriminator** (the run's
backbone) then predicts, for every non-padding token, whether it was replaced. A position whose
sample equals the original token counts as original (the paper, section 2). The loss is
``generator MLM + lambda * discriminator BCE`` with lambda = 50 (the paper's value).

Masking follows the reference implementation (``pretrain_helpers.mask``): of the selected
positions 85% become ``[MASK]`` and 15% keep their token (no random tokens); every selected
position is then replaced by the generator's sample.

**Embedding sharing.** The generator's masked-LM output layer is tied to the discriminator's
token embedding (keras-hub's ``MaskedLMHead`` projects the generator's narrower states to the
embedding width, as ELECTRA's ``get_masked_lm_output`` does), so the generator's softmax updates
every row of the shared table, the reason the paper gives for sharing. A family that can build a
backbone on another's embeddings (:class:`~ptmkit.contract.SharesEmbeddings`, a backbone with an
embedding width apart from its hidden size and a projection between them, as ELECTRA's
``embedding_size``) gets a generator whose input embeddings are the discriminator's own layers,
token, position and segment embeddings and their layer norm (section 3.2); for any other family
the generator's input embedding is a narrower table of its own.

Only the discriminator is the run's backbone: ``backbone.weights.h5`` holds it alone, so
``finetune`` and ``export`` read an RTD run as any other; the generator lives in the training
checkpoints only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from ptmkit.contract import SEQUENCE_OUTPUT, TOKEN_EMBEDDING, ModelFamily, Objective, SharesEmbeddings, SpecialTokens
from ptmkit.errors import ConfigError
from ptmkit.objectives.mlm import (
    MaskedLMConfig,
    check_replacement_rates,
    mask_tokens,
    masked_lm_head,
    prediction_loss,
    require_mask_token,
)


@dataclasses.dataclass
class ReplacedTokenDetectionConfig:
    """Replaced-token-detection settings (section ``[objectives.rtd]``); defaults are ELECTRA's.

    Attributes:
        mask_rate: fraction of real tokens the generator predicts and replaces (ELECTRA: 0.15).
        mask_token_rate: of those, the fraction shown to the generator as ``[MASK]``; the rest
            keep their token (ELECTRA's ``pretrain_helpers.mask``: 0.85).
        generator_hidden_ratio: the generator's width over the discriminator's (ELECTRA: 0.25
            for Small and Large, 1/3 for Base); the family scales its config
            (``ModelFamily.scale_config``), or, for a family that cannot, the generator has the
            discriminator's size.
        discriminator_weight: lambda in ``loss = generator MLM + lambda * discriminator`` (50).
        temperature: the softmax temperature the replacements are sampled at (ELECTRA: 1.0).
    """

    mask_rate: float = 0.15
    mask_token_rate: float = 0.85
    generator_hidden_ratio: float = 0.25
    discriminator_weight: float = 50.0
    temperature: float = 1.0

    def validate(self) -> None:
        check_replacement_rates("rtd", self.mask_rate, self.mask_token_rate, 0.0)
        if not 0.0 < self.generator_hidden_ratio <= 1.0:
            raise ConfigError(f"config key 'objectives.rtd.generator_hidden_ratio' must be in (0, 1], got {self.generator_hidden_ratio}")
        for key in ("discriminator_weight", "temperature"):
            if not getattr(self, key) > 0.0:
                raise ConfigError(f"config key 'objectives.rtd.{key}' must be > 0, got {getattr(self, key)}")

    def masking(self) -> MaskedLMConfig:
        """The masked-LM selection these settings make (dynamic, no random tokens)."""
        return MaskedLMConfig(mask_rate=self.mask_rate, mask_token_rate=self.mask_token_rate, random_token_rate=0.0, masking="dynamic")


def detection_loss(weight: float) -> Any:
    """``weight`` x the sigmoid cross-entropy of the ``rtd`` output, whose last axis holds
    ``[logit, label]`` (the labels come from the graph's samples, so they travel with the logits;
    the data's ``y_true`` is unused), averaged over the sample weights (non-padding tokens)."""
    from ptmkit.objectives.rtd_layers import DetectionLoss

    return DetectionLoss(weight, bce)


def bce(y_true: Any, y_pred: Any) -> Any:
    """``(batch, sequence)`` binary cross-entropy (nats) of the ``[logit, label]`` pairs."""
    from keras import ops

    logit, label = y_pred[..., 0], y_pred[..., 1]
    return ops.maximum(logit, 0.0) - logit * label + ops.log1p(ops.exp(-ops.abs(logit)))


def detection_metrics() -> list[Any]:
    """Discriminator accuracy, its unweighted loss (``disc_loss``) and the share of replaced
    tokens (``replaced_share``), over non-padding tokens."""
    import keras
    from keras import ops

    def accuracy(y_true: Any, y_pred: Any) -> Any:
        return ops.cast(ops.equal(ops.cast(y_pred[..., 0] > 0, "float32"), y_pred[..., 1]), "float32")

    def replaced(y_true: Any, y_pred: Any) -> Any:
        return y_pred[..., 1]

    return [
        keras.metrics.MeanMetricWrapper(accuracy, name="accuracy"),
        keras.metrics.MeanMetricWrapper(bce, name="disc_loss"),
        keras.metrics.MeanMetricWrapper(replaced, name="replaced_share"),
    ]


def generator_width(hidden_dim: int, width_ratio: float) -> dict[str, int]:
    """ELECTRA's ``get_generator_config`` (Clark et al. 2020, reference implementation) for a
    Transformer encoder's config: ``hidden_dim`` ``round(hidden_dim * width_ratio)``,
    ``intermediate_dim`` 4 x that, ``num_heads`` ``max(1, hidden // 64)`` (fewer while they do not
    divide it). A family's :meth:`~ptmkit.contract.ModelFamily.scale_config` replaces these keys."""
    hidden = max(1, int(round(hidden_dim * width_ratio)))
    heads = max(1, hidden // 64)
    while hidden % heads:
        heads -= 1
    return {"hidden_dim": hidden, "intermediate_dim": 4 * hidden, "num_heads": heads}


def generator_config(family: ModelFamily, model_config: Any, ratio: float) -> Any:
    """The generator's config: ``family.scale_config(model_config, ratio)``, else (a family that
    cannot scale its config, or ``ratio`` 1) ``model_config`` itself."""
    if ratio == 1.0:
        return model_config
    scaled = family.scale_config(model_config, ratio)
    return model_config if scaled is None else scaled


class ReplacedTokenDetection(Objective):
    """ELECTRA: a small masked-LM generator corrupts the input, the backbone detects replacements."""

    name = "rtd"
    description = "replaced-token detection: generator MLM samples replacements, backbone detects them; gen + 50 x disc (ELECTRA)"
    requires = frozenset({SEQUENCE_OUTPUT, TOKEN_EMBEDDING})
    config_class = ReplacedTokenDetectionConfig
    corrupts_token_ids = True
    trains_alone = True

    def prepare(
        self,
        batch: Mapping[str, np.ndarray],
        rng: np.random.Generator,
        config: ReplacedTokenDetectionConfig,
        specials: SpecialTokens,
        vocabulary_size: int,
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
        require_mask_token("rtd", specials)
        masked, positions, ids, weights = mask_tokens(batch["token_ids"], batch["padding_mask"], rng, config.masking(), specials, vocabulary_size)
        inputs = {"token_ids": masked, "mask_positions": positions, "rtd_mask_ids": ids, "rtd_mask_weights": weights}
        padding = batch["padding_mask"].astype(np.float32)
        return inputs, {"rtd_generator": ids, "rtd": np.zeros(padding.shape, np.float32)}, {"rtd_generator": weights, "rtd": padding}

    def build(self, backbone: Any, inputs: dict[str, Any], config: Any) -> tuple[dict, dict, dict, dict]:
        raise NotImplementedError("objective 'rtd' builds a generator of the run's family: the core calls build_on_family")

    def build_on_family(
        self, family: ModelFamily, model_config: Any, backbone: Any, inputs: dict[str, Any], config: ReplacedTokenDetectionConfig
    ) -> tuple[dict, dict, dict, dict]:
        """The generator, its sampling and the discriminator head on ``backbone``.

        Raises:
            ConfigError: a family whose inputs are not derived from the token ids alone (a
                ``char_ids`` input cannot be rebuilt from the sampled ids inside the graph).
        """
        import keras

        from ptmkit.objectives.rtd_layers import SampleAndReplace

        ids_input = family.input("ids")
        if ids_input is None or family.input("char_ids") is not None:
            raise ConfigError(f"objective 'rtd' replaces token ids inside the model; the {family.name} backbone's inputs {family.input_names} are not fed by token ids alone")
        extra = {
            "mask_positions": keras.Input(shape=(None,), dtype="int32", name="mask_positions"),
            "rtd_mask_ids": keras.Input(shape=(None,), dtype="int32", name="rtd_mask_ids"),
            "rtd_mask_weights": keras.Input(shape=(None,), dtype="float32", name="rtd_mask_weights"),
        }
        small = generator_config(family, model_config, config.generator_hidden_ratio)
        generator = family.build_on_embeddings(small, backbone) if isinstance(family, SharesEmbeddings) else family.build_backbone(small)
        generator.name = "rtd_generator_backbone"
        logits = masked_lm_head(backbone, generator(inputs)["sequence_output"], extra["mask_positions"], "rtd_generator")
        corrupted, is_replaced = SampleAndReplace(config.temperature, name="rtd_sample")(
            inputs[ids_input.name], logits, extra["mask_positions"], extra["rtd_mask_ids"], extra["rtd_mask_weights"]
        )
        states = backbone({**inputs, ids_input.name: corrupted})["sequence_output"]
        init = keras.initializers.TruncatedNormal(stddev=0.02)
        hidden = keras.layers.Dense(states.shape[-1], activation="gelu", kernel_initializer=init, name="rtd_dense")(states)
        logit = keras.layers.Dense(1, kernel_initializer=init, dtype="float32", name="rtd_logit")(hidden)
        paired = keras.layers.Concatenate(dtype="float32", name="rtd")([logit, keras.ops.expand_dims(is_replaced, -1)])
        losses = {"rtd_generator": prediction_loss(), "rtd": detection_loss(config.discriminator_weight)}
        metrics = {"rtd_generator": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")], "rtd": detection_metrics()}
        return extra, {"rtd_generator": logits, "rtd": paired}, losses, metrics

