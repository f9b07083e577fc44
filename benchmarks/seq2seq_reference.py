"""The Transformer's reference run (issue 17, item 4): ptmkit's translation training against Hugging
Face transformers' ``Seq2SeqTrainer`` on the same architecture, data, tokenizer, steps, batch and
learning-rate schedule; test BLEU of each, over seeds.

- ``ptmkit``: ``ptmkit train transformer --parallel TRAIN --dev DEV --set model.max_steps=N
  --set model.seed=S`` (the family's defaults otherwise: 3 + 3 post-LN layers, hidden 256, 4 heads,
  feed-forward 1,024 ReLU, dropout 0.1, label smoothing 0.1, batch 64 pairs, Adam (0.9, 0.98, 1e-9)
  on the paper's inverse-square-root schedule with ``warmup_steps``), then greedy translation of
  ``--test-sentences`` test sources (``ptmkit evaluate``'s BLEU).
- ``transformers``: a randomly initialised ``MarianMTModel`` of the same configuration (post-LN,
  ReLU, sinusoidal positions, ``scale_embedding``, tied embeddings, dropout 0.1 on sub-layer
  outputs and attention weights), the same token ids (the ptmkit run's ``tokenizer.json``: ``source
  </s>`` in, ``<s> target`` -> ``target </s>``), ``Seq2SeqTrainer`` with ``label_smoothing_factor``
  0.1, ``torch.optim.Adam`` (the same betas and epsilon) and a ``LambdaLR`` of the same schedule,
  ``N`` steps of 64 pairs, then greedy ``generate`` (``max_length`` 128) on the same test sources.

Goal: ptmkit's mean test BLEU >= the reference's mean minus 1. Each finished run's row is kept in
``--rows-dir`` (``benchmarks/results/seq2seq-reference-rows/SIDE-SEED.json``, committed: the four runs
are hours, and may be spread over several sessions or machines; a row of other settings is refused);
an interrupted ptmkit run resumes from its checkpoint in ``--work``; the table goes to ``--out``.

    python benchmarks/seq2seq_reference.py --out benchmarks/results/seq2seq_reference.md   # hours on 2 cores
    python benchmarks/seq2seq_reference.py --quick                                        # tiny models, minutes
    python benchmarks/seq2seq_reference.py --ptmkit-only --set init_std=0 --set clip_norm=0        # a variant's ptmkit rows
    python benchmarks/seq2seq_reference.py --kept-variant init_std=0,clip_norm=0 --out PAGE          # its kept rows on the page too
    KERAS_BACKEND=torch python benchmarks/seq2seq_reference.py --ptmkit-only --seeds 1               # ptmkit rows on Keras' torch backend

On a CPU without TensorFlow's fast paths (the 2-core AVX2 machines), Keras' torch backend trains the
family's default model in about 4 s a step against TensorFlow's 5.5 (the kept rows' seconds); a row records the backend it
trained on, and rows of other backends than TensorFlow are translated by the run's ONNX export.

``--set KEY=VALUE`` trains the ptmkit rows with other ``[model]`` keys: their runs and rows are
named after them (``ptmkit-init_std_0-clip_norm_0-1``: fairseq's initialisation, no clipping),
and ``--kept-variant`` puts a variant's kept rows on the defaults' page, each variant with its own
mean; the transformers rows are the same for all.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lineage  # noqa: E402  (the subprocess runner)
from kept_rows import KeptRows, git_commit, machine, start  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PARALLEL = REPO / "data" / "parallel"
TINY = {"vocabulary_size": 2000, "encoder_layers": 1, "decoder_layers": 1, "hidden_dim": 64, "num_heads": 4, "intermediate_dim": 128,
        "batch_size": 32, "warmup_steps": 50}


def variant_name(sets: list[str]) -> str:
    """The run and row name's middle part for ``--set`` overrides (``""``: the family's defaults),
    e.g. ``init_std=0.02,clip_norm=1.0`` -> ``init_std_0.02-clip_norm_1.0``."""
    return "-".join(item.replace("=", "_") for item in sets)


def run_name(sets: list[str], seed: int) -> str:
    """The ptmkit run's and row's name: ``ptmkit-SEED``, or ``ptmkit-VARIANT-SEED`` with ``--set``'s ``sets``."""
    variant = variant_name(sets)
    return f"ptmkit-{variant}-{seed}" if variant else f"ptmkit-{seed}"


def ptmkit_row(args: argparse.Namespace, seed: int, rows: KeptRows) -> dict[str, Any]:
    """Train (or reuse) the ptmkit run of ``seed`` (with ``--set``'s model keys); its test BLEU and seconds."""
    run = args.work / run_name(args.set, seed)
    recipe = {"model_sets": args.set} if args.set else None
    kept = rows.get(run.name, recipe)
    if kept is not None:
        return kept
    began = start()
    chosen = dict(item.split("=", 1) for item in args.set)
    overrides = {**(TINY if args.quick else {}), **chosen, "max_steps": args.steps, "seed": seed, "dev_sentences": 0, "checkpoint_every": checkpoint_every(run, args)}
    sets = [a for key, value in overrides.items() for a in ("--set", f"model.{key}={value}")]
    log = args.work / "ptmkit.log"
    if not (run / "manifest.json").exists():
        lineage.ptmkit("train", "transformer", "--parallel", str(PARALLEL / "en-de-train-10k.tsv"), "--out", str(run), *sets,
                       *(["--resume"] if (run / "checkpoints").is_dir() else []), log=log)
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    seconds, resumed = metrics["train_seconds_this_session"], metrics.get("resumed_from_step", 0)  # a resumed run's seconds: its last session's
    from ptmkit.api import read_parallel
    from ptmkit_transformer.translate import score_translations

    test = read_parallel(PARALLEL / "en-de-test.tsv")
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    hypotheses, translated_with = run_translations(run, test.sources[: args.test_sentences], log)
    row = {"side": "ptmkit", "seed": seed, "seconds": round(seconds, 1), "resumed_from_step": resumed, "device": _device(backend), "keras_backend": backend, "translated_with": translated_with,
           "tokenizer_sha256": file_sha256(run / "tokenizer.json"), **(recipe or {}), **score_translations(hypotheses, test.targets[: args.test_sentences])}
    return rows.put(run.name, row, began)


def kept_variant_rows(args: argparse.Namespace, rows: KeptRows) -> list[dict[str, Any]]:
    """The kept rows of each ``--kept-variant`` (comma-separated ``KEY=VALUE``), for ``--seeds``;
    a seed without a kept row is left out.

    Raises:
        SystemExit: a variant has no kept row at all (named with the file it looked for).
    """
    found = []
    for variant in args.kept_variant:
        sets = [item.strip() for item in variant.split(",") if item.strip()]
        names = [run_name(sets, seed) for seed in args.seeds]
        mine = [row for row in (rows.get(name, {"model_sets": sets}) for name in names) if row is not None]
        if not mine:
            raise SystemExit(f"--kept-variant {variant}: no kept row ({rows.path(names[0])} and the other seeds' are missing); train it with --ptmkit-only {' '.join('--set ' + item for item in sets)}")
        found += mine
    return found


def checkpoint_every(run: Path, args: argparse.Namespace) -> int:
    """Steps between the ptmkit run's checkpoints: 100 on a full run (one cut off, e.g. at a
    session's end, loses minutes, not the family default's 500 steps; what is trained does not
    depend on it), the family's 500 for --quick; a run begun with another interval keeps its own
    (``--resume`` refuses flags that differ from the stored config)."""
    import tomllib

    if (run / "config.toml").exists():
        return int(tomllib.loads((run / "config.toml").read_text(encoding="utf-8"))["model"]["checkpoint_every"])
    return 500 if args.quick else 100


def run_translations(run: Path, sources: list[str], log: Path) -> tuple[list[str], str]:
    """Greedy translations of ``sources`` by a transformer run, and how they were made: the Keras
    translator on TensorFlow; on another Keras backend (``KERAS_BACKEND=jax``, a GPU machine without
    TensorFlow) the run's ONNX export (written once into ``RUN/export``), whose greedy output equals
    the Keras translator's (tested) and runs without a per-shape compilation."""
    if os.environ.get("KERAS_BACKEND", "tensorflow") == "tensorflow":
        from ptmkit_transformer.translate import Translator

        return Translator(run).translate(sources), "the Keras translator"
    from ptmkit_export import Translator as ExportTranslator

    if not (run / "export" / "manifest.json").exists():
        lineage.ptmkit("export", str(run), "--out", str(run / "export"), log=log)
    return ExportTranslator(run / "export").translate(sources), "its ONNX export (ONNX Runtime, CPU)"


def _device(backend: str) -> str:
    """Where the ptmkit run trained: the JAX GPU's name, else "cpu" (TensorFlow here has none)."""
    if backend == "jax":
        import jax

        gpus = [d for d in jax.devices() if d.platform == "gpu"]
        return gpus[0].device_kind if gpus else "cpu"
    return "cpu"


def marian_model(config: Any, tokenizer: Any) -> Any:
    """A randomly initialised ``MarianMTModel`` of ptmkit's ``config`` (module docstring)."""
    from transformers import MarianConfig, MarianMTModel

    pad, eos, bos = (tokenizer.token_to_id(t) for t in ("<pad>", "</s>", "<s>"))
    hf = MarianConfig(
        vocab_size=config.vocabulary_size, d_model=config.hidden_dim, encoder_layers=config.encoder_layers, decoder_layers=config.decoder_layers,
        encoder_attention_heads=config.num_heads, decoder_attention_heads=config.num_heads, encoder_ffn_dim=config.intermediate_dim,
        decoder_ffn_dim=config.intermediate_dim, activation_function="relu", dropout=config.dropout, attention_dropout=config.dropout,
        activation_dropout=0.0, max_position_embeddings=config.max_sequence_length, scale_embedding=True, pad_token_id=pad, eos_token_id=eos,
        bos_token_id=bos, decoder_start_token_id=bos, forced_eos_token_id=None, share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
        decoder_vocab_size=config.vocabulary_size,
    )
    return MarianMTModel(hf)


def shared_tokenizer(args: argparse.Namespace, config: Any) -> Path:
    """The ptmkit runs' ``tokenizer.json``: the first seed's run's, or (its run gone, its row kept)
    one trained again by the family's own ``train_shared_bpe`` on the same pairs."""
    run = args.work / f"ptmkit-{args.seeds[0]}" / "tokenizer.json"
    if run.exists():
        return run
    path = args.work / "tokenizer.json"
    if not path.exists():
        from ptmkit.api import read_parallel
        from ptmkit_transformer.tokenizer import train_shared_bpe

        pairs = read_parallel(PARALLEL / "en-de-train-10k.tsv")
        train_shared_bpe([*pairs.sources, *pairs.targets], config.vocabulary_size, config.min_frequency).save(str(path))
    return path


def reference_row(args: argparse.Namespace, seed: int, rows: KeptRows) -> dict[str, Any]:
    """Train (or reuse) the transformers run of ``seed`` on the ptmkit runs' token ids; its test
    BLEU. It trains in a fresh child process: torch loaded beside TensorFlow (the ptmkit rows'
    translation) crashed this one."""
    kept = rows.get(f"transformers-{seed}")
    if kept is not None:
        return kept
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        try:
            return pool.submit(_train_reference, args, seed, rows).result()
        except BrokenProcessPool:
            raise SystemExit(f"the transformers run of seed {seed} died (killed, or crashed) before it finished; nothing was kept for it") from None


def _train_reference(args: argparse.Namespace, seed: int, rows: KeptRows) -> dict[str, Any]:
    """:func:`reference_row`'s training, in its child process."""
    import time

    began = start()

    import torch
    from tokenizers import Tokenizer
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, set_seed

    from ptmkit.api import read_parallel
    from ptmkit_transformer.config import TransformerConfig
    from ptmkit_transformer.translate import score_translations

    torch.set_num_threads(os.cpu_count() or 1)
    device = "cuda" if torch.cuda.is_available() else "cpu"  # BLEU after N steps does not depend on where they ran
    config = TransformerConfig(**{**(TINY if args.quick else {}), "max_steps": args.steps, "seed": seed})
    tokenizer_path = shared_tokenizer(args, config)
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    pad, eos, bos = (tokenizer.token_to_id(t) for t in ("<pad>", "</s>", "<s>"))
    limit = config.max_sequence_length - 1
    pairs = read_parallel(PARALLEL / "en-de-train-10k.tsv")
    encode = lambda texts: [e.ids[:limit] + [eos] for e in tokenizer.encode_batch(texts, add_special_tokens=False)]  # noqa: E731
    examples = [{"input_ids": s, "labels": t} for s, t in zip(encode(pairs.sources), encode(pairs.targets), strict=True)]

    def collate(batch: list[dict[str, list[int]]]) -> dict[str, Any]:
        width = max(len(b["input_ids"]) for b in batch)
        target = max(len(b["labels"]) for b in batch)
        ids = torch.tensor([b["input_ids"] + [pad] * (width - len(b["input_ids"])) for b in batch])
        labels = torch.tensor([b["labels"] + [-100] * (target - len(b["labels"])) for b in batch])
        decoder = torch.tensor([[bos] + b["labels"][:-1] + [pad] * (target - len(b["labels"])) for b in batch])
        return {"input_ids": ids, "attention_mask": (ids != pad).long(), "labels": labels, "decoder_input_ids": decoder}

    set_seed(seed)
    model = marian_model(config, tokenizer)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(config.adam_beta_1, config.adam_beta_2), eps=config.adam_epsilon)
    rate = lambda step: config.hidden_dim**-0.5 * min((step + 1) ** -0.5, (step + 1) * config.warmup_steps**-1.5)  # noqa: E731
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    training = Seq2SeqTrainingArguments(
        output_dir=str(args.work / f"transformers-{seed}"), max_steps=args.steps, per_device_train_batch_size=config.batch_size,
        label_smoothing_factor=config.label_smoothing, seed=seed, logging_steps=max(1, args.steps // 20), save_strategy="no", report_to=[],
        use_cpu=device == "cpu", dataloader_num_workers=0, remove_unused_columns=False,
    )
    started = time.perf_counter()
    Seq2SeqTrainer(model=model, args=training, train_dataset=examples, data_collator=collate, optimizers=(optimizer, scheduler)).train()
    seconds = time.perf_counter() - started
    test = read_parallel(PARALLEL / "en-de-test.tsv")
    sources = encode(test.sources[: args.test_sentences])
    model.eval()
    hypotheses = []
    with torch.no_grad():
        for first in range(0, len(sources), 32):
            chunk = sources[first : first + 32]
            ids = torch.tensor([s + [pad] * (max(map(len, chunk)) - len(s)) for s in chunk]).to(model.device)
            out = model.generate(input_ids=ids, attention_mask=(ids != pad).long(), num_beams=1, do_sample=False, max_length=config.max_sequence_length)
            hypotheses += [tokenizer.decode([t for t in row.tolist() if t not in (pad, bos, eos)]) for row in out]
    row = {"side": "transformers", "seed": seed, "seconds": round(seconds, 1), "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
           "tokenizer_sha256": file_sha256(tokenizer_path), **score_translations(hypotheses, test.targets[: args.test_sentences])}
    return rows.put(f"transformers-{seed}", row, began)


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes (both sides' token ids come from one tokenizer.json: the rows record which)."""
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def train_seconds(row: dict[str, Any]) -> str:
    """A row's training seconds; a resumed run's are its last session's, which the cell says."""
    resumed = row.get("resumed_from_step", 0)
    return f"{row['seconds']} (steps {resumed}-{row['settings']['steps']})" if resumed else str(row["seconds"])


def label(row: dict[str, Any]) -> str:
    """A row's side, with its ``--set`` overrides: ``ptmkit``, ``ptmkit (init_std=0)``, ``transformers``."""
    return f"{row['side']} ({', '.join(row['model_sets'])})" if row.get("model_sets") else row["side"]


def page(rows: list[dict[str, Any]], argv: list[str], args: argparse.Namespace) -> str:
    """The Markdown results page."""
    labels = list(dict.fromkeys(label(r) for r in rows))
    means = {name: statistics.mean(r["bleu"] for r in rows if label(r) == name) for name in labels}
    ours = [name for name in labels if name != "transformers"]
    ran = lambda r: ", ".join(r.get("ran", {}).get(k, "?") for k in ("date", "commit", "load"))  # noqa: E731
    lines = [
        "# The Transformer against transformers' Seq2SeqTrainer (same model, data, tokens, steps, schedule)\n",
        f"{datetime.date.today().isoformat()}, commit {git_commit()}, {machine()}, load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
        f"`python benchmarks/seq2seq_reference.py {' '.join(argv)}`{' (tiny models: a smoke test)' if args.quick else ''}. "
        f"{args.steps} steps, greedy decoding of the first {args.test_sentences} test sentences, sacrebleu BLEU. Each run's row is kept in "
        "`--rows-dir` when it finishes (the page may gather rows of several invocations: see each row's date, commit and load).\n",
        "| side | seed | test BLEU | chrF | train s | device | ran (date, commit, 1-minute load) |", "|---|---|---|---|---|---|---|",
        *(f"| {label(r)} | {r['seed']} | {r['bleu']:.2f} | {r['chrf']:.2f} | {train_seconds(r)} | {r.get('device', 'cpu')}{', Keras on ' + r['keras_backend'] if r.get('keras_backend') else ''} | {ran(r)} |" for r in rows),
        "\nMean BLEU: " + ", ".join(f"{name} {means[name]:.2f}" for name in labels) + "; goal ptmkit >= transformers - 1: "
        + "; ".join(f"{name} {'met' if means[name] >= means['transformers'] - 1 else 'not met'}" for name in ours) + f". Signature: {rows[0]['bleu_signature']}. "
        + ("Every row read the same tokenizer.json (one SHA-256)." if len({r.get('tokenizer_sha256') for r in rows}) == 1 else
           "WARNING: the rows read different tokenizer.json files (SHA-256 differ); their token ids are not the same."),
    ]
    notes = [f"- {label(r)}, seed {r['seed']}: {r['note']}" for r in rows if r.get("note")]  # what a row's file says of how it was made
    lines += ["\nNotes on rows:\n", *notes] if notes else []
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, help="the runs (default runs/bench-seq2seq-reference[-quick])")
    parser.add_argument("--rows-dir", type=Path, help="where each finished run's row is kept (default benchmarks/results/seq2seq-reference-rows; --quick: WORK/rows)")
    parser.add_argument("--steps", type=int, help="training steps of every run (default 2,000, the family's max_steps; --quick 100)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--test-sentences", type=int, help="test sentences translated (default 1,000; --quick 50)")
    parser.add_argument("--quick", action="store_true", help="tiny models: a smoke test")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a [model] key of the ptmkit runs (repeatable), e.g. init_std=0: their rows and runs are named after it; the transformers rows are shared")
    parser.add_argument("--kept-variant", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE...]",
                        help="a --set variant whose kept rows (of --seeds) go on the page too, e.g. init_std=0,clip_norm=0 (repeatable; nothing is trained for it)")
    parser.add_argument("--out", type=Path, help="write the markdown page here")
    parser.add_argument("--ptmkit-only", action="store_true", help="train the ptmkit rows only, no page (KERAS_BACKEND=jax or torch: e.g. on a GPU machine without TensorFlow, or torch on a slow CPU; their test sentences are translated by the run's ONNX export)")
    parser.add_argument("--reference-only", action="store_true", help="train the transformers rows only (e.g. on a GPU machine; BLEU after N steps does not depend on where they ran), no page")
    args = parser.parse_args(argv)
    malformed = [item for item in [*args.set, *(i for v in args.kept_variant for i in v.split(","))] if "=" not in item or item.strip().startswith("=")]
    if malformed:
        parser.error(f"--set and --kept-variant take KEY=VALUE, got {malformed[0]!r}")
    if args.ptmkit_only and args.reference_only:
        parser.error("--ptmkit-only and --reference-only leave nothing to run together; give one of them")
    args.steps = args.steps or (100 if args.quick else 2000)
    args.test_sentences = args.test_sentences or (50 if args.quick else 1000)
    args.work = args.work or REPO / "runs" / ("bench-seq2seq-reference" + ("-quick" if args.quick else ""))
    args.rows_dir = args.rows_dir or (args.work / "rows" if args.quick else REPO / "benchmarks" / "results" / "seq2seq-reference-rows")
    kept = KeptRows(args.rows_dir, {"steps": args.steps, "test_sentences": args.test_sentences, "quick": args.quick})
    kept.claim_work(args.work)
    rows = [] if args.reference_only else [ptmkit_row(args, seed, kept) for seed in args.seeds]
    rows += [] if args.reference_only or args.ptmkit_only else kept_variant_rows(args, kept)
    rows += [] if args.ptmkit_only else [reference_row(args, seed, kept) for seed in args.seeds]
    if args.reference_only or args.ptmkit_only:
        print("\n".join(f"{r['side']} seed {r['seed']}: BLEU {r['bleu']:.2f}, chrF {r['chrf']:.2f}, {r['seconds']} s on {r['device']}" for r in rows))
        return 0
    lineage.print_and_write(page(rows, argv, args), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
