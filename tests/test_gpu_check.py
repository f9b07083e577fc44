"""``benchmarks/gpu_check.sh --dry-run``: the prepared GPU check's code, on the CPU with tiny
inputs, so that the script cannot rot between the rare runs on a GPU (issue 14, section 4)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def table_rows(report: str, section: str) -> list[list[str]]:
    """The body rows of the first table under ``## section``, as stripped cells."""
    body = report.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("|")][2:]  # less the header and the rule
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def number(cell: str) -> float:
    return float(cell.replace(",", "").rstrip("%"))


def test_the_dry_run_measures_every_section(tmp_path: Path) -> None:
    out = tmp_path / "gpu.md"
    env = dict(os.environ, PYTHON=sys.executable)
    result = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--dry-run", "--out", str(out)],
                            capture_output=True, text=True, env=env, timeout=1500)
    assert result.returncode == 0, result.stderr[-3000:]
    report = out.read_text()
    for field in ("| date | 20", "| commit | ", "| machine | no GPU; ", "| load | 1, 5, 15 min load average", "| command | `benchmarks/gpu_check.sh --dry-run` |"):
        assert field in report, field
    assert "failed:" not in report and "skipped" not in report, report

    for family in ("BERT", "GPT"):
        rows = table_rows(report, f"{family} pre-training")
        assert [row[0] for row in rows] == ["fp32", "mixed bf16", "mixed bf16 + XLA"], (family, rows)
        assert all(number(row[1]) > 0 and number(row[2]) > 0 and 0 < number(row[4]) < 100 for row in rows), (family, rows)
    assert "; causal LM; " in report.split("## GPT pre-training\n", 1)[1]

    families = table_rows(report, "Pre-training per encoder family")  # issue 18: each family's own objectives
    assert [(row[0], row[1]) for row in families] == [("albert", "mlm, sop"), ("xlnet", "plm")], families  # the dry run's two (a GPU runs four)
    assert all(number(row[2]) > 0 and number(row[3]) > 0 and number(row[4]) > 0 and 0 < number(row[6]) < 100 for row in families), families

    transformer = table_rows(report, "Transformer translation training")  # issue 17: the encoder-decoder's training model
    assert [row[0] for row in transformer] == ["fp32", "mixed bf16", "mixed bf16 + XLA"], transformer
    assert all(0 < number(row[1]) < number(row[2]) and number(row[3]) > 0 for row in transformer), transformer

    decoding = table_rows(report, "GPT decoding on ONNX Runtime")
    assert [(row[0], row[1]) for row in decoding] == [("fp32", "CPUExecutionProvider"), ("fp16", "CPUExecutionProvider")], decoding
    assert all(number(row[2]) > 0 and number(row[3]) > 0 for row in decoding), decoding
    assert re.fullmatch(r"[0-8]/8, [0-8]/8", decoding[1][4]), decoding  # fp16's greedy rows equal to fp32's, at batch 1 and 8

    onnx = table_rows(report, "ONNX Runtime: MiniLM")
    assert [(row[1], row[2], row[3]) for row in onnx] == [
        ("fp32", "model.onnx", "CPUExecutionProvider"),
        ("fp32 optimized", "model.opt.onnx", "CPUExecutionProvider"),
        ("fp16", "model.fp16.onnx", "CPUExecutionProvider"),
    ]
    assert all(number(row[4]) > 0 and number(row[5]) > 0 for row in onnx), onnx

    server = table_rows(report, "Server batching")
    assert [row[0] for row in server] == ["1", "32"] and all(row[5] == "0" for row in server), server
    assert number(server[0][4]) == 1.0  # max batch 1 never batches
    assert re.search(r"batching gain: \d+\.\d\dx requests/s; the server said: `serving .*CPUExecutionProvider", report)

    word2vec = table_rows(report, "word2vec against gensim")
    assert [row[0] for row in word2vec] == ["gensim (CPU)", "ptmkit (cpu)"]
    assert all(number(row[1]) > 0 for row in word2vec), word2vec
    mirrored = table_rows(report, "MirroredStrategy against none")
    assert [row[0] for row in mirrored] == ["none", "mirrored"] and all(number(row[1]) > 0 for row in mirrored), mirrored
    assert re.search(r"mirrored / none: \d+\.\d\dx", report)
    assert "no TensorrtExecutionProvider in this onnxruntime build" in report  # the CPU wheel has none


def test_sections_the_time_left_cannot_hold_are_skipped_and_said_so(tmp_path: Path) -> None:
    out = tmp_path / "gpu.md"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--dry-run", "--seconds", "0", "--out", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    report = out.read_text()
    assert report.count("\nskipped: 0 s left of the check's time, this section needs about ") == 10
    assert "(unfinished" not in report  # the final write replaces the partial ones


def test_only_runs_the_sections_it_names(tmp_path: Path) -> None:
    out = tmp_path / "gpu.md"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--dry-run", "--seconds", "0", "--only", "Transformer,word2vec", "--out", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    report = out.read_text()
    assert re.findall(r"^## (.+)$", report, re.MULTILINE) == ["word2vec against gensim", "Transformer translation training"], report
    assert "| command | `benchmarks/gpu_check.sh --dry-run --only Transformer,word2vec` |" in report
    refused = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--dry-run", "--only", "word2vec"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--only writes a report of some sections: give it --out FILE" in refused.stderr, refused.stderr
