"""``AsyncSandboxClient``: the asyncio version of :class:`SandboxClient`."""

from __future__ import annotations

import asyncio
import atexit
import logging
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from .. import constants as C
from ..exceptions import SandboxNotFoundError
from ..k8s_helper import claim_warmpool_ref, resource_version_of
from ..models import (
    ConnectionConfig,
    SandboxdPodTunnelConnectionConfig,
    SandboxLocalTunnelConnectionConfig,
    SandboxTracerConfig,
)
from ..sandbox_client import (
    build_claim_manifest,
    claim_names,
    claim_warmpool_name,
    require_claim,
    validate_create_args,
)
from ..tracing import TraceManager
from ..utils import generate_claim_name, validate_namespace
from .k8s_helper import AsyncK8sHelper
from .sandbox import AsyncSandbox

log = logging.getLogger(__name__)


class AsyncSandboxClient:
    """Create and track sandboxes from asyncio code.

    Args:
        connection_config: required; ``SandboxDirectConnectionConfig``,
            ``SandboxGatewayConnectionConfig`` or ``SandboxInClusterConnectionConfig``
            (the local tunnel is not supported by the async client).
        tracer_config: OpenTelemetry settings.
        cleanup: delete tracked sandboxes at interpreter exit (default true).

    ``async with AsyncSandboxClient(cfg) as client:`` deletes every tracked
    sandbox and closes the client on exit.
    """

    sandbox_class: type[AsyncSandbox] = AsyncSandbox

    def __init__(
        self,
        connection_config: ConnectionConfig,
        tracer_config: SandboxTracerConfig | None = None,
        cleanup: bool = True,
        *,
        k8s_helper: AsyncK8sHelper | None = None,
    ) -> None:
        if connection_config is None:
            raise ValueError("AsyncSandboxClient requires a connection_config")
        if isinstance(connection_config, SandboxLocalTunnelConnectionConfig):
            raise ValueError(
                "AsyncSandboxClient does not support SandboxLocalTunnelConnectionConfig; use "
                "SandboxDirectConnectionConfig(api_url=...) or SandboxGatewayConnectionConfig(...), "
                "or the sync SandboxClient for the kubectl port-forward tunnel."
            )
        if isinstance(connection_config, SandboxdPodTunnelConnectionConfig):
            raise NotImplementedError("AsyncSandboxClient does not support SandboxdPodTunnelConnectionConfig yet")
        self.connection_config = connection_config
        self.tracer_config = tracer_config or SandboxTracerConfig()
        self.tracer = TraceManager(self.tracer_config)
        self.k8s_helper = k8s_helper or AsyncK8sHelper()
        self._sandboxes: dict[tuple[str, str], AsyncSandbox] = {}
        self._cleanup = cleanup
        if cleanup:
            atexit.register(self._atexit_cleanup)

    def _atexit_cleanup(self) -> None:
        if not self._sandboxes:
            return
        try:
            asyncio.run(self._cleanup_in_fresh_loop())
        except Exception as exc:  # noqa: BLE001 - best effort at exit
            log.warning("AsyncSandboxClient cleanup at exit failed: %s", exc)

    async def _cleanup_in_fresh_loop(self) -> None:
        # The original loop (and its aiohttp session) is gone: use a new helper.
        helper = AsyncK8sHelper()
        try:
            for namespace, claim in list(self._sandboxes):
                try:
                    await helper.delete_sandbox_claim(claim, namespace)
                except Exception as exc:  # noqa: BLE001 - best effort at exit: log and go on
                    log.warning("could not delete SandboxClaim %s/%s: %s", namespace, claim, exc)
            self._sandboxes.clear()
        finally:
            await helper.close()

    async def create_sandbox(
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
    ) -> AsyncSandbox:
        """Claim a sandbox from ``warmpool`` and wait until Ready (see :meth:`SandboxClient.create_sandbox`).

        Cancelling the call still deletes the claim.
        """
        validate_create_args(warmpool, namespace, sandbox_ready_timeout)
        claim_name = generate_claim_name()
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
        created = await self.k8s_helper.create_sandbox_claim(namespace, manifest)
        try:
            rv = resource_version_of(created)
            sandbox_name = await self.k8s_helper.wait_for_claim_ready(claim_name, namespace, float(sandbox_ready_timeout), rv)
            sandbox = self.sandbox_class(
                claim_name, sandbox_name, namespace, self.connection_config, self.k8s_helper, self.tracer
            )
        except BaseException:
            await asyncio.shield(self._delete_claim_quietly(claim_name, namespace))
            raise
        self._sandboxes[(namespace, claim_name)] = sandbox
        return sandbox

    async def _delete_claim_quietly(self, claim_name: str, namespace: str) -> None:
        try:
            await self.k8s_helper.delete_sandbox_claim(claim_name, namespace)
        except Exception as exc:  # noqa: BLE001 - cleanup must not hide the original error
            log.warning("could not delete SandboxClaim %s/%s: %s", namespace, claim_name, exc)

    async def get_sandbox(
        self,
        claim_name: str,
        namespace: str = C.DEFAULT_NAMESPACE,
        resolve_timeout: float = 30,
        warmpool_name: str | None = None,
    ) -> AsyncSandbox:
        """Re-attach to a claim; with ``warmpool_name`` the claim must come from that pool."""
        validate_namespace(namespace)
        key = (namespace, claim_name)
        if warmpool_name is not None:
            claim = await self.k8s_helper.get_sandbox_claim(claim_name, namespace)
            actual = claim_warmpool_ref(require_claim(claim, claim_name, namespace))
            if actual != warmpool_name:
                raise ValueError(
                    f"Refusing to reattach to SandboxClaim {namespace}/{claim_name}: it uses warm pool "
                    f"{actual!r}, not {warmpool_name!r}."
                )
        try:
            sandbox_name = await self.k8s_helper.resolve_sandbox_name(claim_name, namespace, resolve_timeout)
            if await self.k8s_helper.get_sandbox(sandbox_name, namespace) is None:
                raise SandboxNotFoundError(
                    f"SandboxClaim {namespace}/{claim_name} refers to Sandbox {sandbox_name!r}, which no longer exists."
                )
        except SandboxNotFoundError:
            stale = self._sandboxes.pop(key, None)
            if stale is not None:
                await stale.close_connection()
            raise
        cached = self._sandboxes.get(key)
        if cached is not None and cached.is_active and cached.sandbox_id == sandbox_name:
            return cached
        sandbox = self.sandbox_class(claim_name, sandbox_name, namespace, self.connection_config, self.k8s_helper, self.tracer)
        self._sandboxes[key] = sandbox
        return sandbox

    def list_active_sandboxes(self) -> list[tuple[str, str]]:
        """``(namespace, claim_name)`` of active tracked handles."""
        return [key for key, sb in self._sandboxes.items() if sb.is_active]

    async def list_all_sandboxes(self, namespace: str = C.DEFAULT_NAMESPACE, label_selector: str | None = None) -> list[str]:
        """Names of all SandboxClaims in ``namespace``."""
        return claim_names(await self.k8s_helper.list_sandbox_claims(namespace, label_selector))

    async def get_sandbox_claim_warmpool_name(self, claim_name: str, namespace: str = C.DEFAULT_NAMESPACE) -> str | None:
        """``spec.warmPoolRef.name`` of a claim."""
        claim = await self.k8s_helper.get_sandbox_claim(claim_name, namespace)
        return claim_warmpool_name(require_claim(claim, claim_name, namespace))

    async def delete_sandbox(self, claim_name: str, namespace: str = C.DEFAULT_NAMESPACE) -> None:
        """Terminate a tracked sandbox or delete the claim; errors are logged, never raised."""
        sandbox = self._sandboxes.pop((namespace, claim_name), None)
        try:
            if sandbox is not None:
                await sandbox.terminate()
            else:
                await self.k8s_helper.delete_sandbox_claim(claim_name, namespace)
        except Exception as exc:  # noqa: BLE001 - documented as best effort
            log.error("failed to delete sandbox claim %s/%s: %s", namespace, claim_name, exc)

    async def delete_all(self) -> None:
        """Delete every tracked sandbox (best effort)."""
        for namespace, claim_name in list(self._sandboxes):
            await self.delete_sandbox(claim_name, namespace)

    async def close(self) -> None:
        """Close connections and the Kubernetes client (sandboxes are not deleted)."""
        for sandbox in list(self._sandboxes.values()):
            await sandbox.close_connection()
        await self.k8s_helper.close()
        if self._cleanup and not self._sandboxes:
            atexit.unregister(self._atexit_cleanup)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.delete_all()
        await self.close()
