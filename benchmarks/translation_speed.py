"""Translation speed of the Transformer's export (issue 17): sentences per second of the lean
runtime's ONNX Runtime translator (fp32, and the int8 variant) against the Keras translator, greedy
and with 4 beams, on the same test sentences, one thread each; with how many outputs equal the
Keras ones and the BLEU of each.

The model: ``ptmkit train transformer`` on ``data/parallel/en-de-train-10k.tsv`` with the family's
default architecture (3 + 3 post-LN layers, hidden 256, 8,000 BPE) for ``--steps`` steps, cached in
``WORK/run``; exported with ``--int8 --dev`` (the first 200 dev pairs: the int8 gate's BLEU). Both
translators run the same search code (:class:`ptmkit_export.translation.Seq2SeqSearch`): greedy
decodes up to 32 sentences as one batch, beam search one sentence at a time with its beams as the
batch. Keras recomputes each prefix (no cache; one traced graph per shape); the export's decoder
feeds one new position a step through its key/value cache. Timing: ``--rounds`` rounds, the
translators in alternation, the median; TensorFlow and ONNX Runtime get ``--threads`` intra-op
threads (TensorFlow one inter-op thread).

    python benchmarks/translation_speed.py --out benchmarks/results/translation_speed.md
    python benchmarks/translation_speed.py --quick        # tiny model, a smoke test

``--quick``: a tiny model (1 + 1 layers, hidden 64, 500 BPE, 32 positions: outputs of at most 31
tokens) trained for 12 steps on the first 300 training pairs, exported with int8 gated on 20 dev
pairs, 4 test sentences timed in 1 round, under ``--work`` (default
``/tmp/ptmkit-translation-speed-quick``): a smoke test whose speeds and BLEU measure nothing.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lineage  # noqa: E402  (the subprocess runner)

REPO = Path(__file__).resolve().parents[1]
PARALLEL = REPO / "data" / "parallel"
TINY = ["model.vocabulary_size=500", "model.encoder_layers=1", "model.decoder_layers=1", "model.hidden_dim=64", "model.num_heads=4",
        "model.intermediate_dim=128", "model.max_sequence_length=32", "model.batch_size=16", "model.warmup_steps=4", "model.dev_sentences=4"]
#: ``--quick``: training pairs (the first of ``en-de-train-10k.tsv``) and dev pairs.
QUICK_PAIRS = (300, 20)


def prepare(args: argparse.Namespace) -> Path:
    """Train (or reuse) the run and export it with int8; the export directory."""
    run, export, log = args.work / "run", args.work / "export", args.work / "train.log"
    dev, train = args.work / "dev-200.tsv", PARALLEL / "en-de-train-10k.tsv"
    lines = (PARALLEL / "en-de-dev.tsv").read_text(encoding="utf-8").splitlines()
    dev.write_text("\n".join(lines[: 1 + (QUICK_PAIRS[1] if args.quick else 200)]) + "\n", encoding="utf-8")
    if args.quick:  # the header and the first pairs
        train = args.work / f"train-{QUICK_PAIRS[0]}.tsv"
        train.write_text("\n".join(PARALLEL.joinpath("en-de-train-10k.tsv").read_text(encoding="utf-8").splitlines()[: 1 + QUICK_PAIRS[0]]) + "\n", encoding="utf-8")
    if not (run / "manifest.json").exists():
        sets = [a for override in [*(TINY if args.quick else []), f"model.max_steps={args.steps}"] for a in ("--set", override)]
        resume = ["--resume"] if (run / "checkpoints").is_dir() else []
        print(f"training {run} ({args.steps} steps)", flush=True)
        lineage.ptmkit("train", "transformer", "--parallel", str(train), "--dev", str(dev), "--out", str(run), *sets, *resume, log=log)
    if not (export / "manifest.json").exists():
        lineage.ptmkit("export", str(run), "--out", str(export), "--int8", "--dev", str(dev), log=log)
    return export


def timed(translators: dict[str, Any], sources: list[str], beams: int, rounds: int) -> tuple[dict[str, float], dict[str, list[str]]]:
    """Sentences per second of each translator (median over rounds, in alternation) and its outputs."""
    seconds: dict[str, list[float]] = {name: [] for name in translators}
    outputs: dict[str, list[str]] = {}
    for translator in translators.values():  # warm-up: traced graphs, session arenas
        translator.translate(sources[:8], num_beams=beams)
    for _ in range(rounds):
        for name, translator in translators.items():
            start = time.perf_counter()
            outputs[name] = translator.translate(sources, num_beams=beams)
            seconds[name].append(time.perf_counter() - start)
    return {name: len(sources) / statistics.median(values) for name, values in seconds.items()}, outputs


def measure(export: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from ptmkit.api import read_parallel
    from ptmkit_export import Translator as ExportTranslator
    from ptmkit_transformer.translate import Translator, score_translations

    pairs = read_parallel(PARALLEL / "en-de-test.tsv")
    sources, references = pairs.sources[: args.sentences], pairs.targets[: args.sentences]
    translators = {"keras": Translator(export.parent / "run"), "fp32": ExportTranslator(export, "fp32", threads=args.threads),
                   "int8": ExportTranslator(export, "int8", threads=args.threads)}
    rows = []
    for beams in (1, 4):
        speed, outputs = timed(translators, sources, beams, args.rounds)
        bleu = {name: score_translations(texts, references)["bleu"] for name, texts in outputs.items()}
        same = {name: sum(a == b for a, b in zip(texts, outputs["keras"], strict=True)) for name, texts in outputs.items()}
        rows.append({"beams": beams, "speed": speed, "bleu": bleu, "same": same, "sentences": len(sources)})
        print(f"beam {beams}: " + ", ".join(f"{n} {s:.1f} sent/s" for n, s in speed.items()), flush=True)
    return rows


def page(rows: list[dict[str, Any]], export: Path, argv: list[str], args: argparse.Namespace) -> str:
    import json

    manifest = json.loads((export / "manifest.json").read_text(encoding="utf-8"))
    gate = manifest["gate"]["int8"]
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    settings, pairs = ("with --quick's tiny settings", f" (its first {QUICK_PAIRS[0]} pairs)") if args.quick else ("defaults", "")
    lines = [
        "# Translation speed: the export on ONNX Runtime against the Keras translator\n",
        f"{datetime.date.today().isoformat()}, commit {commit}, load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
        f"`python benchmarks/translation_speed.py {' '.join(argv)}`{' (tiny model: a smoke test)' if args.quick else ''}. "
        f"{rows[0]['sentences']} sentences of `en-de-test.tsv`, {args.threads} thread(s), median of {args.rounds} rounds in alternation. "
        f"Model: `ptmkit train transformer` {settings}, {args.steps} steps on `en-de-train-10k.tsv`{pairs}.\n",
        "| search | Keras sent/s | ONNX fp32 sent/s | ONNX int8 sent/s | fp32 / Keras | int8 / Keras | outputs equal to Keras (fp32, int8) | BLEU Keras / fp32 / int8 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s, b, n = r["speed"], r["bleu"], r["sentences"]
        lines.append(
            f"| {'greedy' if r['beams'] == 1 else 'beam ' + str(r['beams'])} | {s['keras']:.1f} | {s['fp32']:.1f} | {s['int8']:.1f} "
            f"| {s['fp32'] / s['keras']:.2f}x | {s['int8'] / s['keras']:.2f}x | {r['same']['fp32']}/{n}, {r['same']['int8']}/{n} "
            f"| {b['keras']:.2f} / {b['fp32']:.2f} / {b['int8']:.2f} |"
        )
    lines.append(
        f"\nThe export's int8 gate (first {gate['dev_sentences']} dev pairs, greedy): BLEU {gate['dev_bleu']:.2f} against fp32's "
        f"{gate['fp32_dev_bleu']:.2f} ({'ok' if gate['ok'] else 'not ok'}), {gate['latency_ms_per_sentence_b1']:.1f} against "
        f"{gate['fp32_paired_latency_ms_per_sentence_b1']:.1f} ms a sentence (one sentence a call).\n"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, help="run, export and logs (default /tmp/ptmkit-translation-speed[-quick])")
    parser.add_argument("--steps", type=int, help="training steps (default 1,000; --quick 12)")
    parser.add_argument("--sentences", type=int, help="test sentences timed (default 100; --quick 4)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, help="default 3 (--quick 1)")
    parser.add_argument("--quick", action="store_true", help="a tiny model: a smoke test")
    parser.add_argument("--out", type=Path, help="write the markdown page here")
    args = parser.parse_args(argv)
    args.steps = args.steps or (12 if args.quick else 1000)
    args.sentences = args.sentences or (4 if args.quick else 100)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.work = args.work or Path("/tmp/ptmkit-translation-speed" + ("-quick" if args.quick else ""))
    args.work.mkdir(parents=True, exist_ok=True)
    export = prepare(args)
    lineage.print_and_write(page(measure(export, args), export, argv, args), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
