"""Packaging: exports, exceptions, no network at import, async placeholder."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import k8s_agent_sandbox as sdk


def test_public_exports() -> None:
    for name in (
        "SandboxClient", "AsyncSandboxClient", "get_metrics", "print_metrics",
        "SandboxError", "SandboxNotReadyError", "SandboxNotFoundError", "SnapshotNotFoundError",
        "SandboxTemplateNotFoundError", "SandboxWarmPoolNotFoundError", "SandboxPortForwardError",
        "SandboxMetadataError", "SandboxRequestError", "SandboxClaimFailedError",
    ):
        assert hasattr(sdk, name), name
    for exc in (sdk.SandboxNotReadyError, sdk.SandboxWarmPoolNotFoundError, sdk.SandboxRequestError, sdk.SandboxClaimFailedError):
        assert issubclass(exc, sdk.SandboxError) and issubclass(exc, RuntimeError)
    err = sdk.SandboxRequestError("boom", status_code=502, response="r")
    assert (str(err), err.status_code, err.response) == ("boom", 502, "r")
    from k8s_agent_sandbox.models import ExecutionResult, FileEntry  # noqa: F401
    from k8s_agent_sandbox.extensions.computer_use import ComputerUseSandboxClient, SandboxWithComputerUseSupport

    assert ComputerUseSandboxClient.sandbox_class is SandboxWithComputerUseSupport


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)


def test_import_does_no_network() -> None:
    proc = _run(
        """
        import socket
        def refuse(*a, **k):
            raise AssertionError("network used at import time")
        socket.socket.connect = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse
        import k8s_agent_sandbox, k8s_agent_sandbox.extensions.computer_use
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_async_placeholder_without_extra() -> None:
    proc = _run(
        """
        import sys
        sys.modules["httpx"] = None
        import k8s_agent_sandbox
        try:
            k8s_agent_sandbox.AsyncSandboxClient(None)
        except ImportError as e:
            print("ImportError:", e)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'k8s-agent-sandbox[async]'" in proc.stdout


def test_computer_use_agent(fake_api, runtime) -> None:  # type: ignore[no-untyped-def]
    from k8s_agent_sandbox.extensions.computer_use import ComputerUseSandboxClient

    from ..fakes.apiserver import ready_claim

    fake_api.on_create = ready_claim
    client = ComputerUseSandboxClient(sdk.SandboxDirectConnectionConfig(api_url=runtime.url))
    sandbox = client.create_sandbox("cu-pool")
    runtime.script.append((200, {"Content-Type": "application/json"}, b'{"stdout": "done", "stderr": "", "exit_code": 0}'))
    assert sandbox.agent("open the browser").stdout == "done"
    assert runtime.requests[-1].path == "/agent" and b"open the browser" in runtime.requests[-1].body
    assert runtime.requests[-1].headers["X-Sandbox-ID"] == sandbox.sandbox_id
    client.delete_all()
