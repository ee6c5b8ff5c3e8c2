"""Small inline policies the Python tests use."""

from __future__ import annotations

from typing import Any, Dict, List


def rule(id: str, condition: Dict[str, Any], effect: str, tool: str = "*", reason: str = "", **kw: Any) -> Dict[str, Any]:
    r: Dict[str, Any] = {
        "id": id,
        "name": id,
        "priority": kw.pop("priority", 10),
        "enabled": True,
        "selector": {"phase": kw.pop("phase", "tool.before"), "tool": {"name": tool}},
        "condition": condition,
        "effect": {"type": effect, "reason": reason or f"rule {id}"},
    }
    r.update(kw)
    return r


def policy(*rules: Dict[str, Any], name: str = "py-tests") -> Dict[str, Any]:
    return {"policy": {"name": name}, "rules": list(rules)}


ALWAYS = {"kind": "toolName", "op": "glob", "value": "*"}

GATE = policy(
    rule("no-delete", ALWAYS, "block", tool="delete*", reason="Deleting is not allowed."),
    rule("big-refund", {"kind": "toolArg", "type": "number", "op": "gt", "path": "amount", "value": 100}, "hitl",
         tool="refund", reason="Refunds above $100 need a team lead."),
    rule("vip", {"kind": "signal", "key": "crm.vip", "op": "eq", "value": True,
                 "args": {"user": {"from": "toolArg", "path": "user"}}},
         "block", tool="close_account", reason="VIP accounts are closed by people."),
)


def max_calls(n: int, per: str = "run") -> Dict[str, Any]:
    return policy(rule("cap", {"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["search"]}, "max": n, "per": per},
                       "block", tool="search", reason="Too many searches."))


def rules(p: Dict[str, Any]) -> List[Dict[str, Any]]:
    return list(p["rules"])
