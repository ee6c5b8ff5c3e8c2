"""What every adapter records for a model call: usage read defensively, prices as the engine
reads them (toolgate/_llm.py)."""

from __future__ import annotations

import pytest

from toolgate._llm import MAX_TOKENS_PER_CALL, LlmGate, parse_prices, usage


def test_prices_are_read_as_the_engine_reads_them() -> None:
    t = parse_prices({"gpt-4o": {"in": 2.5, "out": 10}, "claude-*": {"in": 3, "out": 15}, "claude-opus-*": {"in": 15, "out": 75}})
    assert t is not None
    assert t.get("GPT-4o") == (2.5, 10.0)
    assert t.get("claude-opus-4") == (15.0, 75.0)  # the longest glob wins
    assert t.get("claude-sonnet-4") == (3.0, 15.0)
    assert t.get("gemini") is None
    gate = LlmGate({"m": {"in": 2.0, "out": 8.0}})
    assert gate.cost("m", usage(1000, 50)) == pytest.approx((1000 * 2 + 50 * 8) / 1e6)
    assert gate.cost("other", usage(1000, 50)) is None  # the engine's prices decide


@pytest.mark.parametrize("bad", [{"m": {"in": -1, "out": 1}}, {"m": {"in": float("nan"), "out": 1}},
                                 {"m": {"in": 1}}, {"m": {"in": 1, "out": 1, "cache": 1}}, {"m": {"in": True, "out": 1}},
                                 {"m": {"in": "1", "out": 1}}, {"m": 5}])
def test_bad_prices_are_refused_naming_the_model(bad: object) -> None:
    with pytest.raises(ValueError, match=r"prices\.m"):
        LlmGate(bad)  # type: ignore[arg-type]


def test_usage_counts_are_bounded_and_missing_ones_estimated() -> None:
    assert (usage(10**40, -7).tokens_in, usage(10**40, -7).tokens_out) == (MAX_TOKENS_PER_CALL, 0)
    assert usage(float("inf"), 5).tokens_in == MAX_TOKENS_PER_CALL
    u = usage(None, "lots", [{"role": "user", "content": "x" * 400}], "y" * 40)
    assert u.estimated and u.tokens_in >= 100 and u.tokens_out == 10
    assert usage(float("nan"), True).estimated
    assert usage(0, 0, [{"content": "hello there"}]).tokens_in > 0  # a prompt is never free
    assert usage(None, None).tokens_in == 1  # nothing known: still not free
    assert not usage(12, 3).estimated


# -- hostile histories: what the gate reads ------------------------------------------------------

import toolgate  # noqa: E402
from policies_for_tests import policy, rule  # noqa: E402

NO_CARDS = policy(rule("no-cards", {"kind": "sensitiveData", "target": "llmInput", "detectors": [{"detector": "credit_card"}]},
                       "block", phase="llm.before", reason="Card numbers must not reach the model."), name="no-cards")
CARD = "4111 1111 1111 1111"


def test_content_nested_past_any_depth_limit_is_still_read() -> None:
    run = toolgate.Engine(NO_CARDS).start_run("bot")
    gate = LlmGate()
    for depth in (10, 200, 5000):
        deep: object = {"card": CARD}
        for _ in range(depth):
            deep = [deep]
        d = gate.before(run, "m", [{"role": "tool", "kind": "tool_result", "content": deep}])
        assert d.effect == "block", depth  # never an exception, never unscanned
    assert gate.before(run, "m", [{"role": "user", "content": [[["nothing here"]]]}]).allowed


def test_a_secret_after_megabytes_of_history_is_not_missed() -> None:
    run = toolgate.Engine(NO_CARDS).start_run("bot")
    history = [{"role": "tool", "kind": "tool_result", "content": "x" * 500_000} for _ in range(12)]
    history.append({"role": "user", "kind": "text", "content": f"my card is {CARD}"})
    assert LlmGate().before(run, "m", history).effect == "block"


def test_messages_are_built_only_when_the_gate_reads_them() -> None:
    from llm_helpers import token_budget
    from policies_for_tests import GATE
    from toolgate._llm import Messages

    built: list = []

    def build() -> list:
        built.append(1)
        return [{"role": "user", "content": "hi"}]

    gate = LlmGate()
    assert gate.before(toolgate.Engine(GATE).start_run("bot"), "m", Messages(build)).allowed
    assert built == []  # no llm.before rule, messages not recorded: never built
    assert gate.before(toolgate.Engine([GATE, token_budget(10**9)]).start_run("bot"), "m", Messages(build)).allowed
    assert built == [1]
    assert gate.before(toolgate.Engine(GATE, record_messages=True).start_run("bot"), "m", Messages(build)).allowed
    assert built == [1, 1]
