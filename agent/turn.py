"""The model turn: build the context, call the model, return the reply.

The context is the configured system prompt, the conversation's answered history, and the new
user message (once: the pending row is never also in the history). Calls go through
``policy``'s caller, which owns retries, credential rotation and fallback.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from agent.clients import ClientPool
from agent.errors import translate_openai_errors
from gateway.config import AgentConfig, ModelConfig, ModelEndpoint
from gateway.errors import ModelNotConfigured
from gateway.messages import ChatMessage, TurnResult, Usage
from policy import classify, failure_reply

log = logging.getLogger(__name__)


class Agent:
    def __init__(self, model: ModelConfig | None, config: AgentConfig, clients: ClientPool) -> None:
        self._model = model
        self._config = config
        self._clients = clients

    def __repr__(self) -> str:
        return f"<Agent model={self._model.model if self._model else None!r}>"

    def build_messages(self, history: Sequence[ChatMessage], text: str) -> list[dict[str, str]]:
        messages = [{"role": "system", "content": self._config.system_prompt}]
        messages.extend({"role": m.role, "content": m.content} for m in history)
        messages.append({"role": "user", "content": text})
        return messages

    async def complete(
        self, endpoint: ModelEndpoint, api_key: str, messages: list[dict[str, str]]
    ) -> tuple[str, Usage]:
        """One model call, its errors translated; no retries here."""
        client = self._clients.get(endpoint, api_key)
        with translate_openai_errors(endpoint.model):
            response = await client.chat.completions.create(
                model=endpoint.model,
                messages=messages,  # type: ignore[arg-type]
            )
        choice = response.choices[0] if response.choices else None
        text = (choice.message.content if choice else None) or ""
        usage = Usage()
        if response.usage is not None:
            usage = Usage(response.usage.prompt_tokens, response.usage.completion_tokens)
        return text, usage

    async def run_turn(
        self, conversation: str, history: Sequence[ChatMessage], text: str
    ) -> TurnResult:
        messages = self.build_messages(history, text)
        try:
            if self._model is None:
                raise ModelNotConfigured("no model is configured")
            endpoint = self._model.chain[0]
            reply, usage = await self.complete(endpoint, endpoint.api_keys[0], messages)
        except Exception as exc:
            failure = classify(exc)
            log.warning(
                "turn failed",
                extra={"conversation": conversation, "reason": failure.reason, "error": repr(exc)},
            )
            return TurnResult(reply=failure_reply(failure), failure=failure)
        return TurnResult(
            reply=reply or "(the model returned an empty reply)", model=endpoint.model, usage=usage
        )

    def status(self) -> dict[str, Any]:
        return {"model": self._model.model if self._model else None}
