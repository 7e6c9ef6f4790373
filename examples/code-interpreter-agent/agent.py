"""A code-interpreter agent that runs the code its model writes in a sandbox.

The loop is the usual one: the model sees the task and every earlier tool
result, and either writes Python (which the sandbox tool saves to a file in
the sandbox, runs, and reports stdout, stderr and the exit code back) or
gives its final answer. The sandbox is claimed from a warm pool with the
agent-sandbox Python SDK (``k8s_agent_sandbox``) and deleted at the end.

No LLM is needed to run it: ``ScriptedModel`` replays a fixed list of model
turns, including a mistake the agent has to recover from. To use a real
model, implement ``Model`` (one method) or pass a chat-completion function to
``CompletionModel``; see README.md.

    python3 agent.py [--warmpool python-sandbox-pool] [--namespace default] [--router-url URL]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, Union

# --- what the model produces and what the tool returns ----------------------


@dataclass(frozen=True)
class RunCode:
    """A model turn that asks the tool to run ``code`` (Python 3)."""

    code: str
    thought: str = ""


@dataclass(frozen=True)
class FinalAnswer:
    """A model turn that ends the loop."""

    text: str


Turn = Union[RunCode, FinalAnswer]


@dataclass(frozen=True)
class ToolResult:
    """What running one piece of code in the sandbox gave."""

    filename: str
    stdout: str
    stderr: str
    exit_code: int

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass
class Step:
    """One model turn and, for code, the tool's result."""

    turn: Turn
    result: ToolResult | None = None


@dataclass
class Transcript:
    """The task, the steps so far and (once given) the answer."""

    task: str
    steps: list[Step] = field(default_factory=list)
    answer: str | None = None


# --- the hook for a real model -----------------------------------------------


class Model(Protocol):
    """Decides the next turn from the transcript so far. Plug an LLM in here."""

    def next_turn(self, transcript: Transcript) -> Turn: ...


class ScriptedModel:
    """Replays ``turns`` in order: a stand-in for an LLM in demos and tests.

    A turn may be a callable that receives the transcript, so a scripted final
    answer can quote what the sandbox printed.
    """

    def __init__(self, turns: Sequence[Turn | Callable[[Transcript], Turn]]) -> None:
        self._turns = list(turns)

    def next_turn(self, transcript: Transcript) -> Turn:
        if not self._turns:
            return FinalAnswer("I have nothing more to try.")
        turn = self._turns.pop(0)
        return turn(transcript) if callable(turn) else turn


SYSTEM_PROMPT = """You solve tasks by writing Python 3 programs that run in an isolated sandbox.
Reply with exactly one fenced ```python block to run code; you will see its stdout, stderr
and exit code, and files you write stay there for later turns. When you know the answer,
reply with the answer and no code block."""

_CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def parse_reply(reply: str) -> Turn:
    """A chat reply with a fenced code block runs that code; anything else is the answer."""
    match = _CODE_BLOCK.search(reply)
    if match is None:
        return FinalAnswer(reply.strip())
    thought = reply[: match.start()].strip()
    return RunCode(code=match.group(1), thought=thought)


def chat_messages(transcript: Transcript) -> list[dict[str, str]]:
    """The transcript as OpenAI-style chat messages (system, user, assistant, ...)."""
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": transcript.task},
    ]
    for step in transcript.steps:
        if isinstance(step.turn, RunCode):
            text = (step.turn.thought + "\n\n" if step.turn.thought else "") + f"```python\n{step.turn.code}```"
            messages.append({"role": "assistant", "content": text})
        if step.result is not None:
            r = step.result
            messages.append(
                {
                    "role": "user",
                    "content": f"exit code: {r.exit_code}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}",
                }
            )
    return messages


class CompletionModel:
    """A ``Model`` backed by any chat-completion function.

    ``complete`` takes OpenAI-style messages and returns the assistant's text,
    for example::

        from openai import OpenAI
        llm = OpenAI()
        model = CompletionModel(lambda msgs: llm.chat.completions.create(
            model="gpt-4o-mini", messages=msgs).choices[0].message.content)
    """

    def __init__(self, complete: Callable[[list[dict[str, str]]], str]) -> None:
        self.complete = complete

    def next_turn(self, transcript: Transcript) -> Turn:
        return parse_reply(self.complete(chat_messages(transcript)))


# --- the sandbox tool ----------------------------------------------------------


class CodeTool(Protocol):
    """Runs Python code somewhere and reports what happened."""

    def run_python(self, code: str) -> ToolResult: ...


class SandboxCodeTool:
    """Writes each piece of code to ``step_<n>.py`` in the sandbox and runs it.

    ``sandbox`` is a ``k8s_agent_sandbox.Sandbox`` (anything with
    ``files.write`` and ``commands.run``).
    """

    def __init__(self, sandbox, timeout: float = 60) -> None:
        self.sandbox = sandbox
        self.timeout = timeout
        self._count = 0

    def run_python(self, code: str) -> ToolResult:
        self._count += 1
        filename = f"step_{self._count}.py"
        self.sandbox.files.write(filename, code)
        result = self.sandbox.commands.run(f"python3 {filename}", timeout=self.timeout)
        return ToolResult(filename, result.stdout, result.stderr, result.exit_code)


# --- the loop --------------------------------------------------------------------


def run_agent(
    task: str,
    model: Model,
    tool: CodeTool,
    max_steps: int = 8,
    log: Callable[[str], None] = print,
) -> Transcript:
    """Alternate model turns and tool calls until a final answer or ``max_steps``."""
    transcript = Transcript(task)
    log(f"task: {task}")
    for n in range(1, max_steps + 1):
        turn = model.next_turn(transcript)
        if isinstance(turn, FinalAnswer):
            transcript.steps.append(Step(turn))
            transcript.answer = turn.text
            log(f"answer: {turn.text}")
            return transcript
        if turn.thought:
            log(f"step {n}: {turn.thought}")
        result = tool.run_python(turn.code)
        transcript.steps.append(Step(turn, result))
        log(f"step {n}: ran {result.filename}, exit code {result.exit_code}")
        for name, text in (("stdout", result.stdout), ("stderr", result.stderr)):
            for line in text.rstrip("\n").splitlines():
                log(f"  {name}| {line}")
    log(f"no answer after {max_steps} steps")
    return transcript


# --- the demo ----------------------------------------------------------------------

TASK = "What is the sum of the squares of the primes below 100, and which is the largest of them?"

_PRIMES = """import json

primes = [n for n in range(2, 100) if all(n % d for d in range(2, int(n ** 0.5) + 1))]
with open("primes.json", "w") as f:
    json.dump(primes, f)
print(f"{len(primes)} primes below 100; sum of squares = {sum(p * p for p in primes)}")
"""

# A plausible mistake: the file of the previous step has another name.
_WRONG_FILE = """with open("primes.txt") as f:
    print(max(int(line) for line in f))
"""

_RIGHT_FILE = """import json

with open("primes.json") as f:
    primes = json.load(f)
print(f"largest prime below 100 = {max(primes)}")
"""


def _answer(transcript: Transcript) -> FinalAnswer:
    outputs = [s.result.stdout.strip() for s in transcript.steps if s.result and s.result.ok]
    return FinalAnswer("; ".join(outputs))


def demo_model() -> ScriptedModel:
    """The scripted turns the demo replays: compute, make a mistake, recover, answer."""
    return ScriptedModel(
        [
            RunCode(_PRIMES, "Compute the primes by trial division and keep them in a file."),
            RunCode(_WRONG_FILE, "Read the primes back to find the largest."),
            RunCode(_RIGHT_FILE, "The file is primes.json, not primes.txt; read that one."),
            _answer,
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmpool", default="python-sandbox-pool", help="SandboxWarmPool to claim from")
    parser.add_argument("--namespace", default="default", help="namespace of the warm pool")
    parser.add_argument(
        "--router-url",
        help="talk to the sandbox router at this URL instead of a kubectl port-forward to sandbox-router-svc",
    )
    args = parser.parse_args(argv)

    # Imported here so the loop above can be used (and unit tested) without the SDK.
    from k8s_agent_sandbox import SandboxClient, SandboxDirectConnectionConfig

    config = SandboxDirectConnectionConfig(api_url=args.router_url) if args.router_url else None
    client = SandboxClient(config)
    sandbox = client.create_sandbox(warmpool=args.warmpool, namespace=args.namespace)
    claim, name = sandbox.claim_name, sandbox.sandbox_id
    print(f"sandbox: {args.namespace}/{name} (claim {claim})")
    try:
        transcript = run_agent(TASK, demo_model(), SandboxCodeTool(sandbox))
    finally:
        sandbox.terminate()
        print(f"terminated: claim {claim} deleted")
    return 0 if transcript.answer else 1


if __name__ == "__main__":
    sys.exit(main())
