"""Unit tests of the agent loop; no cluster and no SDK needed.

    python3 -m unittest discover -s examples/code-interpreter-agent -v
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import unittest
from types import SimpleNamespace

import agent
from agent import CompletionModel, FinalAnswer, RunCode, SandboxCodeTool, ScriptedModel, ToolResult, run_agent


class LocalTool:
    """Runs code with this interpreter in a temporary directory: a stand-in for the sandbox."""

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir
        self.count = 0

    def run_python(self, code: str) -> ToolResult:
        self.count += 1
        name = f"step_{self.count}.py"
        with open(os.path.join(self.workdir, name), "w") as f:
            f.write(code)
        p = subprocess.run([sys.executable, name], cwd=self.workdir, capture_output=True, text=True, timeout=60)
        return ToolResult(name, p.stdout, p.stderr, p.returncode)


class FakeSandbox:
    """Records what SandboxCodeTool asks of a k8s_agent_sandbox.Sandbox."""

    def __init__(self) -> None:
        self.written: dict[str, str] = {}
        self.commands_run: list[str] = []
        self.files = SimpleNamespace(write=self._write)
        self.commands = SimpleNamespace(run=self._run)

    def _write(self, path: str, content: str) -> None:
        self.written[path] = content

    def _run(self, command: str, timeout: float = 60) -> SimpleNamespace:
        self.commands_run.append(command)
        return SimpleNamespace(stdout="out\n", stderr="", exit_code=0)


class ParseReplyTest(unittest.TestCase):
    def test_code_block_runs(self) -> None:
        turn = agent.parse_reply("Let me compute it.\n```python\nprint(6 * 7)\n```\n")
        self.assertEqual(turn, RunCode(code="print(6 * 7)\n", thought="Let me compute it."))

    def test_bare_fence_is_python(self) -> None:
        self.assertEqual(agent.parse_reply("```\nx = 1\n```"), RunCode(code="x = 1\n"))

    def test_text_is_the_answer(self) -> None:
        self.assertEqual(agent.parse_reply("  It is 42.\n"), FinalAnswer("It is 42."))


class LoopTest(unittest.TestCase):
    def test_demo_computes_recovers_and_answers(self) -> None:
        lines: list[str] = []
        with tempfile.TemporaryDirectory() as d:
            transcript = run_agent(agent.TASK, agent.demo_model(), LocalTool(d), log=lines.append)
        results = [s.result for s in transcript.steps if s.result]
        self.assertEqual([r.exit_code for r in results], [0, 1, 0])
        self.assertIn("sum of squares = 65796", results[0].stdout)
        self.assertIn("FileNotFoundError", results[1].stderr)
        self.assertIn("largest prime below 100 = 97", results[2].stdout)
        self.assertEqual(
            transcript.answer, "25 primes below 100; sum of squares = 65796; largest prime below 100 = 97"
        )
        self.assertTrue(any(line.startswith("  stderr| FileNotFoundError") for line in lines), lines)

    def test_stops_after_max_steps(self) -> None:
        model = ScriptedModel([RunCode("print(1)")] * 5)
        with tempfile.TemporaryDirectory() as d:
            transcript = run_agent("loop", model, LocalTool(d), max_steps=3, log=lambda _: None)
        self.assertIsNone(transcript.answer)
        self.assertEqual(len(transcript.steps), 3)

    def test_completion_model_sees_tool_results(self) -> None:
        seen: list[list[dict[str, str]]] = []
        replies = iter(["```python\nprint('hi')\n```", "The program printed hi."])

        def complete(messages: list[dict[str, str]]) -> str:
            seen.append(messages)
            return next(replies)

        with tempfile.TemporaryDirectory() as d:
            transcript = run_agent("say hi", CompletionModel(complete), LocalTool(d), log=lambda _: None)
        self.assertEqual(transcript.answer, "The program printed hi.")
        self.assertEqual([m["role"] for m in seen[0]], ["system", "user"])
        last = seen[1][-1]
        self.assertEqual(last["role"], "user")
        self.assertIn("exit code: 0", last["content"])
        self.assertIn("stdout:\nhi\n", last["content"])


class SandboxCodeToolTest(unittest.TestCase):
    def test_writes_numbered_files_and_runs_them(self) -> None:
        sandbox = FakeSandbox()
        tool = SandboxCodeTool(sandbox)
        first = tool.run_python("print(1)\n")
        tool.run_python("print(2)\n")
        self.assertEqual(sandbox.written, {"step_1.py": "print(1)\n", "step_2.py": "print(2)\n"})
        self.assertEqual(sandbox.commands_run, ["python3 step_1.py", "python3 step_2.py"])
        self.assertEqual(first, ToolResult("step_1.py", "out\n", "", 0))


if __name__ == "__main__":
    unittest.main()
