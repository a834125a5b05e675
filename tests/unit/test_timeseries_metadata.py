"""Modem and GPS samples of a bundle's meta/ as time-series points."""

from __future__ import annotations

import json

from orchestrator.timeseries.schema import (
    MODEM,
    RunContext,
    bundle_points,
    modem_points,
    to_ns,
)
from tests.conftest import experiments

CTX = RunContext(node="se-01", country="SE", operator="240-01", operator_name="Telia",
                 interface="op0", rat="4G", experiment="tat", run="r-1")
SAMPLE = {"time": "2026-11-22T02:00:05+00:00", "interface": "op1", "mcc_mnc": "242-01",
          "operator": "Telenor", "rat": "LTE", "rssi": -62.5, "rsrp": -88.8, "rsrq": -7.1,
          "sinr": 17.5, "cell_id": 151149761, "band": None, "iccid": None,
          "source": "linkem"}


def test_modem_sample_is_a_modem_point() -> None:
    [p] = modem_points([SAMPLE], CTX)
    assert p.measurement == MODEM
    assert p.time_ns == to_ns("2026-11-22T02:00:05+00:00")
    assert p.tags == {"node": "se-01", "country": "SE", "operator": "242-01",
                      "operator_name": "Telenor", "interface": "op1", "rat": "4G",
                      "experiment": "tat", "run": "r-1"}
    assert p.fields == {"rssi": -62.5, "rsrp": -88.8, "rsrq": -7.1, "sinr": 17.5,
                        "cell_id": 151149761, "band": None, "rat": "LTE"}


def test_unknown_operator_falls_back_to_the_run_context() -> None:
    [p] = modem_points([{"time": SAMPLE["time"], "interface": "op0", "rsrp": -100}], CTX)
    assert (p.tags["operator"], p.tags["operator_name"]) == ("240-01", "Telia")
    assert p.fields["rsrp"] == -100.0 and p.fields["cell_id"] is None


def test_bundle_points_route_meta_files_by_name() -> None:
    modem = "\n".join(json.dumps({**SAMPLE, "cell_id": c}) for c in (1, 2)).encode()
    gps = (json.dumps({"time": SAMPLE["time"], "lat": 59.4, "lon": 17.9, "alt": 38.0,
                       "speed": 1.5, "fix": "3d"}) + "\n"
           + json.dumps({"time": SAMPLE["time"], "lat": None, "lon": None, "alt": None,
                         "speed": None, "fix": "none"}) + "\n").encode()
    built = bundle_points({"meta/modem.jsonl": modem, "meta/gps.jsonl": gps}, CTX,
            catalogue=experiments())
    assert built.notes == []
    assert [p.measurement for p in built.points] == ["gps", "modem", "modem"]
    assert built.points[0].fields == {"lat": 59.4, "lon": 17.9, "alt_m": 38.0,
                                      "speed_mps": 1.5}
    assert [p.fields["cell_id"] for p in built.points[1:]] == [1, 2]


def test_a_damaged_modem_file_is_a_note() -> None:
    built = bundle_points({"meta/modem.jsonl": b'{"interface": "op0"}\n'}, CTX,
            catalogue=experiments())
    assert built.points == [] and built.notes and "meta/modem.jsonl" in built.notes[0]


def test_without_the_catalogue_or_records_the_caller_is_told_what_to_pass() -> None:
    """Nothing is read from an experiments folder relative to the working directory:
    whether a run's records are points is its manifest's, and the caller holds it."""
    import pytest

    with pytest.raises(ValueError, match=r"needs the experiments' catalogue \(catalogue="):
        bundle_points({"meta/modem.jsonl": b""}, CTX)
    assert bundle_points({"meta/modem.jsonl": b""}, CTX, records=True).points == []
