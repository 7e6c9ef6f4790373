"""Kubernetes API access for the async client (``kubernetes_asyncio``).

Only the I/O lives here: what the requests contain, how watch events are
judged and how errors are worded is shared with the sync helper through
:mod:`k8s_agent_sandbox.k8s_helper` (:class:`~k8s_agent_sandbox.k8s_helper.ResourceWatch`
and friends), so both clients behave the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.config_exception import ConfigException

from .. import constants as C
from ..k8s_helper import (
    WATCH_EXPIRED,
    ClaimWatch,
    GatewayWatch,
    ResourceWatch,
    api_error,
    bound_sandbox_name,
    kubeconfig_path,
    no_configuration_error,
    resource_version_of,
)

_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (aiohttp.ClientError, OSError)
_API_ERRORS: tuple[type[BaseException], ...] = (ApiException, *_TRANSPORT_ERRORS)


async def load_configuration() -> client.Configuration:
    """In-cluster credentials, else the kubeconfig from ``KUBECONFIG`` (or ``~/.kube/config``)."""
    cfg = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=cfg)
        return cfg
    except ConfigException:
        pass
    kubeconfig = kubeconfig_path()
    try:
        await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    except (ConfigException, OSError) as exc:
        raise no_configuration_error(kubeconfig, exc) from exc
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
        except _API_ERRORS as exc:
            if not_found_none and isinstance(exc, ApiException) and exc.status == 404:
                return None
            raise api_error(action, exc, self.host) from exc

    async def create_sandbox_claim(self, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
        api = await self._api()
        found: dict[str, Any] = await self._call(
            f"create SandboxClaim in namespace {namespace!r}",
            api.create_namespaced_custom_object,
            C.CLAIM_API_GROUP, C.CLAIM_API_VERSION, namespace, C.CLAIM_PLURAL, manifest,
        )
        return found

    async def get_sandbox_claim(self, name: str, namespace: str) -> dict[str, Any] | None:
        api = await self._api()
        found: dict[str, Any] | None = await self._call(
            f"get SandboxClaim {namespace}/{name}",
            api.get_namespaced_custom_object,
            C.CLAIM_API_GROUP, C.CLAIM_API_VERSION, namespace, C.CLAIM_PLURAL, name,
            not_found_none=True,
        )
        return found

    async def list_sandbox_claims(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        api = await self._api()
        kwargs: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
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
        found: dict[str, Any] | None = await self._call(
            f"get Sandbox {namespace}/{name}",
            api.get_namespaced_custom_object,
            C.SANDBOX_API_GROUP, C.SANDBOX_API_VERSION, namespace, C.SANDBOX_PLURAL, name,
            not_found_none=True,
        )
        return found

    async def wait_for_claim_ready(
        self, name: str, namespace: str, timeout: float, resource_version: str | None = None
    ) -> str:
        """Watch the claim until it names a Ready sandbox (see the sync helper for the rules)."""
        return await self._watch(ClaimWatch.until_ready(name, namespace, timeout, resource_version))

    async def resolve_sandbox_name(self, name: str, namespace: str, timeout: float) -> str:
        claim = await self.get_sandbox_claim(name, namespace)
        found = bound_sandbox_name(claim, name, namespace)
        if found:
            return found
        return await self._watch(ClaimWatch.until_bound(name, namespace, timeout, resource_version_of(claim)))

    async def wait_for_gateway_address(self, name: str, namespace: str, timeout: float) -> str:
        """Watch a Gateway until it reports a valid address; return it URL-ready."""
        return await self._watch(GatewayWatch(name, namespace, timeout))

    async def _watch(self, state: ResourceWatch) -> str:
        """Run the WATCH loop that ``state`` decides, on the event loop's clock.

        Each stream is bounded by ``asyncio.timeout(remaining + 1)``; hitting
        it just reopens the watch (the next round raises once the budget is spent).
        """
        api = await self._api()
        state.start(asyncio.get_running_loop().time)
        while True:
            remaining = state.remaining()
            w = watch.Watch()
            try:
                async with asyncio.timeout(remaining + 1):
                    async for event in w.stream(
                        api.list_namespaced_custom_object, *state.list_args(), **state.list_kwargs(remaining)
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
            except TimeoutError:
                continue
            except _TRANSPORT_ERRORS as exc:
                raise state.transport_error(exc, self.host) from exc
            finally:
                await w.close()
