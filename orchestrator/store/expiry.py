""":func:`orchestrator.model.expiry.expired` as SQL, for statements that must decide
in the database (a conditional ``UPDATE``, a bulk ``DELETE``) with the same boundary."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ColumnElement
from sqlalchemy.orm import InstrumentedAttribute


def expired_sql(ends_at: InstrumentedAttribute[datetime] | InstrumentedAttribute[datetime | None],
                now: datetime) -> ColumnElement[bool]:
    """Whether the row's grant, ending at column ``ends_at``, has run out at ``now``
    (inclusive, as :func:`orchestrator.model.expiry.expired`). A NULL end is neither
    expired nor live (SQL's unknown): callers say what NULL means. Its negation
    (``~expired_sql(...)``) is "still live"."""
    return ends_at <= now
