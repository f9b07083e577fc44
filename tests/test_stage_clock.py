"""The quickstart's stage clock: estimates scaled by the measured pace, reused stages left out."""

from __future__ import annotations

import io

from rich.console import Console

from ptmkit.quickstart import StageClock, load_pace


def announce(clock: StageClock, name: str) -> str:
    clock.console.file = io.StringIO()
    clock.start(name, name)
    return clock.console.file.getvalue()


def test_reused_stages_do_not_set_the_pace() -> None:
    """A rerun of a finished quickstart announced every estimate as 0s: the reused stages took
    0.3 s of their 100 s estimates, and that pace (0.003x) scaled the rest."""
    clock = StageClock({"pretrain": 100, "finetune": 200, "predict": 10}, Console(file=io.StringIO(), width=200), start_pace=1.0)
    clock.done["pretrain"] = {"seconds": 0.3}
    assert clock.pace() == 1.0
    assert "about 3m20s for this stage, 3m30s left in all (at 1.0x" in announce(clock, "finetune")
    clock.done["finetune"] = {"seconds": 500.0}  # ran, at 2.5x the estimate
    assert clock.pace() == 2.5
    assert "about 25s for this stage, 25s left in all (at 2.5x" in announce(clock, "predict")


def test_the_first_estimate_follows_the_processes_running() -> None:
    assert load_pace(others=2.0, cores=2) == 2.0  # two busy processes beside the quickstart's two threads
    assert load_pace(others=0.0, cores=2) == 1.0
    assert load_pace(others=3.0, cores=16) == 1.0  # never faster than the two quiet cores the estimates are for
    clock = StageClock({"pretrain": 60}, Console(file=io.StringIO(), width=200), start_pace=load_pace(others=4.0, cores=2))
    assert "about 3m00s for this stage, 3m00s left in all (at 3.0x" in announce(clock, "pretrain")


def test_running_others_reads_the_runnable_count(tmp_path) -> None:
    from ptmkit.quickstart import running_others

    loadavg = tmp_path / "loadavg"
    loadavg.write_text("0.94 1.06 1.29 3/345 1234\n", encoding="ascii")
    assert running_others(str(loadavg)) == 2  # three runnable, this one among them
