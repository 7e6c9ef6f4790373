// A code-interpreter tool for an agent framework, without MCP and without a
// network model: a scripted "model" asks for Python to be run, the tool runs
// it in a fresh sandbox and hands stdout/stderr/exit code back. Swap
// ScriptedModel for a real LLM client; the tool contract stays the same.
import { SandboxClient } from "@agent-sandbox/sdk";

/** The tool an agent framework registers: JSON in, JSON out. */
export function pythonTool(sandbox) {
  return {
    name: "run_python",
    description: "Run a Python 3 program in an isolated sandbox and return its output.",
    parameters: { type: "object", properties: { code: { type: "string" } }, required: ["code"] },
    async call({ code }) {
      await sandbox.files.write("main.py", code);
      const r = await sandbox.commands.run("python3 main.py", { timeout: 60 });
      return { stdout: r.stdout, stderr: r.stderr, exit_code: r.exitCode };
    },
  };
}

/** A model that answers from a script: one tool call, then a final answer built from the tool result. */
export class ScriptedModel {
  constructor(task) {
    this.task = task;
    this.step = 0;
  }
  next(toolResult) {
    this.step++;
    if (this.step === 1) return { tool: "run_python", args: { code: "print(sum(i * i for i in range(1, 11)))\n" } };
    return { answer: `The sum of the first ten squares is ${toolResult.stdout.trim()}.` };
  }
}

export async function runAgent(client, { warmpool, namespace, task }) {
  // Plain JavaScript on Node 20 has no `await using`; TypeScript (or Node
  // >= 24) can write `await using sandbox = ...` instead of this finally.
  const sandbox = await client.createSandbox({ warmpool, namespace });
  try {
    const tool = pythonTool(sandbox);
    const model = new ScriptedModel(task);
    let result;
    for (;;) {
      const move = model.next(result);
      if (move.answer !== undefined) return move.answer;
      result = await tool.call(move.args);
    }
  } finally {
    await sandbox.terminate();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const connection = process.env.ROUTER_URL ? { kind: "direct", apiUrl: process.env.ROUTER_URL } : { kind: "localTunnel" };
  const client = new SandboxClient({ connection });
  const answer = await runAgent(client, {
    warmpool: process.env.WARMPOOL ?? "python-sandbox-pool",
    namespace: process.env.NAMESPACE ?? "default",
    task: "What is the sum of the first ten squares?",
  });
  console.log(answer);
}
