"""``AsyncSandbox``: the handle returned by ``AsyncSandboxClient.create_sandbox``."""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType
from typing import Any, Self, cast

from ..commands import check_command, parse_execute_response
from ..exceptions import SandboxError
from ..files import check_path, encode_content, parse_exists, parse_listing
from ..models import ConnectionConfig, ExecutionResult, FileEntry
from ..sandbox import sandbox_pod_name, sandbox_status
from ..tracing import TraceManager
from ..utils import encode_path, sandbox_pod_ip, sanitize_path
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
        executable = check_command(command)
        with self.tracer.span("run", **{"sandbox.command.executable": executable}):
            response = await self.connector.send_request("POST", "execute", json={"command": command}, timeout=timeout)
            return parse_execute_response(response)


class AsyncFilesystem:
    """Async file operations over the legacy runtime API."""

    def __init__(self, connector: AsyncSandboxConnector, tracer: TraceManager) -> None:
        self.connector = connector
        self.tracer = tracer

    async def write(self, path: str, content: bytes | str, timeout: Any = 60, allow_unsafe_paths: bool = False) -> None:
        """Write ``content`` to ``path`` (see :meth:`Filesystem.write`)."""
        dest = path if allow_unsafe_paths else sanitize_path(path)
        data = encode_content(content)
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
        check_path(path)
        with self.tracer.span("list", **{"sandbox.file.path": path}):
            response = await self.connector.send_request("GET", f"list/{encode_path(path)}", timeout=timeout)
            return parse_listing(response)

    async def exists(self, path: str, timeout: Any = 60) -> bool:
        """True when ``path`` exists."""
        check_path(path)
        with self.tracer.span("exists", **{"sandbox.file.path": path}):
            response = await self.connector.send_request("GET", f"exists/{encode_path(path)}", timeout=timeout)
            return parse_exists(response)

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

    # None once closed, typed for the open handle: see Sandbox.commands.

    @property
    def commands(self) -> AsyncCommandExecutor:
        """Command execution (``None`` once closed)."""
        return cast("AsyncCommandExecutor", self._commands)

    @property
    def files(self) -> AsyncFilesystem:
        """File operations (``None`` once closed)."""
        return cast("AsyncFilesystem", self._files)

    @property
    def is_active(self) -> bool:
        """True until ``close_connection()`` or ``terminate()``."""
        return self.connector is not None and self.claim_name is not None

    async def get_pod_name(self) -> str:
        """Pod name from annotation ``agents.x-k8s.io/pod-name``, else the sandbox name (cached)."""
        if self._pod_name is None:
            sandbox = await self.k8s_helper.get_sandbox(self.sandbox_id, self.namespace)
            self._pod_name = sandbox_pod_name(sandbox, self.sandbox_id)
        return self._pod_name

    async def get_pod_ip(self) -> str | None:
        """Fresh pod IP from ``status.podIPs`` (IPv4 preferred)."""
        return sandbox_pod_ip(await self.k8s_helper.get_sandbox(self.sandbox_id, self.namespace))

    async def status(self) -> tuple[str, str]:
        """``(state, message)`` like :meth:`Sandbox.status`."""
        sandbox = await self.k8s_helper.get_sandbox(self.sandbox_id, self.namespace)
        return sandbox_status(sandbox, self.namespace, self.sandbox_id)

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

    async def __aenter__(self) -> Self:
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
