"""Dynamic batching: requests that arrive together run as one ONNX Runtime call.

The batcher lives on the server's asyncio event loop; the model runs in one worker thread, so the
loop keeps reading requests while a batch runs, and those requests form the next batch. The idea
and the two knobs (``max_batch``, ``max_delay_ms``) are Triton Inference Server's dynamic batcher
(``max_batch_size``, ``max_queue_delay_microseconds``); the wait rule differs, see
:class:`DynamicBatcher`.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

#: ``run(kind, payloads) -> results``: runs one batch in the worker thread.
RunBatch = Callable[[Hashable, Sequence[Any]], Sequence[Any]]


class BatcherClosed(RuntimeError):
    """The batcher is shutting down (or was never started): the request was not queued."""


@dataclass
class _Item:
    kind: Hashable
    payload: Any
    rows: int
    future: asyncio.Future[Any]
    arrived: float


class DynamicBatcher:
    """Queue requests and run them in batches of up to ``max_batch`` rows.

    Only requests of the same ``kind`` share a batch (texts with texts, token tensors with token
    tensors). A batch is run as soon as it holds ``max_batch`` rows, or when nothing more is on
    its way. Unlike Triton, the batcher never idles waiting for requests that have not arrived: it
    waits (at most ``max_delay_ms`` after the first request's arrival) only while other requests
    have reached the server and are still being read and parsed (counted by :meth:`arriving`). A
    lone request therefore runs at once, while concurrent requests coalesce: those that arrive
    while a batch runs form the next one.

    Args:
        run: called in the worker thread as ``run(kind, payloads)``; returns one result per
            payload, in order. If it raises on a batch of several requests, each request is run
            again alone, so one bad request cannot fail the others; a request that fails alone gets
            the exception.
        max_batch: most rows per call (>= 1); 1 turns batching off. A request with more rows runs
            alone.
        max_delay_ms: longest time, in milliseconds from its arrival, that a request waits for
            others to join its batch (>= 0).
        on_batch: called on the event loop after each call of ``run`` with ``(rows, seconds)``:
            the batch's rows and the call's wall-clock duration (for metrics).
        inline_lone: run a lone request (nothing else queued or arriving) on the event loop's
            thread instead of the worker thread: nothing could overlap with it, and it spares two
            thread hand-offs. Batches always run in the worker, while the loop reads the next requests.

    Raises:
        ValueError: ``max_batch < 1`` or ``max_delay_ms < 0``.
    """

    def __init__(
        self,
        run: RunBatch,
        max_batch: int = 32,
        max_delay_ms: float = 5.0,
        on_batch: Callable[[int, float], None] | None = None,
        inline_lone: bool = True,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if max_delay_ms < 0:
            raise ValueError(f"max_delay_ms must be >= 0, got {max_delay_ms}")
        self._run = run
        self.max_batch = max_batch
        self.max_delay_s = max_delay_ms / 1000.0
        self._on_batch = on_batch
        self._pending: deque[_Item] = deque()
        self._arriving = 0
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._closing = False
        self.inline_lone = inline_lone

    @property
    def queued_rows(self) -> int:
        """Rows waiting for a batch (int)."""
        return sum(item.rows for item in self._pending)

    def start(self) -> None:
        """Start the batching task on the running event loop and the worker thread."""
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ptmkit-infer")
        self._closing = False
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="ptmkit-batcher")

    async def close(self) -> None:
        """Run every queued request, then stop; later :meth:`submit` calls raise :class:`BatcherClosed`."""
        self._closing = True
        self._notify()
        if self._task is not None:
            await self._task
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    @contextmanager
    def arriving(self) -> Iterator[None]:
        """Mark a request as on its way (body being read and parsed) until the block ends."""
        self._arriving += 1
        try:
            yield
        finally:
            self._arriving -= 1
            self._notify()

    async def submit(self, kind: Hashable, payload: Any, rows: int, arrived: float | None = None) -> Any:
        """Queue ``payload`` (``rows`` rows) and return its result once its batch has run.

        Args:
            kind: requests of equal ``kind`` may share a batch.
            payload: passed to ``run`` in the ``payloads`` list.
            rows: the payload's rows (>= 1), counted against ``max_batch``.
            arrived: ``time.perf_counter()`` when the request arrived (default: now).

        Raises:
            BatcherClosed: the batcher is closed or not started.
            Exception: whatever ``run`` raised on this request alone.
        """
        if self._closing or self._task is None:
            raise BatcherClosed("the server is shutting down")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append(_Item(kind, payload, rows, future, time.perf_counter() if arrived is None else arrived))
        self._notify()
        return await future

    def _notify(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    async def _loop(self) -> None:
        assert self._wakeup is not None
        while True:
            if not self._pending:
                if self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            batch = await self._collect()
            await self._execute(batch)

    def _take(self, batch: list[_Item], rows: int) -> int:
        """Move queued items of the batch's kind into ``batch`` while they fit; returns its rows."""
        kind = batch[0].kind
        keep: deque[_Item] = deque()
        while self._pending:
            item = self._pending.popleft()
            if item.kind == kind and rows + item.rows <= self.max_batch:
                batch.append(item)
                rows += item.rows
            else:
                keep.append(item)
        self._pending = keep
        return rows

    async def _collect(self) -> list[_Item]:
        assert self._wakeup is not None
        first = self._pending.popleft()
        batch, rows = [first], first.rows
        deadline = first.arrived + self.max_delay_s
        while rows < self.max_batch and self.max_delay_s > 0:
            # A few loop turns let requests already sitting on the sockets be parsed and queued.
            for _ in range(3):
                await asyncio.sleep(0)
            rows = self._take(batch, rows)
            remaining = deadline - time.perf_counter()
            if rows >= self.max_batch or self._closing or self._arriving == 0 or remaining <= 0:
                break
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), remaining)
            except TimeoutError:
                pass
        if self.max_delay_s == 0:
            rows = self._take(batch, rows)
        return batch

    async def _execute(self, batch: list[_Item]) -> None:
        loop = asyncio.get_running_loop()
        rows = sum(item.rows for item in batch)
        start = time.perf_counter()
        payloads = [i.payload for i in batch]
        try:
            if self.inline_lone and len(batch) == 1 and not self._pending and self._arriving == 0:
                # Nothing to overlap with: run on the loop's thread and spare the two thread hand-offs
                # (each a wake-up that, on a busy machine, can wait for a scheduler slice).
                results = self._run(batch[0].kind, payloads)
            else:
                results = await loop.run_in_executor(self._executor, self._run, batch[0].kind, payloads)
            if len(results) != len(batch):
                raise RuntimeError(f"run returned {len(results)} results for {len(batch)} payloads")
        except Exception as error:
            if self._on_batch is not None:
                self._on_batch(rows, time.perf_counter() - start)
            if len(batch) == 1:
                if not batch[0].future.done():
                    batch[0].future.set_exception(error)
                return
            for item in batch:  # find the request that failed; the others still get answers
                await self._execute([item])
            return
        if self._on_batch is not None:
            self._on_batch(rows, time.perf_counter() - start)
        for item, result in zip(batch, results, strict=True):
            if not item.future.done():  # a client that went away cancelled its future
                item.future.set_result(result)
