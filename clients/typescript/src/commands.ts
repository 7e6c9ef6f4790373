// sandbox.commands: run a command and wait for its result (legacy POST
// /execute, as the Python SDK does), or start a streaming run over the
// process API.
import { DEFAULT_GRPC_PORT, DEFAULT_REQUEST_TIMEOUT_SECONDS } from "./constants.js";
import { SandboxError } from "./errors.js";
import type { Connector } from "./connector.js";
import type { CallOptions, ExecutionResult } from "./models.js";
import { RunningProcess, newProcessClient, type GrpcEndpoint, type StartOptions } from "./process.js";

/** Validate an /execute JSON body into an ExecutionResult. */
export function parseExecutionResult(data: unknown): ExecutionResult {
  if (typeof data !== "object" || data === null || Array.isArray(data)) {
    throw new SandboxError(
      `The sandbox returned an unexpected execution result: ${JSON.stringify(data).slice(0, 200)}`,
    );
  }
  const rec = data as Record<string, unknown>;
  const stdout = rec["stdout"] ?? "";
  const stderr = rec["stderr"] ?? "";
  const exitCode = rec["exit_code"] ?? -1;
  if (
    typeof stdout !== "string" ||
    typeof stderr !== "string" ||
    typeof exitCode !== "number" ||
    !Number.isInteger(exitCode)
  ) {
    throw new SandboxError(`The sandbox returned a malformed execution result: ${JSON.stringify(data).slice(0, 200)}`);
  }
  return { stdout, stderr, exitCode };
}

function checkCommand(command: unknown): string {
  if (typeof command !== "string" || command.trim() === "") throw new TypeError("command must be a non-empty string");
  return command;
}

export class Commands {
  constructor(private readonly connector: Connector) {}

  /**
   * Run `command` and return its stdout, stderr and exit code. The runtime
   * splits the command like a shell but runs it without one: use
   * `sh -c '...'` for pipes and redirects. `timeout` bounds the request (s).
   */
  async run(command: string, opts: CallOptions = {}): Promise<ExecutionResult> {
    checkCommand(command);
    const reply = await this.connector.request("POST", "execute", {
      body: JSON.stringify({ command }),
      headers: { "Content-Type": "application/json" },
      timeout: opts.timeout ?? DEFAULT_REQUEST_TIMEOUT_SECONDS,
      signal: opts.signal,
    });
    return parseExecutionResult(reply.json("response to /execute"));
  }

  /**
   * Start `argv` (a string runs under `/bin/sh -c`) and stream its output:
   * `for await (const {stream, data} of proc)`, `proc.writeStdin()`,
   * `proc.kill()`, `await proc.exitCode`.
   */
  async start(command: string | string[], opts: StartOptions = {}): Promise<RunningProcess> {
    const argv = typeof command === "string" ? ["/bin/sh", "-c", checkCommand(command)] : command;
    if (!Array.isArray(argv) || argv.length === 0 || argv.some((a) => typeof a !== "string")) {
      throw new TypeError("command must be a non-empty string or array of strings");
    }
    const ep = await this.grpcEndpoint();
    return new RunningProcess(newProcessClient(ep), ep, argv, opts);
  }

  private async grpcEndpoint(): Promise<GrpcEndpoint> {
    const base = new URL(await this.connector.connect());
    const tls = base.protocol === "https:";
    if (!this.connector.strategy.sendsRouterHeaders) {
      // In-cluster: the pod (or its Service) itself serves the process API.
      return { target: `${base.hostname}:${DEFAULT_GRPC_PORT}`, tls, metadata: {} };
    }
    const port = base.port || (tls ? "443" : "80");
    const metadata = await this.connector.routingHeaders(undefined, DEFAULT_GRPC_PORT);
    return { target: `${base.hostname}:${port}`, tls, metadata };
  }
}
