"""Claim a sandbox from the warm pool, write a script into it, run it, and clean up.

Prerequisites: agent-sandbox with its extensions installed, the router Service
`sandbox-router-svc` in namespace `agent-sandbox-system`, and the warm pool of
examples/python-runtime (`python-sandbox-pool` in `default`); `kubectl` on PATH
and KUBECONFIG pointing at the cluster. Install the SDK with:

    pip install ./clients/python
"""

from k8s_agent_sandbox import SandboxClient

client = SandboxClient()
sandbox = client.create_sandbox(warmpool="python-sandbox-pool", namespace="default")
try:
    sandbox.files.write("hello.py", 'print("Hello, World! Greetings from inside the sandbox.")\n')
    result = sandbox.commands.run("python3 hello.py")
    print(result.stdout)
finally:
    sandbox.terminate()
