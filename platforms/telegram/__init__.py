"""The Telegram platform: python-telegram-bot driven inside botmux's task group."""

from platforms.telegram.adapter import TelegramAdapter

__all__ = ["TelegramAdapter"]
