// sandbox.files: write, read, list, check and delete files in the sandbox
// workspace. write/read/list/exists speak the legacy runtime API through the
// router (as the Python SDK does); delete uses sandboxd's /v1/files on port
// 8080, which the router also reaches.
import { DEFAULT_REQUEST_TIMEOUT_SECONDS } from "./constants.js";
import { SandboxError, SandboxUnsupportedError } from "./errors.js";
import type { Connector } from "./connector.js";
import type { CallOptions, FileEntry } from "./models.js";
import { checkPath, encodePath, sanitizePath } from "./validate.js";

export interface PathOptions extends CallOptions {
  /** Send the path unchanged (no `..` or control-character checks). */
  allowUnsafePaths?: boolean;
}

const SANDBOXD_REST_PORT = 8080;

function toBuffer(content: unknown): Buffer {
  if (typeof content === "string") return Buffer.from(content, "utf8");
  if (content instanceof Uint8Array) return Buffer.from(content);
  throw new TypeError(`content must be a string, Buffer or Uint8Array, got ${typeof content}`);
}

/** Entries of a legacy /list body (an array; empty body → []). */
export function parseListing(body: Buffer): FileEntry[] {
  if (body.length === 0) return [];
  let data: unknown;
  try {
    data = JSON.parse(body.toString("utf8"));
  } catch {
    throw new SandboxError(
      `The sandbox returned a non-JSON listing: ${JSON.stringify(body.toString("utf8").slice(0, 200))}`,
    );
  }
  if (!data) return [];
  if (!Array.isArray(data))
    throw new SandboxError(`The sandbox returned an unexpected listing: ${JSON.stringify(data).slice(0, 200)}`);
  const out: FileEntry[] = [];
  for (const item of data as unknown[]) {
    if (typeof item !== "object" || item === null) continue;
    const rec = item as Record<string, unknown>;
    if (rec["type"] !== "file" && rec["type"] !== "directory") continue;
    const mod = typeof rec["mod_time"] === "number" ? rec["mod_time"] : 0;
    const entry: FileEntry = {
      name: typeof rec["name"] === "string" ? rec["name"] : "",
      size: typeof rec["size"] === "number" ? rec["size"] : 0,
      type: rec["type"],
      modified: new Date(mod * 1000),
    };
    if (typeof rec["mode"] === "string") entry.mode = rec["mode"];
    out.push(entry);
  }
  return out;
}

export class Files {
  constructor(private readonly connector: Connector) {}

  /** Write `content` (strings are UTF-8) to `path`, creating parent directories. */
  async write(path: string, content: string | Uint8Array, opts: PathOptions = {}): Promise<void> {
    const dest = opts.allowUnsafePaths ? path : sanitizePath(path);
    const form = new FormData();
    form.append("file", new Blob([new Uint8Array(toBuffer(content))]), dest);
    await this.connector.request("POST", "upload", {
      body: form,
      timeout: opts.timeout ?? DEFAULT_REQUEST_TIMEOUT_SECONDS,
      signal: opts.signal,
    });
  }

  /** The bytes of the file at `path`. */
  async read(path: string, opts: PathOptions = {}): Promise<Buffer> {
    const src = opts.allowUnsafePaths ? path : sanitizePath(path);
    const reply = await this.connector.request("GET", `download/${encodePath(src)}`, {
      timeout: opts.timeout ?? DEFAULT_REQUEST_TIMEOUT_SECONDS,
      signal: opts.signal,
    });
    return reply.body;
  }

  /** The directory at `path` (`"."` is the workspace root). */
  async list(path: string, opts: CallOptions = {}): Promise<FileEntry[]> {
    checkPath(path);
    const reply = await this.connector.request("GET", `list/${encodePath(path)}`, {
      timeout: opts.timeout ?? DEFAULT_REQUEST_TIMEOUT_SECONDS,
      signal: opts.signal,
    });
    return parseListing(reply.body);
  }

  /** True when `path` exists in the sandbox. */
  async exists(path: string, opts: CallOptions = {}): Promise<boolean> {
    checkPath(path);
    const reply = await this.connector.request("GET", `exists/${encodePath(path)}`, {
      timeout: opts.timeout ?? DEFAULT_REQUEST_TIMEOUT_SECONDS,
      signal: opts.signal,
    });
    const data = reply.json("exists answer") as { exists?: unknown } | null;
    if (typeof data !== "object" || data === null || typeof data.exists !== "boolean") {
      throw new SandboxError(`The sandbox returned an unexpected exists answer: ${reply.text().slice(0, 200)}`);
    }
    return data.exists;
  }

  /**
   * Delete `path` through sandboxd's /v1/files (the legacy API has no delete).
   * Only routed connections reach port 8080; in-cluster ones dial the pod.
   */
  async delete(path: string, opts: CallOptions & { recursive?: boolean } = {}): Promise<void> {
    checkPath(path);
    if (!this.connector.strategy.sendsRouterHeaders && this.connector.config.kind !== "inCluster") {
      throw new SandboxUnsupportedError("files.delete needs sandboxd's /v1/files API");
    }
    await this.connector.requestOnPort(SANDBOXD_REST_PORT, "DELETE", `v1/files/${encodePath(path)}`, {
      query: opts.recursive ? { recursive: "true" } : undefined,
      timeout: opts.timeout ?? DEFAULT_REQUEST_TIMEOUT_SECONDS,
      signal: opts.signal,
    });
  }
}
