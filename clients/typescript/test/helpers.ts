// Test helpers: real loopback HTTP servers that record what they receive.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

import type { KubeHelper, KubeObject } from "../src/k8s.js";

export interface Recorded {
  method: string;
  url: string;
  headers: IncomingMessage["headers"];
  body: Buffer;
}

export type Handler = (req: Recorded, res: ServerResponse) => void;

export async function startServer(
  handler: Handler,
): Promise<{ url: string; requests: Recorded[]; close: () => Promise<void> }> {
  const requests: Recorded[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const rec = { method: req.method ?? "", url: req.url ?? "", headers: req.headers, body: Buffer.concat(chunks) };
      requests.push(rec);
      handler(rec, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "Content-Type": "application/json" });
  res.end(JSON.stringify(body));
}

/**
 * The one KubeHelper method the connector calls (reading the Sandbox for its
 * pod IP), answered from a fixed object: unit tests of header logic only.
 */
export function sandboxReader(sandbox: KubeObject | undefined, error?: Error): KubeHelper {
  return {
    getSandbox: () => (error ? Promise.reject(error) : Promise.resolve(sandbox)),
  } as unknown as KubeHelper;
}
