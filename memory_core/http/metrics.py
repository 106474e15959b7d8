"""Prometheus metrics of one app (its own ``CollectorRegistry``, so two apps in one process never collide).

Labels are bounded: ``route`` is a route's template (``/v1/jobs/{job_id}``), never a raw path; no token, root or
agent is ever a label.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

__all__ = ["CONTENT_TYPE", "Metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text exposition format's media type."""


class Metrics:
    """Request counts and latencies per route, pre_turn log failures, and jobs queued by state."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "memory_core_http_requests",
            "HTTP requests answered, by route, method and status code.",
            ("route", "method", "status"),
            registry=self.registry,
        )
        self.latency = Histogram(
            "memory_core_http_request_duration_seconds",
            "Time to answer a request, seconds, by route.",
            ("route",),
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
        )
        self.log_errors = Counter(
            "memory_core_pre_turn_log_errors",
            "pre_turn calls whose user turn could not be logged (the pack was still returned).",
            registry=self.registry,
        )
        self.prefetch = Counter(
            "memory_core_prefetch_lookups",
            "pre_turn calls served with prefetch: a cached pack (hit) or none yet (miss).",
            ("result",),
            registry=self.registry,
        )
        self.jobs = Counter(
            "memory_core_jobs_submitted",
            "Background jobs handed to the queue, by job kind and what became of them.",
            ("job", "state"),
            registry=self.registry,
        )

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        """Count one answered request."""
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def render(self) -> bytes:
        """The registry in the text exposition format."""
        return generate_latest(self.registry)
