// SandboxClient: claim sandboxes from warm pools, find, list and delete them.
import type * as k8s from "@kubernetes/client-node";

import {
  CLAIM_API_GROUP,
  CLAIM_API_VERSION,
  CLAIM_KIND,
  CLIENT_REQUESTED_AT_ANNOTATION,
  CREATED_BY_LABEL,
  CREATED_BY_VALUE,
  DEFAULT_NAMESPACE,
  DEFAULT_SANDBOX_READY_TIMEOUT_SECONDS,
} from "./constants.js";
import { SandboxNotFoundError, abortError } from "./errors.js";
import { KubeHelper, allowPlainHttp, claimSandboxName, loadKubeConfig, type KubeObject } from "./k8s.js";
import type { ConnectionConfig } from "./models.js";
import { Sandbox } from "./sandbox.js";
import {
  generateClaimName,
  isDnsSubdomain,
  shutdownTimeAfter,
  utcNowIso,
  validateAnnotations,
  validateEnv,
  validateLabels,
  validateNamespace,
  validateShutdownAfterSeconds,
} from "./validate.js";

export interface SandboxClientOptions {
  /** How sandboxes are reached (default: local tunnel to the router). */
  connection?: ConnectionConfig;
  /** Kubeconfig to use (default: KUBECONFIG / ~/.kube/config, else in-cluster). */
  kubeConfig?: k8s.KubeConfig;
}

export interface CreateSandboxOptions {
  /** The SandboxWarmPool to claim from (required). */
  warmpool: string;
  namespace?: string;
  /** Extra labels on the claim (agents.x-k8s.io/created-by is forced). */
  labels?: Record<string, string>;
  /** Delete the sandbox this many seconds from now. */
  shutdownAfterSeconds?: number;
  /** Environment variables for the sandbox (the template must allow injection). */
  env?: Record<string, string>;
  podLabels?: Record<string, string>;
  podAnnotations?: Record<string, string>;
  /** PVC templates passed to spec.volumeClaimTemplates (these cold-start). */
  volumeClaimTemplates?: Record<string, unknown>[];
  /** Seconds to wait for the claim to become Ready (default 180). */
  readyTimeout?: number;
  signal?: AbortSignal;
}

/** The SandboxClaim createSandbox sends (validated; throws TypeError on bad input). */
export function buildClaimManifest(claimName: string, o: CreateSandboxOptions): KubeObject {
  const labels = validateLabels(o.labels);
  labels[CREATED_BY_LABEL] = CREATED_BY_VALUE;
  const spec: Record<string, unknown> = { warmPoolRef: { name: o.warmpool } };
  const ttl = validateShutdownAfterSeconds(o.shutdownAfterSeconds);
  if (ttl !== undefined) spec["lifecycle"] = { shutdownTime: shutdownTimeAfter(ttl), shutdownPolicy: "Delete" };
  const env = validateEnv(o.env);
  if (env.length > 0) spec["env"] = env;
  if (o.volumeClaimTemplates !== undefined) {
    if (!Array.isArray(o.volumeClaimTemplates)) {
      throw new TypeError("volumeClaimTemplates must be a list of PersistentVolumeClaim templates");
    }
    spec["volumeClaimTemplates"] = o.volumeClaimTemplates.map((t) => ({ ...t }));
  }
  const podMeta: Record<string, unknown> = {};
  const podLabels = validateLabels(o.podLabels);
  if (Object.keys(podLabels).length > 0) podMeta["labels"] = podLabels;
  const podAnnotations = validateAnnotations(o.podAnnotations);
  if (Object.keys(podAnnotations).length > 0) podMeta["annotations"] = podAnnotations;
  if (Object.keys(podMeta).length > 0) spec["additionalPodMetadata"] = podMeta;
  return {
    apiVersion: `${CLAIM_API_GROUP}/${CLAIM_API_VERSION}`,
    kind: CLAIM_KIND,
    metadata: { name: claimName, labels, annotations: { [CLIENT_REQUESTED_AT_ANNOTATION]: utcNowIso() } },
    spec,
  };
}

function checkCreateOptions(o: CreateSandboxOptions): void {
  if (typeof o.warmpool !== "string" || o.warmpool === "") {
    throw new TypeError("warmpool must be the name of a SandboxWarmPool (a non-empty string)");
  }
  if (!isDnsSubdomain(o.warmpool)) {
    throw new TypeError(
      `warmpool ${JSON.stringify(o.warmpool)} is not a valid object name (lower-case RFC 1123 subdomain)`,
    );
  }
  validateNamespace(o.namespace ?? DEFAULT_NAMESPACE);
  const t = o.readyTimeout ?? DEFAULT_SANDBOX_READY_TIMEOUT_SECONDS;
  if (typeof t !== "number" || !(t > 0)) {
    throw new TypeError(`readyTimeout must be a positive number of seconds, got ${JSON.stringify(t)}`);
  }
}

export class SandboxClient implements AsyncDisposable {
  readonly connection: ConnectionConfig;
  readonly k8s: KubeHelper;
  private readonly active = new Map<string, Sandbox>();

  constructor(opts: SandboxClientOptions = {}) {
    this.connection = opts.connection ?? { kind: "localTunnel" };
    this.k8s = new KubeHelper(opts.kubeConfig ? allowPlainHttp(opts.kubeConfig) : loadKubeConfig());
  }

  private key(namespace: string, claim: string): string {
    return `${namespace}/${claim}`;
  }

  private track(sb: Sandbox): Sandbox {
    if (sb.claimName !== undefined) this.active.set(this.key(sb.namespace, sb.claimName), sb);
    return sb;
  }

  private newSandbox(claimName: string | undefined, sandboxId: string, namespace: string): Sandbox {
    return new Sandbox({
      claimName,
      sandboxId,
      namespace,
      connectionConfig: this.connection,
      k8s: this.k8s,
      onTerminated: () => {
        if (claimName !== undefined) this.active.delete(this.key(namespace, claimName));
      },
    });
  }

  /**
   * Claim a sandbox from `warmpool` and wait until it is Ready. Any failure
   * (timeout, abort, a failed claim) deletes the claim it made.
   */
  async createSandbox(o: CreateSandboxOptions): Promise<Sandbox> {
    checkCreateOptions(o);
    const namespace = o.namespace ?? DEFAULT_NAMESPACE;
    const claimName = generateClaimName();
    const manifest = buildClaimManifest(claimName, o);
    if (o.signal?.aborted) throw abortError(o.signal);
    const created = await this.k8s.createClaim(namespace, manifest);
    try {
      const sandboxId = await this.k8s.waitForClaimReady(
        claimName,
        namespace,
        o.readyTimeout ?? DEFAULT_SANDBOX_READY_TIMEOUT_SECONDS,
        created.metadata?.resourceVersion,
        o.signal,
      );
      return this.track(this.newSandbox(claimName, sandboxId, namespace));
    } catch (err) {
      await this.k8s.deleteClaim(claimName, namespace).catch(() => undefined);
      throw err;
    }
  }

  /** Reattach to the sandbox of an existing claim. */
  async getSandbox(claimName: string, namespace: string = DEFAULT_NAMESPACE): Promise<Sandbox> {
    validateNamespace(namespace);
    const cached = this.active.get(this.key(namespace, claimName));
    const claim = await this.k8s.getClaim(claimName, namespace);
    if (claim === undefined) {
      cached?.closeConnection();
      this.active.delete(this.key(namespace, claimName));
      throw new SandboxNotFoundError(`SandboxClaim ${namespace}/${claimName} not found`);
    }
    const sandboxId = claimSandboxName(claim);
    if (sandboxId === undefined || (await this.k8s.getSandbox(sandboxId, namespace)) === undefined) {
      cached?.closeConnection();
      this.active.delete(this.key(namespace, claimName));
      throw new SandboxNotFoundError(`SandboxClaim ${namespace}/${claimName} has no Sandbox`);
    }
    if (cached?.isActive && cached.sandboxId === sandboxId) return cached;
    return this.track(this.newSandbox(claimName, sandboxId, namespace));
  }

  /** Attach to a Sandbox by name, with or without a claim (e.g. one applied with kubectl). */
  async attach(sandboxName: string, namespace: string = DEFAULT_NAMESPACE): Promise<Sandbox> {
    validateNamespace(namespace);
    const sb = await this.k8s.getSandbox(sandboxName, namespace);
    if (sb === undefined) throw new SandboxNotFoundError(`Sandbox ${namespace}/${sandboxName} not found`);
    return this.newSandbox(undefined, sandboxName, namespace);
  }

  /** Names of the claims in `namespace` (optionally filtered by a label selector). */
  async listSandboxes(namespace: string = DEFAULT_NAMESPACE, labelSelector?: string): Promise<string[]> {
    validateNamespace(namespace);
    const claims = await this.k8s.listClaims(namespace, labelSelector);
    return claims.map((c) => c.metadata?.name).filter((n): n is string => typeof n === "string" && n !== "");
  }

  /** `[namespace, claim]` of every sandbox this client created and has not terminated. */
  listActiveSandboxes(): [string, string][] {
    return [...this.active.values()]
      .filter((s) => s.claimName !== undefined)
      .map((s) => [s.namespace, s.claimName as string]);
  }

  /** Delete a claim (and its sandbox). Errors are reported, never thrown. */
  async deleteSandbox(claimName: string, namespace: string = DEFAULT_NAMESPACE): Promise<void> {
    const cached = this.active.get(this.key(namespace, claimName));
    if (cached) {
      await cached.terminate().catch((err: unknown) => console.warn(`agent-sandbox: ${String(err)}`));
      return;
    }
    await this.k8s
      .deleteClaim(claimName, namespace)
      .catch((err: unknown) => console.warn(`agent-sandbox: ${String(err)}`));
  }

  /** Terminate every sandbox this client created. */
  async deleteAll(): Promise<void> {
    await Promise.all([...this.active.values()].map((s) => s.terminate().catch(() => undefined)));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.deleteAll();
  }
}
