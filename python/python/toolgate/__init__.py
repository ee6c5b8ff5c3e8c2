"""toolgate: allow / block / hitl decisions for an AI agent's tool calls, from JSON policies,
with a hash-chained audit trail. The engine is toolgate's Rust crate; this package is its
Python face (see python/README.md).

>>> import toolgate
>>> engine = toolgate.Engine("policies/customer-support.json")
>>> with engine.start_run("support-bot") as run:
...     d = run.before_tool("getUser", {"id": 7})
"""

from __future__ import annotations

import functools
import inspect
import json
import time
import uuid
from dataclasses import dataclass
from os import PathLike
from types import TracebackType
from typing import (
    Any,

    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
    cast,
)

from . import _native
from ._errors import Blocked, PolicyError, ReviewRequired, RunClosed, ToolgateError, refusal_text
from ._native import Decision, ManualClock

__all__ = [
    "Audit",
    "Blocked",
    "Decision",
    "Engine",
    "ManualClock",
    "PolicyError",
    "ReviewRequired",
    "Reviews",
    "Run",
    "RunClosed",
    "ToolgateError",
    "refusal_text",
]
__version__: str = _native.__version__

PolicySource = Union[str, "PathLike[str]", Mapping[str, Any], List[Any]]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Audit:
    """Where the audit trail goes: a JSONL folder (``dir``) and/or a collector (``collector``
    URL, with its bearer ``token``); ``signing_key``: an Ed25519 PKCS#8 PEM file that signs runs."""

    dir: Optional[Union[str, "PathLike[str]"]] = None
    collector: Optional[str] = None
    token: Optional[str] = None
    signing_key: Optional[Union[str, "PathLike[str]"]] = None


class Reviews:
    """The engine's human reviews (``engine.reviews``)."""

    def __init__(self, engine: "Engine") -> None:
        self._engine = engine

    def list(self) -> List[Dict[str, Any]]:
        """Every review (dicts with camelCase keys: id, status, ruleId, toolName, args, ...)."""
        return self._engine._reviews_list()

    def pending(self) -> List[Dict[str, Any]]:
        """Reviews waiting for a human."""
        return [r for r in self.list() if r.get("status") == "pending"]

    def approve(self, review_id: str) -> Dict[str, Any]:
        """Approves a pending review: identical calls are allowed from now on."""
        return self._engine._reviews_decide("approve", review_id)

    def deny(self, review_id: str) -> Dict[str, Any]:
        """Denies a pending review: identical calls are blocked from now on."""
        return self._engine._reviews_decide("deny", review_id)

    def expire(self, review_id: str) -> Dict[str, Any]:
        """Expires a review: the next identical call asks again."""
        return self._engine._reviews_decide("expire", review_id)


class Engine(_native.Engine):
    """The governance engine. One engine serves many threads and asyncio tasks.

    ``policies``: a path (file or folder), a policy document (dict) or a list of them.
    ``audit``: None (no trail), a folder path (JSONL trail) or :class:`Audit`.
    ``state``: None (in process) or ``"redis://host:port/db"`` (shared by processes; reviews
    then live there too unless ``reviews`` is given). ``reviews``: None (in memory) or a review
    file shared with ``toolgate review --store``. ``org_timezone``: None means the policies' own
    ``timezone``. ``clock``: a :class:`ManualClock` for tests and replays.
    ``prices``: ``{"<model>": {"in": usd_per_million_tokens, "out": ...}}``: usage recorded
    without a cost (``run.record_llm(tokens_in, tokens_out, model=...)``) is priced from it.
    ``record_messages``: write each model call's messages (``run.before_llm``) to the trail as
    ``llm.messages`` events, redacted like arguments.
    """

    reviews: Reviews

    def __init__(
        self,
        policies: Union[PolicySource, Sequence[PolicySource]],
        audit: Union[None, str, "PathLike[str]", Audit] = None,
        state: Optional[str] = None,
        reviews: Union[None, str, "PathLike[str]"] = None,
        failure_mode: str = "closed",
        org_timezone: Optional[str] = None,
        signal_timeout_ms: int = 100,
        clock: Optional[ManualClock] = None,
        prices: Optional[Mapping[str, Mapping[str, float]]] = None,
        record_messages: bool = False,
    ) -> None:
        # The native __new__ built the engine from the same arguments.
        self.reviews = Reviews(self)

    def signal(self, key: str) -> Callable[[F], F]:
        """Decorator form of :meth:`register_signal`: ``@engine.signal("crm.isVip")``."""

        def register(fn: F) -> F:
            self.register_signal(key, fn)
            return fn

        return register

    def condition(self, name: str) -> Callable[[F], F]:
        """Decorator form of :meth:`register_condition`: ``@engine.condition("fraud.suspect")``."""

        def register(fn: F) -> F:
            self.register_condition(name, fn)
            return fn

        return register

    def subjects(self, tool_glob: str) -> Callable[[F], F]:
        """Decorator form of :meth:`register_subjects`."""

        def register(fn: F) -> F:
            self.register_subjects(tool_glob, fn)
            return fn

        return register

    def start_run(
        self,
        agent_id: str,
        run_id: Optional[str] = None,
        enduser: Optional[Mapping[str, Any]] = None,
        agent_tags: Iterable[str] = (),
    ) -> "Run":
        """Starts a run (emits ``run.started``). ``with``/``async with`` ends it.
        ``agent_tags``: the agent's tags, which policies' ``agentSelector`` matches."""
        return Run(
            self,
            agent_id,
            run_id if run_id is not None else uuid.uuid4().hex,
            enduser,
            agent_tags,
        )

    def __enter__(self) -> "Engine":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.shutdown()


def _agent_tags(tags: Iterable[str]) -> Tuple[str, ...]:
    """Agent tags as the adapters keep them: a str is one tag (as for ``Engine.start_run``);
    any other iterable is read once, here, so every run an adapter starts gets all of them."""
    return (tags,) if isinstance(tags, str) else tuple(tags)


def _jsonable(value: Any) -> Any:
    """``value`` as JSON data; what is not JSON becomes its ``str``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    try:
        return json.loads(json.dumps(value, default=_default))
    except (TypeError, ValueError):
        return str(value)


def _default(o: Any) -> Any:
    dump = getattr(o, "model_dump", None)  # pydantic models
    if callable(dump):
        return dump(mode="json")
    return str(o)


def _error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _bind(sig: Optional[inspect.Signature], tool: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The call's arguments by parameter name, defaults applied (``**kwargs`` merged in,
    ``*args`` under its own name): what the function will receive."""
    if sig is None:
        if args:
            raise TypeError(
                f"toolgate cannot name the positional arguments of {tool!r} (no signature): "
                "call it with keyword arguments, or guard a function whose parameters are named"
            )
        return dict(kwargs)
    bound = sig.bind(*args, **kwargs)  # a call the function would refuse is refused here
    bound.apply_defaults()
    out: Dict[str, Any] = {}
    for pname, value in bound.arguments.items():
        if sig.parameters[pname].kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[pname] = value
    return out


def _refuse(decision: Decision) -> None:
    if decision.allowed:
        return
    if decision.effect == "hitl" or decision.abort_run:
        raise ReviewRequired(decision)
    raise Blocked(decision)


class Run(_native.Run):
    """One agent run: ``before_tool`` / ``after_tool`` / ``end`` (and their ``a*`` async forms),
    ``guard``. Use it as a context manager (``with`` / ``async with``) to end it."""

    def guard(self, fn: F, name: Optional[str] = None, tags: Iterable[str] = ()) -> F:
        """Wraps tool function ``fn`` (plain or ``async def``): each call is decided first (its
        arguments, positional ones included, bound to ``fn``'s parameter names, defaults
        applied: what ``fn`` will receive), runs only if allowed, and its outcome is recorded.
        Raises :class:`Blocked` (block) or :class:`ReviewRequired` (hitl); ``TypeError`` when
        ``fn``'s parameters cannot be read (then wrap a function that names them)."""
        tool = name if name is not None else getattr(fn, "__name__", "tool")
        tool_tags = tuple(tags)
        run = self
        try:
            sig: Optional[inspect.Signature] = inspect.signature(fn)
        except (TypeError, ValueError):
            sig = None

        def decided_args(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
            return _jsonable(_bind(sig, tool, args, kwargs))

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def aguarded(*args: Any, **kwargs: Any) -> Any:
                d = await run.abefore_tool(tool, decided_args(args, kwargs), tool_tags)
                _refuse(d)
                started = time.perf_counter()
                try:
                    out = await fn(*args, **kwargs)
                except BaseException as e:
                    ms = (time.perf_counter() - started) * 1000.0
                    await run.aafter_tool(d.call_id, duration_ms=ms, error=_error_text(e))
                    raise
                ms = (time.perf_counter() - started) * 1000.0
                _refuse(await run.aafter_tool(d.call_id, output=_jsonable(out), duration_ms=ms))
                return out

            return cast(F, aguarded)

        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            d = run.before_tool(tool, decided_args(args, kwargs), tool_tags)
            _refuse(d)
            started = time.perf_counter()
            try:
                out = fn(*args, **kwargs)
            except BaseException as e:
                ms = (time.perf_counter() - started) * 1000.0
                run.after_tool(d.call_id, duration_ms=ms, error=_error_text(e))
                raise
            ms = (time.perf_counter() - started) * 1000.0
            _refuse(run.after_tool(d.call_id, output=_jsonable(out), duration_ms=ms))
            return out

        return cast(F, guarded)

    def __enter__(self) -> "Run":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.end("success" if exc is None or isinstance(exc, Blocked) else "error")

    async def __aenter__(self) -> "Run":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.aend("success" if exc is None or isinstance(exc, Blocked) else "error")


