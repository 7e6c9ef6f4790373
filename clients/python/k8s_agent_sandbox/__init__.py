"""Python SDK for agent-sandbox.

Claim an isolated sandbox from a warm pool, run commands and move files::

    from k8s_agent_sandbox import SandboxClient

    client = SandboxClient()
    sandbox = client.create_sandbox(warmpool="python-sandbox-pool", namespace="default")
    try:
        print(sandbox.commands.run("python3 -c 'print(1)'").stdout)
    finally:
        sandbox.terminate()

Importing the package never touches the network.
"""

from __future__ import annotations

from .exceptions import (
    SandboxClaimFailedError,
    SandboxError,
    SandboxMetadataError,
    SandboxNotFoundError,
    SandboxNotReadyError,
    SandboxPortForwardError,
    SandboxRequestError,
    SandboxTemplateNotFoundError,
    SandboxWarmPoolNotFoundError,
    SnapshotNotFoundError,
)
from .metrics import get_metrics, print_metrics
from .models import (
    ExecutionResult,
    FileEntry,
    SandboxDirectConnectionConfig,
    SandboxdPodTunnelConnectionConfig,
    SandboxGatewayConnectionConfig,
    SandboxInClusterConnectionConfig,
    SandboxLocalTunnelConnectionConfig,
    SandboxTracerConfig,
)
from .sandbox import Sandbox
from .sandbox_client import SandboxClient

try:
    from .aio.client import AsyncSandboxClient
except ImportError as _async_import_error:  # the 'async' extra is not installed
    _ASYNC_HINT = (
        "AsyncSandboxClient needs the 'async' extra: pip install 'k8s-agent-sandbox[async]' "
        f"({_async_import_error})"
    )

    # The placeholder takes the real class's name when the extra is missing.
    class AsyncSandboxClient:  # type: ignore[no-redef]
        """Placeholder: install ``k8s-agent-sandbox[async]`` to use the async client."""

        def __init__(self, *args: object, **kwargs: object) -> None:
            raise ImportError(_ASYNC_HINT)


__all__ = [
    "AsyncSandboxClient",
    "ExecutionResult",
    "FileEntry",
    "Sandbox",
    "SandboxClaimFailedError",
    "SandboxClient",
    "SandboxDirectConnectionConfig",
    "SandboxError",
    "SandboxGatewayConnectionConfig",
    "SandboxInClusterConnectionConfig",
    "SandboxLocalTunnelConnectionConfig",
    "SandboxMetadataError",
    "SandboxNotFoundError",
    "SandboxNotReadyError",
    "SandboxPortForwardError",
    "SandboxRequestError",
    "SandboxTemplateNotFoundError",
    "SandboxTracerConfig",
    "SandboxWarmPoolNotFoundError",
    "SandboxdPodTunnelConnectionConfig",
    "SnapshotNotFoundError",
    "get_metrics",
    "print_metrics",
]
