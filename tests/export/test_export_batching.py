"""DynamicBatcher on its own: batch limits, kinds, isolation of failures, waiting rules, draining."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from ptmkit_export.batching import BatcherClosed, DynamicBatcher


class Recorder:
    """A ``run`` that records each batch, doubles numbers, and fails on the payload "boom"."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.batches: list[tuple[object, list[object]]] = []
        self.seconds = seconds
        self.threads: set[str] = set()

    def __call__(self, kind, payloads):
        self.batches.append((kind, list(payloads)))
        self.threads.add(threading.current_thread().name)
        time.sleep(self.seconds)
        if "boom" in payloads:
            raise ValueError("bad payload")
        return [p * 2 for p in payloads]


def run(coroutine):
    return asyncio.run(coroutine)


def test_batches_respect_max_batch_and_order() -> None:
    recorder = Recorder()
    metered = []

    async def main():
        batcher = DynamicBatcher(recorder, max_batch=4, max_delay_ms=0, on_batch=lambda rows, s: metered.append(rows))
        batcher.start()
        results = await asyncio.gather(*(batcher.submit("n", i, 1) for i in range(10)))
        await batcher.close()
        return results

    assert run(main()) == [2 * i for i in range(10)]
    assert [len(p) for _, p in recorder.batches] == [4, 4, 2]  # queued together, cut at max_batch
    assert [p for _, batch in recorder.batches for p in batch] == list(range(10))
    assert metered == [4, 4, 2]
    assert all(name.startswith("ptmkit-infer") for name in recorder.threads)  # never on the event loop


def test_rows_count_and_kinds_do_not_mix() -> None:
    recorder = Recorder()

    async def main():
        batcher = DynamicBatcher(recorder, max_batch=5, max_delay_ms=0)
        batcher.start()
        jobs = [batcher.submit("a", 1, 3), batcher.submit("b", 2, 1), batcher.submit("a", 3, 2), batcher.submit("a", 4, 1), batcher.submit("a", 5, 9)]
        results = await asyncio.gather(*jobs)
        await batcher.close()
        return results

    assert run(main()) == [2, 4, 6, 8, 10]
    assert recorder.batches == [("a", [1, 3]), ("b", [2]), ("a", [4]), ("a", [5])]  # 3+2 rows fill 5; 9 rows alone


def test_one_bad_request_does_not_fail_the_others() -> None:
    recorder = Recorder()

    async def main():
        batcher = DynamicBatcher(recorder, max_batch=8, max_delay_ms=0)
        batcher.start()
        results = await asyncio.gather(*(batcher.submit("n", p, 1) for p in [1, "boom", 3]), return_exceptions=True)
        await batcher.close()
        return results

    results = run(main())
    assert results[0] == 2 and results[2] == 6
    assert isinstance(results[1], ValueError) and str(results[1]) == "bad payload"
    assert [p for _, p in recorder.batches] == [[1, "boom", 3], [1], ["boom"], [3]]


def test_a_lone_request_does_not_wait_but_arriving_ones_are_awaited() -> None:
    recorder = Recorder()

    async def main():
        batcher = DynamicBatcher(recorder, max_batch=8, max_delay_ms=2000)
        batcher.start()
        start = time.perf_counter()
        assert await batcher.submit("n", 1, 1) == 2
        lone = time.perf_counter() - start

        async def late(delay: float, value: int) -> int:
            with batcher.arriving():  # the server counts a request from its arrival to its queueing
                await asyncio.sleep(delay)
            return await batcher.submit("n", value, 1)

        start = time.perf_counter()
        first = asyncio.ensure_future(late(0.0, 10))
        second = asyncio.ensure_future(late(0.2, 20))
        results = await asyncio.gather(first, second)
        together = time.perf_counter() - start
        await batcher.close()
        return lone, results, together

    lone, results, together = run(main())
    assert lone < 0.5  # far below max_delay_ms = 2 s
    assert results == [20, 40]
    assert recorder.batches[-1] == ("n", [10, 20])  # the first waited for the second, which was on its way
    assert 0.15 < together < 1.5


def test_max_delay_bounds_the_wait() -> None:
    recorder = Recorder()

    async def main():
        batcher = DynamicBatcher(recorder, max_batch=8, max_delay_ms=100)
        batcher.start()
        with batcher.arriving():  # a request that never arrives must not hold the batch past 100 ms
            start = time.perf_counter()
            assert await batcher.submit("n", 1, 1) == 2
            waited = time.perf_counter() - start
        await batcher.close()
        return waited

    assert 0.08 < run(main()) < 1.0


def test_close_drains_then_refuses() -> None:
    recorder = Recorder(seconds=0.05)

    async def main():
        batcher = DynamicBatcher(recorder, max_batch=2, max_delay_ms=0)
        batcher.start()
        pending = [asyncio.ensure_future(batcher.submit("n", i, 1)) for i in range(5)]
        await asyncio.sleep(0)
        await batcher.close()
        assert all(job.done() for job in pending)
        with pytest.raises(BatcherClosed, match="shutting down"):
            await batcher.submit("n", 9, 1)
        return [job.result() for job in pending]

    assert run(main()) == [0, 2, 4, 6, 8]


def test_invalid_settings() -> None:
    with pytest.raises(ValueError, match="max_batch"):
        DynamicBatcher(Recorder(), max_batch=0)
    with pytest.raises(ValueError, match="max_delay_ms"):
        DynamicBatcher(Recorder(), max_delay_ms=-1)


def test_length_groups() -> None:
    from ptmkit_export.server import length_groups

    lengths = [5, 30, 6, 31, 7, 8, 100]
    groups = length_groups(lengths)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert groups == [[0, 2, 4, 5], [1, 3], [6]]  # short, medium and long texts are padded apart
    assert length_groups(lengths, call_cost_tokens=1e9) == [[0, 2, 4, 5, 1, 3, 6]]  # one call
    assert length_groups([3, 3, 3]) == [[0, 1, 2]]
    assert length_groups([]) == []
    # Rows weigh: one request of 20 short rows is not padded to a 100-token request, two single rows may be.
    assert length_groups([5, 100], rows=[20, 1]) == [[0], [1]]
    assert length_groups([5, 9], rows=[1, 1]) == [[0, 1]]
