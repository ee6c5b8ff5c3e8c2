"""toolgate's exceptions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from ._native import Decision

__all__ = ["ToolgateError", "PolicyError", "Blocked", "ReviewRequired", "RunClosed", "refusal_text"]


class ToolgateError(Exception):
    """Base class of every error toolgate raises."""


class RunClosed(ToolgateError):
    """The run decides nothing more: it has ended, or its engine has shut down. Nothing is
    written to its audit chain; start a new run (or create a new engine)."""


class PolicyError(ToolgateError):
    """A policy did not load. ``path`` is the JSON path of the (first) problem, ``file`` its file."""

    def __init__(self, message: str, path: Optional[str] = None, file: Optional[str] = None) -> None:
        super().__init__(message)
        self.path = path
        self.file = file


def refusal_text(decision: "Decision") -> str:
    """What an agent (or its model) reads when toolgate refuses a call.

    ``toolgate blocked this call: <reason> [<CODE>, rule <id>]``; for hitl the same, naming the
    review a human must approve.
    """
    reason = decision.reason or "a policy rule"
    where = decision.code if decision.rule_id is None else f"{decision.code}, rule {decision.rule_id}"
    text = f"toolgate blocked this call: {reason} [{where}]"
    if decision.effect == "hitl" and decision.review_id is not None:
        text += f"; it waits for human review {decision.review_id}: stop here until a human approves it"
    return text


class Blocked(ToolgateError):
    """A guarded call was blocked. ``decision`` is the decision that blocked it."""

    def __init__(self, decision: "Decision") -> None:
        super().__init__(refusal_text(decision))
        self.decision = decision


class ReviewRequired(Blocked):
    """A guarded call needs a human's approval (effect hitl): the agent must stop its run."""

    @property
    def review_id(self) -> Optional[str]:
        return self.decision.review_id
