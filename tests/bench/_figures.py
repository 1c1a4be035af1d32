"""How the benches print a figure over repeated runs: its median, then its range."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def spread(values: Sequence[float], *, digits: int = 2, width: int = 0) -> str:
    """``median   [min .. max]``, each with ``digits`` decimals, the median ``width`` wide."""
    median = statistics.median(values)
    return f"{median:{width}.{digits}f}   [{min(values):.{digits}f} .. {max(values):.{digits}f}]"
