"""Server metrics in the Prometheus text exposition format (version 0.0.4), without a client library.

Format: https://prometheus.io/docs/instrumenting/exposition_formats/ . Counters end in
``_total``; histograms have cumulative ``_bucket{le="..."}`` lines, ``_sum`` and ``_count``.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence

#: Content-Type of :meth:`ServerMetrics.render`'s output.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Sequence[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{key}="{_escape(value)}"' for key, value in pairs) + "}" if pairs else ""


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class Histogram:
    """Observations counted into fixed buckets (upper bounds, inclusive), plus their sum and count."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.bounds = tuple(sorted(buckets))
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        """Count ``value`` into the first bucket whose bound is >= it."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str, labels: Sequence[tuple[str, str]]) -> list[str]:
        out, cumulative = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            cumulative += count
            le = "+Inf" if bound == float("inf") else _number(bound)
            out.append(f"{name}_bucket{_labels([*labels, ('le', le)])} {cumulative}")
        out.append(f"{name}_sum{_labels(labels)} {_number(self.sum)}")
        out.append(f"{name}_count{_labels(labels)} {self.count}")
        return out


class ServerMetrics:
    """What ``GET /metrics`` reports; every method is thread-safe.

    Metrics (all labelled with ``model``):
        ``ptmkit_requests_total{endpoint, code}``: requests answered, by endpoint (``infer``,
            ``predict``) and HTTP status code (counter).
        ``ptmkit_request_duration_seconds{endpoint}``: wall-clock time from a request's arrival
            to its response, in seconds, successful requests only (histogram).
        ``ptmkit_requests_in_flight``: requests being answered now (gauge).
        ``ptmkit_batch_size``: rows per model call (histogram); ``_count`` is the number of calls.
        ``ptmkit_batch_duration_seconds``: wall-clock time of one model call (tokenization
            included for text requests), in seconds (histogram).
        ``ptmkit_inference_rows_total``: rows run through the model (counter).
        ``ptmkit_generations_total{outcome}``: generations (generate extension) that stopped,
            ``completed`` or ``cancelled`` (their reader went away first) (counter).
        ``ptmkit_generation_steps_total``: model calls made by those generations, one per new
            token (counter).
    """

    def __init__(self, model: str) -> None:
        self.model = model
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, int], int] = {}
        self._latency: dict[str, Histogram] = {}
        self._batch_size = Histogram(BATCH_BUCKETS)
        self._batch_seconds = Histogram(LATENCY_BUCKETS_S)
        self._in_flight = 0
        self._generations = {"completed": 0, "cancelled": 0}
        self._generation_steps = 0

    def started(self) -> None:
        """One request arrived (``ptmkit_requests_in_flight`` + 1)."""
        with self._lock:
            self._in_flight += 1

    def finished(self, endpoint: str, code: int, seconds: float) -> None:
        """One request answered with HTTP ``code`` after ``seconds``."""
        with self._lock:
            self._in_flight -= 1
            self._requests[(endpoint, code)] = self._requests.get((endpoint, code), 0) + 1
            if code == 200:
                self._latency.setdefault(endpoint, Histogram(LATENCY_BUCKETS_S)).observe(seconds)

    def batch(self, rows: int, seconds: float) -> None:
        """One model call on ``rows`` rows that took ``seconds``."""
        with self._lock:
            self._batch_size.observe(rows)
            self._batch_seconds.observe(seconds)

    def generation(self, steps: int, cancelled: bool) -> None:
        """One generation stopped after ``steps`` model calls; ``cancelled``: its reader went away."""
        with self._lock:
            self._generations["cancelled" if cancelled else "completed"] += 1
            self._generation_steps += steps

    def render(self) -> str:
        """The metrics as Prometheus text, ending in a newline."""
        model = [("model", self.model)]
        with self._lock:
            lines = [
                "# HELP ptmkit_requests_total Inference requests answered, by endpoint and HTTP status code.",
                "# TYPE ptmkit_requests_total counter",
            ]
            for (endpoint, code), count in sorted(self._requests.items()):
                lines.append(f"ptmkit_requests_total{_labels([*model, ('endpoint', endpoint), ('code', str(code))])} {count}")
            lines += [
                "# HELP ptmkit_request_duration_seconds Time from a request's arrival to its response (successful requests).",
                "# TYPE ptmkit_request_duration_seconds histogram",
            ]
            for endpoint, histogram in sorted(self._latency.items()):
                lines += histogram.lines("ptmkit_request_duration_seconds", [*model, ("endpoint", endpoint)])
            lines += [
                "# HELP ptmkit_requests_in_flight Requests being answered now.",
                "# TYPE ptmkit_requests_in_flight gauge",
                f"ptmkit_requests_in_flight{_labels(model)} {self._in_flight}",
                "# HELP ptmkit_batch_size Rows per model call (dynamic batching).",
                "# TYPE ptmkit_batch_size histogram",
                *self._batch_size.lines("ptmkit_batch_size", model),
                "# HELP ptmkit_batch_duration_seconds Wall-clock time of one model call, tokenization included.",
                "# TYPE ptmkit_batch_duration_seconds histogram",
                *self._batch_seconds.lines("ptmkit_batch_duration_seconds", model),
                "# HELP ptmkit_inference_rows_total Rows run through the model.",
                "# TYPE ptmkit_inference_rows_total counter",
                f"ptmkit_inference_rows_total{_labels(model)} {_number(self._batch_size.sum)}",
                "# HELP ptmkit_generations_total Generations that stopped, completed or cancelled (the client went away).",
                "# TYPE ptmkit_generations_total counter",
                *(f"ptmkit_generations_total{_labels([*model, ('outcome', o)])} {n}" for o, n in self._generations.items()),
                "# HELP ptmkit_generation_steps_total Model calls made by generations, one per new token.",
                "# TYPE ptmkit_generation_steps_total counter",
                f"ptmkit_generation_steps_total{_labels(model)} {self._generation_steps}",
            ]
        return "\n".join(lines) + "\n"
