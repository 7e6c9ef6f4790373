"""Session fixture: the local stack of `go run ./hack/devstack`.

The stack (real kube-apiserver + etcd, controllers, sandbox-router and one
sandboxd process per sandbox Pod) prints one JSON line
``{"kubeconfig", "router_url", "namespace", "warmpool", ...}`` on stdout when
ready and runs until its stdin closes.

Environment:
  AGENT_SANDBOX_DEVSTACK_BIN   prebuilt devstack binary (default: build it
                               with `go build` into a temp dir, else `go run`).
  AGENT_SANDBOX_DEVSTACK_INFO  path of a JSON file holding the ready line of a
                               devstack that is already running (reuse it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[4]
START_TIMEOUT = float(os.environ.get("AGENT_SANDBOX_DEVSTACK_START_TIMEOUT", "600"))


@dataclass(frozen=True)
class Devstack:
    kubeconfig: str
    router_url: str
    namespace: str
    warmpool: str
    server: str


def _from_line(line: str) -> Devstack:
    info = json.loads(line)
    return Devstack(info["kubeconfig"], info["router_url"], info["namespace"], info["warmpool"], info.get("server", ""))


def _command(workdir: str) -> list[str]:
    binary = os.environ.get("AGENT_SANDBOX_DEVSTACK_BIN")
    if binary:
        return [binary]
    go = shutil.which("go")
    if go is None:
        pytest.fail("integration tests need Go to build hack/devstack (or AGENT_SANDBOX_DEVSTACK_BIN)")
    out = os.path.join(workdir, "devstack")
    # Build once so that closing stdin reaches the program itself (go run
    # would sit between us and it); fall back to go run if building fails.
    build = subprocess.run([go, "build", "-o", out, "./hack/devstack"], cwd=REPO_ROOT, capture_output=True, text=True)
    if build.returncode == 0:
        return [out]
    return [go, "run", "./hack/devstack"]


@pytest.fixture(scope="session")
def devstack() -> Iterator[Devstack]:
    """Start the devstack for the session (or reuse one named by AGENT_SANDBOX_DEVSTACK_INFO)."""
    info_file = os.environ.get("AGENT_SANDBOX_DEVSTACK_INFO")
    if info_file:
        yield _from_line(Path(info_file).read_text().strip().splitlines()[0])
        return
    workdir = tempfile.mkdtemp(prefix="pysdk-devstack-")
    log_path = os.path.join(workdir, "devstack.log")
    proc = subprocess.Popen(
        # --late-binding: claims with env stay warm (env delivered to sandboxd).
        [*_command(workdir), "--log-file", log_path, "--late-binding"],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    deadline = time.monotonic() + START_TIMEOUT
    while not lines and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if not lines:
        proc.kill()
        _, err = proc.communicate(timeout=30)
        tail = Path(log_path).read_text()[-4000:] if os.path.exists(log_path) else ""
        pytest.fail(f"devstack did not become ready (exit {proc.returncode}):\n{err[-4000:]}\n{tail}")
    try:
        yield _from_line(lines[0])
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # the documented way to stop it
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def kubeconfig_env(devstack: Devstack, monkeypatch: pytest.MonkeyPatch) -> Devstack:
    """Point the SDK's Kubernetes client at the devstack."""
    monkeypatch.setenv("KUBECONFIG", devstack.kubeconfig)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return devstack
