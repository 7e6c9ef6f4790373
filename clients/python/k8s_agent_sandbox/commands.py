"""``sandbox.commands``: run a command in the sandbox."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from .connector import SandboxConnector
from .models import ExecutionResult
from .tracing import TraceManager


def parse_execution_result(data: Any) -> ExecutionResult:
    """Validate an ``/execute`` (or ``/agent``) JSON body; ``RuntimeError`` if it is malformed."""
    if not isinstance(data, dict):
        raise RuntimeError(f"The sandbox returned an unexpected execution result: {data!r:.200}")
    try:
        return ExecutionResult.model_validate(
            {k: v for k, v in data.items() if k in ("stdout", "stderr", "exit_code") and v is not None}
        )
    except ValidationError as exc:
        raise RuntimeError(f"The sandbox returned a malformed execution result: {exc}") from exc


class CommandExecutor:
    """Runs commands through the sandbox runtime's ``POST /execute``."""

    def __init__(self, connector: SandboxConnector, tracer: TraceManager | None = None) -> None:
        self.connector = connector
        self.tracer = tracer or TraceManager(None)

    def run(self, command: str, timeout: float = 60) -> ExecutionResult:
        """Run ``command`` and return its stdout, stderr and exit code.

        The legacy runtime splits ``command`` like a shell (``shlex``) but runs it
        without a shell: use ``sh -c '...'`` for pipes, ``&&`` and redirects.
        ``timeout`` bounds the HTTP request in seconds.
        """
        if not isinstance(command, str) or not command.strip():
            raise ValueError("command must be a non-empty string")
        with self.tracer.span("run", **{"sandbox.command.executable": command.split()[0]}) as span:
            response = self.connector.send_request(
                "POST", "execute", json={"command": command}, timeout=timeout
            )
            try:
                data = response.json()
            except ValueError as exc:
                raise RuntimeError(
                    f"The sandbox returned a non-JSON response to /execute: {response.text[:200]!r}"
                ) from exc
            result = parse_execution_result(data)
            if span is not None:
                span.set_attribute("sandbox.exit_code", result.exit_code)
            return result
