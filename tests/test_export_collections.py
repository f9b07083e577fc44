"""The export's full collections scan only what the export made (``collections_skip_live_objects``):
what was alive before is frozen for the export and handed back after it, also when it fails."""

from __future__ import annotations

import gc

import pytest

from ptmkit.exporting.convert import collections_skip_live_objects


def test_live_objects_are_frozen_for_the_block_and_handed_back() -> None:
    gc.unfreeze()  # as in a fresh process (conftest.py froze this one's objects before the module)
    try:
        alive = [[index] for index in range(1000)]  # tracked by the collector
        assert gc.get_freeze_count() == 0
        with collections_skip_live_objects():
            frozen = gc.get_freeze_count()  # less any frozen object freed since (another thread's)
            assert frozen >= len(alive)
            with collections_skip_live_objects():  # nested (the export's conversion): no-op
                assert 0 < gc.get_freeze_count() <= frozen
            assert frozen // 2 < gc.get_freeze_count() <= frozen  # the inner block unfroze nothing
        assert gc.get_freeze_count() == 0
        with pytest.raises(ValueError), collections_skip_live_objects():
            raise ValueError("a failed export")
        assert gc.get_freeze_count() == 0
    finally:
        gc.freeze()


def test_a_caller_that_froze_objects_keeps_them_frozen() -> None:
    gc.freeze()
    before = gc.get_freeze_count()
    with collections_skip_live_objects():
        assert before // 2 < gc.get_freeze_count() <= before  # nothing more frozen
    assert before // 2 < gc.get_freeze_count() <= before  # nor unfrozen
