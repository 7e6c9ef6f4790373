// One HTTP exchange over node:http(s). fetch() is not used on purpose: the
// WHATWG URL parser turns `%2E` back into dot segments and drops them, so
// `/download/%2E%2E` would reach another endpoint. node:http sends the path
// exactly as encoded, as the Python and Go SDKs do.
import { Agent as HttpAgent, request as httpRequest, type IncomingHttpHeaders } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";

const httpAgent = new HttpAgent({ keepAlive: true });
const httpsAgent = new HttpsAgent({ keepAlive: true });

export interface Exchange {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** Send one request to `base` + `path` (path already encoded); rejects on transport errors and abort. */
export function send(
  base: string,
  path: string,
  opts: { method: string; headers: Record<string, string>; body?: Buffer; signal: AbortSignal },
): Promise<Exchange> {
  const url = new URL(base);
  const tls = url.protocol === "https:";
  const prefix = url.pathname.replace(/\/+$/, "");
  return new Promise<Exchange>((resolve, reject) => {
    if (opts.signal.aborted) {
      reject(reasonOf(opts.signal));
      return;
    }
    const headers: Record<string, string> = { ...opts.headers };
    if (opts.body !== undefined) headers["Content-Length"] = String(opts.body.length);
    const req = (tls ? httpsRequest : httpRequest)({
      protocol: url.protocol,
      hostname: url.hostname.replace(/^\[|\]$/g, ""),
      port: url.port || (tls ? 443 : 80),
      method: opts.method,
      path: prefix + path,
      headers,
      agent: tls ? httpsAgent : httpAgent,
    });
    const onAbort = (): void => {
      req.destroy(reasonOf(opts.signal));
    };
    opts.signal.addEventListener("abort", onAbort, { once: true });
    const done = (): void => opts.signal.removeEventListener("abort", onAbort);
    req.on("error", (err) => {
      done();
      reject(opts.signal.aborted ? reasonOf(opts.signal) : err);
    });
    req.on("response", (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("error", (err) => {
        done();
        reject(err);
      });
      res.on("end", () => {
        done();
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) });
      });
    });
    req.end(opts.body);
  });
}

function reasonOf(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  return reason instanceof Error ? reason : new Error("aborted");
}

/** A FormData body serialised to bytes with its multipart content type. */
export async function encodeForm(form: FormData): Promise<{ body: Buffer; contentType: string }> {
  const r = new Response(form);
  return {
    body: Buffer.from(await r.arrayBuffer()),
    contentType: r.headers.get("content-type") ?? "multipart/form-data",
  };
}
