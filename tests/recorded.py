"""Real results recorded for tests: the kit's TAT parser (testbed_kit.tat_result, what
the tat experiment writes with) run on an iperf3 report captured through a 6 Mbit/s
shaped link (tests/unit/fixtures)."""

from __future__ import annotations

import json
from typing import Any

from testbed_kit.tat_result import parse_iperf3
from tests.conftest import REPO


def tat_result(*, server: str = "10.77.2.1") -> dict[str, Any]:
    """A ``testbed.tat`` result (31 receiver bins of 100 ms) as the experiment writes it."""
    raw = json.loads((REPO / "tests/unit/fixtures/tcp-6mbit-iperf3.json").read_text())
    return parse_iperf3(raw, direction="uplink", interface="op0", server=server, port=5201)
