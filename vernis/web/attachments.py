"""Attachments over HTTP (SPEC §21), authenticated like the rest of the API (a Bearer token or the
`vernis_token` cookie).

- `POST /api/assistant/attachments`: one file, multipart (`file` field), streamed to the store as it
  arrives. 201 with {attachment_id, name, media_type, size, kind}. 413 past
  `VERNIS_ATTACHMENT_MAX_BYTES`, 415 for a type that is not accepted (sniffed from the bytes), 429
  over the member's `VERNIS_ATTACHMENT_QUOTA_BYTES` with the quota fields of SPEC §15 (`scope`
  "member", `limit`, `used`; `reset_at` null: deleting conversations frees the space).
- `GET /api/assistant/attachments/{id}`: the member's own file (another's, like an unknown one,
  is 404), `Content-Disposition: attachment` except for images, `nosniff`, and a policy that runs
  nothing even if a browser were to show it.
- `DELETE /api/assistant/attachments/{id}`: the member's own file that no message carries (one
  removed from the composer before sending), 204; one a message carries is 409 `in_use` (it goes
  with its conversation).

A panel embedded in a page on an origin of `VERNIS_ALLOWED_ORIGINS` uploads and downloads
cross-origin with its `Authorization` header (the preflight is answered), never with cookies.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote
from uuid import UUID

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from vernis.attachments import AttachmentService, OverQuota, UploadRefused, receive
from vernis.identity import Identity
from vernis.runtime import Services
from vernis.web.api import NO_STORE, allowed_origin, authenticated, error_response

__all__ = ["attachment_routes"]

logger = logging.getLogger("vernis.attachments")

# A refused upload is read to its end (a client that is still sending would otherwise see its
# connection reset instead of the answer), up to this much more than the limit.
DRAIN_SLACK = 1024 * 1024


def _service(request: Request) -> AttachmentService:
    services: Services = request.state.services
    assert services.attachments is not None, "the app sets the attachments"
    return services.attachments


async def upload(request: Request) -> Response:
    identity = await authenticated(request)
    if isinstance(identity, Response):
        return identity
    services: Services = request.state.services
    attachments = _service(request)
    member = identity.member
    max_bytes = services.settings.attachment_max_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes + DRAIN_SLACK:
        return error_response(413, "too_large", _too_large(max_bytes))
    allowance = await attachments.allowance(member.id, member.organization_id)
    try:
        received = await receive(
            request.stream(),
            request.headers.get("content-type", ""),
            attachments.store,
            max_bytes=max_bytes,
            allowance=allowance,
        )
        info = await attachments.add(member.id, member.organization_id, received)
    except UploadRefused as refused:
        return await _drained(request, refused, identity, max_bytes)
    except OverQuota:
        return await _drained(request, UploadRefused(429, "quota_exceeded", ""), identity, max_bytes)
    except ClientDisconnect:
        logger.info("an upload was cut off by its client: nothing stored")
        return Response(status_code=400)
    logger.info("attachment stored", extra={"media_type": info.media_type, "size": info.size})
    return JSONResponse(info.wire(), status_code=201, headers=NO_STORE)


async def _drained(request: Request, refused: UploadRefused, identity: Identity, max_bytes: int) -> Response:
    read = 0
    try:
        async for chunk in request.stream():
            read += len(chunk)
            if read > max_bytes + DRAIN_SLACK:
                break
    except (ClientDisconnect, RuntimeError):  # gone, or the body was already read to its end
        pass
    return await _quota_answer(request, refused, identity)


async def _quota_answer(request: Request, refused: UploadRefused, identity: Identity) -> Response:
    if refused.status != 429:
        return error_response(refused.status, refused.code, refused.message, **refused.fields)
    attachments = _service(request)
    member = identity.member
    used = await attachments.used(member.id, member.organization_id)
    limit = attachments.quota_bytes
    fields: dict[str, Any] = {"scope": "member", "limit": limit, "used": used, "reset_at": None}
    message = (
        f"Your attachments use {_mib(used)} of your {_mib(limit)}: this file does not fit. "
        "Deleting conversations with attachments frees space."
    )
    return error_response(429, "quota_exceeded", message, **fields)


async def download(request: Request) -> Response:
    identity = await authenticated(request)
    if isinstance(identity, Response):
        return identity
    attachments = _service(request)
    member = identity.member
    try:
        attachment_id = UUID(request.path_params["attachment_id"])
    except ValueError:
        return _not_found()
    info = await attachments.get(attachment_id, member.id, member.organization_id)
    if info is None:
        return _not_found()
    chunks = attachments.read(info)
    try:
        first = await anext(chunks, b"")
    except FileNotFoundError:
        logger.error("an attachment's stored file is missing", extra={"attachment_id": str(info.id)})
        return _not_found()

    async def body() -> Any:
        yield first
        async for chunk in chunks:
            yield chunk

    disposition = "inline" if info.kind == "image" else "attachment"
    fallback = info.name.encode("ascii", "replace").decode().replace('"', "'").replace("?", "_")
    media_type = f"{info.media_type}; charset=utf-8" if info.kind == "text" else info.media_type
    headers = {
        "Content-Disposition": f"{disposition}; filename=\"{fallback}\"; filename*=UTF-8''{quote(info.name)}",
        "Content-Length": str(info.size),
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "default-src 'none'; sandbox",
        "Cache-Control": "private, no-cache",
        "Cross-Origin-Resource-Policy": "same-origin",
    }
    return StreamingResponse(body(), media_type=media_type, headers=headers)


async def delete(request: Request) -> Response:
    identity = await authenticated(request)
    if isinstance(identity, Response):
        return identity
    member = identity.member
    try:
        attachment_id = UUID(request.path_params["attachment_id"])
    except ValueError:
        return _not_found()
    deleted = await _service(request).delete_unsent(attachment_id, member.id, member.organization_id)
    if deleted is None:
        return _not_found()
    if not deleted:
        return error_response(
            409, "in_use", "This file was sent with a message: it is deleted with its conversation."
        )
    return Response(status_code=204, headers=NO_STORE)


async def file(request: Request) -> Response:
    return await (delete(request) if request.method == "DELETE" else download(request))


def _not_found() -> Response:
    return error_response(404, "not_found", "No such attachment.")


def _too_large(max_bytes: int) -> str:
    return f"The file is larger than {_mib(max_bytes)}, the most one upload may be."


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):g} MiB" if size >= 1024 * 1024 else f"{size:,} bytes"


PREFLIGHT = {
    "Access-Control-Allow-Methods": "GET, POST, DELETE",
    "Access-Control-Allow-Headers": "Authorization",
    "Access-Control-Max-Age": "600",
}


def _cors(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """`handler` answering cross-origin callers of `VERNIS_ALLOWED_ORIGINS` (and their preflight)."""

    async def endpoint(request: Request) -> Response:
        origin = allowed_origin(request)
        cors = {"Vary": "Origin"}
        if origin is not None:
            cors |= {
                "Access-Control-Allow-Origin": origin,
                "Access-Control-Expose-Headers": "Content-Disposition",
            }
        if request.method == "OPTIONS":
            return Response(status_code=204, headers=cors if origin is None else cors | PREFLIGHT)
        response = await handler(request)
        response.headers.update(cors)
        return response

    return endpoint


def attachment_routes() -> list[BaseRoute]:
    return [
        Route("/api/assistant/attachments", _cors(upload), methods=["POST", "OPTIONS"]),
        Route(
            "/api/assistant/attachments/{attachment_id}", _cors(file), methods=["GET", "DELETE", "OPTIONS"]
        ),
    ]
