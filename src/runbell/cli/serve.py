"""The process commands: ``migrate``, ``serve`` (API, delivery worker and scheduler in one
process), ``api`` (the API alone) and ``worker`` (a delivery worker alone)."""

from __future__ import annotations

from runbell.cli import common
from runbell.cli.common import err, out
from runbell.cli.specs import Commands, Flag, Option

TYPE_CHECKING = False  # not typing's, see runbell.cli.common
if TYPE_CHECKING:
    import socket
    from typing import Any

commands = Commands()

HOST = Option("--host", "the interface to listen on", metavar="HOST")
PORT = Option("--port", "the port to listen on (0: any free)", metavar="PORT", type=int)


@commands.command()
def migrate() -> None:
    """Create or upgrade the database schema (idempotent)."""
    settings = common.settings()  # first: a bad setting is refused before the imports below

    from runbell.app import migrate as upgrade
    from runbell.logging import configure

    configure(json=settings.log_json, level=settings.log_level)
    common.data_dir(settings)
    # A database still starting (or restarting) is waited for, within the bound.
    revision, dialect = common.when_reachable(settings, lambda: upgrade(settings))
    out.print(f"schema at revision {revision} ({dialect})")


def _serve(
    asgi: Any, sock: socket.socket, on_exit: Any = None, on_started: Any = None, **config: Any
) -> None:
    """uvicorn, minus its habit of re-raising SIGTERM after a graceful shutdown (which
    kills the process before our cleanup runs and leaves the SQLite WAL unmerged);
    ``on_exit()`` runs when a stop signal arrives (open event streams end at once instead
    of holding the graceful shutdown for its whole timeout); ``on_started()`` once the
    socket accepts connections (what is printed then can be opened at once)."""
    import contextlib
    from collections.abc import Iterator

    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            if on_exit is not None:
                on_exit()

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)  # the app's lifespan, then listen()
            if self.started and on_started is not None:
                on_started()

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            with super().capture_signals():
                yield
                self._captured_signals.clear()  # we already shut down: exit 0

    Server(uvicorn.Config(asgi, **config)).run(sockets=[sock])


def _listen(host: str, port: int) -> socket.socket:
    """Bind before anything is created or printed: a taken port fails here, and links use
    the port really bound (``--port 0`` included)."""
    import socket

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        common.fail(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}",
            "is another server running there? Choose another port: --port 18080 "
            "(make run PORT=18080)",
        )
    return sock


def _served_url(host: str, port: int) -> str:
    if host in ("0.0.0.0", "::", ""):  # noqa: S104 (we detect it, not bind)
        host = "127.0.0.1"  # listening everywhere: links still need a host a browser opens
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _demo(
    core: Any, base: str, fresh: bool, sign_in: str
) -> tuple[list[Any], list[Any], list[str]]:
    """Wire the demo: a local mail sink (unless SMTP is set), a webhook endpoint on this
    server, and the simulated agent (see runbell.demo); and what to print about it once
    the server listens. ``fresh``: this start made the database's first tenant;
    ``sign_in``: where this start's output says a sign-in link is."""
    from urllib.parse import urlsplit

    from runbell import demo

    state = demo.DemoState()
    lines = []
    if not core.settings.smtp_host:
        host, port = demo.start_mail_sink(state)
        core.settings.smtp_host, core.settings.smtp_port = host, port
        lines.append(f"Demo mail sink: {base}/demo/mailbox")
    netloc = urlsplit(base).netloc
    core.settings.outbound_allow_hosts = frozenset({*core.settings.outbound_allow_hosts, netloc})
    who = demo.setup(core, base)
    if who is None:
        return [], [], lines
    tenant_id, owner_id = who

    async def run_agent(stop: Any) -> None:
        await demo.agent(core, tenant_id, owner_id, stop)

    # The demo runs once per database (its runs are kept): say what this start will show.
    status = "new" if fresh else _demo_status(core, tenant_id)
    if status == "new":
        lines.append(
            "Demo: a run will ask for your approval in a few seconds. Sign in with the "
            f"sign-in link {sign_in}, then open the inbox."
        )
    elif status == "waiting":
        lines.append(
            "Demo: the demo run from an earlier start still waits for your approval. Sign "
            f"in with the sign-in link {sign_in}, then open the inbox."
        )
    else:
        again = (
            "start on a new database"
            if core.db.is_postgres
            else f"stop the server, delete {_shown_dir(core.settings.data_dir)} and start again"
        )
        lines.append(
            "Demo: it ran on the first start of this database (once per database); its "
            f"runs are still in the inbox. To see it again, {again}."
        )
    return [run_agent], [demo.sink_router(core, state)], lines


def _demo_status(core: Any, tenant_id: str) -> str:
    """``new`` (the demo never ran here), ``waiting`` (its approval request is still
    pending) or ``ran`` (it ran on an earlier start)."""
    from runbell import demo
    from runbell.domain.errors import NotFound
    from runbell.domain.principal import Principal
    from runbell.flows import input_requests, runs

    who = Principal(tenant_id=tenant_id, kind="key", role="runtime")
    try:
        runs.get_run(core, who, demo.RUN_ID)
    except NotFound:
        return "new"
    try:
        found = input_requests.get_request(core, who, demo.REQUEST_ID)
    except NotFound:
        return "ran"
    return "waiting" if found["actionable"] else "ran"


def _shown_dir(path: Any) -> str:
    """The data directory as a person types it here: ``./data``, or its absolute path."""
    import shlex
    from pathlib import Path

    text = str(path)
    return shlex.quote(text if Path(text).is_absolute() else f"./{text}")


#: INFO lines, one per item, that `make run` (serve --demo at the default log level) leaves
#: out: the demo writes dozens in its first seconds, burying the first start's text. The
#: trail and the feed are their record; RUNBELL_LOG_LEVEL=INFO shows them.
_PER_ITEM = frozenset({"run.created", "run.claimed", "input_request.opened"})


def _newcomer_noise(method_name: str, event: Any) -> bool:
    if method_name != "info":
        return False
    name = event.get("event")
    accepted = name == "delivery.attempted" and event.get("outcome") == "accepted"
    return accepted or name in _PER_ITEM


@commands.command(
    HOST,
    PORT,
    Flag("--scheduler/--no-scheduler", "run the scheduler in this process"),
    Flag("--deliver/--no-deliver", "run a delivery worker in this process"),
    Flag("--demo/--no-demo", "a simulated agent run that asks you for approval"),
)
def serve(
    host: str = "127.0.0.1",
    port: int = 8080,
    scheduler: bool = True,
    deliver: bool = True,
    demo: bool = False,
) -> None:
    """Run the API, a worker and the scheduler in one process.

    The API, the web app, a delivery worker and the scheduler; SQLite in RUNBELL_DATA_DIR
    unless RUNBELL_DATABASE_URL names a database. The first start creates the first
    tenant, its keys and user."""
    import sys

    # First: a bad setting is refused in ~0.1 s of CPU, before the server's imports below
    # (a second of CPU); tests/acceptance/test_server_start.py checks what it loads.
    settings = common.settings()

    from runbell.api.routers.health import metrics_refusal
    from runbell.app import create_app, record_served_url
    from runbell.cli.welcome import login_commands, sign_in_text, welcome_text
    from runbell.dispatch.scheduler import Scheduler
    from runbell.dispatch.wiring import build_channels
    from runbell.dispatch.worker import Worker
    from runbell.domain.errors import RunbellError
    from runbell.flows.accounts import bootstrap_if_empty, login_link_token
    from runbell.logging import configure

    # `make run` at the default log level: without the per-item lines that would bury
    # what this start prints (RUNBELL_LOG_LEVEL=INFO shows them).
    quiet = demo and "log_level" not in settings.model_fields_set
    configure(
        json=settings.log_json,
        level=settings.log_level,
        drop=_newcomer_noise if quiet else None,
    )
    sock = _listen(host, port)
    served = _served_url(host, sock.getsockname()[1])
    # Links in alerts and the welcome text point at RUNBELL_PUBLIC_URL when it is set,
    # else at where this server really listens; recorded for commands run elsewhere.
    given = "public_url" in settings.model_fields_set
    base = settings.public_url.rstrip("/") if given else served
    # Secrets and sign-in links go to a terminal only, never to a journal or a log.
    tty = sys.stdout.isatty()

    def start() -> tuple[Any, Any, bool, str | None]:
        core = common.core(settings)
        try:
            core.settings.public_url = base
            record_served_url(core.db, base)
            first = bootstrap_if_empty(core, settings.first_user_email)
            known = first is None and _has_default_tenant(core)  # a restart
            link = None
            if known and tty:
                try:
                    link = f"{base}/auth/{login_link_token(core.db, 'default', None)}"
                except RunbellError:
                    link = None  # no owner left to sign in as: the commands say the rest
        except BaseException:
            core.db.dispose()
            raise
        return core, first, known, link

    core, first, restart, link = common.when_reachable(settings, start)
    # Printed once the port accepts connections, in this order; the first start's secrets
    # last, so nothing logged while the server starts scrolls them away.
    later = login_commands(settings, first.user_email if first else None)
    welcome = secrets_note = None
    if first is not None:
        text = welcome_text(first, base, later)
        if tty:
            welcome = text
        else:
            secrets_note = _keep_secrets(settings, first, text, core.db.clock())
    if restart and not link:
        sign_in = "that the command below prints"
    else:
        sign_in = "below" if tty else "in the file named below"
    sched = Scheduler(core)
    if scheduler:
        sched.start()
    background: list[Any] = []
    routers: list[Any] = []
    demo_lines: list[str] = []
    if demo:
        background, routers, demo_lines = _demo(core, base, first is not None, sign_in)
    worker = Worker(core, build_channels(core)) if deliver else None
    banner = [
        f"Runbell listening on {served}  (database: {core.db.dialect})"
        + (f"; links use {base} (RUNBELL_PUBLIC_URL)" if base != served else "")
        + ". Ctrl-C stops it."
    ]
    if metrics_refusal(host, core.settings.metrics_token):
        banner.append(
            f"/metrics is off: listening on {host or '*'} without RUNBELL_METRICS_TOKEN "
            "(set it to scrape with a bearer token)"
        )
    banner += demo_lines
    if link:
        banner.append(sign_in_text(link, later).rstrip("\n"))
    elif restart or (first is not None and not tty):
        lines = "\n  ".join(later)
        banner.append(f"A new browser sign-in link, from another terminal here:\n  {lines}")
    if secrets_note:
        banner.append(f"\n{secrets_note}")  # set apart: the one line to act on
    shown = []

    def announce() -> None:
        for block in banner:
            out.print(block, markup=False, highlight=False)
        if welcome:
            out.print(welcome, markup=False, highlight=False)
        shown.append(True)

    from runbell.flows.feed import end_streams

    try:
        _serve(
            create_app(
                core, worker=worker, background=background, routers=routers, listen_host=host
            ),
            sock,
            lambda: end_streams(core),
            announce,
            host=host,
            port=sock.getsockname()[1],
            log_level="warning",
            timeout_graceful_shutdown=5,
        )
    finally:
        if welcome and not shown:  # never listened: the secrets are still shown, once
            out.print(welcome, markup=False, highlight=False)
        sched.stop()
        core.db.dispose()


def _keep_secrets(settings: Any, first: Any, text: str, now: Any) -> str | None:
    """Write the first start's ``text`` to its private file; what stdout says instead."""
    from runbell.cli.welcome import secrets_file_note, write_secrets

    try:
        path = write_secrets(settings.data_dir, first, text, now.isoformat(timespec="seconds"))
    except OSError as exc:
        err.print(
            f"runbell: cannot write the first start's secrets to {settings.data_dir}: "
            f"{exc.strerror or exc}. They are not printed (stdout is not a terminal); make "
            "new ones: runbell key create --tenant default --role admin (or --role "
            "runtime), runbell user login-link --tenant default.",
            markup=False,
            highlight=False,
        )
        return None
    return secrets_file_note(path)


def _has_default_tenant(core: Any) -> bool:
    """Whether the tenant the first start creates (named ``default``) is there."""
    from runbell.flows import accounts

    return accounts.has_tenant(core.db, "default")


@commands.command(HOST, PORT)
def api(host: str = "127.0.0.1", port: int = 8080) -> None:
    """Run the API alone (no worker, no scheduler).

    To scale out: N api replicas next to M `runbell worker` processes on one PostgreSQL."""
    serve(host=host, port=port, scheduler=False, deliver=False)


@commands.command(
    Flag("--scheduler/--no-scheduler", "also run the scheduler sweeps"),
    Option(
        "--metrics-port", "serve this worker's /metrics on 127.0.0.1:PORT", metavar="PORT", type=int
    ),
)
def worker(scheduler: bool = False, metrics_port: int | None = None) -> None:
    """Run a delivery worker alone.

    Several may share one PostgreSQL; each delivery goes out once. Stops cleanly on
    SIGTERM or SIGINT (in-flight sends finish first)."""
    settings = common.settings()  # first, as in serve: a bad setting costs no imports

    import asyncio
    import signal

    from runbell.app import links_base, start_wakeups
    from runbell.dispatch.scheduler import Scheduler
    from runbell.dispatch.wiring import build_channels
    from runbell.dispatch.worker import Worker
    from runbell.logging import configure

    configure(json=settings.log_json, level=settings.log_level)

    def start() -> Any:
        core = common.core(settings)
        try:
            # Links in alerts: RUNBELL_PUBLIC_URL, else where `runbell serve` last served.
            core.settings.public_url = links_base(settings, core.db)
        except BaseException:
            core.db.dispose()
            raise
        return core

    core = common.when_reachable(settings, start)  # waits out a database still starting
    sched = Scheduler(core)
    if scheduler:
        sched.start()
    bridge = start_wakeups(core, settings.listen_database_url)
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
