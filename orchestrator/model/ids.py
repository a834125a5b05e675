"""Identifier types and their generation. Run ids sort by creation time (a UTC stamp
prefix) so archive folders and listings read in order without a lookup."""

from __future__ import annotations

import re
import secrets
from datetime import datetime
from typing import NewType

from testbed_common.bounds import NODE_ID_PATTERN

NodeId = NewType("NodeId", str)
RunId = NewType("RunId", str)
CampaignId = NewType("CampaignId", str)
ReleaseId = NewType("ReleaseId", str)

_NODE_ID = re.compile(NODE_ID_PATTERN)


def valid_node_id(value: str) -> bool:
    """Node ids appear in paths and tags, so they are kept to a safe alphabet."""
    return _NODE_ID.fullmatch(value) is not None


def new_run_id(now: datetime) -> RunId:
    return RunId(f"r-{now:%Y%m%dT%H%M%S}-{secrets.token_hex(4)}")


def new_campaign_id(now: datetime) -> CampaignId:
    return CampaignId(f"c-{now:%Y%m%d}-{secrets.token_hex(4)}")


def new_release_id(now: datetime) -> ReleaseId:
    """A dataset release's id, also its folder's name (sorts by creation time)."""
    return ReleaseId(f"ds-{now:%Y%m%dT%H%M%S}-{secrets.token_hex(4)}")


def new_token() -> str:
    """A bearer secret: 32 random bytes, URL-safe. Only its hash is stored."""
    return secrets.token_urlsafe(32)
