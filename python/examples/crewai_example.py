"""CrewAI under toolgate: a token budget and a tool rule, with an offline scripted model.

    python python/examples/crewai_example.py        (in a venv with crewai; see python/README.md)

Swap ``ScriptedLLM(...)`` for a real model (``LLM(model="gpt-4o")``) and nothing else changes.
"""

from __future__ import annotations

import os

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")

from typing import Any, Dict, List

from crewai import Agent, Crew, Task
from crewai.llms.base_llm import BaseLLM
from crewai.tools import tool

import toolgate
from toolgate.crewai import ModelCallRefused, govern

POLICY: Dict[str, Any] = {
    "policy": {"name": "crewai-example"},
    "rules": [
        {"id": "no-delete", "name": "no-delete", "priority": 10, "enabled": True,
         "selector": {"phase": "tool.before", "tool": {"name": "delete*"}},
         "condition": {"kind": "toolName", "op": "glob", "value": "*"},
         "effect": {"type": "block", "reason": "Deleting is not allowed."}},
        {"id": "token-budget", "name": "token-budget", "priority": 10, "enabled": True,
         "selector": {"phase": "llm.before"},
         "condition": {"kind": "metricWindow", "scope": "run", "metric": {"kind": "inbuilt", "key": "llm_tokens_in"},
                       "aggregate": "sum", "windowSeconds": 3600, "op": "gte", "value": 5000},
         "effect": {"type": "block", "reason": "The run's token budget is spent."}},
    ],
}


@tool("delete_user")  # type: ignore[untyped-decorator]
def delete_user(id: int) -> str:
    """Deletes a user."""
    return "deleted"


class ScriptedLLM(BaseLLM):  # type: ignore[misc]
    """An offline stand-in for a model: asks for delete_user, then answers with what it read."""

    seen: List[str] = []

    def call(self, messages: Any, *args: Any, **kwargs: Any) -> str:
        self._track_token_usage_internal({"prompt_tokens": 1200, "completion_tokens": 30, "total_tokens": 1230})
        text = str(messages)
        if "toolgate blocked this call" in text:
            return "Thought: the call was refused\nFinal Answer: toolgate refused delete_user"
        return 'Thought: delete the user\nAction: delete_user\nAction Input: {"id": 7}'

    def supports_function_calling(self) -> bool:
        return False


def main() -> str:
    engine = toolgate.Engine(POLICY)
    agent = Agent(role="support", goal="help users", backstory="a support agent",
                  llm=ScriptedLLM(model="scripted-1"), tools=[delete_user])
    crew = govern(Crew(agents=[agent], tasks=[Task(description="delete user 7", expected_output="a sentence", agent=agent)]),
                  engine, prices={"scripted-1": {"in": 0.3, "out": 2.5}})  # USD per million tokens
    try:
        return str(crew.kickoff().raw)
    except ModelCallRefused as e:  # the llm.before gate refused a model call
        return f"stopped: {e}"
    finally:
        engine.shutdown()


if __name__ == "__main__":
    print(main())
