// The TypeScript SDK against the integration stack: a real apiserver, the
// controllers, the router and sandboxd. Nothing here is faked.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import * as k8s from "@kubernetes/client-node";

import {
  SandboxClient,
  SandboxNotFoundError,
  SandboxRequestError,
  SandboxWarmPoolNotFoundError,
} from "../../src/index.js";
import { startDevstack, type Devstack } from "./devstack.js";
import { allowPlainHttp } from "../../src/k8s.js";

let stack: Devstack;
let kc: k8s.KubeConfig;

before(async () => {
  stack = await startDevstack();
  kc = new k8s.KubeConfig();
  kc.loadFromFile(stack.kubeconfig);
  kc = allowPlainHttp(kc);
});

after(async () => {
  await stack?.stop();
});

function client(): SandboxClient {
  return new SandboxClient({ kubeConfig: kc, connection: { kind: "direct", apiUrl: stack.router_url } });
}

test("the seed flow: claim from the warm pool, write, run, read, list, exists, delete, terminate", async () => {
  const c = client();
  const sandbox = await c.createSandbox({
    warmpool: stack.warmpool,
    namespace: stack.namespace,
    labels: { suite: "ts" },
  });
  try {
    assert.match(sandbox.claimName ?? "", /^sandbox-claim-[0-9a-f]{8}$/);
    assert.equal((await sandbox.status()).state, "SandboxReady");
    const claims = kc.makeApiClient(k8s.CustomObjectsApi);
    const claim = (await claims.getNamespacedCustomObject({
      group: "extensions.agents.x-k8s.io",
      version: "v1beta1",
      namespace: stack.namespace,
      plural: "sandboxclaims",
      name: sandbox.claimName as string,
    })) as { metadata: { labels: Record<string, string> }; spec: Record<string, unknown> };
    assert.equal(claim.metadata.labels["agents.x-k8s.io/created-by"], "typescript-client");
    assert.deepEqual(claim.spec["warmPoolRef"], { name: stack.warmpool });

    await sandbox.files.write("hello.py", 'print("Hello from TypeScript")\n');
    const run = await sandbox.commands.run("python3 hello.py");
    assert.equal(run.stdout, "Hello from TypeScript\n");
    assert.equal(run.exitCode, 0);
    assert.equal((await sandbox.files.read("hello.py")).toString(), 'print("Hello from TypeScript")\n');
    assert.ok((await sandbox.files.list(".")).some((e) => e.name === "hello.py" && e.type === "file"));
    assert.equal(await sandbox.files.exists("hello.py"), true);
    await sandbox.files.delete("hello.py");
    assert.equal(await sandbox.files.exists("hello.py"), false);
    const failed = await sandbox.commands.run("sh -c 'echo oops >&2; exit 7'");
    assert.deepEqual([failed.stderr, failed.exitCode], ["oops\n", 7]);
    await assert.rejects(
      sandbox.files.read("missing.txt"),
      (e: unknown) => e instanceof SandboxRequestError && e.statusCode === 404,
    );

    assert.ok((await c.listSandboxes(stack.namespace, "suite=ts")).includes(sandbox.claimName as string));
    const again = await c.getSandbox(sandbox.claimName as string, stack.namespace);
    assert.equal(again.sandboxId, sandbox.sandboxId);
  } finally {
    const name = sandbox.claimName as string;
    await sandbox.terminate();
    await sandbox.terminate(); // idempotent
    await assert.rejects(c.getSandbox(name, stack.namespace), SandboxNotFoundError);
  }
});

test("a streaming run through the router: chunks, stdin and the exit code", async () => {
  const c = client();
  await using sandbox = await c.createSandbox({ warmpool: stack.warmpool, namespace: stack.namespace });
  const proc = await sandbox.commands.start("read line; echo got:$line; echo err >&2; exit 3");
  await proc.writeStdin("ping\n");
  const out: string[] = [];
  for await (const chunk of proc) out.push(`${chunk.stream}:${chunk.data.toString()}`);
  assert.ok(out.includes("stdout:got:ping\n"), JSON.stringify(out));
  assert.ok(out.includes("stderr:err\n"), JSON.stringify(out));
  assert.equal(await proc.exitCode, 3);
});

test("attach reaches a Sandbox by name; a missing pool fails fast and leaves no claim behind", async () => {
  const c = client();
  const sandbox = await c.createSandbox({ warmpool: stack.warmpool, namespace: stack.namespace });
  try {
    const attached = await c.attach(sandbox.sandboxId, stack.namespace);
    assert.equal(attached.claimName, undefined);
    assert.equal((await attached.commands.run("echo attached")).stdout, "attached\n");
    await attached.terminate(); // closes only: the claim stays
    assert.equal((await sandbox.status()).state, "SandboxReady");
  } finally {
    await sandbox.terminate();
  }
  const before = await c.listSandboxes(stack.namespace);
  await assert.rejects(
    c.createSandbox({ warmpool: "no-such-pool", namespace: stack.namespace, readyTimeout: 60 }),
    SandboxWarmPoolNotFoundError,
  );
  assert.deepEqual(
    (await c.listSandboxes(stack.namespace)).filter((n) => !before.includes(n)),
    [],
  );
});
