"""The SDK against the real local stack (apiserver, controllers, router, sandboxd)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from k8s_agent_sandbox import (
    AsyncSandboxClient,
    SandboxClient,
    SandboxDirectConnectionConfig,
    SandboxdPodTunnelConnectionConfig,
    SandboxRequestError,
    SandboxWarmPoolNotFoundError,
)
from k8s_agent_sandbox.k8s_helper import K8sHelper

from .conftest import REPO_ROOT, Devstack

pytestmark = pytest.mark.integration

SNIPPET = '''
from k8s_agent_sandbox import SandboxClient
client = SandboxClient()
sandbox = client.create_sandbox(warmpool="python-sandbox-pool", namespace="default")
try:
    sandbox.files.write("hello.py", 'print("Hello, World! Greetings from inside the sandbox.")\\n')
    result = sandbox.commands.run("python3 hello.py")
    print(result.stdout)
finally:
    sandbox.terminate()
'''


def _claims(namespace: str) -> list[str]:
    return [c["metadata"]["name"] for c in K8sHelper().list_sandbox_claims(namespace)]


def test_issue_snippet_verbatim_default_local_tunnel(kubeconfig_env: Devstack) -> None:
    """The published-SDK snippet, unchanged: default config = kubectl port-forward to sandbox-router-svc."""
    if not kubeconfig_env.namespace == "default" or kubeconfig_env.warmpool != "python-sandbox-pool":
        pytest.fail("devstack must serve python-sandbox-pool in namespace default for the snippet")
    before = set(_claims("default"))
    proc = subprocess.run([sys.executable, "-c", SNIPPET], capture_output=True, text=True, timeout=180, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Hello, World! Greetings from inside the sandbox.\n\n"
    assert set(_claims("default")) <= before  # terminated


def test_example_script(kubeconfig_env: Devstack) -> None:
    script = REPO_ROOT / "examples" / "python-sdk" / "hello.py"
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "Hello, World! Greetings from inside the sandbox." in proc.stdout


@pytest.fixture
def client(kubeconfig_env: Devstack) -> SandboxClient:
    return SandboxClient(SandboxDirectConnectionConfig(api_url=kubeconfig_env.router_url))


def test_create_run_files_terminate_via_router(client: SandboxClient, kubeconfig_env: Devstack) -> None:
    ns = kubeconfig_env.namespace
    sandbox = client.create_sandbox(kubeconfig_env.warmpool, namespace=ns, labels={"suite": "pysdk"})
    claim_name = sandbox.claim_name
    assert claim_name and re.fullmatch(r"sandbox-claim-[0-9a-f]{8}", claim_name)
    claim = K8sHelper().get_sandbox_claim(claim_name, ns)
    assert claim["metadata"]["labels"]["agents.x-k8s.io/created-by"] == "python-client"
    assert claim["metadata"]["annotations"]["agents.x-k8s.io/client-first-requested-at"].endswith("+00:00")
    assert claim["status"]["sandbox"]["name"] == sandbox.sandbox_id
    assert sandbox.status()[0] == "SandboxReady"
    assert sandbox.get_pod_ip()

    result = sandbox.commands.run("echo 'Hello from SDK'")
    assert (result.stdout, result.stderr, result.exit_code) == ("Hello from SDK\n", "", 0)
    failing = sandbox.commands.run("sh -c 'echo bad >&2; exit 4'")
    assert (failing.stderr, failing.exit_code) == ("bad\n", 4)

    sandbox.files.write("test.txt", "some text")
    sandbox.files.write("nested/dir/data.bin", bytes(range(256)))
    assert sandbox.files.read("test.txt") == b"some text"
    assert sandbox.files.read("nested/dir/data.bin") == bytes(range(256))
    assert sandbox.files.exists("test.txt") and not sandbox.files.exists("absent.txt")
    names = {e.name: e for e in sandbox.files.list(".")}
    assert names["test.txt"].type == "file" and names["test.txt"].size == 9
    assert names["nested"].type == "directory"
    assert [e.name for e in sandbox.files.list("nested/dir")] == ["data.bin"]
    assert sandbox.commands.run("cat test.txt").stdout == "some text"

    with pytest.raises(SandboxRequestError) as err:
        sandbox.files.read("absent.txt")
    assert err.value.status_code == 404
    with pytest.raises(SandboxRequestError) as err:
        sandbox.files.read("../../etc/passwd", allow_unsafe_paths=True)
    assert err.value.status_code == 403

    assert client.get_sandbox(claim_name, namespace=ns) is sandbox
    assert claim_name in client.list_all_sandboxes(ns, label_selector="suite=pysdk")
    sandbox.terminate()
    assert sandbox.claim_name is None
    assert K8sHelper().get_sandbox_claim(claim_name, ns) is None
    sandbox.terminate()


def test_missing_pool_raises_quickly(client: SandboxClient, kubeconfig_env: Devstack) -> None:
    start = time.monotonic()
    with pytest.raises(SandboxWarmPoolNotFoundError, match="no-such-pool"):
        client.create_sandbox("no-such-pool", namespace=kubeconfig_env.namespace, sandbox_ready_timeout=60)
    assert time.monotonic() - start < 30
    assert not [c for c in _claims(kubeconfig_env.namespace) if c not in client.list_all_sandboxes(kubeconfig_env.namespace)]


def test_not_ready_in_time(client: SandboxClient, kubeconfig_env: Devstack) -> None:
    ns = kubeconfig_env.namespace
    before = set(_claims(ns))
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="sandbox_ready_timeout"):
        # A budget far below what even a warm claim needs.
        client.create_sandbox(kubeconfig_env.warmpool, namespace=ns, sandbox_ready_timeout=0.001)
    assert time.monotonic() - start < 10
    time.sleep(0.5)
    assert set(_claims(ns)) <= before  # the claim was deleted again


def test_router_unreachable(kubeconfig_env: Devstack) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = SandboxClient(SandboxDirectConnectionConfig(api_url=f"http://127.0.0.1:{port}"))
    with client:
        sandbox = client.create_sandbox(kubeconfig_env.warmpool, namespace=kubeconfig_env.namespace)
        with pytest.raises(SandboxRequestError) as err:
            sandbox.commands.run("true")
        assert err.value.status_code is None
        assert "sandbox router" in str(err.value)


def test_context_manager_and_get_from_other_client(client: SandboxClient, kubeconfig_env: Devstack) -> None:
    ns = kubeconfig_env.namespace
    with client.create_sandbox(kubeconfig_env.warmpool, namespace=ns) as sandbox:
        sandbox.files.write("shared.txt", "from first handle")
        other = SandboxClient(SandboxDirectConnectionConfig(api_url=kubeconfig_env.router_url))
        again = other.get_sandbox(sandbox.claim_name, namespace=ns)
        assert again.sandbox_id == sandbox.sandbox_id
        assert again.files.read("shared.txt") == b"from first handle"
        claim_name = sandbox.claim_name
    assert K8sHelper().get_sandbox_claim(claim_name, ns) is None


def test_sandboxd_pod_tunnel(kubeconfig_env: Devstack) -> None:
    """sandboxd REST files over `kubectl port-forward pod/...` (commands need the grpc extra)."""
    client = SandboxClient(SandboxdPodTunnelConnectionConfig())
    with client.create_sandbox(kubeconfig_env.warmpool, namespace=kubeconfig_env.namespace) as sandbox:
        sandbox.files.write("d/x.txt", b"via sandboxd")
        assert sandbox.files.read("d/x.txt") == b"via sandboxd"
        assert sandbox.files.exists("d/x.txt") and not sandbox.files.exists("d/none")
        assert [e.name for e in sandbox.files.list("d")] == ["x.txt"]
        sandbox.files.delete("d", recursive=True)
        assert not sandbox.files.exists("d")
        try:
            import grpc  # noqa: F401
        except ImportError:
            return
        result = sandbox.commands.run("echo via grpc; echo err >&2; exit 3")
        assert (result.stdout, result.stderr, result.exit_code) == ("via grpc\n", "err\n", 3)


def test_async_client(kubeconfig_env: Devstack) -> None:
    async def main() -> None:
        config = SandboxDirectConnectionConfig(api_url=kubeconfig_env.router_url)
        async with AsyncSandboxClient(config, cleanup=False) as client:
            sandbox = await client.create_sandbox(kubeconfig_env.warmpool, namespace=kubeconfig_env.namespace)
            await sandbox.files.write("hello.py", 'print("Hello, World! Greetings from inside the sandbox.")\n')
            result = await sandbox.commands.run("python3 hello.py")
            assert result.stdout == "Hello, World! Greetings from inside the sandbox.\n"
            assert await sandbox.files.exists("hello.py")
            with pytest.raises(SandboxWarmPoolNotFoundError):
                await client.create_sandbox("no-such-pool", namespace=kubeconfig_env.namespace, sandbox_ready_timeout=60)
            claim = sandbox.claim_name
        assert K8sHelper().get_sandbox_claim(claim, kubeconfig_env.namespace) is None

    asyncio.run(main())


def test_no_kubectl_left_behind(kubeconfig_env: Devstack) -> None:
    """The local tunnel's kubectl is stopped by terminate()."""
    client = SandboxClient()
    sandbox = client.create_sandbox(kubeconfig_env.warmpool, namespace=kubeconfig_env.namespace)
    sandbox.commands.run("true")
    proc = sandbox.connector.strategy.tunnel._proc  # type: ignore[union-attr]
    assert proc is not None and proc.poll() is None
    sandbox.terminate()
    assert proc.poll() is not None


def test_env_claim_is_served_warm_and_sees_its_env(client: SandboxClient, kubeconfig_env: Devstack) -> None:
    """create_sandbox(env=...) adopts a warm pool member; the first command sees the env."""
    sandbox = client.create_sandbox(kubeconfig_env.warmpool, namespace=kubeconfig_env.namespace, env={"GREETING": "late-bound"})
    try:
        assert sandbox.sandbox_id != sandbox.claim_name, "the env claim got a cold sandbox"
        assert sandbox.commands.run("printenv GREETING").stdout == "late-bound\n"
    finally:
        sandbox.terminate()
