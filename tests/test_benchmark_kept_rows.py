"""``benchmarks/kept_rows.py``: the finished rows of a long benchmark, kept one file each so that a
table can be filled over several sessions, and never mixed with rows of other settings."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from kept_rows import KeptRows, machine, start  # noqa: E402


def test_a_row_is_kept_with_its_settings_and_run_and_read_back(tmp_path: Path) -> None:
    rows = KeptRows(tmp_path / "rows", {"steps": 250, "quick": False})
    assert rows.get("mlm") is None
    kept = rows.put("mlm", {"dev_accuracy": 0.4, "from_cache": True}, {"commit": "abc1234", "load": 1.5})
    assert kept["settings"] == {"steps": 250, "quick": False} and "from_cache" not in kept
    assert kept["ran"]["load"].startswith("1.50 to ") and len(kept["ran"]["date"]) == 10 and kept["ran"]["commit"] == "abc1234"  # the commit it started at
    assert json.loads((tmp_path / "rows" / "mlm.json").read_text()) == kept
    assert not list((tmp_path / "rows").glob("*.partial"))
    assert rows.get("mlm") == {**kept, "from_cache": True}


def test_rows_of_other_settings_or_recipe_are_refused_naming_the_file(tmp_path: Path) -> None:
    KeptRows(tmp_path, {"steps": 20}).put("span", {"objectives": ["span"], "dev_accuracy": 0.3}, start())
    with pytest.raises(SystemExit, match=r"span\.json: a row made with \{'steps': 20\}, not this run's \{'steps': 250\}; give another --rows-dir"):
        KeptRows(tmp_path, {"steps": 250}).get("span")
    with pytest.raises(SystemExit, match=r"span\.json: a row made with \{'steps': 20\} \(\['span'\]\), not this run's \{'steps': 20\} \(\['mlm'\]\)"):
        KeptRows(tmp_path, {"steps": 20}).get("span", {"objectives": ["mlm"]})
    assert KeptRows(tmp_path, {"steps": 20}).get("span", {"objectives": ["span"]})["dev_accuracy"] == 0.3


def test_work_directories_of_other_settings_are_refused(tmp_path: Path) -> None:
    KeptRows(tmp_path / "rows", {"steps": 20, "quick": True}).claim_work(tmp_path / "work")
    KeptRows(tmp_path / "rows", {"steps": 20, "quick": True}).claim_work(tmp_path / "work")  # the same settings: reused
    with pytest.raises(SystemExit, match=r"work: runs made with \{\"steps\": 20, \"quick\": true\}, not this run's .*give another --work"):
        KeptRows(tmp_path / "rows", {"steps": 250, "quick": False}).claim_work(tmp_path / "work")


def test_unreadable_rows_and_markers_are_one_line_refusals(tmp_path: Path) -> None:
    (tmp_path / "rows").mkdir()
    (tmp_path / "rows" / "cut.json").write_text('{"dev_accuracy": 0.4, "sett')
    with pytest.raises(SystemExit, match=r"cut\.json: not readable as a kept row \(JSONDecodeError: .*remove it to run the row again"):
        KeptRows(tmp_path / "rows", {}).get("cut")
    (tmp_path / "rows" / "list.json").write_text("[1, 2]")
    with pytest.raises(SystemExit, match=r"list\.json: not a kept row \(a JSON list, not an object\)"):
        KeptRows(tmp_path / "rows", {}).get("list")
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "settings.json").write_text("")
    with pytest.raises(SystemExit, match=r"work/settings\.json: not readable as a work directory's settings"):
        KeptRows(tmp_path / "rows", {}).claim_work(tmp_path / "work")


def test_start_records_the_commit_and_load(monkeypatch: pytest.MonkeyPatch) -> None:
    began = start()
    assert began["commit"] and began["load"] >= 0.0
    monkeypatch.setenv("PTMKIT_COMMIT", "abc1234")  # a copy of the tree on another machine: its .git may lag behind
    assert start()["commit"] == "abc1234"


def test_machine_names_the_core_count() -> None:
    assert machine().startswith(f"{os.cpu_count()} CPU cores")
