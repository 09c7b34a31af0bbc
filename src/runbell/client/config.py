"""Where the client finds its server, key and owner.

Each of the three comes from, in order: the argument, the environment (``RUNBELL_URL``,
``RUNBELL_KEY``, ``RUNBELL_OWNER``), then the file ``runbell login`` writes —
``$RUNBELL_CONFIG`` if set, else ``$XDG_CONFIG_HOME/runbell/config.toml``, else
``~/.config/runbell/config.toml`` (mode 0600)::

    url = "http://127.0.0.1:8000"
    key = "rbk_…"
    owner = "you@example.com"
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runbell.client.errors import ConfigError

__all__ = ["ClientConfig", "config_path", "load_config", "write_config"]

ENV = {"url": "RUNBELL_URL", "key": "RUNBELL_KEY", "owner": "RUNBELL_OWNER"}


@dataclass(frozen=True)
class ClientConfig:
    url: str
    key: str
    owner: str | None = None


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    """The config file's path (it may not exist)."""
    env = os.environ if environ is None else environ
    if env.get("RUNBELL_CONFIG"):
        return Path(env["RUNBELL_CONFIG"]).expanduser()
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "runbell" / "config.toml"


def _read_file(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    return {k: str(v) for k, v in data.items() if k in ENV and v}


def load_config(
    url: str | None = None,
    key: str | None = None,
    owner: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    path: Path | None = None,
) -> ClientConfig:
    """Arguments, then the environment, then the file. Raises :class:`ConfigError`
    naming what is missing."""
    env = os.environ if environ is None else environ
    given = {"url": url, "key": key, "owner": owner}
    values: dict[str, str | None] = {}
    file_values: dict[str, str] | None = None
    for name, var in ENV.items():
        value = given[name] or env.get(var) or None
        if value is None:
            if file_values is None:
                file_values = _read_file(path or config_path(env))
            value = file_values.get(name)
        values[name] = value
    missing = [ENV[n] for n in ("url", "key") if not values[n]]
    if missing:
        raise ConfigError(
            f"{' and '.join(missing)} not set: export {' and '.join(missing)}, "
            "or run `runbell login`"
        )
    return ClientConfig(str(values["url"]).rstrip("/"), str(values["key"]), values["owner"])


def write_config(config: ClientConfig, path: Path | None = None) -> Path:
    """Write the file ``load_config`` reads, readable by its owner only (0600)."""
    target = path or config_path()
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    lines = [f"url = {json.dumps(config.url)}", f"key = {json.dumps(config.key)}"]
    if config.owner:
        lines.append(f"owner = {json.dumps(config.owner)}")
    # Created 0600 before the key is written, never widened afterwards.
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write("\n".join(lines) + "\n")
    return target
