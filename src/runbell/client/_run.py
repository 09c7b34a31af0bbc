"""What ``client.run(...)`` (a run as a ``with`` block) and ``client.requires_approval``
(a function that runs only once a person approved it) share between the sync and async
clients: the current run, what a failure reports, what an approval asks and records."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any

from runbell.client import _core, errors

__all__ = ["Approval", "current_run", "current_run_id", "failure_fields"]

current_run: ContextVar[str | None] = ContextVar("runbell_current_run", default=None)


def current_run_id() -> str | None:
    """The run of the innermost ``with client.run(...)`` block, if any."""
    return current_run.get()


def failure_fields(exc: BaseException) -> dict[str, Any]:
    # `reason` is public (feed, webhooks, alerts): only the class. The short message
    # goes to `error`, which only signed-in run views show. Never a traceback or locals.
    return {"reason": f"raised {type(exc).__name__}", "error": _core.short_error(exc)}


def _arguments(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The call's arguments for the person deciding (``details`` is sensitive: shown
    only after sign-in), each cut short."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return {
            "args": [repr(a)[:200] for a in args],
            "kwargs": {k: repr(v)[:200] for k, v in kwargs.items()},
        }
    return {name: repr(value)[:200] for name, value in bound.arguments.items()}


class Approval:
    """What one decorated call needs: which run, what to ask, the operation to record."""

    def __init__(
        self,
        fn: Callable[..., Any],
        summary: str | None,
        run_id: str | None,
        details: Mapping[str, Any] | None,
    ) -> None:
        self.fn = fn
        self.name = fn.__name__
        self.qualname = f"{fn.__module__}.{fn.__qualname__}"
        self.summary = summary or f"Allow {self.name}()?"
        self.run_id = run_id
        self.details = details

    def run(self) -> str:
        run_id = self.run_id or current_run_id()
        if run_id is None:
            raise errors.RunbellError(
                f"{self.name}() requires approval but no run is given: pass run_id= to "
                "requires_approval, or call it inside `with client.run(...)`"
            )
        return run_id

    def ask_details(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        details = {"function": self.qualname, "arguments": _arguments(self.fn, args, kwargs)}
        if self.details:
            details.update(self.details)
        return details

    def operation(self) -> dict[str, Any]:
        return {
            "operation_id": _core.new_id(self.name)[:200],
            "target": {"type": "function", "id": self.qualname[:200]},
            "intent": self.name,
        }
