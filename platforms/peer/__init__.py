"""The peer HTTP API: other agents and OpenAI clients talk to botmux over JSON."""

from platforms.peer.adapter import PeerAdapter

__all__ = ["PeerAdapter"]
