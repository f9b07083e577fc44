"""``ptmkit quickstart --family gpt``: the GPT tour (:class:`ptmkit.api.QuickstartPlan`).

Pre-train the default GPT (4 layers, hidden 256, an 8,000-token byte-level BPE) with the causal
LM on the shipped Wikipedia paragraphs, report held-out perplexity (per token, per word, bits per
byte), export the decoder with its key/value cache to ONNX (fp32, int8 gated on token agreement)
and sample continuations of a few prompts with ONNX Runtime. int8's gate decodes the corpus's first
lines as prompts. Windows of 128 tokens, 16 a batch:
a step here is a quarter of the core's default 32 x 128 (the 8,000-way output layer runs on every
position), so the budget buys steps rather than long windows.
"""

from __future__ import annotations

from ptmkit.api import ConfigError, QuickstartPlan

#: Shared by both budgets: the training windows and their learning rate (a few hundred steps of a
#: small decoder want more than the [train] default's 1e-4 warm-up-limited pace).
_TRAIN = ["train.sequence_length=128", "train.batch_size=16", "train.learning_rate=1e-3", "train.checkpoint_every=50"]
#: The sample: top-k sampling (greedy decoding of a minutes-old model repeats its most frequent
#: words), one seed, so that a run prints the same continuations every time.
_SAMPLE = {"max_new_tokens": 24, "strategy": "sample", "temperature": 0.8, "top_k": 40, "seed": 0}
PROMPTS = ["The history of", "In 1990, the city", "The river flows"]

#: ``full`` and ``small``, with seconds by stage on two quiet cores. Estimated from the one
#: measured run (benchmarks/results/quickstart.md, ``full`` under load average 10: 250 CPU seconds
#: of pre-training, 4.6 of export, 0.2 of sampling; 14 min of wall time at 30% of one core): the
#: CPU seconds, as a quiet machine's wall time is at most that. Not yet measured on a quiet machine.
BUDGETS = {
    "full": QuickstartPlan([*_TRAIN, "train.max_steps=200"], {"pretrain": 250, "export": 15, "sample": 2}, PROMPTS, _SAMPLE),
    "small": QuickstartPlan([*_TRAIN, "train.max_steps=60"], {"pretrain": 85, "export": 15, "sample": 2}, PROMPTS, _SAMPLE),
}


def plan(budget: str) -> QuickstartPlan:
    """The GPT tour at ``budget``.

    Raises:
        ConfigError: an unknown budget, naming the known ones.
    """
    if budget not in BUDGETS:
        raise ConfigError(f"--budget {budget}: the gpt quickstart has {', '.join(BUDGETS)}")
    return BUDGETS[budget]
