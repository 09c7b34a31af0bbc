"""Sealing secrets at rest (webhook signing secrets, reader credentials) with Fernet."""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from runbell.domain.errors import RunbellError


class SecretBox:
    def __init__(self, key: str | bytes) -> None:
        raw = key if isinstance(key, bytes) else key.encode()
        self._fernet = Fernet(raw)
        self._key = raw

    def derive(self, purpose: str) -> bytes:
        """A key for ``purpose`` (e.g. signing push-action tokens), derived from this
        box's key with HMAC-SHA256: the sealing key itself is never used for anything
        else."""
        return hmac.new(self._key, b"runbell-derive:" + purpose.encode(), hashlib.sha256).digest()

    def seal(self, plaintext: str) -> str:
        return self._fernet.encrypt(plaintext.encode()).decode()

    def open(self, sealed: str) -> str:
        try:
            return self._fernet.decrypt(sealed.encode()).decode()
        except InvalidToken as exc:
            raise RunbellError("a stored secret cannot be opened with this secret key") from exc


def load_or_create_key(data_dir: Path) -> str:
    """The key in ``data_dir/secret.key``, created (mode 0600) on first use."""
    path = data_dir / "secret.key"
    if path.exists():
        return path.read_text().strip()
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = Fernet.generate_key().decode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key)
    return key
