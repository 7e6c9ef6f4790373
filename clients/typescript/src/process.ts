// Streaming runs over sandboxd's gRPC process API (process.v1.ProcessService
// on port 9090), reached through the router over h2c with the routing
// headers as gRPC metadata, exactly as the Go SDK does.
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

import { DEFAULT_GRPC_PORT } from "./constants.js";
import { SandboxError, SandboxRequestError, abortError } from "./errors.js";

// The package ships proto/ beside dist/; compiled tests sit one level deeper.
const PROTO =
  ["../proto/process/v1/process.proto", "../../proto/process/v1/process.proto"]
    .map((rel) => fileURLToPath(new URL(rel, import.meta.url)))
    .find((p) => existsSync(p)) ?? "process.proto";

/** Signals a streaming run accepts (Linux numbers, as in the proto). */
export const Signals = { SIGINT: 2, SIGKILL: 9, SIGTERM: 15 } as const;
export type SignalName = keyof typeof Signals;

export interface StreamChunk {
  stream: "stdout" | "stderr";
  data: Buffer;
}

export interface StartOptions {
  env?: Record<string, string>;
  cwd?: string;
  tty?: { cols: number; rows: number };
  signal?: AbortSignal;
}

interface ProcessClient extends grpc.Client {
  Start(req: unknown, md: grpc.Metadata): grpc.ClientReadableStream<StartEvent>;
  WriteStdin(req: unknown, md: grpc.Metadata, cb: (err: grpc.ServiceError | null) => void): void;
  SendSignal(req: unknown, md: grpc.Metadata, cb: (err: grpc.ServiceError | null) => void): void;
}

interface StartEvent {
  event?: "init" | "stdout" | "stderr" | "exit";
  init?: { processId?: number };
  stdout?: Buffer;
  stderr?: Buffer;
  exit?: { exitCode?: number };
}

let serviceCtor: grpc.ServiceClientConstructor | undefined;

function processService(): grpc.ServiceClientConstructor {
  if (serviceCtor === undefined) {
    const def = protoLoader.loadSync(PROTO, {
      keepCase: false,
      longs: Number,
      enums: Number,
      oneofs: true,
      defaults: true,
    });
    const pkg = grpc.loadPackageDefinition(def) as unknown as {
      process: { v1: { ProcessService: grpc.ServiceClientConstructor } };
    };
    serviceCtor = pkg.process.v1.ProcessService;
  }
  return serviceCtor;
}

/** Where and how to dial the process API. */
export interface GrpcEndpoint {
  /** host:port of the router (or the pod in-cluster). */
  target: string;
  tls: boolean;
  /** Routing metadata (x-sandbox-*), empty when not going through the router. */
  metadata: Record<string, string>;
}

export function newProcessClient(ep: GrpcEndpoint): ProcessClient {
  const Ctor = processService();
  const creds = ep.tls ? grpc.credentials.createSsl() : grpc.credentials.createInsecure();
  return new Ctor(ep.target, creds) as unknown as ProcessClient;
}

function metadataOf(ep: GrpcEndpoint): grpc.Metadata {
  const md = new grpc.Metadata();
  for (const [k, v] of Object.entries(ep.metadata)) md.set(k.toLowerCase(), v);
  return md;
}

/**
 * A running process: iterate it for stdout/stderr chunks, write stdin, send
 * signals, await `exitCode`. Created by `sandbox.commands.start()`.
 */
export class RunningProcess implements AsyncIterable<StreamChunk> {
  private pid: number | undefined;
  private readonly pidReady: Promise<number>;
  readonly exitCode: Promise<number>;
  private readonly queue: StreamChunk[] = [];
  private waiter: (() => void) | undefined;
  private done = false;
  private failure: Error | undefined;

  constructor(
    private readonly client: ProcessClient,
    private readonly ep: GrpcEndpoint,
    argv: string[],
    opts: StartOptions,
  ) {
    let resolvePid!: (pid: number) => void;
    let rejectPid!: (err: Error) => void;
    this.pidReady = new Promise((res, rej) => {
      resolvePid = res;
      rejectPid = rej;
    });
    let resolveExit!: (code: number) => void;
    let rejectExit!: (err: Error) => void;
    this.exitCode = new Promise((res, rej) => {
      resolveExit = res;
      rejectExit = rej;
    });
    // Callers that only iterate must not see an unhandled rejection.
    this.exitCode.catch(() => undefined);
    this.pidReady.catch(() => undefined);
    const req = {
      config: { command: argv, envVars: opts.env ?? {}, cwd: opts.cwd },
      pty: opts.tty ? { cols: opts.tty.cols, rows: opts.tty.rows } : undefined,
    };
    const call = client.Start(req, metadataOf(ep));
    let exit: number | undefined;
    const onAbort = (): void => call.cancel();
    opts.signal?.addEventListener("abort", onAbort, { once: true });
    call.on("data", (ev: StartEvent) => {
      if (ev.event === "init") {
        this.pid = ev.init?.processId ?? 0;
        resolvePid(this.pid);
      } else if (ev.event === "stdout" && ev.stdout) {
        this.push({ stream: "stdout", data: Buffer.from(ev.stdout) });
      } else if (ev.event === "stderr" && ev.stderr) {
        this.push({ stream: "stderr", data: Buffer.from(ev.stderr) });
      } else if (ev.event === "exit") {
        exit = ev.exit?.exitCode ?? 0;
      }
    });
    call.on("error", (err: grpc.ServiceError) => {
      opts.signal?.removeEventListener("abort", onAbort);
      const error = opts.signal?.aborted
        ? abortError(opts.signal)
        : new SandboxRequestError(`process stream failed: ${grpc.status[err.code] ?? err.code}: ${err.details}`, {
            cause: err,
          });
      this.finish(error);
      rejectPid(error);
      rejectExit(error);
    });
    call.on("end", () => {
      opts.signal?.removeEventListener("abort", onAbort);
      if (exit === undefined) {
        const error = new SandboxError("process stream ended without an exit event");
        this.finish(error);
        rejectPid(error);
        rejectExit(error);
        return;
      }
      this.finish();
      resolvePid(this.pid ?? 0);
      resolveExit(exit);
    });
  }

  private push(chunk: StreamChunk): void {
    this.queue.push(chunk);
    this.waiter?.();
  }

  private finish(err?: Error): void {
    this.done = true;
    this.failure = err;
    this.waiter?.();
  }

  /** The process ID inside the sandbox, once the process started. */
  processId(): Promise<number> {
    return this.pidReady;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<StreamChunk> {
    for (;;) {
      const chunk = this.queue.shift();
      if (chunk) {
        yield chunk;
        continue;
      }
      if (this.done) {
        if (this.failure) throw this.failure;
        return;
      }
      await new Promise<void>((resolve) => (this.waiter = resolve));
      this.waiter = undefined;
    }
  }

  private async unary(method: "WriteStdin" | "SendSignal", req: Record<string, unknown>): Promise<void> {
    const pid = await this.pidReady;
    await new Promise<void>((resolve, reject) => {
      this.client[method]({ processId: pid, ...req }, metadataOf(this.ep), (err) => {
        if (err)
          reject(
            new SandboxRequestError(`${method} failed: ${grpc.status[err.code] ?? err.code}: ${err.details}`, {
              cause: err,
            }),
          );
        else resolve();
      });
    });
  }

  /** Write bytes (or UTF-8 text) to the process's stdin. */
  writeStdin(data: Buffer | string): Promise<void> {
    return this.unary("WriteStdin", { input: typeof data === "string" ? Buffer.from(data, "utf8") : data });
  }

  /** Close the process's stdin (EOF). */
  closeStdin(): Promise<void> {
    return this.unary("WriteStdin", { eof: {} });
  }

  /** Send SIGINT, SIGTERM or SIGKILL. */
  kill(signal: SignalName = "SIGTERM"): Promise<void> {
    return this.unary("SendSignal", { signal: Signals[signal] });
  }
}

export { DEFAULT_GRPC_PORT };
