"""Outside development the admin token must be a generated secret: placeholders, short
and patterned tokens are refused with a message that says how to make one, and the
token the compose stack generates (scripts/up) passes."""

from __future__ import annotations

import re
import secrets
import subprocess

import pytest

from orchestrator.settings import Settings
from tests.conftest import REPO


@pytest.mark.parametrize(("token", "why"), [
    ("change-me", "placeholder"),
    ("", "unset"),
    ("CHANGEME-" + secrets.token_hex(16), "placeholder"),
    ("example-admin-token-for-the-docs-0123456789", "placeholder"),
    (secrets.token_hex(15), "under 32"),  # 30 characters, 120 bits
    ("a" * 64, "distinct"),
    ("ab" * 32, "distinct"),
    ("0123456" * 6, "distinct"),
])
def test_weak_admin_token_is_refused_outside_development(token: str, why: str) -> None:
    with pytest.raises(ValueError, match="TESTBED_ADMIN_TOKEN is") as e:
        Settings(environment="production", admin_token=token)
    assert why in str(e.value)
    assert "openssl rand -hex 32" in str(e.value)  # says how to make a good one
    Settings(environment="development", admin_token=token)  # development takes any


@pytest.mark.parametrize("token", [
    secrets.token_hex(16), secrets.token_hex(32), secrets.token_urlsafe(32),
])
def test_generated_admin_token_is_accepted(token: str) -> None:
    assert Settings(environment="production", admin_token=token).admin_token == token


def test_the_compose_stacks_generated_token_passes() -> None:
    """The very command scripts/up runs to make deploy/.secrets' admin token (a helper of
    scripts/lib.sh, which it sources)."""
    up = (REPO / "scripts" / "up").read_text()
    m = re.search(r'set_env TESTBED_ADMIN_TOKEN "\$\((.+)\)"\s*$', up, re.MULTILINE)
    assert m is not None, "scripts/up no longer generates TESTBED_ADMIN_TOKEN"
    for _ in range(3):
        token = subprocess.run(["bash", "-c", f". {REPO}/scripts/lib.sh && {m.group(1)}"],
                               capture_output=True, text=True, check=True).stdout.strip()
        Settings(environment="production", admin_token=token)
