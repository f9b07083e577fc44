"""``benchmarks/export_memory.py --quick`` end to end (issue 21): a tiny random BERT with MiniLM's
tokenizer is imported, exported with static int8 in a measured child process, and exported again
by the torch anchor; the table holds one row each, both exits 0, and the exports are where the
work directory says. The megabytes measure the interpreter, not the model: only their order is
asserted, no speed or memory goal."""

from __future__ import annotations

import json
import re
from pathlib import Path

from benchmark_quick import run_quick


def test_export_memory_quick(tmp_path: Path) -> None:
    printed = run_quick("export_memory.py", "--work", str(tmp_path))
    assert re.search(r"^# Export memory: --quick, a tiny random BERT", printed, re.MULTILINE), printed
    rows = re.findall(
        r"^\| (.+?) \| (int8-static|anchor) \| (-?\d+) \| (\d+) \| (\d+) \| (\d+) \|$", printed, re.MULTILINE
    )
    assert [(what, name) for what, name, *_ in rows] == [
        ("ptmkit export --int8 --static --calibration DEV", "int8-static"),
        ("torch.onnx.export of transformers' AutoModel (optimum not installed here)", "anchor"),
    ], printed
    for _, _, code, largest, tree, _ in rows:
        assert code == "0" and 200 < int(largest) <= int(tree)  # MB: TensorFlow or torch alone hold more than 200
    manifest = json.loads((tmp_path / "int8-static" / "manifest.json").read_text())
    assert manifest["variants"]["int8"]["quantization"]["mode"] == "static-qdq" and manifest["variants"]["fp32"]["ok"]
    assert (
        json.loads((tmp_path / "tiny-bert" / "config.json").read_text())["hidden_size"] == 32
    )  # the tiny model, not MiniLM
    assert (tmp_path / "anchor" / "model.onnx").stat().st_size > 1_000_000  # 30,522 x 32 float32 embeddings
