"""The one exception tree of botmux.

Every error botmux raises on purpose derives from :class:`GatewayError`, so callers can tell
our failures from bugs. Exceptions carry facts (a status, a Retry-After, a key path), never
decisions: deciding what is retryable is ``policy.classify``'s job alone.

::

    GatewayError
    ├── ConfigError               bad config file or value (key path in .path)
    ├── StoreError                the store failed
    │   ├── StoreClosed           closed by us: shutting down
    │   ├── StoreUnavailable      the database is unreachable, locked or lost (broken by the peer)
    │   ├── LeaseLost             another node owns the conversation now: this answer is fenced
    │   └── TurnSettled           the turn's row was settled or deleted while it ran: not stored
    ├── MailboxFull               a bounded mailbox refused a message (visible, never dropped)
    ├── Refused                   a message refused before it was stored (nothing kept)
    │   ├── Overloaded            too many turns wait (retry_after, scope)
    │   └── MessageTooLong        over [gateway] max_message_chars (limit, length)
    ├── ConversationClosed        closed by us: the actor was evicted or is draining
    ├── ProviderError             a model provider answered with an error (status, code, ...)
    │   ├── ProviderTimeout       no answer in time
    │   └── ProviderUnreachable   connection refused, reset, dropped (broken by the peer)
    ├── ModelNotConfigured        no model endpoint at all: tell the operator how to add one
    ├── PlatformError             a chat platform refused or failed a send
    ├── AttachmentTooLarge        an attachment is over [agent] max_attachment_bytes (name, limit)
    └── AttachmentRefused         an attachment not fetched: not where its platform keeps files
"""

from __future__ import annotations

from collections.abc import Mapping


class GatewayError(Exception):
    """Root of every error botmux raises on purpose."""


class ConfigError(GatewayError):
    """The configuration is invalid; ``path`` names the offending key (``model.timeout_s``).

    A whole file is validated at once: ``errors`` holds every ``(path, message)`` found, the
    first of them also in ``path`` and ``message``, and ``str()`` lists them all, one a line.
    """

    def __init__(
        self, path: str, message: str, *, errors: tuple[tuple[str, str], ...] = ()
    ) -> None:
        self.errors = errors or ((path, message),)
        super().__init__("\n".join(f"{p}: {m}" if p else m for p, m in self.errors))
        self.path = path
        self.message = message

    @classmethod
    def of(cls, errors: tuple[tuple[str, str], ...]) -> ConfigError:
        """One error for several problems (at least one)."""
        path, message = errors[0]
        return cls(path, message, errors=errors)


class StoreError(GatewayError):
    """The store could not complete an operation."""


class StoreClosed(StoreError):
    """The store was closed by us (shutdown); nothing is broken."""


class StoreUnavailable(StoreError):
    """The database could not be reached, answered too late, or the connection to it was lost
    (SQLite: the file is locked, unwritable or its disk failed). Whether a write that was
    under way committed is unknown; retrying later, as after a crash, is safe."""


class LeaseLost(StoreError):
    """This node no longer holds the conversation's lease (several nodes, PostgreSQL): its
    answer was refused so that the new owner's is the only one stored and delivered."""

    def __init__(self, message: str, *, conversation: str) -> None:
        super().__init__(message)
        self.conversation = conversation


class TurnSettled(StoreError):
    """An answer's user row is no longer pending: it was purged, cancelled or deleted (by an
    operator, another process) while its turn ran. The answer was refused, nothing stored."""

    def __init__(self, message: str, *, conversation: str) -> None:
        super().__init__(message)
        self.conversation = conversation


class MailboxFull(GatewayError):
    """A bounded mailbox is full: the sender sees it, nothing is silently dropped."""


class Refused(GatewayError):
    """A message was refused before it was stored: nothing of it is kept, and the sender is
    told (the peer API with a 4xx status, chat platforms with a short notice)."""


class Overloaded(Refused):
    """Too many turns are waiting: in this conversation (``scope == "conversation"``, past
    ``max_pending_per_conversation``) or in the whole gateway (``scope == "gateway"``, past
    ``max_pending_total``). ``retry_after`` is a suggested wait in seconds."""

    def __init__(self, message: str, *, retry_after: float, scope: str) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.scope = scope


class MessageTooLong(Refused):
    """The message's text is longer than ``[gateway] max_message_chars``."""

    def __init__(self, message: str, *, limit: int, length: int) -> None:
        super().__init__(message)
        self.limit = limit
        self.length = length


class ConversationClosed(GatewayError):
    """The conversation's actor was closed by us (evicted or draining)."""


class ProviderError(GatewayError):
    """A model provider answered with an error.

    ``status`` is the HTTP status (0 when there was no response), ``code`` and ``type`` the
    provider's error code and type when its body had them, ``headers`` the response headers
    that matter to policy (Retry-After and friends), lower-cased.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        code: str | None = None,
        type: str | None = None,
        headers: Mapping[str, str] | None = None,
        model: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.type = type
        self.headers: Mapping[str, str] = dict(headers or {})
        self.model = model

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(status={self.status}, code={self.code!r}, model={self.model!r})"
        )


class ProviderTimeout(ProviderError):
    """The provider did not answer within the configured timeout."""


class ProviderUnreachable(ProviderError):
    """The connection to the provider was refused, reset or dropped."""


class ModelNotConfigured(GatewayError):
    """No model endpoint is configured at all."""


class PlatformError(GatewayError):
    """A chat platform refused or failed an operation.

    ``status`` is the platform's HTTP status (0: no response), ``retry_after`` its requested
    wait in seconds (Telegram's ``retry_after``, Discord's 429 body). ``ambiguous``: the
    request may have been carried out (a timeout after sending); ``idempotent``: repeating it
    cannot duplicate it (a Discord nonce).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        retry_after: float | None = None,
        ambiguous: bool = False,
        idempotent: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.ambiguous = ambiguous
        self.idempotent = idempotent


class Unsendable(GatewayError):
    """A reply chunk that can never be sent as it is stored: its platform's client library
    refuses a value of it (an A2A push config's token with a CR/LF, stored before such
    values were refused). Not the platform's refusal: the courier parks the chunk (failed,
    reason ``poisoned``) instead of retrying it or letting the error end the gateway."""


class AttachmentTooLarge(GatewayError):
    """An attachment is larger than ``[agent] max_attachment_bytes``: ``name`` is the file's
    name as the user sent it, ``limit`` the limit in bytes. Raised before fetching when the
    platform said the size, else as soon as the download passes the limit (never more than
    ``limit`` bytes are held)."""

    def __init__(self, message: str, *, name: str, limit: int) -> None:
        super().__init__(message)
        self.name = name
        self.limit = limit


class AttachmentRefused(GatewayError):
    """An attachment botmux will not fetch: its URL is not where the platform keeps files (a
    host other than Discord's CDN or the configured ``api_base``, another origin than the Bot
    API's), or the file server answered with a redirect, which is never followed. ``name``
    is the file's name as the user sent it, ``why`` says which (it ends the user's notice)."""

    def __init__(self, *, name: str, why: str) -> None:
        super().__init__(f"{name} was not fetched: {why}")
        self.name = name
        self.why = why
