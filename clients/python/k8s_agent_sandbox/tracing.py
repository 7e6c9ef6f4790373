"""Optional OpenTelemetry tracing (``pip install k8s-agent-sandbox[tracing]``).

Without tracing enabled every helper here is a cheap no-op.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .models import SandboxTracerConfig

_provider_initialized = False


class TraceManager:
    """Creates spans named ``<service>.<operation>`` when tracing is enabled."""

    def __init__(self, config: SandboxTracerConfig | None) -> None:
        self.config = config or SandboxTracerConfig()
        self._tracer: Any = None
        if self.config.enable_tracing:
            self._tracer = _init_tracer(self.config.trace_service_name)

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    @contextmanager
    def span(self, operation: str, **attributes: Any) -> Iterator[Any]:
        """Run the block inside span ``<service>.<operation>`` (no-op when disabled)."""
        if self._tracer is None:
            yield None
            return
        name = f"{self.config.trace_service_name}.{operation}"
        with self._tracer.start_as_current_span(name) as span:
            for key, value in attributes.items():
                if value is not None:
                    span.set_attribute(key, value)
            yield span

    def start_span(self, operation: str) -> Any:
        """Start a long-lived span (e.g. the sandbox lifecycle); caller must ``end()`` it."""
        if self._tracer is None:
            return None
        return self._tracer.start_span(f"{self.config.trace_service_name}.{operation}")

    def trace_context_annotation(self) -> str | None:
        """JSON of the current W3C trace context, for the claim annotation; ``None`` if no span."""
        if self._tracer is None:
            return None
        from opentelemetry import propagate

        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        if "traceparent" not in carrier:
            return None
        return json.dumps(carrier)


def _init_tracer(service_name: str) -> Any:
    global _provider_initialized
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise ImportError(
            "Tracing is enabled (SandboxTracerConfig(enable_tracing=True)) but OpenTelemetry is "
            "not installed. Install it with: pip install 'k8s-agent-sandbox[tracing]'"
        ) from exc
    if not _provider_initialized:
        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter,
            )

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        except ImportError:  # pragma: no cover - exporter is optional
            pass
        trace.set_tracer_provider(provider)
        _provider_initialized = True
    return trace.get_tracer(service_name.replace("-", "_"))
