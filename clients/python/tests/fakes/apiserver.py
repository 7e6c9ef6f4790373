"""A small in-memory Kubernetes API server (real HTTP on loopback) for unit tests.

Serves the custom resources the SDK touches (sandboxclaims, sandboxes,
gateways) with create/get/list/delete and WATCH (newline-delimited JSON
events, resourceVersion bookkeeping, ``timeoutSeconds``, 410 for expired
versions). Tests drive the "controller" side by calling :meth:`put`.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

_PATH = re.compile(r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?$")

Key = tuple[str, str, str]  # plural, namespace, name


class FakeAPIServer:
    """State + HTTP server. Use as a context manager."""

    def __init__(self) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.events: list[tuple[int, str, str, dict[str, Any]]] = []  # rv, plural, type, obj
        self.rv = 100
        self.cond = threading.Condition()
        self.requests: list[tuple[str, str, dict[str, list[str]]]] = []
        self.on_create: Callable[[FakeAPIServer, dict[str, Any]], None] | None = None
        self.fail_next: dict[str, tuple[int, str]] = {}  # verb -> (status, reason)
        self.expire_watch_once = False  # next watch answers with a 410 ERROR event
        self.forbid_sandbox_get = False
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                fake._handle(self, "GET")

            def do_POST(self) -> None:
                fake._handle(self, "POST")

            def do_DELETE(self) -> None:
                fake._handle(self, "DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeAPIServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()

    closed = False

    def kubeconfig(self, path: str) -> str:
        """Write a kubeconfig for this server to ``path`` and return it."""
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "current-context": "fake",
        }
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(cfg, fh)
        return path

    # --- state -----------------------------------------------------------------

    def put(self, plural: str, obj: dict[str, Any], event: str | None = None) -> dict[str, Any]:
        """Create or replace an object and emit a watch event."""
        with self.cond:
            meta = obj.setdefault("metadata", {})
            key = (plural, meta.get("namespace", "default"), meta["name"])
            meta.setdefault("namespace", key[1])
            self.rv += 1
            meta["resourceVersion"] = str(self.rv)
            etype = event or ("MODIFIED" if key in self.objects else "ADDED")
            self.objects[key] = copy.deepcopy(obj)
            self.events.append((self.rv, plural, etype, copy.deepcopy(obj)))
            self.cond.notify_all()
            return copy.deepcopy(obj)

    def delete(self, plural: str, namespace: str, name: str) -> bool:
        with self.cond:
            obj = self.objects.pop((plural, namespace, name), None)
            if obj is None:
                return False
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self.events.append((self.rv, plural, "DELETED", obj))
            self.cond.notify_all()
            return True

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self.cond:
            obj = self.objects.get((plural, namespace, name))
            return copy.deepcopy(obj) if obj else None

    def claims(self, namespace: str = "default") -> list[dict[str, Any]]:
        with self.cond:
            return [copy.deepcopy(o) for (p, ns, _), o in self.objects.items() if p == "sandboxclaims" and ns == namespace]

    # --- HTTP ------------------------------------------------------------------

    def _send(self, h: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _status(self, h: BaseHTTPRequestHandler, code: int, reason: str, message: str) -> None:
        self._send(h, code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "message": message, "code": code})

    def _handle(self, h: BaseHTTPRequestHandler, verb: str) -> None:
        url = urlparse(h.path)
        query = parse_qs(url.query)
        self.requests.append((verb, url.path, query))
        m = _PATH.match(url.path)
        if not m:
            self._status(h, 404, "NotFound", f"no route {url.path}")
            return
        plural, ns, name = m["plural"], m["ns"], m["name"]
        watching = query.get("watch", ["false"])[0].lower() in ("true", "1")
        op = "watch" if watching else {"GET": "get" if name else "list", "POST": "create", "DELETE": "delete"}[verb]
        failure = self.fail_next.pop(op, None)
        if failure:
            self._status(h, failure[0], failure[1], f"injected {failure[1]}")
            return
        if plural == "sandboxes" and self.forbid_sandbox_get:
            self._status(h, 403, "Forbidden", "sandboxes is forbidden")
            return
        if watching:
            self._watch(h, plural, ns, query)
        elif verb == "POST":
            length = int(h.headers.get("Content-Length") or 0)
            obj = json.loads(h.rfile.read(length))
            obj.setdefault("metadata", {})["namespace"] = ns
            if self.get(plural, ns, obj["metadata"]["name"]):
                self._status(h, 409, "AlreadyExists", "already exists")
                return
            obj["metadata"]["uid"] = f"uid-{obj['metadata']['name']}"
            stored = self.put(plural, obj)
            self._send(h, 201, stored)
            if self.on_create and plural == "sandboxclaims":
                threading.Thread(target=self.on_create, args=(self, stored), daemon=True).start()
        elif verb == "DELETE":
            if self.delete(plural, ns, name):
                self._send(h, 200, {"kind": "Status", "status": "Success"})
            else:
                self._status(h, 404, "NotFound", f'{plural} "{name}" not found')
        elif name:
            obj = self.get(plural, ns, name)
            if obj is None:
                self._status(h, 404, "NotFound", f'{plural} "{name}" not found')
            else:
                self._send(h, 200, obj)
        else:
            items = [o for (p, n, _), o in self.objects.items() if p == plural and n == ns]
            selector = query.get("labelSelector", [""])[0]
            if selector:
                k, _, v = selector.partition("=")
                items = [o for o in items if (o["metadata"].get("labels") or {}).get(k) == v]
            self._send(h, 200, {"kind": "List", "metadata": {"resourceVersion": str(self.rv)}, "items": items})

    def _watch(self, h: BaseHTTPRequestHandler, plural: str, ns: str, query: dict[str, list[str]]) -> None:
        field = query.get("fieldSelector", [""])[0]
        want_name = field.split("=", 1)[1] if field.startswith("metadata.name=") else None
        since = int(query.get("resourceVersion", ["0"])[0] or 0)
        timeout = float(query.get("timeoutSeconds", ["30"])[0])
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def emit(etype: str, obj: dict[str, Any]) -> None:
            # Chunked like the real apiserver: clients read one event per chunk.
            data = json.dumps({"type": etype, "object": obj}).encode() + b"\n"
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.flush()

        def matches(obj: dict[str, Any]) -> bool:
            meta = obj["metadata"]
            return meta.get("namespace") == ns and (want_name is None or meta.get("name") == want_name)

        try:
            self._stream_events(emit, plural, matches, since, timeout)
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            h.close_connection = True

    def _stream_events(
        self,
        emit: Callable[[str, dict[str, Any]], None],
        plural: str,
        matches: Callable[[dict[str, Any]], bool],
        since: int,
        timeout: float,
    ) -> None:
        if self.expire_watch_once and since != 0:
            self.expire_watch_once = False
            emit("ERROR", {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"})
            return
        with self.cond:
            if since == 0:
                initial = [copy.deepcopy(o) for (p, _, _), o in self.objects.items() if p == plural and matches(o)]
                cursor = self.rv
            else:
                initial, cursor = [], since
        for obj in initial:
            emit("ADDED", obj)
        deadline = time.monotonic() + timeout
        while not self.closed:
            with self.cond:
                pending = [(t, o) for rv, p, t, o in self.events if rv > cursor and p == plural and matches(o)]
                if self.events:
                    cursor = max(cursor, self.events[-1][0])
                if not pending:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return
                    self.cond.wait(min(remaining, 0.5))
                    continue
            for etype, obj in pending:
                emit(etype, copy.deepcopy(obj))

def ready_claim(server: FakeAPIServer, claim: dict[str, Any], sandbox_name: str | None = None, pod_ips: list[str] | None = None, delay: float = 0.05) -> None:
    """Play the controller: create the Sandbox, then mark the claim bound and Ready."""
    time.sleep(delay)
    name = sandbox_name or claim["metadata"]["name"]
    ns = claim["metadata"]["namespace"]
    server.put(
        "sandboxes",
        {
            "apiVersion": "agents.x-k8s.io/v1beta1",
            "kind": "Sandbox",
            "metadata": {"name": name, "namespace": ns, "annotations": {"agents.x-k8s.io/pod-name": name + "-pod"}},
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "DependenciesReady", "message": "ready"}],
                "podIPs": [{"ip": ip} for ip in (pod_ips or [])],
                "selector": f"agents.x-k8s.io/sandbox-name-hash=hash-{name}",
            },
        },
    )
    current = server.get("sandboxclaims", ns, claim["metadata"]["name"])
    if current is None:
        return
    current["status"] = {
        "sandbox": {"name": name},
        "conditions": [{"type": "Ready", "status": "True", "reason": "SandboxReady", "message": "ready"}],
    }
    server.put("sandboxclaims", current)


def fail_claim(reason: str, message: str = "", ready: str = "False") -> Callable[[FakeAPIServer, dict[str, Any]], None]:
    """An ``on_create`` hook that sets a Ready condition with ``reason``."""

    def hook(server: FakeAPIServer, claim: dict[str, Any]) -> None:
        time.sleep(0.05)
        current = server.get("sandboxclaims", claim["metadata"]["namespace"], claim["metadata"]["name"])
        if current is None:
            return
        current["status"] = {"conditions": [{"type": "Ready", "status": ready, "reason": reason, "message": message}]}
        server.put("sandboxclaims", current)

    return hook
