"""ELECTRA pre-training throughput: ptmkit's ``electra`` family with ``rtd`` against plain keras-hub
(two ``ElectraBackbone``s + heads), the issue's ">= 0.95x" target.

Both models train the same batches (ptmkit's ``make_step`` over ``data/corpus/enwiki-106.txt``,
tokenized by a first ``pretrain()`` run with the family's defaults: 4 layers, hidden 256,
embeddings 128, 4 heads, vocabulary 8,000; batch 32 x 128; 15% of tokens masked, 85% of them
``[MASK]``) with ptmkit's AdamW, ``jit_compile=False``, in interleaved rounds (the order rotated
every round), a few warm-up steps dropped from each fit. tokens/s = batch x length / median step.

The anchor is what a keras-hub user writes for ELECTRA (Clark et al. 2020, section 2): a
discriminator ``keras_hub.models.ElectraBackbone`` of the same size and a generator
``ElectraBackbone`` at a quarter of the hidden size (64, 1 head, feed-forward 256) with embeddings
of its own (keras-hub's backbones cannot share theirs), keras-hub's ``MaskedLMHead`` tied to the
discriminator's token embedding, a Gumbel-max sample replacing the masked positions (no gradient),
a dense-GELU-dense discriminator head, loss = generator cross-entropy + 50 x discriminator BCE.
ptmkit's row is ``build_pretraining_model()`` of the electra family: the generator shares the
discriminator's embeddings, GELU is exact (``Erf``; keras-hub's ``ElectraBackbone`` uses the tanh
form), the rest is the core's ``rtd``. The ``pretrain()`` row is the whole ``ptmkit train`` path
(its own metrics.json tokens/s, callbacks and checkpoints included) from the first run.

Run::

    PTMKIT_PLUGINS=ptmkit_electra python benchmarks/electra_throughput.py [--steps 8] [--warmup 2] [--rounds 3] [--quick]

``--quick``: pretrain_throughput.py's tiny model (2 layers, hidden 32, embeddings 16, vocabulary
400, batch 8 x 32) on the corpus's first 400 lines, 1 warm-up + 2 timed steps, 1 round: the code
paths only, its figures measure nothing (tests/test_benchmark_throughput_quick.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pretrain_throughput import QUICK_OVERRIDES, Row, default_corpus, quick_corpus, stack, step_timer, step_times  # noqa: E402

LAMBDA = 50.0
#: ``--quick``: pretrain_throughput.py's tiny model, with ELECTRA's factorised embeddings.
QUICK_ELECTRA = [*QUICK_OVERRIDES, "model.embedding_dim=16", "model.min_frequency=1"]


def anchor_model(vocabulary: int, config: Any, predictions_weight: float = LAMBDA) -> Any:
    """The plain keras-hub ELECTRA pre-training model (see the module docstring)."""
    import keras
    import keras_hub
    from keras import ops

    common = {"vocab_size": vocabulary, "num_layers": config.num_layers, "embedding_dim": config.embedding_dim,
              "dropout": config.dropout, "max_sequence_length": config.max_sequence_length}
    discriminator = keras_hub.models.ElectraBackbone(num_heads=config.num_heads, hidden_dim=config.hidden_dim,
                                                     intermediate_dim=config.intermediate_dim, **common)
    generator = keras_hub.models.ElectraBackbone(num_heads=1, hidden_dim=config.hidden_dim // 4, intermediate_dim=config.hidden_dim, **common)
    names = ("token_ids", "segment_ids", "padding_mask", "mask_positions", "rtd_mask_ids", "rtd_mask_weights")
    inputs = {n: keras.Input(shape=(None,), dtype="float32" if n == "rtd_mask_weights" else "int32", name=n) for n in names}
    encoder_inputs = {n: inputs[n] for n in names[:3]}
    logits = keras_hub.layers.MaskedLMHead(vocabulary_size=vocabulary, token_embedding=discriminator.token_embedding,
                                           intermediate_activation="gelu", dtype="float32", name="rtd_generator")(
        generator(encoder_inputs)["sequence_output"], mask_positions=inputs["mask_positions"])

    class Replace(keras.layers.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.seeds = keras.random.SeedGenerator(0)

        def call(self, token_ids: Any, logits: Any, positions: Any, ids: Any, weights: Any) -> Any:
            noise = -ops.log(-ops.log(keras.random.uniform(ops.shape(logits), 1e-9, 1.0, seed=self.seeds)))
            samples = ops.cast(ops.argmax(ops.stop_gradient(logits) + noise, axis=-1), "int32")
            hit = ops.one_hot(positions, ops.shape(token_ids)[1]) * ops.expand_dims(weights, -1)  # (batch, predictions, sequence)
            placed = ops.max(hit, axis=1)
            sampled = ops.cast(ops.sum(hit * ops.expand_dims(ops.cast(samples, "float32"), -1), axis=1), "int32")
            replaced = ops.sum(hit * ops.expand_dims(ops.cast(ops.not_equal(samples, ids), "float32"), -1), axis=1)
            return ops.where(placed > 0, sampled, token_ids), replaced

        def compute_output_spec(self, token_ids: Any, *args: Any) -> Any:
            return keras.KerasTensor(token_ids.shape, "int32"), keras.KerasTensor(token_ids.shape, "float32")

    corrupted, replaced = Replace()(inputs["token_ids"], logits, inputs["mask_positions"], inputs["rtd_mask_ids"], inputs["rtd_mask_weights"])
    states = discriminator({**encoder_inputs, "token_ids": corrupted})["sequence_output"]
    logit = keras.layers.Dense(1, dtype="float32")(keras.layers.Dense(config.hidden_dim, activation="gelu")(states))
    paired = keras.layers.Concatenate(dtype="float32", name="rtd")([logit, ops.expand_dims(replaced, -1)])

    def detection(y_true: Any, y_pred: Any) -> Any:
        z, label = y_pred[..., 0], y_pred[..., 1]
        return predictions_weight * (ops.maximum(z, 0.0) - z * label + ops.log1p(ops.exp(-ops.abs(z))))

    model = keras.Model(inputs, {"rtd_generator": logits, "rtd": paired})
    return model, {"rtd_generator": keras.losses.SparseCategoricalCrossentropy(from_logits=True), "rtd": detection}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="timed steps per fit and round (default 8)")
    parser.add_argument("--warmup", type=int, default=2, help="steps dropped at the start of each fit (default 2)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repetitions of every row (default 3)")
    parser.add_argument("--corpus", type=Path, default=default_corpus())
    parser.add_argument("--quick", action="store_true", help="a tiny model on the corpus's first 400 lines, 1 warm-up + 2 steps, 1 round "
                        "(overrides the flags above): the code paths only")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.rounds = 2, 1, 1

    from ptmkit.training.setup import quiet_tensorflow

    quiet_tensorflow()
    import keras
    from rich.console import Console

    from ptmkit.data.pretraining import InstanceSampler, load_token_file, make_step, step_rng
    from ptmkit.plugins import get_registry
    from ptmkit.rundir import RunDir
    from ptmkit.training.pretrain import build_pretraining_model, pretrain, resolve_config
    from ptmkit.training.schedule import adamw

    total = args.warmup + args.steps
    registry = get_registry()
    family = registry.family("electra")
    overrides = QUICK_ELECTRA if args.quick else []
    config = resolve_config(registry, "electra", None, overrides)
    model_config, train = config.model, config.train
    batch, length = train.batch_size, train.sequence_length
    work = Path(tempfile.mkdtemp(prefix="ptmkit-electra-throughput-"))
    print(f"electra throughput: batch {batch} x {length}, {args.warmup}+{args.steps} steps, {args.rounds} rounds, work {work}", flush=True)
    corpus = quick_corpus(args.corpus, work) if args.quick else args.corpus
    started = time.perf_counter()
    metrics = pretrain("electra", corpus, work / "run", overrides=[*overrides, f"train.max_steps={total}"], console=Console(quiet=True))
    print(f"pretrain(): metrics.json tokens_per_second {metrics['tokens_per_second']:.0f} ({time.perf_counter() - started:.0f}s)", flush=True)

    run = RunDir(work / "run")
    specials = family.special_tokens(run.load_tokenizer())
    objectives = {"rtd": (registry.objective("rtd"), config.objectives["rtd"])}
    sampler = InstanceSampler(load_token_file(run.path / "tokens", "train"), family, specials, length, False)
    x, y, w = stack([make_step(sampler, objectives, step_rng(train.seed, step), batch, model_config.vocabulary_size, family.inputs) for step in range(total)])
    sampler.close()

    def fit_arrays(model: Any, inputs: Any) -> Any:
        def run_once(_round: int) -> list[tuple[float, float]]:
            timer = step_timer()
            model.fit(inputs, y, sample_weight=w, batch_size=batch, epochs=1, shuffle=False, verbose=0, callbacks=[timer])
            return step_times(timer.stamps)

        return run_once

    keras.utils.set_random_seed(train.seed)
    plain, losses = anchor_model(model_config.vocabulary_size, model_config)
    plain.compile(optimizer=adamw(train.learning_rate, train.weight_decay, total, train.warmup_ratio), loss=losses, jit_compile=False)
    anchor = "keras-hub ElectraBackbone x2 + heads"
    _, ours, _ = build_pretraining_model(registry, config)
    rows = {anchor: Row(anchor, fit_arrays(plain, x)), "ptmkit electra + rtd": Row("ptmkit electra + rtd", fit_arrays(ours, x))}
    print(f"parameters: anchor {plain.count_params():,}, ptmkit {ours.count_params():,}", flush=True)
    order = list(rows)
    tokens = batch * length
    for index in range(args.rounds):
        for name in order[index % 2 :] + order[: index % 2]:
            kept = rows[name].add(rows[name].run(index), args.warmup, args.steps)
            print(f"  round {index + 1} {name:<40} {tokens / statistics.median(t for t, _ in kept):>7,.0f} tokens/s "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
    base = statistics.median(rows[anchor].times())
    base_cpu = statistics.median(rows[anchor].cpu_times())
    print("| configuration | tokens/s | vs anchor | CPU time ratio | tokens/s per round |\n|---|---|---|---|---|")
    for name, row in rows.items():
        median = statistics.median(row.times())
        per_round = ", ".join(f"{tokens / m:,.0f}" for m in row.round_medians())
        print(f"| {name} | {tokens / median:,.0f} | {base / median:.3f}x | {base_cpu / statistics.median(row.cpu_times()):.3f}x | {per_round} |")
    print(f"| ptmkit pretrain() end to end (metrics.json, {total} steps incl. tracing) | {metrics['tokens_per_second']:,.0f} | | | |")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
