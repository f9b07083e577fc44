"""Helpers of the transformer plugin's tests: 20 real English-German pairs and a tiny config that overfits them."""

from __future__ import annotations

from pathlib import Path

DEV = Path(__file__).resolve().parents[3] / "data" / "parallel" / "en-de-dev.tsv"

#: A model small enough to overfit 20 short pairs in about 15 s on two CPU cores (250 full-batch
#: steps: BLEU 100, dev loss 0.94, the label-smoothed floor; 350 steps end at 0.94 too).
TINY_TRANSFORMER = [
    "model.vocabulary_size=400",
    "model.min_frequency=1",
    "model.encoder_layers=1",
    "model.decoder_layers=2",
    "model.hidden_dim=64",
    "model.num_heads=4",
    "model.intermediate_dim=128",
    "model.dropout=0.0",
    "model.max_sequence_length=32",
    "model.batch_size=20",
    "model.max_steps=250",
    "model.warmup_steps=50",
    "model.learning_rate_scale=1.0",
    "model.checkpoint_every=125",
    "model.dev_sentences=20",
]


def short_pairs(count: int = 20) -> list[tuple[str, str]]:
    """The first ``count`` pairs of the shipped dev file with at most 5 English and 6 German
    words and no printf placeholder."""
    pairs = []
    for line in DEV.read_text(encoding="utf-8").splitlines()[1:]:
        source, target = line.split("\t")[:2]
        if len(source.split()) <= 5 and len(target.split()) <= 6 and "%" not in source + target:
            pairs.append((source, target))
        if len(pairs) == count:
            break
    return pairs


def write_pairs(path: Path, pairs: list[tuple[str, str]], header: str = "en\tde") -> Path:
    path.write_text("".join(f"{line}\n" for line in [header, *(f"{s}\t{t}" for s, t in pairs)]), encoding="utf-8")
    return path
