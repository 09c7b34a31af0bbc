"""Administration: tenants and their policy, API keys, members (and their sign-in
links), signal sources, and a new secret key. Every secret a command makes is printed
once."""

from __future__ import annotations

import sys

from runbell.cli import common
from runbell.cli.common import err, out
from runbell.cli.specs import Argument, Commands, Flag, Group, Option, readable_file
from runbell.domain.errors import NotFound, RunbellError

TYPE_CHECKING = False  # not typing's, see runbell.cli.common
if TYPE_CHECKING:
    from pathlib import Path

commands = Commands()
tenants = Group("tenant", "Tenants and their policy.")
keys = Group("key", "API keys for runtimes and administrators.")
users = Group("user", "People: members of a tenant.")
sources = Group("source", "Signal sources (trust, state readers, webhooks).")

TENANT = Option("--tenant", "the tenant's id or name", metavar="TENANT")


@commands.command()
def secret_key() -> None:
    """Print a new RUNBELL_SECRET_KEY value (a Fernet key).

    32 random bytes, url-safe base64: the key that seals stored secrets (webhook signing
    secrets, reader credentials). Keep it with the database's backups: without it they
    cannot be opened. Example: RUNBELL_SECRET_KEY=$(runbell secret-key)."""
    import base64
    import os

    # Exactly what cryptography's Fernet.generate_key() makes (config.py checks it).
    print(base64.urlsafe_b64encode(os.urandom(32)).decode())


@tenants.command(Argument("name", "a name, unique on this server"), name="create")
def tenant_create(name: str) -> None:
    """Create a tenant; prints its id and an admin API key (shown once)."""
    from runbell.flows import accounts

    core = common.core()
    try:
        tenant_id, secret = accounts.create_tenant(core, name)
    except RunbellError as exc:
        common.fail(exc)
    out.print(f"tenant    {tenant_id}\nadmin key {secret}   (shown once)", highlight=False)


@tenants.command(
    Argument("file", "a .toml or .yaml file", type=readable_file), TENANT, name="policy"
)
def tenant_policy(file: Path, tenant: str) -> None:
    """Set a tenant's attention rules from a TOML or YAML file.

    The rules are put before the defaults (docs/policy.md)."""
    import tomllib
    from typing import cast

    import yaml

    from runbell.flows import accounts, policy

    if TYPE_CHECKING:
        from runbell.domain.policy import TenantPolicy

    text = file.read_text()
    try:
        doc = yaml.safe_load(text) if file.suffix in (".yaml", ".yml") else tomllib.loads(text)
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        common.fail(f"cannot parse {file}: {exc}", "see docs/policy.md for the format")
    core = common.core()
    try:
        tenant_id = accounts.resolve_tenant(core.db, tenant)
        # The file's document, checked whole by the flow as PUT /v1/policy is.
        effective = policy.set_policy(core, tenant_id, cast("TenantPolicy", doc or {}))["effective"]
    except RunbellError as exc:
        common.fail(exc)
    out.print(f"policy set: {len(effective)} rules, first: {effective[0]['id']}")


@keys.command(
    TENANT,
    Option("--role", "runtime or admin", metavar="ROLE"),
    Option("--name", "a label", metavar="LABEL"),
    Option("--source", "bind signals to this source", metavar="SOURCE_ID"),
    Option(
        "--capability",
        "limit a runtime key to this capability (repeatable): runs.report, "
        "operations.declare, operations.settle, runs.cancel, input_requests.create, "
        "runs.read, input_requests.answer (named only: never implied)",
        metavar="NAME",
        repeat=True,
    ),
    Option(
        "--runs", "limit it to run ids matching this glob (repeatable)", metavar="GLOB", repeat=True
    ),
    Flag("--own-runs", "limit it to the runs it creates"),
    name="create",
)
def key_create(
    tenant: str,
    role: str = "runtime",
    name: str | None = None,
    source: str | None = None,
    capability: list[str] | None = None,
    runs: list[str] | None = None,
    own_runs: bool = False,
) -> None:
    """Create an API key; prints it once.

    A runtime key may be scoped (recommended for agents): --capability, --runs and
    --own-runs each limit it; without them it holds every capability on every run."""
    from runbell.flows import accounts

    core = common.core()
    try:
        key_id, secret = accounts.create_key(
            core,
            tenant,
            role,
            name=name,
            source_id=source,
            capabilities=capability or None,
            run_patterns=runs or None,
            own_runs=bool(own_runs),
        )
    except RunbellError as exc:
        common.fail(exc)
    out.print(f"key id {key_id}\nkey    {secret}   (shown once)", highlight=False)


@keys.command(Argument("key_id", "the key's id (key_…), not its secret"), TENANT, name="revoke")
def key_revoke(key_id: str, tenant: str) -> None:
    """Revoke an API key at once."""
    from runbell.flows import accounts

    core = common.core()
    try:
        accounts.revoke_key(core, tenant, key_id)
    except RunbellError as exc:
        common.fail(exc)
    out.print(f"revoked {key_id}")


@users.command(
    Argument("email", "the person's email address"),
    TENANT,
    Option("--role", "owner, admin or member", metavar="ROLE"),
    name="add",
)
def user_add(email: str, tenant: str, role: str = "member") -> None:
    """Add (or re-activate) a member; prints a user token once."""
    from runbell.flows import accounts

    core = common.core()
    try:
        _, user_id, token = accounts.add_member(core, tenant, email, role)
    except RunbellError as exc:
        common.fail(exc)
    out.print(f"user  {user_id} ({email}, {role})\ntoken {token}   (shown once)", highlight=False)


@users.command(Argument("email", "the member's email or user id"), TENANT, name="revoke")
def user_revoke(email: str, tenant: str) -> None:
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


@users.command(
    TENANT,
    Argument("email", "email or user id; default: the tenant's first owner"),
    name="login-link",
)
def user_login_link(tenant: str, email: str | None = None) -> None:
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
    # The same link as runbell.flows.sessions.sign_in_url builds.
    out.print(f"{base}/auth/{token}", markup=False, highlight=False)
    err.print("One use, valid for 15 minutes. Anyone holding it can sign in as this member.")


def _login_link_hint(detail: str, tenant: str, email: str | None) -> str | None:
    """What to do when there is nobody to sign in as (``make login-link`` lands here)."""
    import shlex

    from runbell.cli.welcome import this_command

    me = this_command()
    if detail.startswith("no member"):
        who = shlex.quote(email or "EMAIL")
        return f"add them first: {me} user add {who} --tenant {shlex.quote(tenant)}"
    if "no current owner" in detail:
        return f"name a member: {me} user login-link EMAIL --tenant {shlex.quote(tenant)}"
    return None


@sources.command(
    Argument("name", "a name for the source"),
    TENANT,
    Option("--kind", "webhook or api", metavar="KIND"),
    Option("--mapper", "generic or openai", metavar="MAPPER"),
    Option("--trust", "authoritative or advisory", metavar="TRUST"),
    Option("--reader", "the state reader's config", metavar="JSON"),
    Option(
        "--signing-secret",
        "the provider's own whsec_ secret (OpenAI makes one); better from the environment "
        "than on the command line",
        metavar="SECRET",
        envvar="RUNBELL_SIGNING_SECRET",
    ),
    name="create",
)
def source_create(
    name: str,
    tenant: str,
    kind: str = "webhook",
    mapper: str | None = None,
    trust: str = "advisory",
    reader: str | None = None,
    signing_secret: str | None = None,
) -> None:
    """Register a signal source.

    A webhook source prints its signing secret once (unless the provider made it)."""
    import json
    from typing import cast

    from pydantic import ValidationError

    from runbell.api.responses import answer_json
    from runbell.api.schemas import SourceCreate
    from runbell.flows import accounts
    from runbell.flows.sources import create_source

    if TYPE_CHECKING:
        from runbell.flows.inputs import SourceBody

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
        fields = cast("SourceBody", body.model_dump())  # SourceCreate's fields
        res = answer_json(create_source(core, tenant_id, fields))
    except ValidationError as exc:
        # Field and message only: pydantic's own text echoes the input (keys, secrets).
        for problem in exc.errors(include_input=False, include_url=False):
            where = ".".join(str(p) for p in problem["loc"])
            common.say(f"{where}: {problem['msg']}")
        raise common.Exit(common.EXIT_REFUSED) from exc
    except RunbellError as exc:
        common.fail(exc)
    json.dump(res, sys.stdout, indent=2)
    sys.stdout.write("\n")
