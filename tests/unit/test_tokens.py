"""Token parsing and comparison never raise on odd input (a non-ASCII token made
``hmac.compare_digest`` raise TypeError: a 500 instead of a 401)."""

from __future__ import annotations

import pytest

from orchestrator.services.auth import bearer_token, may_scrape, well_formed
from orchestrator.settings import Settings


@pytest.mark.parametrize(("header", "token"), [
    ("Bearer abc", "abc"), ("bearer  abc ", "abc"), ("Bearer ", None), ("Basic abc", None),
    (None, None), ("", None), ("Bearerabc", None),
])
def test_bearer_token(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


@pytest.mark.parametrize("token", ["tøken", "a b", "a\nb", "", "x" * 513, "\udcff"])
def test_malformed_tokens(token: str) -> None:
    assert not well_formed(token)


def test_scrape_token_comparison_takes_any_text() -> None:
    settings = Settings(environment="development", admin_token="admin-token-0123456789",
                        metrics_token="scrape-0123456789abcdef", database_url="sqlite://")
    assert may_scrape(settings, "scrape-0123456789abcdef")
    assert may_scrape(settings, "admin-token-0123456789")
    for token in ("scrape-0123456789abcdeg", "tøken", "\x00"):
        assert not may_scrape(settings, token)


def test_an_empty_scrape_token_is_none_and_scrapes_nothing() -> None:
    """The compose file passes ``${TESTBED_METRICS_TOKEN:-}``: empty is unset, not a
    token that an empty bearer (or a weak-token check in production) would meet."""
    settings = Settings(environment="production", admin_token="a1b2c3d4" * 8,
                        metrics_token="", database_url="sqlite://")
    assert settings.metrics_token is None
    assert not may_scrape(settings, "")
