"""Every adapter passes ``agent_tags`` to the runs it starts, so a policy's ``agentSelector``
applies to governed agents as it does to ``Engine.start_run(agent_tags=...)``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Dict, List

import pytest

import toolgate

PROD_ONLY: Dict[str, Any] = {
    "policy": {"name": "prod-only", "agentSelector": {"anyOfTags": ["prod"]}},
    "rules": [
        {
            "id": "no-refunds-in-prod",
            "name": "No refunds in prod",
            "selector": {"phase": "tool.before", "tool": {"name": "refund"}},
            "condition": {"kind": "toolName", "op": "glob", "value": "*"},
            "effect": {"type": "block", "reason": "no refunds in prod"},
        }
    ],
}


def effects(runs: List[toolgate.Run]) -> List[str]:
    return [r.before_tool("refund", {"amount": 5}).effect for r in runs]


def test_claude_agent_sdk_hooks_start_runs_with_the_agent_tags() -> None:
    pytest.importorskip("claude_agent_sdk")
    from toolgate.claude_agent_sdk import ToolgateHooks

    engine = toolgate.Engine(PROD_ONLY)
    tagged = ToolgateHooks(engine, "bot", agent_tags=["prod"]).run("s1")
    plain = ToolgateHooks(engine, "bot").run("s1")
    assert effects([tagged, plain]) == ["block", "allow"]


def test_openai_agents_govern_starts_runs_with_the_agent_tags() -> None:
    pytest.importorskip("agents")
    from agents import Agent

    from toolgate.openai_agents import govern

    engine = toolgate.Engine(PROD_ONLY)
    ctx = SimpleNamespace(usage=object())
    tagged = govern(Agent(name="bot"), engine, agent_tags=("prod", "eu")).hooks
    plain = govern(Agent(name="bot"), engine).hooks
    assert effects([tagged.run(ctx), plain.run(ctx)]) == ["block", "allow"]  # type: ignore[union-attr]


def test_pydantic_ai_toolset_starts_runs_with_the_agent_tags() -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai.toolsets import FunctionToolset

    from toolgate.pydantic_ai import ToolgateToolset

    engine = toolgate.Engine(PROD_ONLY)
    ctx: Any = SimpleNamespace(run_id="r1")
    tagged = ToolgateToolset(FunctionToolset([]), engine, "bot", agent_tags=("prod",))
    plain = ToolgateToolset(FunctionToolset([]), engine, "bot")
    assert effects([tagged._run(ctx), plain._run(ctx)]) == ["block", "allow"]


def test_langchain_middleware_blocks_in_a_tagged_agent_only() -> None:
    pytest.importorskip("langchain.agents")
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import tool

    from toolgate.langchain import ToolgateMiddleware

    class FakeToolModel(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kw: Any) -> "FakeToolModel":
            return self

    @tool
    def refund(amount: int) -> str:
        """Refunds an amount."""
        return f"refunded {amount}"

    def statuses(**kw: Any) -> List[str]:
        call = AIMessage(content="", tool_calls=[{"name": "refund", "args": {"amount": 5}, "id": "t1", "type": "tool_call"}])
        model = FakeToolModel(messages=iter([call, AIMessage(content="done")]))
        engine = toolgate.Engine(PROD_ONLY)
        agent = create_agent(model, tools=[refund], middleware=[ToolgateMiddleware(engine, "lc-bot", **kw)])
        result = agent.invoke({"messages": [{"role": "user", "content": "go"}]})
        return [str(m.status) for m in result["messages"] if isinstance(m, ToolMessage)]

    assert statuses(agent_tags=["prod"]) == ["error"]
    assert statuses() == ["success"]
