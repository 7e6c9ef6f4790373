// The TypeScript SDK on the local cluster (run by TestTypeScriptSDKOnGVisor):
// the seed flow through the default local tunnel, a streaming run, then time
// to interactive (claim created → first command output) over COUNT warm
// claims through the router address, paced so the pool is full before each
// claim. Prints one JSON line with the results.
import { SandboxClient } from "@agent-sandbox/sdk";

const namespace = process.env.NAMESPACE;
const warmpool = process.env.WARMPOOL;
const count = Number(process.env.COUNT ?? "50");
const out = {};

// 1. The seed flow, default connection (port-forward to sandbox-router-svc).
{
  const client = new SandboxClient();
  const sandbox = await client.createSandbox({ warmpool: "python-sandbox-pool", namespace: "default" });
  await sandbox.files.write("hello.py", 'print("Hello, World! Greetings from inside the sandbox.")\n');
  out.seed = (await sandbox.commands.run("python3 hello.py")).stdout;
  out.kernel = (await sandbox.commands.run("cat /proc/version")).stdout;
  await sandbox.terminate();
  out.seedClaimGone = !(await client.listSandboxes("default")).includes(sandbox.claimName ?? "");
}

// 2. A streaming run with stdin through the router.
const router = { kind: "direct", apiUrl: process.env.ROUTER_URL };
{
  const client = new SandboxClient({ connection: router });
  const sandbox = await client.createSandbox({ warmpool, namespace });
  const proc = await sandbox.commands.start(["python3", "-u", "-c", "import sys\nfor i in range(3): print(i)\nprint('echo:' + sys.stdin.readline().strip())"]);
  await proc.writeStdin("ping\n");
  const chunks = [];
  for await (const c of proc) chunks.push({ stream: c.stream, t: Date.now(), text: c.data.toString() });
  out.streamed = chunks.filter((c) => c.stream === "stdout").map((c) => c.text).join("");
  out.streamChunks = chunks.length;
  out.streamExit = await proc.exitCode;
  const claimName = sandbox.claimName;
  await sandbox[Symbol.asyncDispose](); // what `await using` calls
  out.disposedClaimGone = typeof claimName === "string" && !(await client.listSandboxes(namespace)).includes(claimName);
}

// 3. Time to interactive over `count` warm claims.
const client = new SandboxClient({ connection: router });
const get = (group, plural, name) => client.k8s.getObject({ group, version: "v1beta1", plural, name, namespace });
async function poolFull() {
  for (let i = 0; i < 600; i++) {
    const p = await get("extensions.agents.x-k8s.io", "sandboxwarmpools", warmpool);
    if ((p?.status?.readyReplicas ?? 0) >= (p?.spec?.replicas ?? 1)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("the pool did not refill within 60 s");
}
const tti = [];
let warm = 0;
for (let i = 0; i < count; i++) {
  await poolFull();
  const t0 = performance.now();
  const sandbox = await client.createSandbox({ warmpool, namespace });
  const r = await sandbox.commands.run("true");
  tti.push(performance.now() - t0);
  if (r.exitCode !== 0) throw new Error(`claim ${i}: exit ${r.exitCode}`);
  const sb = await get("agents.x-k8s.io", "sandboxes", sandbox.sandboxId);
  if ((sb?.metadata?.labels ?? {})["agents.x-k8s.io/launch-type"] === "warm") warm++;
  await sandbox.terminate();
}
tti.sort((a, b) => a - b);
const rank = (q) => tti[Math.min(tti.length - 1, Math.ceil(q * tti.length) - 1)];
out.tti = { count: tti.length, warm, p50: rank(0.5), p90: rank(0.9), p99: rank(0.99), max: tti[tti.length - 1] };
console.log(JSON.stringify(out));
