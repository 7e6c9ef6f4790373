"""Time to interactive of the Python SDK (run by TestPythonSDKTimeToInteractiveOnGVisor).

COUNT warm claims one after another through the router address, each paced
so the pool is full first: claim created -> first command output. Prints one
JSON line with the warm count and the percentiles (ms).
"""

import json
import math
import os
import time

from kubernetes import client as k8s, config as k8s_config

from k8s_agent_sandbox import SandboxClient, SandboxDirectConnectionConfig

ns, pool, count = os.environ["NAMESPACE"], os.environ["WARMPOOL"], int(os.environ.get("COUNT", "50"))
k8s_config.load_kube_config()
custom = k8s.CustomObjectsApi()


def pool_full() -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        p = custom.get_namespaced_custom_object("extensions.agents.x-k8s.io", "v1beta1", ns, "sandboxwarmpools", pool)
        if (p.get("status") or {}).get("readyReplicas", 0) >= (p.get("spec") or {}).get("replicas", 1):
            return
        time.sleep(0.1)
    raise TimeoutError("the pool did not refill within 60 s")


client = SandboxClient(connection_config=SandboxDirectConnectionConfig(api_url=os.environ["ROUTER_URL"]))
tti: list[float] = []
warm = 0
for i in range(count):
    pool_full()
    t0 = time.perf_counter()
    sandbox = client.create_sandbox(pool, namespace=ns)
    result = sandbox.commands.run("true")
    tti.append((time.perf_counter() - t0) * 1000)
    if result.exit_code != 0:
        raise RuntimeError(f"claim {i}: exit {result.exit_code}")
    sb = custom.get_namespaced_custom_object("agents.x-k8s.io", "v1beta1", ns, "sandboxes", sandbox.sandbox_id)
    if (sb.get("metadata", {}).get("labels") or {}).get("agents.x-k8s.io/launch-type") == "warm":
        warm += 1
    sandbox.terminate()

tti.sort()


def rank(q: float) -> float:
    return tti[min(len(tti) - 1, math.ceil(q * len(tti)) - 1)]


print(json.dumps({"count": len(tti), "warm": warm, "p50": rank(0.5), "p90": rank(0.9), "p99": rank(0.99), "max": tti[-1]}))
