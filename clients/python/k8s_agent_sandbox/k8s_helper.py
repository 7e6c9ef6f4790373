"""Kubernetes API access for the sync client: claims, sandboxes, gateways.

The readiness wait is driven by a single WATCH on the claim (field selector
``metadata.name=<claim>``), never by polling.
"""

from __future__ import annotations

import logging
import math
import os
import time
from typing import Any

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
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
    kubeconfig = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    try:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    except (ConfigException, OSError) as exc:
        raise SandboxError(
            f"No usable Kubernetes configuration: not running in a pod and the kubeconfig "
            f"{kubeconfig!r} could not be loaded ({exc}). Set KUBECONFIG to a kubeconfig for the "
            "cluster where agent-sandbox is installed."
        ) from exc
    return cfg


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
    pool = ((claim.get("spec") or {}).get("warmPoolRef") or {}).get("name")
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


class K8sHelper:
    """Thin wrapper over the official ``kubernetes`` client for the SDK's objects."""

    def __init__(self, api_client: client.ApiClient | None = None) -> None:
        self.api_client = api_client or client.ApiClient(load_configuration())
        self.custom = client.CustomObjectsApi(self.api_client)

    @property
    def host(self) -> str:
        return str(self.api_client.configuration.host)

    # --- claims ---------------------------------------------------------------

    def create_sandbox_claim(self, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create a SandboxClaim and return the object the API server stored."""
        try:
            return self.custom.create_namespaced_custom_object(
                C.CLAIM_API_GROUP, C.CLAIM_API_VERSION, namespace, C.CLAIM_PLURAL, manifest
            )
        except (ApiException, *_TRANSPORT_ERRORS) as exc:
            raise api_error(f"create SandboxClaim in namespace {namespace!r}", exc, self.host) from exc

    def get_sandbox_claim(self, name: str, namespace: str) -> dict[str, Any] | None:
        """The claim, or ``None`` when it does not exist."""
        try:
            return self.custom.get_namespaced_custom_object(
                C.CLAIM_API_GROUP, C.CLAIM_API_VERSION, namespace, C.CLAIM_PLURAL, name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise api_error(f"get SandboxClaim {namespace}/{name}", exc, self.host) from exc
        except _TRANSPORT_ERRORS as exc:
            raise api_error(f"get SandboxClaim {namespace}/{name}", exc, self.host) from exc

    def list_sandbox_claims(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        """All claims in ``namespace`` (optionally filtered by a label selector)."""
        kwargs: dict[str, Any] = {}
        if label_selector:
            kwargs["label_selector"] = label_selector
        try:
            result = self.custom.list_namespaced_custom_object(
                C.CLAIM_API_GROUP, C.CLAIM_API_VERSION, namespace, C.CLAIM_PLURAL, **kwargs
            )
        except (ApiException, *_TRANSPORT_ERRORS) as exc:
            raise api_error(f"list SandboxClaims in namespace {namespace!r}", exc, self.host) from exc
        return list(result.get("items") or [])

    def delete_sandbox_claim(self, name: str, namespace: str) -> None:
        """Delete a claim; a claim that is already gone counts as success."""
        try:
            self.custom.delete_namespaced_custom_object(
                C.CLAIM_API_GROUP, C.CLAIM_API_VERSION, namespace, C.CLAIM_PLURAL, name
            )
        except ApiException as exc:
            if exc.status == 404:
                return
            raise api_error(f"delete SandboxClaim {namespace}/{name}", exc, self.host) from exc
        except _TRANSPORT_ERRORS as exc:
            raise api_error(f"delete SandboxClaim {namespace}/{name}", exc, self.host) from exc

    def wait_for_claim_ready(
        self, name: str, namespace: str, timeout: float, resource_version: str | None = None
    ) -> str:
        """Watch the claim until it names a Ready sandbox; return the Sandbox name.

        Starts from ``resource_version`` (the create response's) or ``"0"``;
        a 410 Gone restarts from ``"0"``. Raises the typed errors of
        :func:`check_claim`, :class:`SandboxMetadataError` if the claim is
        deleted, and ``TimeoutError`` when ``timeout`` seconds pass.
        """
        return self._watch_claim(name, namespace, timeout, resource_version, check_claim, "Ready")

    def resolve_sandbox_name(self, name: str, namespace: str, timeout: float) -> str:
        """The Sandbox name a claim is bound to, waiting up to ``timeout`` for the binding."""
        claim = self.get_sandbox_claim(name, namespace)
        if claim is None:
            raise SandboxNotFoundError(
                f"SandboxClaim {namespace}/{name} not found; list claims with: "
                f"kubectl get sandboxclaims -n {namespace}"
            )
        found = claim_sandbox_name(claim)
        if found:
            return found
        rv = (claim.get("metadata") or {}).get("resourceVersion")
        return self._watch_claim(name, namespace, timeout, rv, claim_sandbox_name, "bound to a sandbox")

    def _watch_claim(self, name, namespace, timeout, resource_version, check, goal: str) -> str:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        rv = resource_version or "0"
        last: dict[str, Any] = {}
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"SandboxClaim {namespace}/{name} was not {goal} within {timeout:g}s "
                    f"(last state: {describe_conditions(last)}). Check that the warm pool has ready "
                    f"sandboxes (kubectl get sandboxwarmpools,sandboxes -n {namespace}) or raise "
                    "sandbox_ready_timeout."
                )
            w = watch.Watch()
            try:
                for event in w.stream(
                    self.custom.list_namespaced_custom_object,
                    C.CLAIM_API_GROUP,
                    C.CLAIM_API_VERSION,
                    namespace,
                    C.CLAIM_PLURAL,
                    field_selector=f"metadata.name={name}",
                    resource_version=rv,
                    timeout_seconds=max(1, math.ceil(remaining)),
                    _request_timeout=(10, remaining + 1),
                ):
                    obj = event.get("raw_object") or {}
                    if event.get("type") == "BOOKMARK":
                        rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                        continue
                    if (obj.get("metadata") or {}).get("name") != name:
                        continue
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if event.get("type") == "DELETED":
                        raise SandboxMetadataError(
                            f"SandboxClaim {namespace}/{name} was deleted while waiting for it to be {goal}."
                        )
                    if time.monotonic() >= deadline:
                        break  # budget exhausted: a late answer does not count
                    last = obj
                    result = check(obj)
                    if result:
                        return result
            except ApiException as exc:
                if exc.status == 410:
                    rv = "0"
                    continue
                raise api_error(f"watch SandboxClaim {namespace}/{name}", exc, self.host) from exc
            except urllib3.exceptions.ReadTimeoutError:
                continue
            except _TRANSPORT_ERRORS as exc:
                raise api_error(f"watch SandboxClaim {namespace}/{name}", exc, self.host) from exc
            finally:
                w.stop()

    # --- sandboxes ------------------------------------------------------------

    def get_sandbox(self, name: str, namespace: str) -> dict[str, Any] | None:
        """The Sandbox object, or ``None`` when it does not exist."""
        try:
            return self.custom.get_namespaced_custom_object(
                C.SANDBOX_API_GROUP, C.SANDBOX_API_VERSION, namespace, C.SANDBOX_PLURAL, name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise api_error(f"get Sandbox {namespace}/{name}", exc, self.host) from exc
        except _TRANSPORT_ERRORS as exc:
            raise api_error(f"get Sandbox {namespace}/{name}", exc, self.host) from exc

    # --- gateways -------------------------------------------------------------

    def wait_for_gateway_address(self, name: str, namespace: str, timeout: float) -> str:
        """Watch a Gateway until ``status.addresses`` holds a valid address; return it URL-ready."""
        deadline = time.monotonic() + timeout
        rv = "0"
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"Gateway {namespace}/{name} had no usable address within {timeout:g}s. Check it "
                    f"with: kubectl get gateway {name} -n {namespace} -o yaml"
                )
            w = watch.Watch()
            try:
                for event in w.stream(
                    self.custom.list_namespaced_custom_object,
                    C.GATEWAY_API_GROUP,
                    C.GATEWAY_API_VERSION,
                    namespace,
                    C.GATEWAY_PLURAL,
                    field_selector=f"metadata.name={name}",
                    resource_version=rv,
                    timeout_seconds=max(1, math.ceil(remaining)),
                    _request_timeout=(10, remaining + 10),
                ):
                    obj = event.get("raw_object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if event.get("type") in ("BOOKMARK", "DELETED"):
                        continue
                    address = gateway_address(obj)
                    if address:
                        return address
                    if time.monotonic() >= deadline:
                        break
            except ApiException as exc:
                if exc.status == 410:
                    rv = "0"
                    continue
                hint = " Is the Gateway API installed?" if exc.status == 404 else ""
                err = api_error(f"watch Gateway {namespace}/{name}", exc, self.host)
                raise SandboxRequestError(str(err) + hint, err.status_code, exc) from exc
            except urllib3.exceptions.ReadTimeoutError:
                continue
            except _TRANSPORT_ERRORS as exc:
                raise api_error(f"watch Gateway {namespace}/{name}", exc, self.host) from exc
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
