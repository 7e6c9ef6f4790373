// Connection configurations and result shapes. Connection modes match the
// Python SDK: local tunnel (default), gateway, direct and in-cluster.

export interface LocalTunnelConnection {
  kind: "localTunnel";
  /** Namespace of the sandbox-router Service (default agent-sandbox-system). */
  routerNamespace?: string;
  /** Seconds to wait for the tunnel's local port (default 30). */
  portForwardReadyTimeout?: number;
  /** Port of the runtime inside the sandbox the router forwards to (default 8888). */
  serverPort?: number;
}

export interface GatewayConnection {
  kind: "gateway";
  gatewayName: string;
  gatewayNamespace?: string;
  /** Seconds to wait for the Gateway to publish an address (default 180). */
  gatewayReadyTimeout?: number;
  serverPort?: number;
}

export interface DirectConnection {
  kind: "direct";
  /** Base URL of the router (or anything that speaks its headers). */
  apiUrl: string;
  serverPort?: number;
}

export interface InClusterConnection {
  kind: "inCluster";
  serverPort?: number;
}

export type ConnectionConfig = LocalTunnelConnection | GatewayConnection | DirectConnection | InClusterConnection;

export interface ExecutionResult {
  stdout: string;
  stderr: string;
  exitCode: number;
}

export interface FileEntry {
  name: string;
  size: number;
  type: "file" | "directory";
  modified: Date;
  mode?: string;
}

export type SandboxState = "SandboxReady" | "SandboxNotReady" | "SandboxNotFound";

export interface SandboxStatus {
  state: SandboxState;
  message: string;
}

/** Options every network call accepts. */
export interface CallOptions {
  /** Seconds for the whole call (default 60). */
  timeout?: number;
  signal?: AbortSignal;
}
