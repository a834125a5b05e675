"""abw-tools entry point: every ABw method at a small and a large probe size, each
estimate between TAT transfers on the same link (after Goga & Teixeira).

The plan is :func:`testbed_kit.abw_tools.plan`: per repetition a TAT, then one estimate
of each cell (method x probe size) in that repetition's order (reversed every other
repetition), and a closing TAT. ABw by the project's estimator (``abw send``,
:mod:`testbed_kit.abw_client`), TAT by the kit's iperf3 client with 100 ms receiver
bins. Every step records its span and the interface's kernel byte counters (what the
SIM paid, whatever the tools say) and keeps the tool's raw output:
``abw-<step>-<method>-<size>.jsonl``, ``iperf3-<step>.json`` and ``tat-<step>.json``
(``testbed.tat``).

Writes /results/abw-tools.json (format ``testbed.abw-tools`` v1): the steps, every
estimate and TAT, and the per-cell summary (:func:`testbed_kit.abw_tools.summarise`,
the code the orchestrator's page uses). A failed step ends the session: what ran is
kept, the error recorded in the result and as the last stderr line (non-zero exit).
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from testbed_kit import abw_client, iperf3
from testbed_kit.abw_tools import (
    FORMAT,
    METHODS,
    VERSION,
    AbwToolsOutputError,
    Step,
    cells,
    estimate_record,
    pair,
    parse_result,
    plan,
    summarise,
)
from testbed_kit.contract import ExperimentError, load_config, results_dir, run_experiment
from testbed_kit.interface import step_cost
from testbed_kit.results import write_result
from testbed_kit.tat_result import Iperf3OutputError, parse_iperf3

DEFAULTS: dict[str, Any] = {
    "methods": list(METHODS), "small_size": 200, "large_size": 1400, "repetitions": 2,
    "run_s": 10.0, "direction": "uplink", "capacity_bps": 0, "gap_s": 0.5,
    "pathload_fleet_len": 12, "pathload_idle_factor": 9.0,
}


class SessionError(ExperimentError):
    """A session that cannot go on; the message is the run's reason."""


def _now() -> str:
    return datetime.now(UTC).isoformat()


def check_parameters(p: dict[str, Any]) -> None:
    """Refuse, before any traffic, what no step could measure."""
    unknown = [m for m in p["methods"] if m not in METHODS]
    if unknown or not p["methods"]:
        raise SessionError(f"methods must be some of {METHODS}, not {p['methods']!r}")
    if "spruce" in p["methods"] and not float(p.get("capacity_bps") or 0):
        raise SessionError("spruce needs the bottleneck capacity: set capacity_bps")
    if int(p["small_size"]) >= int(p["large_size"]):
        raise SessionError(f"small_size ({p['small_size']}) must be below large_size "
                           f"({p['large_size']})")


def _extra(method: str, p: dict[str, Any]) -> list[str]:
    if method != "pathload":
        return []
    return ["--fleet-len", str(int(p["pathload_fleet_len"])),
            "--idle-factor", str(float(p["pathload_idle_factor"]))]


def run_step(config: dict[str, Any], step: Step, out: Path, doc: dict[str, Any],
             record: dict[str, Any]) -> None:
    """One step; appends its estimate or TAT to ``doc`` and fills in its ``record``."""
    p = config["parameters"]
    direction = str(p["direction"])
    if step.cell is not None:
        cell = step.cell
        record.update(method=cell.method, size=cell.size,
                      file=f"abw-{step.index}-{cell.method}-{cell.size}.jsonl")
        records = abw_client.run_abw(
            config, method=cell.method, count=1, size=cell.size, direction=direction,
            out=out / record["file"], capacity_bps=float(p.get("capacity_bps") or 0),
            extra=_extra(cell.method, p), timeout_s=300.0, log_prefix="abw-tools")
        estimates = [r for r in records if r.get("type") == "estimate"]
        if not estimates:
            raise SessionError(f"abw {cell.method} gave no estimate")
        doc["estimates"].append(estimate_record(step.index, step.repetition, cell,
                                                estimates[0]))
        return
    record["file"] = f"tat-{step.index}.json"
    raw, port = iperf3.measure(
        server=str(config["server_address"]), duration_s=float(p["run_s"]),
        direction=direction, interface_address=config.get("interface_address"),
        interface=config.get("interface"), raw_file=out / f"iperf3-{step.index}.json",
        log_prefix="abw-tools")
    tat = parse_iperf3(raw, direction=direction, interface=str(config.get("interface") or ""),
                       server=str(config["server_address"]), port=port, bin_s=0.1)
    write_result(out, record["file"], tat)
    doc["tats"].append({"step": step.index,
                        "start_unix_s": datetime.fromisoformat(str(tat["start"])).timestamp(),
                        "mean_bps": float(tat["mean_bps"]),
                        "bytes": int(tat.get("sender_bytes") or tat["bytes"])})


def run_session(config: dict[str, Any], out: Path) -> dict[str, Any]:
    p = config["parameters"]
    iface = str(config.get("interface") or "")
    doc: dict[str, Any] = {"format": FORMAT, "version": VERSION, "parameters": p,
                           "direction": str(p["direction"]), "interface": iface,
                           "server": config["server_address"], "start": _now(),
                           "steps": [], "estimates": [], "tats": []}
    try:
        check_parameters(p)
        steps = plan(int(p["repetitions"]), cells(list(p["methods"]),
                                                  (int(p["small_size"]), int(p["large_size"]))))
        for step in steps:
            if step.index:
                time.sleep(float(p["gap_s"]))
            record: dict[str, Any] = {"index": step.index, "repetition": step.repetition,
                                      "kind": step.kind, "start": _now()}

            def raw(index: int = step.index) -> list[str]:
                return sorted(f.name for f in out.glob(f"*-{index}[-.]*"))

            try:
                with step_cost(record, iface, raw):
                    run_step(config, step, out, doc, record)
            finally:
                doc["steps"].append(record)
            print(f"abw-tools: step {step.index} {step.kind} "
                  f"{step.cell.label if step.cell else ''}".rstrip(), file=sys.stderr)
        doc["summary"] = [f.as_dict() for f in summarise(pair(parse_result(doc)))]
    except (ExperimentError, Iperf3OutputError, AbwToolsOutputError, ValueError, LookupError,
            OSError) as e:
        failed = doc["steps"][-1] if doc["steps"] and "error" in doc["steps"][-1] else None
        where = f"step {failed['index']} ({failed['kind']}): " if failed else ""
        doc["error"] = f"{where}{e}"
    doc["end"] = _now()
    write_result(out, "abw-tools.json", doc)
    return doc


def main() -> None:
    out = results_dir()
    out.mkdir(parents=True, exist_ok=True)
    doc = run_session(load_config(DEFAULTS), out)
    if "error" in doc:
        raise SessionError(doc["error"])
    for c in doc["summary"]:
        print(f"abw-tools: {c['method']} {c['size']} B: error {c['error_median']:+.1%}, "
              f"latency {c['latency_mean_s']:.2f} s, {c['probe_bytes_mean'] / 1e3:.0f} kB "
              "of probes", file=sys.stderr)
    print(json.dumps({"cells": len(doc["summary"]), "estimates": len(doc["estimates"])}))


if __name__ == "__main__":
    sys.exit(run_experiment("abw-tools", main, failures=(LookupError,)))
