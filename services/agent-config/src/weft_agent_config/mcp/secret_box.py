"""SecretBox: every MCP secret agent-config stores, encrypted with ``MultiFernet``.

``WEFT_MCP_SECRET_KEYS`` holds comma separated Fernet keys: the first encrypts, every one
decrypts. A key rollover is: put the new key first and keep the old one after it (both
valid), run the re-encrypt step (``POST /internal/mcp/reencrypt`` or ``python -m
weft_agent_config reencrypt-mcp``), then drop the old key.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet


class SecretsUnavailable(RuntimeError):
    """No key is configured (``WEFT_MCP_SECRET_KEYS``): MCP secrets can be neither stored
    nor read, so the MCP routes answer 503 rather than store anything in clear."""


class UnreadableSecret(ValueError):
    """A stored token no configured key opens (a key was dropped before re-encrypting)."""


def parse_keys(value: str) -> list[bytes]:
    """The keys of ``WEFT_MCP_SECRET_KEYS``; ValueError naming the position of a bad one."""
    keys = [part.strip().encode() for part in value.split(",") if part.strip()]
    for index, key in enumerate(keys):
        try:
            Fernet(key)
        except ValueError:
            raise ValueError(
                f"WEFT_MCP_SECRET_KEYS: key {index + 1} is not a Fernet key "
                "(32 url-safe base64-encoded bytes; make one with "
                "`python -c 'from cryptography.fernet import Fernet; "
                "print(Fernet.generate_key().decode())'`)"
            ) from None
    return keys


class SecretBox:
    """Encrypts with the first key, decrypts with any; ``rotate`` re-encrypts with the first."""

    def __init__(self, keys: list[bytes]):
        self._fernet = MultiFernet([Fernet(k) for k in keys]) if keys else None

    @classmethod
    def from_setting(cls, value: str) -> SecretBox:
        """The box of a ``WEFT_MCP_SECRET_KEYS`` value (empty: a box that refuses)."""
        return cls(parse_keys(value))

    @property
    def configured(self) -> bool:
        """Whether a key is set."""
        return self._fernet is not None

    def _box(self) -> MultiFernet:
        if self._fernet is None:
            raise SecretsUnavailable(
                "MCP secrets are not configured on this deployment (WEFT_MCP_SECRET_KEYS)"
            )
        return self._fernet

    def seal(self, plain: str) -> str:
        """A token of ``plain``."""
        return self._box().encrypt(plain.encode()).decode()

    def open(self, token: str) -> str:
        """The text of a token; :class:`UnreadableSecret` when no key opens it."""
        try:
            return self._box().decrypt(token.encode()).decode()
        except InvalidToken:
            raise UnreadableSecret(
                "a stored MCP secret cannot be decrypted with the configured keys"
            ) from None

    def seal_json(self, value: Any) -> str:
        """A token of ``value`` as compact JSON."""
        return self.seal(json.dumps(value, separators=(",", ":")))

    def open_json(self, token: str) -> Any:
        """The JSON value of a token."""
        return json.loads(self.open(token))

    def rotate(self, token: str) -> str:
        """The same secret encrypted with the first key (MultiFernet.rotate)."""
        try:
            return self._box().rotate(token.encode()).decode()
        except InvalidToken:
            raise UnreadableSecret(
                "a stored MCP secret cannot be decrypted with the configured keys"
            ) from None


DEV_KEY_FILE = "mcp-secret-keys"


def dev_keys(directory: Path) -> str:
    """Development only (``WEFT_CREDENTIALS_DEV_KEYS``): the key kept in ``directory``
    (the dev credentials folder), made at first start (mode 600), as the dev service
    credentials are. A deployment sets ``WEFT_MCP_SECRET_KEYS`` from a secret instead."""
    path = directory / DEV_KEY_FILE
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another replica made it first
        else:
            with os.fdopen(fd, "w") as out:
                out.write(Fernet.generate_key().decode() + "\n")
    return path.read_text().strip()
