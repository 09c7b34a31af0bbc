"""Administration: tenants and their policy, API keys, members (and their sign-in
links), signal sources, and a new secret key. Every secret a command makes is printed
once."""

# No ``from __future__ import annotations`` in the command modules: Typer would then
# eval every parameter's annotation string when `runbell` starts (runbell.cli.common).
import json
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from runbell.cli import common
from runbell.cli.common import Command, err, out
from runbell.domain.errors import NotFound, RunbellError

tenant_app = common.group("Tenants and their policy.")
key_app = common.group("API keys for runtimes and administrators.")
user_app = common.group("People: members of a tenant.")
source_app = common.group("Signal sources (trust, state readers, webhooks).")

Tenant = Annotated[str, typer.Option(metavar="TENANT", help="the tenant's id or name")]


def secret_key() -> None:
    """Print a new RUNBELL_SECRET_KEY value (a Fernet key).

    32 random bytes, url-safe base64: the key that seals stored secrets (webhook signing
    secrets, reader credentials). Keep it with the database's backups: without it they
    cannot be opened. Example: RUNBELL_SECRET_KEY=$(runbell secret-key)."""
    import base64
    import os

    # Exactly what cryptography's Fernet.generate_key() makes (config.py checks it).
    print(base64.urlsafe_b64encode(os.urandom(32)).decode())


@tenant_app.command("create", cls=Command)
def tenant_create(
    name: Annotated[str, typer.Argument(help="a name, unique on this server")],
) -> None:
    """Create a tenant; prints its id and an admin API key (shown once)."""
    from runbell.flows import accounts

    core = common.core()
    try:
        tenant_id, secret = accounts.create_tenant(core, name)
    except RunbellError as exc:
        common.fail(exc)
    out.print(f"tenant    {tenant_id}\nadmin key {secret}   (shown once)", highlight=False)


@tenant_app.command("policy", cls=Command)
def tenant_policy(
    file: Annotated[
        Path,
        typer.Argument(exists=True, dir_okay=False, readable=True, help="a .toml or .yaml file"),
    ],
    tenant: Tenant,
) -> None:
    """Set a tenant's attention rules from a TOML or YAML file.

    The rules are put before the defaults (docs/policy.md)."""
    import tomllib

    import yaml

    from runbell.flows import accounts, policy

    text = file.read_text()
    try:
        doc = yaml.safe_load(text) if file.suffix in (".yaml", ".yml") else tomllib.loads(text)
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        common.fail(f"cannot parse {file}: {exc}", "see docs/policy.md for the format")
    core = common.core()
    try:
        tenant_id = accounts.resolve_tenant(core.db, tenant)
        effective = policy.set_policy(core, tenant_id, doc or {})["effective"]
    except RunbellError as exc:
        common.fail(exc)
    out.print(f"policy set: {len(effective)} rules, first: {effective[0]['id']}")


@key_app.command("create", cls=Command)
def key_create(
    tenant: Tenant,
    role: Annotated[str, typer.Option(metavar="ROLE", help="runtime or admin")] = "runtime",
    name: Annotated[str | None, typer.Option(metavar="LABEL", help="a label")] = None,
    source: Annotated[
        str | None, typer.Option(metavar="SOURCE_ID", help="bind signals to this source")
    ] = None,
) -> None:
    """Create an API key; prints it once."""
    from runbell.flows import accounts

    core = common.core()
    try:
        key_id, secret = accounts.create_key(core, tenant, role, name=name, source_id=source)
    except RunbellError as exc:
        common.fail(exc)
    out.print(f"key id {key_id}\nkey    {secret}   (shown once)", highlight=False)


@key_app.command("revoke", cls=Command)
def key_revoke(
    key_id: Annotated[str, typer.Argument(help="the key's id (key_…), not its secret")],
    tenant: Tenant,
) -> None:
    """Revoke an API key at once."""
    from runbell.flows import accounts

    core = common.core()
    try:
        accounts.revoke_key(core, tenant, key_id)
    except RunbellError as exc:
        common.fail(exc)
    out.print(f"revoked {key_id}")


@user_app.command("add", cls=Command)
def user_add(
    email: Annotated[str, typer.Argument(help="the person's email address")],
    tenant: Tenant,
    role: Annotated[str, typer.Option(metavar="ROLE", help="owner, admin or member")] = "member",
) -> None:
    """Add (or re-activate) a member; prints a user token once."""
    from runbell.flows import accounts

    core = common.core()
    try:
        _, user_id, token = accounts.add_member(core, tenant, email, role)
    except RunbellError as exc:
        common.fail(exc)
    out.print(f"user  {user_id} ({email}, {role})\ntoken {token}   (shown once)", highlight=False)


@user_app.command("revoke", cls=Command)
def user_revoke(
    email: Annotated[str, typer.Argument(help="the member's email or user id")],
    tenant: Tenant,
) -> None:
    """Revoke a membership and all its tokens.

    Their open notifications are withdrawn (queued deliveries cancelled, previews
    redacted). Effective on the next request."""
    from runbell.flows import accounts, members

    core = common.core()
    try:
        tenant_id, user_id = accounts.find_member(core.db, tenant, email)
        withdrawn = members.revoke_member(core, tenant_id, user_id)
    except RunbellError as exc:
        common.fail(exc)
    out.print(f"revoked {email}; withdrew {withdrawn} open notification(s)")


@user_app.command("login-link", cls=Command)
def user_login_link(
    tenant: Tenant,
    email: Annotated[
        str | None,
        typer.Argument(help="email or user id; default: the tenant's first owner"),
    ] = None,
) -> None:
    """Print a one-time browser sign-in link for a member.

    It works once, for 15 minutes. The link starts with RUNBELL_PUBLIC_URL when it is
    set, else with the address `runbell serve` last served on (its port included), so it
    opens that server."""
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
    except NotFound as exc:
        common.fail(exc, _login_link_hint(exc.detail, tenant, email))
    except RunbellError as exc:
        common.fail(exc)
    finally:
        db.dispose()
    # The same link as runbell.web.routes.sign_in_url builds.
    out.print(f"{base}/auth/{token}", markup=False, highlight=False)
    err.print("One use, valid for 15 minutes. Anyone holding it can sign in as this member.")


def _login_link_hint(detail: str, tenant: str, email: str | None) -> str | None:
    """What to do when there is nobody to sign in as (``make login-link`` lands here)."""
    from runbell.cli.welcome import this_command

    me = this_command()
    if detail.startswith("no member"):
        who = shlex.quote(email or "EMAIL")
        return f"add them first: {me} user add {who} --tenant {shlex.quote(tenant)}"
    if "no current owner" in detail:
        return f"name a member: {me} user login-link EMAIL --tenant {shlex.quote(tenant)}"
    return None


@source_app.command("create", cls=Command)
def source_create(
    name: Annotated[str, typer.Argument(help="a name for the source")],
    tenant: Tenant,
    kind: Annotated[str, typer.Option(metavar="KIND", help="webhook or api")] = "webhook",
    mapper: Annotated[
        str | None, typer.Option(metavar="MAPPER", help="generic or openai")
    ] = None,
    trust: Annotated[
        str, typer.Option(metavar="TRUST", help="authoritative or advisory")
    ] = "advisory",
    reader: Annotated[
        str | None, typer.Option(metavar="JSON", help="the state reader's config")
    ] = None,
    signing_secret: Annotated[
        str | None,
        typer.Option(
            metavar="SECRET",
            envvar="RUNBELL_SIGNING_SECRET",
            show_envvar=True,
            help="the provider's own whsec_ secret (OpenAI makes one); better from the "
            "environment than on the command line",
        ),
    ] = None,
) -> None:
    """Register a signal source.

    A webhook source prints its signing secret once (unless the provider made it)."""
    from pydantic import ValidationError

    from runbell.api.schemas import SourceCreate
    from runbell.flows import accounts
    from runbell.flows.sources import create_source

    try:
        reader_config = json.loads(reader) if reader else None
    except ValueError as exc:
        common.fail(f"--reader is not JSON: {exc}", "quote a JSON object: --reader '{…}'")
    core = common.core()
    try:
        body = SourceCreate.model_validate(
            {
                "name": name,
                "kind": kind,
                "mapper": mapper,
                "trust": trust,
                "reader": reader_config,
                "signing_secret": signing_secret,
            }
        )
        tenant_id = accounts.resolve_tenant(core.db, tenant)
        res = create_source(core, tenant_id, body.model_dump()).content()
    except ValidationError as exc:
        # Field and message only: pydantic's own text echoes the input (keys, secrets).
        for problem in exc.errors(include_input=False, include_url=False):
            where = ".".join(str(p) for p in problem["loc"])
            common.say(f"{where}: {problem['msg']}")
        raise typer.Exit(common.EXIT_REFUSED) from exc
    except RunbellError as exc:
        common.fail(exc)
    json.dump(res, sys.stdout, indent=2)
    sys.stdout.write("\n")
