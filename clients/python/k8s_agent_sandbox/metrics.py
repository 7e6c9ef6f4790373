"""Client-side Prometheus metrics (default registry) and helpers to read them."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from prometheus_client import REGISTRY, Histogram

_BUCKETS_MS = (100, 250, 500, 750, 1000, 1250, 1500, 2000, 2500, 5000, 10000, 30000, 60000, 120000, 240000)


def _histogram(name: str, doc: str, labels: tuple[str, ...]) -> Histogram:
    # Importing the module twice (e.g. reloads in tests) must not fail on a
    # duplicate registration: reuse the collector already registered.
    # A private attribute: prometheus_client has no public lookup by name.
    existing = REGISTRY._names_to_collectors.get(name)
    if isinstance(existing, Histogram):
        return existing
    return Histogram(name, doc, labels, buckets=_BUCKETS_MS)


discovery_latency_ms = _histogram(
    "sandbox_client_discovery_latency_ms",
    "Time to discover and connect to the sandbox router (gateway address or port-forward), in ms.",
    ("mode", "status"),
)
suspend_latency_ms = _histogram(
    "sandbox_client_suspend_latency_ms", "Time to suspend a sandbox, in ms.", ("status",)
)
resume_latency_ms = _histogram(
    "sandbox_client_resume_latency_ms", "Time to resume a sandbox, in ms.", ("status",)
)
restore_latency_ms = _histogram(
    "sandbox_client_restore_latency_ms", "Time to restore a sandbox from a snapshot, in ms.", ("status",)
)

_METRIC_NAMES = (
    "sandbox_client_discovery_latency_ms",
    "sandbox_client_suspend_latency_ms",
    "sandbox_client_resume_latency_ms",
    "sandbox_client_restore_latency_ms",
)


@contextmanager
def observe_discovery(mode: str) -> Iterator[None]:
    """Record the duration of the enclosed block under ``mode`` with status success/failure."""
    start = time.monotonic()
    status = "failure"
    try:
        yield
        status = "success"
    finally:
        discovery_latency_ms.labels(mode=mode, status=status).observe((time.monotonic() - start) * 1000)


def get_metrics() -> dict[str, list[dict[str, object]]]:
    """Snapshot of the SDK's histograms.

    Returns ``{metric_name: [{"labels": {...}, "count": n, "sum": ms}, ...]}``
    with one item per label combination observed so far.
    """
    out: dict[str, list[dict[str, object]]] = {name: [] for name in _METRIC_NAMES}
    for family in REGISTRY.collect():
        if family.name not in out:
            continue
        series: dict[tuple[tuple[str, str], ...], dict[str, object]] = {}
        for sample in family.samples:
            if sample.name.endswith("_bucket") or sample.name.endswith("_created"):
                continue
            labels = dict(sample.labels)
            item = series.setdefault(tuple(sorted(labels.items())), {"labels": labels, "count": 0, "sum": 0.0})
            if sample.name.endswith("_count"):
                item["count"] = int(sample.value)
            elif sample.name.endswith("_sum"):
                item["sum"] = float(sample.value)
        out[family.name] = list(series.values())
    return out


def print_metrics(file: TextIO | None = None) -> None:
    """Print a human-readable summary of :func:`get_metrics` (count and mean per series)."""
    stream = file or sys.stdout
    for name, series in get_metrics().items():
        if not series:
            print(f"{name}: no observations", file=stream)
            continue
        for item in series:
            # get_metrics builds each item as {"labels": dict, "count": int, "sum": float}.
            raw_labels, raw_count, raw_sum = item["labels"], item["count"], item["sum"]
            pairs = sorted(raw_labels.items()) if isinstance(raw_labels, dict) else []
            labels = ",".join(f"{k}={v}" for k, v in pairs)
            count = raw_count if isinstance(raw_count, int) else 0
            total = float(raw_sum) if isinstance(raw_sum, (int, float)) else 0.0
            mean = total / count if count else 0.0
            print(f"{name}{{{labels}}}: count={count} mean_ms={mean:.1f}", file=stream)
