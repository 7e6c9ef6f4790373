// The cross-SDK conformance scenario, TypeScript side (see conformance_test.go).
// Reads ROUTER_URL, KUBECONFIG, NAMESPACE and WARMPOOL; prints one JSON line.
import {
  SandboxClient,
  SandboxNotFoundError,
  SandboxRequestError,
} from "../../clients/typescript/dist/index.js";

function errorKind(err) {
  if (err instanceof TypeError) return "invalid_argument";
  if (err instanceof SandboxNotFoundError) return "not_found";
  if (err instanceof SandboxRequestError && err.statusCode === 404) return "not_found";
  return `error:${err?.name ?? typeof err}`;
}

const ns = process.env.NAMESPACE;
const pool = process.env.WARMPOOL;
// KUBECONFIG names the stack's kubeconfig; the SDK loads it itself.
const client = new SandboxClient({ connection: { kind: "direct", apiUrl: process.env.ROUTER_URL } });
const steps = [];
async function step(name, fn) {
  try {
    steps.push({ step: name, result: await fn() });
  } catch (err) {
    steps.push({ step: name, error: errorKind(err) });
  }
}

const sandbox = await client.createSandbox({ warmpool: pool, namespace: ns });
const claim = sandbox.claimName;
const run = async (cmd) => {
  const r = await sandbox.commands.run(cmd);
  return { stdout: r.stdout, stderr: r.stderr, exit_code: r.exitCode };
};
await step("run echo", () => run("echo hello"));
await step("run failing", () => run("sh -c 'echo err >&2; exit 3'"));
await step("write", async () => (await sandbox.files.write("conformance.txt", "line1\nline2\n"), "ok"));
await step("read", async () => (await sandbox.files.read("conformance.txt")).toString());
await step("list", async () =>
  (await sandbox.files.list(".")).filter((e) => e.name === "conformance.txt").map((e) => ({ name: e.name, type: e.type, size: e.size })),
);
await step("exists", () => sandbox.files.exists("conformance.txt"));
await step("exists missing", () => sandbox.files.exists("missing.txt"));
await step("read missing", async () => (await sandbox.files.read("missing.txt")).toString());
await step("write escaping", async () => (await sandbox.files.write("../escape.txt", "x"), "ok"));
await step("status", async () => (await sandbox.status()).state);
await step("terminate", async () => (await sandbox.terminate(), "ok"));
await step("terminate again", async () => (await sandbox.terminate(), "ok"));
await step("get terminated", async () => (await client.getSandbox(claim, ns)).sandboxId);
console.log(JSON.stringify(steps));
