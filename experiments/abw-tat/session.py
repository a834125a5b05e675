"""ABw-TAT-ABw session experiment: entry point.

Runs the steps of :func:`steps.session_steps` through the run's interface: ABw steps
with the project's ``abw`` estimator (``abw send``, JSON lines), TAT steps with the
kit's iperf3 client (:mod:`testbed_kit.iperf3`) or with D-ITG (:mod:`ditg`,
``tat_tool: ditg``), a pause
between the halves and between repetitions. For every step it records start and end,
the interface's kernel byte counters before and after (what the SIM pays, whatever the
tools say) and the tool's raw output. The session summary is computed by
:mod:`testbed_kit.session`, the same code the orchestrator's pages use.

Writes /results/abw-tat.json (format testbed.abw-tat v1), one tat-<n>.json (testbed.tat)
per TAT step next to the tool's raw output (iperf3-<n>.json, or ditg-<n>-*), and
abw-<n>-<method>.jsonl per ABw step. Any failed step ends the session: what ran is
kept, the failed step is recorded with its error, the error is recorded in the result
and as the last stderr line, and the exit code is non-zero.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import ditg
from steps import Step, session_steps

from testbed_kit import abw_client, iperf3
from testbed_kit.contract import ExperimentError, load_config, results_dir, run_experiment
from testbed_kit.interface import step_cost
from testbed_kit.results import write_result
from testbed_kit.session import abw_run, session_figures, tat_run
from testbed_kit.tat_result import Iperf3OutputError, parse_iperf3

FORMAT, VERSION = "testbed.abw-tat", 1
TAT_TOOLS = ("iperf3", "ditg")


class SessionError(ExperimentError):
    """A session that cannot go on; the message is the run's reason."""


def _now() -> str:
    return datetime.now(UTC).isoformat()


def run_abw(config: dict[str, Any], method: str, out: Path) -> list[dict[str, Any]]:
    """One ABw step: ``estimates`` estimates with ``method`` (:mod:`testbed_kit.abw_client`:
    the next receiver port while one answers busy). Returns the tool's records (written
    to ``out``)."""
    p = config["parameters"]
    try:
        return abw_client.run_abw(config, method=method, count=int(p["estimates"]),
                                  size=int(p["probe_size"]), direction=str(p["direction"]),
                                  out=out, capacity_bps=float(p.get("capacity_bps") or 0),
                                  log_prefix="abw-tat")
    except abw_client.AbwError as e:
        raise SessionError(str(e)) from e


def run_tat(config: dict[str, Any], n: int, out_dir: Path) -> dict[str, Any]:
    """One TAT step with the chosen tool; writes tat-<n>.json and the raw output."""
    p = config["parameters"]
    if p.get("tat_tool", "iperf3") == "ditg":
        result = ditg.measure(config, n, out_dir)
    else:
        raw, port = iperf3.measure(
            server=str(config["server_address"]), duration_s=float(p["run_s"]),
            direction=str(p["direction"]), interface_address=config.get("interface_address"),
            interface=config.get("interface"), raw_file=out_dir / f"iperf3-{n}.json",
            log_prefix="abw-tat")
        result = parse_iperf3(raw, direction=str(p["direction"]),
                              interface=str(config.get("interface") or ""),
                              server=str(config["server_address"]), port=port, bin_s=0.1)
    write_result(out_dir, f"tat-{n}.json", result)
    return result


def summarise(tats: list[dict[str, Any]], abws: list[list[dict[str, Any]]],
              records: list[dict[str, Any]]) -> dict[str, Any]:
    if not tats:
        return summarise_abw_only(abws, records)
    figures = session_figures(tat=[tat_run(t) for t in tats], abw=[abw_run(a) for a in abws])
    by_kind = {"abw": 0, "tat": 0}
    for r in records:
        if r["kind"] in by_kind:
            by_kind[r["kind"]] += r["iface_rx_bytes"] + r["iface_tx_bytes"]
    per_method: dict[str, dict[str, Any]] = {}
    for method, f in figures.methods.items():
        latencies = [x for r in {id(p.abw): p.abw for p in f.pairs}.values()
                     for x in r.latencies_s]
        per_method[method] = {
            "abw_mean_bps": f.abw_mean_bps, "rd_mean": f.rd_mean,
            "abs_diff_mean_bps": f.abs_diff_mean_bps, "latency_mean_s": f.latency_mean_s,
            "latency_sd_s": f.latency_sd_s, "estimates": len(latencies),
            "abw_bytes": f.abw_bytes, "tat_bytes": f.tat_bytes,
            "volume_ratio": f.volume_ratio,
            "pairs": [{"tat_bps": p.tat.mean_bps, "abw_bps": p.abw.mean_bps,
                       "rd": p.rd, "abs_diff_bps": p.abs_diff_bps} for p in f.pairs],
        }
    abw_mean = sum(f.abw_mean_bps for f in figures.methods.values()) / len(figures.methods)
    tat_mean = figures.tat_mean_bps
    return {
        "tat_mean_bps": tat_mean,
        "abw_mean_bps": abw_mean,
        "rd": abs(tat_mean - abw_mean) / tat_mean if tat_mean > 0 else None,
        "abs_diff_bps": abs(tat_mean - abw_mean),
        "methods": per_method,
        # Volumes from the interface counters (both directions): what the SIM paid.
        "abw_iface_bytes": by_kind["abw"],
        "tat_iface_bytes": by_kind["tat"],
        "volume_ratio_iface": by_kind["tat"] / by_kind["abw"] if by_kind["abw"] else None,
    }


def summarise_abw_only(abws: list[list[dict[str, Any]]],
                       records: list[dict[str, Any]]) -> dict[str, Any]:
    """A session without TAT (``tats: 0``, a proxy-mode campaign's cheap session): the
    ABw figures alone; the TAT fields are None (there is nothing to pair)."""
    runs = [abw_run(a) for a in abws]
    methods: dict[str, list[float]] = {}
    for r in runs:
        methods.setdefault(r.method, []).append(r.mean_bps)
    abw_bytes = sum(r["iface_rx_bytes"] + r["iface_tx_bytes"] for r in records
                    if r["kind"] == "abw")
    per_method = {m: {"abw_mean_bps": sum(v) / len(v), "estimates": sum(
        len(r.estimates_bps) for r in runs if r.method == m)} for m, v in methods.items()}
    means = [f["abw_mean_bps"] for f in per_method.values()]
    return {"tat_mean_bps": None, "abw_mean_bps": sum(means) / len(means) if means else None,
            "rd": None, "abs_diff_bps": None, "methods": per_method,
            "abw_iface_bytes": abw_bytes, "tat_iface_bytes": 0, "volume_ratio_iface": None}


def check_parameters(p: dict[str, Any]) -> None:
    """Refuse, before any traffic, what no step could measure."""
    if p.get("tat_tool", "iperf3") not in TAT_TOOLS:
        raise SessionError(f"tat_tool must be one of {TAT_TOOLS}, not {p['tat_tool']!r}")
    if p.get("tat_tool") == "ditg" and p["direction"] != "uplink":
        raise SessionError("tat_tool ditg measures uplink only (the server cannot reach "
                           "a node behind NAT); use tat_tool iperf3 for downlink")
    if "spruce" in (p["method1"], p["method2"]) and not p.get("capacity_bps"):
        raise SessionError("spruce needs the bottleneck capacity: set capacity_bps")


def run_session(config: dict[str, Any], out: Path) -> dict[str, Any]:
    p = config["parameters"]
    iface = str(config.get("interface") or "")
    records: list[dict[str, Any]] = []
    tats: list[dict[str, Any]] = []
    abws: list[list[dict[str, Any]]] = []
    doc: dict[str, Any] = {"format": FORMAT, "version": VERSION, "parameters": p,
                           "interface": iface, "server": config["server_address"],
                           "start": _now(), "steps": records}
    try:
        check_parameters(p)
        plan = session_steps(method1=str(p["method1"]), method2=str(p["method2"]),
                             halves=int(p["halves"]), pause_s=float(p["pause_s"]),
                             repetitions=int(p.get("repetitions", 1)),
                             tat=int(p.get("tats", 1)) > 0)
        for n, step in enumerate(plan):
            if step.kind == "pause":
                time.sleep(step.seconds)
                continue
            _step(config, step, n, iface, out, tats, abws, records)
        doc["summary"] = summarise(tats, abws, records)
    except (ExperimentError, Iperf3OutputError, ValueError, LookupError, OSError) as e:
        failed = records[-1] if records and "error" in records[-1] else None
        tool = failed and (failed.get("tool") or failed["method"])
        where = f"{failed['kind']} step ({tool}): " if failed else ""
        doc["error"] = f"{where}{e}"
    doc["end"] = _now()
    write_result(out, "abw-tat.json", doc)
    return doc


def _step(config: dict[str, Any], step: Step, n: int, iface: str, out: Path,
          tats: list[dict[str, Any]], abws: list[list[dict[str, Any]]],
          records: list[dict[str, Any]]) -> None:
    """Run one step and append its record; a failed step is recorded with its error
    (and what it cost on the interface) before the error ends the session."""
    record: dict[str, Any] = {"kind": step.kind, "repetition": step.repetition,
                              "half": step.half, "method": step.method, "start": _now()}

    def raw() -> list[str]:
        return sorted(f.name for f in out.glob(f"*-{n}[-.]*") if f.name != f"tat-{n}.json")

    try:
        with step_cost(record, iface, raw):
            if step.kind == "abw":
                record["file"] = f"abw-{n}-{step.method}.jsonl"
                abws.append(run_abw(config, step.method, out / record["file"]))
            else:
                record["file"] = f"tat-{n}.json"
                record["tool"] = config["parameters"].get("tat_tool", "iperf3")
                tats.append(run_tat(config, n, out))
    finally:
        records.append(record)


def main() -> None:
    out = results_dir()
    out.mkdir(parents=True, exist_ok=True)
    doc = run_session(load_config(), out)
    if "error" in doc:
        raise SessionError(doc["error"])
    s = doc["summary"]
    if s["tat_mean_bps"] is None:
        print(f"abw-tat: ABw only, {s['abw_mean_bps'] / 1e6:.2f} Mbit/s", file=sys.stderr)
        print(json.dumps({k: s[k] for k in ("tat_mean_bps", "abw_mean_bps", "rd")}))
        return
    print(f"abw-tat: TAT {s['tat_mean_bps'] / 1e6:.2f} Mbit/s, ABw {s['abw_mean_bps'] / 1e6:.2f}"
          f" Mbit/s, RD {s['rd']:.1%}, volume ratio {s['volume_ratio_iface']}", file=sys.stderr)
    print(json.dumps({k: s[k] for k in ("tat_mean_bps", "abw_mean_bps", "rd")}))


if __name__ == "__main__":
    sys.exit(run_experiment("abw-tat", main, failures=(LookupError,)))
