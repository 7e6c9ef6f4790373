"""AsyncSandboxClient against the fake API server and a real loopback runtime."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from k8s_agent_sandbox import (
    AsyncSandboxClient,
    SandboxDirectConnectionConfig,
    SandboxdPodTunnelConnectionConfig,
    SandboxInClusterConnectionConfig,
    SandboxLocalTunnelConnectionConfig,
    SandboxRequestError,
    SandboxWarmPoolNotFoundError,
)
from k8s_agent_sandbox.aio.connector import async_timeout_header_value

from ..fakes.apiserver import FakeAPIServer, fail_claim, ready_claim
from ..fakes.runtime import FakeRuntime


def client_for(runtime: FakeRuntime) -> AsyncSandboxClient:
    return AsyncSandboxClient(SandboxDirectConnectionConfig(api_url=runtime.url), cleanup=False)


async def test_create_run_files_terminate(fake_api: FakeAPIServer, runtime: FakeRuntime) -> None:
    fake_api.on_create = lambda s, c: ready_claim(s, c, sandbox_name="sb-async", pod_ips=["10.9.8.7"])
    async with client_for(runtime) as client:
        sandbox = await client.create_sandbox("python-sandbox-pool", labels={"k": "v"})
        assert sandbox.sandbox_id == "sb-async"
        await sandbox.files.write("dir/hello.txt", "hello async")
        assert await sandbox.files.read("dir/hello.txt") == b"hello async"
        assert await sandbox.files.exists("dir/hello.txt")
        assert [e.name for e in await sandbox.files.list("dir")] == ["hello.txt"]
        result = await sandbox.commands.run("cat dir/hello.txt", timeout=httpx.Timeout(5.0, read=42.0))
        assert (result.stdout, result.exit_code) == ("hello async", 0)
        headers = runtime.requests[-1].headers
        assert headers["X-Sandbox-ID"] == "sb-async" and headers["X-Sandbox-Timeout"] == "42.0"
        assert headers["X-Sandbox-Pod-IP"] == "10.9.8.7"
        assert await sandbox.status() == ("SandboxReady", "ready")
        assert await sandbox.get_pod_name() == "sb-async-pod"
        assert await client.list_all_sandboxes() == [sandbox.claim_name]
        assert client.list_active_sandboxes() == [("default", sandbox.claim_name)]
        claim = fake_api.get("sandboxclaims", "default", sandbox.claim_name)
        assert claim["metadata"]["labels"] == {"k": "v", "agents.x-k8s.io/created-by": "python-client"}
        with pytest.raises(NotImplementedError):
            await sandbox.files.delete("x")
    assert fake_api.claims() == []  # the context manager deleted it


async def test_errors(fake_api: FakeAPIServer, runtime: FakeRuntime) -> None:
    fake_api.on_create = fail_claim("WarmPoolNotFound", "missing")
    client = client_for(runtime)
    with pytest.raises(SandboxWarmPoolNotFoundError):
        await client.create_sandbox("missing-pool", sandbox_ready_timeout=10)
    assert fake_api.claims() == []
    fake_api.on_create = fail_claim("SandboxNotReady", "waiting")
    with pytest.raises(TimeoutError):
        await client.create_sandbox("slow-pool", sandbox_ready_timeout=1)
    assert fake_api.claims() == []
    with pytest.raises(ValueError):
        await client.create_sandbox("")
    await client.close()


async def test_cancellation_deletes_claim(fake_api: FakeAPIServer, runtime: FakeRuntime) -> None:
    fake_api.on_create = fail_claim("SandboxNotReady", "waiting")
    client = client_for(runtime)
    task = asyncio.create_task(client.create_sandbox("pool", sandbox_ready_timeout=30))
    for _ in range(100):
        await asyncio.sleep(0.05)
        if fake_api.claims():
            break
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(40):
        if not fake_api.claims():
            break
        await asyncio.sleep(0.05)
    assert fake_api.claims() == []
    await client.close()


async def test_retry_redirect_and_cache_reset(fake_api: FakeAPIServer, runtime: FakeRuntime) -> None:
    fake_api.on_create = lambda s, c: ready_claim(s, c, pod_ips=["10.0.0.1"])
    client = client_for(runtime)
    sandbox = await client.create_sandbox("pool")
    runtime.script += [(500, {}, b""), (502, {}, b""), (503, {}, b"")]
    assert (await sandbox.commands.run("echo ok")).stdout == "ok\n"
    assert len(runtime.requests) == 4
    runtime.script += [(504, {"Content-Type": "application/json"}, b'{"detail":"timeout"}')] * 6
    with pytest.raises(SandboxRequestError) as err:
        await sandbox.commands.run("true")
    assert err.value.status_code == 504 and len(runtime.requests) == 10
    runtime.script.append((307, {"Location": "/elsewhere"}, b""))
    with pytest.raises(SandboxRequestError) as err:
        await sandbox.files.read("a")
    assert err.value.status_code == 307
    # Pod IP is re-read after an error.
    obj = fake_api.get("sandboxes", "default", sandbox.sandbox_id)
    obj["status"]["podIPs"] = [{"ip": "10.0.0.2"}]
    fake_api.put("sandboxes", obj)
    await sandbox.commands.run("true")
    assert runtime.requests[-1].headers["X-Sandbox-Pod-IP"] == "10.0.0.2"
    await client.delete_all()
    await client.close()


async def test_get_sandbox_warmpool_check(fake_api: FakeAPIServer, runtime: FakeRuntime) -> None:
    fake_api.on_create = ready_claim
    client = client_for(runtime)
    sandbox = await client.create_sandbox("pool-a")
    assert await client.get_sandbox(sandbox.claim_name) is sandbox
    other = client_for(runtime)
    again = await other.get_sandbox(sandbox.claim_name, warmpool_name="pool-a")
    assert again.sandbox_id == sandbox.sandbox_id
    with pytest.raises(ValueError, match="Refusing to reattach"):
        await other.get_sandbox(sandbox.claim_name, warmpool_name="pool-b")
    assert await client.get_sandbox_claim_warmpool_name(sandbox.claim_name) == "pool-a"
    await sandbox.terminate()
    await sandbox.terminate()
    await client.close()
    await other.close()


async def test_in_cluster_has_no_router_headers(fake_api: FakeAPIServer, runtime: FakeRuntime) -> None:
    fake_api.on_create = lambda s, c: ready_claim(s, c, pod_ips=["127.0.0.1"])
    client = AsyncSandboxClient(SandboxInClusterConnectionConfig(server_port=runtime.port), cleanup=False)
    sandbox = await client.create_sandbox("pool")
    await sandbox.commands.run("true", timeout=9)
    assert not any(k.lower().startswith("x-sandbox") for k in runtime.requests[-1].headers)
    await client.delete_all()
    await client.close()


def test_unsupported_configs(fake_api: FakeAPIServer) -> None:
    with pytest.raises(ValueError, match="LocalTunnel"):
        AsyncSandboxClient(SandboxLocalTunnelConnectionConfig())
    with pytest.raises(NotImplementedError):
        AsyncSandboxClient(SandboxdPodTunnelConnectionConfig())
    with pytest.raises(TypeError):
        AsyncSandboxClient()  # type: ignore[call-arg]


def test_cleanup_default_registers_atexit(fake_api: FakeAPIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    registered: list[Any] = []
    monkeypatch.setattr("atexit.register", lambda fn: registered.append(fn))
    AsyncSandboxClient(SandboxDirectConnectionConfig(api_url="http://127.0.0.1:9"))
    assert len(registered) == 1


def test_atexit_cleanup_deletes_in_fresh_loop(fake_api: FakeAPIServer, runtime: FakeRuntime) -> None:
    fake_api.on_create = ready_claim
    client = client_for(runtime)
    asyncio.run(client.create_sandbox("pool"))
    assert len(fake_api.claims()) == 1
    client._atexit_cleanup()
    assert fake_api.claims() == []


@pytest.mark.parametrize(
    ("timeout", "header"),
    [(httpx.Timeout(10.0), "10.0"), (httpx.Timeout(5.0, read=None), None), (30, "30"), (None, None)],
)
def test_async_timeout_header(timeout: Any, header: str | None) -> None:
    assert async_timeout_header_value(timeout) == header
