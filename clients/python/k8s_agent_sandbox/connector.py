"""HTTP connector of the sync client: connection strategies, routing headers, retries, errors."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol
from urllib.parse import urlencode

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from . import constants as C
from .exceptions import SandboxError, SandboxPortForwardError, SandboxRequestError
from .k8s_helper import K8sHelper
from .metrics import observe_discovery
from .models import (
    ConnectionConfig,
    SandboxDirectConnectionConfig,
    SandboxdPodTunnelConnectionConfig,
    SandboxGatewayConnectionConfig,
    SandboxInClusterConnectionConfig,
    SandboxLocalTunnelConnectionConfig,
)
from .port_forward import KubectlPortForward
from .utils import format_host, sandbox_pod_ip, timeout_header_value

log = logging.getLogger(__name__)

# Transport retry policy (urllib3): connect/read errors and these statuses,
# exponential backoff. Module-level so tests can shorten the backoff.
RETRY_TOTAL = 5
RETRY_BACKOFF_FACTOR = 0.5
RETRY_STATUSES = (500, 502, 503, 504)
RETRY_METHODS = frozenset({"GET", "POST", "PUT", "DELETE"})
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


class ConnectionStrategy(Protocol):
    """How the connector reaches the sandbox runtime."""

    mode: str
    sends_router_headers: bool

    def connect(self) -> str:
        """Return the base URL, establishing the connection if needed."""

    def check_alive(self) -> None:
        """Raise :class:`SandboxPortForwardError` when an established tunnel died."""

    def close(self) -> None:
        """Release what ``connect`` acquired (idempotent)."""


class DirectStrategy:
    """A fixed base URL (``SandboxDirectConnectionConfig.api_url``)."""

    mode = "direct"
    sends_router_headers = True

    def __init__(self, api_url: str) -> None:
        self.api_url = api_url

    def connect(self) -> str:
        return self.api_url

    def check_alive(self) -> None:
        return None

    def close(self) -> None:
        return None


class GatewayStrategy:
    """Discovers the router's address from a Gateway API ``Gateway`` (watched, then cached)."""

    mode = "gateway"
    sends_router_headers = True

    def __init__(self, config: SandboxGatewayConnectionConfig, k8s: K8sHelper) -> None:
        self.config = config
        self.k8s = k8s
        self._url: str | None = None

    def connect(self) -> str:
        if self._url is None:
            with observe_discovery(self.mode):
                host = self.k8s.wait_for_gateway_address(
                    self.config.gateway_name, self.config.gateway_namespace, self.config.gateway_ready_timeout
                )
            self._url = f"http://{host}"
        return self._url

    def check_alive(self) -> None:
        return None

    def close(self) -> None:
        self._url = None


class LocalTunnelStrategy:
    """``kubectl port-forward svc/sandbox-router-svc <local>:8080 -n <router_namespace>``."""

    mode = "port_forward"
    sends_router_headers = True

    def __init__(self, config: SandboxLocalTunnelConnectionConfig) -> None:
        self.config = config
        self.tunnel = KubectlPortForward(
            f"svc/{C.ROUTER_SERVICE_NAME}",
            [C.ROUTER_SERVICE_PORT],
            config.router_namespace,
            config.port_forward_ready_timeout,
        )
        self._url: str | None = None

    def connect(self) -> str:
        if self._url is None or not self.tunnel.alive():
            with observe_discovery(self.mode):
                (port,) = self.tunnel.start()
            self._url = f"http://127.0.0.1:{port}"
        return self._url

    def check_alive(self) -> None:
        if self._url is not None and not self.tunnel.alive():
            tail = self.tunnel.stderr_tail()
            self.close()
            raise SandboxPortForwardError(
                "The port-forward to the sandbox router died"
                + (f": {tail}" if tail else "")
                + ". The next call starts a new one."
            )

    def close(self) -> None:
        self.tunnel.close()
        self._url = None


class InClusterStrategy:
    """From inside the cluster: ``http://<podIP>:<port>``, else the sandbox Service DNS name."""

    mode = "in_cluster"
    sends_router_headers = False

    def __init__(
        self, config: SandboxInClusterConnectionConfig, sandbox_id: str, namespace: str, k8s: K8sHelper
    ) -> None:
        self.config = config
        self.sandbox_id = sandbox_id
        self.namespace = namespace
        self.k8s = k8s
        self._url: str | None = None

    def connect(self) -> str:
        if self._url is None:
            ip = None
            try:
                ip = sandbox_pod_ip(self.k8s.get_sandbox(self.sandbox_id, self.namespace))
            except SandboxError as exc:
                log.debug("pod IP lookup failed, using DNS: %s", exc)
            self._url = in_cluster_url(ip, self.sandbox_id, self.namespace, self.config.server_port)
        return self._url

    def check_alive(self) -> None:
        return None

    def close(self) -> None:
        self._url = None


class SandboxdPodTunnelStrategy:
    """``kubectl port-forward pod/<pod> <l1>:<rest_port> <l2>:<grpc_port>`` for sandboxd."""

    mode = "sandboxd_pod_tunnel"
    sends_router_headers = False

    def __init__(
        self, config: SandboxdPodTunnelConnectionConfig, namespace: str, pod_name: Callable[[], str]
    ) -> None:
        self.config = config
        self.namespace = namespace
        self.pod_name = pod_name
        self.tunnel: KubectlPortForward | None = None
        self._url: str | None = None
        self.grpc_target: str | None = None

    def connect(self) -> str:
        if self._url is None or self.tunnel is None or not self.tunnel.alive():
            self.close()
            self.tunnel = KubectlPortForward(
                f"pod/{self.pod_name()}",
                [self.config.rest_port, self.config.grpc_port],
                self.namespace,
                self.config.port_forward_ready_timeout,
            )
            with observe_discovery(self.mode):
                rest, grpc_port = self.tunnel.start()
            self._url = f"http://127.0.0.1:{rest}"
            self.grpc_target = f"127.0.0.1:{grpc_port}"
        return self._url

    def check_alive(self) -> None:
        if self._url is not None and (self.tunnel is None or not self.tunnel.alive()):
            tail = self.tunnel.stderr_tail() if self.tunnel else ""
            self.close()
            raise SandboxPortForwardError(
                "The port-forward to the sandbox pod died" + (f": {tail}" if tail else "") + "."
            )

    def close(self) -> None:
        if self.tunnel is not None:
            self.tunnel.close()
        self.tunnel = None
        self._url = None
        self.grpc_target = None


def make_strategy(
    config: ConnectionConfig, sandbox_id: str, namespace: str, k8s: K8sHelper, pod_name: Callable[[], str]
) -> ConnectionStrategy:
    """Pick the strategy for a connection config."""
    if isinstance(config, SandboxDirectConnectionConfig):
        return DirectStrategy(config.api_url)
    if isinstance(config, SandboxGatewayConnectionConfig):
        return GatewayStrategy(config, k8s)
    if isinstance(config, SandboxLocalTunnelConnectionConfig):
        return LocalTunnelStrategy(config)
    if isinstance(config, SandboxInClusterConnectionConfig):
        return InClusterStrategy(config, sandbox_id, namespace, k8s)
    if isinstance(config, SandboxdPodTunnelConnectionConfig):
        return SandboxdPodTunnelStrategy(config, namespace, pod_name)
    raise ValueError(f"Unsupported connection config: {type(config).__name__}")


def new_session() -> requests.Session:
    """A ``requests.Session`` with the SDK's urllib3 retry policy."""
    retry = Retry(
        total=RETRY_TOTAL,
        backoff_factor=RETRY_BACKOFF_FACTOR,
        status_forcelist=RETRY_STATUSES,
        allowed_methods=RETRY_METHODS,
        raise_on_status=False,
        redirect=False,
    )
    adapter = HTTPAdapter(max_retries=retry)
    session = requests.Session()
    session.trust_env = False  # never send sandbox traffic through an HTTP(S)_PROXY
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def response_detail(response: Any) -> str:
    """The ``detail``/``message`` of an error body, else its first 256 characters."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        for key in ("detail", "message", "error"):
            value = body.get(key)
            if isinstance(value, str):
                return value
    text = getattr(response, "text", "") or ""
    return text[:256]


BAD_GATEWAY_HINT = " The router could not reach the sandbox pod; check sandbox.status() and the pod."


def in_cluster_url(pod_ip: str | None, sandbox_id: str, namespace: str, port: int) -> str:
    """``http://<pod IP>:<port>``, else the sandbox Service's DNS name when the IP is unknown."""
    host = format_host(pod_ip) if pod_ip else f"{sandbox_id}.{namespace}.svc.cluster.local"
    return f"http://{host}:{port}"


def join_url(base: str, endpoint: str) -> str:
    """``<base>/<endpoint>`` with exactly one slash between them."""
    return base.rstrip("/") + "/" + endpoint.lstrip("/")


def describe_request(method: str, endpoint: str, namespace: str, sandbox_id: str) -> str:
    """How error messages name a request: ``GET /path on sandbox <ns>/<id>``."""
    return f"{method} /{endpoint.lstrip('/')} on sandbox {namespace}/{sandbox_id}"


def router_headers(
    sandbox_id: str, namespace: str, server_port: int, timeout_value: str | None, pod_ip: str | None
) -> dict[str, str]:
    """The ``X-Sandbox-*`` headers the router routes by; timeout and pod IP only when known."""
    headers = {
        C.HEADER_SANDBOX_ID: sandbox_id,
        C.HEADER_SANDBOX_NAMESPACE: namespace,
        C.HEADER_SANDBOX_PORT: str(server_port),
    }
    if timeout_value is not None:
        headers[C.HEADER_SANDBOX_TIMEOUT] = timeout_value
    if pod_ip:
        headers[C.HEADER_SANDBOX_POD_IP] = pod_ip
    return headers


def status_error(
    response: Any, allowed: set[int], what: str, bad_gateway_hint: str = ""
) -> SandboxRequestError | None:
    """The error for a final response's status, or ``None`` when the response is usable.

    Statuses in ``allowed`` are usable; redirects (never followed) and other
    4xx/5xx are errors. Works on ``requests`` and ``httpx`` responses, so both
    connectors word their errors the same; they drop the cached pod IP on
    any error and reconnect after a 5xx. ``bad_gateway_hint`` is appended to
    a 502's message.
    """
    status = response.status_code
    if status in allowed:
        return None
    if status in REDIRECT_STATUSES:
        return SandboxRequestError(
            f"{what} was answered with a redirect (HTTP {status} to "
            f"{response.headers.get('Location', '?')}); redirects are not followed.",
            status_code=status,
            response=response,
        )
    if status >= 400:
        detail = response_detail(response)
        hint = bad_gateway_hint if status == 502 else ""
        return SandboxRequestError(
            f"{what} failed with HTTP {status}: {detail}.{hint}", status_code=status, response=response
        )
    return None


def response_json(response: Any, what: str) -> Any:
    """The JSON body of a runtime response; ``RuntimeError`` naming ``what`` when it is not JSON.

    ``what`` completes "The sandbox returned a non-JSON ...", e.g. ``"listing"``.
    """
    try:
        return response.json()
    except ValueError as exc:
        raise RuntimeError(f"The sandbox returned a non-JSON {what}: {response.text[:200]!r}") from exc


_NO_POD_IP = ""


class SandboxConnector:
    """Sends runtime API requests for one sandbox through the configured strategy.

    Adds the router headers when the strategy goes through the router, never
    follows redirects, retries transport errors and 5xx (urllib3), and turns
    every failure into :class:`SandboxRequestError`. A transport error or a
    5xx closes the connection (tunnel torn down); the next call reconnects.
    """

    def __init__(
        self,
        sandbox_id: str,
        namespace: str,
        connection_config: ConnectionConfig,
        k8s_helper: K8sHelper,
        strategy: ConnectionStrategy | None = None,
        pod_name: Callable[[], str] | None = None,
    ) -> None:
        self.sandbox_id = sandbox_id
        self.namespace = namespace
        self.connection_config = connection_config
        self.k8s_helper = k8s_helper
        self.server_port = getattr(connection_config, "server_port", C.DEFAULT_SERVER_PORT)
        self.strategy = strategy or make_strategy(
            connection_config, sandbox_id, namespace, k8s_helper, pod_name or (lambda: sandbox_id)
        )
        self.session = new_session()
        self._lock = threading.RLock()
        self._base_url: str | None = None
        self._pod_ip: str | None = None
        self._pod_ip_disabled = False

    @property
    def base_url(self) -> str | None:
        """The base URL of the current connection, if connected."""
        return self._base_url

    def connect(self) -> str:
        """Establish the connection (idempotent) and return the base URL."""
        with self._lock:
            if self._base_url is not None:
                self.strategy.check_alive()
            if self._base_url is None:
                self._base_url = self.strategy.connect()
            return self._base_url

    def close(self) -> None:
        """Tear down the connection and forget the cached pod IP (idempotent)."""
        with self._lock:
            self.strategy.close()
            self._base_url = None
            self._pod_ip = None

    def _resolve_pod_ip(self) -> str | None:
        if self._pod_ip_disabled:
            return None
        if self._pod_ip is None:
            try:
                sandbox = self.k8s_helper.get_sandbox(self.sandbox_id, self.namespace)
            except SandboxRequestError as exc:
                if exc.status_code in (401, 403):
                    log.info("no permission to read Sandbox status; not sending %s", C.HEADER_SANDBOX_POD_IP)
                    self._pod_ip_disabled = True
                return None
            self._pod_ip = sandbox_pod_ip(sandbox) or _NO_POD_IP
        return self._pod_ip or None

    def routing_headers(self, timeout: Any) -> dict[str, str]:
        """The ``X-Sandbox-*`` headers for a request with ``timeout`` (empty when not routed)."""
        if not self.strategy.sends_router_headers:
            return {}
        return router_headers(
            self.sandbox_id, self.namespace, self.server_port, timeout_header_value(timeout), self._resolve_pod_ip()
        )

    def send_request(
        self,
        method: str,
        endpoint: str,
        *,
        timeout: Any = C.DEFAULT_REQUEST_TIMEOUT,
        allowed_statuses: Iterable[int] = (),
        headers: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> requests.Response:
        """Send ``method`` to ``<base>/<endpoint>`` and return the successful response.

        Raises :class:`SandboxRequestError` on transport failures, redirects and
        non-2xx statuses not listed in ``allowed_statuses``, and
        :class:`SandboxPortForwardError` when the tunnel cannot be (re)started.
        """
        base = self.connect()
        url = join_url(base, endpoint)
        all_headers = dict(headers or {})
        all_headers.update(self.routing_headers(timeout))
        kwargs.pop("allow_redirects", None)
        what = describe_request(method, endpoint, self.namespace, self.sandbox_id)
        params = kwargs.pop("params", None)
        if params:
            url += "?" + urlencode(params)
        try:
            prepared = self.session.prepare_request(requests.Request(method, url, headers=all_headers, **kwargs))
            # requests re-quotes URLs and decodes %2E back to "."; keep our
            # encoding so dot segments never reach a path-cleaning router.
            prepared.url = url
            response = self.session.send(prepared, timeout=timeout, allow_redirects=False)
        except requests.RequestException as exc:
            try:
                self.strategy.check_alive()
            except SandboxPortForwardError:
                self.close()
                raise
            self.close()
            raise SandboxRequestError(
                f"{what} failed: could not get a response from {base} ({exc}). {self._unreachable_hint(base)}",
                status_code=None,
            ) from exc
        error = status_error(response, set(allowed_statuses), what, BAD_GATEWAY_HINT)
        if error is not None:
            self._pod_ip = None
            if response.status_code >= 500:
                self.close()
            raise error
        return response

    def _unreachable_hint(self, base: str) -> str:
        config = self.connection_config
        if isinstance(config, SandboxDirectConnectionConfig):
            return f"Check that the sandbox router is running and reachable at api_url={config.api_url!r}."
        if isinstance(config, SandboxLocalTunnelConnectionConfig):
            return (
                "Check the router Service: kubectl get svc "
                f"{C.ROUTER_SERVICE_NAME} -n {config.router_namespace}."
            )
        if isinstance(config, SandboxGatewayConnectionConfig):
            return (
                f"Check that Gateway {config.gateway_namespace}/{config.gateway_name} routes to the "
                "sandbox router."
            )
        return "Check that the sandbox pod is running and reachable."
