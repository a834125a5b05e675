"""Figures as people read them, shared by the CLI and the studies' columns of
``testbed results`` (so that a rate reads the same wherever it is shown)."""

from __future__ import annotations


def rate_text(bps: object) -> str | None:
    """A rate in Mbit/s (``12.34 Mbit/s``); None when not a number."""
    return f"{bps / 1e6:.2f} Mbit/s" if isinstance(bps, int | float) else None
