import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Commands } from "../src/commands.js";
import { Connector, retryPolicy } from "../src/connector.js";
import { SandboxRequestError } from "../src/errors.js";
import { Files } from "../src/files.js";
import { json, sandboxReader, startServer, type Recorded } from "./helpers.js";

before(() => {
  retryPolicy.backoffSeconds = 0.01;
});
after(() => {
  retryPolicy.backoffSeconds = 0.5;
});

const withPodIp = sandboxReader({ status: { podIPs: [{ ip: "10.9.8.7" }] } });

function connectorFor(url: string, k8s = withPodIp): Connector {
  return new Connector("sb-1", "team-a", { kind: "direct", apiUrl: url }, k8s);
}

test("run sends the routing headers and a JSON body, and parses the result", async () => {
  const srv = await startServer((_req, res) => json(res, 200, { stdout: "hi\n", stderr: "", exit_code: 0 }));
  try {
    const result = await new Commands(connectorFor(srv.url)).run("echo hi", { timeout: 5 });
    assert.deepEqual(result, { stdout: "hi\n", stderr: "", exitCode: 0 });
    const req = srv.requests[0] as Recorded;
    assert.equal(req.method, "POST");
    assert.equal(req.url, "/execute");
    assert.equal(req.headers["x-sandbox-id"], "sb-1");
    assert.equal(req.headers["x-sandbox-namespace"], "team-a");
    assert.equal(req.headers["x-sandbox-port"], "8888");
    assert.equal(req.headers["x-sandbox-timeout"], "5");
    assert.equal(req.headers["x-sandbox-pod-ip"], "10.9.8.7");
    assert.equal(req.headers["content-type"], "application/json");
    assert.match(String(req.headers["x-request-id"]), /^[0-9a-f]{16}$/);
    assert.deepEqual(JSON.parse(req.body.toString()), { command: "echo hi" });
  } finally {
    await srv.close();
  }
});

test("5xx is retried and then succeeds; exhaustion surfaces the status", async () => {
  let calls = 0;
  const srv = await startServer((_req, res) => {
    calls++;
    if (calls < 3) json(res, 503, { detail: "warming" });
    else json(res, 200, { stdout: "", stderr: "", exit_code: 3 });
  });
  try {
    const result = await new Commands(connectorFor(srv.url)).run("false");
    assert.equal(result.exitCode, 3);
    assert.equal(calls, 3);
  } finally {
    await srv.close();
  }
  const down = await startServer((_req, res) => json(res, 502, { detail: "no upstream" }));
  try {
    await assert.rejects(new Commands(connectorFor(down.url)).run("true"), (err: unknown) => {
      assert.ok(err instanceof SandboxRequestError);
      assert.equal(err.statusCode, 502);
      assert.match(err.message, /no upstream\..*router could not reach the sandbox pod/);
      return true;
    });
    assert.equal(down.requests.length, retryPolicy.total + 1);
  } finally {
    await down.close();
  }
});

test("redirects are never followed", async () => {
  const srv = await startServer((_req, res) => {
    res.writeHead(307, { Location: "http://169.254.169.254/latest/meta-data" });
    res.end();
  });
  try {
    await assert.rejects(
      new Files(connectorFor(srv.url)).read("a.txt"),
      /redirect \(HTTP 307 to http:\/\/169\.254\.169\.254/,
    );
    assert.equal(srv.requests.length, 1);
  } finally {
    await srv.close();
  }
});

test("4xx maps to SandboxRequestError with the detail and is not retried", async () => {
  const srv = await startServer((_req, res) => json(res, 404, { detail: "File not found" }));
  try {
    await assert.rejects(new Files(connectorFor(srv.url)).read("missing.txt"), (err: unknown) => {
      assert.ok(err instanceof SandboxRequestError);
      assert.equal(err.statusCode, 404);
      assert.match(
        err.message,
        /GET \/download\/missing%2Etxt on sandbox team-a\/sb-1 failed with HTTP 404: File not found/,
      );
      return true;
    });
    assert.equal(srv.requests.length, 1);
  } finally {
    await srv.close();
  }
});

test("connection refused names the address and how to check it", async () => {
  const srv = await startServer(() => undefined);
  const url = srv.url;
  await srv.close();
  await assert.rejects(new Commands(connectorFor(url)).run("true", { timeout: 2 }), (err: unknown) => {
    assert.ok(err instanceof SandboxRequestError);
    assert.equal(err.statusCode, undefined);
    assert.match(
      err.message,
      /could not get a response from http:\/\/127\.0\.0\.1:\d+ .*Check that the sandbox router is running/,
    );
    return true;
  });
});

test("an AbortSignal cancels a call in flight", async () => {
  const srv = await startServer(() => undefined); // never answers
  try {
    const ac = new AbortController();
    const pending = new Commands(connectorFor(srv.url)).run("sleep 100", { signal: ac.signal });
    setImmediate(() => ac.abort(new Error("caller gave up")));
    await assert.rejects(pending, /caller gave up/);
  } finally {
    await srv.close();
  }
});

test("no pod-IP header when the Sandbox cannot be read (403 disables it)", async () => {
  const forbidden = new SandboxRequestError("forbidden", { statusCode: 403 });
  const srv = await startServer((_req, res) => json(res, 200, { exists: true }));
  try {
    const conn = connectorFor(srv.url, sandboxReader(undefined, forbidden));
    assert.equal(await new Files(conn).exists("a"), true);
    assert.equal(srv.requests[0]?.headers["x-sandbox-pod-ip"], undefined);
  } finally {
    await srv.close();
  }
});

test("files: multipart upload with the sanitised name, download, list, exists, delete on sandboxd's port", async () => {
  const srv = await startServer((req, res) => {
    if (req.url === "/upload") return json(res, 200, { message: "ok" });
    if (req.url.startsWith("/download/")) {
      res.writeHead(200, { "Content-Type": "application/octet-stream" });
      return res.end(Buffer.from([0, 1, 2, 255]));
    }
    if (req.url.startsWith("/list/")) {
      return json(res, 200, [
        { name: "a.txt", size: 3, type: "file", mod_time: 1700000000.5 },
        { name: "d", size: 0, type: "directory", mod_time: 1700000000 },
        { name: "link", size: 0, type: "symlink", mod_time: 1 },
      ]);
    }
    if (req.url.startsWith("/exists/")) return json(res, 200, { exists: false });
    if (req.method === "DELETE") return json(res, 200, {});
    return json(res, 500, { detail: "unexpected" });
  });
  try {
    const files = new Files(connectorFor(srv.url));
    await files.write("/work//dir/hello.py", "print('hi')");
    const up = srv.requests[0] as Recorded;
    assert.match(String(up.headers["content-type"]), /^multipart\/form-data; boundary=/);
    assert.match(up.body.toString(), /name="file"; filename="work\/dir\/hello\.py"/);
    assert.match(up.body.toString(), /print\('hi'\)/);
    assert.deepEqual([...(await files.read("bin.dat"))], [0, 1, 2, 255]);
    const entries = await files.list(".");
    assert.deepEqual(
      entries.map((e) => [e.name, e.type]),
      [
        ["a.txt", "file"],
        ["d", "directory"],
      ],
    );
    assert.equal(entries[0]?.modified.getTime(), 1700000000500);
    assert.equal(srv.requests[2]?.url, "/list/%2E");
    assert.equal(await files.exists("nope"), false);
    await files.delete("old dir", { recursive: true });
    const del = srv.requests[4] as Recorded;
    assert.equal(del.method, "DELETE");
    assert.equal(del.url, "/v1/files/old%20dir?recursive=true");
    assert.equal(del.headers["x-sandbox-port"], "8080");
    await assert.rejects(files.write("../escape", "x"), TypeError);
  } finally {
    await srv.close();
  }
});

test("malformed runtime answers are errors, not silent defaults", async () => {
  const srv = await startServer((req, res) => {
    if (req.url === "/execute") return json(res, 200, { stdout: 5 });
    res.writeHead(200);
    res.end("<html>not json</html>");
  });
  try {
    const conn = connectorFor(srv.url);
    await assert.rejects(new Commands(conn).run("x"), /malformed execution result/);
    await assert.rejects(new Files(conn).exists("x"), /non-JSON exists answer/);
  } finally {
    await srv.close();
  }
});
