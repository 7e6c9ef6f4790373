"""The ``Sandbox`` handle returned by ``SandboxClient.create_sandbox``."""

from __future__ import annotations

import logging
import threading
from types import TracebackType
from typing import Any, Self, cast

from . import constants as C
from .commands import CommandExecutor
from .connector import SandboxConnector
from .exceptions import SandboxError
from .files import Filesystem
from .k8s_helper import K8sHelper
from .models import (
    ConnectionConfig,
    SandboxdPodTunnelConnectionConfig,
    SandboxLocalTunnelConnectionConfig,
    SandboxTracerConfig,
)
from .tracing import TraceManager
from .utils import sandbox_pod_ip

log = logging.getLogger(__name__)


def sandbox_pod_name(sandbox: dict[str, Any] | None, sandbox_id: str) -> str:
    """The pod behind a Sandbox object: annotation ``agents.x-k8s.io/pod-name``, else ``sandbox_id``."""
    annotations = ((sandbox or {}).get("metadata") or {}).get("annotations") or {}
    name = annotations.get(C.POD_NAME_ANNOTATION)
    return name if isinstance(name, str) and name else sandbox_id


def sandbox_status(sandbox: dict[str, Any] | None, namespace: str, sandbox_id: str) -> tuple[str, str]:
    """``(state, message)`` of a Sandbox object (``None``: not found), from its Ready condition.

    Shared by :meth:`Sandbox.status` and :meth:`AsyncSandbox.status`.
    """
    if sandbox is None:
        return C.STATE_NOT_FOUND, f"Sandbox {namespace}/{sandbox_id} not found"
    for cond in (sandbox.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            message = str(cond.get("message") or cond.get("reason") or "")
            if cond.get("status") == "True":
                return C.STATE_READY, message
            return C.STATE_NOT_READY, message
    return C.STATE_NOT_READY, "Sandbox has no Ready condition yet"


class Sandbox:
    """A claimed sandbox: run commands (``.commands``) and move files (``.files``).

    Attributes:
        claim_name: the SandboxClaim that owns the sandbox (``None`` once terminated).
        sandbox_id: the Sandbox name (sent as ``X-Sandbox-ID``).
        namespace: the namespace of claim and sandbox.
        connection_config: how the runtime is reached.
        connector: the HTTP connector (``None`` after ``close_connection``/``terminate``).

    Use it as a context manager to terminate the sandbox on exit.
    """

    def __init__(
        self,
        claim_name: str | None,
        sandbox_id: str,
        namespace: str = C.DEFAULT_NAMESPACE,
        connection_config: ConnectionConfig | None = None,
        k8s_helper: K8sHelper | None = None,
        tracer_config: SandboxTracerConfig | None = None,
        trace_manager: TraceManager | None = None,
    ) -> None:
        self.claim_name = claim_name
        self.sandbox_id = sandbox_id
        self.namespace = namespace
        self.connection_config: ConnectionConfig = connection_config or SandboxLocalTunnelConnectionConfig()
        self.k8s_helper = k8s_helper or K8sHelper()
        self.tracer = trace_manager or TraceManager(tracer_config)
        self._lock = threading.RLock()
        self._pod_name: str | None = None
        self._lifecycle_span: Any = self.tracer.start_span("lifecycle")
        self.connector: SandboxConnector | None = SandboxConnector(
            sandbox_id, namespace, self.connection_config, self.k8s_helper, pod_name=self.get_pod_name
        )
        sandboxd = isinstance(self.connection_config, SandboxdPodTunnelConnectionConfig)
        self._commands: CommandExecutor | None = self._make_commands(sandboxd)
        self._files: Filesystem | None = Filesystem(self.connector, self.tracer, sandboxd=sandboxd)

    def _make_commands(self, sandboxd: bool) -> CommandExecutor:
        assert self.connector is not None
        if sandboxd:
            from .sandboxd import SandboxdCommandExecutor

            return SandboxdCommandExecutor(self.connector, self.tracer)
        return CommandExecutor(self.connector, self.tracer)

    # --- operations -----------------------------------------------------------

    # commands and files are None once the connection is closed, as in the
    # reference SDK (callers test `is None`). They are typed for the open
    # handle, the only one they are used on, so that `sandbox.commands.run(...)`
    # type-checks under mypy --strict as the README writes it.

    @property
    def commands(self) -> CommandExecutor:
        """Command execution (``None`` once the connection is closed)."""
        return cast("CommandExecutor", self._commands)

    @property
    def files(self) -> Filesystem:
        """File operations (``None`` once the connection is closed)."""
        return cast("Filesystem", self._files)

    @property
    def is_active(self) -> bool:
        """True until ``close_connection()`` or ``terminate()``."""
        return self.connector is not None and self.claim_name is not None

    # --- Kubernetes state -----------------------------------------------------

    def _get_sandbox_object(self) -> dict[str, Any] | None:
        return self.k8s_helper.get_sandbox(self.sandbox_id, self.namespace)

    def get_pod_name(self) -> str:
        """The pod backing the sandbox: annotation ``agents.x-k8s.io/pod-name``, else the sandbox name.

        Cached until the connection is closed.
        """
        with self._lock:
            if self._pod_name is None:
                self._pod_name = sandbox_pod_name(self._get_sandbox_object(), self.sandbox_id)
            return self._pod_name

    def get_pod_ip(self) -> str | None:
        """The pod IP from a fresh read of ``status.podIPs`` (IPv4 preferred), or ``None``."""
        return sandbox_pod_ip(self._get_sandbox_object())

    def get_sandbox_name_hash(self) -> str | None:
        """The ``agents.x-k8s.io/sandbox-name-hash`` value from ``status.selector``, or ``None``."""
        sandbox = self._get_sandbox_object() or {}
        selector = (sandbox.get("status") or {}).get("selector")
        if not isinstance(selector, str):
            return None
        for term in selector.split(","):
            key, sep, value = term.strip().partition("=")
            if sep and key.strip() == C.SANDBOX_NAME_HASH_LABEL:
                return value.strip().lstrip("=") or None
        return None

    def status(self) -> tuple[str, str]:
        """``(state, message)`` with state ``SandboxReady``, ``SandboxNotReady`` or ``SandboxNotFound``."""
        return sandbox_status(self._get_sandbox_object(), self.namespace, self.sandbox_id)

    # --- lifecycle ------------------------------------------------------------

    def close_connection(self) -> None:
        """Close the connection (tunnel, HTTP session) but keep the sandbox running."""
        with self._lock:
            if self.connector is not None:
                self.connector.close()
                self.connector.session.close()
            self.connector = None
            self._commands = None
            self._files = None
            self._pod_name = None
            if self._lifecycle_span is not None:
                self._lifecycle_span.end()
                self._lifecycle_span = None

    def terminate(self) -> None:
        """Close the connection and delete the SandboxClaim (and with it the sandbox).

        Idempotent; a claim that is already gone counts as success. If the
        delete fails the claim name is kept so ``terminate()`` can be retried.
        """
        with self._lock:
            self.close_connection()
            if self.claim_name is None:
                return
            with self.tracer.span("delete_claim", **{"sandbox.claim.name": self.claim_name}):
                self.k8s_helper.delete_sandbox_claim(self.claim_name, self.namespace)
            self.claim_name = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self.terminate()
        except SandboxError as err:
            if exc is None:
                raise
            log.warning("terminating sandbox %s failed: %s", self.claim_name, err)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(claim_name={self.claim_name!r}, sandbox_id={self.sandbox_id!r}, "
            f"namespace={self.namespace!r}, active={self.is_active})"
        )


__all__ = ["Sandbox"]
