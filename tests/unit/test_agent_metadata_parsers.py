"""ModemManager (mmcli -J) and gpsd parsing on recorded-format fixtures."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from node_agent.metadata.gps import GpsdReader, parse_gpsd_lines, parse_tpv
from node_agent.metadata.modem import (
    MetadataError,
    MmcliModemReader,
    modem_id,
    modem_paths,
    net_ports,
    parse_mmcli,
)

FIX = Path(__file__).parent / "fixtures"
NOW = datetime(2026, 11, 22, 2, 0, tzinfo=UTC)


def mm(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIX / "mmcli" / name).read_text())
    return doc


def test_mmcli_lte_modem_with_signal_location_and_sim() -> None:
    s = parse_mmcli("wwan0", modem=mm("modem-0.json"), signal=mm("modem-0-signal.json"),
                    location=mm("modem-0-location.json"), sim=mm("sim-0.json"), time=NOW)
    assert (s.mcc_mnc, s.operator, s.rat) == ("240-01", "Telia", "LTE")
    assert (s.rssi, s.rsrp, s.rsrq, s.sinr) == (-68.0, -97.0, -10.0, 12.4)
    assert s.cell_id == 0x0A1B2C03
    assert s.lac == "00A3F1"  # the TAC on LTE
    assert s.iccid == "8946000000123456789"
    assert (s.time, s.interface, s.source) == (NOW, "wwan0", "mmcli")


def test_mmcli_unknown_values_are_none() -> None:
    s = parse_mmcli("wwan1", modem=mm("modem-1.json"), signal=mm("modem-1-signal.json"),
                    time=NOW)
    assert (s.mcc_mnc, s.operator, s.rat) == (None, None, None)
    assert (s.rssi, s.rsrp, s.rsrq, s.sinr, s.cell_id, s.iccid) == (None,) * 6


def test_mmcli_real_quectel_em12g_on_hspa() -> None:
    """A real modem's document (openwisp's capture; see fixtures/mmcli/README.md)."""
    doc = mm("real-quectel-em12g.json")
    s = parse_mmcli("wwan0", modem=doc, signal=mm("real-signal-umts.json"), time=NOW)
    assert (s.manufacturer, s.model, s.rat, s.signal_pct) == ("Quectel", "EM12-G", "HSPA",
                                                              29.0)
    assert s.mcc_mnc is None  # the submitter's "00000" placeholder is no MCC-MNC
    # no RSRP/RSRQ/SINR on 3G (the capture's UMTS figures are RSCP/EcIo), no band
    assert (s.rssi, s.rsrp, s.rsrq, s.sinr, s.band) == (None,) * 5
    assert net_ports(doc) == ["wwan0"]


def test_mmcli_real_lte_signal() -> None:
    modem = mm("real-quectel-em12g.json")
    modem["modem"]["generic"]["access-technologies"] = ["lte"]
    s = parse_mmcli("wwan0", modem=modem, signal=mm("real-signal-lte.json"), time=NOW)
    assert (s.rat, s.rssi, s.rsrp, s.rsrq, s.sinr) == ("LTE", -64.0, -92.0, -9.0, 19.2)


def test_the_imei_is_never_published_raw() -> None:
    """The IMEI becomes a digest; the raw number appears nowhere in the sample."""
    for name, imei in (("modem-0.json", "861234050012345"),
                       ("real-quectel-em12g.json", "869710030159564")):
        s = parse_mmcli("wwan0", modem=mm(name), time=NOW)
        assert s.modem_id == modem_id(imei) and s.modem_id is not None
        assert len(s.modem_id) == 16 and imei not in json.dumps(s.to_json())
    # the zeroed 3gpp.imei of the real capture is skipped for the equipment identifier
    assert modem_id("000000000000000", "--") is None
    assert modem_id("861234050012345") != modem_id("861234050012346")


def test_mmcli_list_and_ports() -> None:
    assert modem_paths(mm("list.json"))[1] == "/org/freedesktop/ModemManager1/Modem/1"
    assert net_ports(mm("modem-0.json")) == ["wwan0"]
    with pytest.raises(MetadataError, match="modem-list"):
        modem_paths({})


def fake_mmcli(calls: list[list[str]]) -> Any:
    docs: dict[tuple[str, ...], Mapping[str, Any]] = {
        ("-L",): mm("list.json"),
        ("-m", "/org/freedesktop/ModemManager1/Modem/0"): mm("modem-0.json"),
        ("-m", "/org/freedesktop/ModemManager1/Modem/1"): mm("modem-1.json"),
        ("-m", "/org/freedesktop/ModemManager1/Modem/0", "--signal-get"):
            mm("modem-0-signal.json"),
        ("-m", "/org/freedesktop/ModemManager1/Modem/0", "--location-get"):
            mm("modem-0-location.json"),
        ("-i", "/org/freedesktop/ModemManager1/SIM/0"): mm("sim-0.json"),
    }

    def run(args: Sequence[str]) -> Mapping[str, Any]:
        calls.append(list(args))
        try:
            return docs[tuple(args)]
        except KeyError:
            raise MetadataError(f"mmcli {' '.join(args)} failed") from None

    return run


def test_mmcli_reader_finds_the_modem_of_the_interface() -> None:
    calls: list[list[str]] = []
    reader = MmcliModemReader(mmcli=fake_mmcli(calls), clock=lambda: NOW)
    s = reader.read("wwan0")
    assert s is not None and (s.rsrp, s.cell_id, s.iccid) == (-97.0, 0x0A1B2C03,
                                                             "8946000000123456789")
    assert ["-m", "/org/freedesktop/ModemManager1/Modem/0", "--signal-setup=5"] in calls
    assert reader.read("wwan7") is None  # no modem has that net port


def test_gpsd_tpv_3d_fix() -> None:
    data = (FIX / "gpsd" / "watch-3d.jsonl").read_bytes()
    s = parse_gpsd_lines(data, received=NOW)
    assert s is not None
    assert s.time == datetime(2026, 11, 22, 2, 0, 3, tzinfo=UTC)  # the last TPV
    assert (s.lat, s.lon, s.alt, s.speed, s.fix) == (59.40418, 17.94938, 38.9, 13.51, "3d")


def test_gpsd_without_fix_has_no_position() -> None:
    s = parse_gpsd_lines((FIX / "gpsd" / "watch-nofix.jsonl").read_bytes(), received=NOW)
    assert s is not None and (s.lat, s.lon, s.fix, s.time) == (None, None, "none", NOW)
    assert parse_tpv({"class": "SKY"}, received=NOW) is None


def _serve_once(payload: bytes) -> tuple[int, threading.Thread, list[bytes]]:
    srv = socket.create_server(("127.0.0.1", 0))
    got: list[bytes] = []

    def run() -> None:
        with srv:
            conn, _ = srv.accept()
            with conn:
                got.append(conn.recv(1024))
                conn.sendall(payload)
                conn.recv(1)  # until the client closes

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return srv.getsockname()[1], t, got


def test_gpsd_reader_watches_and_returns_a_tpv() -> None:
    port, t, got = _serve_once((FIX / "gpsd" / "watch-3d.jsonl").read_bytes())
    s = GpsdReader("127.0.0.1", port, timeout_s=2).read()
    t.join(2)
    assert got == [b'?WATCH={"enable":true,"json":true}\n']
    assert s is not None and s.fix == "3d"


def test_gpsd_reader_errors_are_clear() -> None:
    port, t, _ = _serve_once(b'{"class":"VERSION","release":"3.25"}\n')
    with pytest.raises(MetadataError, match=r"sent no TPV report in|closed the connection"):
        GpsdReader("127.0.0.1", port, timeout_s=0.3).read()
    t.join(2)
    free = socket.create_server(("127.0.0.1", 0))
    closed_port = free.getsockname()[1]
    free.close()
    with pytest.raises(MetadataError, match=f"cannot reach gpsd at 127.0.0.1:{closed_port}"):
        GpsdReader("127.0.0.1", closed_port, timeout_s=0.5).read()
