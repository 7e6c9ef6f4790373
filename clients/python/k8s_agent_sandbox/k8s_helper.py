"""Kubernetes API access for the sync client: claims, sandboxes, gateways.

The readiness wait is driven by a single WATCH on the claim (field selector
``metadata.name=<claim>``), never by polling.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from . import constants as C
from .exceptions import (
    SandboxClaimFailedError,
    SandboxError,
    SandboxMetadataError,
    SandboxNotFoundError,
    SandboxRequestError,
    SandboxTemplateNotFoundError,
    SandboxWarmPoolNotFoundError,
)
from .utils import validate_gateway_address

log = logging.getLogger(__name__)


def load_configuration() -> client.Configuration:
    """Load in-cluster credentials, else the kubeconfig named by ``KUBECONFIG`` (or ``~/.kube/config``)."""
    cfg = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=cfg)
        return cfg
    except ConfigException:
        pass
    kubeconfig = kubeconfig_path()
    try:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    except (ConfigException, OSError) as exc:
        raise no_configuration_error(kubeconfig, exc) from exc
    return cfg


def kubeconfig_path() -> str:
    """The kubeconfig both helpers fall back to outside a pod: ``$KUBECONFIG`` or ``~/.kube/config``."""
    return os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


def no_configuration_error(kubeconfig: str, exc: BaseException) -> SandboxError:
    """The error when neither in-cluster credentials nor ``kubeconfig`` could be loaded."""
    return SandboxError(
        f"No usable Kubernetes configuration: not running in a pod and the kubeconfig "
        f"{kubeconfig!r} could not be loaded ({exc}). Set KUBECONFIG to a kubeconfig for the "
        "cluster where agent-sandbox is installed."
    )


def api_error(action: str, exc: BaseException, host: str | None = None) -> SandboxRequestError:
    """Map a Kubernetes client failure to :class:`SandboxRequestError` with advice."""
    if isinstance(exc, ApiException) or (
        type(exc).__name__ == "ApiException" and hasattr(exc, "status") and hasattr(exc, "body")
    ):
        # ApiException of kubernetes or kubernetes_asyncio (same shape).
        detail = getattr(exc, "reason", "") or ""
        body = exc.body.decode("utf-8", "replace") if isinstance(exc.body, bytes) else exc.body
        if body:
            detail = f"{detail}: {str(body)[:512]}"
        hint = ""
        if exc.status in (401, 403):
            hint = " Check that your kubeconfig credentials may use SandboxClaims in this namespace."
        elif exc.status == 404 and "sandboxclaims" in str(body or ""):
            hint = " Is agent-sandbox (with its extensions CRDs) installed in this cluster?"
        return SandboxRequestError(
            f"Kubernetes API error while trying to {action} (HTTP {exc.status}): {detail}.{hint}",
            status_code=exc.status,
            response=exc,
        )
    where = f" at {host}" if host else ""
    return SandboxRequestError(
        f"Could not reach the Kubernetes API server{where} to {action}: {exc}. Check that the "
        "cluster is running and that KUBECONFIG points at it.",
        status_code=None,
    )


_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (urllib3.exceptions.HTTPError, OSError)
_API_ERRORS: tuple[type[BaseException], ...] = (ApiException, *_TRANSPORT_ERRORS)


def _condition(obj: dict[str, Any], cond_type: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == cond_type:
            return cond
    return None


def claim_sandbox_name(claim: dict[str, Any]) -> str | None:
    """``status.sandbox.name`` of a claim (the legacy key ``Name`` is also accepted)."""
    sandbox = (claim.get("status") or {}).get("sandbox") or {}
    if not isinstance(sandbox, dict):
        return None
    name = sandbox.get("name") or sandbox.get("Name")
    return name if isinstance(name, str) and name else None


def claim_warmpool_ref(claim: dict[str, Any]) -> Any:
    """``spec.warmPoolRef.name`` of a claim as stored (not type-checked; callers decide)."""
    return ((claim.get("spec") or {}).get("warmPoolRef") or {}).get("name")


def describe_conditions(obj: dict[str, Any]) -> str:
    """``Type=Status (Reason: message)`` for every condition, for error messages."""
    parts = []
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict):
            text = f"{cond.get('type')}={cond.get('status')}"
            if cond.get("reason"):
                text += f" ({cond.get('reason')}: {cond.get('message', '')})"
            parts.append(text)
    return "; ".join(parts) or "no conditions yet"


def check_claim(claim: dict[str, Any]) -> str | None:
    """Classify a claim seen during the readiness wait.

    Returns the sandbox name once the claim names its sandbox and is Ready;
    ``None`` while it should keep waiting; raises on terminal failures.
    """
    meta = claim.get("metadata") or {}
    name, namespace = meta.get("name", "?"), meta.get("namespace", "?")
    pool = claim_warmpool_ref(claim)
    for cond in (claim.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("reason") == C.REASON_WARM_POOL_NOT_FOUND:
            raise SandboxWarmPoolNotFoundError(
                f"SandboxWarmPool {pool!r} not found in namespace {namespace!r} (claim {name}: "
                f"{cond.get('message', '')}). Create the pool or pass the name of an existing one; "
                f"list them with: kubectl get sandboxwarmpools -n {namespace}"
            )
    ready = _condition(claim, "Ready")
    if ready is not None and ready.get("status") == "False":
        reason = ready.get("reason")
        if reason == C.REASON_TEMPLATE_NOT_FOUND:
            raise SandboxTemplateNotFoundError(
                f"The SandboxTemplate used by warm pool {pool!r} does not exist in namespace "
                f"{namespace!r} (claim {name}: {ready.get('message', '')}). Create the template "
                f"or fix the pool's sandboxTemplateRef: kubectl get sandboxtemplates -n {namespace}"
            )
        if reason in C.TERMINAL_CLAIM_REASONS:
            raise SandboxClaimFailedError(
                f"SandboxClaim {namespace}/{name} failed: {reason}: {ready.get('message', '')}"
            )
    sandbox_name = claim_sandbox_name(claim)
    if sandbox_name and ready is not None and ready.get("status") == "True":
        return sandbox_name
    return None


def resource_version_of(obj: Any) -> str | None:
    """``metadata.resourceVersion`` of an object the API returned (``None`` for a non-dict)."""
    if not isinstance(obj, dict):
        return None
    return (obj.get("metadata") or {}).get("resourceVersion")


def bound_sandbox_name(claim: dict[str, Any] | None, name: str, namespace: str) -> str | None:
    """The sandbox an existing claim is already bound to, or ``None`` if it is not bound yet.

    ``claim`` is the result of a GET; ``None`` (no such claim) raises
    :class:`SandboxNotFoundError`. Shared by both helpers' ``resolve_sandbox_name``.
    """
    if claim is None:
        raise SandboxNotFoundError(
            f"SandboxClaim {namespace}/{name} not found; list claims with: "
            f"kubectl get sandboxclaims -n {namespace}"
        )
    return claim_sandbox_name(claim)


# --- WATCH-driven waits, shared by K8sHelper and aio.AsyncK8sHelper -----------

WATCH_EXPIRED = object()
"""Returned by ``on_event`` once the budget is spent: stop reading the current stream."""


class ResourceWatch:
    """Everything a WATCH-driven wait decides, apart from the I/O.

    The sync and async helpers run the same loop over different clients: start
    the budget (:meth:`start`), open a watch with :meth:`list_args` and
    :meth:`list_kwargs`, hand every event to :meth:`on_event`, restart from
    ``"0"`` on 410 Gone (:meth:`restart_if_gone`) and map failures with
    :meth:`api_error` / :meth:`transport_error`. Keeping those decisions here
    keeps the two loops identical except for ``await``, the clock and the
    client-specific timeout handling. Subclasses name the resource and judge
    its events.
    """

    group = version = plural = kind = ""

    def __init__(self, name: str, namespace: str, timeout: float, resource_version: str | None = None) -> None:
        self.name = name
        self.namespace = namespace
        self.timeout = timeout
        self.rv = resource_version or "0"
        self._clock: Callable[[], float] = time.monotonic
        self.deadline = 0.0

    def start(self, clock: Callable[[], float]) -> None:
        """Start the budget on ``clock`` (``time.monotonic`` or the event loop's ``time``)."""
        self._clock = clock
        self.deadline = clock() + self.timeout

    def remaining(self) -> float:
        """Seconds left for the next watch request; raises ``TimeoutError`` when none are left."""
        remaining = self.deadline - self._clock()
        if remaining <= 0:
            raise self.timeout_error()
        return remaining

    def expired(self) -> bool:
        return self._clock() >= self.deadline

    def list_args(self) -> tuple[str, str, str, str]:
        """Positional arguments of ``list_namespaced_custom_object`` for this resource."""
        return (self.group, self.version, self.namespace, self.plural)

    def list_kwargs(self, remaining: float) -> dict[str, Any]:
        """The WATCH query: this one object, from ``self.rv``, closed by the server when the budget ends."""
        return {
            "field_selector": f"metadata.name={self.name}",
            "resource_version": self.rv,
            "timeout_seconds": max(1, math.ceil(remaining)),
        }

    def restart_if_gone(self, exc: Any) -> bool:
        """True (and restart from ``"0"``) when ``exc`` is 410 Gone: our resourceVersion expired."""
        if exc.status == 410:
            self.rv = "0"
            return True
        return False

    def api_error(self, exc: BaseException, host: str | None) -> SandboxRequestError:
        """The error for an ``ApiException`` other than 410 while watching."""
        return api_error(f"watch {self.kind} {self.namespace}/{self.name}", exc, host)

    def transport_error(self, exc: BaseException, host: str | None) -> SandboxRequestError:
        """The error for a transport failure while watching."""
        return api_error(f"watch {self.kind} {self.namespace}/{self.name}", exc, host)

    def timeout_error(self) -> TimeoutError:
        """The error for a spent budget (subclasses say what was awaited)."""
        raise NotImplementedError

    def on_event(self, event: dict[str, Any]) -> Any:
        """The result to return, :data:`WATCH_EXPIRED`, or ``None`` to keep reading."""
        raise NotImplementedError


class ClaimWatch(ResourceWatch):
    """Wait until ``check(claim)`` returns a sandbox name (claim deleted: :class:`SandboxMetadataError`)."""

    group, version, plural, kind = C.CLAIM_API_GROUP, C.CLAIM_API_VERSION, C.CLAIM_PLURAL, "SandboxClaim"

    def __init__(
        self,
        name: str,
        namespace: str,
        timeout: float,
        resource_version: str | None,
        check: Callable[[dict[str, Any]], str | None],
        goal: str,
    ) -> None:
        super().__init__(name, namespace, timeout, resource_version)
        self.check = check
        self.goal = goal
        self.last: dict[str, Any] = {}

    @classmethod
    def until_ready(cls, name: str, namespace: str, timeout: float, resource_version: str | None) -> ClaimWatch:
        """The wait of ``wait_for_claim_ready``: Ready, or a typed error from :func:`check_claim`."""
        return cls(name, namespace, timeout, resource_version, check_claim, "Ready")

    @classmethod
    def until_bound(cls, name: str, namespace: str, timeout: float, resource_version: str | None) -> ClaimWatch:
        """The wait of ``resolve_sandbox_name``: the claim names its sandbox."""
        return cls(name, namespace, timeout, resource_version, claim_sandbox_name, "bound to a sandbox")

    def timeout_error(self) -> TimeoutError:
        return TimeoutError(
            f"SandboxClaim {self.namespace}/{self.name} was not {self.goal} within {self.timeout:g}s "
            f"(last state: {describe_conditions(self.last)}). Check that the warm pool has ready "
            f"sandboxes (kubectl get sandboxwarmpools,sandboxes -n {self.namespace}) or raise "
            "sandbox_ready_timeout."
        )

    def on_event(self, event: dict[str, Any]) -> Any:
        obj = event.get("raw_object") or {}
        meta = obj.get("metadata") or {}
        if event.get("type") == "BOOKMARK":
            self.rv = meta.get("resourceVersion") or self.rv
            return None
        if meta.get("name") != self.name:
            return None
        self.rv = meta.get("resourceVersion") or self.rv
        if event.get("type") == "DELETED":
            raise SandboxMetadataError(
                f"SandboxClaim {self.namespace}/{self.name} was deleted while waiting for it to be {self.goal}."
            )
        if self.expired():
            return WATCH_EXPIRED  # budget exhausted: a late answer does not count
        self.last = obj
        return self.check(obj) or None


class GatewayWatch(ResourceWatch):
    """Wait until a Gateway's ``status.addresses`` holds a valid address; the result is URL-ready."""

    group, version, plural, kind = C.GATEWAY_API_GROUP, C.GATEWAY_API_VERSION, C.GATEWAY_PLURAL, "Gateway"

    def timeout_error(self) -> TimeoutError:
        return TimeoutError(
            f"Gateway {self.namespace}/{self.name} had no usable address within {self.timeout:g}s. Check it "
            f"with: kubectl get gateway {self.name} -n {self.namespace} -o yaml"
        )

    def api_error(self, exc: BaseException, host: str | None) -> SandboxRequestError:
        err = super().api_error(exc, host)
        if getattr(exc, "status", None) == 404:
            return SandboxRequestError(str(err) + " Is the Gateway API installed?", err.status_code, exc)
        return err

    def on_event(self, event: dict[str, Any]) -> Any:
        obj = event.get("raw_object") or {}
        self.rv = (obj.get("metadata") or {}).get("resourceVersion") or self.rv
        if event.get("type") in ("BOOKMARK", "DELETED"):
            return None
        address = gateway_address(obj)
        if address:
            return address
        if self.expired():
            return WATCH_EXPIRED  # a late address still counts; an empty update after the deadline does not
        return None


class K8sHelper:
    """Thin wrapper over the official ``kubernetes`` client for the SDK's objects."""

    def __init__(self, api_client: client.ApiClient | None = None) -> None:
        self.api_client = api_client or client.ApiClient(load_configuration())
        self.custom = client.CustomObjectsApi(self.api_client)

    @property
    def host(self) -> str:
        return str(self.api_client.configuration.host)

    def _call(self, action: str, fn: Callable[..., Any], *args: Any, not_found_none: bool = False, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` with failures mapped by :func:`api_error` (404 → ``None`` if asked)."""
        try:
            return fn(*args, **kwargs)
        except _API_ERRORS as exc:
            if not_found_none and isinstance(exc, ApiException) and exc.status == 404:
                return None
            raise api_error(action, exc, self.host) from exc

    # --- claims ---------------------------------------------------------------

    def create_sandbox_claim(self, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create a SandboxClaim and return the object the API server stored."""
        found: dict[str, Any] = self._call(
            f"create SandboxClaim in namespace {namespace!r}",
            self.custom.create_namespaced_custom_object,
            C.CLAIM_API_GROUP, C.CLAIM_API_VERSION, namespace, C.CLAIM_PLURAL, manifest,
        )
        return found

    def get_sandbox_claim(self, name: str, namespace: str) -> dict[str, Any] | None:
        """The claim, or ``None`` when it does not exist."""
        found: dict[str, Any] | None = self._call(
            f"get SandboxClaim {namespace}/{name}",
            self.custom.get_namespaced_custom_object,
            C.CLAIM_API_GROUP, C.CLAIM_API_VERSION, namespace, C.CLAIM_PLURAL, name,
            not_found_none=True,
        )
        return found

    def list_sandbox_claims(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """All claims in ``namespace`` (optionally filtered by a label selector)."""
        kwargs: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
        result = self._call(
            f"list SandboxClaims in namespace {namespace!r}",
            self.custom.list_namespaced_custom_object,
            C.CLAIM_API_GROUP, C.CLAIM_API_VERSION, namespace, C.CLAIM_PLURAL, **kwargs,
        )
        return list(result.get("items") or [])

    def delete_sandbox_claim(self, name: str, namespace: str) -> None:
        """Delete a claim; a claim that is already gone counts as success."""
        self._call(
            f"delete SandboxClaim {namespace}/{name}",
            self.custom.delete_namespaced_custom_object,
            C.CLAIM_API_GROUP, C.CLAIM_API_VERSION, namespace, C.CLAIM_PLURAL, name,
            not_found_none=True,
        )

    def wait_for_claim_ready(
        self, name: str, namespace: str, timeout: float, resource_version: str | None = None
    ) -> str:
        """Watch the claim until it names a Ready sandbox; return the Sandbox name.

        Starts from ``resource_version`` (the create response's) or ``"0"``;
        a 410 Gone restarts from ``"0"``. Raises the typed errors of
        :func:`check_claim`, :class:`SandboxMetadataError` if the claim is
        deleted, and ``TimeoutError`` when ``timeout`` seconds pass.
        """
        return self._watch(ClaimWatch.until_ready(name, namespace, timeout, resource_version), read_slack=1)

    def resolve_sandbox_name(self, name: str, namespace: str, timeout: float) -> str:
        """The Sandbox name a claim is bound to, waiting up to ``timeout`` for the binding."""
        claim = self.get_sandbox_claim(name, namespace)
        found = bound_sandbox_name(claim, name, namespace)
        if found:
            return found
        state = ClaimWatch.until_bound(name, namespace, timeout, resource_version_of(claim))
        return self._watch(state, read_slack=1)

    # --- sandboxes ------------------------------------------------------------

    def get_sandbox(self, name: str, namespace: str) -> dict[str, Any] | None:
        """The Sandbox object, or ``None`` when it does not exist."""
        found: dict[str, Any] | None = self._call(
            f"get Sandbox {namespace}/{name}",
            self.custom.get_namespaced_custom_object,
            C.SANDBOX_API_GROUP, C.SANDBOX_API_VERSION, namespace, C.SANDBOX_PLURAL, name,
            not_found_none=True,
        )
        return found

    # --- gateways -------------------------------------------------------------

    def wait_for_gateway_address(self, name: str, namespace: str, timeout: float) -> str:
        """Watch a Gateway until ``status.addresses`` holds a valid address; return it URL-ready."""
        return self._watch(GatewayWatch(name, namespace, timeout), read_slack=10)

    # --- watch loop -----------------------------------------------------------

    def _watch(self, state: ResourceWatch, read_slack: float) -> str:
        """Run the WATCH loop that ``state`` decides (see :class:`ResourceWatch`).

        Each request's read timeout is ``remaining + read_slack`` so that the
        server's ``timeoutSeconds`` normally ends the stream first; a read
        timeout anyway just reopens the watch.
        """
        state.start(time.monotonic)
        while True:
            remaining = state.remaining()
            w = watch.Watch()
            try:
                for event in w.stream(
                    self.custom.list_namespaced_custom_object,
                    *state.list_args(),
                    **state.list_kwargs(remaining),
                    _request_timeout=(10, remaining + read_slack),
                ):
                    result = state.on_event(event)
                    if result is WATCH_EXPIRED:
                        break
                    # on_event answers the name or address (a str), WATCH_EXPIRED or None.
                    if isinstance(result, str) and result:
                        return result
            except ApiException as exc:
                if state.restart_if_gone(exc):
                    continue
                raise state.api_error(exc, self.host) from exc
            except urllib3.exceptions.ReadTimeoutError:
                continue
            except _TRANSPORT_ERRORS as exc:
                raise state.transport_error(exc, self.host) from exc
            finally:
                w.stop()


def gateway_address(gateway: dict[str, Any]) -> str | None:
    """The first valid address of a Gateway's ``status.addresses`` (invalid ones are logged)."""
    addresses = (gateway.get("status") or {}).get("addresses") or []
    if not isinstance(addresses, list):
        return None
    for entry in addresses:
        if not isinstance(entry, dict):
            continue
        value = entry.get("value")
        host = validate_gateway_address(value)
        if host:
            return host
        log.warning("ignoring invalid Gateway address %r", value)
    return None
