"""Kubernetes API access for the async client (``kubernetes_asyncio``)."""

from __future__ import annotations

import asyncio
import math
import os
from typing import Any, Callable

import aiohttp
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.config_exception import ConfigException

from .. import constants as C
from ..exceptions import SandboxError, SandboxMetadataError, SandboxNotFoundError, SandboxRequestError
from ..k8s_helper import api_error, check_claim, claim_sandbox_name, describe_conditions, gateway_address

_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (aiohttp.ClientError, OSError)


async def load_configuration() -> client.Configuration:
    """In-cluster credentials, else the kubeconfig from ``KUBECONFIG`` (or ``~/.kube/config``)."""
    cfg = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=cfg)
        return cfg
    except ConfigException:
        pass
    kubeconfig = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    try:
        await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    except (ConfigException, OSError) as exc:
        raise SandboxError(
            f"No usable Kubernetes configuration: not running in a pod and the kubeconfig "
            f"{kubeconfig!r} could not be loaded ({exc}). Set KUBECONFIG to a kubeconfig for the "
            "cluster where agent-sandbox is installed."
        ) from exc
    return cfg


class AsyncK8sHelper:
    """Async counterpart of :class:`k8s_agent_sandbox.k8s_helper.K8sHelper`.

    The API client is created lazily inside the running event loop.
    """

    def __init__(self, api_client: client.ApiClient | None = None) -> None:
        self._api_client = api_client
        self._custom: client.CustomObjectsApi | None = None
        self._init_lock: asyncio.Lock | None = None

    async def _api(self) -> client.CustomObjectsApi:
        if self._custom is None:
            if self._api_client is None:
                self._api_client = client.ApiClient(await load_configuration())
            self._custom = client.CustomObjectsApi(self._api_client)
        return self._custom

    @property
    def host(self) -> str:
        return str(self._api_client.configuration.host) if self._api_client else "?"

    async def close(self) -> None:
        """Close the underlying HTTP session."""
        if self._api_client is not None:
            await self._api_client.close()
        self._api_client = None
        self._custom = None

    async def _call(self, action: str, fn: Callable[..., Any], *args: Any, not_found_none: bool = False, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except ApiException as exc:
            if not_found_none and exc.status == 404:
                return None
            raise api_error(action, exc, self.host) from exc
        except _TRANSPORT_ERRORS as exc:
            raise api_error(action, exc, self.host) from exc

    async def create_sandbox_claim(self, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
        api = await self._api()
        return await self._call(
            f"create SandboxClaim in namespace {namespace!r}",
            api.create_namespaced_custom_object,
            C.CLAIM_API_GROUP, C.CLAIM_API_VERSION, namespace, C.CLAIM_PLURAL, manifest,
        )

    async def get_sandbox_claim(self, name: str, namespace: str) -> dict[str, Any] | None:
        api = await self._api()
        return await self._call(
            f"get SandboxClaim {namespace}/{name}",
            api.get_namespaced_custom_object,
            C.CLAIM_API_GROUP, C.CLAIM_API_VERSION, namespace, C.CLAIM_PLURAL, name,
            not_found_none=True,
        )

    async def list_sandbox_claims(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        api = await self._api()
        kwargs = {"label_selector": label_selector} if label_selector else {}
        result = await self._call(
            f"list SandboxClaims in namespace {namespace!r}",
            api.list_namespaced_custom_object,
            C.CLAIM_API_GROUP, C.CLAIM_API_VERSION, namespace, C.CLAIM_PLURAL, **kwargs,
        )
        return list(result.get("items") or [])

    async def delete_sandbox_claim(self, name: str, namespace: str) -> None:
        api = await self._api()
        await self._call(
            f"delete SandboxClaim {namespace}/{name}",
            api.delete_namespaced_custom_object,
            C.CLAIM_API_GROUP, C.CLAIM_API_VERSION, namespace, C.CLAIM_PLURAL, name,
            not_found_none=True,
        )

    async def get_sandbox(self, name: str, namespace: str) -> dict[str, Any] | None:
        api = await self._api()
        return await self._call(
            f"get Sandbox {namespace}/{name}",
            api.get_namespaced_custom_object,
            C.SANDBOX_API_GROUP, C.SANDBOX_API_VERSION, namespace, C.SANDBOX_PLURAL, name,
            not_found_none=True,
        )

    async def wait_for_claim_ready(
        self, name: str, namespace: str, timeout: float, resource_version: str | None = None
    ) -> str:
        """Watch the claim until it names a Ready sandbox (see the sync helper for the rules)."""
        return await self._watch_claim(name, namespace, timeout, resource_version, check_claim, "Ready")

    async def resolve_sandbox_name(self, name: str, namespace: str, timeout: float) -> str:
        claim = await self.get_sandbox_claim(name, namespace)
        if claim is None:
            raise SandboxNotFoundError(
                f"SandboxClaim {namespace}/{name} not found; list claims with: kubectl get sandboxclaims -n {namespace}"
            )
        found = claim_sandbox_name(claim)
        if found:
            return found
        rv = (claim.get("metadata") or {}).get("resourceVersion")
        return await self._watch_claim(name, namespace, timeout, rv, claim_sandbox_name, "bound to a sandbox")

    async def _watch_claim(self, name, namespace, timeout, resource_version, check, goal: str) -> str:  # type: ignore[no-untyped-def]
        api = await self._api()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        rv = resource_version or "0"
        last: dict[str, Any] = {}
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(
                    f"SandboxClaim {namespace}/{name} was not {goal} within {timeout:g}s "
                    f"(last state: {describe_conditions(last)}). Check that the warm pool has ready "
                    f"sandboxes (kubectl get sandboxwarmpools,sandboxes -n {namespace}) or raise "
                    "sandbox_ready_timeout."
                )
            w = watch.Watch()
            try:
                async with asyncio.timeout(remaining + 1):
                    async for event in w.stream(
                        api.list_namespaced_custom_object,
                        C.CLAIM_API_GROUP, C.CLAIM_API_VERSION, namespace, C.CLAIM_PLURAL,
                        field_selector=f"metadata.name={name}",
                        resource_version=rv,
                        timeout_seconds=max(1, math.ceil(remaining)),
                    ):
                        obj = event.get("raw_object") or {}
                        meta = obj.get("metadata") or {}
                        rv = meta.get("resourceVersion") or rv
                        if event.get("type") == "BOOKMARK" or meta.get("name") != name:
                            continue
                        if event.get("type") == "DELETED":
                            raise SandboxMetadataError(
                                f"SandboxClaim {namespace}/{name} was deleted while waiting for it to be {goal}."
                            )
                        if loop.time() >= deadline:
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
            except TimeoutError:
                continue
            except _TRANSPORT_ERRORS as exc:
                raise api_error(f"watch SandboxClaim {namespace}/{name}", exc, self.host) from exc
            finally:
                await w.close()

    async def wait_for_gateway_address(self, name: str, namespace: str, timeout: float) -> str:
        """Watch a Gateway until it reports a valid address; return it URL-ready."""
        api = await self._api()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        rv = "0"
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(
                    f"Gateway {namespace}/{name} had no usable address within {timeout:g}s. Check it "
                    f"with: kubectl get gateway {name} -n {namespace} -o yaml"
                )
            w = watch.Watch()
            try:
                async with asyncio.timeout(remaining + 1):
                    async for event in w.stream(
                        api.list_namespaced_custom_object,
                        C.GATEWAY_API_GROUP, C.GATEWAY_API_VERSION, namespace, C.GATEWAY_PLURAL,
                        field_selector=f"metadata.name={name}",
                        resource_version=rv,
                        timeout_seconds=max(1, math.ceil(remaining)),
                    ):
                        obj = event.get("raw_object") or {}
                        rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                        if event.get("type") in ("BOOKMARK", "DELETED"):
                            continue
                        address = gateway_address(obj)
                        if address:
                            return address
                        if loop.time() >= deadline:
                            break
            except ApiException as exc:
                if exc.status == 410:
                    rv = "0"
                    continue
                err = api_error(f"watch Gateway {namespace}/{name}", exc, self.host)
                hint = " Is the Gateway API installed?" if exc.status == 404 else ""
                raise SandboxRequestError(str(err) + hint, err.status_code, exc) from exc
            except TimeoutError:
                continue
            except _TRANSPORT_ERRORS as exc:
                raise api_error(f"watch Gateway {namespace}/{name}", exc, self.host) from exc
            finally:
                await w.close()
