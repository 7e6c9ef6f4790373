// The integration stack of `go run ./hack/devstack` (real kube-apiserver and
// etcd, the controllers, sandbox-router, one sandboxd per sandbox Pod), as
// the Python suite uses it. Started once per test file; stopped by closing
// its stdin. AGENT_SANDBOX_DEVSTACK_INFO names the ready line of a stack that
// is already running instead.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

export interface Devstack {
  kubeconfig: string;
  router_url: string;
  namespace: string;
  warmpool: string;
  stop: () => Promise<void>;
}

export const repoRoot = fileURLToPath(new URL("../../../../../", import.meta.url));

export async function startDevstack(extraArgs: string[] = []): Promise<Devstack> {
  const info = process.env["AGENT_SANDBOX_DEVSTACK_INFO"];
  if (info) {
    const line = readFileSync(info, "utf8").trim().split("\n")[0] ?? "";
    return { ...(JSON.parse(line) as Omit<Devstack, "stop">), stop: () => Promise.resolve() };
  }
  const dir = mkdtempSync(join(tmpdir(), "ts-sdk-devstack-"));
  const bin = process.env["AGENT_SANDBOX_DEVSTACK_BIN"] ?? join(dir, "devstack");
  if (!process.env["AGENT_SANDBOX_DEVSTACK_BIN"]) {
    execFileSync("go", ["build", "-o", bin, "./hack/devstack"], { cwd: repoRoot, stdio: "inherit" });
  }
  const proc: ChildProcess = spawn(bin, ["--log-file", join(dir, "devstack.log"), ...extraArgs], {
    cwd: repoRoot,
    stdio: ["pipe", "pipe", "inherit"],
  });
  const ready = await new Promise<Omit<Devstack, "stop">>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`devstack not ready after 600s; log: ${dir}/devstack.log`)),
      600_000,
    );
    const rl = createInterface({ input: proc.stdout as NodeJS.ReadableStream });
    rl.once("line", (line) => {
      clearTimeout(timer);
      resolve(JSON.parse(line) as Omit<Devstack, "stop">);
    });
    proc.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`devstack exited with ${code}; log: ${dir}/devstack.log`));
    });
  });
  return {
    ...ready,
    stop: () =>
      new Promise<void>((resolve) => {
        if (proc.exitCode !== null) return resolve();
        proc.once("exit", () => resolve());
        proc.stdin?.end();
      }),
  };
}
