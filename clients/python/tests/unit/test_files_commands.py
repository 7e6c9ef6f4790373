"""sandbox.commands and sandbox.files over the legacy runtime API (real loopback server)."""

from __future__ import annotations

import json
import os

import pytest

from k8s_agent_sandbox import FileEntry, Sandbox, SandboxDirectConnectionConfig, SandboxRequestError
from k8s_agent_sandbox.k8s_helper import K8sHelper

from ..fakes.apiserver import FakeAPIServer
from ..fakes.runtime import FakeRuntime


@pytest.fixture
def sandbox(fake_api: FakeAPIServer, runtime: FakeRuntime) -> Sandbox:
    fake_api.put("sandboxes", {"metadata": {"name": "sb-1", "namespace": "default"}, "status": {}})
    return Sandbox("claim-1", "sb-1", "default", SandboxDirectConnectionConfig(api_url=runtime.url), K8sHelper())


def test_run(sandbox: Sandbox, runtime: FakeRuntime) -> None:
    result = sandbox.commands.run("echo 'Hello from SDK'")
    assert (result.stdout, result.stderr, result.exit_code) == ("Hello from SDK\n", "", 0)
    req = runtime.requests[-1]
    assert (req.method, req.path) == ("POST", "/execute")
    assert json.loads(req.body) == {"command": "echo 'Hello from SDK'"}
    assert req.headers["X-Sandbox-Timeout"] == "60"
    failed = sandbox.commands.run("sh -c 'echo oops >&2; exit 3'", timeout=5)
    assert (failed.stderr, failed.exit_code) == ("oops\n", 3)


def test_run_result_shapes(sandbox: Sandbox, runtime: FakeRuntime) -> None:
    runtime.script.append((200, {"Content-Type": "application/json"}, b"{}"))
    assert sandbox.commands.run("x").exit_code == -1
    runtime.script.append((200, {"Content-Type": "text/plain"}, b"not json"))
    with pytest.raises(RuntimeError, match="non-JSON"):
        sandbox.commands.run("x")
    runtime.script.append((200, {"Content-Type": "application/json"}, b"[1, 2]"))
    with pytest.raises(RuntimeError, match="unexpected"):
        sandbox.commands.run("x")
    runtime.script.append((200, {"Content-Type": "application/json"}, b'{"exit_code": "abc"}'))
    with pytest.raises(RuntimeError, match="malformed"):
        sandbox.commands.run("x")
    with pytest.raises(ValueError):
        sandbox.commands.run("  ")


def test_write_read_roundtrip(sandbox: Sandbox, runtime: FakeRuntime) -> None:
    sandbox.files.write("hello.py", 'print("hi")\n')
    sandbox.files.write("/data/sub/blob.bin", bytes(range(256)))
    upload = runtime.requests[-1]
    assert upload.path == "/upload"
    assert b'name="file"' in upload.body and b'filename="data/sub/blob.bin"' in upload.body
    with open(os.path.join(runtime.root, "data/sub/blob.bin"), "rb") as fh:
        assert fh.read() == bytes(range(256))
    assert sandbox.files.read("hello.py") == b'print("hi")\n'
    assert runtime.requests[-1].path == "/download/hello%2Epy"
    assert sandbox.files.read("data/sub/blob.bin") == bytes(range(256))
    assert runtime.requests[-1].path == "/download/data%2Fsub%2Fblob%2Ebin"


def test_write_and_read_sanitize(sandbox: Sandbox, runtime: FakeRuntime) -> None:
    for bad in ("../escape", "a/../../b", "", ".", "x\x00"):
        with pytest.raises(ValueError):
            sandbox.files.write(bad, b"x")
        with pytest.raises(ValueError):
            sandbox.files.read(bad)
    assert runtime.requests == []
    with pytest.raises(TypeError):
        sandbox.files.write("a.txt", 123)  # type: ignore[arg-type]


def test_unsafe_paths_bypass(sandbox: Sandbox, runtime: FakeRuntime) -> None:
    with pytest.raises(SandboxRequestError) as err:
        sandbox.files.write("../escape.txt", b"x", allow_unsafe_paths=True)
    assert err.value.status_code == 403
    assert b'filename="../escape.txt"' in runtime.requests[-1].body
    with pytest.raises(SandboxRequestError) as err:
        sandbox.files.read("../etc/passwd", allow_unsafe_paths=True)
    assert err.value.status_code == 403
    assert runtime.requests[-1].path == "/download/%2E%2E%2Fetc%2Fpasswd"


def test_list_and_exists(sandbox: Sandbox, runtime: FakeRuntime) -> None:
    sandbox.files.write("dir/a.txt", "aaa")
    entries = sandbox.files.list(".")
    assert runtime.requests[-1].path == "/list/%2E"
    assert [(e.name, e.type) for e in entries] == [("dir", "directory")]
    (entry,) = sandbox.files.list("dir")
    assert isinstance(entry, FileEntry) and (entry.name, entry.size, entry.type) == ("a.txt", 3, "file")
    assert entry.modified.tzinfo is not None
    assert sandbox.files.exists("dir/a.txt") is True
    assert runtime.requests[-1].path == "/exists/dir%2Fa%2Etxt"
    assert sandbox.files.exists("nope") is False
    with pytest.raises(SandboxRequestError) as err:
        sandbox.files.list("missing")
    assert err.value.status_code == 404


def test_list_shapes(sandbox: Sandbox, runtime: FakeRuntime) -> None:
    runtime.script.append((200, {"Content-Type": "application/json"}, b""))
    assert sandbox.files.list(".") == []
    runtime.script.append((200, {"Content-Type": "application/json"}, b"null"))
    assert sandbox.files.list(".") == []
    body = [
        {"name": "f", "size": 1, "type": "file", "mod_time": 1.0},
        {"name": "l", "size": 1, "type": "symlink", "mod_time": 1.0},
    ]
    runtime.script.append((200, {"Content-Type": "application/json"}, json.dumps(body).encode()))
    assert [e.name for e in sandbox.files.list(".")] == ["f"]
    runtime.script.append((200, {"Content-Type": "application/json"}, b"{oops"))
    with pytest.raises(RuntimeError):
        sandbox.files.list(".")
    runtime.script.append((200, {"Content-Type": "application/json"}, b'{"path": "x"}'))
    with pytest.raises(RuntimeError):
        sandbox.files.exists("x")


def test_legacy_delete_not_supported(sandbox: Sandbox) -> None:
    with pytest.raises(NotImplementedError, match="sandboxd"):
        sandbox.files.delete("a.txt")
