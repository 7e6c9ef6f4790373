"""``kubectl port-forward`` subprocesses started and cleaned up by the SDK."""

from __future__ import annotations

import collections
import logging
import shutil
import socket
import subprocess
import threading
import time
import weakref

from .exceptions import SandboxPortForwardError

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.05


def free_local_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=3)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=3)


class KubectlPortForward:
    """One ``kubectl port-forward <target> <local>:<remote>... -n <namespace>`` process.

    ``start()`` picks free local ports, spawns kubectl and polls the first
    local port every 50 ms until it accepts connections; the process is
    stopped by ``close()``, when the object is garbage-collected, or at exit.
    """

    def __init__(self, target: str, remote_ports: list[int], namespace: str, ready_timeout: float) -> None:
        self.target = target
        self.remote_ports = list(remote_ports)
        self.namespace = namespace
        self.ready_timeout = ready_timeout
        self.local_ports: list[int] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: collections.deque[str] = collections.deque(maxlen=50)
        self._finalizer: weakref.finalize[..., KubectlPortForward] | None = None

    @property
    def kubectl(self) -> str:
        path = shutil.which("kubectl")
        if path is None:
            raise SandboxPortForwardError(
                "kubectl was not found on PATH, and the default connection "
                "(SandboxLocalTunnelConnectionConfig) runs `kubectl port-forward` to reach the "
                "sandbox router. Install kubectl, or pass SandboxDirectConnectionConfig(api_url=...) "
                "or SandboxGatewayConnectionConfig(gateway_name=...) to SandboxClient."
            )
        return path

    def start(self) -> list[int]:
        """Start the tunnel and return the local ports, in the order of ``remote_ports``."""
        if self.alive():
            return self.local_ports
        self.close()
        self.local_ports = [free_local_port() for _ in self.remote_ports]
        pairs = [f"{local}:{remote}" for local, remote in zip(self.local_ports, self.remote_ports)]
        cmd = [self.kubectl, "port-forward", self.target, *pairs, "-n", self.namespace]
        log.debug("starting %s", " ".join(cmd))
        try:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
        except OSError as exc:
            raise SandboxPortForwardError(f"Could not start {' '.join(cmd)}: {exc}") from exc
        self._proc = proc
        self._stderr.clear()
        threading.Thread(target=self._drain, args=(proc,), daemon=True).start()
        self._finalizer = weakref.finalize(self, _stop, proc)
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                proc.wait()
                time.sleep(POLL_INTERVAL)  # let the stderr reader catch up
                self.close()
                raise SandboxPortForwardError(
                    f"`kubectl port-forward {self.target} -n {self.namespace}` exited with code "
                    f"{proc.returncode}: {self.stderr_tail() or 'no output'}. Check that "
                    f"{self.target} exists in namespace {self.namespace!r} and that your kubeconfig "
                    "may port-forward there."
                )
            if _port_open(self.local_ports[0]):
                return self.local_ports
            time.sleep(POLL_INTERVAL)
        tail = self.stderr_tail()
        self.close()
        raise SandboxPortForwardError(
            f"`kubectl port-forward {self.target} -n {self.namespace}` did not open local port "
            f"{self.local_ports[0]} within {self.ready_timeout:g}s"
            + (f": {tail}" if tail else "")
            + ". Raise port_forward_ready_timeout or check the cluster."
        )

    def _drain(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                self._stderr.append(line)

    def stderr_tail(self, limit: int = 512) -> str:
        """The last lines kubectl wrote to stderr (at most ``limit`` characters)."""
        return " | ".join(self._stderr)[-limit:]

    def alive(self) -> bool:
        """True while the kubectl process is running."""
        return self._proc is not None and self._proc.poll() is None

    def close(self) -> None:
        """Stop kubectl (idempotent)."""
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self._proc = None
