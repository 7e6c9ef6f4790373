// The seed flow in TypeScript's runtime: claim a sandbox from the warm pool,
// write a Python file, run it, print its output, terminate.
//   node hello.mjs                       (local tunnel to the router, KUBECONFIG)
//   ROUTER_URL=http://127.0.0.1:8080 node hello.mjs   (direct to a router)
import { SandboxClient } from "@agent-sandbox/sdk";

const connection = process.env.ROUTER_URL ? { kind: "direct", apiUrl: process.env.ROUTER_URL } : { kind: "localTunnel" };
const client = new SandboxClient({ connection });
const sandbox = await client.createSandbox({
  warmpool: process.env.WARMPOOL ?? "python-sandbox-pool",
  namespace: process.env.NAMESPACE ?? "default",
});
try {
  await sandbox.files.write("hello.py", 'print("Hello, World! Greetings from inside the sandbox.")\n');
  const result = await sandbox.commands.run("python3 hello.py");
  process.stdout.write(result.stdout);
} finally {
  await sandbox.terminate();
}
