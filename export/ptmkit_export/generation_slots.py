"""Generation slots: the server's text generations, each decoded in a thread of its own, at most
``slots`` at a time, and stopped as soon as nobody reads them.

A generation is a loop of model calls (one per new token) that lasts from milliseconds to
minutes, so it cannot share :class:`ptmkit_export.batching.DynamicBatcher`'s one-call batches.
Each runs in its own thread, with its own key/value cache
(:meth:`ptmkit_export.Predictor.new_decoder`) over the export's one ONNX Runtime session, and hands
its text pieces to the event loop through an ``asyncio.Queue``. Requests beyond ``slots`` wait
for one to free. When the reader stops (a streaming client disconnected, the request was
cancelled), the thread sees it before its next model call, stops, and frees its slot; the slot is
freed only once the thread has stopped, so at most ``slots`` generations ever run.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

#: Marks the end of a generation's pieces on its queue.
_END = object()


class GenerationSlots:
    """At most ``slots`` generations at a time, each in its own thread.

    Args:
        slots: generations that run at once (>= 1); more wait for a free slot.
        on_finished: called in the generation's thread once it stops, with ``(steps,
            cancelled)``: the model calls it made and whether its reader went away first.

    Attributes:
        running: generations running now (their threads alive).
        steps: model calls made by every finished generation (int).

    Raises:
        ValueError: ``slots < 1``.
    """

    def __init__(self, slots: int = 1, on_finished: Callable[[int, bool], None] | None = None) -> None:
        if slots < 1:
            raise ValueError(f"generation slots must be >= 1, got {slots}")
        self.slots = slots
        self.on_finished = on_finished
        self.running = 0
        self.steps = 0
        self._lock = threading.Lock()
        self._free: asyncio.Semaphore | None = None  # made on the serving loop, at first use

    async def pieces(self, generation: Iterator[str], counted: Callable[[], int]) -> AsyncIterator[str]:
        """The text pieces of one generation, as its thread decodes them (``""`` pieces dropped).

        Args:
            generation: the generation's pieces, read in the thread (e.g.
                :meth:`ptmkit_export.Predictor.generate_stream`); one model call per piece read.
            counted: the model calls made so far (e.g. the decoder's ``cached_steps +
                full_steps``), read once the generation stops.

        Raises:
            Exception: whatever the generation raised in its thread.
        """
        if self._free is None:
            self._free = asyncio.Semaphore(self.slots)
        free = self._free
        await free.acquire()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        stop = threading.Event()

        def put(item: Any) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop has closed (server shut down): nobody reads
                stop.set()

        def work() -> None:
            outcome: Any = _END
            try:
                for piece in generation:  # one model call per piece
                    if stop.is_set():
                        break
                    if piece:
                        put(piece)
            except Exception as error:  # handed to the reader, which raises it
                outcome = error
            finally:
                getattr(generation, "close", lambda: None)()
                steps = counted()
                with self._lock:
                    self.steps += steps
                    self.running -= 1
                if self.on_finished is not None:
                    self.on_finished(steps, stop.is_set())
                put(outcome)
                try:
                    loop.call_soon_threadsafe(free.release)  # only now: the thread makes no more calls
                except RuntimeError:
                    pass

        with self._lock:
            self.running += 1
        threading.Thread(target=work, name="ptmkit-generate", daemon=True).start()
        try:
            while (item := await queue.get()) is not _END:
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            stop.set()  # the reader went away (or the generation ended): no further model call
