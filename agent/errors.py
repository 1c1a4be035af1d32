"""The openai client's exceptions, translated once, where the client is called.

One table: each library exception becomes a :mod:`gateway.errors` exception carrying the facts
(status, provider code and type, the headers policy needs). Deciding what they mean is
``policy.classify``'s job.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import aiohttp

from agent._wire import KEPT_HEADERS
from gateway.errors import ProviderError, ProviderTimeout, ProviderUnreachable

if TYPE_CHECKING:
    import openai


def _message(exc: openai.APIError) -> str:
    body = exc.body
    if isinstance(body, dict):
        text = body.get("message")
        if isinstance(text, str) and text:
            return text[:500]
    return (exc.message or type(exc).__name__)[:500]


def _timed_out(exc: BaseException) -> bool:
    """Whether a transport error was really a timeout.

    openai's aiohttp transport reports every aiohttp connection error (refused, reset, the
    server hanging up) as a connect *timeout*; the original aiohttp exception is on the cause
    chain, and tells the two apart.
    """
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (aiohttp.ServerTimeoutError, TimeoutError)):
            return True
        if isinstance(seen, (aiohttp.ClientConnectionError, ConnectionError)):
            return False
        seen = seen.__cause__ or seen.__context__
    return True


@contextmanager
def translate_openai_errors(model: str) -> Iterator[None]:
    """Re-raise openai's exceptions as ours (``raise ... from exc``)."""
    import openai  # loaded already: its client is what raises these

    try:
        yield
    except openai.APITimeoutError as exc:  # before APIConnectionError: it is a subclass
        if not _timed_out(exc):
            raise ProviderUnreachable("the connection failed", model=model) from exc
        raise ProviderTimeout("the request timed out", model=model) from exc
    except openai.APIConnectionError as exc:
        raise ProviderUnreachable(f"connection failed: {exc.message}", model=model) from exc
    except openai.APIStatusError as exc:
        headers = {k: exc.response.headers[k] for k in KEPT_HEADERS if k in exc.response.headers}
        raise ProviderError(
            _message(exc),
            status=exc.status_code,
            code=exc.code,
            type=exc.type,
            headers=headers,
            model=model,
        ) from exc
    except openai.APIResponseValidationError as exc:
        raise ProviderError(f"invalid response: {exc.message}", status=200, model=model) from exc
    except openai.OpenAIError as exc:
        raise ProviderError(f"{type(exc).__name__}: {exc}"[:500], model=model) from exc
