"""The model's side, shared by every adapter: the ``llm.before`` gate before each model call and
the usage recorded after it (``llm.result``). One place, so each adapter only says where the
framework's model calls start and end, and what their messages and usage are.

Usage a model reports is read defensively (a hostile or broken model may report anything):

- a count that is not a finite number (missing, ``None``, a string, ``NaN``) is *missing*;
  missing usage is **estimated** from the text (one token per 4 characters, rounded up) so a
  token budget never sees a free call, and the estimate is flagged in the adapter's log;
- an input count of 0 for a prompt that is not empty is not believed (estimated instead);
- a negative count is 0 (a model cannot give tokens back); a count above
  :data:`MAX_TOKENS_PER_CALL` is that bound (the engine's totals are 64-bit counters: no
  number of calls at the bound can wrap them);
- cost: the adapter's ``prices`` (read as the engine reads its own: lower case, globs) per
  million tokens, else the engine's; a model without a price records no cost.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import math
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ._errors import Blocked, ReviewRequired
from ._native import Decision, Run

__all__ = ["LlmGate", "Messages", "Prices", "MAX_TOKENS_PER_CALL", "parse_prices", "text_tokens"]

log = logging.getLogger("toolgate")

Prices = Mapping[str, Mapping[str, float]]
"""``{model: {"in": usd_per_million_input_tokens, "out": usd_per_million_output_tokens}}``."""

MAX_TOKENS_PER_CALL = 10**12
"""The largest token count one model call is recorded with (a trillion: far above any real
call, far below what could wrap the engine's 64-bit totals)."""


class PriceTable:
    """An adapter's price table, read as the engine reads ``Engine(prices=...)``: model names
    compared in lower case; a name with ``*``, ``?`` or ``[`` is a glob (the longest glob that
    matches wins, an exact name before any glob)."""

    def __init__(self, prices: Prices) -> None:
        if len(prices) > 4096:
            raise ValueError("prices: at most 4096 models")
        self.exact: Dict[str, Tuple[float, float]] = {}
        self.globs: List[Tuple[str, Tuple[float, float]]] = []
        for model, p in prices.items():
            if not isinstance(p, Mapping) or set(p) - {"in", "out"}:
                raise ValueError(f"prices.{model}: expected {{'in': usd_per_million, 'out': usd_per_million}}")
            nums = []
            for k in ("in", "out"):
                v = p.get(k)
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                    raise ValueError(f"prices.{model}.{k}: expected a non-negative number (USD per million tokens)")
                nums.append(float(v))
            name = str(model).lower()
            if any(c in name for c in "*?["):
                self.globs.append((name, (nums[0], nums[1])))
            else:
                self.exact[name] = (nums[0], nums[1])
        self.globs.sort(key=lambda g: -len(g[0]))

    def get(self, model: str) -> Optional[Tuple[float, float]]:
        name = model.lower()
        if name in self.exact:
            return self.exact[name]
        return next((p for g, p in self.globs if fnmatch.fnmatchcase(name, g)), None)


def parse_prices(prices: Optional[Prices]) -> Optional[PriceTable]:
    """``prices`` checked (a ``ValueError`` names the first problem), or None."""
    return None if prices is None else PriceTable(prices)


def _count(v: Any) -> Optional[int]:
    """A reported token count, bounded; ``None`` when it is no number."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int):
        n = v
    elif isinstance(v, float):
        if not math.isfinite(v):
            return None if math.isnan(v) else (MAX_TOKENS_PER_CALL if v > 0 else 0)
        n = int(v)
    else:
        return None
    return max(0, min(n, MAX_TOKENS_PER_CALL))


class Messages:
    """A model call's messages, built on first use: only when the gate reads them (an
    ``llm.before`` rule in play, or the engine recording messages) or a missing usage count
    must be estimated. ``fn`` builds them (``[{"role", "kind", "content"}, ...]``)."""

    __slots__ = ("_fn", "_value", "_built")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn = fn
        self._value: Any = None
        self._built = False

    def get(self) -> Any:
        if not self._built:
            self._value, self._built = self._fn(), True
        return self._value


def text_tokens(value: Any) -> int:
    """An estimate of the tokens in ``value`` (its text as JSON, 4 characters a token)."""
    if isinstance(value, Messages):
        value = value.get()
    if value is None:
        return 0
    if not isinstance(value, str):
        try:
            value = json.dumps(value, default=str)
        except (TypeError, ValueError):
            value = str(value)
    return min(MAX_TOKENS_PER_CALL, (len(value) + 3) // 4)


def _leaves(value: Any, limit: int) -> str:
    """The scalars inside ``value`` (dict keys included) as text, read without recursion (for
    content nested past what JSON encoders accept), at most ``limit`` characters."""
    out: List[str] = []
    size = 0
    stack = [value]
    while stack and size < limit:
        v = stack.pop()
        if isinstance(v, Mapping):
            for k, x in reversed(list(v.items())):
                stack.append(x)
                stack.append(k)
        elif isinstance(v, (list, tuple)):
            stack.extend(reversed(v))
        else:
            t = str(v)
            out.append(t)
            size += len(t) + 1
    return " ".join(out)[:limit]


def _as_text(content: Any, limit: int) -> str:
    """A message's content as the text the gate reads: a string as is, anything else as JSON
    (its leaves when it is nested too deep to encode), at most ``limit`` characters."""
    if isinstance(content, str):
        return content[:limit]
    if content is None:
        return ""
    try:
        return json.dumps(content, default=str, ensure_ascii=False)[:limit]
    except (RecursionError, TypeError, ValueError):
        return _leaves(content, limit)


def _bounded(messages: Any) -> List[Dict[str, Any]]:
    """The messages as handed to the gate: ``{"role", "kind", "content"}`` each, content as
    text, so no nesting can exceed the engine's JSON depth limit and every string in it is
    still there for the sensitiveData detectors. Nothing is cut here: the engine applies its
    own limits (past its scan limit a detector's answer is missing data, which blocks; it
    truncates what ``llm.messages`` records), so a long history is never silently unscanned."""
    items = messages if isinstance(messages, list) else [messages]
    out: List[Dict[str, Any]] = []
    for m in items:
        if isinstance(m, Mapping):
            role, kind, content = m.get("role", "user"), m.get("kind", "text"), m.get("content")
        else:
            role, kind, content = "user", "text", m
        out.append({"role": str(role), "kind": str(kind), "content": _as_text(content, sys.maxsize)})
    return out


@dataclass
class Usage:
    """One model call's usage as recorded."""

    tokens_in: int
    tokens_out: int
    estimated: bool


def usage(tokens_in: Any, tokens_out: Any, messages: Any = None, response: Any = None) -> Usage:
    """The call's usage from what the framework reported; a missing count is estimated from the
    messages (input) or the response (output)."""
    tin, tout = _count(tokens_in), _count(tokens_out)
    if tin == 0 and text_tokens(messages) > 0:
        tin = None  # no model reads a prompt for free: a zero is not believed, it is estimated
    estimated = tin is None or tout is None
    return Usage(
        tin if tin is not None else max(1, text_tokens(messages)),  # no call reads nothing
        tout if tout is not None else text_tokens(response),
        estimated,
    )


class LlmGate:
    """The model-call side of one adapter: ``before`` / ``abefore`` (the ``llm.before`` gate),
    ``record`` (usage → ``llm.result``), ``refuse`` (a refused call as the exception apps
    catch). ``prices`` given to the adapter win over the engine's."""

    def __init__(self, prices: Optional[Prices] = None) -> None:
        self.prices = parse_prices(prices)

    # -- the gate -----------------------------------------------------------------------------
    @staticmethod
    def _for_gate(run: Run, messages: Any) -> Any:
        """The messages as the gate reads them, or None when it reads none (no ``llm.before``
        rule, messages not recorded): then they are not even built."""
        if not run.gates_llm:
            return None
        return _bounded(messages.get() if isinstance(messages, Messages) else messages)

    def before(self, run: Run, model: str, messages: Any) -> Decision:
        """The ``llm.before`` decision for a model call about to be made (the engine writes
        its ``llm.messages`` when the engine records messages). ``messages``: a list, or
        :class:`Messages` to build them only if they are read."""
        return run.before_llm(str(model or "unknown"), self._for_gate(run, messages))

    async def abefore(self, run: Run, model: str, messages: Any) -> Decision:
        """:meth:`before` for asyncio."""
        return await run.abefore_llm(str(model or "unknown"), self._for_gate(run, messages))

    @staticmethod
    def refused(decision: Decision) -> Blocked:
        """The exception a refused model call is reported with: :class:`ReviewRequired` for a
        hitl (the run is paused), :class:`Blocked` otherwise."""
        if decision.effect == "hitl":
            return ReviewRequired(decision)
        return Blocked(decision)

    @staticmethod
    def end_refused(run: Run, decision: Decision) -> None:
        """Ends ``run`` as ``budget_exceeded`` after a blocked model call (a hitl leaves it
        paused, waiting for its review)."""
        if decision.effect != "hitl" and run.closed is None:
            run.end("budget_exceeded")

    @staticmethod
    async def aend_refused(run: Run, decision: Decision) -> None:
        """:meth:`end_refused` for asyncio."""
        if decision.effect != "hitl" and run.closed is None:
            await run.aend("budget_exceeded")

    # -- usage --------------------------------------------------------------------------------
    def cost(self, model: str, u: Usage) -> Optional[float]:
        """The call's cost from the adapter's prices; ``None``: the engine's prices decide."""
        if self.prices is None:
            return None
        p = self.prices.get(model)
        if p is None:
            return None  # not in the adapter's table: the engine's prices (if any) decide
        return (u.tokens_in * p[0] + u.tokens_out * p[1]) / 1e6

    def record(
        self, run: Run, model: str, u: Usage, duration_ms: Optional[float], call_id: Optional[str] = None
    ) -> None:
        """Records one model call's usage on ``run`` (``llm.result``, linked to its gate
        decision by ``call_id``). Never raises: a run that has ended records nothing."""
        if run.closed is not None:
            return
        if u.estimated:
            log.info("toolgate: model %r reported no usable usage; recorded an estimate", model)
        ms = duration_ms if duration_ms is not None and math.isfinite(duration_ms) and duration_ms >= 0 else None
        cost = self.cost(model, u)
        try:
            run.record_llm(u.tokens_in, u.tokens_out, cost, model=str(model or "unknown"), duration_ms=ms, call_id=call_id)
        except Exception as e:  # recording must never break the agent's turn
            log.warning("toolgate: recording the model call's usage failed: %s", e)


class Timer:
    """Milliseconds since it was made."""

    __slots__ = ("start",)

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def ms(self) -> float:
        return (time.perf_counter() - self.start) * 1e3
