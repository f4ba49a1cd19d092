"""Calling the host's helpdesk API as the member.

The toolkit's resources are one `httpx.AsyncClient` (made by its startup hook, pointed at the API's
base URL, following no redirects). `call_api` sends the member's own token with every request, as
`Authorization: Bearer <token>`: the API decides what that user may see and do, exactly as it does
for the host's own pages. What goes wrong becomes a `ToolFailure` the model can act on:

    404                     not_found     (hint: find the ticket first)
    401, 403                forbidden     (the token is refused / the user may not do that)
    400, 422                invalid_arguments, with the API's own explanation
    408, 429, 5xx, timeout,
    connection refused      unavailable   (retryable)

The token is never put in a message, an error or a log line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from vernis.tools import ToolContext, ToolFailure, trace_headers

__all__ = ["FIND_HINT", "HelpdeskContext", "call_api"]

HelpdeskContext = ToolContext[httpx.AsyncClient]

FIND_HINT = "Use find_tickets to find the ticket's id."
_MAX_DETAIL = 300
_RETRY_LATER = "Try once more; if it fails again, tell the user the helpdesk is unavailable right now."


async def call_api(
    ctx: HelpdeskContext,
    method: str,
    path: str,
    *,
    params: Mapping[str, str | int] | None = None,
    json: Mapping[str, Any] | None = None,
) -> Any:
    """The API's JSON answer to `method path`, asked as the member. Raises `ToolFailure`."""
    if not ctx.token:
        raise ToolFailure("forbidden", "There is no user token to call the helpdesk with.")
    try:
        response = await ctx.resources.request(
            method,
            path,
            params=params,
            json=json,
            # The helpdesk joins the answer's trace (SPEC §22) when Vernis sends traces.
            headers={"Authorization": f"Bearer {ctx.token}", **trace_headers()},
        )
    except httpx.TimeoutException:
        raise ToolFailure(
            "unavailable", "The helpdesk did not answer in time.", retryable=True, hint=_RETRY_LATER
        ) from None
    except httpx.TransportError:
        raise ToolFailure(
            "unavailable", "The helpdesk cannot be reached.", retryable=True, hint=_RETRY_LATER
        ) from None
    if not response.is_success:
        raise _failure(response)
    try:
        return response.json()
    except ValueError:
        raise ToolFailure(
            "unavailable", "The helpdesk answered with something that is not JSON.", retryable=True
        ) from None


def _failure(response: httpx.Response) -> ToolFailure:
    status = response.status_code
    if status == 404:
        return ToolFailure(
            "not_found", _detail(response) or "The helpdesk has no such ticket.", hint=FIND_HINT
        )
    if status == 401:
        return ToolFailure(
            "forbidden",
            "The helpdesk did not accept this user's sign-in (it may have expired).",
            hint="Tell the user to reload the page to sign in again.",
        )
    if status == 403:
        return ToolFailure(
            "forbidden",
            "The helpdesk does not allow this user to do that.",
            hint="Tell the user they lack the permission in the helpdesk; do not retry.",
        )
    if status in (400, 422):
        detail = _detail(response) or "The helpdesk refused the request."
        return ToolFailure("invalid_arguments", detail, hint="Fix the arguments and call again.")
    if status in (408, 429) or status >= 500:
        return ToolFailure(
            "unavailable", f"The helpdesk is unavailable (HTTP {status}).", retryable=True, hint=_RETRY_LATER
        )
    return ToolFailure("upstream_error", f"The helpdesk answered HTTP {status}.")


def _detail(response: httpx.Response) -> str | None:
    """The API's own explanation (`{"error": {"message"}}`), shortened; None when it gave none."""
    try:
        body = response.json()
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return message[:_MAX_DETAIL] if isinstance(message, str) and message else None
