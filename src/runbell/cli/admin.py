"""Administration: tenants and their policy, API keys, members (and their sign-in
links), and signal sources. Every secret a command makes is printed once."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from runbell.cli import common
from runbell.cli.common import err, out
from runbell.domain.errors import RunbellError

tenant_app = typer.Typer(help="Tenants and their policy.", no_args_is_help=True)
key_app = typer.Typer(help="API keys for runtimes and administrators.", no_args_is_help=True)
user_app = typer.Typer(help="People: members of a tenant.", no_args_is_help=True)
source_app = typer.Typer(
    help="Signal sources (trust, state readers, webhooks).", no_args_is_help=True
)


@tenant_app.command("create")
def tenant_create(name: str) -> None:
    """Create a tenant; prints its id and an admin API key (shown once)."""
    from runbell.flows import accounts

    core = common.core()
    try:
        tenant_id, secret = accounts.create_tenant(core, name)
    except RunbellError as exc:
        common.fail(exc)
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
    core = common.core()
    try:
        tenant_id = accounts.resolve_tenant(core.db, tenant)
        effective = policy.set_policy(core, tenant_id, doc or {})["effective"]
    except RunbellError as exc:
        common.fail(exc)
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

    core = common.core()
    try:
        key_id, secret = accounts.create_key(core, tenant, role, name=name, source_id=source)
    except RunbellError as exc:
        common.fail(exc)
    out.print(f"key id {key_id}\nkey    {secret}   (shown once)", highlight=False)


@key_app.command("revoke")
def key_revoke(key_id: str, tenant: Annotated[str, typer.Option()]) -> None:
    """Revoke an API key at once."""
    from runbell.flows import accounts

    core = common.core()
    try:
        accounts.revoke_key(core, tenant, key_id)
    except RunbellError as exc:
        common.fail(exc)
    out.print(f"revoked {key_id}")


@user_app.command("add")
def user_add(
    email: str,
    tenant: Annotated[str, typer.Option(help="tenant id or name")],
    role: Annotated[str, typer.Option(help="owner, admin or member")] = "member",
) -> None:
    """Add (or re-activate) a member; prints a user token once."""
    from runbell.flows import accounts

    core = common.core()
    try:
        _, user_id, token = accounts.add_member(core, tenant, email, role)
    except RunbellError as exc:
        common.fail(exc)
    out.print(f"user  {user_id} ({email}, {role})\ntoken {token}   (shown once)", highlight=False)


@user_app.command("revoke")
def user_revoke(email: str, tenant: Annotated[str, typer.Option(help="tenant id or name")]) -> None:
    """Revoke a membership and all its tokens, and withdraw their open notifications
    (queued deliveries cancelled, previews redacted). Effective on the next request."""
    from runbell.flows import accounts, members

    core = common.core()
    try:
        tenant_id, user_id = accounts.find_member(core.db, tenant, email)
        withdrawn = members.revoke_member(core, tenant_id, user_id)
    except RunbellError as exc:
        common.fail(exc)
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

    settings = common.settings()
    common.data_dir(settings)
    # The database alone: a sign-in link needs no secret key, so this works from any
    # terminal that reaches the database, whichever RUNBELL_SECRET_KEY it has.
    db = open_database(settings)
    try:
        token = accounts.login_link_token(db, tenant, email)
        base = links_base(settings, db)
    except RunbellError as exc:
        common.fail(exc)
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
    signing_secret: Annotated[
        str | None,
        typer.Option(
            envvar="RUNBELL_SIGNING_SECRET",
            show_envvar=True,
            help="the provider's own whsec_ secret (OpenAI makes one); better from the "
            "environment than on the command line",
        ),
    ] = None,
) -> None:
    """Register a source; a webhook source prints its signing secret once (unless the
    provider made it)."""
    from pydantic import ValidationError
    from rich.markup import escape

    from runbell.api.schemas import SourceCreate
    from runbell.flows import accounts
    from runbell.flows.sources import create_source

    core = common.core()
    try:
        body = SourceCreate.model_validate(
            {
                "name": name,
                "kind": kind,
                "mapper": mapper,
                "trust": trust,
                "reader": json.loads(reader) if reader else None,
                "signing_secret": signing_secret,
            }
        )
        tenant_id = accounts.resolve_tenant(core.db, tenant)
        res = create_source(core, tenant_id, body.model_dump()).content()
    except ValidationError as exc:
        # Field and message only: pydantic's own text echoes the input (keys, secrets).
        for problem in exc.errors(include_input=False, include_url=False):
            where = ".".join(str(p) for p in problem["loc"])
            err.print(f"[red]error:[/red] {escape(where)}: {escape(problem['msg'])}")
        raise typer.Exit(2) from exc
    except RunbellError as exc:
        common.fail(exc)
    json.dump(res, sys.stdout, indent=2)
    sys.stdout.write("\n")
