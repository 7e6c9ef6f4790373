"""Late binding through the Python SDK (run by TestLateBindingPythonSDKOnGVisor).

Claims a sandbox from WARMPOOL with env, runs printenv for each variable and
prints one JSON line: the claim, the sandbox it got, and what printenv said.
"""

import json
import os

from k8s_agent_sandbox import SandboxClient, SandboxDirectConnectionConfig

ns, pool = os.environ["NAMESPACE"], os.environ["WARMPOOL"]
env = json.loads(os.environ["CLAIM_ENV"])
client = SandboxClient(connection_config=SandboxDirectConnectionConfig(api_url=os.environ["ROUTER_URL"]))
sandbox = client.create_sandbox(pool, namespace=ns, env=env)
seen = {}
for name in env:
    result = sandbox.commands.run(f"printenv {name}")
    seen[name] = result.stdout
print(json.dumps({"claim": sandbox.claim_name, "sandbox": sandbox.sandbox_id, "printenv": seen}))
