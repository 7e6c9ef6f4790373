"""Data models: command results, directory entries and connection configurations."""

from __future__ import annotations

import datetime as _dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from .constants import DEFAULT_NAMESPACE, DEFAULT_ROUTER_NAMESPACE, DEFAULT_SERVER_PORT
from .utils import is_dns_label, validate_port


class ExecutionResult(BaseModel):
    """The outcome of ``sandbox.commands.run``.

    ``exit_code`` is ``-1`` when the runtime did not report one.
    """

    stdout: str = ""
    stderr: str = ""
    exit_code: int = -1


class FileEntry(BaseModel):
    """One entry of ``sandbox.files.list``."""

    name: str
    size: int = 0
    type: Literal["file", "directory"]
    modified: _dt.datetime
    mode: str | None = None

    @classmethod
    def from_legacy(cls, data: dict[str, Any]) -> FileEntry:
        """Build an entry from the legacy runtime's ``{"name","size","type","mod_time"}``."""
        mod_time = data.get("mod_time") or 0
        return cls(
            name=data["name"],
            size=int(data.get("size") or 0),
            type=data["type"],
            modified=_dt.datetime.fromtimestamp(float(mod_time), tz=_dt.UTC),
        )

    @classmethod
    def from_sandboxd(cls, data: dict[str, Any]) -> FileEntry:
        """Build an entry from sandboxd's ``{"name","size","type","modified_at","mode"}``."""
        raw = data.get("modified_at")
        if isinstance(raw, str) and raw:
            modified = _parse_rfc3339(raw)
        else:
            modified = _dt.datetime.fromtimestamp(0, tz=_dt.UTC)
        return cls(
            name=data["name"],
            size=int(data.get("size") or 0),
            type=data["type"],
            modified=modified,
            mode=data.get("mode"),
        )


def _parse_rfc3339(value: str) -> _dt.datetime:
    """Parse RFC 3339 (incl. ``Z`` and nanosecond fractions) into an aware datetime."""
    text = value.strip().replace("z", "Z")
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    if "." in text:
        head, _, rest = text.partition(".")
        digits = ""
        while rest and rest[0].isdigit():
            digits, rest = digits + rest[0], rest[1:]
        text = f"{head}.{digits[:6].ljust(6, '0')}{rest}"
    parsed = _dt.datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=_dt.UTC)
    return parsed


class _Config(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @field_validator("server_port", "rest_port", "grpc_port", check_fields=False)
    @classmethod
    def _port(cls, value: int) -> int:
        return validate_port(value)


class SandboxDirectConnectionConfig(_Config):
    """Talk to a router (or any URL speaking the runtime API) at ``api_url``.

    Router headers are sent with every request.
    """

    api_url: str
    server_port: int = DEFAULT_SERVER_PORT

    @field_validator("api_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")) or len(value) <= len("https://"):
            raise ValueError(f"api_url must be an http:// or https:// URL, got {value!r}")
        return value


class SandboxGatewayConnectionConfig(_Config):
    """Reach the router through a Gateway API ``Gateway`` whose address is discovered by watch."""

    gateway_name: str
    gateway_namespace: str = DEFAULT_NAMESPACE
    gateway_ready_timeout: float = 180
    server_port: int = DEFAULT_SERVER_PORT

    @field_validator("gateway_ready_timeout")
    @classmethod
    def _timeout(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("gateway_ready_timeout must be positive")
        return value


class SandboxLocalTunnelConnectionConfig(_Config):
    """Default: ``kubectl port-forward`` to ``svc/sandbox-router-svc`` started by the SDK."""

    port_forward_ready_timeout: float = 30
    server_port: int = DEFAULT_SERVER_PORT
    router_namespace: str = DEFAULT_ROUTER_NAMESPACE

    @field_validator("router_namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if not is_dns_label(value):
            raise ValueError(
                f"router_namespace {value!r} is not a valid namespace (lower-case RFC 1123 label)"
            )
        return value

    @field_validator("port_forward_ready_timeout")
    @classmethod
    def _timeout(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("port_forward_ready_timeout must be positive")
        return value


class SandboxInClusterConnectionConfig(_Config):
    """From inside the cluster: call the sandbox pod directly (no router, no headers)."""

    server_port: int = DEFAULT_SERVER_PORT


class SandboxdPodTunnelConnectionConfig(_Config):
    """Port-forward straight to the sandbox pod's sandboxd REST (and gRPC) ports."""

    rest_port: int = 8080
    grpc_port: int = 9090
    port_forward_ready_timeout: float = 30


class SandboxTracerConfig(BaseModel):
    """OpenTelemetry settings (requires the ``tracing`` extra when enabled)."""

    model_config = ConfigDict(frozen=True)

    enable_tracing: bool = False
    trace_service_name: str = "sandbox-client"


ConnectionConfig = (
    SandboxDirectConnectionConfig
    | SandboxGatewayConnectionConfig
    | SandboxLocalTunnelConnectionConfig
    | SandboxInClusterConnectionConfig
    | SandboxdPodTunnelConnectionConfig
)

__all__ = [
    "ConnectionConfig",
    "ExecutionResult",
    "FileEntry",
    "SandboxDirectConnectionConfig",
    "SandboxGatewayConnectionConfig",
    "SandboxInClusterConnectionConfig",
    "SandboxLocalTunnelConnectionConfig",
    "SandboxTracerConfig",
    "SandboxdPodTunnelConnectionConfig",
]
