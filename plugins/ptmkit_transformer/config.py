"""Transformer encoder-decoder hyper-parameters (the ``[model]`` section of a run config).

The family trains itself on sentence pairs (:class:`ptmkit.api.TrainsOnPairs`), so its training
keys (steps, batch, schedule, label smoothing) are ``[model]`` keys too, as for every family with
its own loop.
"""

from __future__ import annotations

import dataclasses

from ptmkit.api import ConfigError, check_choice, check_non_negative, check_positive

POSITIONS = ("sinusoidal", "learned")
NORMALIZATIONS = ("post", "pre")
#: Feed-forward activations (Keras names): the paper's ReLU; GELU (exact, erf) and SiLU (swish) for imported checkpoints.
ACTIVATIONS = ("relu", "gelu", "silu")
#: Where the sinusoids' sines and cosines sit: alternating (keras-hub's ``SinePositionEncoding``, the
#: paper's equation) or all sines then all cosines (fairseq's and Marian's layout).
SINUSOID_LAYOUTS = ("interleaved", "halves")
#: Training objectives of the family (``model.objective``): translation on sentence pairs; the
#: denoising ones on a monolingual corpus (:mod:`ptmkit_transformer.denoising`).
OBJECTIVES = ("translation", "bart", "t5_span", "mass")
#: BART's noising transformations (Lewis et al. 2020, section 2.2), in the order they are applied.
BART_NOISES = ("sentence_permutation", "text_infilling", "token_masking", "token_deletion", "document_rotation")


@dataclasses.dataclass
class TransformerConfig:
    """Size of a Transformer encoder-decoder (Vaswani et al. 2017), its shared BPE vocabulary and
    its training.

    The defaults are a small model for a CPU (3 + 3 layers, hidden 256, 4 heads, feed-forward
    1,024, an 8,000-token vocabulary); the paper's base model is ``encoder_layers = 6``,
    ``decoder_layers = 6``, ``hidden_dim = 512``, ``num_heads = 8``, ``intermediate_dim = 2048``,
    ``dropout = 0.1``, ``warmup_steps = 4000``, a 37,000-token shared vocabulary.

    Attributes:
        vocabulary_size: shared source/target BPE vocabulary size, the 4 specials included
            (``<pad>``, ``<unk>``, ``<s>``, ``</s>``).
        min_frequency: a merge must occur this often in the training pairs to enter the vocabulary.
        encoder_layers: encoder blocks (paper: 6).
        decoder_layers: decoder blocks (paper: 6).
        hidden_dim: ``d_model``, the width of every block and of the tied embeddings (paper: 512).
        num_heads: attention heads; must divide ``hidden_dim`` (paper: 8).
        intermediate_dim: ``d_ff``, the feed-forward inner size (paper: 2,048).
        dropout: ``P_drop`` on the embeddings plus positions, attention weights and each sub-layer's
            output (paper: 0.1).
        positions: ``"sinusoidal"`` (the paper's fixed encodings, section 3.5) or ``"learned"``
            position embeddings (the paper's Table 3 row (E): nearly identical results).
        normalization: ``"post"``: layer norm after each residual sum, as in the paper; ``"pre"``:
            before each sub-layer, plus a final layer norm after each stack (Xiong et al. 2020:
            trains without warm-up sensitivity).
        max_sequence_length: the most tokens a source or target may hold, ``</s>`` or ``<s>``
            included (the learned positions' count); longer training sources are cut, with a
            count in a warning.
        layer_norm_epsilon: epsilon of every layer normalisation.
        activation: the feed-forward activation: ``"relu"`` (the paper's), ``"gelu"`` (exact, erf)
            or ``"silu"`` (swish); imported checkpoints set theirs.
        scale_embeddings: multiply token embeddings by ``sqrt(hidden_dim)`` before positions are
            added (the paper's section 3.4; transformers' ``scale_embedding``).
        sinusoid_layout: ``"interleaved"``: sines at even and cosines at odd features (keras-hub's
            ``SinePositionEncoding``); ``"halves"``: the sines of all frequencies, then their
            cosines (fairseq's and transformers' ``MarianSinusoidalPositionalEmbedding``, computed
            in float64 as there). Only read with ``positions = "sinusoidal"``.
        final_logits_bias: add a learned bias over the vocabulary to the output logits
            (transformers' BART/Marian ``final_logits_bias``; zeros when trained from scratch).
        embedding_layer_norm: a layer norm over each stack's token embeddings plus positions,
            before dropout (BART's ``layernorm_embedding``, Lewis et al. 2020; off in the paper).
        decoder_start_token: the token the decoder starts from (``<s>``; Marian's checkpoints
            start from ``<pad>``, BART's from ``</s>``).
        source_start_token: a token put before every source, ahead of its tokens and ``</s>``
            (BART's checkpoints read ``<s> source </s>``; "": none, the paper's and Marian's
            ``source </s>``).
        objective: the training objective: ``"translation"`` (sequence-to-sequence cross-entropy on
            ``--parallel`` pairs), or a denoising one on a ``--corpus`` (``--objective NAME``):
            ``"bart"`` (Lewis et al. 2020), ``"t5_span"`` (Raffel et al. 2020, span corruption),
            ``"mass"`` (Song et al. 2019); the same loss, the noised text as the source and the
            original (T5: its corrupted spans; MASS: its fragment) as the target.
        init: a finished transformer run (``--init RUN``) whose tokenizer and backbone weights this
            run starts from, e.g. a translation run from a denoising one ("": from scratch).
        bart_noises: BART's noising transformations on, comma separated, applied in this order:
            ``sentence_permutation``, ``text_infilling``, ``token_masking``, ``token_deletion``,
            ``document_rotation`` (paper's BART-large: text infilling and sentence permutation).
        bart_infilling_ratio: the share of a document's tokens text infilling masks (paper: 0.3).
        bart_poisson_lambda: the mean of text infilling's Poisson span lengths (paper: 3).
        bart_masking_ratio: the share of tokens token masking replaces by ``<mask>`` (BERT's 0.15).
        bart_deletion_ratio: the share of tokens token deletion removes.
        t5_noise_density: the share of tokens T5's span corruption corrupts (paper: 0.15).
        t5_mean_span_length: the mean length of its corrupted spans (paper: 3).
        mass_ratio: the share of a sentence MASS masks as one fragment (paper: 0.5).
        label_smoothing: ``epsilon_ls`` of the translation loss (paper: 0.1, section 5.4).
        max_steps: optimizer steps.
        batch_size: sentence pairs per step.
        learning_rate_scale: the factor of the paper's schedule (equation 3):
            ``lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)`` (paper: 1).
        warmup_steps: steps of the schedule's linear warm-up (paper: 4,000 for 100,000 steps; the
            default suits the default 2,000-step run).
        adam_beta_1: Adam's beta_1 (paper: 0.9).
        adam_beta_2: Adam's beta_2 (paper: 0.98).
        adam_epsilon: Adam's epsilon (paper: 1e-9).
        clip_norm: the most global L2 norm of a step's gradients; larger ones are scaled down to it
            (Pascanu et al. 2013; transformers' ``Trainer`` ``max_grad_norm`` 1.0, fairseq's
            ``--clip-norm``); 0: no clipping (the paper names none). Default 1.0, with ``init_std``
            0.02: transformers' Marian recipe, which on the shipped English-German pairs gives
            test BLEU 25.7 (mean of 2 seeds) after 2,000 steps against 18.8 with neither
            (``benchmarks/results/seq2seq_reference.md``).
        init_std: the standard deviation of the normal distribution every kernel and the token
            embedding are drawn from (transformers' ``init_std`` of Marian and BART, 0.02; biases
            zero, layer norms one); 0: Glorot-uniform kernels and an ``N(0, hidden_dim^-0.5)``
            embedding (fairseq's Transformer). Default 0.02. Not read when weights are imported or
            ``init`` is set.
        checkpoint_every: steps between checkpoints (``ptmkit train ... --resume`` continues from
            the newest one).
        dev_sentences: dev pairs translated (greedy) after training for the run's dev BLEU
            (0: none; the dev loss uses every dev pair).
        seed: initialisation and batches (step ``k``'s pairs are drawn from ``(seed, k)``).
    """

    vocabulary_size: int = 8000
    min_frequency: int = 2
    encoder_layers: int = 3
    decoder_layers: int = 3
    hidden_dim: int = 256
    num_heads: int = 4
    intermediate_dim: int = 1024
    dropout: float = 0.1
    positions: str = "sinusoidal"
    normalization: str = "post"
    max_sequence_length: int = 128
    layer_norm_epsilon: float = 1e-5
    activation: str = "relu"
    scale_embeddings: bool = True
    sinusoid_layout: str = "interleaved"
    final_logits_bias: bool = False
    embedding_layer_norm: bool = False
    decoder_start_token: str = "<s>"
    source_start_token: str = ""
    objective: str = "translation"
    init: str = ""
    bart_noises: str = "sentence_permutation,text_infilling"
    bart_infilling_ratio: float = 0.3
    bart_poisson_lambda: float = 3.0
    bart_masking_ratio: float = 0.15
    bart_deletion_ratio: float = 0.15
    t5_noise_density: float = 0.15
    t5_mean_span_length: float = 3.0
    mass_ratio: float = 0.5
    label_smoothing: float = 0.1
    max_steps: int = 2000
    batch_size: int = 64
    learning_rate_scale: float = 1.0
    warmup_steps: int = 1000
    adam_beta_1: float = 0.9
    adam_beta_2: float = 0.98
    adam_epsilon: float = 1e-9
    clip_norm: float = 1.0
    init_std: float = 0.02
    checkpoint_every: int = 500
    dev_sentences: int = 200
    seed: int = 1

    def validate(self) -> None:
        check_choice(self, "model", "positions", POSITIONS)
        check_choice(self, "model", "normalization", NORMALIZATIONS)
        check_choice(self, "model", "objective", OBJECTIVES)
        check_choice(self, "model", "activation", ACTIVATIONS)
        check_choice(self, "model", "sinusoid_layout", SINUSOID_LAYOUTS)
        if self.positions == "sinusoidal" and self.sinusoid_layout == "halves" and self.hidden_dim % 2:
            raise ConfigError(f"config key 'model.hidden_dim' = {self.hidden_dim} must be even for 'model.sinusoid_layout' = \"halves\"")
        check_positive(
            self, "model", "vocabulary_size", "min_frequency", "encoder_layers", "decoder_layers", "hidden_dim", "num_heads",
            "intermediate_dim", "max_sequence_length", "max_steps", "batch_size", "learning_rate_scale", "warmup_steps",
            "adam_epsilon", "checkpoint_every",
        )
        check_non_negative(self, "model", "dev_sentences", "clip_norm", "init_std")
        if self.hidden_dim % self.num_heads:
            raise ConfigError(f"config key 'model.num_heads' = {self.num_heads} must divide 'model.hidden_dim' = {self.hidden_dim}")
        if self.max_sequence_length < 3:
            raise ConfigError(f"config key 'model.max_sequence_length' = {self.max_sequence_length} must be at least 3 (a token and <s> or </s>)")
        for key in ("dropout", "label_smoothing", "adam_beta_1", "adam_beta_2"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise ConfigError(f"config key 'model.{key}' must be in [0, 1), got {getattr(self, key)}")
        self._validate_denoising()
        if not 0.0 < self.layer_norm_epsilon < 1.0:
            raise ConfigError(f"config key 'model.layer_norm_epsilon' must be in (0, 1), got {self.layer_norm_epsilon}")

    def _validate_denoising(self) -> None:
        unknown = [name.strip() for name in self.bart_noises.split(",") if name.strip() and name.strip() not in BART_NOISES]
        if unknown:
            raise ConfigError(f"config key 'model.bart_noises': unknown noising {unknown[0]!r}; expected some of {', '.join(BART_NOISES)}")
        for key in ("bart_infilling_ratio", "bart_masking_ratio", "bart_deletion_ratio"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise ConfigError(f"config key 'model.{key}' must be in [0, 1], got {getattr(self, key)}")
        for key in ("t5_noise_density", "mass_ratio"):
            if not 0.0 < getattr(self, key) < 1.0:
                raise ConfigError(f"config key 'model.{key}' must be in (0, 1), got {getattr(self, key)}")
        check_positive(self, "model", "bart_poisson_lambda")
        if self.t5_mean_span_length < 1.0:
            raise ConfigError(f"config key 'model.t5_mean_span_length' must be at least 1, got {self.t5_mean_span_length}")

    def noises(self) -> list[str]:
        """The BART noising transformations on (``bart_noises``), in the order they apply (:data:`BART_NOISES`)."""
        chosen = {name.strip() for name in self.bart_noises.split(",")}
        return [name for name in BART_NOISES if name in chosen]
