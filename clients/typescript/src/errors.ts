// Typed errors mirroring the Python SDK's exceptions: every SDK error is a
// SandboxError, so callers can catch one class or a precise one.

export class SandboxError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The sandbox exists but is not Ready. */
export class SandboxNotReadyError extends SandboxError {}
/** The claim or its Sandbox does not exist (any more). */
export class SandboxNotFoundError extends SandboxError {}
/** The warm pool's SandboxTemplate is missing. */
export class SandboxTemplateNotFoundError extends SandboxError {}
/** The SandboxWarmPool named by the claim is missing. */
export class SandboxWarmPoolNotFoundError extends SandboxError {}
/** The port-forward tunnel to the router could not be set up or died. */
export class SandboxPortForwardError extends SandboxError {}
/** The claim disappeared or carries metadata the SDK cannot use. */
export class SandboxMetadataError extends SandboxError {}
/** The claim failed terminally (InvalidMetadata, EnvVarsInjectionRejected, expiry...). */
export class SandboxClaimFailedError extends SandboxError {}

/** A request to the sandbox runtime or the apiserver failed. */
export class SandboxRequestError extends SandboxError {
  readonly statusCode: number | undefined;
  readonly body: string | undefined;
  constructor(message: string, opts: { statusCode?: number; body?: string; cause?: unknown } = {}) {
    super(message, { cause: opts.cause });
    this.statusCode = opts.statusCode;
    this.body = opts.body;
  }
}

/** A wait ran out of time (Python raises the builtin TimeoutError). */
export class SandboxTimeoutError extends SandboxError {}

/** An operation the connected runtime does not offer (Python: NotImplementedError). */
export class SandboxUnsupportedError extends SandboxError {}

/** The error an aborted call rejects with: the signal's reason when it is an Error. */
export function abortError(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  if (reason instanceof Error) return reason;
  return new DOMException("The operation was aborted", "AbortError");
}
