"""Every exception class of the client libraries we call has a decided translation.

httpx tests that each httpcore exception is in its ``HTTPCORE_EXC_MAP``; these are the same
for our other tables (the store's are in ``test_store_errors``): ``openai``'s
(``agent.errors.translate_openai_errors``), python-telegram-bot's
(``platforms.telegram.errors.translate``), discord.py's
(``platforms.discord.errors.translate``) and slack_sdk's (``platforms.slack.errors.translate``). Each test lists every exception class the library
exports with what it must become. A class a new library version adds fails the test until
someone decides what it means for the policy (a 4xx refused, a send that may have been
carried out, a wait), instead of it falling silently into the catch-all.
"""

from __future__ import annotations

import datetime
import inspect
import warnings
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any

import discord
import discord.errors
import httpx2
import openai
import pytest
import slack_sdk.errors
import telegram.error
from slack_sdk.web.async_slack_response import AsyncSlackResponse
from telegram.warnings import PTBDeprecationWarning

from agent.errors import translate_openai_errors
from gateway.errors import (
    GatewayError,
    PlatformError,
    ProviderError,
    ProviderTimeout,
    ProviderUnreachable,
)
from platforms.discord import errors as discord_errors
from platforms.slack import errors as slack_errors
from platforms.telegram import errors as telegram_errors


def exported_errors(module: ModuleType, package: str) -> set[type[BaseException]]:
    """The exception classes ``module`` exports that its ``package`` defines."""
    return {
        value
        for _, value in inspect.getmembers(module, inspect.isclass)
        if issubclass(value, BaseException)
        and not issubclass(value, Warning)
        and value.__module__.split(".")[0] == package
        and not value.__name__.startswith("_")
    }


def assert_listed(found: set[type[BaseException]], listed: dict[type[BaseException], Any]) -> None:
    missing = sorted(c.__qualname__ for c in found - set(listed))
    assert not missing, f"decide how these translate, then list them here: {missing}"
    gone = sorted(c.__qualname__ for c in set(listed) - found)
    assert not gone, f"no longer exported by the library: {gone}"


# -- openai ------------------------------------------------------------------------------

_REQUEST = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")


def _response(status: int) -> httpx2.Response:
    return httpx2.Response(status, request=_REQUEST, headers={"retry-after": "3"})


def _status(cls: type[openai.APIStatusError], status: int) -> Callable[[], BaseException]:
    return lambda: cls("refused", response=_response(status), body=None)


#: openai's class -> how to make one, and what it becomes: our class and its status.
OPENAI: dict[type[BaseException], tuple[Callable[[], BaseException], type[Exception], int]] = {
    openai.APITimeoutError: (lambda: openai.APITimeoutError(_REQUEST), ProviderTimeout, 0),
    openai.APIConnectionError: (
        lambda: openai.APIConnectionError(request=_REQUEST),
        ProviderUnreachable,
        0,
    ),
    openai.APIStatusError: (_status(openai.APIStatusError, 418), ProviderError, 418),
    openai.BadRequestError: (_status(openai.BadRequestError, 400), ProviderError, 400),
    openai.AuthenticationError: (_status(openai.AuthenticationError, 401), ProviderError, 401),
    openai.OAuthError: (
        lambda: openai.OAuthError(response=_response(401), body=None),
        ProviderError,
        401,
    ),
    openai.PermissionDeniedError: (_status(openai.PermissionDeniedError, 403), ProviderError, 403),
    openai.NotFoundError: (_status(openai.NotFoundError, 404), ProviderError, 404),
    openai.ConflictError: (_status(openai.ConflictError, 409), ProviderError, 409),
    openai.UnprocessableEntityError: (
        _status(openai.UnprocessableEntityError, 422),
        ProviderError,
        422,
    ),
    openai.RateLimitError: (_status(openai.RateLimitError, 429), ProviderError, 429),
    openai.InternalServerError: (_status(openai.InternalServerError, 529), ProviderError, 529),
    openai.APIResponseValidationError: (
        lambda: openai.APIResponseValidationError(_response(200), body="<html>"),
        ProviderError,
        200,
    ),
    openai.APIError: (
        lambda: openai.APIError("odd", _REQUEST, body=None),
        ProviderError,
        0,
    ),
    openai.OpenAIError: (lambda: openai.OpenAIError("odd"), ProviderError, 0),
    openai.ContentFilterFinishReasonError: (
        openai.ContentFilterFinishReasonError,
        ProviderError,
        0,
    ),
    openai.LengthFinishReasonError: (
        lambda: openai.LengthFinishReasonError(completion=SimpleNamespace(usage=None)),  # type: ignore[arg-type]
        ProviderError,
        0,
    ),
    openai.WebSocketConnectionClosedError: (
        lambda: openai.WebSocketConnectionClosedError("closed", unsent_messages=[]),
        ProviderError,
        0,
    ),
    openai.WebSocketQueueFullError: (openai.WebSocketQueueFullError, ProviderError, 0),
}
#: Exported, but raised by nothing we call (webhook verification): left as they are.
OPENAI_NOT_CALLED = {openai.InvalidWebhookSignatureError}


def test_every_openai_exception_has_a_decided_translation() -> None:
    listed: dict[type[BaseException], object] = {**OPENAI, **dict.fromkeys(OPENAI_NOT_CALLED)}
    assert_listed(exported_errors(openai, "openai"), listed)


@pytest.mark.parametrize("cls", list(OPENAI), ids=lambda c: c.__name__)
def test_openai_exceptions_translate_to_ours(cls: type[BaseException]) -> None:
    make, ours, status = OPENAI[cls]
    exc = make()
    assert type(exc) is cls
    with pytest.raises(GatewayError) as caught, translate_openai_errors("m"):
        raise exc
    assert type(caught.value) is ours
    assert caught.value.__cause__ is exc
    if isinstance(caught.value, ProviderError):
        assert caught.value.status == status
        assert caught.value.model == "m"
        if status >= 400:
            assert caught.value.headers.get("retry-after") == "3"  # what policy reads


# -- python-telegram-bot -----------------------------------------------------------------

#: PTB's class -> how to make one, and the facts it becomes: status, ambiguous, retry_after.
TELEGRAM: dict[type[BaseException], tuple[Callable[[], BaseException], int, bool, float | None]] = {
    telegram.error.TelegramError: (lambda: telegram.error.TelegramError("odd"), 0, True, None),
    telegram.error.NetworkError: (lambda: telegram.error.NetworkError("reset"), 0, True, None),
    telegram.error.TimedOut: (telegram.error.TimedOut, 0, True, None),
    telegram.error.BadRequest: (lambda: telegram.error.BadRequest("bad"), 400, False, None),
    telegram.error.ChatMigrated: (lambda: telegram.error.ChatMigrated(-100123), 400, False, None),
    telegram.error.Forbidden: (lambda: telegram.error.Forbidden("blocked"), 403, False, None),
    telegram.error.InvalidToken: (
        lambda: telegram.error.InvalidToken("123:SECRET"),
        401,
        False,
        None,
    ),
    telegram.error.EndPointNotFound: (
        lambda: telegram.error.EndPointNotFound("no such method"),
        404,
        False,
        None,
    ),
    telegram.error.Conflict: (
        lambda: telegram.error.Conflict("other getUpdates"),
        409,
        False,
        None,
    ),
    telegram.error.RetryAfter: (
        lambda: _quietly(telegram.error.RetryAfter, datetime.timedelta(seconds=7)),
        429,
        False,
        7.0,
    ),
    telegram.error.PassportDecryptionError: (
        lambda: telegram.error.PassportDecryptionError("odd"),
        0,
        True,
        None,
    ),
}


def _quietly(cls: type[BaseException], *args: Any) -> BaseException:
    """``RetryAfter``'s constructor warns about its own deprecated attribute (our transport
    raises ``FloodWait`` instead, see ``platforms.telegram.errors``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        return cls(*args)


def test_every_telegram_exception_has_a_decided_translation() -> None:
    assert_listed(exported_errors(telegram.error, "telegram"), TELEGRAM)


@pytest.mark.parametrize("cls", list(TELEGRAM), ids=lambda c: c.__name__)
def test_telegram_exceptions_translate_to_platform_errors(cls: type[BaseException]) -> None:
    make, status, ambiguous, retry_after = TELEGRAM[cls]
    exc = make()
    assert type(exc) is cls
    error = telegram_errors.translate(exc)
    assert (error.status, error.ambiguous, error.retry_after) == (status, ambiguous, retry_after)
    assert "SECRET" not in str(error)  # InvalidToken's text quotes the token


# -- discord.py --------------------------------------------------------------------------


def _http(cls: type[discord.HTTPException], status: int) -> Callable[[], BaseException]:
    response = SimpleNamespace(status=status, reason="refused")
    return lambda: cls(response, {"code": 50013, "message": "Missing Permissions"})  # type: ignore[arg-type]


#: discord.py's class -> how to make one, and the facts it becomes: status, ambiguous.
DISCORD: dict[type[BaseException], tuple[Callable[[], BaseException], int, bool]] = {
    discord.DiscordException: (discord.DiscordException, 0, True),
    discord.ClientException: (discord.ClientException, 0, False),
    discord.InvalidData: (discord.InvalidData, 0, False),
    discord.LoginFailure: (discord.LoginFailure, 401, False),
    discord.PrivilegedIntentsRequired: (lambda: discord.PrivilegedIntentsRequired(None), 0, False),
    discord.ConnectionClosed: (
        lambda: discord.ConnectionClosed(
            SimpleNamespace(close_code=4000),  # type: ignore[arg-type]
            shard_id=None,
        ),
        0,
        False,
    ),
    discord.InteractionResponded: (
        lambda: discord.InteractionResponded(SimpleNamespace()),  # type: ignore[arg-type]
        0,
        False,
    ),
    discord.MissingApplicationID: (discord.MissingApplicationID, 0, False),
    discord.errors.FFmpegProcessError: (discord.errors.FFmpegProcessError, 0, False),
    discord.GatewayNotFound: (discord.GatewayNotFound, 0, True),
    discord.RateLimited: (lambda: discord.RateLimited(12.5), 429, False),
    discord.HTTPException: (_http(discord.HTTPException, 400), 400, False),
    discord.Forbidden: (_http(discord.Forbidden, 403), 403, False),
    discord.NotFound: (_http(discord.NotFound, 404), 404, False),
    discord.DiscordServerError: (_http(discord.DiscordServerError, 503), 503, True),
}


def test_every_discord_exception_has_a_decided_translation() -> None:
    # discord.errors is where discord.py's client and HTTP layer raise from; voice (opus),
    # discord.app_commands and discord.ext raise only from what botmux does not use.
    assert_listed(exported_errors(discord.errors, "discord"), DISCORD)
    for cls in DISCORD:  # each is caught where discord.py is called
        assert issubclass(cls, discord_errors.TRANSLATED), cls


@pytest.mark.parametrize("cls", list(DISCORD), ids=lambda c: c.__name__)
@pytest.mark.parametrize("idempotent", [False, True])
def test_discord_exceptions_translate_to_platform_errors(
    cls: type[BaseException], idempotent: bool
) -> None:
    make, status, ambiguous = DISCORD[cls]
    exc = make()
    assert type(exc) is cls
    error: PlatformError = discord_errors.translate(exc, idempotent=idempotent)
    assert (error.status, error.ambiguous) == (status, ambiguous)
    if cls is discord.RateLimited:
        assert error.retry_after == 12.5
    if status in (400, 403, 404, 429, 503):  # a send's refusal keeps its nonce's promise
        assert error.idempotent is idempotent


def _slack(status: int, error: str, headers: dict[str, str] | None = None) -> Callable[[], Any]:
    def make() -> slack_sdk.errors.SlackApiError:
        answer = AsyncSlackResponse(
            client=None,
            http_verb="POST",
            api_url="https://slack.com/api/chat.postMessage",
            req_args={},
            data={"ok": False, "error": error},
            headers=headers or {},
            status_code=status,
        )
        return slack_sdk.errors.SlackApiError("refused", answer)

    return make


#: slack_sdk's class -> how to make one, and the facts it becomes: status, ambiguous.
SLACK: dict[type[BaseException], tuple[Callable[[], BaseException], int, bool]] = {
    slack_sdk.errors.SlackClientError: (slack_sdk.errors.SlackClientError, 0, False),
    slack_sdk.errors.BotUserAccessError: (slack_sdk.errors.BotUserAccessError, 0, False),
    slack_sdk.errors.SlackRequestError: (slack_sdk.errors.SlackRequestError, 0, False),
    slack_sdk.errors.SlackApiError: (_slack(200, "channel_not_found"), 400, False),
    slack_sdk.errors.SlackTokenRotationError: (
        lambda: slack_sdk.errors.SlackTokenRotationError(_slack(200, "invalid_auth")()),
        0,
        False,
    ),
    slack_sdk.errors.SlackClientNotConnectedError: (
        slack_sdk.errors.SlackClientNotConnectedError,
        0,
        False,
    ),
    slack_sdk.errors.SlackObjectFormationError: (
        slack_sdk.errors.SlackObjectFormationError,
        0,
        False,
    ),
    slack_sdk.errors.SlackClientConfigurationError: (
        slack_sdk.errors.SlackClientConfigurationError,
        0,
        False,
    ),
}


def test_every_slack_exception_has_a_decided_translation() -> None:
    assert_listed(exported_errors(slack_sdk.errors, "slack_sdk"), SLACK)
    for cls in SLACK:  # each is caught where slack_sdk is called
        assert issubclass(cls, slack_errors.TRANSLATED), cls


@pytest.mark.parametrize("cls", list(SLACK), ids=lambda c: c.__name__)
def test_slack_exceptions_translate_to_platform_errors(cls: type[BaseException]) -> None:
    make, status, ambiguous = SLACK[cls]
    exc = make()
    assert type(exc) is cls
    error = slack_errors.translate(exc)
    assert (error.status, error.ambiguous) == (status, ambiguous)


@pytest.mark.parametrize(
    ("status", "code", "headers", "facts"),
    [
        (429, "ratelimited", {"Retry-After": "7"}, (429, False, 7.0)),
        (200, "invalid_auth", {}, (401, False, None)),
        (200, "token_revoked", {}, (401, False, None)),
        (200, "msg_too_long", {}, (400, False, None)),
        (200, "internal_error", {}, (503, True, None)),
        (502, "", {}, (502, True, None)),
    ],
)
def test_slack_api_answers_become_facts(
    status: int, code: str, headers: dict[str, str], facts: tuple[int, bool, float | None]
) -> None:
    """Slack's HTTP 200 refusals carry their meaning in the error code; a 429 its wait."""
    error = slack_errors.translate(_slack(status, code, headers)(), idempotent=True)
    assert (error.status, error.ambiguous, error.retry_after) == facts
