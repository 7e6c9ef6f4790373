// A claimed (or attached) sandbox: commands, files, status, terminate.
import { Commands } from "./commands.js";
import { STATE_NOT_FOUND, STATE_NOT_READY, STATE_READY, POD_NAME_ANNOTATION } from "./constants.js";
import { Connector } from "./connector.js";
import { SandboxError } from "./errors.js";
import { findCondition, type KubeHelper, type KubeObject } from "./k8s.js";
import type { ConnectionConfig, SandboxStatus } from "./models.js";
import { Files } from "./files.js";
import { selectPodIp } from "./validate.js";

/** (state, message) of a Sandbox object (undefined: not found), from its Ready condition. */
export function sandboxStatus(sandbox: KubeObject | undefined, namespace: string, sandboxId: string): SandboxStatus {
  if (sandbox === undefined) return { state: STATE_NOT_FOUND, message: `Sandbox ${namespace}/${sandboxId} not found` };
  const ready = findCondition(sandbox, "Ready");
  if (ready === undefined) return { state: STATE_NOT_READY, message: "Sandbox has no Ready condition yet" };
  const message = String(ready.message || ready.reason || "");
  return { state: ready.status === "True" ? STATE_READY : STATE_NOT_READY, message };
}

export class Sandbox implements AsyncDisposable {
  /** The SandboxClaim that owns the sandbox (undefined for attached bare Sandboxes and after terminate). */
  claimName: string | undefined;
  /** The Sandbox name (sent as X-Sandbox-ID). */
  readonly sandboxId: string;
  readonly namespace: string;
  readonly connectionConfig: ConnectionConfig;
  private connector: Connector | undefined;
  private commandsApi: Commands | undefined;
  private filesApi: Files | undefined;
  private readonly onTerminated: ((s: Sandbox) => void) | undefined;

  constructor(opts: {
    claimName: string | undefined;
    sandboxId: string;
    namespace: string;
    connectionConfig: ConnectionConfig;
    k8s: KubeHelper;
    onTerminated?: (s: Sandbox) => void;
  }) {
    this.claimName = opts.claimName;
    this.sandboxId = opts.sandboxId;
    this.namespace = opts.namespace;
    this.connectionConfig = opts.connectionConfig;
    this.k8s = opts.k8s;
    this.onTerminated = opts.onTerminated;
    this.connector = new Connector(this.sandboxId, this.namespace, this.connectionConfig, this.k8s);
    this.commandsApi = new Commands(this.connector);
    this.filesApi = new Files(this.connector);
  }

  private readonly k8s: KubeHelper;

  /** True until the connection is closed or the sandbox terminated. */
  get isActive(): boolean {
    return this.connector !== undefined;
  }

  /** Run commands; throws once the sandbox handle is closed. */
  get commands(): Commands {
    if (this.commandsApi === undefined) throw new SandboxError(`Sandbox ${this.namespace}/${this.sandboxId} is closed`);
    return this.commandsApi;
  }

  /** Move files; throws once the sandbox handle is closed. */
  get files(): Files {
    if (this.filesApi === undefined) throw new SandboxError(`Sandbox ${this.namespace}/${this.sandboxId} is closed`);
    return this.filesApi;
  }

  /** The Pod's name: the pod-name annotation, else the Sandbox name. */
  async getPodName(): Promise<string> {
    const sb = await this.k8s.getSandbox(this.sandboxId, this.namespace);
    return sb?.metadata?.annotations?.[POD_NAME_ANNOTATION] ?? this.sandboxId;
  }

  /** A fresh read of the Pod IP from the Sandbox status. */
  async getPodIp(): Promise<string | undefined> {
    const sb = await this.k8s.getSandbox(this.sandboxId, this.namespace);
    return selectPodIp(sb?.status?.["podIPs"]);
  }

  async status(): Promise<SandboxStatus> {
    return sandboxStatus(await this.k8s.getSandbox(this.sandboxId, this.namespace), this.namespace, this.sandboxId);
  }

  /** Close the connection (tunnel) but keep the sandbox running. */
  closeConnection(): void {
    this.connector?.close();
    this.connector = undefined;
    this.commandsApi = undefined;
    this.filesApi = undefined;
  }

  /**
   * Close the connection and delete the SandboxClaim (and with it the
   * sandbox). Idempotent: a claim already gone counts as success; if the
   * delete fails the claim name is kept so terminate() can be retried.
   * An attached bare Sandbox has no claim: terminate only closes.
   */
  async terminate(): Promise<void> {
    this.closeConnection();
    if (this.claimName === undefined) return;
    await this.k8s.deleteClaim(this.claimName, this.namespace);
    this.claimName = undefined;
    this.onTerminated?.(this);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.terminate();
  }
}
