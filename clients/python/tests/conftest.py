"""Shared fixtures: real loopback servers standing in for the API server, the runtime and kubectl."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from k8s_agent_sandbox import connector as sync_connector

from .fakes.apiserver import FakeAPIServer
from .fakes.runtime import FakeRuntime

FAKES = Path(__file__).parent / "fakes"


@pytest.fixture
def fake_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAPIServer]:
    """A fake kube-apiserver with KUBECONFIG pointing at it."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with FakeAPIServer() as server:
        monkeypatch.setenv("KUBECONFIG", server.kubeconfig(str(tmp_path / "kubeconfig")))
        yield server


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[FakeRuntime]:
    """A legacy runtime API server working on a temp directory."""
    root = tmp_path / "workspace"
    root.mkdir()
    with FakeRuntime(str(root)) as server:
        yield server


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the retry policy but drop the backoff sleeps."""
    monkeypatch.setattr(sync_connector, "RETRY_BACKOFF_FACTOR", 0)
    try:
        from k8s_agent_sandbox.aio import connector as async_connector
    except ImportError:
        return
    monkeypatch.setattr(async_connector, "BACKOFF_SECONDS", 0)


@pytest.fixture
def fake_kubectl(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Put the fake kubectl first on PATH; returns the file its argv is logged to."""
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ.get('PATH', '')}")
    log = tmp_path / "kubectl.log"
    monkeypatch.setenv("FAKE_KUBECTL_LOG", str(log))
    return log
