"""The ``runbell`` command: serve, migrate, and account administration."""

from __future__ import annotations

import json
import os
import shlex
import socket
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from runbell.config import Settings, setting_problems
from runbell.domain.errors import RunbellError

app = typer.Typer(
    help="Runbell: trustworthy attention for background AI-agent work.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
tenant_app = typer.Typer(help="Tenants and their policy.", no_args_is_help=True)
key_app = typer.Typer(help="API keys for runtimes and administrators.", no_args_is_help=True)
user_app = typer.Typer(help="People: members of a tenant.", no_args_is_help=True)
source_app = typer.Typer(
    help="Signal sources (trust, state readers, webhooks).", no_args_is_help=True
)
app.add_typer(tenant_app, name="tenant")
app.add_typer(key_app, name="key")
app.add_typer(user_app, name="user")
app.add_typer(source_app, name="source")
deliveries_app = typer.Typer(help="The outbox: dead letters and replay.", no_args_is_help=True)
app.add_typer(deliveries_app, name="deliveries")
# soft_wrap: a line is never folded at the terminal's (or a pipe's 80-column) width, so
# printed links, commands and ids stay whole when copied or piped.
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def _settings() -> Settings:
    """Settings from the environment. An invalid one exits 2 with one line naming its
    variable (``runbell: RUNBELL_SMTP_PORT: …``), never a traceback."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    try:
        return Settings()
    except ValidationError as exc:
        for line in setting_problems(exc):
            err.print(f"runbell: {line}", markup=False, highlight=False)
    except SettingsError as exc:
        err.print(f"runbell: {exc}", markup=False, highlight=False)
    raise typer.Exit(2)


def _data_dir(settings: Settings) -> None:
    from runbell.app import prepare_data_dir

    try:
        prepare_data_dir(settings)
    except OSError as exc:
        err.print(
            f"runbell: RUNBELL_DATA_DIR: cannot create {settings.data_dir}: {exc.strerror or exc}",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(2) from None


def _core(settings: Settings | None = None, migrate: bool = True) -> Any:
    from runbell.app import build

    settings = settings or _settings()
    _data_dir(settings)
    return build(settings, migrate=migrate)


def _serve(asgi: Any, sock: socket.socket, **config: Any) -> None:
    """uvicorn, minus its habit of re-raising SIGTERM after a graceful shutdown (which
    kills the process before our cleanup runs and leaves the SQLite WAL unmerged)."""
    import contextlib
    from collections.abc import Iterator

    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            with super().capture_signals():
                yield
                self._captured_signals.clear()  # we already shut down: exit 0

    Server(uvicorn.Config(asgi, **config)).run(sockets=[sock])


def _listen(host: str, port: int) -> socket.socket:
    """Bind before anything is created or printed: a taken port fails here, and links use
    the port really bound (``--port 0`` included)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        err.print(
            f"runbell: cannot listen on {host}:{port}: {exc.strerror or exc}. Is another "
            "server running there? Choose another port: --port 18080 (make run PORT=18080).",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(2) from None
    return sock


def _served_url(host: str, port: int) -> str:
    if host in ("0.0.0.0", "::", ""):  # noqa: S104 (we detect it, not bind)
        host = "127.0.0.1"  # listening everywhere: links still need a host a browser opens
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _this_command() -> str:
    """How a shell in the current directory runs the `runbell` that is running now."""
    import shutil

    exe = Path(sys.argv[0])
    if exe.name != "runbell":  # python -m runbell.cli
        return f"{shlex.quote(sys.executable)} -m runbell.cli"
    found = shutil.which("runbell")
    if found and exe.exists() and os.path.samefile(found, exe):
        return "runbell"
    path = Path(os.path.abspath(exe))
    try:
        rel = path.relative_to(Path.cwd())
    except ValueError:
        return shlex.quote(str(path))
    return shlex.quote(str(rel) if len(rel.parts) > 1 else f"./{rel}")


def _same_database(settings: Settings) -> tuple[str, str | None]:
    """The RUNBELL_* assignments a fresh shell needs to reach this process's database, and
    a note when something had to be left out (a password is never printed)."""
    import sqlalchemy as sa

    given = settings.model_fields_set
    if settings.database_url and "database_url" in given:
        url = sa.make_url(settings.database_url)
        note = None
        if url.password is not None:
            url = url.set(password=None)
            note = "(the database password is left out: set PGPASSWORD or use ~/.pgpass)"
        shown = url.render_as_string(hide_password=False)
        return f"RUNBELL_DATABASE_URL={shlex.quote(shown)} ", note
    if "data_dir" in given:
        return f"RUNBELL_DATA_DIR={shlex.quote(str(settings.data_dir.resolve()))} ", None
    return "", None


def _login_commands(settings: Settings, email: str | None) -> list[str]:
    """Commands that print a new sign-in link for the first tenant's owner (``email``, or
    its first owner) when pasted into a second terminal in this directory; then a note if
    the database URL had to be shortened."""
    env, note = _same_database(settings)
    me = _this_command()
    commands = []
    makefile = Path("Makefile")
    in_checkout = me == ".venv/bin/runbell" and makefile.is_file()
    if in_checkout and "\nlogin-link:" in makefile.read_text(errors="replace"):
        commands.append(f"{env}make login-link")
    who = f" {shlex.quote(email)}" if email else ""
    commands.append(f"{env}{me} user login-link{who} --tenant default")
    return commands + ([note] if note else [])


def _demo(core: Any, base: str) -> tuple[list[Any], list[Any]]:
    """Wire the demo: a local mail sink (unless SMTP is set), a webhook endpoint on this
    server, and the simulated agent. See runbell.demo."""
    from urllib.parse import urlsplit

    from runbell import demo

    state = demo.DemoState()
    if not core.settings.smtp_host:
        host, port = demo.start_mail_sink(state)
        core.settings.smtp_host, core.settings.smtp_port = host, port
        out.print(f"Demo mail sink: {base}/demo/mailbox", markup=False, highlight=False)
    netloc = urlsplit(base).netloc
    core.settings.outbound_allow_hosts = frozenset({*core.settings.outbound_allow_hosts, netloc})
    who = demo.setup(core, base)
    if who is None:
        return [], []
    tenant_id, owner_id = who

    async def run_agent(stop: Any) -> None:
        await demo.agent(core, tenant_id, owner_id, stop)

    out.print(
        "Demo: a run will ask for your approval in a few seconds. Sign in with the "
        "sign-in link, then open the inbox.",
        markup=False,
        highlight=False,
    )
    return [run_agent], [demo.sink_router(core, state)]


def _check_statuses(statuses: list[str] | None) -> None:
    from runbell.store.outbox import STATUSES

    wrong = sorted(set(statuses or []) - set(STATUSES))
    if wrong:
        err.print(
            f"[red]error:[/red] unknown status {', '.join(wrong)}; one of {', '.join(STATUSES)}"
        )
        raise typer.Exit(2)


def _fail(exc: RunbellError) -> None:
    err.print(f"[red]error:[/red] {exc.detail}")
    raise typer.Exit(2)


@app.command()
def migrate() -> None:
    """Create or upgrade the database schema (idempotent)."""
    from runbell.store.db import make_engine
    from runbell.store.migrate import current_revision, upgrade

    settings = _settings()
    _data_dir(settings)
    engine = make_engine(settings.resolved_database_url())
    upgrade(engine)
    out.print(f"schema at revision {current_revision(engine)} ({engine.dialect.name})")


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8080,
    scheduler: Annotated[bool, typer.Option(help="run the scheduler in this process")] = True,
    deliver: Annotated[bool, typer.Option(help="run a delivery worker in this process")] = True,
    demo: Annotated[
        bool, typer.Option(help="a simulated agent run that asks you for approval")
    ] = False,
) -> None:
    """Run the API, a delivery worker and the scheduler in one process (SQLite by default)."""
    from runbell.api.routers.health import metrics_refusal
    from runbell.app import create_app, record_served_url
    from runbell.bootstrap import welcome_text
    from runbell.dispatch.scheduler import Scheduler
    from runbell.dispatch.wiring import build_channels
    from runbell.dispatch.worker import Worker
    from runbell.flows.accounts import bootstrap_if_empty
    from runbell.logging import configure

    settings = _settings()
    configure(json=settings.log_json)
    sock = _listen(host, port)
    core = _core(settings)
    served = _served_url(host, sock.getsockname()[1])
    # Links in alerts and the welcome text point at RUNBELL_PUBLIC_URL when it is set,
    # else at where this server really listens; recorded for commands run elsewhere.
    given = "public_url" in settings.model_fields_set
    base = settings.public_url.rstrip("/") if given else served
    core.settings.public_url = base
    record_served_url(core.db, base)
    first = bootstrap_if_empty(core, settings.first_user_email)
    if first is not None:
        login = _login_commands(settings, first.user_email)
        out.print(welcome_text(first, base, login), markup=False, highlight=False)
    sched = Scheduler(core)
    if scheduler:
        sched.start()
    background: list[Any] = []
    routers: list[Any] = []
    if demo:
        background, routers = _demo(core, base)
    worker = Worker(core, build_channels(core)) if deliver else None
    out.print(
        f"Runbell listening on {served}  (database: {core.db.dialect})"
        + (f"; links use {base} (RUNBELL_PUBLIC_URL)" if base != served else "")
        + ". Ctrl-C stops it.",
        markup=False,
        highlight=False,
    )
    if metrics_refusal(host, core.settings.metrics_token):
        out.print(
            f"/metrics is off: listening on {host or '*'} without RUNBELL_METRICS_TOKEN "
            "(set it to scrape with a bearer token)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    if first is None and _has_default_tenant(core):
        lines = "\n  ".join(_login_commands(settings, None))
        out.print(
            f"A new browser sign-in link, from another terminal here:\n  {lines}",
            markup=False,
            highlight=False,
        )
    try:
        _serve(
            create_app(
                core, worker=worker, background=background, routers=routers, listen_host=host
            ),
            sock,
            host=host,
            port=sock.getsockname()[1],
            log_level="warning",
            timeout_graceful_shutdown=5,
        )
    finally:
        sched.stop()
        core.db.dispose()


def _has_default_tenant(core: Any) -> bool:
    """Whether the tenant the first start creates (named ``default``) is there."""
    from runbell.flows import accounts

    return accounts.has_tenant(core.db, "default")


@app.command()
def api(
    host: Annotated[str, typer.Option(help="interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8080,
) -> None:
    """Run the API only (scale-out: N api replicas and M `runbell worker` processes)."""
    serve(host=host, port=port, scheduler=False, deliver=False)


@app.command()
def worker(
    scheduler: Annotated[bool, typer.Option(help="also run the scheduler sweeps")] = False,
    metrics_port: Annotated[
        int | None, typer.Option(help="serve this worker's /metrics on 127.0.0.1:PORT")
    ] = None,
) -> None:
    """Run a delivery worker alone. Several may share one PostgreSQL; each delivery goes
    out once. Stops cleanly on SIGTERM/SIGINT (in-flight sends finish first)."""
    import asyncio
    import signal

    from runbell.app import links_base
    from runbell.dispatch.scheduler import Scheduler
    from runbell.dispatch.wiring import build_channels
    from runbell.dispatch.worker import Worker
    from runbell.logging import configure
    from runbell.store.wakeup import start_bridge

    settings = _settings()
    configure(json=settings.log_json)
    core = _core(settings)
    # Links in alerts: RUNBELL_PUBLIC_URL, else where `runbell serve` last served.
    core.settings.public_url = links_base(settings, core.db)
    sched = Scheduler(core)
    if scheduler:
        sched.start()
    bridge = start_bridge(core.db)
    the_worker = Worker(core, build_channels(core))
    if metrics_port is not None:
        from prometheus_client import start_http_server

        from runbell import metrics

        start_http_server(metrics_port, addr="127.0.0.1", registry=metrics.REGISTRY)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await the_worker.run(stop)

    try:
        asyncio.run(main())
    finally:
        if bridge:
            bridge.stop()
        sched.stop()
        core.db.dispose()


@tenant_app.command("create")
def tenant_create(name: str) -> None:
    """Create a tenant; prints its id and an admin API key (shown once)."""
    from runbell.flows import accounts

    core = _core()
    try:
        tenant_id, secret = accounts.create_tenant(core, name)
    except RunbellError as exc:
        _fail(exc)
    out.print(f"tenant    {tenant_id}\nadmin key {secret}   (shown once)", highlight=False)


@tenant_app.command("policy")
def tenant_policy(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)],
    tenant: Annotated[str, typer.Option(help="tenant id or name")],
) -> None:
    """Set a tenant's attention rules from a TOML or YAML file (prepended to the defaults)."""
    import tomllib

    import yaml

    from runbell.flows import accounts, policy

    text = file.read_text()
    try:
        doc = yaml.safe_load(text) if file.suffix in (".yaml", ".yml") else tomllib.loads(text)
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        err.print(f"[red]error:[/red] cannot parse {file}: {exc}")
        raise typer.Exit(2) from exc
    core = _core()
    try:
        tenant_id = accounts.resolve_tenant(core.db, tenant)
        effective = policy.set_policy(core, tenant_id, doc or {})["effective"]
    except RunbellError as exc:
        _fail(exc)
    out.print(f"policy set: {len(effective)} rules, first: {effective[0]['id']}")


@key_app.command("create")
def key_create(
    tenant: Annotated[str, typer.Option(help="tenant id or name")],
    role: Annotated[str, typer.Option(help="runtime or admin")] = "runtime",
    name: Annotated[str | None, typer.Option(help="a label")] = None,
    source: Annotated[str | None, typer.Option(help="bind signals to this source id")] = None,
) -> None:
    """Create an API key; prints it once."""
    from runbell.flows import accounts

    core = _core()
    try:
        key_id, secret = accounts.create_key(core, tenant, role, name=name, source_id=source)
    except RunbellError as exc:
        _fail(exc)
    out.print(f"key id {key_id}\nkey    {secret}   (shown once)", highlight=False)


@key_app.command("revoke")
def key_revoke(key_id: str, tenant: Annotated[str, typer.Option()]) -> None:
    """Revoke an API key at once."""
    from runbell.flows import accounts

    core = _core()
    try:
        accounts.revoke_key(core, tenant, key_id)
    except RunbellError as exc:
        _fail(exc)
    out.print(f"revoked {key_id}")


@user_app.command("add")
def user_add(
    email: str,
    tenant: Annotated[str, typer.Option(help="tenant id or name")],
    role: Annotated[str, typer.Option(help="owner, admin or member")] = "member",
) -> None:
    """Add (or re-activate) a member; prints a user token once."""
    from runbell.flows import accounts

    core = _core()
    try:
        _, user_id, token = accounts.add_member(core, tenant, email, role)
    except RunbellError as exc:
        _fail(exc)
    out.print(f"user  {user_id} ({email}, {role})\ntoken {token}   (shown once)", highlight=False)


@user_app.command("revoke")
def user_revoke(email: str, tenant: Annotated[str, typer.Option(help="tenant id or name")]) -> None:
    """Revoke a membership and all its tokens, and withdraw their open notifications
    (queued deliveries cancelled, previews redacted). Effective on the next request."""
    from runbell.flows import accounts, members

    core = _core()
    try:
        tenant_id, user_id = accounts.find_member(core.db, tenant, email)
        withdrawn = members.revoke_member(core, tenant_id, user_id)
    except RunbellError as exc:
        _fail(exc)
    out.print(f"revoked {email}; withdrew {withdrawn} open notification(s)")


@user_app.command("login-link")
def user_login_link(
    tenant: Annotated[str, typer.Option(help="tenant id or name")],
    email: Annotated[
        str | None,
        typer.Argument(help="email or user id; default: the tenant's first owner"),
    ] = None,
) -> None:
    """Print a one-time browser sign-in link for a member (works once, for 15 minutes).

    The link starts with RUNBELL_PUBLIC_URL when it is set, else with the address
    `runbell serve` last served on (its port included), so it opens that server."""
    from runbell.app import links_base, open_database
    from runbell.flows import accounts

    settings = _settings()
    _data_dir(settings)
    # The database alone: a sign-in link needs no secret key, so this works from any
    # terminal that reaches the database, whichever RUNBELL_SECRET_KEY it has.
    db = open_database(settings)
    try:
        token = accounts.login_link_token(db, tenant, email)
        base = links_base(settings, db)
    except RunbellError as exc:
        _fail(exc)
    finally:
        db.dispose()
    # The same link as runbell.web.routes.sign_in_url builds.
    out.print(f"{base}/auth/{token}", markup=False, highlight=False)
    err.print("One use, valid for 15 minutes. Anyone holding it can sign in as this member.")


@source_app.command("create")
def source_create(
    name: str,
    tenant: Annotated[str, typer.Option(help="tenant id or name")],
    kind: Annotated[str, typer.Option(help="webhook or api")] = "webhook",
    mapper: Annotated[str | None, typer.Option(help="generic or openai")] = None,
    trust: Annotated[str, typer.Option(help="authoritative or advisory")] = "advisory",
    reader: Annotated[str | None, typer.Option(help="state reader config as JSON")] = None,
) -> None:
    """Register a source; a webhook source prints its signing secret once."""
    from pydantic import ValidationError

    from runbell.flows.sources import create_source
    from runbell.api.schemas import SourceCreate
    from runbell.store import accounts

    core = _core()
    try:
        body = SourceCreate.model_validate(
            {
                "name": name,
                "kind": kind,
                "mapper": mapper,
                "trust": trust,
                "reader": json.loads(reader) if reader else None,
            }
        )
        with core.db.read() as conn:
            tenant_id = accounts.resolve_tenant(conn, tenant)
        res = create_source(core, tenant_id, body.model_dump()).content()
    except ValidationError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    except RunbellError as exc:
        _fail(exc)
    json.dump(res, sys.stdout, indent=2)
    sys.stdout.write("\n")


DELIVERY_COLUMNS = (
    "id",
    "channel",
    "status",
    "attempt_count",
    "event_type",
    "notification_id",
    "last_error",
)


def _cell(value: Any) -> str:
    """A whole value on one line with no tabs; ``-`` for none (awk skips empty fields)."""
    return "-" if value is None or value == "" else " ".join(str(value).split())


@deliveries_app.command("list")
def deliveries_list(
    tenant: Annotated[str, typer.Option(help="tenant id or name")],
    status: Annotated[list[str] | None, typer.Option(help="e.g. dead, delivery_unknown")] = None,
    channel: Annotated[str | None, typer.Option()] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    as_json: Annotated[
        bool, typer.Option("--json", help="a JSON array, each item as GET /v1/deliveries")
    ] = False,
) -> None:
    """Deliveries newest first: a table on a terminal. Piped, one tab-separated line per
    delivery with every value whole (a header line first, ``-`` for none); --json for
    every field."""
    _check_statuses(status)
    from rich.table import Table

    from runbell.flows.deliveries import delivery_view
    from runbell.store import accounts, outbox

    core = _core()
    try:
        with core.db.read() as conn:
            tenant_id = accounts.resolve_tenant(conn, tenant)
            rows = outbox.list_for_tenant(
                conn,
                tenant_id,
                statuses=status,
                channel=channel,
                endpoint_id=None,
                before=None,
                limit=limit,
            )
    except RunbellError as exc:
        _fail(exc)
    finally:
        core.db.dispose()
    if as_json:
        json.dump([delivery_view(d) for d in rows], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    if not out.is_terminal:
        # For grep, cut and awk: nothing cut to a width, one line per delivery.
        sys.stdout.write("\t".join(DELIVERY_COLUMNS) + "\n")
        for d in rows:
            sys.stdout.write("\t".join(_cell(d[c]) for c in DELIVERY_COLUMNS) + "\n")
        return
    table = Table()
    # Whole ids, never cut: an operator copies them into `deliveries replay`.
    table.add_column("id", no_wrap=True, min_width=30)
    for title in ("channel", "status", "attempts"):
        table.add_column(title, no_wrap=True)
    for title in ("event / notification", "last error"):
        table.add_column(title, overflow="fold")  # a narrow terminal folds, never cuts
    for d in rows:
        table.add_row(
            d["id"],
            d["channel"],
            d["status"],
            str(d["attempt_count"]),
            d["event_type"] or d["notification_id"] or "",
            (d["last_error"] or "")[:60],
        )
    out.print(table)


@deliveries_app.command("replay")
def deliveries_replay(
    tenant: Annotated[str, typer.Option(help="tenant id or name")],
    ids: Annotated[list[str] | None, typer.Argument(help="delivery ids")] = None,
    status: Annotated[
        list[str] | None, typer.Option(help="replay every delivery in these statuses, e.g. dead")
    ] = None,
    channel: Annotated[str | None, typer.Option()] = None,
) -> None:
    """Queue deliveries again under the same identity, with a progress bar."""
    _check_statuses(status)
    from rich.progress import Progress

    from runbell.store import accounts, outbox

    if not ids and not status:
        err.print("[red]error:[/red] name delivery ids or --status")
        raise typer.Exit(2)
    core = _core()
    try:
        with core.db.read() as conn:
            tenant_id = accounts.resolve_tenant(conn, tenant)
            todo = list(ids or [])
            if status:
                todo += [
                    d["id"]
                    for d in outbox.list_for_tenant(
                        conn,
                        tenant_id,
                        statuses=status,
                        channel=channel,
                        endpoint_id=None,
                        before=None,
                        limit=100_000,
                    )
                ]
    except RunbellError as exc:
        _fail(exc)
    done, refused = 0, 0
    with Progress(console=err) as progress:
        task = progress.add_task("replaying", total=len(todo))
        for delivery_id in todo:
            try:
                with core.db.transaction() as tx:
                    outbox.replay(tx.conn, tenant_id, delivery_id, tx.now)
                    tx.wake_outbox = True
                done += 1
            except RunbellError as exc:
                refused += 1
                err.print(f"{delivery_id}: {exc.detail}")
            progress.advance(task)
    out.print(f"queued {done} again, {refused} refused")
    if refused and not done:
        raise typer.Exit(2)


if __name__ == "__main__":
    app()
