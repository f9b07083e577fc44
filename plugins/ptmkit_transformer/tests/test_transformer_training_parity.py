"""The ``translation`` objective trains as transformers does: from the same random-init
``MarianMTModel`` weights, on the same batches, ptmkit's compiled training model (Keras ``fit``
step: label-smoothed loss, Adam with the paper's betas and epsilon, the inverse-square-root
schedule, global-norm clipping) gives the same loss at every step as a torch loop that
transformers' ``Seq2SeqTrainer`` runs (``LabelSmoother``, ``torch.optim.Adam``, ``LambdaLR``,
``clip_grad_norm_``), within 1e-3 over 12 steps. Dropout is off on both sides (their random
streams differ); transformers' ``final_logits_bias`` (a buffer there) is trained as ptmkit trains
its own. And the two initialisations the family offers give the spreads they promise.

transformers runs in a subprocess: torch crashes when it is imported after TensorFlow."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from ptmkit.testing import hf_reference

STEPS, CLIP, WARMUP = 12, 1.0, 50
PAD, EOS, BOS, VOCABULARY = 0, 1, 2, 120

#: Saves a random-init Marian model, trains it on the job's batches, prints each step's loss and
#: gradient norm (before clipping). Job on stdin, as JSON.
REFERENCE_SCRIPT = """
import json, sys
import torch
from transformers import MarianConfig, MarianMTModel
job = json.load(sys.stdin)
config = MarianConfig(vocab_size=job["vocabulary"], d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                      decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64, activation_function="relu",
                      pad_token_id=job["pad"], eos_token_id=job["eos"], bos_token_id=job["bos"], decoder_start_token_id=job["bos"],
                      forced_eos_token_id=None, scale_embedding=True, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
torch.manual_seed(0)
model = MarianMTModel(config)
model.save_pretrained(job["checkpoint"])
bias = torch.nn.Parameter(model.final_logits_bias.detach().clone())  # a buffer in transformers; ptmkit trains it
del model._buffers["final_logits_bias"]
model.register_parameter("final_logits_bias", bias)
optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
warmup, dim = job["warmup"], config.d_model
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: dim**-0.5 * min((s + 1) ** -0.5, (s + 1) * warmup**-1.5))
model.train()
losses, norms = [], []
for batch in job["batches"]:
    long = lambda name: torch.tensor(batch[name], dtype=torch.long)
    logits = model(input_ids=long("encoder_token_ids"), attention_mask=long("encoder_padding_mask"), decoder_input_ids=long("decoder_token_ids"),
                   decoder_attention_mask=long("decoder_padding_mask")).logits
    log_probs = torch.log_softmax(logits.float(), -1)
    labels, weights = long("labels"), torch.tensor(batch["weights"])
    nll = -log_probs.gather(-1, labels[..., None])[..., 0]
    smoothing = job["smoothing"]  # transformers' LabelSmoother: the mean over real labels of each term
    loss = ((1 - smoothing) * nll - smoothing * log_probs.mean(-1)).mul(weights).sum() / weights.sum()
    optimizer.zero_grad()
    loss.backward()
    norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), job["clip"])))
    optimizer.step()
    scheduler.step()
    losses.append(loss.item())
print(json.dumps({"losses": losses, "norms": norms}))
"""


def _batches() -> list[dict[str, list]]:
    """``STEPS`` batches of 6 random pairs of 3-14 tokens (Zipf-distributed, so that a few steps
    lower the loss), packed by the family's own :func:`pack_pairs`."""
    from ptmkit_transformer.objectives import pack_pairs

    rng = np.random.default_rng(7)
    zipf = 1.0 / np.arange(1, VOCABULARY - 2)
    batches = []
    for _ in range(STEPS):
        pairs = [[(3 + rng.choice(VOCABULARY - 3, rng.integers(3, 15), p=zipf / zipf.sum())).tolist() for _ in range(2)] for _ in range(6)]
        inputs, labels, weights = pack_pairs([s for s, _ in pairs], [t for _, t in pairs], BOS, EOS, PAD, 64)
        batches.append({**{k: v.tolist() for k, v in inputs.items()}, "labels": labels.tolist(), "weights": weights.tolist()})
    return batches


def test_translation_training_steps_match_transformers(tmp_path: Path) -> None:
    from ptmkit.api import quiet_tensorflow

    quiet_tensorflow()
    from ptmkit_transformer.hf import port_weights, read_seq2seq_config
    from ptmkit_transformer.train import compiled_model, relative

    batches = _batches()
    job = {"checkpoint": str(tmp_path / "ckpt"), "vocabulary": VOCABULARY, "pad": PAD, "eos": EOS, "bos": BOS, "warmup": WARMUP, "clip": CLIP,
           "smoothing": 0.1, "batches": batches}
    reference = hf_reference(REFERENCE_SCRIPT, job)
    assert sum(norm > CLIP for norm in reference["norms"]) >= 3, reference["norms"]  # clipping is exercised, not idle
    config, _ = read_seq2seq_config(tmp_path / "ckpt")
    config = dataclasses.replace(config, dropout=0.0, warmup_steps=WARMUP, clip_norm=CLIP, label_smoothing=0.1)
    backbone, model = compiled_model(config)
    port_weights(backbone, tmp_path / "ckpt" / "model.safetensors", config)
    ours = []
    for batch in batches:
        inputs = {name: np.asarray(batch[name], np.int32) for name in ("encoder_token_ids", "encoder_padding_mask", "decoder_token_ids", "decoder_padding_mask")}
        model.reset_metrics()
        logs = model.train_on_batch(inputs, {"logits": np.asarray(batch["labels"], np.int32)},
                                    sample_weight={"logits": relative(np.asarray(batch["weights"], np.float32))}, return_dict=True)
        ours.append(float(logs["loss"]))
    assert np.max(np.abs(np.subtract(ours, reference["losses"]))) < 1e-3, list(zip(ours, reference["losses"], strict=True))
    assert reference["losses"][-1] < reference["losses"][0] - 0.1  # it learned: the steps compared are not flat


@pytest.mark.parametrize("init_std", [0.0, 0.02])
def test_initialisations_have_the_promised_spread(init_std: float) -> None:
    """``init_std = 0.02``: every kernel and the embedding ``N(0, 0.02)``; 0: the embedding
    ``N(0, hidden^-0.5)``, feed-forward kernels Glorot-uniform (std ``sqrt(2 / (fan_in + fan_out))``)."""
    from ptmkit.api import quiet_tensorflow

    quiet_tensorflow()
    import keras

    from ptmkit_transformer.backbone import build_backbone
    from ptmkit_transformer.config import TransformerConfig

    keras.utils.set_random_seed(3)
    config = TransformerConfig(vocabulary_size=4000, hidden_dim=128, intermediate_dim=512, encoder_layers=1, decoder_layers=1, init_std=init_std)
    backbone = build_backbone(config)
    block = backbone.get_layer("encoder_layer_0")
    spreads = {
        "embedding": float(np.std(backbone.token_embedding.embeddings.numpy())),
        "feed-forward": float(np.std(block._feedforward_intermediate_dense.kernel.numpy())),
        "query": float(np.std(block._self_attention_layer._query_dense.kernel.numpy())),
    }
    expected = {"embedding": 0.02, "feed-forward": 0.02, "query": 0.02} if init_std else {
        "embedding": 128**-0.5, "feed-forward": (2 / (128 + 512)) ** 0.5,
        "query": (2 / (128 + 128)) ** 0.5,  # Keras takes the fans of the (hidden, heads, head_dim) kernel as a (hidden, hidden) matrix's
    }
    for name, spread in spreads.items():
        assert abs(spread / expected[name] - 1) < 0.05, (name, spread, expected[name])
