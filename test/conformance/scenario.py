"""The cross-SDK conformance scenario, Python side (see conformance_test.go).

Reads ROUTER_URL, KUBECONFIG, NAMESPACE and WARMPOOL; prints one JSON line:
the list of step results in the shared vocabulary.
"""

import json
import os

from k8s_agent_sandbox import SandboxClient
from k8s_agent_sandbox.exceptions import SandboxNotFoundError, SandboxRequestError
from k8s_agent_sandbox.models import SandboxDirectConnectionConfig


def error_kind(exc: BaseException) -> str:
    if isinstance(exc, ValueError):
        return "invalid_argument"
    if isinstance(exc, SandboxNotFoundError):
        return "not_found"
    if isinstance(exc, SandboxRequestError) and exc.status_code == 404:
        return "not_found"
    return "error:" + type(exc).__name__


def main() -> None:
    ns, pool = os.environ["NAMESPACE"], os.environ["WARMPOOL"]
    client = SandboxClient(connection_config=SandboxDirectConnectionConfig(api_url=os.environ["ROUTER_URL"]))
    steps: list[dict] = []

    def step(name: str, fn):
        try:
            steps.append({"step": name, "result": fn()})
        except Exception as exc:  # noqa: BLE001 - the scenario records every failure
            steps.append({"step": name, "error": error_kind(exc)})

    sandbox = client.create_sandbox(pool, namespace=ns)
    claim = sandbox.claim_name
    run = lambda cmd: (lambda r: {"stdout": r.stdout, "stderr": r.stderr, "exit_code": r.exit_code})(sandbox.commands.run(cmd))
    step("run echo", lambda: run("echo hello"))
    step("run failing", lambda: run("sh -c 'echo err >&2; exit 3'"))
    step("write", lambda: sandbox.files.write("conformance.txt", "line1\nline2\n") or "ok")
    step("read", lambda: sandbox.files.read("conformance.txt").decode())
    step("list", lambda: [{"name": e.name, "type": e.type, "size": e.size} for e in sandbox.files.list(".") if e.name == "conformance.txt"])
    step("exists", lambda: sandbox.files.exists("conformance.txt"))
    step("exists missing", lambda: sandbox.files.exists("missing.txt"))
    step("read missing", lambda: sandbox.files.read("missing.txt").decode())
    step("write escaping", lambda: sandbox.files.write("../escape.txt", "x") or "ok")
    step("status", lambda: sandbox.status()[0])
    step("terminate", lambda: sandbox.terminate() or "ok")
    step("terminate again", lambda: sandbox.terminate() or "ok")
    step("get terminated", lambda: client.get_sandbox(claim, namespace=ns).sandbox_id)
    print(json.dumps(steps))


if __name__ == "__main__":
    main()
