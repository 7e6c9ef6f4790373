// The HTTP connector of one sandbox: connection strategy, routing headers,
// retries, redirects refused, errors mapped the way the Python SDK maps them.
import { randomBytes } from "node:crypto";

import {
  DEFAULT_REQUEST_TIMEOUT_SECONDS,
  DEFAULT_ROUTER_NAMESPACE,
  DEFAULT_SERVER_PORT,
  HEADER_SANDBOX_ID,
  HEADER_SANDBOX_NAMESPACE,
  HEADER_SANDBOX_POD_IP,
  HEADER_SANDBOX_PORT,
  HEADER_SANDBOX_TIMEOUT,
  ROUTER_SERVICE_NAME,
  ROUTER_SERVICE_PORT,
} from "./constants.js";
import { SandboxError, SandboxPortForwardError, SandboxRequestError, abortError } from "./errors.js";
import type { KubeHelper } from "./k8s.js";
import type { ConnectionConfig } from "./models.js";
import { encodeForm, send, type Exchange } from "./http.js";
import { LocalTunnel } from "./tunnel.js";
import { formatHost, selectPodIp, timeoutHeaderValue, validateNamespace } from "./validate.js";

/** How the connector reaches the runtime. */
export interface Strategy {
  readonly mode: string;
  readonly sendsRouterHeaders: boolean;
  connect(): Promise<string>;
  /** Throws SandboxPortForwardError when an established tunnel died. */
  checkAlive(): void;
  close(): void;
}

class DirectStrategy implements Strategy {
  readonly mode = "direct";
  readonly sendsRouterHeaders = true;
  constructor(private readonly url: string) {}
  connect(): Promise<string> {
    return Promise.resolve(this.url);
  }
  checkAlive(): void {}
  close(): void {}
}

class GatewayStrategy implements Strategy {
  readonly mode = "gateway";
  readonly sendsRouterHeaders = true;
  private url: string | undefined;
  constructor(
    private readonly k8s: KubeHelper,
    private readonly name: string,
    private readonly namespace: string,
    private readonly timeout: number,
  ) {}
  async connect(): Promise<string> {
    this.url ??= `http://${await this.k8s.waitForGatewayAddress(this.name, this.namespace, this.timeout)}`;
    return this.url;
  }
  checkAlive(): void {}
  close(): void {
    this.url = undefined;
  }
}

class LocalTunnelStrategy implements Strategy {
  readonly mode = "port_forward";
  readonly sendsRouterHeaders = true;
  private url: string | undefined;
  private readonly tunnel: LocalTunnel;
  constructor(k8s: KubeHelper, routerNamespace: string, readyTimeout: number) {
    this.tunnel = new LocalTunnel(k8s.kc, routerNamespace, ROUTER_SERVICE_NAME, ROUTER_SERVICE_PORT, readyTimeout);
  }
  async connect(): Promise<string> {
    if (this.url === undefined || !this.tunnel.alive()) {
      this.url = `http://127.0.0.1:${await this.tunnel.start()}`;
    }
    return this.url;
  }
  checkAlive(): void {
    if (this.url !== undefined && !this.tunnel.alive()) {
      const why = this.tunnel.lastError();
      this.close();
      throw new SandboxPortForwardError(
        `The port-forward to the sandbox router died${why ? `: ${why}` : ""}. The next call starts a new one.`,
      );
    }
  }
  close(): void {
    this.tunnel.close();
    this.url = undefined;
  }
}

class InClusterStrategy implements Strategy {
  readonly mode = "in_cluster";
  readonly sendsRouterHeaders = false;
  private url: string | undefined;
  constructor(
    private readonly k8s: KubeHelper,
    private readonly sandboxId: string,
    private readonly namespace: string,
    private readonly port: number,
  ) {}
  async connect(): Promise<string> {
    if (this.url === undefined) {
      let ip: string | undefined;
      try {
        ip = selectPodIp((await this.k8s.getSandbox(this.sandboxId, this.namespace))?.status?.["podIPs"]);
      } catch {
        ip = undefined; // fall back to the Service's DNS name
      }
      const host = ip ? formatHost(ip) : `${this.sandboxId}.${this.namespace}.svc.cluster.local`;
      this.url = `http://${host}:${this.port}`;
    }
    return this.url;
  }
  checkAlive(): void {}
  close(): void {
    this.url = undefined;
  }
}

export function makeStrategy(
  config: ConnectionConfig,
  k8s: KubeHelper,
  sandboxId: string,
  namespace: string,
): Strategy {
  switch (config.kind) {
    case "direct":
      if (typeof config.apiUrl !== "string" || !/^https?:\/\//.test(config.apiUrl)) {
        throw new TypeError(`apiUrl must be an http(s) URL, got ${JSON.stringify(config.apiUrl)}`);
      }
      return new DirectStrategy(config.apiUrl);
    case "gateway":
      return new GatewayStrategy(
        k8s,
        config.gatewayName,
        config.gatewayNamespace ?? "default",
        config.gatewayReadyTimeout ?? 180,
      );
    case "localTunnel":
      return new LocalTunnelStrategy(
        k8s,
        validateNamespace(config.routerNamespace ?? DEFAULT_ROUTER_NAMESPACE),
        config.portForwardReadyTimeout ?? 30,
      );
    case "inCluster":
      return new InClusterStrategy(k8s, sandboxId, namespace, config.serverPort ?? DEFAULT_SERVER_PORT);
    default:
      throw new TypeError(`Unsupported connection config: ${JSON.stringify(config)}`);
  }
}

export interface Reply {
  status: number;
  headers: Exchange["headers"];
  body: Buffer;
  text(): string;
  json(what: string): unknown;
}

export interface RequestOptions {
  body?: Buffer | string | FormData;
  headers?: Record<string, string>;
  timeout?: number;
  signal?: AbortSignal;
  allowedStatuses?: number[];
  query?: Record<string, string>;
  /** Runtime port to reach instead of the connection's serverPort. */
  port?: number;
}

const RETRY_STATUSES = new Set([500, 502, 503, 504]);
const RETRY_METHODS = new Set(["GET", "POST", "PUT", "DELETE"]);
const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/** Retry policy knobs (exported so tests can shorten the backoff). */
export const retryPolicy = { total: 5, backoffSeconds: 0.5 };

const BAD_GATEWAY_HINT = " The router could not reach the sandbox pod; check sandbox.status() and the pod.";

function errorDetail(body: Buffer): string {
  const text = body.toString("utf8");
  try {
    const parsed = JSON.parse(text) as Record<string, unknown>;
    for (const key of ["detail", "message", "error"]) {
      if (typeof parsed[key] === "string") return parsed[key];
    }
  } catch {
    // not JSON: fall through to the raw text
  }
  return text.slice(0, 256);
}

function makeReply(status: number, headers: Exchange["headers"], body: Buffer): Reply {
  return {
    status,
    headers,
    body,
    text: () => body.toString("utf8"),
    json: (what: string) => {
      try {
        return JSON.parse(body.toString("utf8")) as unknown;
      } catch (err) {
        throw new SandboxError(
          `The sandbox returned a non-JSON ${what}: ${JSON.stringify(body.toString("utf8").slice(0, 200))}`,
          {
            cause: err,
          },
        );
      }
    },
  };
}

export class Connector {
  private baseUrl: string | undefined;
  private podIp: string | undefined;
  private podIpDisabled = false;
  readonly strategy: Strategy;
  readonly serverPort: number;

  constructor(
    readonly sandboxId: string,
    readonly namespace: string,
    readonly config: ConnectionConfig,
    private readonly k8s: KubeHelper,
    strategy?: Strategy,
  ) {
    this.serverPort = config.serverPort ?? DEFAULT_SERVER_PORT;
    this.strategy = strategy ?? makeStrategy(config, k8s, sandboxId, namespace);
  }

  async connect(): Promise<string> {
    if (this.baseUrl !== undefined) this.strategy.checkAlive();
    this.baseUrl ??= await this.strategy.connect();
    return this.baseUrl;
  }

  close(): void {
    this.strategy.close();
    this.baseUrl = undefined;
    this.podIp = undefined;
  }

  private async resolvePodIp(): Promise<string | undefined> {
    if (this.podIpDisabled) return undefined;
    if (this.podIp === undefined) {
      try {
        const sandbox = await this.k8s.getSandbox(this.sandboxId, this.namespace);
        this.podIp = selectPodIp(sandbox?.status?.["podIPs"]) ?? "";
      } catch (err) {
        if (err instanceof SandboxRequestError && (err.statusCode === 401 || err.statusCode === 403)) {
          this.podIpDisabled = true;
        }
        return undefined;
      }
    }
    return this.podIp || undefined;
  }

  /** The X-Sandbox-* headers for a request to `port` (empty when the strategy is not the router). */
  async routingHeaders(timeout: number | undefined, port = this.serverPort): Promise<Record<string, string>> {
    if (!this.strategy.sendsRouterHeaders) return {};
    const headers: Record<string, string> = {
      [HEADER_SANDBOX_ID]: this.sandboxId,
      [HEADER_SANDBOX_NAMESPACE]: this.namespace,
      [HEADER_SANDBOX_PORT]: String(port),
    };
    const t = timeoutHeaderValue(timeout);
    if (t !== undefined) headers[HEADER_SANDBOX_TIMEOUT] = t;
    const ip = await this.resolvePodIp();
    if (ip) headers[HEADER_SANDBOX_POD_IP] = ip;
    return headers;
  }

  private describe(method: string, endpoint: string): string {
    return `${method} /${endpoint.replace(/^\/+/, "")} on sandbox ${this.namespace}/${this.sandboxId}`;
  }

  private unreachableHint(): string {
    switch (this.config.kind) {
      case "direct":
        return `Check that the sandbox router is running and reachable at apiUrl=${JSON.stringify(this.config.apiUrl)}.`;
      case "localTunnel":
        return `Check the router Service: kubectl get svc ${ROUTER_SERVICE_NAME} -n ${this.config.routerNamespace ?? DEFAULT_ROUTER_NAMESPACE}.`;
      case "gateway":
        return `Check that Gateway ${this.config.gatewayNamespace ?? "default"}/${this.config.gatewayName} routes to the sandbox router.`;
      case "inCluster":
        return "Check that the sandbox pod is running and reachable.";
    }
  }

  requestOnPort(port: number, method: string, endpoint: string, opts: RequestOptions = {}): Promise<Reply> {
    return this.request(method, endpoint, { ...opts, port });
  }

  /**
   * Send `method` to `<base>/<endpoint>` and return the successful reply.
   * Transport errors and 500/502/503/504 are retried (GET/POST/PUT/DELETE),
   * redirects are never followed, and every failure becomes a
   * SandboxRequestError; a transport error or 5xx closes the connection.
   */
  async request(method: string, endpoint: string, opts: RequestOptions = {}): Promise<Reply> {
    const timeout = opts.timeout ?? DEFAULT_REQUEST_TIMEOUT_SECONDS;
    const what = this.describe(method, endpoint);
    const retries = RETRY_METHODS.has(method) ? retryPolicy.total : 0;
    for (let attempt = 0; ; attempt++) {
      if (opts.signal?.aborted) throw abortError(opts.signal);
      const base = await this.connect();
      let path = "/" + endpoint.replace(/^\/+/, "");
      if (opts.query && Object.keys(opts.query).length > 0) path += "?" + new URLSearchParams(opts.query).toString();
      const headers: Record<string, string> = {
        "X-Request-ID": randomBytes(8).toString("hex"),
        ...(opts.headers ?? {}),
        ...(await this.routingHeaders(timeout, opts.port)),
      };
      let payload: Buffer | undefined;
      if (opts.body instanceof FormData) {
        const form = await encodeForm(opts.body);
        payload = form.body;
        headers["Content-Type"] = form.contentType;
      } else if (opts.body !== undefined) {
        payload = typeof opts.body === "string" ? Buffer.from(opts.body, "utf8") : opts.body;
      }
      const signals = [AbortSignal.timeout(timeout * 1000)];
      if (opts.signal) signals.push(opts.signal);
      let response: Exchange;
      try {
        response = await send(withPort(base, opts.port, this.strategy.sendsRouterHeaders), path, {
          method,
          headers,
          body: payload,
          signal: AbortSignal.any(signals),
        });
      } catch (err) {
        if (opts.signal?.aborted) throw abortError(opts.signal);
        try {
          this.strategy.checkAlive();
        } catch (tunnelErr) {
          this.close();
          throw tunnelErr;
        }
        this.close();
        if (attempt < retries) {
          await backoff(attempt, opts.signal);
          continue;
        }
        throw new SandboxRequestError(
          `${what} failed: could not get a response from ${base} (${describeFetchError(err)}). ${this.unreachableHint()}`,
          { cause: err },
        );
      }
      const body = response.body;
      const status = response.status;
      if ((opts.allowedStatuses ?? []).includes(status)) return makeReply(status, response.headers, body);
      if (RETRY_STATUSES.has(status) && attempt < retries) {
        this.podIp = undefined;
        await backoff(attempt, opts.signal);
        continue;
      }
      if (REDIRECTS.has(status)) {
        this.podIp = undefined;
        throw new SandboxRequestError(
          `${what} was answered with a redirect (HTTP ${status} to ${String(response.headers.location ?? "?")}); redirects are not followed.`,
          { statusCode: status, body: body.toString("utf8") },
        );
      }
      if (status >= 400) {
        this.podIp = undefined;
        if (status >= 500) this.close();
        const hint = status === 502 ? BAD_GATEWAY_HINT : "";
        throw new SandboxRequestError(`${what} failed with HTTP ${status}: ${errorDetail(body)}.${hint}`, {
          statusCode: status,
          body: body.toString("utf8"),
        });
      }
      return makeReply(status, response.headers, body);
    }
  }
}

/** Send to `port` of the runtime: a routing header through the router, the URL's port otherwise. */
function withPort(base: string, port: number | undefined, routed: boolean): string {
  if (port === undefined || routed) return base;
  const url = new URL(base);
  url.port = String(port);
  return url.toString();
}

function describeFetchError(err: unknown): string {
  if (err instanceof Error) {
    const cause = (err as { cause?: unknown }).cause;
    if (cause instanceof Error) return `${err.message}: ${cause.message}`;
    return err.message;
  }
  return String(err);
}

async function backoff(attempt: number, signal?: AbortSignal): Promise<void> {
  const seconds = attempt === 0 ? 0 : retryPolicy.backoffSeconds * 2 ** (attempt - 1);
  if (seconds <= 0) return;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, seconds * 1000);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(abortError(signal as AbortSignal));
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
