"""``sandbox.files``: write, read, list, check and delete files in the sandbox."""

from __future__ import annotations

from typing import Any

from .connector import SandboxConnector, response_json
from .models import FileEntry
from .tracing import TraceManager
from .utils import encode_path, sanitize_path


def check_path(path: object) -> None:
    """Reject a missing path for ``list``/``exists``/``delete`` (these send it unsanitized)."""
    if not isinstance(path, str) or path == "":
        raise ValueError("path must be a non-empty string")


def encode_content(content: object) -> bytes:
    """The bytes ``files.write`` uploads: ``str`` as UTF-8, bytes-like as is, anything else ``TypeError``."""
    if isinstance(content, str):
        return content.encode("utf-8")
    if isinstance(content, (bytes, bytearray, memoryview)):
        return bytes(content)
    raise TypeError(f"content must be bytes or str, got {type(content).__name__}")


def parse_listing(response: Any, sandboxd: bool = False, span: Any = None) -> list[FileEntry]:
    """The files and directories of a listing response (legacy ``/list`` or sandboxd ``/v1/files``).

    An empty body or listing is ``[]``; a body that is not JSON, or not a list
    (sandboxd: ``{"entries": [...]}``), raises ``RuntimeError``. Shared by the
    sync and async filesystems; ``span`` (sync tracing) gets the entry count
    when a listing was returned.
    """
    if not response.content:
        return []
    body = response_json(response, "listing")
    if sandboxd:
        items = body.get("entries") if isinstance(body, dict) else None
        convert = FileEntry.from_sandboxd
    else:
        items = body
        convert = FileEntry.from_legacy
    if not items:
        return []
    if not isinstance(items, list):
        raise RuntimeError(f"The sandbox returned an unexpected listing: {body!r:.200}")
    entries = [convert(item) for item in items if isinstance(item, dict) and item.get("type") in ("file", "directory")]
    if span is not None:
        span.set_attribute("sandbox.file.count", len(entries))
    return entries


def parse_exists(response: Any) -> bool:
    """The answer of the legacy ``GET /exists/<path>`` (``{"exists": bool}``); ``RuntimeError`` otherwise."""
    body = response_json(response, "exists answer")
    if not isinstance(body, dict) or not isinstance(body.get("exists"), bool):
        raise RuntimeError(f"The sandbox returned an unexpected exists answer: {body!r:.200}")
    exists: bool = body["exists"]
    return exists


class Filesystem:
    """File operations on the sandbox workspace.

    Speaks the legacy runtime API (``/upload``, ``/download``, ``/list``,
    ``/exists``) through the router, or sandboxd's ``/v1/files`` when the
    sandbox is reached with ``SandboxdPodTunnelConnectionConfig``.
    """

    def __init__(self, connector: SandboxConnector, tracer: TraceManager | None = None, sandboxd: bool = False) -> None:
        self.connector = connector
        self.tracer = tracer or TraceManager(None)
        self.sandboxd = sandboxd

    def write(
        self, path: str, content: bytes | str, timeout: float = 60, allow_unsafe_paths: bool = False
    ) -> None:
        """Write ``content`` (``str`` is UTF-8 encoded) to ``path``, creating parent directories.

        Paths are relative to the workspace; ``..`` segments and control
        characters are rejected unless ``allow_unsafe_paths`` is true.
        """
        dest = path if allow_unsafe_paths else sanitize_path(path)
        data = encode_content(content)
        with self.tracer.span("write", **{"sandbox.file.path": dest, "sandbox.file.size": len(data)}):
            if self.sandboxd:
                self.connector.send_request(
                    "PUT",
                    f"v1/files/{encode_path(dest)}",
                    data=data,
                    headers={"Content-Type": "application/octet-stream"},
                    timeout=timeout,
                )
                return
            self.connector.send_request(
                "POST", "upload", files={"file": (dest, data)}, timeout=timeout
            )

    def read(self, path: str, timeout: float = 60, allow_unsafe_paths: bool = False) -> bytes:
        """Return the bytes of the file at ``path``."""
        src = path if allow_unsafe_paths else sanitize_path(path)
        with self.tracer.span("read", **{"sandbox.file.path": src}) as span:
            endpoint = f"v1/files/{encode_path(src)}" if self.sandboxd else f"download/{encode_path(src)}"
            data = self.connector.send_request("GET", endpoint, timeout=timeout).content
            if span is not None:
                span.set_attribute("sandbox.file.size", len(data))
            return data

    def list(self, path: str, timeout: float = 60) -> list[FileEntry]:
        """List the directory at ``path`` (``"."`` is the workspace root)."""
        check_path(path)
        with self.tracer.span("list", **{"sandbox.file.path": path}) as span:
            endpoint = f"v1/files/{encode_path(path)}" if self.sandboxd else f"list/{encode_path(path)}"
            response = self.connector.send_request("GET", endpoint, timeout=timeout)
            return parse_listing(response, self.sandboxd, span)

    def exists(self, path: str, timeout: float = 60) -> bool:
        """True when ``path`` exists in the sandbox."""
        check_path(path)
        with self.tracer.span("exists", **{"sandbox.file.path": path}) as span:
            if self.sandboxd:
                response = self.connector.send_request(
                    "HEAD", f"v1/files/{encode_path(path)}", timeout=timeout, allowed_statuses=(404,)
                )
                found = response.status_code != 404
            else:
                response = self.connector.send_request("GET", f"exists/{encode_path(path)}", timeout=timeout)
                found = parse_exists(response)
            if span is not None:
                span.set_attribute("sandbox.file.exists", found)
            return found

    def delete(self, path: str, recursive: bool = False, timeout: float = 60) -> None:
        """Delete ``path`` (sandboxd only; the legacy runtime has no delete endpoint)."""
        if not self.sandboxd:
            raise NotImplementedError(
                "files.delete needs the sandboxd API (SandboxdPodTunnelConnectionConfig); the legacy "
                "runtime API reached through the router has no delete endpoint. Use "
                "sandbox.commands.run(\"rm -f <path>\") instead."
            )
        check_path(path)
        with self.tracer.span("delete", **{"sandbox.file.path": path}):
            params = {"recursive": "true"} if recursive else None
            self.connector.send_request(
                "DELETE", f"v1/files/{encode_path(path)}", params=params, timeout=timeout
            )
