import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

import { Commands } from "../src/commands.js";
import { Connector } from "../src/connector.js";
import { sandboxReader } from "./helpers.js";

const proto = ["../../proto/process/v1/process.proto", "../proto/process/v1/process.proto"]
  .map((p) => fileURLToPath(new URL(p, import.meta.url)))
  .find((p) => existsSync(p)) as string;

interface Seen {
  metadata: Record<string, unknown>;
  start?: unknown;
  stdin: Buffer[];
  signals: number[];
}

/** A real gRPC server implementing process.v1.ProcessService: echoes stdin to stdout until EOF or a signal. */
async function startProcessServer(): Promise<{ port: number; seen: Seen; stop: () => Promise<void> }> {
  const def = protoLoader.loadSync(proto, {
    keepCase: false,
    longs: Number,
    enums: Number,
    oneofs: true,
    defaults: true,
  });
  const pkg = grpc.loadPackageDefinition(def) as unknown as {
    process: { v1: { ProcessService: grpc.ServiceClientConstructor } };
  };
  const seen: Seen = { metadata: {}, stdin: [], signals: [] };
  let stream: grpc.ServerWritableStream<unknown, unknown> | undefined;
  const server = new grpc.Server();
  server.addService(pkg.process.v1.ProcessService.service, {
    Start: (call: grpc.ServerWritableStream<unknown, unknown>) => {
      seen.metadata = call.metadata.getMap();
      seen.start = call.request;
      stream = call;
      call.write({ init: { processId: 42 } });
      call.write({ stderr: Buffer.from("started\n") });
    },
    WriteStdin: (
      call: grpc.ServerUnaryCall<{ input?: Buffer; eof?: object; payload?: string }, unknown>,
      cb: grpc.sendUnaryData<unknown>,
    ) => {
      if (call.request.payload === "eof") {
        stream?.write({ exit: { exitCode: 0 } });
        stream?.end();
      } else if (call.request.input) {
        seen.stdin.push(call.request.input);
        stream?.write({ stdout: call.request.input });
      }
      cb(null, {});
    },
    SendSignal: (call: grpc.ServerUnaryCall<{ signal: number }, unknown>, cb: grpc.sendUnaryData<unknown>) => {
      seen.signals.push(call.request.signal);
      stream?.write({ exit: { exitCode: -1 } });
      stream?.end();
      cb(null, {});
    },
    Execute: (_c: unknown, cb: grpc.sendUnaryData<unknown>) => cb({ code: grpc.status.UNIMPLEMENTED }),
    ResizeTTY: (_c: unknown, cb: grpc.sendUnaryData<unknown>) => cb(null, {}),
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, p) =>
      err ? reject(err) : resolve(p),
    ),
  );
  return { port, seen, stop: () => new Promise<void>((r) => server.tryShutdown(() => r())) };
}

test("a streaming run carries routing metadata, streams output, takes stdin and ends with the exit code", async () => {
  const srv = await startProcessServer();
  try {
    const conn = new Connector(
      "sb-1",
      "team-a",
      { kind: "direct", apiUrl: `http://127.0.0.1:${srv.port}` },
      sandboxReader(undefined),
    );
    const proc = await new Commands(conn).start("cat", { env: { A: "1" } });
    assert.equal(await proc.processId(), 42);
    await proc.writeStdin("hello ");
    await proc.writeStdin(Buffer.from("world"));
    await proc.closeStdin();
    const chunks: string[] = [];
    for await (const c of proc) chunks.push(`${c.stream}:${c.data.toString()}`);
    assert.deepEqual(chunks, ["stderr:started\n", "stdout:hello ", "stdout:world"]);
    assert.equal(await proc.exitCode, 0);
    assert.equal(srv.seen.metadata["x-sandbox-id"], "sb-1");
    assert.equal(srv.seen.metadata["x-sandbox-namespace"], "team-a");
    assert.equal(srv.seen.metadata["x-sandbox-port"], "9090");
    const start = srv.seen.start as { config: { command: string[]; envVars: Record<string, string> } };
    assert.deepEqual(start.config.command, ["/bin/sh", "-c", "cat"]);
    assert.deepEqual(start.config.envVars, { A: "1" });
  } finally {
    await srv.stop();
  }
});

test("kill sends the signal number and the run ends with -1", async () => {
  const srv = await startProcessServer();
  try {
    const conn = new Connector(
      "sb-1",
      "ns",
      { kind: "direct", apiUrl: `http://127.0.0.1:${srv.port}` },
      sandboxReader(undefined),
    );
    const proc = await new Commands(conn).start(["sleep", "1000"]);
    await proc.kill("SIGKILL");
    assert.equal(await proc.exitCode, -1);
    assert.deepEqual(srv.seen.signals, [9]);
  } finally {
    await srv.stop();
  }
});

test("a stream that ends without an exit event is an error", async () => {
  const def = protoLoader.loadSync(proto, { oneofs: true });
  const pkg = grpc.loadPackageDefinition(def) as unknown as {
    process: { v1: { ProcessService: grpc.ServiceClientConstructor } };
  };
  const server = new grpc.Server();
  server.addService(pkg.process.v1.ProcessService.service, {
    Start: (call: grpc.ServerWritableStream<unknown, unknown>) => call.end(),
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, p) =>
      err ? reject(err) : resolve(p),
    ),
  );
  try {
    const conn = new Connector(
      "sb",
      "ns",
      { kind: "direct", apiUrl: `http://127.0.0.1:${port}` },
      sandboxReader(undefined),
    );
    const proc = await new Commands(conn).start("true");
    await assert.rejects(proc.exitCode, /ended without an exit event/);
  } finally {
    await new Promise<void>((r) => server.tryShutdown(() => r()));
  }
});
