"""``sandbox.commands``: run a command in the sandbox."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from .connector import SandboxConnector, response_json
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


def check_command(command: object) -> str:
    """Reject an empty or non-string command; return its first word (the span's executable)."""
    if not isinstance(command, str) or not command.strip():
        raise ValueError("command must be a non-empty string")
    return command.split()[0]


def parse_execute_response(response: Any) -> ExecutionResult:
    """The :class:`ExecutionResult` of a ``POST /execute`` response (sync or async client)."""
    return parse_execution_result(response_json(response, "response to /execute"))


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
        executable = check_command(command)
        with self.tracer.span("run", **{"sandbox.command.executable": executable}) as span:
            response = self.connector.send_request(
                "POST", "execute", json={"command": command}, timeout=timeout
            )
            result = parse_execute_response(response)
            if span is not None:
                span.set_attribute("sandbox.exit_code", result.exit_code)
            return result
