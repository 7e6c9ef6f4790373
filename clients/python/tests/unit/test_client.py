"""SandboxClient and Sandbox lifecycle against a fake API server (real HTTP, watch included)."""

from __future__ import annotations

import datetime as dt
import re
import socket
import time
from typing import Any

import pytest

from k8s_agent_sandbox import (
    SandboxClaimFailedError,
    SandboxClient,
    SandboxDirectConnectionConfig,
    SandboxError,
    SandboxLocalTunnelConnectionConfig,
    SandboxMetadataError,
    SandboxNotFoundError,
    SandboxRequestError,
    SandboxTemplateNotFoundError,
    SandboxWarmPoolNotFoundError,
)
from k8s_agent_sandbox.k8s_helper import K8sHelper

from ..fakes.apiserver import FakeAPIServer, fail_claim, ready_claim
from ..fakes.runtime import FakeRuntime


def make_client(runtime_url: str = "http://127.0.0.1:9") -> SandboxClient:
    return SandboxClient(SandboxDirectConnectionConfig(api_url=runtime_url))


def test_default_connection_is_local_tunnel(fake_api: FakeAPIServer) -> None:
    assert isinstance(SandboxClient().connection_config, SandboxLocalTunnelConnectionConfig)


def test_create_sandbox_success(fake_api: FakeAPIServer, runtime: FakeRuntime) -> None:
    fake_api.on_create = lambda s, c: ready_claim(s, c, sandbox_name="pool-abc12", pod_ips=["10.1.2.3"])
    client = make_client(runtime.url)
    sandbox = client.create_sandbox("python-sandbox-pool")
    assert re.fullmatch(r"sandbox-claim-[0-9a-f]{8}", sandbox.claim_name or "")
    assert sandbox.sandbox_id == "pool-abc12"
    assert sandbox.namespace == "default"
    assert sandbox.is_active
    assert client.list_active_sandboxes() == [("default", sandbox.claim_name)]
    claim = fake_api.get("sandboxclaims", "default", sandbox.claim_name)
    assert claim["apiVersion"] == "extensions.agents.x-k8s.io/v1beta1" and claim["kind"] == "SandboxClaim"
    assert claim["spec"] == {"warmPoolRef": {"name": "python-sandbox-pool"}}
    assert claim["metadata"]["labels"] == {"agents.x-k8s.io/created-by": "python-client"}
    stamp = claim["metadata"]["annotations"]["agents.x-k8s.io/client-first-requested-at"]
    assert dt.datetime.fromisoformat(stamp).utcoffset() == dt.timedelta(0)
    # The watch started from the create response's resourceVersion.
    watches = [q for verb, path, q in fake_api.requests if q.get("watch") == ["true"]]
    assert watches[0]["fieldSelector"] == [f"metadata.name={sandbox.claim_name}"]
    assert watches[0]["resourceVersion"] != ["0"]
    # The router headers carry the Sandbox name and the pod IP.
    sandbox.commands.run("true")
    assert runtime.requests[-1].headers["X-Sandbox-ID"] == "pool-abc12"
    assert runtime.requests[-1].headers["X-Sandbox-Pod-IP"] == "10.1.2.3"
    # Sandbox state helpers.
    assert sandbox.get_pod_name() == "pool-abc12-pod"
    assert sandbox.get_pod_ip() == "10.1.2.3"
    assert sandbox.get_sandbox_name_hash() == "hash-pool-abc12"
    assert sandbox.status() == ("SandboxReady", "ready")
    sandbox.terminate()
    assert fake_api.get("sandboxclaims", "default", "x") is None
    assert fake_api.claims() == []
    assert sandbox.claim_name is None and not sandbox.is_active
    assert sandbox.commands is None and sandbox.files is None
    sandbox.terminate()  # idempotent


def test_manifest_options(fake_api: FakeAPIServer) -> None:
    fake_api.on_create = ready_claim
    vct = [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]
    sandbox = make_client().create_sandbox(
        "pool",
        namespace="team-a",
        labels={"app": "demo", "agents.x-k8s.io/created-by": "someone-else"},
        shutdown_after_seconds=3600,
        volume_claim_templates=vct,
        pod_labels={"tier": "agent"},
        pod_annotations={"example.com/note": "free text, any value"},
    )
    claim = fake_api.get("sandboxclaims", "team-a", sandbox.claim_name)
    assert claim["metadata"]["labels"] == {"app": "demo", "agents.x-k8s.io/created-by": "python-client"}
    spec = claim["spec"]
    assert spec["lifecycle"]["shutdownPolicy"] == "Delete"
    shutdown = dt.datetime.strptime(spec["lifecycle"]["shutdownTime"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
    assert abs((shutdown - dt.datetime.now(dt.timezone.utc)).total_seconds() - 3600) < 60
    assert spec["volumeClaimTemplates"] == vct
    assert spec["additionalPodMetadata"] == {"labels": {"tier": "agent"}, "annotations": {"example.com/note": "free text, any value"}}


def test_create_sandbox_passes_env_through_the_claim(fake_api: FakeAPIServer) -> None:
    fake_api.on_create = ready_claim
    client = make_client()
    sandbox = client.create_sandbox("pool", namespace="team-a", env={"API_KEY": "k", "MODE": "fast"})
    claim = fake_api.get("sandboxclaims", "team-a", sandbox.claim_name)
    assert claim["spec"]["env"] == [{"name": "API_KEY", "value": "k"}, {"name": "MODE", "value": "fast"}]
    with pytest.raises(ValueError, match="not a valid environment variable name"):
        client.create_sandbox("pool", namespace="team-a", env={"A=B": "x"})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"warmpool": ""},
        {"warmpool": "Bad_Pool"},
        {"warmpool": "pool", "namespace": "Not Valid"},
        {"warmpool": "pool", "labels": {"bad key!": "x"}},
        {"warmpool": "pool", "pod_labels": {"k": "bad value!"}},
        {"warmpool": "pool", "shutdown_after_seconds": 1.5},
        {"warmpool": "pool", "shutdown_after_seconds": True},
        {"warmpool": "pool", "shutdown_after_seconds": "60"},
        {"warmpool": "pool", "shutdown_after_seconds": 0},
        {"warmpool": "pool", "sandbox_ready_timeout": 0},
        {"warmpool": "pool", "volume_claim_templates": {"not": "a list"}},
    ],
)
def test_create_rejects_bad_arguments(fake_api: FakeAPIServer, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        make_client().create_sandbox(**kwargs)
    assert fake_api.claims() == [] and fake_api.claims("team-a") == []


def test_missing_warm_pool(fake_api: FakeAPIServer) -> None:
    fake_api.on_create = fail_claim("WarmPoolNotFound", 'SandboxWarmPool "nope" not found')
    start = time.monotonic()
    with pytest.raises(SandboxWarmPoolNotFoundError) as err:
        make_client().create_sandbox("nope", sandbox_ready_timeout=30)
    assert time.monotonic() - start < 5  # fails fast, not at the timeout
    assert "'nope'" in str(err.value) and "kubectl get sandboxwarmpools" in str(err.value)
    assert isinstance(err.value, SandboxError)
    assert fake_api.claims() == []  # cleaned up


def test_missing_template(fake_api: FakeAPIServer) -> None:
    fake_api.on_create = fail_claim("TemplateNotFound", 'SandboxTemplate "t" not found')
    with pytest.raises(SandboxTemplateNotFoundError):
        make_client().create_sandbox("pool", sandbox_ready_timeout=30)
    assert fake_api.claims() == []


@pytest.mark.parametrize("reason", ["InvalidMetadata", "EnvVarsInjectionRejected", "VolumeClaimTemplatesError", "ClaimExpired", "SandboxExpired"])
def test_terminal_reasons_fail_fast(fake_api: FakeAPIServer, reason: str) -> None:
    fake_api.on_create = fail_claim(reason, "nope")
    with pytest.raises(SandboxClaimFailedError, match=reason):
        make_client().create_sandbox("pool", sandbox_ready_timeout=30)
    assert fake_api.claims() == []


def test_transient_reason_then_ready(fake_api: FakeAPIServer) -> None:
    def hook(server: FakeAPIServer, claim: dict[str, Any]) -> None:
        fail_claim("SandboxNotReady", "Sandbox is not ready")(server, claim)
        current = server.get("sandboxclaims", "default", claim["metadata"]["name"])
        current["status"]["sandbox"] = {"name": "sb-early"}  # name before Ready: keep waiting
        server.put("sandboxclaims", current)
        time.sleep(0.2)
        ready_claim(server, claim, sandbox_name="sb-early")

    fake_api.on_create = hook
    sandbox = make_client().create_sandbox("pool", sandbox_ready_timeout=30)
    assert sandbox.sandbox_id == "sb-early"


def test_legacy_status_key(fake_api: FakeAPIServer) -> None:
    def hook(server: FakeAPIServer, claim: dict[str, Any]) -> None:
        current = server.get("sandboxclaims", "default", claim["metadata"]["name"])
        current["status"] = {"sandbox": {"Name": "legacy-sb"}, "conditions": [{"type": "Ready", "status": "True"}]}
        server.put("sandboxclaims", current)

    fake_api.on_create = hook
    assert make_client().create_sandbox("pool").sandbox_id == "legacy-sb"


def test_timeout_deletes_claim(fake_api: FakeAPIServer) -> None:
    fake_api.on_create = fail_claim("SandboxNotReady", "Sandbox is not ready")
    start = time.monotonic()
    with pytest.raises(TimeoutError) as err:
        make_client().create_sandbox("pool", sandbox_ready_timeout=1.5)
    assert 1.4 < time.monotonic() - start < 5
    assert "SandboxNotReady" in str(err.value) and "sandbox_ready_timeout" in str(err.value)
    assert fake_api.claims() == []


def test_claim_deleted_while_waiting(fake_api: FakeAPIServer) -> None:
    def hook(server: FakeAPIServer, claim: dict[str, Any]) -> None:
        time.sleep(0.1)
        server.delete("sandboxclaims", "default", claim["metadata"]["name"])

    fake_api.on_create = hook
    with pytest.raises(SandboxMetadataError, match="deleted"):
        make_client().create_sandbox("pool", sandbox_ready_timeout=10)


def test_watch_410_restarts_from_zero(fake_api: FakeAPIServer) -> None:
    fake_api.expire_watch_once = True
    fake_api.on_create = ready_claim
    sandbox = make_client().create_sandbox("pool", sandbox_ready_timeout=10)
    assert sandbox.sandbox_id == sandbox.claim_name
    rvs = [q["resourceVersion"][0] for _, _, q in fake_api.requests if q.get("watch") == ["true"]]
    assert rvs[0] != "0" and rvs[1] == "0"


def test_watch_non_410_error_reraised(fake_api: FakeAPIServer) -> None:
    fake_api.fail_next["watch"] = (403, "Forbidden")
    with pytest.raises(SandboxRequestError) as err:
        make_client().create_sandbox("pool", sandbox_ready_timeout=10)
    assert err.value.status_code == 403
    assert fake_api.claims() == []


@pytest.mark.parametrize(("status", "reason"), [(409, "AlreadyExists"), (500, "InternalError"), (503, "ServiceUnavailable")])
def test_create_api_errors(fake_api: FakeAPIServer, status: int, reason: str) -> None:
    fake_api.fail_next["create"] = (status, reason)
    with pytest.raises(SandboxRequestError) as err:
        make_client().create_sandbox("pool")
    assert err.value.status_code == status
    assert isinstance(err.value, RuntimeError)


def test_api_server_unreachable(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = FakeAPIServer()  # only to write a kubeconfig; never started
    server.server.server_close()
    kubeconfig = tmp_path / "kc"
    server.kubeconfig(str(kubeconfig))
    kubeconfig.write_text(kubeconfig.read_text().replace(server.url, f"http://127.0.0.1:{port}"))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(SandboxRequestError) as err:
        make_client().create_sandbox("pool")
    assert err.value.status_code is None
    assert "Could not reach the Kubernetes API server" in str(err.value)


def test_missing_kubeconfig(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(SandboxError, match="KUBECONFIG"):
        SandboxClient()


def test_get_list_delete(fake_api: FakeAPIServer) -> None:
    fake_api.on_create = ready_claim
    client = make_client()
    a = client.create_sandbox("pool", labels={"team": "x"})
    b = client.create_sandbox("pool")
    assert client.get_sandbox(a.claim_name) is a
    assert sorted(client.list_all_sandboxes()) == sorted([a.claim_name, b.claim_name])
    assert client.list_all_sandboxes(label_selector="team=x") == [a.claim_name]
    assert client.get_sandbox_claim_warmpool_name(a.claim_name) == "pool"
    # A fresh client re-attaches to an existing claim.
    other = make_client()
    again = other.get_sandbox(b.claim_name)
    assert again is not b and again.sandbox_id == b.sandbox_id and again.is_active
    # Closed handles are replaced.
    a.close_connection()
    assert client.list_active_sandboxes() == [("default", b.claim_name)]
    assert client.get_sandbox(a.claim_name) is not a
    # Sandbox gone while the claim remains.
    fake_api.delete("sandboxes", "default", b.sandbox_id)
    with pytest.raises(SandboxNotFoundError):
        other.get_sandbox(b.claim_name)
    assert other.list_active_sandboxes() == []
    with pytest.raises(SandboxNotFoundError):
        client.get_sandbox("sandbox-claim-missing")
    client.delete_sandbox("sandbox-claim-missing")  # never raises
    client.delete_all()
    assert fake_api.claims() == []


def test_get_sandbox_waits_for_binding(fake_api: FakeAPIServer) -> None:
    fake_api.put("sandboxclaims", {"metadata": {"name": "c1", "namespace": "default"}, "spec": {"warmPoolRef": {"name": "p"}}})
    import threading

    threading.Timer(0.2, lambda: ready_claim(fake_api, fake_api.get("sandboxclaims", "default", "c1"), sandbox_name="sb-c1", delay=0)).start()
    assert make_client().get_sandbox("c1", resolve_timeout=10).sandbox_id == "sb-c1"
    fake_api.put("sandboxclaims", {"metadata": {"name": "c2", "namespace": "default"}, "spec": {}})
    with pytest.raises(TimeoutError):
        make_client().get_sandbox("c2", resolve_timeout=1)


def test_failed_terminate_keeps_claim_name(fake_api: FakeAPIServer) -> None:
    fake_api.on_create = ready_claim
    sandbox = make_client().create_sandbox("pool")
    name = sandbox.claim_name
    fake_api.fail_next["delete"] = (500, "InternalError")
    with pytest.raises(SandboxRequestError):
        sandbox.terminate()
    assert sandbox.claim_name == name
    sandbox.terminate()
    assert sandbox.claim_name is None and fake_api.claims() == []


def test_terminate_tolerates_404(fake_api: FakeAPIServer) -> None:
    fake_api.on_create = ready_claim
    sandbox = make_client().create_sandbox("pool")
    fake_api.delete("sandboxclaims", "default", sandbox.claim_name)
    sandbox.terminate()
    assert sandbox.claim_name is None


def test_context_managers(fake_api: FakeAPIServer) -> None:
    fake_api.on_create = ready_claim
    with make_client() as client:
        with client.create_sandbox("pool") as sandbox:
            assert sandbox.is_active
        assert sandbox.claim_name is None
        client.create_sandbox("pool")
        assert len(fake_api.claims()) == 1
    assert fake_api.claims() == []


def test_status_variants(fake_api: FakeAPIServer) -> None:
    fake_api.on_create = ready_claim
    sandbox = make_client().create_sandbox("pool")
    obj = fake_api.get("sandboxes", "default", sandbox.sandbox_id)
    obj["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "PodNotReady", "message": "pod starting"}]
    fake_api.put("sandboxes", obj)
    assert sandbox.status() == ("SandboxNotReady", "pod starting")
    obj["status"] = {}
    fake_api.put("sandboxes", obj)
    assert sandbox.status()[0] == "SandboxNotReady"
    fake_api.delete("sandboxes", "default", sandbox.sandbox_id)
    assert sandbox.status()[0] == "SandboxNotFound"


def test_pod_name_fallback_and_cache(fake_api: FakeAPIServer) -> None:
    fake_api.put("sandboxes", {"metadata": {"name": "plain", "namespace": "default"}})
    from k8s_agent_sandbox import Sandbox

    sandbox = Sandbox("c", "plain", "default", SandboxDirectConnectionConfig(api_url="http://127.0.0.1:9"), K8sHelper())
    assert sandbox.get_pod_name() == "plain"
    fake_api.put("sandboxes", {"metadata": {"name": "plain", "namespace": "default", "annotations": {"agents.x-k8s.io/pod-name": "p-1"}}})
    assert sandbox.get_pod_name() == "plain"  # cached until close
    sandbox.close_connection()
    assert sandbox.get_pod_name() == "p-1"
    assert sandbox.get_sandbox_name_hash() is None
