"""What the chat platforms share in approvals (``platforms._approvals``), without a platform:
how a request is shown (``Asking``: typing pauses and a preview is buried before it leaves; one
shown is counted; one that cannot be shown is logged, never raised, and typing goes on), and
the button data that names a stored call (garbage and other bots' buttons are no click).
The platforms' own behaviour, on their fakes: ``test_approvals_chat.py``.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gateway.errors import PlatformError
from gateway.ports import ApprovalRequest
from platforms._approvals import Asking, Click, button_data, read_click

pytestmark = pytest.mark.anyio

REQUEST = ApprovalRequest(7, "call_1", "mail__send", '{"to": "a@b"}', "telegram:42", 300.0)


class Previews:
    def __init__(self) -> None:
        self.buried: list[str] = []

    def bury(self, conversation: str) -> None:
        self.buried.append(conversation)


class Counts:
    asked = 0


def translate(exc: BaseException) -> PlatformError:
    return PlatformError(str(exc), status=403)


def asking() -> tuple[Asking, Previews, Counts]:
    previews, counts = Previews(), Counts()
    return Asking(previews, counts), previews, counts  # type: ignore[arg-type]


async def test_a_request_shown_pauses_typing_buries_the_preview_and_is_counted() -> None:
    shown, previews, counts = asking()
    seen: list[tuple[list[str], bool]] = []

    async def send() -> str:
        seen.append((list(previews.buried), shown.waits.waiting("telegram:42")))
        return "sent"

    await shown.show(REQUEST, send, errors=(OSError,), translate=translate)
    assert seen == [(["telegram:42"], True)]  # both before it left
    assert counts.asked == 1
    assert shown.waits.waiting("telegram:42")
    shown.waits.answered(7)
    assert not shown.waits.waiting("telegram:42")


@pytest.mark.parametrize(
    "failure",
    [OSError("403 Forbidden: bot was blocked"), PlatformError("the bot is not started")],
    ids=["refused", "not-started"],
)
async def test_a_request_that_cannot_be_shown_is_logged_and_typing_goes_on(
    failure: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    shown, _, counts = asking()
    sends: list[int] = []

    async def send() -> Any:
        sends.append(1)
        raise failure

    with caplog.at_level(logging.WARNING, logger="platforms._approvals"):
        await shown.show(REQUEST, send, errors=(OSError,), translate=translate)
    assert sends == [1]  # a 403 is not tried again
    assert counts.asked == 0
    assert not shown.waits.waiting("telegram:42")  # nobody can answer it
    (record,) = caplog.records
    assert record.getMessage() == "approval request not shown: the call waits for its timeout"
    assert (record.conversation, record.call_id) == ("telegram:42", "call_1")  # type: ignore[attr-defined]


def test_a_buttons_data_names_the_call_and_nothing_else() -> None:
    assert button_data(7, True) == "ap:7:y"
    assert read_click(button_data(7, True)) == Click(7, True)
    assert read_click(button_data(123456789, False)) == Click(123456789, False)
    for garbage in (
        None,
        7,
        "",
        "ap:0:y",
        "ap:-1:y",
        "ap:7:yes",
        "ap:7:y\n",
        "xp:7:y",
        "ap:1" + "0" * 18 + ":y",
    ):
        assert read_click(garbage) is None, garbage
