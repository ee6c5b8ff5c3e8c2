"""Google ADK under toolgate: a token budget and a tool rule, with an offline scripted model.

    python python/examples/google_adk_example.py        (needs the google-adk extra)

Swap ``ScriptedModel(...)`` for a real model (``"gemini-2.5-flash"``) and nothing else changes.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncGenerator, Dict, List

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

import toolgate
from toolgate.google_adk import ToolgatePlugin

POLICY: Dict[str, Any] = {
    "policy": {"name": "adk-example"},
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


def delete_user(id: int) -> str:
    """Deletes a user."""
    return "deleted"


class ScriptedModel(BaseLlm):
    """An offline stand-in for a model: asks for delete_user, then reports what it was told."""

    model: str = "scripted-1"

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        said = [p.function_response.response for c in llm_request.contents for p in c.parts or () if p.function_response]
        if said:
            part = types.Part(text=f"the tool said: {said[-1]}")
        else:
            part = types.Part(function_call=types.FunctionCall(name="delete_user", args={"id": 7}, id="c1"))
        usage = types.GenerateContentResponseUsageMetadata(prompt_token_count=1200, candidates_token_count=30)
        yield LlmResponse(content=types.Content(role="model", parts=[part]), usage_metadata=usage, model_version=self.model)


async def main() -> List[str]:
    engine = toolgate.Engine(POLICY)
    agent = LlmAgent(name="support", model=ScriptedModel(), tools=[delete_user])
    prices = {"scripted-1": {"in": 0.3, "out": 2.5}}  # USD per million tokens (or Engine(..., prices=))
    app = App(name="support", root_agent=agent, plugins=[ToolgatePlugin(engine, prices=prices)])
    sessions = InMemorySessionService()
    runner = Runner(app=app, session_service=sessions)
    session = await sessions.create_session(app_name="support", user_id="u1")
    texts: List[str] = []
    async for event in runner.run_async(user_id="u1", session_id=session.id,
                                        new_message=types.Content(role="user", parts=[types.Part(text="delete user 7")])):
        for p in (event.content.parts or []) if event.content else []:
            if p.text:
                texts.append(p.text)
    engine.shutdown()
    return texts


if __name__ == "__main__":
    for text in asyncio.run(main()):
        print(text)
