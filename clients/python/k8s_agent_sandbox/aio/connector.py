"""HTTP connector of the async client (httpx)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

import httpx

from ..connector import (
    RETRY_STATUSES,
    describe_request,
    in_cluster_url,
    join_url,
    router_headers,
    status_error,
)
from ..exceptions import SandboxError, SandboxRequestError
from ..metrics import observe_discovery
from ..models import (
    ConnectionConfig,
    SandboxDirectConnectionConfig,
    SandboxGatewayConnectionConfig,
    SandboxInClusterConnectionConfig,
)
from ..utils import sandbox_pod_ip, timeout_header_value
from .k8s_helper import AsyncK8sHelper

log = logging.getLogger(__name__)

# Manual retry loop on 5xx: up to MAX_ATTEMPTS, sleeping BACKOFF * 2**attempt.
MAX_ATTEMPTS = 6
BACKOFF_SECONDS = 0.5
TRANSPORT_RETRIES = 3
DEFAULT_TIMEOUT = 60.0


def async_timeout_header_value(timeout: Any) -> str | None:
    """``X-Sandbox-Timeout`` for a float or an ``httpx.Timeout`` (its ``read`` value)."""
    if isinstance(timeout, httpx.Timeout):
        timeout = timeout.read
    return timeout_header_value(timeout)


class AsyncSandboxConnector:
    """Async connector: Direct, Gateway or InCluster; router headers; retries; typed errors."""

    def __init__(
        self, sandbox_id: str, namespace: str, connection_config: ConnectionConfig, k8s_helper: AsyncK8sHelper
    ) -> None:
        if not isinstance(
            connection_config,
            (SandboxDirectConnectionConfig, SandboxGatewayConnectionConfig, SandboxInClusterConnectionConfig),
        ):
            raise ValueError(f"AsyncSandboxClient does not support {type(connection_config).__name__}")
        self.sandbox_id = sandbox_id
        self.namespace = namespace
        self.connection_config = connection_config
        self.k8s_helper = k8s_helper
        self.server_port = connection_config.server_port
        self.sends_router_headers = not isinstance(connection_config, SandboxInClusterConnectionConfig)
        self._client: httpx.AsyncClient | None = None
        self._base_url: str | None = None
        self._pod_ip: str | None = None
        self._pod_ip_disabled = False
        self._lock = asyncio.Lock()

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                transport=httpx.AsyncHTTPTransport(retries=TRANSPORT_RETRIES),
                timeout=DEFAULT_TIMEOUT,
                follow_redirects=False,
                trust_env=False,
            )
        return self._client

    async def connect(self) -> str:
        """Resolve the base URL (gateway discovery / pod IP), cached until ``close``."""
        async with self._lock:
            if self._base_url is not None:
                return self._base_url
            config = self.connection_config
            if isinstance(config, SandboxDirectConnectionConfig):
                self._base_url = config.api_url
            elif isinstance(config, SandboxGatewayConnectionConfig):
                with observe_discovery("gateway"):
                    host = await self.k8s_helper.wait_for_gateway_address(
                        config.gateway_name, config.gateway_namespace, config.gateway_ready_timeout
                    )
                self._base_url = f"http://{host}"
            else:
                ip = None
                try:
                    ip = sandbox_pod_ip(await self.k8s_helper.get_sandbox(self.sandbox_id, self.namespace))
                except SandboxError as exc:
                    log.debug("pod IP lookup failed, using DNS: %s", exc)
                self._base_url = in_cluster_url(ip, self.sandbox_id, self.namespace, self.server_port)
            return self._base_url

    async def close(self) -> None:
        """Forget the connection state and close the HTTP client."""
        self._base_url = None
        self._pod_ip = None
        if self._client is not None:
            await self._client.aclose()
        self._client = None

    async def _resolve_pod_ip(self) -> str | None:
        if self._pod_ip_disabled:
            return None
        if self._pod_ip is None:
            try:
                sandbox = await self.k8s_helper.get_sandbox(self.sandbox_id, self.namespace)
            except SandboxRequestError as exc:
                if exc.status_code in (401, 403):
                    self._pod_ip_disabled = True
                return None
            self._pod_ip = sandbox_pod_ip(sandbox) or ""
        return self._pod_ip or None

    async def routing_headers(self, timeout: Any) -> dict[str, str]:
        """The ``X-Sandbox-*`` headers (empty for in-cluster connections)."""
        if not self.sends_router_headers:
            return {}
        return router_headers(
            self.sandbox_id,
            self.namespace,
            self.server_port,
            async_timeout_header_value(timeout),
            await self._resolve_pod_ip(),
        )

    async def send_request(
        self,
        method: str,
        endpoint: str,
        *,
        timeout: Any = DEFAULT_TIMEOUT,
        allowed_statuses: Iterable[int] = (),
        headers: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        """Send a request; retry 5xx up to ``MAX_ATTEMPTS``; raise :class:`SandboxRequestError` on failure."""
        base = await self.connect()
        url = join_url(base, endpoint)
        all_headers = dict(headers or {})
        all_headers.update(await self.routing_headers(timeout))
        what = describe_request(method, endpoint, self.namespace, self.sandbox_id)
        allowed = set(allowed_statuses)
        response: httpx.Response | None = None
        for attempt in range(MAX_ATTEMPTS):
            try:
                response = await self._http().request(method, url, headers=all_headers, timeout=timeout, **kwargs)
            except httpx.HTTPError as exc:
                await self.close()
                raise SandboxRequestError(
                    f"{what} failed: could not get a response from {base} ({exc!r}). "
                    "Check that the sandbox router is running and reachable.",
                    status_code=None,
                ) from exc
            if response.status_code in RETRY_STATUSES and response.status_code not in allowed and attempt + 1 < MAX_ATTEMPTS:
                await asyncio.sleep(BACKOFF_SECONDS * 2**attempt)
                continue
            break
        assert response is not None
        error = status_error(response, allowed, what)
        if error is not None:
            self._pod_ip = None
            if response.status_code >= 500:
                await self.close()
            raise error
        return response
