"""Connector behaviour against real loopback HTTP servers."""

from __future__ import annotations

import socket

import pytest

from k8s_agent_sandbox import (
    SandboxDirectConnectionConfig,
    SandboxInClusterConnectionConfig,
    SandboxRequestError,
)
from k8s_agent_sandbox.connector import InClusterStrategy, SandboxConnector
from k8s_agent_sandbox.k8s_helper import K8sHelper

from ..fakes.apiserver import FakeAPIServer
from ..fakes.runtime import FakeRuntime


def put_sandbox(api: FakeAPIServer, name: str = "sb-1", pod_ips: list[str] | None = None) -> None:
    api.put(
        "sandboxes",
        {"metadata": {"name": name, "namespace": "default"}, "status": {"podIPs": [{"ip": ip} for ip in (pod_ips or [])]}},
    )


def direct(runtime: FakeRuntime, **kw: object) -> SandboxConnector:
    return SandboxConnector("sb-1", "default", SandboxDirectConnectionConfig(api_url=runtime.url, **kw), K8sHelper())


def test_direct_sends_router_headers(fake_api: FakeAPIServer, runtime: FakeRuntime) -> None:
    put_sandbox(fake_api, pod_ips=["fd00::1", "10.0.0.7"])
    conn = direct(runtime, server_port=9999)
    conn.send_request("GET", "", timeout=12.5)
    headers = runtime.requests[-1].headers
    assert headers["X-Sandbox-ID"] == "sb-1"
    assert headers["X-Sandbox-Namespace"] == "default"
    assert headers["X-Sandbox-Port"] == "9999"
    assert headers["X-Sandbox-Timeout"] == "12.5"
    assert headers["X-Sandbox-Pod-IP"] == "10.0.0.7"


def test_timeout_header_tuple_and_absent(fake_api: FakeAPIServer, runtime: FakeRuntime) -> None:
    put_sandbox(fake_api)
    conn = direct(runtime)
    conn.send_request("GET", "", timeout=(3, 40))
    assert runtime.requests[-1].headers["X-Sandbox-Timeout"] == "40"
    conn.send_request("GET", "", timeout=None)
    assert "X-Sandbox-Timeout" not in runtime.requests[-1].headers
    # No pod IP known: header omitted.
    assert "X-Sandbox-Pod-IP" not in runtime.requests[-1].headers


def test_pod_ip_lookup_disabled_after_forbidden(fake_api: FakeAPIServer, runtime: FakeRuntime) -> None:
    fake_api.forbid_sandbox_get = True
    conn = direct(runtime)
    conn.send_request("GET", "")
    conn.send_request("GET", "")
    sandbox_gets = [r for r in fake_api.requests if "/sandboxes/" in r[1]]
    assert len(sandbox_gets) == 1
    assert "X-Sandbox-Pod-IP" not in runtime.requests[-1].headers


def test_pod_ip_cached_and_reset_after_error(fake_api: FakeAPIServer, runtime: FakeRuntime) -> None:
    put_sandbox(fake_api, pod_ips=["10.0.0.7"])
    conn = direct(runtime)
    conn.send_request("GET", "")
    conn.send_request("GET", "")
    assert len([r for r in fake_api.requests if "/sandboxes/" in r[1]]) == 1
    put_sandbox(fake_api, pod_ips=["10.0.0.8"])
    runtime.script.append((400, {"Content-Type": "application/json"}, b'{"detail":"Invalid target IP address."}'))
    with pytest.raises(SandboxRequestError) as err:
        conn.send_request("GET", "")
    assert err.value.status_code == 400
    assert "Invalid target IP address." in str(err.value)
    conn.send_request("GET", "")
    assert runtime.requests[-1].headers["X-Sandbox-Pod-IP"] == "10.0.0.8"


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirects_raise(fake_api: FakeAPIServer, runtime: FakeRuntime, status: int) -> None:
    put_sandbox(fake_api)
    runtime.script.append((status, {"Location": "http://169.254.169.254/"}, b""))
    with pytest.raises(SandboxRequestError) as err:
        direct(runtime).send_request("GET", "list/x")
    assert err.value.status_code == status
    assert len(runtime.requests) == 1  # not followed


@pytest.mark.parametrize("status", [300, 304])
def test_other_3xx_returned(fake_api: FakeAPIServer, runtime: FakeRuntime, status: int) -> None:
    put_sandbox(fake_api)
    runtime.script.append((status, {"Content-Type": "text/plain"}, b""))
    assert direct(runtime).send_request("GET", "x").status_code == status


def test_5xx_retried_then_succeeds(fake_api: FakeAPIServer, runtime: FakeRuntime) -> None:
    put_sandbox(fake_api)
    runtime.script += [(502, {}, b'{"detail":"Could not connect"}'), (503, {}, b"")]
    result = direct(runtime).send_request("POST", "execute", json={"command": "true"})
    assert result.status_code == 200
    assert [r.path for r in runtime.requests] == ["/execute"] * 3


def test_5xx_exhausted(fake_api: FakeAPIServer, runtime: FakeRuntime) -> None:
    put_sandbox(fake_api)
    runtime.script += [(502, {"Content-Type": "application/json"}, b'{"detail":"Could not connect to the backend sandbox: sb-1"}')] * 6
    conn = direct(runtime)
    with pytest.raises(SandboxRequestError) as err:
        conn.send_request("GET", "download/x")
    assert err.value.status_code == 502
    assert "Could not connect to the backend sandbox" in str(err.value)
    assert len(runtime.requests) == 6  # 1 + 5 retries
    assert conn.base_url is None  # closed; the next call reconnects


def test_4xx_not_retried(fake_api: FakeAPIServer, runtime: FakeRuntime) -> None:
    put_sandbox(fake_api)
    with pytest.raises(SandboxRequestError) as err:
        direct(runtime).send_request("GET", "download/missing")
    assert err.value.status_code == 404
    assert "File not found" in str(err.value)
    assert len(runtime.requests) == 1


def test_allowed_statuses(fake_api: FakeAPIServer, runtime: FakeRuntime) -> None:
    put_sandbox(fake_api)
    assert direct(runtime).send_request("GET", "download/missing", allowed_statuses=(404,)).status_code == 404


def test_router_unreachable(fake_api: FakeAPIServer) -> None:
    put_sandbox(fake_api)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conn = SandboxConnector("sb-1", "default", SandboxDirectConnectionConfig(api_url=f"http://127.0.0.1:{port}"), K8sHelper())
    with pytest.raises(SandboxRequestError) as err:
        conn.send_request("GET", "")
    assert err.value.status_code is None
    assert isinstance(err.value, RuntimeError)
    assert f"api_url='http://127.0.0.1:{port}'" in str(err.value)


def test_in_cluster_uses_pod_ip_without_router_headers(fake_api: FakeAPIServer, runtime: FakeRuntime) -> None:
    put_sandbox(fake_api, pod_ips=["127.0.0.1"])
    cfg = SandboxInClusterConnectionConfig(server_port=runtime.port)
    conn = SandboxConnector("sb-1", "default", cfg, K8sHelper())
    conn.send_request("GET", "", timeout=30)
    assert conn.base_url == f"http://127.0.0.1:{runtime.port}"
    assert not any(k.lower().startswith("x-sandbox") for k in runtime.requests[-1].headers)
    # Cached until close: a changed pod IP is not picked up ...
    put_sandbox(fake_api, pod_ips=["fd00::9"])
    conn.send_request("GET", "")
    assert conn.base_url == f"http://127.0.0.1:{runtime.port}"
    # ... but is after close (IPv6 bracketed).
    conn.close()
    assert conn.strategy.connect() == f"http://[fd00::9]:{runtime.port}"


def test_in_cluster_dns_fallback(fake_api: FakeAPIServer) -> None:
    strategy = InClusterStrategy(SandboxInClusterConnectionConfig(server_port=7000), "sb-x", "team", K8sHelper())
    assert strategy.connect() == "http://sb-x.team.svc.cluster.local:7000"
