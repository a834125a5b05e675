"""Real results recorded for tests: the tat experiment's own parser run on an iperf3
report captured through a 6 Mbit/s shaped link (tests/unit/fixtures)."""

from __future__ import annotations

import importlib.util
import json
from typing import Any

from tests.conftest import REPO


def tat_parser() -> Any:
    """The tat experiment's own parser module (experiments/tat/tat_parse.py), which is
    not a package: loaded from its file."""
    spec = importlib.util.spec_from_file_location(
        "tat_parse", REPO / "experiments" / "tat" / "tat_parse.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tat_result(*, server: str = "10.77.2.1") -> dict[str, Any]:
    """A ``testbed.tat`` result (31 receiver bins of 100 ms) as the experiment writes it."""
    module = tat_parser()
    raw = json.loads((REPO / "tests/unit/fixtures/tcp-6mbit-iperf3.json").read_text())
    result: dict[str, Any] = module.parse_iperf3(raw, direction="uplink", interface="op0",
                                                 server=server, port=5201)
    return result
