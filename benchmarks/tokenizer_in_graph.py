"""The single-file model (``--with-tokenizer``) against the two-step path on the real MiniLM export.

1. **Token ids**: the tokenizer graph (exactly the one merged into ``model.with_tokenizer.onnx``)
   against Hugging Face tokenizers, set up as :class:`ptmkit_export.Predictor` sets it up, on every
   WordNet gloss of ``data/classify/wordnet-supersense-dev.tsv``, the polarity dev reviews, the
   Wikipedia paragraphs of ``data/corpus/enwiki-106.txt`` (most longer than 128 tokens, so
   truncation matters) and ptmkit_export's hard cases; one text per call and 16 per call. The count
   of texts whose ids, segment ids or mask differ must be 0.
2. **Latency at batch 1**, side by side: ``Predictor.embed([text])`` with the ``fp32`` variant
   (tokenizers + one ONNX Runtime call) and with ``fp32+tokenizer`` (one call, tokenization in the
   graph), likewise int8; plus tokenization alone (tokenizers vs the tokenizer graph). Calls
   alternate text by text so that a shared machine's swings hit both alike; medians; one thread.
   Two text sets: glosses (median 12 words) and Wikipedia paragraphs cut to 128 tokens.

The export is built once when ``--export`` is not given (``ptmkit import-hf`` then ``ptmkit export
--int8 --with-tokenizer``, a few minutes).

Run: ``python benchmarks/tokenizer_in_graph.py [--export DIR] [--repeats 3] [--json out.json]``.
``--quick``: the same steps on minilm_inference.py's tiny random BERT (2 layers, hidden 32, MiniLM's
tokenizer), 40 texts of each set, 5 timed texts, 1 pass: the code paths only, its timings measure
nothing (tests/test_benchmark_quick_modes.py); the token-id check is the real one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data"


def build_export(work: Path, quick: bool = False) -> Path:
    """Import all-MiniLM-L6-v2 (``quick``: minilm_inference.py's tiny random BERT) and export it
    (fp32, int8, single-file twins) under ``work``; reused when present."""
    run = work / ("minilm-tok-quick" if quick else "minilm-tok")
    export = run / "export"
    if (export / "manifest.json").exists():
        return export
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from minilm_inference import checkpoint  # torch, in this process that never imports TensorFlow

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "plugins"), str(REPO / "export"), os.environ.get("PYTHONPATH", "")]))
    dev = work / "dev.txt"
    dev.write_text("\n".join(glosses()[:300]) + "\n", encoding="utf-8")
    for args in (
        ["import-hf", str(checkpoint(work, quick)), "--out", str(run)],
        ["export", str(run), "--int8", "--dev", str(dev), "--with-tokenizer"],
    ):
        subprocess.run([sys.executable, "-m", "ptmkit.cli", *args], check=True, env=env, cwd=REPO)
    return export


def glosses() -> list[str]:
    lines = (DATA / "classify" / "wordnet-supersense-dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return [line.split("\t", 1)[1] for line in lines if "\t" in line]


def corpora(limit: int | None = None) -> dict[str, list[str]]:
    """The text sets of the token-id check, each cut to its first ``limit`` texts when given."""
    from ptmkit_export.tokenizer_graph import HARD_CASES

    polarity = (DATA / "classify" / "polarity-200-dev.txt").read_text(encoding="utf-8", errors="replace").splitlines()
    sets = {
        "wordnet glosses": glosses(),
        "polarity reviews": [line.split(" ", 1)[-1] for line in polarity if line.strip()],
        "wikipedia paragraphs": [line for line in (DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").splitlines() if line.strip()],
        "hard cases": list(HARD_CASES),
    }
    return {name: texts[:limit] for name, texts in sets.items()}


def alternate(calls: dict[str, Any], texts: list[str], repeats: int) -> dict[str, float]:
    """Median ms per call of each function on one text at a time, the functions alternating."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():  # warm-up
        for text in texts[:5]:
            call(text)
    for _ in range(repeats):
        for text in texts:
            for name, call in calls.items():
                start = time.perf_counter()
                call(text)
                times[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", type=Path, help="a MiniLM export directory with fp32+tokenizer (default: build one under --work)")
    parser.add_argument("--work", type=Path, default=REPO / "benchmarks" / ".work")
    parser.add_argument("--repeats", type=int, default=3, help="passes over the timed texts")
    parser.add_argument("--texts", type=int, default=100, help="timed texts per set")
    parser.add_argument("--json", type=Path, help="write the numbers here")
    parser.add_argument("--quick", action="store_true", help="a tiny random BERT, 40 texts per set, 5 timed texts, 1 pass: the code paths only")
    args = parser.parse_args(argv)
    limit = 40 if args.quick else None
    if args.quick:
        args.repeats, args.texts = 1, 5
    args.work.mkdir(parents=True, exist_ok=True)
    export = args.export or build_export(args.work, args.quick)

    sys.path[:0] = [str(REPO / "export")]
    import numpy as np
    from tokenizers import Tokenizer

    from ptmkit_export import Predictor
    from ptmkit_export.tokenizer_graph import (
        add_tokenizer_variants,
        build_tokenizer_model,
        count_token_mismatches,
        extensions_session,
        text_feed,
    )

    manifest = json.loads((export / "manifest.json").read_text(encoding="utf-8"))
    if "fp32+tokenizer" not in manifest["variants"]:
        add_tokenizer_variants(export)
        manifest = json.loads((export / "manifest.json").read_text(encoding="utf-8"))
    length, pad, inputs = int(manifest["max_sequence_length"]), int(manifest["pad_token_id"]), manifest["inputs"]
    tokenizer_json = export / manifest["tokenizer"]
    results: dict[str, Any] = {"export": str(export), "token_ids": {}, "latency_ms_batch1": {}}

    graph = build_tokenizer_model(tokenizer_json, length, pad, inputs)
    total_texts = total_bad = 0
    print("token ids, tokenizer graph vs tokenizers (one text per call, then 16):")
    for name, texts in corpora(limit).items():
        bad, first = count_token_mismatches(graph, tokenizer_json, texts, length, pad, inputs)
        total_texts, total_bad = total_texts + len(texts), total_bad + bad
        results["token_ids"][name] = {"texts": len(texts), "mismatches": bad, "first": first}
        print(f"  {name:22s} {len(texts):5d} texts, {bad} differ" + (f" (e.g. {first})" if first else ""))
    results["token_ids"]["total"] = {"texts": total_texts, "mismatches": total_bad}
    print(f"  {'total':22s} {total_texts:5d} texts, {total_bad} differ")

    reference = Tokenizer.from_file(str(tokenizer_json))
    reference.enable_truncation(length)
    tokenizer_session = extensions_session(graph, threads=1)
    names = [o.name for o in tokenizer_session.get_outputs()]
    sets = {
        "glosses (median 12 words)": glosses()[: args.texts],
        f"paragraphs cut to {length} tokens": [t for t in corpora(limit)["wikipedia paragraphs"] if len(reference.encode(t).ids) >= length][: args.texts],
    }
    variants = [v for v in ("fp32", "int8") if f"{v}+tokenizer" in manifest["variants"]]
    predictors = {v: Predictor(export, variant=v, threads=1) for v in variants + [f"{v}+tokenizer" for v in variants]}
    print(f"\nlatency at batch 1, median ms (1 thread, {args.repeats} x {args.texts} texts, calls alternating; machine shared):")
    for set_name, texts in sets.items():
        calls: dict[str, Any] = {
            "tokenize: tokenizers": lambda t: reference.encode_batch([t]),
            "tokenize: graph": lambda t: tokenizer_session.run(names, {"text": text_feed([t])}),
        }
        for name, predictor in predictors.items():
            calls[f"embed: {name}"] = lambda t, p=predictor: p.embed([t])
        medians = alternate(calls, texts, args.repeats)
        results["latency_ms_batch1"][set_name] = medians
        print(f"  {set_name}:")
        for name, value in medians.items():
            print(f"    {name:28s} {value:8.3f}")
        for v in variants:
            ratio = medians[f"embed: {v}+tokenizer"] / medians[f"embed: {v}"]
            results["latency_ms_batch1"][set_name][f"ratio {v}+tokenizer / {v}"] = ratio
            print(f"    {'ratio ' + v + '+tokenizer / ' + v:28s} {ratio:8.3f}")
    check = {n: np.max(np.abs(predictors[f"{v}+tokenizer"].embed(sets[n][:20]) - predictors[v].embed(sets[n][:20]))) for n in sets for v in variants}
    print(f"\nmax abs difference of the embeddings, single-file vs two-step: {max(check.values()):.2e}")
    results["max_abs_diff_embeddings"] = float(max(check.values()))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0 if total_bad == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
