"""The model turn: context building, the openai client, error translation."""

from agent.clients import ClientPool
from agent.compaction import CompactingRunner
from agent.turn import Agent

__all__ = ["Agent", "ClientPool", "CompactingRunner"]
