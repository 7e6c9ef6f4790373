"""Computer-use sandboxes: send a natural-language query to the in-sandbox agent.

The runtime (e.g. ``examples/gemini-cu-sandbox``) serves ``POST /agent``
``{"query": ...}`` and answers ``{"stdout","stderr","exit_code"}``.
"""

from __future__ import annotations

from ..commands import parse_execution_result
from ..exceptions import SandboxNotReadyError
from ..models import ExecutionResult
from ..sandbox import Sandbox
from ..sandbox_client import SandboxClient


class SandboxWithComputerUseSupport(Sandbox):
    """A :class:`Sandbox` with :meth:`agent`."""

    def agent(self, query: str, timeout: float = 60) -> ExecutionResult:
        """Ask the in-sandbox agent to carry out ``query``; returns its output."""
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        if self.connector is None:
            raise SandboxNotReadyError("The sandbox connection is closed.")
        with self.tracer.span("agent_query"):
            response = self.connector.send_request("POST", "agent", json={"query": query}, timeout=timeout)
            try:
                data = response.json()
            except ValueError as exc:
                raise RuntimeError(f"The agent returned a non-JSON response: {response.text[:200]!r}") from exc
            return parse_execution_result(data)


class ComputerUseSandboxClient(SandboxClient[SandboxWithComputerUseSupport]):
    """A :class:`SandboxClient` whose sandboxes support :meth:`SandboxWithComputerUseSupport.agent`."""

    sandbox_class = SandboxWithComputerUseSupport


__all__ = ["ComputerUseSandboxClient", "SandboxWithComputerUseSupport"]
