"""LangGraph with Runbell: a graph's ``interrupt()`` becomes a Runbell input request, and
the graph resumes with the person's answer as Runbell recorded it, exactly once.

``pip install 'runbell[langgraph]'``. Wrap a compiled graph (it needs a checkpointer)::

    from langgraph.types import interrupt
    from runbell.client import Client
    from runbell.integrations.langgraph import RunbellGraph

    def deploy(state):
        answer = interrupt({"summary": "Deploy v2?", "command": "make deploy"})
        return {"deployed": answer["approved"]}

    rg = RunbellGraph(graph, Client.from_env(), title="Deploy v2")
    out = rg.invoke({"deployed": False}, thread_id="deploy-7")   # waits for the person

- **A thread is a run.** ``invoke`` creates (or updates) the run ``thread_id`` (see
  :func:`run_id_for`) and reports it ``working``; each interrupt opens an input request
  (the run is ``input_required``); the graph finishing reports ``completed``, the graph
  raising reports ``failed`` (the exception's class) and re-raises.
- **What the person sees** comes from the interrupt's value: its ``summary``, a typed
  action preview (a ``command`` is a shell command, a ``tool`` a tool call, else a generic
  action carrying the value), ``options`` (a choice), ``kind="text"``, an ``editable``
  value (see :mod:`runbell.integrations._interrupts`).
- **What the graph gets**: ``interrupt()`` returns :func:`resume_value` of the answer, a
  dict: ``approved``, ``decision`` (``approve``/``reject``/``answer``), ``value`` (the
  option, the text, or the approved — possibly edited — value), ``edited``, ``outcome``
  (``answered``, or ``expired``/``cancelled``/``superseded``), ``answered_by``,
  ``request_id``. Pass ``resume_value=`` to shape it differently.
- **Exactly once.** Each interrupt's request id is derived from the run and LangGraph's
  interrupt id, which LangGraph derives from the checkpoint and task: resuming again (a
  retried call, another process, a replay from the same checkpoint — LangGraph issue
  #6663) finds the same request and its one recorded answer, never another value. Runbell
  itself refuses a second, different answer (409). The caller never supplies a resume
  value: ``invoke(Command(resume=...))`` is refused. A retried :meth:`RunbellGraph.resume`
  after the graph moved on does nothing and returns the state.
- **Not waiting.** ``invoke(..., wait=False)`` opens the request and returns (the state
  with ``__interrupt__``); later, in any process with the same checkpointer,
  ``resume(thread_id)`` continues with the recorded answer (``wait=False``: only if it is
  there). ``timeout=`` bounds the wait; the run then stays ``input_required``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from langgraph.types import Command

from runbell.client import Answer, Client, RunbellError
from runbell.client._run import failure_fields
from runbell.integrations._interrupts import (
    Question,
    question,
    request_id_for,
    resume_value,
    run_id_for,
)

__all__ = ["RunbellGraph", "question", "request_id_for", "resume_value", "run_id_for"]

TERMINAL = frozenset({"completed", "failed", "cancelled"})


class RunbellGraph:
    """A compiled LangGraph graph whose interrupts are asked through Runbell.

    ``graph``: compiled with a checkpointer. ``client``: a :class:`runbell.client.Client`
    with a runtime key. ``title``, ``owner``, ``notify_on_complete`` and any other
    ``put_run`` field describe the runs. ``expires_in``: seconds each request stays open.
    ``resume_value``: the answer → what ``interrupt()`` returns."""

    def __init__(
        self,
        graph: Any,
        client: Client,
        *,
        title: str | None = None,
        expires_in: float | None = None,
        resume_value: Callable[[Answer], Any] = resume_value,
        **run_fields: Any,
    ) -> None:
        self.graph = graph
        self.client = client
        self.expires_in = expires_in
        self.resume_value = resume_value
        self._run_fields = {"title": title, **run_fields}
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    # --- the public calls ------------------------------------------------------------

    def invoke(
        self,
        input: Any,
        thread_id: str,
        *,
        run_id: str | None = None,
        config: Mapping[str, Any] | None = None,
        wait: bool = True,
        timeout: float | None = None,
    ) -> Any:
        """Run the graph on ``thread_id`` from ``input``, asking Runbell at each interrupt
        and resuming with the answers, until it ends (the graph's output) or an answer is
        not there yet (``wait=False``, or after ``timeout`` seconds): then the state so far,
        with ``__interrupt__``. ``run_id``: the Runbell run (default: from the thread)."""
        if isinstance(input, Command):
            raise TypeError(
                "RunbellGraph resumes with the answer Runbell recorded; call "
                "resume(thread_id) instead of passing Command(resume=...)"
            )
        run = run_id or run_id_for(thread_id)
        fields = {k: v for k, v in self._run_fields.items() if v is not None}
        metadata = {"langgraph_thread_id": thread_id, **dict(fields.pop("metadata", None) or {})}
        self.client.put_run(run, metadata=metadata, **fields)
        self.client.signal(run, "working")
        with self._lock(thread_id):
            cfg = self._config(thread_id, config)
            output = self._step(run, input, cfg)
            return self._drive(run, _newest(cfg), output, wait, timeout)

    def resume(
        self,
        thread_id: str,
        *,
        run_id: str | None = None,
        config: Mapping[str, Any] | None = None,
        wait: bool = True,
        timeout: float | None = None,
    ) -> Any:
        """Continue a thread paused at interrupts with the answers Runbell recorded for
        them (waiting for them unless ``wait=False``). Nothing paused (already resumed,
        or finished): the current state, and the graph does not run again."""
        run = run_id or run_id_for(thread_id)
        cfg = self._config(thread_id, config)
        with self._lock(thread_id):
            if self.graph.get_state(cfg).created_at is None:
                raise LookupError(f"thread {thread_id!r} has no checkpoint: start it with invoke()")
            return self._drive(run, cfg, None, wait, timeout)

    # --- the steps -------------------------------------------------------------------

    def _drive(
        self, run: str, cfg: dict[str, Any], output: Any, wait: bool, timeout: float | None
    ) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            state = self.graph.get_state(cfg)
            if not state.interrupts:
                if not state.next:
                    self._completed(run)
                return output if output is not None else state.values
            answers = self._answers(run, state, wait, deadline)
            if answers is None:  # still waiting for a person
                return _paused(state)
            output = self._step(run, Command(resume=answers), cfg)
            # A replay from an earlier checkpoint (``config``'s checkpoint_id) forked the
            # thread: go on from where that pass left it, the thread's newest checkpoint.
            cfg = _newest(cfg)

    def _answers(
        self, run: str, state: Any, wait: bool, deadline: float | None
    ) -> dict[str, Any] | None:
        """Each pending interrupt's resume value, by interrupt id, asked one at a time (a
        new request supersedes the run's pending one); None while one is unanswered."""
        nodes = {i.id: task.name for task in state.tasks for i in task.interrupts}
        answers: dict[str, Any] = {}
        for pending in state.interrupts:
            ask = question(pending.value, nodes.get(pending.id, "graph"), pending.id)
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            answer = self._ask(run, request_id_for(run, pending.id), ask, wait, remaining)
            if answer.outcome == "timeout":
                return None
            answers[pending.id] = self.resume_value(answer)
        return answers

    def _ask(
        self, run: str, request_id: str, ask: Question, wait: bool, timeout: float | None
    ) -> Answer:
        # Opening is idempotent on the request id: asked before, this waits on (or returns
        # the answer of) that same request, whatever state the run is in now.
        return self.client.ask(
            run,
            ask.summary,
            kind=ask.kind,
            request_id=request_id,
            details=ask.details,
            options=ask.options,
            expires_in=self.expires_in,
            action=ask.action,
            editable=ask.editable,
            timeout=0.0 if not wait else timeout,
        )

    def _step(
        self,
        run: str,
        graph_input: Any,
        cfg: dict[str, Any],
    ) -> Any:
        """One pass of the graph; the graph raising reports the run failed."""
        try:
            return self.graph.invoke(graph_input, cfg)
        except Exception as exc:
            try:
                self.client.signal(run, "failed", **failure_fields(exc))
            except RunbellError as report_error:  # never hide the graph's own error
                exc.add_note(f"runbell: could not report the failure: {report_error}")
            raise

    def _completed(self, run: str) -> None:
        if self.client.get_run(run).state not in TERMINAL:
            self.client.signal(run, "completed", reason="graph finished")

    def _config(self, thread_id: str, config: Mapping[str, Any] | None) -> dict[str, Any]:
        cfg = dict(config or {})
        cfg["configurable"] = {**dict(cfg.get("configurable") or {}), "thread_id": thread_id}
        return cfg

    @contextmanager
    def _lock(self, thread_id: str) -> Iterator[None]:
        """One driver per thread in this process: two threads resuming the same graph
        thread at once would both see its interrupt pending."""
        with self._locks_guard:
            lock = self._locks.setdefault(thread_id, threading.Lock())
        with lock:
            yield


def _newest(cfg: dict[str, Any]) -> dict[str, Any]:
    configurable = {k: v for k, v in cfg["configurable"].items() if k != "checkpoint_id"}
    return {**cfg, "configurable": configurable}


def _paused(state: Any) -> dict[str, Any]:
    values = dict(state.values) if isinstance(state.values, Mapping) else {"values": state.values}
    return {**values, "__interrupt__": list(state.interrupts)}
