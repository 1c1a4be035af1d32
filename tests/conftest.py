"""Shared pytest setup: every async test runs on anyio's asyncio backend."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
