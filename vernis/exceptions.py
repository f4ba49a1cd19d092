"""Every exception Vernis raises on purpose, split by who must react.

    VernisError
    ├── ClientError                 the client broke the protocol: an `error` event, the socket stays
    │   ├── InvalidMessage          malformed frame, unknown type, bad field  (invalid_message)
    │   ├── MessageTooLong          content over 8,000 characters             (message_too_long)
    │   ├── RateLimited             over a rate limit                         (rate_limited)
    │   │   └── QuotaExceeded       over a token quota (SPEC §15)             (quota_exceeded)
    │   ├── ResponseInProgress      an answer already streams here            (response_in_progress)
    │   ├── NotFound                no such conversation for this member      (not_found)
    │   ├── Unavailable             the database or Redis is down; try again  (unavailable)
    │   ├── Forbidden               the member may not do this                (forbidden)
    │   └── MessageBlocked          a guard stopped the message (vernis.guards) (message_blocked)
    ├── AuthError                   the handshake is refused (HTTP 403), or the socket closed (4401)
    └── LLMError                    the operator must react: the model endpoint misbehaves
        ├── LLMNotConfigured        no model endpoint reachable at all        (llm_not_configured)
        └── LLMUnavailable          upstream fault                            (llm_unavailable)
            ├── LLMNotStarted       no first chunk within the stall timeout (retried)
            ├── LLMStalled          no chunk within the stall timeout, mid-answer
            └── LLMTruncated        the stream ended without a finish_reason

Apart from that tree, `ConfigError` stops the start: the configuration (settings, the host
configuration file, a toolkit) cannot work, and its message names the setting, file or key to fix.

`code` is the wire error code; `public_message` is the only text a user ever sees: never `str()` of
an arbitrary exception, which may carry SQL, stack details or another tenant's data.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "AuthError",
    "ClientError",
    "ConfigError",
    "Forbidden",
    "InvalidMessage",
    "LLMError",
    "LLMNotConfigured",
    "LLMNotStarted",
    "LLMStalled",
    "LLMTruncated",
    "LLMUnavailable",
    "MessageBlocked",
    "MessageTooLong",
    "NotFound",
    "QuotaExceeded",
    "RateLimited",
    "ResponseInProgress",
    "Unavailable",
    "VernisError",
]


class ConfigError(ValueError):
    """Vernis cannot start as configured; the message names the setting, file or key and the fix."""


class VernisError(Exception):
    code = "internal"
    default_message = "Something went wrong on the server."

    def __init__(self, public_message: str | None = None) -> None:
        self.public_message = public_message or self.default_message
        super().__init__(self.public_message)


class ClientError(VernisError):
    pass


class InvalidMessage(ClientError):
    code = "invalid_message"
    default_message = "The message is not a valid Vernis command."


class MessageTooLong(ClientError):
    code = "message_too_long"
    default_message = "The message is too long."


class RateLimited(ClientError):
    code = "rate_limited"
    default_message = "Too many messages; wait a moment before sending another."

    def __init__(self, retry_after_ms: int, public_message: str | None = None) -> None:
        super().__init__(public_message)
        self.retry_after_ms = retry_after_ms


class QuotaExceeded(RateLimited):
    """A token quota is used up (SPEC §15): the message was neither stored nor sent to the model.
    `scope` is "member" (per day) or "organization" (per month); `reset_at` is ISO 8601 UTC."""

    code = "quota_exceeded"
    default_message = "The assistant's allowance is used up for now."

    def __init__(
        self,
        retry_after_ms: int,
        *,
        scope: Literal["member", "organization"],
        limit: int,
        used: int,
        reset_at: str,
        public_message: str,
    ) -> None:
        super().__init__(retry_after_ms, public_message)
        self.scope = scope
        self.limit = limit
        self.used = used
        self.reset_at = reset_at


class ResponseInProgress(ClientError):
    code = "response_in_progress"
    default_message = "An answer is still being written in this conversation."


class NotFound(ClientError):
    code = "not_found"
    default_message = "No such conversation."


class Unavailable(ClientError):
    """A shared service (the database, Redis) cannot be reached: nothing was done; the client may
    try again, and service returns by itself when the dependency is back."""

    code = "unavailable"
    default_message = "The assistant is briefly unavailable; nothing was lost. Try again in a moment."


class Forbidden(ClientError):
    code = "forbidden"
    default_message = "You are not allowed to do that."


class MessageBlocked(ClientError):
    """A guard stopped a user message: nothing was stored or sent; the message says why."""

    code = "message_blocked"
    default_message = "Your message was not sent: it contains data the assistant may not receive."


class AuthError(VernisError):
    code = "forbidden"
    default_message = "Not authenticated."


class LLMError(VernisError):
    # `public_message` is for the operator (it names the setting to check) and goes to the logs; a
    # user of the panel is told this plain sentence instead.
    user_message = "The assistant could not answer just now. Please try again."


class LLMNotConfigured(LLMError):
    code = "llm_not_configured"
    default_message = "No language model is configured: set VERNIS_LLM_BASE_URL (and VERNIS_LLM_MODEL)."
    user_message = "The assistant is not available right now. Please try again later."


class LLMUnavailable(LLMError):
    """An upstream fault. `retryable` faults are retried while nothing has been streamed yet."""

    code = "llm_unavailable"
    default_message = "The language model is unavailable right now; try again shortly."

    def __init__(
        self,
        public_message: str | None = None,
        *,
        retryable: bool = True,
        retry_after: float | None = None,
        detail: str = "",
    ) -> None:
        super().__init__(public_message)
        self.retryable = retryable
        self.retry_after = retry_after
        # For logs only: upstream status, error type. Never sent to a client.
        self.detail = detail


class LLMNotStarted(LLMUnavailable):
    """The stream stalled before the answer began: retried like a 5xx (SPEC §9)."""

    default_message = "The language model did not start answering in time."


class LLMStalled(LLMUnavailable):
    default_message = "The language model stopped responding mid-answer."


class LLMTruncated(LLMUnavailable):
    default_message = "The language model's answer was cut off."
