"""HTTP connector of the async client (httpx)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

import httpx

from .. import constants as C
from ..connector import REDIRECT_STATUSES, RETRY_STATUSES, response_detail
from ..exceptions import SandboxError, SandboxRequestError
from ..metrics import observe_discovery
from ..models import (
    ConnectionConfig,
    SandboxDirectConnectionConfig,
    SandboxGatewayConnectionConfig,
    SandboxInClusterConnectionConfig,
)
from ..utils import format_host, select_pod_ip, timeout_header_value
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
                    sandbox = await self.k8s_helper.get_sandbox(self.sandbox_id, self.namespace)
                    ip = select_pod_ip(((sandbox or {}).get("status") or {}).get("podIPs"))
                except SandboxError as exc:
                    log.debug("pod IP lookup failed, using DNS: %s", exc)
                host = format_host(ip) if ip else f"{self.sandbox_id}.{self.namespace}.svc.cluster.local"
                self._base_url = f"http://{host}:{self.server_port}"
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
            self._pod_ip = select_pod_ip(((sandbox or {}).get("status") or {}).get("podIPs")) or ""
        return self._pod_ip or None

    async def routing_headers(self, timeout: Any) -> dict[str, str]:
        """The ``X-Sandbox-*`` headers (empty for in-cluster connections)."""
        if not self.sends_router_headers:
            return {}
        headers = {
            C.HEADER_SANDBOX_ID: self.sandbox_id,
            C.HEADER_SANDBOX_NAMESPACE: self.namespace,
            C.HEADER_SANDBOX_PORT: str(self.server_port),
        }
        value = async_timeout_header_value(timeout)
        if value is not None:
            headers[C.HEADER_SANDBOX_TIMEOUT] = value
        ip = await self._resolve_pod_ip()
        if ip:
            headers[C.HEADER_SANDBOX_POD_IP] = ip
        return headers

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
        url = base.rstrip("/") + "/" + endpoint.lstrip("/")
        all_headers = dict(headers or {})
        all_headers.update(await self.routing_headers(timeout))
        what = f"{method} /{endpoint.lstrip('/')} on sandbox {self.namespace}/{self.sandbox_id}"
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
        status = response.status_code
        if status in allowed:
            return response
        if status in REDIRECT_STATUSES:
            self._pod_ip = None
            raise SandboxRequestError(
                f"{what} was answered with a redirect (HTTP {status} to {response.headers.get('location', '?')}); "
                "redirects are not followed.",
                status_code=status,
                response=response,
            )
        if status >= 400:
            detail = response_detail(response)
            self._pod_ip = None
            if status >= 500:
                await self.close()
            raise SandboxRequestError(f"{what} failed with HTTP {status}: {detail}.", status_code=status, response=response)
        return response
