// The local tunnel: a loopback listener whose connections are carried to the
// sandbox-router pod through @kubernetes/client-node's PortForward (the same
// thing `kubectl port-forward svc/sandbox-router-svc` does).
import { createServer, type Server, type Socket } from "node:net";

import * as k8s from "@kubernetes/client-node";

import { SandboxPortForwardError } from "./errors.js";
import { apiError } from "./k8s.js";

interface Target {
  pod: string;
  port: number;
}

function podReady(pod: k8s.V1Pod): boolean {
  return (
    pod.status?.phase === "Running" &&
    !pod.metadata?.deletionTimestamp &&
    (pod.status.conditions ?? []).some((c) => c.type === "Ready" && c.status === "True")
  );
}

function containerPort(pod: k8s.V1Pod, target: number | string): number | undefined {
  if (typeof target === "number") return target;
  if (/^\d+$/.test(target)) return Number(target);
  for (const c of pod.spec?.containers ?? []) {
    for (const p of c.ports ?? []) if (p.name === target) return p.containerPort;
  }
  return undefined;
}

/** Resolve a Service port to a Ready pod behind it and that pod's container port. */
export async function resolveServiceTarget(
  core: k8s.CoreV1Api,
  namespace: string,
  service: string,
  servicePort: number,
): Promise<Target> {
  let svc: k8s.V1Service;
  try {
    svc = await core.readNamespacedService({ name: service, namespace });
  } catch (err) {
    throw new SandboxPortForwardError(
      `Cannot read Service ${namespace}/${service} for the router tunnel: ${apiError("read", err).message}. ` +
        `Check the router is installed: kubectl get svc ${service} -n ${namespace}`,
      { cause: err },
    );
  }
  const selector = svc.spec?.selector ?? {};
  const portSpec = (svc.spec?.ports ?? []).find((p) => p.port === servicePort);
  if (!portSpec || Object.keys(selector).length === 0) {
    throw new SandboxPortForwardError(`Service ${namespace}/${service} has no port ${servicePort} with a pod selector`);
  }
  const labelSelector = Object.entries(selector)
    .map(([k, v]) => `${k}=${v}`)
    .join(",");
  let pods: k8s.V1PodList;
  try {
    pods = await core.listNamespacedPod({ namespace, labelSelector });
  } catch (err) {
    throw new SandboxPortForwardError(`Cannot list the router pods: ${apiError("list", err).message}`, { cause: err });
  }
  for (const pod of pods.items) {
    if (!podReady(pod)) continue;
    const port = containerPort(pod, portSpec.targetPort ?? servicePort);
    if (port !== undefined && pod.metadata?.name) return { pod: pod.metadata.name, port };
  }
  throw new SandboxPortForwardError(
    `No Ready pod behind Service ${namespace}/${service}; check: kubectl get pods -n ${namespace} -l ${labelSelector}`,
  );
}

export class LocalTunnel {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  private port: number | undefined;
  private failure: string | undefined;

  constructor(
    private readonly kc: k8s.KubeConfig,
    private readonly namespace: string,
    private readonly service: string,
    private readonly servicePort: number,
    private readonly readyTimeoutSeconds: number,
  ) {}

  alive(): boolean {
    return this.server?.listening === true && this.failure === undefined;
  }

  lastError(): string | undefined {
    return this.failure;
  }

  /** Start the tunnel (idempotent) and return its local port. */
  async start(): Promise<number> {
    if (this.alive() && this.port !== undefined) return this.port;
    this.close();
    const core = this.kc.makeApiClient(k8s.CoreV1Api);
    const target = await withTimeout(
      resolveServiceTarget(core, this.namespace, this.service, this.servicePort),
      this.readyTimeoutSeconds,
      `Resolving the router pod behind ${this.namespace}/${this.service}`,
    );
    const forward = new k8s.PortForward(this.kc, true);
    const server = createServer((socket) => {
      this.sockets.add(socket);
      socket.on("close", () => this.sockets.delete(socket));
      socket.on("error", () => socket.destroy());
      forward.portForward(this.namespace, target.pod, [target.port], socket, null, socket).then(
        (ws) => {
          // The socket type comes from isomorphic-ws, whose types do not resolve here.
          const resolved: unknown = typeof ws === "function" ? (ws as () => unknown)() : ws;
          const conn = resolved as {
            on(event: string, cb: () => void): void;
            close(): void;
          } | null;
          conn?.on("error", () => socket.destroy());
          socket.on("close", () => conn?.close());
        },
        (err: unknown) => {
          this.failure = `port-forward to pod ${this.namespace}/${target.pod}: ${String(err)}`;
          socket.destroy();
        },
      );
    });
    this.server = server;
    this.failure = undefined;
    await withTimeout(
      new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen(0, "127.0.0.1", () => resolve());
      }),
      this.readyTimeoutSeconds,
      "Opening the local tunnel port",
    );
    const addr = server.address();
    if (addr === null || typeof addr === "string") throw new SandboxPortForwardError("tunnel has no local port");
    this.port = addr.port;
    return this.port;
  }

  close(): void {
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
    this.server?.close();
    this.server = undefined;
    this.port = undefined;
  }
}

async function withTimeout<T>(p: Promise<T>, seconds: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new SandboxPortForwardError(`${what} took longer than ${seconds}s`)),
      seconds * 1000,
    );
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
