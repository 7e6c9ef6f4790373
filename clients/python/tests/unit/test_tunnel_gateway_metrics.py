"""Local tunnel (kubectl port-forward subprocess), Gateway discovery and discovery metrics."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from k8s_agent_sandbox import (
    Sandbox,
    SandboxDirectConnectionConfig,
    SandboxGatewayConnectionConfig,
    SandboxLocalTunnelConnectionConfig,
    SandboxPortForwardError,
    SandboxRequestError,
    get_metrics,
)
from k8s_agent_sandbox.k8s_helper import K8sHelper

from ..fakes.apiserver import FakeAPIServer
from ..fakes.runtime import FakeRuntime


def _count(mode: str, status: str) -> int:
    for item in get_metrics()["sandbox_client_discovery_latency_ms"]:
        if item["labels"] == {"mode": mode, "status": status}:
            return int(item["count"])  # type: ignore[call-overload]
    return 0


def _sandbox(api: FakeAPIServer, config: object) -> Sandbox:
    api.put("sandboxes", {"metadata": {"name": "sb-1", "namespace": "default"}, "status": {}})
    return Sandbox("claim-1", "sb-1", "default", config, K8sHelper())  # type: ignore[arg-type]


def test_local_tunnel_runs_kubectl_port_forward(
    fake_api: FakeAPIServer, runtime: FakeRuntime, fake_kubectl: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_KUBECTL_TARGET", f"127.0.0.1:{runtime.port}")
    before = _count("port_forward", "success")
    sandbox = _sandbox(fake_api, SandboxLocalTunnelConnectionConfig(router_namespace="router-ns"))
    assert sandbox.commands.run("echo tunnel").stdout == "tunnel\n"
    argv = json.loads(fake_kubectl.read_text().splitlines()[0])
    assert argv[:2] == ["port-forward", "svc/sandbox-router-svc"]
    assert argv[2].endswith(":8080") and argv[3:] == ["-n", "router-ns"]
    assert runtime.requests[-1].headers["X-Sandbox-ID"] == "sb-1"
    assert _count("port_forward", "success") == before + 1
    strategy = sandbox.connector.strategy  # type: ignore[union-attr]
    proc = strategy.tunnel._proc  # type: ignore[attr-defined]
    assert proc is not None and proc.poll() is None
    sandbox.close_connection()
    assert proc.wait(timeout=5) is not None  # the SDK stopped kubectl


def test_local_tunnel_crash(fake_api: FakeAPIServer, fake_kubectl: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_KUBECTL_MODE", "crash")
    before = _count("port_forward", "failure")
    sandbox = _sandbox(fake_api, SandboxLocalTunnelConnectionConfig())
    with pytest.raises(SandboxPortForwardError) as err:
        sandbox.commands.run("true")
    assert 'services "sandbox-router-svc" not found' in str(err.value)
    assert "agent-sandbox-system" in str(err.value)
    assert _count("port_forward", "failure") == before + 1


def test_local_tunnel_ready_timeout(fake_api: FakeAPIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A kubectl that never opens its local port.
    (tmp_path / "kubectl").write_text("#!/bin/sh\nexec sleep 30\n")
    (tmp_path / "kubectl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    sandbox = _sandbox(fake_api, SandboxLocalTunnelConnectionConfig(port_forward_ready_timeout=0.5))
    start = time.monotonic()
    with pytest.raises(SandboxPortForwardError, match="did not open local port"):
        sandbox.files.exists("x")
    assert time.monotonic() - start < 5


def test_kubectl_missing(fake_api: FakeAPIServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    sandbox = _sandbox(fake_api, SandboxLocalTunnelConnectionConfig())
    with pytest.raises(SandboxPortForwardError, match="kubectl was not found"):
        sandbox.commands.run("true")


def test_local_tunnel_death_is_reported_then_reconnects(
    fake_api: FakeAPIServer, runtime: FakeRuntime, fake_kubectl: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_KUBECTL_TARGET", f"127.0.0.1:{runtime.port}")
    monkeypatch.setenv("FAKE_KUBECTL_DIE_AFTER", "2")  # readiness probe + one request
    sandbox = _sandbox(fake_api, SandboxLocalTunnelConnectionConfig())
    sandbox.commands.run("true")
    proc = sandbox.connector.strategy.tunnel._proc  # type: ignore[union-attr]
    sandbox.connector.session.close()  # type: ignore[union-attr]  # force a fresh TCP connection
    with pytest.raises((SandboxPortForwardError, SandboxRequestError)):
        sandbox.commands.run("true")
    proc.wait(timeout=5)
    # The next call starts a new kubectl.
    assert sandbox.commands.run("echo again").stdout == "again\n"
    assert len(fake_kubectl.read_text().splitlines()) == 2
    sandbox.close_connection()


def test_gateway_discovery(fake_api: FakeAPIServer, runtime: FakeRuntime) -> None:
    fake_api.put("gateways", {"metadata": {"name": "gw", "namespace": "infra"}, "status": {"addresses": [{"value": "2130706433"}]}})

    def publish() -> None:
        time.sleep(0.3)
        fake_api.put(
            "gateways",
            {"metadata": {"name": "gw", "namespace": "infra"}, "status": {"addresses": [{"value": 7}, {"value": "127.0.0.1"}]}},
        )

    threading.Thread(target=publish, daemon=True).start()
    before = _count("gateway", "success")
    helper = K8sHelper()
    assert helper.wait_for_gateway_address("gw", "infra", 10) == "127.0.0.1"
    assert _count("gateway", "success") == before  # metric is recorded by the strategy, not the helper
    # End to end through the strategy: address without port means port 80, so
    # point the config at a gateway whose address we cannot serve and only
    # check the discovered base URL.
    sandbox = _sandbox(fake_api, SandboxGatewayConnectionConfig(gateway_name="gw", gateway_namespace="infra"))
    assert sandbox.connector.connect() == "http://127.0.0.1"  # type: ignore[union-attr]
    assert _count("gateway", "success") == before + 1


def test_gateway_timeout_records_failure(fake_api: FakeAPIServer) -> None:
    before = _count("gateway", "failure")
    sandbox = _sandbox(fake_api, SandboxGatewayConnectionConfig(gateway_name="absent", gateway_ready_timeout=1))
    with pytest.raises(TimeoutError, match="absent"):
        sandbox.commands.run("true")
    assert _count("gateway", "failure") == before + 1


def test_direct_records_no_discovery(fake_api: FakeAPIServer, runtime: FakeRuntime) -> None:
    before = get_metrics()
    _sandbox(fake_api, SandboxDirectConnectionConfig(api_url=runtime.url)).commands.run("true")
    assert get_metrics() == before
