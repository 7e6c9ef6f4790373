import asyncio
import os

from k8s_agent_sandbox import AsyncSandboxClient, SandboxDirectConnectionConfig


async def main() -> None:
    # The async client connects through the router directly (no local tunnel).
    config = SandboxDirectConnectionConfig(api_url=os.environ["ROUTER_URL"])
    async with AsyncSandboxClient(config) as client:
        sandbox = await client.create_sandbox(warmpool="python-sandbox-pool", namespace="default")
        try:
            await sandbox.files.write("hello.py", 'print("Hello from the async client")\n')
            result = await sandbox.commands.run("python3 hello.py")
            print(result.stdout)
            kernel = await sandbox.commands.run("cat /proc/version")
            print(kernel.stdout)
        finally:
            await sandbox.terminate()


asyncio.run(main())
