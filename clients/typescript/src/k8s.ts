// Kubernetes access through @kubernetes/client-node only: claims are
// created, watched and deleted with its CustomObjectsApi and Watch, the
// router tunnel uses its PortForward. Nothing here speaks HTTP to the
// apiserver by hand.
import * as k8s from "@kubernetes/client-node";

import {
  CLAIM_API_GROUP,
  CLAIM_API_VERSION,
  CLAIM_PLURAL,
  GATEWAY_API_GROUP,
  GATEWAY_API_VERSION,
  GATEWAY_PLURAL,
  REASON_TEMPLATE_NOT_FOUND,
  REASON_WARM_POOL_NOT_FOUND,
  SANDBOX_API_GROUP,
  SANDBOX_API_VERSION,
  SANDBOX_PLURAL,
  TERMINAL_CLAIM_REASONS,
} from "./constants.js";
import {
  SandboxClaimFailedError,
  SandboxError,
  SandboxMetadataError,
  SandboxRequestError,
  SandboxTemplateNotFoundError,
  SandboxTimeoutError,
  SandboxWarmPoolNotFoundError,
  abortError,
} from "./errors.js";
import { validateGatewayAddress } from "./validate.js";

/** A Kubernetes object as the apiserver returns it (untyped JSON). */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata?: {
    name?: string;
    namespace?: string;
    uid?: string;
    resourceVersion?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    deletionTimestamp?: string;
  };
  spec?: Record<string, unknown>;
  status?: Record<string, unknown>;
}

interface Condition {
  type?: string;
  status?: string;
  reason?: string;
  message?: string;
}

function conditions(obj: KubeObject | undefined): Condition[] {
  const list = obj?.status?.["conditions"];
  return Array.isArray(list) ? (list.filter((c) => typeof c === "object" && c !== null) as Condition[]) : [];
}

export function findCondition(obj: KubeObject | undefined, type: string): Condition | undefined {
  return conditions(obj).find((c) => c.type === type);
}

/** `Type=Status (Reason: message)` for every condition, for error messages. */
export function describeConditions(obj: KubeObject | undefined): string {
  const parts = conditions(obj).map((c) => {
    let text = `${c.type ?? "?"}=${c.status ?? "?"}`;
    if (c.reason) text += ` (${c.reason}: ${c.message ?? ""})`;
    return text;
  });
  return parts.join("; ") || "no conditions yet";
}

/** `status.sandbox.name` of a claim (the legacy key `Name` is accepted too). */
export function claimSandboxName(claim: KubeObject | undefined): string | undefined {
  const sandbox = claim?.status?.["sandbox"];
  if (typeof sandbox !== "object" || sandbox === null) return undefined;
  const rec = sandbox as Record<string, unknown>;
  const name = rec["name"] ?? rec["Name"];
  return typeof name === "string" && name !== "" ? name : undefined;
}

export function claimWarmPoolRef(claim: KubeObject | undefined): unknown {
  const ref = claim?.spec?.["warmPoolRef"];
  return typeof ref === "object" && ref !== null ? (ref as Record<string, unknown>)["name"] : undefined;
}

/**
 * Classify a claim seen during the readiness wait: the sandbox name once the
 * claim names it and is Ready, undefined while waiting; throws on terminal
 * failures (the same reasons the Python SDK fails fast on).
 */
export function checkClaim(claim: KubeObject): string | undefined {
  const name = claim.metadata?.name ?? "?";
  const namespace = claim.metadata?.namespace ?? "?";
  const ref = claimWarmPoolRef(claim);
  const pool = typeof ref === "string" ? ref : "";
  for (const c of conditions(claim)) {
    if (c.reason === REASON_WARM_POOL_NOT_FOUND) {
      throw new SandboxWarmPoolNotFoundError(
        `SandboxWarmPool ${JSON.stringify(pool)} not found in namespace ${JSON.stringify(namespace)} ` +
          `(claim ${name}: ${c.message ?? ""}). Create the pool or pass the name of an existing one; ` +
          `list them with: kubectl get sandboxwarmpools -n ${namespace}`,
      );
    }
  }
  const ready = findCondition(claim, "Ready");
  if (ready?.status === "False") {
    if (ready.reason === REASON_TEMPLATE_NOT_FOUND) {
      throw new SandboxTemplateNotFoundError(
        `The SandboxTemplate used by warm pool ${JSON.stringify(pool)} does not exist in namespace ` +
          `${JSON.stringify(namespace)} (claim ${name}: ${ready.message ?? ""}). Create the template ` +
          `or fix the pool's sandboxTemplateRef: kubectl get sandboxtemplates -n ${namespace}`,
      );
    }
    if (ready.reason !== undefined && TERMINAL_CLAIM_REASONS.has(ready.reason)) {
      throw new SandboxClaimFailedError(
        `SandboxClaim ${namespace}/${name} failed: ${ready.reason}: ${ready.message ?? ""}`,
      );
    }
  }
  const sandboxName = claimSandboxName(claim);
  return sandboxName !== undefined && ready?.status === "True" ? sandboxName : undefined;
}

/** The first valid address of a Gateway's status.addresses. */
export function gatewayAddress(gateway: KubeObject): string | undefined {
  const addresses = gateway.status?.["addresses"];
  if (!Array.isArray(addresses)) return undefined;
  for (const entry of addresses) {
    if (typeof entry !== "object" || entry === null) continue;
    const host = validateGatewayAddress((entry as Record<string, unknown>)["value"]);
    if (host) return host;
  }
  return undefined;
}

function statusOf(err: unknown): number | undefined {
  if (err instanceof k8s.ApiException) return err.code;
  const code = (err as { code?: unknown; statusCode?: unknown } | null)?.code;
  return typeof code === "number" ? code : undefined;
}

function bodyText(err: unknown): string {
  if (!(err instanceof k8s.ApiException)) return err instanceof Error ? err.message : String(err);
  const body: unknown = err.body;
  if (typeof body === "string") {
    try {
      const parsed = JSON.parse(body) as { message?: unknown };
      if (typeof parsed.message === "string") return parsed.message;
    } catch {
      return body.slice(0, 256);
    }
    return body.slice(0, 256);
  }
  if (typeof body === "object" && body !== null && typeof (body as { message?: unknown }).message === "string") {
    return (body as { message: string }).message;
  }
  return err.message;
}

/** Wrap an apiserver failure in SandboxRequestError, naming the action. */
export function apiError(action: string, err: unknown): SandboxError {
  if (err instanceof SandboxError) return err;
  if (err instanceof Error && err.name === "AbortError") return new SandboxError(`${action}: aborted`, { cause: err });
  const status = statusOf(err);
  const detail = bodyText(err);
  const message =
    status !== undefined
      ? `${action} failed with HTTP ${status}: ${detail}`
      : `${action} failed: ${detail} (is the cluster reachable? check KUBECONFIG)`;
  return new SandboxRequestError(message, { statusCode: status, body: detail, cause: err });
}

/** Load the kubeconfig: KUBECONFIG / ~/.kube/config, or the in-cluster service account. */
export function loadKubeConfig(): k8s.KubeConfig {
  const kc = new k8s.KubeConfig();
  kc.loadFromDefault();
  return allowPlainHttp(kc);
}

/**
 * client-node refuses `http://` servers unless skipTLSVerify is set, although
 * there is no TLS to verify; kubectl and the Python client accept them (the
 * integration stack serves plain HTTP on loopback). Mark such clusters so the
 * same kubeconfig works here; https clusters are left untouched.
 */
export function allowPlainHttp(kc: k8s.KubeConfig): k8s.KubeConfig {
  if (!kc.clusters.some((c) => c.server.startsWith("http://") && !c.skipTLSVerify)) return kc;
  const out = new k8s.KubeConfig();
  out.loadFromOptions({
    clusters: kc.clusters.map((c) => (c.server.startsWith("http://") ? { ...c, skipTLSVerify: true } : c)),
    users: kc.users,
    contexts: kc.contexts,
    currentContext: kc.getCurrentContext(),
  });
  return out;
}

export class KubeHelper {
  readonly kc: k8s.KubeConfig;
  private readonly custom: k8s.CustomObjectsApi;
  readonly core: k8s.CoreV1Api;

  constructor(kc: k8s.KubeConfig) {
    this.kc = kc;
    this.custom = kc.makeApiClient(k8s.CustomObjectsApi);
    this.core = kc.makeApiClient(k8s.CoreV1Api);
  }

  async createClaim(namespace: string, body: KubeObject): Promise<KubeObject> {
    try {
      return (await this.custom.createNamespacedCustomObject({
        group: CLAIM_API_GROUP,
        version: CLAIM_API_VERSION,
        namespace,
        plural: CLAIM_PLURAL,
        body,
      })) as KubeObject;
    } catch (err) {
      throw apiError(`Creating SandboxClaim ${namespace}/${body.metadata?.name ?? "?"}`, err);
    }
  }

  async getClaim(name: string, namespace: string): Promise<KubeObject | undefined> {
    return this.getCustom(CLAIM_API_GROUP, CLAIM_API_VERSION, CLAIM_PLURAL, name, namespace, "SandboxClaim");
  }

  async getSandbox(name: string, namespace: string): Promise<KubeObject | undefined> {
    return this.getCustom(SANDBOX_API_GROUP, SANDBOX_API_VERSION, SANDBOX_PLURAL, name, namespace, "Sandbox");
  }

  /** Read any namespaced custom object (undefined when it does not exist). */
  async getObject(o: {
    group: string;
    version: string;
    plural: string;
    name: string;
    namespace: string;
  }): Promise<KubeObject | undefined> {
    return this.getCustom(o.group, o.version, o.plural, o.name, o.namespace, o.plural);
  }

  private async getCustom(
    group: string,
    version: string,
    plural: string,
    name: string,
    namespace: string,
    kind: string,
  ): Promise<KubeObject | undefined> {
    try {
      return (await this.custom.getNamespacedCustomObject({ group, version, namespace, plural, name })) as KubeObject;
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      throw apiError(`Reading ${kind} ${namespace}/${name}`, err);
    }
  }

  async listClaims(namespace: string, labelSelector?: string): Promise<KubeObject[]> {
    try {
      const list = (await this.custom.listNamespacedCustomObject({
        group: CLAIM_API_GROUP,
        version: CLAIM_API_VERSION,
        namespace,
        plural: CLAIM_PLURAL,
        labelSelector,
      })) as { items?: KubeObject[] };
      return list.items ?? [];
    } catch (err) {
      throw apiError(`Listing SandboxClaims in ${namespace}`, err);
    }
  }

  /** Delete a claim; a claim that is already gone counts as deleted. */
  async deleteClaim(name: string, namespace: string): Promise<void> {
    try {
      await this.custom.deleteNamespacedCustomObject({
        group: CLAIM_API_GROUP,
        version: CLAIM_API_VERSION,
        namespace,
        plural: CLAIM_PLURAL,
        name,
      });
    } catch (err) {
      if (statusOf(err) === 404) return;
      throw apiError(`Deleting SandboxClaim ${namespace}/${name}`, err);
    }
  }

  async getGateway(name: string, namespace: string): Promise<KubeObject | undefined> {
    return this.getCustom(GATEWAY_API_GROUP, GATEWAY_API_VERSION, GATEWAY_PLURAL, name, namespace, "Gateway");
  }

  /**
   * Watch one object (field selector on its name) from `resourceVersion`
   * until `judge` returns a value, the object is deleted, or `timeoutSeconds`
   * pass. A 410 Gone restarts the watch from the current state.
   */
  async watchUntil<T>(opts: {
    path: string;
    name: string;
    resourceVersion?: string;
    timeoutSeconds: number;
    judge: (obj: KubeObject) => T | undefined;
    onDeleted: () => Error;
    onTimeout: () => Error;
    signal?: AbortSignal;
  }): Promise<T> {
    const deadline = Date.now() + opts.timeoutSeconds * 1000;
    let resourceVersion = opts.resourceVersion ?? "0";
    const watch = new k8s.Watch(this.kc);
    for (;;) {
      const remaining = Math.ceil((deadline - Date.now()) / 1000);
      if (remaining <= 0) throw opts.onTimeout();
      if (opts.signal?.aborted) throw abortError(opts.signal);
      const outcome = await new Promise<{ value?: T; error?: Error; restart?: boolean }>((resolve) => {
        let settled = false;
        let controller: AbortController | undefined;
        const finish = (r: { value?: T; error?: Error; restart?: boolean }): void => {
          if (settled) return;
          settled = true;
          clearTimeout(timer);
          opts.signal?.removeEventListener("abort", onAbort);
          controller?.abort();
          resolve(r);
        };
        const onAbort = (): void => finish({ error: abortError(opts.signal as AbortSignal) });
        const timer = setTimeout(() => finish({ restart: true }), remaining * 1000 + 1000);
        opts.signal?.addEventListener("abort", onAbort, { once: true });
        watch
          .watch(
            opts.path,
            {
              fieldSelector: `metadata.name=${opts.name}`,
              resourceVersion,
              allowWatchBookmarks: true,
              timeoutSeconds: remaining,
            },
            (phase: string, obj: KubeObject) => {
              if (settled) return;
              const rv = obj?.metadata?.resourceVersion;
              if (phase === "ERROR") {
                const code = (obj as { code?: number }).code;
                if (code === 410) {
                  resourceVersion = "0";
                  finish({ restart: true });
                } else {
                  finish({ error: apiError(`Watching ${opts.name}`, new Error(JSON.stringify(obj))) });
                }
                return;
              }
              if (rv) resourceVersion = rv;
              if (phase === "BOOKMARK") return;
              if (phase === "DELETED") {
                finish({ error: opts.onDeleted() });
                return;
              }
              try {
                const value = opts.judge(obj);
                if (value !== undefined) finish({ value });
              } catch (err) {
                finish({ error: err as Error });
              }
            },
            (err: unknown) => {
              if (settled) return;
              if (err && statusOf(err) === 410) resourceVersion = "0";
              else if (err && !(err instanceof Error && err.name === "AbortError")) {
                finish({ error: apiError(`Watching ${opts.name}`, err) });
                return;
              }
              finish({ restart: true });
            },
          )
          .then(
            (c) => {
              controller = c;
              if (settled) c.abort();
            },
            (err: unknown) => finish({ error: apiError(`Watching ${opts.name}`, err) }),
          );
      });
      if (outcome.error) throw outcome.error;
      if (outcome.value !== undefined) return outcome.value;
    }
  }

  /** Wait until the claim names a Ready sandbox; returns the Sandbox name. */
  async waitForClaimReady(
    name: string,
    namespace: string,
    timeoutSeconds: number,
    resourceVersion: string | undefined,
    signal?: AbortSignal,
  ): Promise<string> {
    return this.watchUntil({
      path: `/apis/${CLAIM_API_GROUP}/${CLAIM_API_VERSION}/namespaces/${namespace}/${CLAIM_PLURAL}`,
      name,
      resourceVersion,
      timeoutSeconds,
      judge: checkClaim,
      signal,
      onDeleted: () => new SandboxMetadataError(`SandboxClaim ${namespace}/${name} was deleted while waiting for it`),
      onTimeout: () =>
        new SandboxTimeoutError(`SandboxClaim ${namespace}/${name} did not become Ready within ${timeoutSeconds}s`),
    });
  }

  /** Wait until a Gateway publishes a valid address; returns the URL host. */
  async waitForGatewayAddress(name: string, namespace: string, timeoutSeconds: number): Promise<string> {
    return this.watchUntil({
      path: `/apis/${GATEWAY_API_GROUP}/${GATEWAY_API_VERSION}/namespaces/${namespace}/${GATEWAY_PLURAL}`,
      name,
      timeoutSeconds,
      judge: gatewayAddress,
      onDeleted: () => new SandboxMetadataError(`Gateway ${namespace}/${name} was deleted`),
      onTimeout: () =>
        new SandboxTimeoutError(`Gateway ${namespace}/${name} published no usable address within ${timeoutSeconds}s`),
    });
  }
}
