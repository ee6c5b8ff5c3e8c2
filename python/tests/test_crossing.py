"""The crossing into the engine (issue 38): its fast paths give exactly what the plain ones
give. A dict, list or str is converted without tracking where it sits (a value that fails is
converted again for the error to name the place); a list or tuple of tags is read without an
iterator; a numbered call's id is made into text when read."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Dict

import pytest

import toolgate
from policies_for_tests import ALWAYS, policy, rule

POLICY = policy(
    rule("big", {"kind": "toolArg", "type": "number", "op": "gt", "path": "order.items[1].amount", "value": 100},
         "block", tool="refund", reason="Too big."),
    rule("pii", {"kind": "toolArg", "type": "string", "op": "eq", "path": "who.name", "value": "ann"}, "block", reason="Not ann."),
    dict(rule("tagged", ALWAYS, "block", reason="Tagged."),
         selector={"phase": "tool.before", "tool": {"tagsAny": ["payments"]}}),
)


def whole(d: toolgate.Decision) -> Dict[str, Any]:
    out = d.to_dict()
    out.pop("latencyNs")
    return out


ARGS = {"order": {"items": [{"amount": 5}, {"amount": 500.5, "ok": True, "n": None}]}, "who": {"name": "ann"}}


def slow(v: Any) -> Any:
    """The same value through the converter's general path (subclasses, tuples)."""
    if isinstance(v, dict):
        return OrderedDict((k, slow(x)) for k, x in v.items())
    if isinstance(v, list):
        return tuple(slow(x) for x in v)
    return v


@pytest.mark.parametrize("name", ["refund", "lookup"])
def test_args_converted_fast_decide_as_the_general_path(name: str) -> None:
    engine = toolgate.Engine(POLICY)
    fast = engine.start_run("bot").before_tool(name, ARGS, ["read"])
    plain = engine.start_run("bot").before_tool(name, slow(ARGS), ("read",))
    assert whole(fast) == whole(plain)
    assert (fast.call_id, fast.effect, fast.code, fast.rule_id, fast.reason) == (
        plain.call_id, plain.effect, plain.code, plain.rule_id, plain.reason)


def test_errors_still_name_the_place() -> None:
    run = toolgate.Engine(POLICY).start_run("bot")
    with pytest.raises(TypeError, match=r"\$\.order\.items\[1\]\.when: a object is not a JSON value"):
        run.before_tool("refund", {"order": {"items": [1, {"when": object()}]}})
    with pytest.raises(TypeError, match=r"\$\.a: dict keys must be str"):
        run.before_tool("refund", {"a": {1: 2}})
    with pytest.raises(ValueError, match=r"\$\.a\[0\]: integer out of the 64-bit range"):
        run.before_tool("refund", {"a": [2**70]})
    with pytest.raises(ValueError, match="nested deeper"):
        deep: Any = 1
        for _ in range(200):
            deep = [deep]
        run.before_tool("refund", {"a": deep})


def test_tags_as_list_tuple_iterable_or_str_decide_alike() -> None:
    engine = toolgate.Engine(POLICY)
    seen = []
    for tags in (["x", "payments"], ("x", "payments"), iter(["x", "payments"]), "payments"):
        d = engine.start_run("bot").before_tool("pay", {}, tags)
        seen.append((d.effect, d.rule_id))
    assert seen == [("block", "tagged")] * 4
    with pytest.raises(TypeError):
        engine.start_run("bot").before_tool("pay", {}, ["x", 1])
    with pytest.raises(TypeError):
        engine.start_run("bot").before_tool("pay", {}, ("x", None))


def test_numbered_call_ids_read_as_given_ones() -> None:
    engine = toolgate.Engine(POLICY)
    run = engine.start_run("bot")
    numbered = [run.before_tool("lookup", {}) for _ in range(3)]
    given = engine.start_run("bot").before_tool("lookup", {}, call_id="call-1")
    assert [d.call_id for d in numbered] == ["call-1", "call-2", "call-3"]
    assert numbered[0].call_id == given.call_id and type(numbered[0].call_id) is str
    assert repr(numbered[0]) == repr(given)
    assert whole(numbered[0]) == whole(given)
    after = run.after_tool("call-2", output={"ok": True})
    assert after.call_id == "call-2"
