"""sandboxd mode: REST files (PUT/GET/HEAD/DELETE) and gRPC Execute, against real loopback servers."""

from __future__ import annotations

import json
from concurrent import futures
from pathlib import Path

import pytest

from k8s_agent_sandbox import Sandbox, SandboxdPodTunnelConnectionConfig, SandboxRequestError
from k8s_agent_sandbox.k8s_helper import K8sHelper
from k8s_agent_sandbox.sandboxd import decode_execute_response, encode_execute_request

from ..fakes.apiserver import FakeAPIServer
from ..fakes.runtime import FakeRuntime


def test_protobuf_roundtrip() -> None:
    req = encode_execute_request(["/bin/sh", "-c", "echo hi"])
    assert req == b"\x0a\x16\x0a\x07/bin/sh\x0a\x02-c\x0a\x07echo hi"
    # ExecuteResponse{exit_code: -1, stdout: "out", stderr: "err", stdout_truncated: true}
    neg = b"\x08" + b"\xff" * 9 + b"\x01"
    decoded = decode_execute_response(neg + b"\x12\x03out\x1a\x03err\x20\x01\x35\x00\x00\x00\x00")
    assert decoded == {"exit_code": -1, "stdout": b"out", "stderr": b"err", "stdout_truncated": True, "stderr_truncated": False}
    with pytest.raises(ValueError):
        decode_execute_response(b"\x12\x05ab")


@pytest.fixture
def sandboxd_sandbox(fake_api: FakeAPIServer, runtime: FakeRuntime, fake_kubectl: Path, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    monkeypatch.setenv("FAKE_KUBECTL_TARGET", f"127.0.0.1:{runtime.port}")
    fake_api.put("sandboxes", {"metadata": {"name": "sb-1", "namespace": "ns1", "annotations": {"agents.x-k8s.io/pod-name": "pod-xyz"}}})
    return Sandbox("c", "sb-1", "ns1", SandboxdPodTunnelConnectionConfig(rest_port=8081, grpc_port=9091), K8sHelper())


def test_sandboxd_files(sandboxd_sandbox: Sandbox, runtime: FakeRuntime, fake_kubectl: Path) -> None:
    sb = sandboxd_sandbox
    runtime.script.append((201, {"Content-Type": "application/json"}, b"{}"))
    sb.files.write("dir/a.txt", b"raw-bytes")
    put = runtime.requests[-1]
    assert (put.method, put.path, put.body) == ("PUT", "/v1/files/dir%2Fa%2Etxt", b"raw-bytes")
    assert put.headers["Content-Type"] == "application/octet-stream"
    assert not any(k.lower().startswith("x-sandbox") for k in put.headers)
    argv = json.loads(fake_kubectl.read_text().splitlines()[0])
    assert argv[:2] == ["port-forward", "pod/pod-xyz"] and argv[2].endswith(":8081") and argv[3].endswith(":9091")
    assert argv[4:] == ["-n", "ns1"]
    runtime.script.append((200, {"Content-Type": "application/octet-stream"}, b"raw-bytes"))
    assert sb.files.read("dir/a.txt") == b"raw-bytes"
    assert runtime.requests[-1].path == "/v1/files/dir%2Fa%2Etxt"
    listing = {"path": "dir", "entries": [
        {"name": "a.txt", "size": 9, "type": "file", "modified_at": "2026-01-01T00:00:00Z", "mode": "-rw-r--r--"},
        {"name": "dev", "size": 0, "type": "device", "modified_at": "2026-01-01T00:00:00Z"},
    ]}
    runtime.script.append((200, {"Content-Type": "application/json"}, json.dumps(listing).encode()))
    (entry,) = sb.files.list("dir")
    assert (entry.name, entry.mode) == ("a.txt", "-rw-r--r--")
    runtime.script.append((200, {}, b""))
    assert sb.files.exists("dir/a.txt") is True
    assert runtime.requests[-1].method == "HEAD"
    runtime.script.append((404, {}, b""))
    assert sb.files.exists("nope") is False
    runtime.script.append((403, {"Content-Type": "application/json"}, b'{"code":"forbidden","message":"path escapes"}'))
    with pytest.raises(SandboxRequestError) as err:
        sb.files.exists("../x")
    assert err.value.status_code == 403  # HEAD answers carry no body
    runtime.script.append((204, {}, b""))
    sb.files.delete("dir", recursive=True)
    assert (runtime.requests[-1].method, runtime.requests[-1].path) == ("DELETE", "/v1/files/dir?recursive=true")
    runtime.script.append((204, {}, b""))
    sb.files.delete("dir/a.txt")
    assert runtime.requests[-1].path == "/v1/files/dir%2Fa%2Etxt"
    sb.close_connection()


def test_sandboxd_run_over_grpc(fake_api: FakeAPIServer, fake_kubectl: Path, monkeypatch: pytest.MonkeyPatch, runtime: FakeRuntime) -> None:
    grpc = pytest.importorskip("grpc", reason="the grpc extra is part of the test dependencies")
    seen: list[bytes] = []

    def execute(request: bytes, context: object) -> bytes:
        seen.append(request)
        return b"\x08\x07\x12\x06hello\n\x1a\x02\xff\xfe"

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.method_handlers_generic_handler(
        "process.v1.ProcessService", {"Execute": grpc.unary_unary_rpc_method_handler(execute)}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        # The fake kubectl forwards both local ports to one target: use the gRPC server.
        monkeypatch.setenv("FAKE_KUBECTL_TARGET", f"127.0.0.1:{port}")
        fake_api.put("sandboxes", {"metadata": {"name": "sb-2", "namespace": "default"}})
        sb = Sandbox("c", "sb-2", "default", SandboxdPodTunnelConnectionConfig(), K8sHelper())
        result = sb.commands.run("echo hello; exit 7", timeout=10)
        assert (result.stdout, result.stderr, result.exit_code) == ("hello\n", "\ufffd\ufffd", 7)
        assert seen == [encode_execute_request(["/bin/sh", "-c", "echo hello; exit 7"])]
        sb.close_connection()
    finally:
        server.stop(0)
