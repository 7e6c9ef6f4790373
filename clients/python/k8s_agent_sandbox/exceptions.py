"""Exceptions raised by the SDK.

Every SDK-specific error subclasses :class:`SandboxError`, which is itself a
``RuntimeError`` so that code catching ``RuntimeError`` keeps working.
Argument problems raise ``ValueError``, exhausted readiness budgets raise the
built-in ``TimeoutError``.
"""

from __future__ import annotations

from typing import Any


class SandboxError(RuntimeError):
    """Base class of every error raised by the sandbox SDK."""


class SandboxNotReadyError(SandboxError):
    """The sandbox exists but cannot serve requests (closed handle or not Ready)."""


class SandboxNotFoundError(SandboxError):
    """The SandboxClaim or its Sandbox does not exist (any more)."""


class SnapshotNotFoundError(SandboxError):
    """A requested pod snapshot does not exist."""


class SandboxTemplateNotFoundError(SandboxError):
    """The SandboxTemplate the claim needs does not exist."""


class SandboxWarmPoolNotFoundError(SandboxError):
    """The SandboxWarmPool named in ``create_sandbox(warmpool=...)`` does not exist."""


class SandboxPortForwardError(SandboxError):
    """The local port-forward tunnel could not be started or died."""


class SandboxMetadataError(SandboxError):
    """The claim or sandbox metadata is unusable (e.g. the claim was deleted while waiting)."""


class SandboxClaimFailedError(SandboxError):
    """The controller reported a terminal failure for the claim."""


class SandboxRequestError(SandboxError):
    """An HTTP request to the sandbox (through the router) or to the Kubernetes API failed.

    Attributes:
        status_code: the HTTP status when a response was received, else ``None``
            (connection refused, DNS failure, timeout...).
        response: the underlying response object when there was one.
    """

    def __init__(self, message: str, status_code: int | None = None, response: Any = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.response = response


__all__ = [
    "SandboxClaimFailedError",
    "SandboxError",
    "SandboxMetadataError",
    "SandboxNotFoundError",
    "SandboxNotReadyError",
    "SandboxPortForwardError",
    "SandboxRequestError",
    "SandboxTemplateNotFoundError",
    "SandboxWarmPoolNotFoundError",
    "SnapshotNotFoundError",
]
