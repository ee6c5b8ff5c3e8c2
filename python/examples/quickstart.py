"""The ten-line example: decide tool calls of a support agent, guard a tool function.

    python python/examples/quickstart.py        (from the repository root)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

import toolgate

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    engine = toolgate.Engine(ROOT / "policies" / "customer-support.json")

    @engine.signal("crm.isDifficultCustomer")
    async def difficult(args: Dict[str, Any]) -> bool:
        return args.get("customerId") == "cust-13"

    with engine.start_run("support-bot", enduser={"id": "cust-1001", "tags": {"tz": "Europe/London"}}) as run:
        d = run.before_tool("issue_refund", {"orderId": "A-1", "amount": 40}, tags=["payments", "write"])
        print(d.effect, d.code, d.rule_id)

        def issue_refund(orderId: str, amount: float) -> Dict[str, Any]:
            return {"refundId": "rf-1", "amount": amount}

        refund = run.guard(issue_refund, tags=["payments", "write"])
        try:
            print(refund(orderId="A-2", amount=5000))
        except toolgate.Blocked as e:
            print(e)
    engine.shutdown()


if __name__ == "__main__":
    main()
