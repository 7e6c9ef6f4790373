import assert from "node:assert/strict";
import { test } from "node:test";

import { buildClaimManifest } from "../src/client.js";
import { checkClaim } from "../src/k8s.js";
import { SandboxClaimFailedError, SandboxTemplateNotFoundError, SandboxWarmPoolNotFoundError } from "../src/errors.js";
import {
  encodePath,
  generateClaimName,
  sanitizePath,
  selectPodIp,
  shutdownTimeAfter,
  timeoutHeaderValue,
  validateGatewayAddress,
  validateLabels,
  validateNamespace,
  validateShutdownAfterSeconds,
} from "../src/validate.js";

test("encodePath encodes every byte outside A-Za-z0-9-_~, dots and slashes included (as Python quote + %2E)", () => {
  assert.equal(encodePath("a/b c.txt"), "a%2Fb%20c%2Etxt");
  assert.equal(encodePath(".."), "%2E%2E");
  assert.equal(encodePath("x!'()*~-_"), "x%21%27%28%29%2A~-_");
  assert.equal(encodePath("é"), "%C3%A9");
});

test("sanitizePath normalises and refuses what the Python SDK refuses", () => {
  assert.equal(sanitizePath("/dir//./file.txt"), "dir/file.txt");
  assert.equal(sanitizePath("hello.py"), "hello.py");
  for (const bad of ["", "  ", ".", "../etc/passwd", "a/../../b", "a\u0000b", "a\nb", "/", "//"]) {
    assert.throws(() => sanitizePath(bad), TypeError, `path ${JSON.stringify(bad)}`);
  }
});

test("labels follow Kubernetes syntax", () => {
  assert.deepEqual(validateLabels({ "example.com/team": "a-b_c.d", plain: "" }), {
    "example.com/team": "a-b_c.d",
    plain: "",
  });
  const bads: Record<string, string>[] = [
    { "": "x" },
    { "-bad": "x" },
    { "UPPER_/x": "y" },
    { ok: "-bad-" },
    { ok: "x".repeat(64) },
  ];
  for (const bad of bads) {
    assert.throws(() => validateLabels(bad), TypeError, JSON.stringify(bad));
  }
});

test("namespace and shutdownAfterSeconds validation", () => {
  assert.equal(validateNamespace("team-a"), "team-a");
  for (const bad of ["Team", "a/b", "", "x".repeat(64), "ns; rm -rf /"]) assert.throws(() => validateNamespace(bad));
  assert.equal(validateShutdownAfterSeconds(60), 60);
  assert.equal(validateShutdownAfterSeconds(undefined), undefined);
  for (const bad of [0, -1, 1.5, "60", true]) assert.throws(() => validateShutdownAfterSeconds(bad));
});

test("claim names, shutdown times and timeout header values", () => {
  assert.match(generateClaimName(), /^sandbox-claim-[0-9a-f]{8}$/);
  assert.equal(shutdownTimeAfter(90, new Date("2026-01-02T03:04:05.678Z")), "2026-01-02T03:05:35Z");
  assert.equal(timeoutHeaderValue(60), "60");
  assert.equal(timeoutHeaderValue(2.5), "2.5");
  for (const none of [0, -1, Infinity, Number.NaN, undefined]) assert.equal(timeoutHeaderValue(none), undefined);
});

test("pod IP selection prefers IPv4, unwraps mapped addresses, skips junk", () => {
  assert.equal(selectPodIp([{ ip: "fd00::1" }, { ip: "10.0.0.7" }]), "10.0.0.7");
  assert.equal(selectPodIp([{ ip: "::ffff:10.1.2.3" }]), "10.1.2.3");
  assert.equal(selectPodIp([{ ip: "nope" }, { ip: "fd00::2" }]), "fd00::2");
  assert.equal(selectPodIp("10.0.0.1"), undefined);
});

test("gateway addresses: IPs and hostnames pass, disguised IPs and URL metacharacters do not", () => {
  assert.equal(validateGatewayAddress("10.0.0.1"), "10.0.0.1");
  assert.equal(validateGatewayAddress("fd00::1"), "[fd00::1]");
  assert.equal(validateGatewayAddress("gw.example.com"), "gw.example.com");
  for (const bad of ["2130706433", "0x7f.0x1", "evil.com/path", "a@b", "", "-x.com", 5]) {
    assert.equal(validateGatewayAddress(bad), undefined, String(bad));
  }
});

test("the claim manifest matches the Python SDK's shape, with the TypeScript created-by value", () => {
  const m = buildClaimManifest("sandbox-claim-0123abcd", {
    warmpool: "python-sandbox-pool",
    labels: { team: "a", "agents.x-k8s.io/created-by": "spoofed" },
    shutdownAfterSeconds: 300,
    env: { FOO: "bar" },
    podLabels: { app: "x" },
    podAnnotations: { "example.com/a": "b" },
  });
  assert.equal(m.apiVersion, "extensions.agents.x-k8s.io/v1beta1");
  assert.equal(m.kind, "SandboxClaim");
  assert.equal(m.metadata?.labels?.["agents.x-k8s.io/created-by"], "typescript-client");
  assert.equal(m.metadata?.labels?.["team"], "a");
  assert.match(
    m.metadata?.annotations?.["agents.x-k8s.io/client-first-requested-at"] ?? "",
    /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$/,
  );
  assert.deepEqual(m.spec?.["warmPoolRef"], { name: "python-sandbox-pool" });
  assert.deepEqual(m.spec?.["env"], [{ name: "FOO", value: "bar" }]);
  assert.deepEqual(m.spec?.["additionalPodMetadata"], { labels: { app: "x" }, annotations: { "example.com/a": "b" } });
  const lifecycle = m.spec?.["lifecycle"] as { shutdownTime: string; shutdownPolicy: string };
  assert.equal(lifecycle.shutdownPolicy, "Delete");
  assert.match(lifecycle.shutdownTime, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
  const bare = buildClaimManifest("c", { warmpool: "p" });
  assert.deepEqual(Object.keys(bare.spec ?? {}), ["warmPoolRef"]);
  assert.throws(() => buildClaimManifest("c", { warmpool: "p", env: { "1BAD": "x" } }), TypeError);
});

test("claim readiness: waits, succeeds, and fails fast on terminal reasons", () => {
  const claim = (conds: object[], sandbox?: string) => ({
    metadata: { name: "c", namespace: "ns" },
    spec: { warmPoolRef: { name: "p" } },
    status: { conditions: conds, ...(sandbox ? { sandbox: { name: sandbox } } : {}) },
  });
  assert.equal(checkClaim(claim([])), undefined);
  assert.equal(checkClaim(claim([{ type: "Ready", status: "True" }])), undefined, "Ready without a sandbox name");
  assert.equal(checkClaim(claim([{ type: "Ready", status: "False", reason: "Pending" }], "sb")), undefined);
  assert.equal(checkClaim(claim([{ type: "Ready", status: "True" }], "sb")), "sb");
  assert.throws(
    () => checkClaim(claim([{ type: "Ready", status: "False", reason: "WarmPoolNotFound" }])),
    SandboxWarmPoolNotFoundError,
  );
  assert.throws(
    () => checkClaim(claim([{ type: "Ready", status: "False", reason: "TemplateNotFound" }])),
    SandboxTemplateNotFoundError,
  );
  for (const reason of [
    "InvalidMetadata",
    "EnvVarsInjectionRejected",
    "VolumeClaimTemplatesError",
    "ClaimExpired",
    "SandboxExpired",
  ]) {
    assert.throws(
      () => checkClaim(claim([{ type: "Ready", status: "False", reason }])),
      SandboxClaimFailedError,
      reason,
    );
  }
});
