"""``benchmarks/gpt_generation.py --quick`` end to end on a tiny random GPT-2 (2 layers, hidden 64,
vocabulary 500): the script cannot rot, and what it reports holds real values: decoding with the
key/value cache gives the tokens of recomputing the prefix, a left-padded batch of 8 the tokens of
its prompts alone, and optimum's ``ORTModelForCausalLM`` (when the script's ``--optimum-python``
has it) the same tokens as ptmkit. No timings are asserted."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """The ``--json`` figures and the printed tables of one ``--quick`` run."""
    # find_spec, not importorskip: torch imported into a worker that has loaded TensorFlow segfaults;
    # the script writes the transformers checkpoint in a child process
    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs the test extra: {', '.join(missing)}")
    work = tmp_path_factory.mktemp("gpt-generation")
    out = work / "figures.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "plugins"), str(ROOT / "export"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpt_generation.py"), "--quick", "--work", str(work / "work"), "--json", str(out)],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(out.read_text()), done.stdout


@pytest.mark.slow  # 30-70 s: three child processes (transformers, ptmkit's export, optimum's export) on a tiny model
def test_the_cache_gives_the_tokens_of_recomputing_the_prefix(quick: tuple[dict[str, Any], str]) -> None:
    results, printed = quick
    rows = results["cache"]
    assert [row["context"] for row in rows] == [16, 48]
    for row in rows:
        assert row["identical"] is True
        assert row["tokens"]["cache"] == row["tokens"]["recompute"] and len(row["tokens"]["cache"]) == 6
        assert row["cache step"] > 0 and row["recompute step"] > 0 and row["cache prefill"] > 0
        assert f"| {row['context']} | {row['cache step']:.3f} | {row['recompute step']:.3f} |" in printed
    assert len({tuple(row["tokens"]["cache"]) for row in rows}) == 2  # two contexts, two continuations: not a constant
    batches = {row["batch"]: row for row in results["optimum"]["rows"]}
    assert set(batches) == {1, 8}
    for size, row in batches.items():
        assert [len(tokens) for tokens in row["tokens"]["ptmkit"]] == [6] * 8
        assert row["ptmkit ms"] > 0 and row["ptmkit session ms"] > 0
        assert f"| {size} | {row['ptmkit ms']:.3f} |" in printed
    assert results["ptmkit batch 8 rows equal to batch 1"] == 8  # left padding changes no row
    assert len({len(prompt) for prompt in results["prompts"]}) == 8  # so padding was exercised


@pytest.mark.slow
def test_optimum_generates_the_same_tokens(quick: tuple[dict[str, Any], str]) -> None:
    results, printed = quick
    optimum = results["optimum"]
    if optimum.get("problem"):
        pytest.skip(f"optimum is not installed where the script looks for it: {optimum['problem']}")
    assert optimum["versions"]["optimum-onnx"]
    for row in optimum["rows"]:
        assert row["identical rows"] == row["rows"] == 8, row["batch"]
        assert row["tokens"]["optimum"] == row["tokens"]["ptmkit"]
        assert row["optimum ms"] > 0 and row["optimum session ms"] > 0
        assert f"| {row['batch']} | {row['ptmkit ms']:.3f} | {row['optimum ms']:.3f} | **{row['ptmkit ms'] / row['optimum ms']:.2f}x** |" in printed
    assert [(row["batch"], row["past"]) for row in optimum["graph"]] == [(1, 16), (8, 16)]
    assert all(row["ptmkit cpu ms"] > 0 and row["optimum cpu ms"] > 0 for row in optimum["graph"])
    assert all(row["ptmkit optimized cpu ms"] > 0 and row["ptmkit int8 cpu ms"] > 0 for row in optimum["graph"])  # the export's variants
    assert "| one decoder call, session.run alone: batch x past |" in printed and "| 8 x 16 |" in printed
