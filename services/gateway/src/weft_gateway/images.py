"""Images of a chat request (SPEC E-26): what the gateway accepts, with a 400 that says why.

An image is an ``https://`` URL or a ``data:image/<type>;base64,`` URI. The limits are
settings; the defaults keep the whole ``ChatRequested`` command under Kafka's default
1 MiB record size, which is why big images should be sent as URLs. A data URI is decoded
and its first bytes must be the signature of its declared type, so a text file renamed
``image/png`` is refused here rather than by the model.
"""

from __future__ import annotations

import binascii
from base64 import b64decode
from urllib.parse import urlsplit

from fastapi import HTTPException
from weft_contracts import AgentConfig

from weft_gateway.settings import GatewaySettings

SIGNATURES: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),  # then 4 size bytes and "WEBP", checked below
}
"""The media types accepted in data URIs and the bytes their files start with."""
MAX_URL_CHARS = 2048


def check_images(images: list[str], settings: GatewaySettings) -> list[str]:
    """The request's images if every one is acceptable; else a 400 naming the first fault."""
    if len(images) > settings.chat_image_max_count:
        raise HTTPException(
            400, f"too many images: {len(images)} (at most {settings.chat_image_max_count})"
        )
    total = sum(len(image) for image in images)
    if total > settings.chat_images_max_total_chars:
        raise HTTPException(
            400,
            f"images too large: {total} characters in all (at most "
            f"{settings.chat_images_max_total_chars}); send large images as https URLs",
        )
    for index, image in enumerate(images):
        _check_one(index, image, settings.chat_image_max_bytes)
    return images


def require_image_upload(agent: AgentConfig, images: list[str]) -> None:
    """SPEC E-26: images go only to an agent whose image upload is on (400 otherwise)."""
    if images and not agent.image_upload_enabled:
        raise HTTPException(
            400, f"agent {agent.agent_id!r} does not accept images (image_upload_enabled is off)"
        )


def _check_one(index: int, image: str, max_bytes: int) -> None:
    where = f"images[{index}]"
    if image.startswith("https://"):
        _check_url(where, image)
    elif image.startswith("data:"):
        _check_data_uri(where, image, max_bytes)
    else:
        raise HTTPException(
            400, f"{where}: unsupported reference; use an https:// URL or a data:image/... URI"
        )


def _check_url(where: str, url: str) -> None:
    if len(url) > MAX_URL_CHARS:
        raise HTTPException(400, f"{where}: URL longer than {MAX_URL_CHARS} characters")
    parts = urlsplit(url)
    if not parts.hostname or any(ch.isspace() for ch in url):
        raise HTTPException(400, f"{where}: not a valid https URL")


def _check_data_uri(where: str, uri: str, max_bytes: int) -> None:
    header, comma, payload = uri.partition(",")
    media_type, _, encoding = header.removeprefix("data:").partition(";")
    media_type = media_type.strip().lower()
    if not comma or encoding.strip().lower() != "base64":
        raise HTTPException(400, f"{where}: a data URI must be data:image/<type>;base64,<data>")
    if media_type not in SIGNATURES:
        accepted = ", ".join(sorted(SIGNATURES))
        raise HTTPException(
            400, f"{where}: {media_type or 'no media type'} is not an accepted image type "
            f"({accepted})",
        )  # fmt: skip
    if len(payload) > (max_bytes + 2) // 3 * 4:
        raise HTTPException(400, f"{where}: image larger than {max_bytes} bytes")
    try:
        data = b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise HTTPException(400, f"{where}: the data is not valid base64") from None
    if not data:
        raise HTTPException(400, f"{where}: the image is empty")
    if not _has_signature(media_type, data):
        raise HTTPException(400, f"{where}: the data is not a {media_type} image")


def _has_signature(media_type: str, data: bytes) -> bool:
    if not data.startswith(SIGNATURES[media_type]):
        return False
    return media_type != "image/webp" or data[8:12] == b"WEBP"
