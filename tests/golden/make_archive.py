"""Writes tests/golden/archive: one run of each first-party study's result format, made
of the recordings and models the other tests already hold (run once; its output is
committed, so that the golden test reads fixed files whatever later moves the helpers).

    python -m tests.golden.make_archive

Each folder is one run's bundle tree (results/, meta/, server/), named by experiment.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.conftest import REPO
from tests.recorded import tat_result
from tests.unit.test_abw_tools import CAPPED
from tests.unit.test_abw_tools import _bundle as abw_tools_bundle
from tests.unit.test_cca_compare_capture import _session as cca_session

HERE = Path(__file__).parent / "archive"
FIXTURES = REPO / "tests/unit/fixtures"
SERVER = "172.30.1.10"
START = "2026-11-22T12:00:00+00:00"


def _lines(records: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def _abw(start_unix_s: float, estimate: float) -> dict[str, Any]:
    return {"type": "estimate", "method": "yaz", "direction": "uplink",
            "estimate_bps": estimate, "latency_s": 0.8, "bytes_sent": 40_000,
            "control_bytes": 1000, "packets_sent": 40, "rtt_s": 0.04,
            "start_unix_s": start_unix_s, "server": SERVER}


def _meta(interface: str = "op0") -> dict[str, bytes]:
    return {
        "meta/modem.jsonl": _lines([{"time": START, "interface": interface,
                                     "mcc_mnc": "240-01", "operator": "Telia",
                                     "rsrp": -95.0, "sinr": 12.0, "band": "B3",
                                     "rat": "4G", "cell_id": 7}]),
        "meta/gps.jsonl": _lines([{"time": START, "lat": 59.334591, "lon": 18.063240,
                                   "alt": 20.0}]),
        "meta/system.jsonl": _lines([{"time": START, "cpu_pct": 12.5, "mem_pct": 40.0,
                                      "temperature_c": 51.0, "disk_free_bytes": 10**9}]),
    }


def runs() -> dict[str, dict[str, bytes]]:
    tat = {**tat_result(server=SERVER), "start": START}
    t0 = 1_795_348_800.0  # START as Unix seconds
    capture = (FIXTURES / "tcp-6mbit-any.pcap").read_bytes()
    _, cca = cca_session()
    return {
        "tat": {"results/tat.json": json.dumps(tat).encode(),
                "results/capture.pcap": capture, **_meta()},
        "abw-tat": {
            "results/tat-1.json": json.dumps(tat).encode(),
            "results/abw-0-yaz.jsonl": _lines([_abw(t0 - 5, 5.2e6)]),
            "results/abw-2-yaz.jsonl": _lines([_abw(t0 + 5, 5.6e6)]),
            "results/abw-tat.json": json.dumps({"format": "testbed.abw-tat", "version": 1,
                                                "steps": 3}).encode(),
            **_meta()},
        "short-flows": {
            "results/short-flows.json": (FIXTURES / "short-flows-downlink.json").read_bytes(),
            "results/capture.pcap": (FIXTURES / "short-flows-downlink.pcap").read_bytes(),
            **_meta()},
        "goodput-sequence": {
            "results/goodput.json":
                (FIXTURES / "goodput/loopback-downlink-4096x11.json").read_bytes(),
            **_meta()},
        "cca-compare": cca,
        "abw-tools": {**abw_tools_bundle(CAPPED), **_meta()},
    }


def main() -> None:
    shutil.rmtree(HERE, ignore_errors=True)
    for experiment, files in runs().items():
        for name, data in files.items():
            path = HERE / experiment / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)


if __name__ == "__main__":
    main()
