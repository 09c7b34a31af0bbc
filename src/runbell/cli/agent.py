"""Commands for scripts and CI jobs, built on :mod:`runbell.client`: ``login``, ``report``,
``progress``, ``ask`` and ``wait``. Configured like every integration: ``RUNBELL_URL``,
``RUNBELL_KEY`` and ``RUNBELL_OWNER``, else the file ``runbell login`` writes.

Exit codes are part of the interface (scripts branch on them):

==========  ====================================  =====================================
command     0                                     1 / 2 / 3
==========  ====================================  =====================================
``ask``     approved, or answered (value on       1 rejected · 2 expired, timed out,
            stdout)                               superseded or cancelled · 3 error
``wait``    completed                             1 failed or cancelled · 2 timeout ·
                                                  3 error
``report``  applied, duplicate, stale, mismatch   1 rejected · 3 error
others      done                                  3 error
==========  ====================================  =====================================

An error is one line on stderr (``runbell: …``), never a traceback; a usage error exits
3 too, so that 2 always means "no answer in time".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from typer.core import TyperCommand

from runbell.client import Client, ClientConfig, RetryPolicy, RunbellError, errors, write_config
from runbell.client.config import config_path

__all__ = ["AgentCommand", "ask", "login", "progress", "report", "wait"]

EXIT_ERROR = 3
# A script wants a clear answer soon when the server is down: about 2 s of retries.
CLI_RETRY = RetryPolicy(attempts=4, base_delay=0.25, max_delay=1.0)
KINDS = ("approval", "choice", "text")


class AgentCommand(TyperCommand):
    """A command whose usage errors exit 3 (not click's 2, which ``ask`` and ``wait`` use
    for "no answer in time")."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except Exception as exc:
            # Typer vendors click (typer._click): match its UsageError by its exit code
            # rather than import a private module.
            if getattr(exc, "exit_code", None) == 2:
                exc.exit_code = EXIT_ERROR  # type: ignore[attr-defined]
            raise


def _fail(message: str) -> NoReturn:
    print(f"runbell: {' '.join(str(message).split())}", file=sys.stderr)
    raise typer.Exit(EXIT_ERROR)


def _client() -> Client:
    try:
        return Client.from_env(retry=CLI_RETRY)
    except RunbellError as exc:
        _fail(exc.detail)


def _error_line(exc: RunbellError) -> str:
    if isinstance(exc, errors.APIError):
        where = f" ({exc.field})" if exc.field else ""
        return f"{exc.status} {exc.detail}{where}"
    return exc.detail


def login(
    url: Annotated[str | None, typer.Option(help="the server, e.g. http://127.0.0.1:8080")] = None,
    key: Annotated[str | None, typer.Option(help="a runtime key (rbk_…)")] = None,
    owner: Annotated[str | None, typer.Option(help="email of the person runs are for")] = None,
    config: Annotated[Path | None, typer.Option(help="where to write (default: see below)")] = None,
    check: Annotated[bool, typer.Option(help="check the key against the server first")] = True,
) -> None:
    """Save the server URL, runtime key and owner for every later command (a 0600 file:
    $RUNBELL_CONFIG, else ~/.config/runbell/config.toml). Prompts for what is missing;
    RUNBELL_URL / RUNBELL_KEY / RUNBELL_OWNER still win over the file."""
    url = url or typer.prompt("Runbell URL", default="http://127.0.0.1:8080")
    key = key or typer.prompt("Runtime key", hide_input=True)
    owner = owner or typer.prompt("Owner email (who runs are for)", default="") or None
    settings = ClientConfig(url.rstrip("/"), key, owner)
    if check:
        try:
            with Client(settings.url, settings.key, settings.owner, retry=CLI_RETRY) as rb:
                rb.head_cursor()
        except RunbellError as exc:
            _fail(f"not saved: {_error_line(exc)}")
    try:
        path = write_config(settings, config or config_path())
    except OSError as exc:
        _fail(f"cannot write {config or config_path()}: {exc.strerror or exc}")
    print(f"saved {path}")


def report(
    run_id: Annotated[str, typer.Argument(help="your run's id, e.g. ci-$GITHUB_RUN_ID")],
    state: Annotated[str, typer.Argument(help="working, completed, failed, cancelled, …")],
    title: Annotated[str | None, typer.Option(help="the run's title (creates it if new)")] = None,
    reason: Annotated[str | None, typer.Option(help="a short public label")] = None,
    event_id: Annotated[
        str | None, typer.Option(help="a stable id for this report (retries stay one report)")
    ] = None,
    notify: Annotated[
        bool | None, typer.Option("--notify/--no-notify", help="push when it completes")
    ] = None,
    summary: Annotated[str | None, typer.Option(help="report.summary: what it achieved")] = None,
    link: Annotated[
        list[str] | None, typer.Option(help="report link LABEL=URL (repeatable)")
    ] = None,
) -> None:
    """Report a run's state (the run is created for RUNBELL_OWNER if it does not exist)."""
    body = _report(summary, link or [])
    with _client() as rb:
        try:
            if title is not None or notify is not None:
                rb.put_run(run_id, title=title, notify_on_complete=notify)
            try:
                result = rb.signal(run_id, state, event_id=event_id, reason=reason, report=body)
            except errors.NotFound:
                rb.put_run(run_id, title=title, notify_on_complete=notify)
                result = rb.signal(run_id, state, event_id=event_id, reason=reason, report=body)
        except RunbellError as exc:
            _fail(_error_line(exc))
    print(f"{result.outcome}: {result.reason}" if result.reason else result.outcome)
    if result.outcome == "rejected":
        raise typer.Exit(1)


def _report(summary: str | None, links: list[str]) -> dict[str, Any] | None:
    body: dict[str, Any] = {}
    if summary:
        body["summary"] = summary
    for item in links:
        label, sep, url = item.partition("=")
        if not sep or not label or not url:
            _fail(f"--link must be LABEL=URL, not {item!r}")
        body.setdefault("links", []).append({"label": label, "url": url})
    return body or None


def progress(
    run_id: Annotated[str, typer.Argument()],
    message: Annotated[str, typer.Argument(help="what is happening now (public)")],
    count: Annotated[
        list[str] | None, typer.Option(help="a count NAME=VALUE, e.g. done=3 (repeatable)")
    ] = None,
) -> None:
    """A heartbeat: shows progress, never notifies, keeps the run from counting as stalled."""
    counts: dict[str, Any] = {}
    for item in count or []:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            _fail(f"--count must be NAME=VALUE, not {item!r}")
        counts[name] = _number(raw)
    with _client() as rb:
        try:
            result = rb.progress(run_id, message, counts or None)
        except RunbellError as exc:
            _fail(_error_line(exc))
    print("accepted" if result.accepted else f"not recorded: {result.reason}")


def _number(raw: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


def ask(
    run_id: Annotated[str, typer.Argument()],
    summary: Annotated[str, typer.Argument(help="the question a person answers")],
    kind: Annotated[str, typer.Option(help="approval, choice or text")] = "approval",
    option: Annotated[
        list[str] | None, typer.Option(help="a choice: ID or ID=LABEL (repeatable)")
    ] = None,
    details: Annotated[
        str | None, typer.Option(help="a JSON object shown after sign-in (sensitive)")
    ] = None,
    expires_in: Annotated[
        float | None, typer.Option(help="seconds until no answer is accepted")
    ] = None,
    timeout: Annotated[
        float | None, typer.Option(help="seconds to wait (default: until it ends)")
    ] = None,
    request_id: Annotated[
        str | None, typer.Option(help="a stable id (retries reuse the request)")
    ] = None,
    title: Annotated[
        str | None, typer.Option(help="the run's title if it has to be created")
    ] = None,
) -> None:
    """Ask a person and wait for the answer (long-polling, no busy polling). Exits 0
    approved/answered (the value on stdout), 1 rejected, 2 expired/timeout/superseded/
    cancelled, 3 error."""
    if kind not in KINDS:
        _fail(f"--kind must be one of {', '.join(KINDS)}, not {kind!r}")
    extra: dict[str, Any] | None = None
    if details is not None:
        try:
            extra = json.loads(details)
        except ValueError as exc:
            _fail(f"--details is not JSON: {exc}")
        if not isinstance(extra, dict):
            _fail("--details must be a JSON object")
    options = [_option(o) for o in option or []] or None
    with _client() as rb:
        try:
            try:
                run = rb.get_run(run_id)
            except errors.NotFound:
                run = rb.put_run(run_id, title=title, state="working")
            if run.state == "queued":
                rb.signal(run_id, "working")
            answer = rb.ask(
                run_id,
                summary,
                kind=kind,
                request_id=request_id,
                details=extra,
                options=options,
                expires_in=expires_in,
                timeout=timeout,
            )
        except RunbellError as exc:
            _fail(_error_line(exc))
    if answer.outcome == "answered":
        if answer.value is not None:
            print(answer.value)
        else:
            print("approved" if answer.approved else "rejected")
        raise typer.Exit(1 if answer.rejected else 0)
    print(f"runbell: no answer: {answer.outcome}", file=sys.stderr)
    raise typer.Exit(2)


def _option(raw: str) -> dict[str, str]:
    ident, _, label = raw.partition("=")
    return {"id": ident, "label": label or ident}


def wait(
    run_id: Annotated[str, typer.Argument()],
    timeout: Annotated[
        float | None, typer.Option(help="seconds to wait (default: for ever)")
    ] = None,
) -> None:
    """Wait until the run finishes; prints its state. Exits 0 completed, 1 failed or
    cancelled, 2 timeout, 3 error."""
    with _client() as rb:
        try:
            run = rb.await_run(run_id, timeout)
        except RunbellError as exc:
            _fail(_error_line(exc))
    print(run.state + (f": {run.stop_reason}" if run.stop_reason else ""))
    if not run.terminal:
        raise typer.Exit(2)
    raise typer.Exit(0 if run.state == "completed" else 1)
