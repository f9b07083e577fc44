"""GPT hyper-parameters (the ``[model]`` section of a run config)."""

from __future__ import annotations

import dataclasses

from ptmkit.api import ConfigError, check_choice, check_positive

#: Block layouts a GPT backbone supports (``model.variant``).
VARIANTS = ("gpt2", "gpt1")


@dataclasses.dataclass
class GPTConfig:
    """Size of a GPT decoder and of its byte-level BPE vocabulary.

    The defaults are a small GPT the size of the BERT family's defaults (4 layers, hidden 256,
    4 heads: 5.34M parameters with an 8,000-token vocabulary, 3.16M of them outside the
    embeddings). A causal LM predicts every position through the tied 8,000-way output layer, so
    a step costs more than a masked-LM step (15% of positions): at the core's default
    ``[train]`` (32 x 128 tokens) it ran 1.0K tokens/s on this two-core machine under a load
    average of 5, against BERT's 5.2K on a quiet one.

    Attributes:
        variant: the block layout. ``"gpt2"`` (Radford et al. 2019): layer norm before attention
            and feed-forward (pre-LN) and a final layer norm; ``"gpt1"`` (Radford et al. 2018):
            layer norm after each residual sum (post-LN, as in Vaswani et al. 2017), no final
            layer norm. Both have learned positions and input and output embeddings tied.
        vocabulary_size: byte-level BPE vocabulary size, ``<|endoftext|>`` included.
        num_layers: transformer decoder blocks.
        num_heads: attention heads; must divide ``hidden_dim``.
        hidden_dim: hidden size (GPT-2's ``n_embd``).
        intermediate_dim: feed-forward inner size (4 x hidden in GPT-1 and GPT-2).
        dropout: dropout rate on embeddings, attention and feed-forward.
        max_sequence_length: number of position embeddings (GPT-2's ``n_positions``).
        layer_norm_epsilon: epsilon of every layer normalisation (GPT-2: 1e-5).
        min_frequency: a merge must occur this often in the corpus to enter the vocabulary.
        prepend_bos: generation and line scoring put ``<|endoftext|>`` before a prompt, as
            pre-training puts it before every window (an imported Hugging Face GPT-2 has
            ``false``: its prompts start with their own tokens). An empty prompt always starts
            from ``<|endoftext|>``.
    """

    variant: str = "gpt2"
    vocabulary_size: int = 8000
    num_layers: int = 4
    num_heads: int = 4
    hidden_dim: int = 256
    intermediate_dim: int = 1024
    dropout: float = 0.1
    max_sequence_length: int = 512
    layer_norm_epsilon: float = 1e-5
    min_frequency: int = 2
    prepend_bos: bool = True

    def validate(self) -> None:
        check_choice(self, "model", "variant", VARIANTS)
        check_positive(self, "model", "vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim", "max_sequence_length")
        if self.hidden_dim % self.num_heads:
            raise ConfigError(f"config key 'model.num_heads' = {self.num_heads} must divide 'model.hidden_dim' = {self.hidden_dim}")
        if self.vocabulary_size < 257:
            raise ConfigError(f"config key 'model.vocabulary_size' = {self.vocabulary_size} must be at least 257 (256 bytes and <|endoftext|>)")
        if not 0.0 < self.layer_norm_epsilon < 1.0:
            raise ConfigError(f"config key 'model.layer_norm_epsilon' must be in (0, 1), got {self.layer_norm_epsilon}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"config key 'model.dropout' must be in [0, 1), got {self.dropout}")
