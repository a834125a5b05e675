"""A run waits for a free receiver on the shared server for a few rounds, then fails
with the server's own reason: busy_rounds alone, and the ABw client driving a stand-in
`abw` that answers busy the way the real one does (one JSON error line, kind busy)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from testbed_kit import abw_client
from testbed_kit.abw_client import AbwError, run_abw
from testbed_kit.busy import busy_rounds


def test_each_port_in_turn_round_after_round_with_a_pause_between() -> None:
    pauses: list[float] = []
    seen = list(busy_rounds((1, 2, 3), rounds=3, pause_s=0.5, sleep=pauses.append))
    assert seen == [1, 2, 3] * 3
    assert pauses == [0.5, 0.5]  # between rounds, not before the first or after the last


def test_stopping_at_a_port_that_serves_costs_no_pause() -> None:
    pauses: list[float] = []
    for port in busy_rounds((7, 8), rounds=4, pause_s=1.0, sleep=pauses.append):
        if port == 8:
            break
    assert pauses == []


def _fake_abw(tmp_path: Path, busy_calls: int) -> Path:
    """An `abw` on PATH that answers busy on its first ``busy_calls`` calls, then gives
    one estimate; each call's port is appended to calls.log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "abw"
    busy = json.dumps({"type": "error", "kind": "busy",
                       "error": "server busy: another measurement session is running"})
    ok = json.dumps({"type": "estimate", "abw_bps": 4.2e6})
    script.write_text(f"""#!/bin/sh
echo "$3" >> {tmp_path}/calls.log
n=$(wc -l < {tmp_path}/calls.log)
if [ "$n" -le {busy_calls} ]; then echo '{busy}'; exit 1; fi
echo '{ok}'
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bin_dir


CONFIG = {"server_address": "192.0.2.1", "interface_address": "198.51.100.2"}


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, busy_calls: int) -> list[str]:
    bin_dir = _fake_abw(tmp_path, busy_calls)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(abw_client, "busy_rounds",
                        lambda ports: busy_rounds(ports, rounds=3, pause_s=0.0))
    out = tmp_path / "raw" / "abw.jsonl"
    out.parent.mkdir()
    records = run_abw(CONFIG, method="yaz", count=1, size=1400, direction="uplink", out=out)
    assert records == [{"type": "estimate", "abw_bps": 4.2e6}]
    return (tmp_path / "calls.log").read_text().split()


def test_abw_waits_a_round_when_every_receiver_is_busy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # All four receivers busy in the first round (the fleet's sessions started
    # together): the second round's first port serves it.
    calls = _run(tmp_path, monkeypatch, busy_calls=4)
    assert calls == [f"192.0.2.1:{p}" for p in (7351, 7352, 7353, 7354, 7351)]


def test_abw_fails_with_the_servers_reason_when_busy_every_round(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(AbwError, match="every ABw receiver on the server is busy "
                                       r"\(server busy: another measurement"):
        _run(tmp_path, monkeypatch, busy_calls=12)
    assert len((tmp_path / "calls.log").read_text().split()) == 12  # 3 rounds x 4
