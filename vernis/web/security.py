"""Security headers for everything the web UI serves: pages, scripts, styles.

The Content-Security-Policy allows only the server's own scripts, styles, images and connections,
so that even markup that slipped past the client's sanitizer (model output is untrusted) can run no
script, load no foreign image and send nothing anywhere (images also come from the origins the
configuration lists in `[embed] image_origins`, those the panel shows too). `nosniff` makes
browsers trust the declared content types (a text file can never run as a script).

The policy governs the documents Vernis serves (the demo's pages), never a host's page that embeds
the assistant: a browser applies the CSP of the document, and the host's page is the host's. The
host's own CSP must let the assistant in (SPEC §11): `script-src`, `style-src` and `img-src` the
Vernis origin, `connect-src` it and its `wss:` (or `ws:`) form.

`PUBLIC_ASSET_HEADERS` go on the assistant's static files: a host page on another origin loads them
as module scripts, which browsers fetch in CORS mode. They are public and fetched without cookies,
so `*` gives nothing away; `Cross-Origin-Resource-Policy` lets in hosts that require it (COEP).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "CONTENT_SECURITY_POLICY",
    "PUBLIC_ASSET_HEADERS",
    "SECURITY_HEADERS",
    "SecurityHeaders",
    "content_security_policy",
    "security_headers",
]


def content_security_policy(image_origins: Sequence[str] = ()) -> str:
    """The policy of the documents Vernis serves; `image_origins` (the configuration's `[embed]
    image_origins`, checked origins) may serve images besides Vernis itself."""
    return "; ".join(
        (
            "default-src 'self'",
            "script-src 'self'",
            "style-src 'self'",
            " ".join(("img-src 'self' data:", *image_origins)),
            "connect-src 'self'",
            "font-src 'self'",
            "form-action 'self'",
            "frame-ancestors 'none'",
            "base-uri 'none'",
            "object-src 'none'",
        )
    )


def security_headers(image_origins: Sequence[str] = ()) -> dict[str, str]:
    return {
        "Content-Security-Policy": content_security_policy(image_origins),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin",
        "X-Frame-Options": "DENY",
    }


CONTENT_SECURITY_POLICY = content_security_policy()
SECURITY_HEADERS = security_headers()

PUBLIC_ASSET_HEADERS = {
    "Access-Control-Allow-Origin": "*",
    "Cross-Origin-Resource-Policy": "cross-origin",
}


class SecurityHeaders:
    """ASGI middleware: adds `headers` (by default `SECURITY_HEADERS`) to every HTTP response of the
    app it wraps, unless the response sets them itself."""

    def __init__(self, app: ASGIApp, headers: Mapping[str, str] = SECURITY_HEADERS) -> None:
        self.app = app
        self.headers = dict(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in self.headers.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
