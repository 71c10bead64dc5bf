"""What the HTTP clients share: one client per request, errors classified, secrets kept out.

Every provider reports a failure the same way (a `ModelError` whose status drives the
loop's retry policy, PROTOCOL §8), so reading an error response, its Retry-After and the
server's own message lives here once.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from contextlib import asynccontextmanager
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from ._base import ModelError
from ._sse import aiter_sse

__all__ = [
    "DEFAULT_TIMEOUT",
    "bearer_headers",
    "client_scope",
    "error_from_response",
    "json_instruction",
    "load_event",
    "open_stream",
    "parse_retry_after",
    "redact",
    "server_message",
    "transport_error",
    "typed_events",
]

# A long read timeout: the first token of a large prompt on a local model, or of a
# reasoning model, can take minutes, and the read timeout also bounds that wait.
DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=10.0)

_BODY_LIMIT = 4000  # characters of an error body kept on the exception
_MESSAGE_LIMIT = 500  # characters of a non-JSON error body put in the message


def _now() -> float:
    """Wall-clock seconds since the epoch; HTTP-dates are wall-clock (tests replace this)."""
    return time.time()


def parse_retry_after(headers: httpx.Headers) -> float | None:
    """Seconds the server asked us to wait, or None.

    `retry-after-ms` (sent by OpenAI) is more precise and wins; `Retry-After` is either
    delay-seconds or an HTTP-date, a date in the past meaning "now".
    """
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis)
        except ValueError:
            pass
        else:
            if value >= 0 and value == value:  # NaN is not a delay
                return value / 1000.0
    raw = headers.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        pass
    else:
        return seconds if seconds >= 0 and seconds == seconds else None
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000": UTC with no claim about local time
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - _now())


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """`text` with every secret replaced, for servers that echo the key back.

    A server may echo it JSON-escaped (`\\u0073\\u006b...`, `\\/`) or percent-encoded, and
    a key read from a file may carry a newline that an error message shows escaped: each
    character of the key (with and without surrounding whitespace) may appear in any of
    those forms. Redact before cutting a text, never after: a cut can leave a prefix.
    """
    for secret in secrets:
        if secret:
            for form in {secret, secret.strip()}:
                if form:
                    text = _secret_pattern(form).sub("***", text)
    return text


def clean_key(key: str | None) -> str | None:
    """An API key without surrounding whitespace (a key read from a file keeps its
    newline, which makes the header invalid and puts the key in the HTTP library's error)."""
    if key is None:
        return None
    return str(key).strip() or None


_JSON_SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


@functools.lru_cache(maxsize=64)
def _secret_pattern(secret: str) -> re.Pattern[str]:
    parts = []
    for character in secret:
        code = ord(character)
        forms = [re.escape(character)]
        if code < 0x10000:
            forms.append(re.escape(f"\\u{code:04x}"))
        else:
            high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
            forms.append(re.escape(f"\\u{high:04x}\\u{low:04x}"))
        if character in _JSON_SHORT:
            forms.append(re.escape(_JSON_SHORT[character]))
        if code < 0x80:
            forms.append(f"%{code:02x}")
        parts.append(f"(?:{'|'.join(forms)})")
    return re.compile("".join(parts), re.IGNORECASE)


def server_message(payload: Any) -> str | None:
    """The human-readable message inside an error payload, in the shapes servers use.

    OpenAI and llama.cpp: `{"error": {"message": ...}}`; Ollama: `{"error": "..."}`;
    Anthropic: `{"type": "error", "error": {"type": ..., "message": ...}}`; FastAPI-style
    servers: `{"detail": ...}`.
    """
    if not isinstance(payload, dict):
        return None
    error = payload.get("error", payload)
    if isinstance(error, str):
        return error
    if isinstance(error, dict):
        message = error.get("message")
        kind = error.get("type")
        if isinstance(message, str):
            return f"{kind}: {message}" if isinstance(kind, str) and kind else message
    detail = payload.get("detail")
    if detail is not None:
        return detail if isinstance(detail, str) else json.dumps(detail, ensure_ascii=False)
    return None


def error_from_response(
    response: httpx.Response, *, what: str, secrets: Iterable[str | None]
) -> ModelError:
    """A `ModelError` for an HTTP error response whose body has been read."""
    secrets = list(secrets)
    body = redact(response.text, secrets)
    try:
        message = server_message(json.loads(body))
    except ValueError:
        message = None
    if message is None:
        message = body.strip()[:_MESSAGE_LIMIT] or response.reason_phrase or "no message"
    return ModelError(
        f"{what} failed: HTTP {response.status_code}: {message}",
        status=response.status_code,
        retry_after=parse_retry_after(response.headers),
        body=body[:_BODY_LIMIT],
    )


def load_event(data: str, *, what: str, secrets: Iterable[str | None]) -> Any:
    """The JSON payload of a stream event; a payload that is not JSON is a broken stream."""
    try:
        return json.loads(data)
    except ValueError:
        raise ModelError(
            f"{what}: the server sent an event that is not JSON: {redact(data, secrets)[:200]}",
            status=None,
        ) from None


async def typed_events(
    response: httpx.Response, *, what: str, secrets: Iterable[str | None]
) -> AsyncGenerator[tuple[Any, dict[str, Any]], None]:
    """`(type, payload)` for each JSON object event of a stream whose payloads say their type.

    Anthropic and the Responses API both name an event in its payload's `type` (the SSE
    `event:` field is the fallback); blank events and payloads that are not objects carry
    nothing either reader wants, and are skipped.
    """
    async for event in aiter_sse(response):
        if not event.data.strip():
            continue
        payload = load_event(event.data, what=what, secrets=secrets)
        if not isinstance(payload, dict):
            continue
        yield payload.get("type", event.event), payload


def transport_error(
    exc: httpx.TransportError, *, what: str, secrets: Iterable[str | None]
) -> ModelError:
    """A `ModelError` with no status (retryable) for a connection that failed or broke."""
    detail = redact(str(exc), secrets) or "no detail"
    return ModelError(f"{what} failed: {type(exc).__name__}: {detail}", status=None)


@asynccontextmanager
async def client_scope(
    client: httpx.AsyncClient | None, timeout: httpx.Timeout | float | None
) -> AsyncIterator[httpx.AsyncClient]:
    """The caller's client, left open; or a fresh one, closed when the request ends.

    A fresh client per request, because `Agent.run` starts a new trio run each time and a
    pooled connection must not outlive the event loop that opened it. Pass a client to
    reuse connections across requests.
    """
    if client is not None:
        yield client
        return
    async with httpx.AsyncClient(timeout=timeout) as owned:
        yield owned


@asynccontextmanager
async def open_stream(
    client: httpx.AsyncClient | None,
    timeout: httpx.Timeout | float | None,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    *,
    what: str,
    secrets: tuple[str | None, ...],
) -> AsyncIterator[httpx.Response]:
    """The streamed answer to POSTing `body`, open while the `async with` lasts.

    Every client sends its request and classifies failures the same way: an error
    response becomes `error_from_response`'s `ModelError`, and a connection that fails
    or breaks, also while the caller reads the stream inside the `async with`, a
    retryable `transport_error`. A context manager rather than a generator of items, so
    a caller that stops reading closes the response at once, not when it is collected.
    """
    try:
        async with (
            client_scope(client, timeout) as scope,
            scope.stream("POST", url, json=body, headers=headers) as response,
        ):
            if not response.is_success:
                await response.aread()
                raise error_from_response(response, what=what, secrets=secrets)
            yield response
    except httpx.TransportError as exc:
        # Not chained: the HTTP library's exception may hold the key (a header value).
        raise transport_error(exc, what=what, secrets=secrets) from None


def warn_if_keyless(what: str, api_key: str | None, base_url: str, hosted: str, env: str) -> None:
    """A hosted API without a key fails every request with 401: say so when the client
    is built, not after the first request (a local server needs no key: no warning)."""
    if not api_key and base_url.rstrip("/") == hosted.rstrip("/"):
        logging.getLogger("tickloop").warning(
            "%s has no API key for %s: pass api_key= or set %s", what, hosted, env
        )


def bearer_headers(api_key: str | None) -> dict[str, str]:
    """The headers of a streamed request to an OpenAI-style server.

    Without a key no `Authorization` header is sent at all, as local servers expect.
    """
    headers = {"Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def json_instruction(schema: dict[str, Any]) -> str:
    """The prompt text that asks for the solution when the server cannot enforce a schema."""
    return (
        "Reply with a single JSON object that validates against the JSON Schema below, "
        "and nothing else: no prose, no markdown code fence.\n"
        + json.dumps(schema, ensure_ascii=False)
    )
