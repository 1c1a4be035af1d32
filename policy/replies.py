"""What a user is told when a turn fails: short, honest, naming the class and the fix.

Never a raw provider body and never a secret: these texts are fixed, and only the failure
class (and a wait in seconds) is put into them.
"""

from __future__ import annotations

from gateway.messages import Failure

_TEXT = {
    "rate_limit": "The model provider is rate-limiting botmux right now; please try again in a"
    " minute. If this keeps happening, an operator can add API keys or a fallback model.",
    "server": "The model provider is having server trouble (an error on its side); please try"
    " again shortly. An operator can add a fallback model to ride this out.",
    "timeout": "The model provider did not answer in time; please try again. An operator can"
    " raise model.timeout_s or add a fallback model.",
    "connection": "botmux could not reach the model provider; please try again. An operator"
    " should check model.base_url and the network.",
    "auth": "The model provider rejected botmux's API key. An operator needs to fix"
    " model.api_keys in the config.",
    "quota": "The model provider says the account's quota or billing limit is used up. An"
    " operator needs to add credit or configure another key or model.",
    "model_not_found": "The configured model does not exist at the provider. An operator needs"
    " to fix model.model (or add a fallback model).",
    "context_overflow": "This conversation is too long for the model's context window. Send"
    " /new to start a fresh context.",
    "bad_request": "The model provider refused the request as invalid. An operator can find"
    " the details in botmux's log.",
    "content_filter": "The model provider's content filter blocked this request.",
    "unknown": "Something unexpected went wrong while answering. An operator can find the"
    " details in botmux's log.",
}

NOT_CONFIGURED = (
    "botmux has no model configured yet, so it cannot answer. An operator can set"
    " OPENAI_BASE_URL / OPENAI_API_KEY / BOTMUX_MODEL in the environment, or add a [model]"
    " section to botmux.toml, then restart botmux."
)


def too_long_reply(tokens: int, budget: int) -> str:
    """A message that alone does not fit the model's context window (SPEC 11)."""
    return (
        f"This message is too long for the model: it is about {tokens} tokens, and the model"
        f" takes at most {budget} beside its answer. Please send a shorter message or split it."
        " (failure: context_overflow)"
    )


def failure_reply(failure: Failure) -> str:
    """The user-facing text for a failed turn."""
    if failure.reason == "model_not_found" and failure.detail == "no model is configured":
        return f"{NOT_CONFIGURED} (failure: model_not_found)"
    text = _TEXT.get(failure.reason, _TEXT["unknown"])
    return f"{text} (failure: {failure.reason})"
