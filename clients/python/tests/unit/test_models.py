"""Models and connection configs."""

from __future__ import annotations

import datetime as dt

import pytest
from pydantic import ValidationError

from k8s_agent_sandbox import (
    ExecutionResult,
    FileEntry,
    SandboxdPodTunnelConnectionConfig,
    SandboxDirectConnectionConfig,
    SandboxGatewayConnectionConfig,
    SandboxInClusterConnectionConfig,
    SandboxLocalTunnelConnectionConfig,
    SandboxTracerConfig,
)


def test_execution_result_defaults() -> None:
    assert ExecutionResult() == ExecutionResult(stdout="", stderr="", exit_code=-1)


def test_file_entry_from_legacy() -> None:
    entry = FileEntry.from_legacy({"name": "a.txt", "size": 3, "type": "file", "mod_time": 1700000000.5})
    assert entry.name == "a.txt" and entry.size == 3 and entry.type == "file"
    assert entry.modified == dt.datetime(2023, 11, 14, 22, 13, 20, 500000, tzinfo=dt.timezone.utc)
    assert entry.mode is None


def test_file_entry_from_sandboxd() -> None:
    entry = FileEntry.from_sandboxd(
        {"name": "d", "size": 0, "type": "directory", "modified_at": "2026-01-02T03:04:05.123456789Z", "mode": "drwxr-xr-x"}
    )
    assert entry.type == "directory" and entry.mode == "drwxr-xr-x"
    assert entry.modified == dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=dt.timezone.utc)
    other = FileEntry.from_sandboxd({"name": "f", "type": "file", "modified_at": "2026-01-02T03:04:05+02:00"})
    assert other.modified.utcoffset() == dt.timedelta(hours=2)


def test_connection_config_defaults() -> None:
    assert SandboxLocalTunnelConnectionConfig().model_dump() == {
        "port_forward_ready_timeout": 30,
        "server_port": 8888,
        "router_namespace": "agent-sandbox-system",
    }
    gw = SandboxGatewayConnectionConfig(gateway_name="gw")
    assert (gw.gateway_namespace, gw.gateway_ready_timeout, gw.server_port) == ("default", 180, 8888)
    assert SandboxDirectConnectionConfig(api_url="http://r:8080").server_port == 8888
    assert SandboxInClusterConnectionConfig().server_port == 8888
    pt = SandboxdPodTunnelConnectionConfig()
    assert (pt.rest_port, pt.grpc_port, pt.port_forward_ready_timeout) == (8080, 9090, 30)
    assert SandboxTracerConfig() == SandboxTracerConfig(enable_tracing=False, trace_service_name="sandbox-client")


@pytest.mark.parametrize("ns", ["bad ns", "x; kubectl delete", "UPPER", "a/b", "", "-x"])
def test_router_namespace_rejects_injection(ns: str) -> None:
    with pytest.raises(ValidationError):
        SandboxLocalTunnelConnectionConfig(router_namespace=ns)


@pytest.mark.parametrize("port", [0, 65536, -1])
def test_ports_validated(port: int) -> None:
    with pytest.raises(ValidationError):
        SandboxdPodTunnelConnectionConfig(rest_port=port)
    with pytest.raises(ValidationError):
        SandboxInClusterConnectionConfig(server_port=port)


def test_direct_requires_http_url() -> None:
    with pytest.raises(ValidationError):
        SandboxDirectConnectionConfig(api_url="router:8080")
