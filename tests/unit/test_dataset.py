"""The pure parts of dataset releases: anonymisation, captures, tables, metadata."""

from __future__ import annotations

import ipaddress
import json
from datetime import date
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from orchestrator.analysis.capture import reference_flows
from orchestrator.analysis.pcap import iter_frames, read_capture
from orchestrator.dataset import metadata as M
from orchestrator.dataset.anonymise import Anonymiser, BadKey, coarsen
from orchestrator.dataset.captures import anonymise_capture
from orchestrator.dataset.contrib import release_tables
from orchestrator.dataset.release import BadRelease, Release, changelog, parse_exclusion
from orchestrator.dataset.tables import sorted_rows
from orchestrator.services.dataset_files import (
    csv_bytes,
    parquet_bytes,
    verify_release,
    write_release,
)

FIXTURES = Path(__file__).parent / "fixtures"

#: The key and (raw -> anonymised) addresses of the sample trace published with the
#: Crypto-PAn reference implementation (Xu, Fan, Ammar, Moon; Georgia Tech).
REFERENCE_KEY = bytes([21, 34, 23, 141, 51, 164, 207, 128, 19, 10, 91, 22, 73, 144, 125, 16,
                       216, 152, 143, 131, 121, 121, 101, 39, 98, 87, 76, 45, 42, 132, 34, 2])
REFERENCE = {
    "128.11.68.132": "135.242.180.132", "129.118.74.4": "134.136.186.123",
    "130.132.252.244": "133.68.164.234", "141.223.7.43": "141.167.8.160",
    "141.233.145.108": "141.129.237.235", "152.163.225.39": "151.140.114.167",
    "156.29.3.236": "147.225.12.42", "165.247.96.84": "162.9.99.234",
    "166.107.77.190": "160.132.178.185", "192.102.249.13": "252.138.62.131",
    "192.215.32.125": "252.43.47.189", "192.233.80.103": "252.25.108.8",
    "192.41.57.43": "252.222.221.184", "193.150.244.223": "253.169.52.216",
    "195.205.63.100": "255.186.223.5", "198.200.171.101": "249.199.68.213",
    "198.26.132.101": "249.36.123.202", "198.36.213.5": "249.7.21.132",
    "198.51.77.238": "249.18.186.254", "199.217.79.101": "248.38.184.213",
    "202.49.198.20": "245.206.7.234", "203.12.160.252": "244.248.163.4",
    "204.184.162.189": "243.192.77.90", "204.202.136.230": "243.178.4.198",
    "204.29.20.4": "243.33.20.123", "205.178.38.67": "242.108.198.51",
    "205.188.147.153": "242.96.16.101", "205.188.248.25": "242.96.88.27",
    "205.245.121.43": "242.21.121.163", "207.105.49.5": "241.118.205.138",
    "207.135.65.238": "241.202.129.222", "207.155.9.214": "241.220.250.22",
    "207.188.7.45": "241.255.249.220", "207.25.71.27": "241.33.119.156",
    "207.33.151.131": "241.1.233.131", "208.147.89.59": "227.237.98.191",
    "208.234.120.210": "227.154.67.17", "208.28.185.184": "227.39.94.90",
    "208.52.56.122": "227.8.63.165", "209.12.231.7": "226.243.167.8",
    "209.238.72.3": "226.6.119.243", "209.246.74.109": "226.22.124.76",
    "209.68.60.238": "226.184.220.233", "209.85.249.6": "226.170.70.6",
    "212.120.124.31": "228.135.163.231", "212.146.8.236": "228.19.4.234",
    "212.186.227.154": "228.59.98.98", "212.204.172.118": "228.71.195.169",
    "212.206.130.201": "228.69.242.193", "216.148.237.145": "235.84.194.111",
    "216.157.30.252": "235.89.31.26", "216.184.159.48": "235.96.225.78",
    "216.227.10.221": "235.28.253.36", "216.254.18.172": "235.7.16.162",
    "216.32.132.250": "235.192.139.38", "216.35.217.178": "235.195.157.81",
    "24.0.250.221": "100.15.198.226", "24.13.62.231": "100.2.192.247",
    "24.14.213.138": "100.1.42.141",
}


def test_crypto_pan_matches_the_reference_implementation() -> None:
    anon = Anonymiser(REFERENCE_KEY)
    assert {raw: anon.address(raw) for raw in REFERENCE} == REFERENCE


def test_anonymisation_preserves_prefixes_for_both_families() -> None:
    anon = Anonymiser(bytes(range(32)))

    def common(a: str, b: str) -> int:
        x, y = ipaddress.ip_address(a), ipaddress.ip_address(b)
        bits = x.max_prefixlen
        diff = int(x) ^ int(y)
        return bits - diff.bit_length()
    for a, b in (("172.30.1.2", "172.30.1.10"), ("172.30.1.2", "172.30.2.2"),
                 ("2001:db8::1", "2001:db8::2"), ("2001:db8:1::1", "2001:db8:2::1")):
        assert common(anon.address(a), anon.address(b)) == common(a, b)
        assert anon.address(a) != a
    assert Anonymiser(bytes(range(1, 33))).address("172.30.1.2") != anon.address("172.30.1.2")
    with pytest.raises(BadKey, match="32 bytes"):
        Anonymiser(b"short")


def test_text_addresses_are_replaced_and_nothing_else() -> None:
    anon = Anonymiser(bytes(32))
    text = ("connected to 172.30.1.10 port 5201 from [2001:db8::7]:4000 at 12:30:00, "
            "iperf 3.12, not 999.1.2.3")
    out = anon.text(text)
    assert "172.30.1.10" not in out and "2001:db8::7" not in out
    assert anon.address("172.30.1.10") in out and anon.address("2001:db8::7") in out
    assert "12:30:00" in out and "iperf 3.12" in out and "999.1.2.3" in out


def test_node_pseudonyms_are_stable_distinct_and_keyed() -> None:
    a, b = Anonymiser(bytes(32)), Anonymiser(bytes([1]) * 32)
    assert a.node("se-01") == Anonymiser(bytes(32)).node("se-01") != a.node("se-02")
    assert a.node("se-01") != b.node("se-01") and "se-01" not in a.node("se-01")


def test_positions_snap_to_the_centre_of_their_cell() -> None:
    assert coarsen(59.334591, 18.063240, 0.01) == (59.335, 18.065)
    assert coarsen(-33.8688, 151.2093, 0.1) == (-33.85, 151.25)
    assert coarsen(1.23456, 2.34567, 0) == (1.23456, 2.34567)
    with pytest.raises(ValueError, match="grid"):
        coarsen(0, 0, -1)


@pytest.mark.parametrize("name", ["tcp-6mbit-any.pcap", "tcp-6mbit-any.pcapng",
                                  "tcp-6mbit-tx.pcap"])
def test_published_captures_keep_headers_and_flows_but_no_address(name: str) -> None:
    data = (FIXTURES / name).read_bytes()
    original = read_capture(data)
    anon = Anonymiser(bytes(range(32)))
    out = anonymise_capture(data, anon)
    published = read_capture(out.data)
    assert out.packets == len(original.packets) == len(published.packets) > 0
    assert out.damage is None
    for address in {a for p in original.packets for a in (p.src, p.dst)}:
        assert address not in out.data
    # the same packets, header for header, under new addresses
    for before, after in zip(original.packets, published.packets, strict=True):
        assert (after.src, after.dst) == (anon.packed(before.src), anon.packed(before.dst))
        assert (before.ts_ns, before.sport, before.dport, before.seq, before.ack,
                before.payload) == (after.ts_ns, after.sport, after.dport, after.seq,
                                    after.ack, after.payload)
    # no byte beyond the transport headers (fewer when the capture cut them)
    for frame in iter_frames(out.data):
        packet = out.data[frame.start:frame.start + frame.caplen]
        ihl = (packet[0] & 0x0F) * 4
        assert frame.caplen <= ihl + (packet[ihl + 12] >> 4) * 4 and frame.caplen <= frame.orig_len
    flows_before, flows_after = reference_flows(data).flows, reference_flows(out.data).flows
    assert [(f.payload_bytes, f.fct_s, f.retrans_packets) for f in flows_before] == [
        (f.payload_bytes, f.fct_s, f.retrans_packets) for f in flows_after]


def test_a_capture_cut_short_gives_what_came_before_and_says_where() -> None:
    data = (FIXTURES / "tcp-6mbit-any.pcap").read_bytes()
    out = anonymise_capture(data[: len(data) // 2], Anonymiser(bytes(32)))
    assert out.packets > 0 and out.damage is not None and "truncated" in out.damage


def test_exclusions_are_parsed_or_refused_with_the_form_to_use() -> None:
    rule = parse_exclusion("node:se-03=owner withdrew consent")
    assert (rule.kind, rule.target, rule.reason) == ("node", "se-03", "owner withdrew consent")
    assert rule.matches(run="r-1", node="se-03", interface="op0")
    sim = parse_exclusion("sim:se-01/op1=SIM lent to another project")
    assert sim.matches(run="r", node="se-01", interface="op1")
    assert not sim.matches(run="r", node="se-01", interface="op0")
    for bad, says in (("node:se-03", "KIND:ID=REASON"), ("host:x=y", "not one of"),
                      ("sim:se-01=y", "NODE/INTERFACE"), ("run:=why", "KIND:ID=REASON")):
        with pytest.raises(BadRelease, match=says):
            parse_exclusion(bad)


def test_checksums_are_sorted_and_parse_back() -> None:
    text = M.checksums({"b.csv": "1" * 64, "a/x.parquet": "2" * 64})
    assert text.decode().splitlines() == [f"{'2' * 64}  a/x.parquet", f"{'1' * 64}  b.csv"]
    parsed, bad = M.parse_checksums(text.decode() + "nonsense\n")
    assert parsed == {"b.csv": "1" * 64, "a/x.parquet": "2" * 64}
    assert bad == ["SHA256SUMS line 3 is not '<sha256>  <path>': 'nonsense'"]


def test_changelog_keeps_the_previous_entries_and_counts_the_change() -> None:
    first = changelog("2026-11-23", None, {"runs": 4}, None)
    second = changelog("2026-11-24", "2026-11-23", {"runs": 6}, {"runs": 4}, first)
    assert second.startswith("# Changelog\n\n## 2026-11-24")
    assert "- runs: 6 rows (+2 since 2026-11-23)." in second
    assert "## 2026-11-23" in second and "- First release." in second


def _rows() -> dict[str, list[dict[str, object]]]:
    base = {"timezone": "Europe/Stockholm", "node": "se-01", "country": "SE",
            "operator": "240-01", "operator_name": "Telia", "interface": "op0",
            "campaign": "c-1", "run": "r-1", "session": "s", "direction": "uplink"}
    return {
        "runs": [{"run": "r-1", "campaign": "c-1", "node": "se-01", "experiment": "tat",
                  "experiment_version": 1, "start_utc": 1_700_000_000_000_000,
                  "end_utc": None, "state": "done", "bytes": 123, "parameters": "{}"}],
        "tat_bins": [{**base, "time_utc": 1_700_000_000_100_000 - i, "bps": 1e6 / 3,
                      "bytes": 12_500, "duration_s": 0.1} for i in range(3)],
    }


def test_tables_write_the_same_bytes_and_the_same_rows_in_both_formats(
        tmp_path: Path) -> None:
    spec = next(t for t in release_tables() if t.name == "tat_bins")
    rows = sorted_rows(spec, reversed(_rows()["tat_bins"]))
    assert [r["time_utc"] for r in rows] == sorted(r["time_utc"] for r in rows)
    assert parquet_bytes(spec, rows) == parquet_bytes(spec, list(rows))
    text = csv_bytes(spec, rows).decode().splitlines()
    assert text[0].split(",") == list(spec.names)
    assert text[1].startswith("2023-11-14T22:13:20.099998Z,Europe/Stockholm,se-01")
    assert "0.3333333333333333" not in text[1] and "333333.3333333333" in text[1]
    (tmp_path / "t.parquet").write_bytes(parquet_bytes(spec, rows))
    table = pq.read_table(tmp_path / "t.parquet")
    assert table.num_rows == 3 and table.schema.field("bps").metadata[b"unit"] == b"bit/s"
    assert str(table.schema.field("time_utc").type) == "timestamp[us, tz=UTC]"


def test_a_written_release_validates_and_its_damage_is_named(tmp_path: Path) -> None:
    release = Release(name="mbb-testbed-c-1", version="1.0.0", campaigns=("c-1",),
                      period_from=date(2026, 11, 22), period_to=date(2026, 11, 23))
    counts = write_release(tmp_path, release, _rows(), {"raw/r-1/results/x.log": b"ok\n"},
                           previous=None)
    assert counts["tat_bins"] == 3 and counts["flows"] == 0
    assert verify_release(tmp_path).problems == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "CHANGELOG.md", "CITATION.cff", "README.md", "SHA256SUMS", "datapackage.json",
        "raw", "tables"]
    (tmp_path / "raw/r-1/results/x.log").write_bytes(b"changed\n")
    problems = verify_release(tmp_path).problems
    assert any(p.startswith("raw/r-1/results/x.log: SHA-256") for p in problems), problems
    assert any("expected hash" in p and "raw-r-1-results-x.log" in p for p in problems)


def test_the_agent_records_lose_sim_serials_modem_ids_and_exact_positions() -> None:
    """meta/modem.jsonl's ICCID and (unkeyed) modem id become keyed digests, the same
    for the same SIM within a release and unrelated under another key; meta/gps.jsonl's
    positions snap to the grid, as the positions table's do."""
    from orchestrator.dataset.records import publish_records

    iccid, modem = "8946000000123456789", "0123456789abcdef"
    modem_lines = "".join(json.dumps({"interface": "op0", "iccid": iccid, "modem_id": modem,
                                      "rsrp": -97.0, "cell_id": 169552899}) + "\n"
                          for _ in range(2)) + "not json\n"
    anon = Anonymiser(REFERENCE_KEY)
    out = publish_records("meta/modem.jsonl", modem_lines, anon, 0.01)
    assert iccid not in out.text and modem not in out.text
    records = [json.loads(line) for line in out.text.splitlines()]
    assert len(records) == 2 and records[0] == records[1]  # the same SIM, the same digest
    assert records[0]["iccid"].startswith("iccid-") and len(records[0]["iccid"]) == 22
    assert records[0]["modem_id"].startswith("modem-") and records[0]["rsrp"] == -97.0
    assert out.notes == ["meta/modem.jsonl: 1 line(s) not a JSON object; left out"]
    other = publish_records("meta/modem.jsonl", modem_lines, Anonymiser(b"\x01" * 32), 0.01)
    assert json.loads(other.text.splitlines()[0])["iccid"] != records[0]["iccid"]

    gps = json.dumps({"time": "2026-11-22T02:00:05+00:00", "lat": 59.334591,
                      "lon": 18.063240, "alt": 20.0}) + "\n"
    [fix] = [json.loads(line) for line in
             publish_records("meta/gps.jsonl", gps, anon, 0.01).text.splitlines()]
    assert (fix["lat"], fix["lon"], fix["alt"]) == (59.335, 18.065, 20.0)
    assert publish_records("results/x.json", gps, anon, 0.01).text == gps  # others as sent
