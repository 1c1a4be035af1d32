"""Voice and audio to text (SPEC 9): ``[transcription]``, an OpenAI-compatible
``/v1/audio/transcriptions`` endpoint, called multipart through the official ``openai`` client.

It has ``[model]``'s shape and runs under the same failure policy (``policy.engine``): a
credential pool per endpoint, retries, fallbacks. A failure for good comes back as its
:class:`~gateway.messages.Failure`, for the turn to answer honestly.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from agent.clients import ClientPool
from agent.errors import translate_openai_errors
from gateway.config import ModelConfig
from gateway.messages import ATTACHMENT_FAILURES, AttachmentRef, Failure
from policy.backoff import Backoff
from policy.engine import ModelPolicy, Observe, TurnFailed

#: The failure class of a voice note when no ``[transcription]`` is configured.
NOT_CONFIGURED = ATTACHMENT_FAILURES[2]


class Transcriber:
    """The :class:`gateway.ports.Transcriber` of ``[transcription]`` (None: not configured)."""

    def __init__(
        self,
        config: ModelConfig | None,
        clients: ClientPool,
        *,
        observe: Observe = lambda event: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._clients = clients
        self._chain = config.chain if config is not None else ()
        self._policy: ModelPolicy | None = None
        if config is not None:
            self._policy = ModelPolicy(
                self._chain,
                backoff=Backoff(config.backoff_base_s, config.backoff_cap_s),
                retry_after_cap=config.retry_after_cap_s,
                observe=observe,
                clock=clock,
            )

    def __repr__(self) -> str:
        return f"<Transcriber model={self._config.model if self._config else None!r}>"

    @property
    def configured(self) -> bool:
        return self._policy is not None

    async def transcribe(
        self, conversation: str, ref: AttachmentRef, data: bytes, *, turn: int = 0
    ) -> str | Failure:
        """The transcript of ``data`` (the file ``ref``), or the failure's class."""
        if self._policy is None:
            return Failure(NOT_CONFIGURED, False, detail="no [transcription] is configured")
        upload = (ref.name or "audio", data, ref.content_type or "application/octet-stream")

        async def call(index: int, api_key: str, *, rebuild: bool, trimmed: bool) -> str:
            endpoint = self._chain[index]
            async with self._clients.use(endpoint, api_key, rebuild=rebuild) as client:
                with translate_openai_errors(endpoint.model):
                    result = await client.audio.transcriptions.create(
                        model=endpoint.model, file=upload
                    )
            return result.text

        try:
            answer = await self._policy.run(conversation, call, turn=turn)
        except TurnFailed as exc:
            return exc.failure
        return answer.value
