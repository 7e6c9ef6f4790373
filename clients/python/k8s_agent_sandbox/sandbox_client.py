"""``SandboxClient``: claim sandboxes from warm pools and keep track of them."""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Generic

from typing_extensions import TypeVar

from . import constants as C
from .exceptions import SandboxError, SandboxNotFoundError
from .k8s_helper import K8sHelper, claim_warmpool_ref, resource_version_of
from .models import (
    ConnectionConfig,
    SandboxLocalTunnelConnectionConfig,
    SandboxTracerConfig,
)
from .sandbox import Sandbox
from .tracing import TraceManager
from .utils import (
    generate_claim_name,
    is_dns_subdomain,
    shutdown_time_after,
    utc_now_iso,
    validate_annotations,
    validate_labels,
    validate_namespace,
    validate_shutdown_after_seconds,
)

log = logging.getLogger(__name__)

# The default lets `SandboxClient()` mean SandboxClient[Sandbox] to a type
# checker (PEP 696; typing.TypeVar takes default= only from Python 3.13).
S = TypeVar("S", bound=Sandbox, default=Sandbox)


def build_claim_manifest(
    claim_name: str,
    warmpool: str,
    labels: Mapping[str, str] | None = None,
    *,
    shutdown_after_seconds: int | None = None,
    volume_claim_templates: Sequence[Mapping[str, Any]] | None = None,
    pod_labels: Mapping[str, str] | None = None,
    pod_annotations: Mapping[str, str] | None = None,
    trace_context: str | None = None,
    annotations: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The SandboxClaim the client creates (validated; raises ``ValueError`` on bad input)."""
    claim_labels = validate_labels(labels)
    claim_labels[C.CREATED_BY_LABEL] = C.CREATED_BY_VALUE
    claim_annotations = dict(annotations or {})
    if trace_context:
        claim_annotations[C.TRACE_CONTEXT_ANNOTATION] = trace_context
    claim_annotations.setdefault(C.CLIENT_REQUESTED_AT_ANNOTATION, utc_now_iso())
    spec: dict[str, Any] = {"warmPoolRef": {"name": warmpool}}
    ttl = validate_shutdown_after_seconds(shutdown_after_seconds)
    if ttl is not None:
        spec["lifecycle"] = {"shutdownTime": shutdown_time_after(ttl), "shutdownPolicy": "Delete"}
    if volume_claim_templates is not None:
        if isinstance(volume_claim_templates, (str, bytes, Mapping)) or not isinstance(volume_claim_templates, Sequence):
            raise ValueError("volume_claim_templates must be a list of PersistentVolumeClaim templates")
        spec["volumeClaimTemplates"] = [dict(t) for t in volume_claim_templates]
    pod_meta: dict[str, Any] = {}
    checked_labels = validate_labels(pod_labels, "pod_labels")
    if checked_labels:
        pod_meta["labels"] = checked_labels
    checked_annotations = validate_annotations(pod_annotations)
    if checked_annotations:
        pod_meta["annotations"] = checked_annotations
    if pod_meta:
        spec["additionalPodMetadata"] = pod_meta
    checked_env = validate_env(env)
    if checked_env:
        spec["env"] = checked_env
    return {
        "apiVersion": f"{C.CLAIM_API_GROUP}/{C.CLAIM_API_VERSION}",
        "kind": C.CLAIM_KIND,
        "metadata": {"name": claim_name, "labels": claim_labels, "annotations": claim_annotations},
        "spec": spec,
    }


def validate_env(env: Mapping[str, str] | None) -> list[dict[str, str]]:
    """``env`` as the claim's ``spec.env`` list (in the mapping's order); ``ValueError`` on bad input."""
    if env is None:
        return []
    if not isinstance(env, Mapping):
        raise ValueError("env must be a mapping of variable names to string values.")
    out = []
    for name, value in env.items():
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise ValueError(f"env name {name!r} is not a valid environment variable name")
        if not isinstance(value, str) or "\0" in value:
            raise ValueError(f"env value of {name!r} must be a string without NUL characters")
        out.append({"name": name, "value": value})
    return out


def validate_create_args(warmpool: object, namespace: object, sandbox_ready_timeout: object) -> None:
    """Check ``create_sandbox``'s pool, namespace and timeout before anything is sent.

    Shared with :class:`~k8s_agent_sandbox.aio.client.AsyncSandboxClient` so
    both clients reject the same arguments with the same ``ValueError``.
    """
    if not isinstance(warmpool, str) or not warmpool:
        raise ValueError("warmpool must be the name of a SandboxWarmPool (a non-empty string)")
    if not is_dns_subdomain(warmpool):
        raise ValueError(f"warmpool {warmpool!r} is not a valid object name (lower-case RFC 1123 subdomain)")
    validate_namespace(namespace)
    if isinstance(sandbox_ready_timeout, bool) or not isinstance(sandbox_ready_timeout, (int, float)) or sandbox_ready_timeout <= 0:
        raise ValueError(f"sandbox_ready_timeout must be a positive number of seconds, got {sandbox_ready_timeout!r}")


def require_claim(claim: dict[str, Any] | None, claim_name: str, namespace: str) -> dict[str, Any]:
    """``claim`` as read from the API, or :class:`SandboxNotFoundError` when the read found none."""
    if claim is None:
        raise SandboxNotFoundError(f"SandboxClaim {namespace}/{claim_name} not found")
    return claim


def claim_warmpool_name(claim: dict[str, Any]) -> str | None:
    """The warm pool a claim was made from, if ``spec.warmPoolRef.name`` is a string."""
    name = claim_warmpool_ref(claim)
    return name if isinstance(name, str) else None


def claim_names(claims: list[dict[str, Any]]) -> list[str]:
    """``metadata.name`` of every listed claim that has one."""
    return [str((c.get("metadata") or {}).get("name")) for c in claims if (c.get("metadata") or {}).get("name")]


class SandboxClient(Generic[S]):
    """Creates sandboxes from warm pools and tracks the handles it returned.

    Args:
        connection_config: how to reach sandboxes; defaults to
            :class:`SandboxLocalTunnelConnectionConfig` (``kubectl port-forward``
            to ``sandbox-router-svc`` started by the SDK).
        tracer_config: OpenTelemetry settings (off by default).
        cleanup: when true, every sandbox still tracked is deleted at interpreter exit.

    Kubernetes credentials come from the in-cluster service account or the
    kubeconfig named by ``KUBECONFIG`` (default ``~/.kube/config``).

    Example::

        client = SandboxClient()
        with client.create_sandbox(warmpool="python-sandbox-pool") as sandbox:
            print(sandbox.commands.run("echo hi").stdout)
    """

    sandbox_class: type[Sandbox] = Sandbox

    def __init__(
        self,
        connection_config: ConnectionConfig | None = None,
        tracer_config: SandboxTracerConfig | None = None,
        cleanup: bool = False,
        *,
        k8s_helper: K8sHelper | None = None,
    ) -> None:
        self.connection_config: ConnectionConfig = connection_config or SandboxLocalTunnelConnectionConfig()
        self.tracer_config = tracer_config or SandboxTracerConfig()
        self.tracer = TraceManager(self.tracer_config)
        self.k8s_helper = k8s_helper or K8sHelper()
        self._sandboxes: dict[tuple[str, str], S] = {}
        self._lock = threading.RLock()
        self._atexit_registered = False
        if cleanup:
            atexit.register(self.delete_all)
            self._atexit_registered = True

    # --- create / get -----------------------------------------------------------

    def create_sandbox(
        self,
        warmpool: str,
        namespace: str = C.DEFAULT_NAMESPACE,
        sandbox_ready_timeout: float = C.DEFAULT_SANDBOX_READY_TIMEOUT,
        labels: Mapping[str, str] | None = None,
        *,
        shutdown_after_seconds: int | None = None,
        volume_claim_templates: Sequence[Mapping[str, Any]] | None = None,
        pod_labels: Mapping[str, str] | None = None,
        pod_annotations: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> S:
        """Claim a sandbox from warm pool ``warmpool`` and wait until it is Ready.

        Creates SandboxClaim ``sandbox-claim-<8 hex>`` with ``spec.warmPoolRef``
        and watches it until it names a Ready sandbox.

        Args:
            warmpool: name of the SandboxWarmPool to claim from (required).
            namespace: namespace of the pool and the claim.
            sandbox_ready_timeout: seconds to wait for the claim to become Ready.
            labels: extra labels on the claim (``agents.x-k8s.io/created-by`` is forced).
            shutdown_after_seconds: delete the sandbox this many seconds from now.
            volume_claim_templates: PVC templates passed to ``spec.volumeClaimTemplates``.
            pod_labels: labels added to the sandbox pod.
            pod_annotations: annotations added to the sandbox pod.
            env: environment variables for the sandbox's commands (``spec.env``), if the
                template allows env injection; a late-binding template keeps the claim warm.

        Raises:
            ValueError: invalid arguments.
            SandboxWarmPoolNotFoundError: no warm pool of that name.
            SandboxTemplateNotFoundError: the pool's template is missing.
            SandboxClaimFailedError: the controller rejected the claim.
            SandboxRequestError: the Kubernetes API refused or was unreachable.
            TimeoutError: not Ready within ``sandbox_ready_timeout``.

        On any failure the claim is deleted again.
        """
        validate_create_args(warmpool, namespace, sandbox_ready_timeout)
        claim_name = generate_claim_name()
        with self.tracer.span("create_claim", **{"sandbox.claim.name": claim_name}):
            manifest = build_claim_manifest(
                claim_name,
                warmpool,
                labels,
                shutdown_after_seconds=shutdown_after_seconds,
                volume_claim_templates=volume_claim_templates,
                pod_labels=pod_labels,
                pod_annotations=pod_annotations,
                trace_context=self.tracer.trace_context_annotation(),
                env=env,
            )
            created = self.k8s_helper.create_sandbox_claim(namespace, manifest)
        try:
            rv = resource_version_of(created)
            with self.tracer.span("wait_for_claim_ready", **{"sandbox.claim.name": claim_name}):
                sandbox_name = self.k8s_helper.wait_for_claim_ready(
                    claim_name, namespace, float(sandbox_ready_timeout), rv
                )
            sandbox = self._new_handle(claim_name, sandbox_name, namespace)
        except BaseException:
            self._delete_claim_quietly(claim_name, namespace)
            raise
        with self._lock:
            self._sandboxes[(namespace, claim_name)] = sandbox
        return sandbox

    def _new_handle(self, claim_name: str, sandbox_id: str, namespace: str) -> S:
        # sandbox_class is a class attribute, which cannot be typed type[S]
        # (a ClassVar takes no type variables); a subclass sets it to its S.
        return self.sandbox_class(  # type: ignore[return-value]
            claim_name,
            sandbox_id,
            namespace,
            connection_config=self.connection_config,
            k8s_helper=self.k8s_helper,
            tracer_config=self.tracer_config,
            trace_manager=self.tracer,
        )

    def _delete_claim_quietly(self, claim_name: str, namespace: str) -> None:
        try:
            self.k8s_helper.delete_sandbox_claim(claim_name, namespace)
        except Exception as exc:  # noqa: BLE001 - cleanup must not hide the original error
            log.warning("could not delete SandboxClaim %s/%s: %s", namespace, claim_name, exc)

    def get_sandbox(self, claim_name: str, namespace: str = C.DEFAULT_NAMESPACE, resolve_timeout: float = 30) -> S:
        """Re-attach to an existing claim: the cached handle if active, else a new one.

        Raises :class:`SandboxNotFoundError` if the claim or its Sandbox is gone
        (a cached handle for it is closed), ``TimeoutError`` if the claim is not
        bound to a sandbox within ``resolve_timeout`` seconds.
        """
        validate_namespace(namespace)
        key = (namespace, claim_name)
        try:
            sandbox_name = self.k8s_helper.resolve_sandbox_name(claim_name, namespace, resolve_timeout)
            if self.k8s_helper.get_sandbox(sandbox_name, namespace) is None:
                raise SandboxNotFoundError(
                    f"SandboxClaim {namespace}/{claim_name} refers to Sandbox {sandbox_name!r}, which no "
                    "longer exists. Delete the claim and create a new sandbox."
                )
        except SandboxNotFoundError:
            with self._lock:
                stale = self._sandboxes.pop(key, None)
            if stale is not None:
                stale.close_connection()
            raise
        with self._lock:
            cached = self._sandboxes.get(key)
            if cached is not None and cached.is_active and cached.sandbox_id == sandbox_name:
                return cached
            sandbox = self._new_handle(claim_name, sandbox_name, namespace)
            self._sandboxes[key] = sandbox
            return sandbox

    # --- listing / deletion -----------------------------------------------------

    def list_active_sandboxes(self) -> list[tuple[str, str]]:
        """``(namespace, claim_name)`` of the handles this client holds that are still active."""
        with self._lock:
            return [key for key, sb in self._sandboxes.items() if sb.is_active]

    def list_all_sandboxes(self, namespace: str = C.DEFAULT_NAMESPACE, label_selector: str | None = None) -> list[str]:
        """Names of all SandboxClaims in ``namespace`` (optionally filtered by labels)."""
        validate_namespace(namespace)
        return claim_names(self.k8s_helper.list_sandbox_claims(namespace, label_selector))

    def get_sandbox_claim_warmpool_name(self, claim_name: str, namespace: str = C.DEFAULT_NAMESPACE) -> str | None:
        """The warm pool a claim was made from (``spec.warmPoolRef.name``), or ``None``."""
        claim = self.k8s_helper.get_sandbox_claim(claim_name, namespace)
        return claim_warmpool_name(require_claim(claim, claim_name, namespace))

    def delete_sandbox(self, claim_name: str, namespace: str = C.DEFAULT_NAMESPACE) -> None:
        """Terminate a tracked sandbox or delete the claim; errors are logged, never raised."""
        with self._lock:
            sandbox = self._sandboxes.pop((namespace, claim_name), None)
        try:
            if sandbox is not None:
                sandbox.terminate()
            else:
                self.k8s_helper.delete_sandbox_claim(claim_name, namespace)
        except Exception as exc:  # noqa: BLE001 - documented as best effort
            log.error("failed to delete sandbox claim %s/%s: %s", namespace, claim_name, exc)

    def delete_all(self) -> None:
        """Delete every sandbox this client created or attached to (best effort)."""
        with self._lock:
            keys = list(self._sandboxes)
        for namespace, claim_name in keys:
            self.delete_sandbox(claim_name, namespace)

    def close(self) -> None:
        """Close every tracked connection without deleting sandboxes."""
        with self._lock:
            handles = list(self._sandboxes.values())
        for sandbox in handles:
            try:
                sandbox.close_connection()
            except SandboxError as exc:
                log.debug("closing %s: %s", sandbox, exc)

    def __enter__(self) -> SandboxClient[S]:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.delete_all()
        if self._atexit_registered:
            atexit.unregister(self.delete_all)
            self._atexit_registered = False
