"""``AsyncSandbox``: the handle returned by ``AsyncSandboxClient.create_sandbox``."""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType
from typing import Any

from .. import constants as C
from ..commands import parse_execution_result
from ..exceptions import SandboxError
from ..models import ConnectionConfig, ExecutionResult, FileEntry
from ..tracing import TraceManager
from ..utils import encode_path, sanitize_path, select_pod_ip
from .connector import AsyncSandboxConnector
from .k8s_helper import AsyncK8sHelper

log = logging.getLogger(__name__)


class AsyncCommandExecutor:
    """``await sandbox.commands.run(command)``."""

    def __init__(self, connector: AsyncSandboxConnector, tracer: TraceManager) -> None:
        self.connector = connector
        self.tracer = tracer

    async def run(self, command: str, timeout: Any = 60) -> ExecutionResult:
        """Run ``command`` through ``POST /execute`` (see :meth:`CommandExecutor.run`)."""
        if not isinstance(command, str) or not command.strip():
            raise ValueError("command must be a non-empty string")
        with self.tracer.span("run", **{"sandbox.command.executable": command.split()[0]}):
            response = await self.connector.send_request("POST", "execute", json={"command": command}, timeout=timeout)
            try:
                data = response.json()
            except ValueError as exc:
                raise RuntimeError(f"The sandbox returned a non-JSON response to /execute: {response.text[:200]!r}") from exc
            return parse_execution_result(data)


class AsyncFilesystem:
    """Async file operations over the legacy runtime API."""

    def __init__(self, connector: AsyncSandboxConnector, tracer: TraceManager) -> None:
        self.connector = connector
        self.tracer = tracer

    async def write(self, path: str, content: bytes | str, timeout: Any = 60, allow_unsafe_paths: bool = False) -> None:
        """Write ``content`` to ``path`` (see :meth:`Filesystem.write`)."""
        dest = path if allow_unsafe_paths else sanitize_path(path)
        if isinstance(content, str):
            data = content.encode("utf-8")
        elif isinstance(content, (bytes, bytearray, memoryview)):
            data = bytes(content)
        else:
            raise TypeError(f"content must be bytes or str, got {type(content).__name__}")
        with self.tracer.span("write", **{"sandbox.file.path": dest, "sandbox.file.size": len(data)}):
            await self.connector.send_request("POST", "upload", files={"file": (dest, data)}, timeout=timeout)

    async def read(self, path: str, timeout: Any = 60, allow_unsafe_paths: bool = False) -> bytes:
        """Return the bytes of ``path``."""
        src = path if allow_unsafe_paths else sanitize_path(path)
        with self.tracer.span("read", **{"sandbox.file.path": src}):
            response = await self.connector.send_request("GET", f"download/{encode_path(src)}", timeout=timeout)
            return response.content

    async def list(self, path: str, timeout: Any = 60) -> list[FileEntry]:
        """List the directory ``path``."""
        if not isinstance(path, str) or not path:
            raise ValueError("path must be a non-empty string")
        with self.tracer.span("list", **{"sandbox.file.path": path}):
            response = await self.connector.send_request("GET", f"list/{encode_path(path)}", timeout=timeout)
            if not response.content:
                return []
            try:
                items = response.json()
            except ValueError as exc:
                raise RuntimeError(f"The sandbox returned a non-JSON listing: {response.text[:200]!r}") from exc
            if not items:
                return []
            if not isinstance(items, list):
                raise RuntimeError(f"The sandbox returned an unexpected listing: {items!r:.200}")
            return [
                FileEntry.from_legacy(item)
                for item in items
                if isinstance(item, dict) and item.get("type") in ("file", "directory")
            ]

    async def exists(self, path: str, timeout: Any = 60) -> bool:
        """True when ``path`` exists."""
        if not isinstance(path, str) or not path:
            raise ValueError("path must be a non-empty string")
        with self.tracer.span("exists", **{"sandbox.file.path": path}):
            response = await self.connector.send_request("GET", f"exists/{encode_path(path)}", timeout=timeout)
            try:
                body = response.json()
            except ValueError as exc:
                raise RuntimeError(f"The sandbox returned a non-JSON exists answer: {response.text[:200]!r}") from exc
            if not isinstance(body, dict) or not isinstance(body.get("exists"), bool):
                raise RuntimeError(f"The sandbox returned an unexpected exists answer: {body!r:.200}")
            return body["exists"]

    async def delete(self, path: str, recursive: bool = False, timeout: Any = 60) -> None:
        """Not available on the legacy runtime API."""
        raise NotImplementedError(
            "files.delete needs the sandboxd API, which the async client does not reach; use "
            "commands.run(\"rm -f <path>\") instead."
        )


class AsyncSandbox:
    """Async sandbox handle; ``async with`` terminates it on exit."""

    def __init__(
        self,
        claim_name: str | None,
        sandbox_id: str,
        namespace: str,
        connection_config: ConnectionConfig,
        k8s_helper: AsyncK8sHelper,
        tracer: TraceManager | None = None,
    ) -> None:
        self.claim_name = claim_name
        self.sandbox_id = sandbox_id
        self.namespace = namespace
        self.connection_config = connection_config
        self.k8s_helper = k8s_helper
        self.tracer = tracer or TraceManager(None)
        self.connector: AsyncSandboxConnector | None = AsyncSandboxConnector(
            sandbox_id, namespace, connection_config, k8s_helper
        )
        self._commands: AsyncCommandExecutor | None = AsyncCommandExecutor(self.connector, self.tracer)
        self._files: AsyncFilesystem | None = AsyncFilesystem(self.connector, self.tracer)
        self._pod_name: str | None = None
        self._lock = asyncio.Lock()

    @property
    def commands(self) -> AsyncCommandExecutor | None:
        """Command execution (``None`` once closed)."""
        return self._commands

    @property
    def files(self) -> AsyncFilesystem | None:
        """File operations (``None`` once closed)."""
        return self._files

    @property
    def is_active(self) -> bool:
        """True until ``close_connection()`` or ``terminate()``."""
        return self.connector is not None and self.claim_name is not None

    async def get_pod_name(self) -> str:
        """Pod name from annotation ``agents.x-k8s.io/pod-name``, else the sandbox name (cached)."""
        if self._pod_name is None:
            sandbox = await self.k8s_helper.get_sandbox(self.sandbox_id, self.namespace) or {}
            name = ((sandbox.get("metadata") or {}).get("annotations") or {}).get(C.POD_NAME_ANNOTATION)
            self._pod_name = name if isinstance(name, str) and name else self.sandbox_id
        return self._pod_name

    async def get_pod_ip(self) -> str | None:
        """Fresh pod IP from ``status.podIPs`` (IPv4 preferred)."""
        sandbox = await self.k8s_helper.get_sandbox(self.sandbox_id, self.namespace) or {}
        return select_pod_ip((sandbox.get("status") or {}).get("podIPs"))

    async def status(self) -> tuple[str, str]:
        """``(state, message)`` like :meth:`Sandbox.status`."""
        sandbox = await self.k8s_helper.get_sandbox(self.sandbox_id, self.namespace)
        if sandbox is None:
            return C.STATE_NOT_FOUND, f"Sandbox {self.namespace}/{self.sandbox_id} not found"
        for cond in (sandbox.get("status") or {}).get("conditions") or []:
            if isinstance(cond, dict) and cond.get("type") == "Ready":
                message = str(cond.get("message") or cond.get("reason") or "")
                return (C.STATE_READY if cond.get("status") == "True" else C.STATE_NOT_READY), message
        return C.STATE_NOT_READY, "Sandbox has no Ready condition yet"

    async def close_connection(self) -> None:
        """Close the HTTP connection; the sandbox keeps running."""
        if self.connector is not None:
            await self.connector.close()
        self.connector = None
        self._commands = None
        self._files = None
        self._pod_name = None

    async def terminate(self) -> None:
        """Close and delete the claim (idempotent; claim name kept if the delete fails)."""
        async with self._lock:
            await self.close_connection()
            if self.claim_name is None:
                return
            await self.k8s_helper.delete_sandbox_claim(self.claim_name, self.namespace)
            self.claim_name = None

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self.terminate()
        except SandboxError as err:
            if exc is None:
                raise
            log.warning("terminating sandbox %s failed: %s", self.claim_name, err)
