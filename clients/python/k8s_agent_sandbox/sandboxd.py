"""Command execution through sandboxd's gRPC ``process.v1.ProcessService/Execute``.

Used with ``SandboxdPodTunnelConnectionConfig``; needs the ``grpc`` extra
(``pip install 'k8s-agent-sandbox[grpc]'``). The two messages involved are
encoded by hand (protobuf wire format), so no generated stubs or protobuf
runtime are required.
"""

from __future__ import annotations

from typing import Any

from .commands import CommandExecutor, check_command
from .connector import SandboxConnector, SandboxdPodTunnelStrategy
from .exceptions import SandboxNotReadyError
from .models import ExecutionResult
from .tracing import TraceManager

EXECUTE_METHOD = "/process.v1.ProcessService/Execute"


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _len_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_execute_request(argv: list[str]) -> bytes:
    """``ExecuteRequest{config: ProcessConfig{command: argv}}`` in protobuf wire format."""
    config = b"".join(_len_field(1, arg.encode("utf-8")) for arg in argv)
    return _len_field(1, config)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def decode_execute_response(buf: bytes) -> dict[str, Any]:
    """Decode ``ExecuteResponse`` (exit_code, stdout, stderr, *_truncated); unknown fields skipped."""
    out: dict[str, Any] = {"exit_code": 0, "stdout": b"", "stderr": b"", "stdout_truncated": False, "stderr_truncated": False}
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(buf, pos)
            if number == 1:
                value &= 0xFFFFFFFF
                out["exit_code"] = value - (1 << 32) if value & 0x80000000 else value
            elif number == 4:
                out["stdout_truncated"] = bool(value)
            elif number == 5:
                out["stderr_truncated"] = bool(value)
        elif wire == 2:
            length, pos = _read_varint(buf, pos)
            if pos + length > len(buf):
                raise ValueError("truncated field")
            data = buf[pos : pos + length]
            pos += length
            if number == 2:
                out["stdout"] = data
            elif number == 3:
                out["stderr"] = data
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return out


class SandboxdCommandExecutor(CommandExecutor):
    """``commands.run`` for sandboxd: gRPC ``Execute(["/bin/sh", "-c", command])``."""

    def __init__(self, connector: SandboxConnector, tracer: TraceManager | None = None) -> None:
        super().__init__(connector, tracer)
        self._channel: Any = None
        self._target: str | None = None

    def _grpc_target(self) -> str:
        self.connector.connect()
        strategy = self.connector.strategy
        target: str | None = getattr(strategy, "grpc_target", None)
        if not isinstance(strategy, SandboxdPodTunnelStrategy) or not target:
            raise SandboxNotReadyError("No sandboxd gRPC endpoint: the pod tunnel is not connected.")
        return target

    def run(self, command: str, timeout: float = 60) -> ExecutionResult:
        """Run ``command`` with ``/bin/sh -c`` and return its output (decoded as UTF-8)."""
        try:
            # grpcio ships no type information (no py.typed, no stubs).
            import grpc  # type: ignore[import-untyped]
        except ImportError as exc:
            raise ImportError(
                "Running commands over sandboxd needs grpcio: pip install 'k8s-agent-sandbox[grpc]'"
            ) from exc
        executable = check_command(command)
        target = self._grpc_target()
        if self._channel is None or self._target != target:
            if self._channel is not None:
                self._channel.close()
            self._channel = grpc.insecure_channel(target)
            self._target = target
        call = self._channel.unary_unary(EXECUTE_METHOD)
        with self.tracer.span("run", **{"sandbox.command.executable": executable}):
            try:
                raw = call(encode_execute_request(["/bin/sh", "-c", command]), timeout=timeout)
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                details = exc.details() if hasattr(exc, "details") else str(exc)
                raise RuntimeError(f"sandboxd Execute failed ({code}): {details}") from exc
            decoded = decode_execute_response(raw)
        return ExecutionResult(
            stdout=decoded["stdout"].decode("utf-8", "replace"),
            stderr=decoded["stderr"].decode("utf-8", "replace"),
            exit_code=decoded["exit_code"],
        )
