"""A legacy runtime API server (real HTTP on loopback) for unit tests.

Implements POST /execute (argv via shlex, no shell), POST /upload (multipart
field ``file``), GET /download|/list|/exists/{path} on a temp directory, and
records every request. ``script`` lets a test queue raw responses
(status, headers, body) that are served before the normal handlers.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import threading
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlparse


class Recorded:
    def __init__(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        self.method, self.path, self.headers, self.body = method, path, headers, body


class FakeRuntime:
    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.requests: list[Recorded] = []
        self.script: list[tuple[int, dict[str, str], bytes]] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return

            def _do(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                fake._handle(self, body)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _do

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeRuntime:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _reply(self, h: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        h.send_response(status)
        for k, v in (headers or {"Content-Type": "application/json"}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def _json(self, h: BaseHTTPRequestHandler, status: int, obj: Any) -> None:
        self._reply(h, status, json.dumps(obj).encode())

    def _safe(self, rel: str) -> str | None:
        full = os.path.realpath(os.path.join(self.root, rel.lstrip("/")))
        return full if os.path.commonpath([full, self.root]) == self.root else None

    def _handle(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        url = urlparse(h.path)
        with self.lock:
            self.requests.append(Recorded(h.command, h.path, dict(h.headers.items()), body))
            scripted = self.script.pop(0) if self.script else None
        if scripted:
            self._reply(h, scripted[0], scripted[2], scripted[1])
            return
        path = url.path
        if h.command == "GET" and path == "/":
            self._json(h, 200, {"status": "ok", "message": "Sandbox Runtime is active."})
        elif h.command == "POST" and path == "/execute":
            self._execute(h, json.loads(body or b"{}"))
        elif h.command == "POST" and path == "/upload":
            self._upload(h, body)
        elif h.command == "GET" and path.startswith("/download/"):
            target = self._safe(unquote(unquote(path[len("/download/"):])))
            if target is None:
                self._json(h, 403, {"message": "Access denied"})
            elif not os.path.isfile(target):
                self._json(h, 404, {"message": "File not found"})
            else:
                with open(target, "rb") as fh:
                    self._reply(h, 200, fh.read(), {"Content-Type": "application/octet-stream"})
        elif h.command == "GET" and path.startswith("/list/"):
            target = self._safe(unquote(unquote(path[len("/list/"):])))
            if target is None or not os.path.isdir(target):
                self._json(h, 404, {"message": "Path is not a directory"})
            else:
                entries = []
                for entry in os.scandir(target):
                    st = entry.stat()
                    entries.append({"name": entry.name, "size": st.st_size, "type": "directory" if entry.is_dir() else "file", "mod_time": st.st_mtime})
                self._json(h, 200, entries)
        elif h.command == "GET" and path.startswith("/exists/"):
            rel = unquote(unquote(path[len("/exists/"):]))
            target = self._safe(rel)
            if target is None:
                self._json(h, 403, {"message": "Access denied"})
            else:
                self._json(h, 200, {"path": rel, "exists": os.path.exists(target)})
        else:
            self._json(h, 404, {"detail": "Not Found"})

    def _execute(self, h: BaseHTTPRequestHandler, req: dict[str, Any]) -> None:
        try:
            argv = shlex.split(req["command"])
            proc = subprocess.run(argv, cwd=self.root, capture_output=True, text=True, timeout=30)
            self._json(h, 200, {"stdout": proc.stdout, "stderr": proc.stderr, "exit_code": proc.returncode})
        except Exception as exc:  # noqa: BLE001 - mirrors the runtime's catch-all
            self._json(h, 200, {"stdout": "", "stderr": f"Failed to execute command: {exc}", "exit_code": 1})

    def _upload(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        ctype = h.headers.get("Content-Type", "")
        msg = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + body)
        for part in msg.iter_parts():
            if part.get_param("name", header="content-disposition") == "file":
                name = part.get_filename() or ""
                target = self._safe(name)
                if target is None:
                    self._json(h, 403, {"message": "Access denied"})
                    return
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as fh:
                    fh.write(part.get_payload(decode=True) or b"")
                self._json(h, 200, {"message": f"File '{name}' uploaded successfully."})
                return
        self._json(h, 422, {"detail": "missing file"})
