"""The agent's state files: atomic, and a failed write never takes the agent down."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from node_agent.statefile import write_state


def test_a_state_file_is_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "state" / "book.json"
    assert write_state(path, {"v": 1}, what="book")
    assert write_state(path, {"v": 2}, what="book")
    assert json.loads(path.read_text()) == {"v": 2}
    assert sorted(p.name for p in path.parent.iterdir()) == ["book.json"]  # no temp left


def test_a_failed_write_keeps_the_old_file_and_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "account.json"
    assert write_state(path, {"v": 1}, what="SIM account")
    path.with_suffix(".tmp").mkdir()  # the temp file cannot be written: as on a full disk
    assert not write_state(path, {"v": 2}, what="SIM account")
    assert json.loads(path.read_text()) == {"v": 1}
    assert "cannot save the SIM account" in caplog.text


def test_a_state_dir_that_cannot_be_made_is_reported_not_raised(tmp_path: Path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("a file where the state folder should be")
    assert not write_state(blocker / "clock.json", {"offset_s": 1.0}, what="clock estimate")
