"""TAT experiment entry point: one iperf3 TCP transfer through the run's interface.

Reads the run configuration (the experiment contract: /testbed/config.json and the
environment), runs one iperf3 transfer against the measurement server
(:func:`testbed_kit.iperf3.measure`: the server's ports 5201..5208 in turn while they
answer busy or are stuck), keeps iperf3's raw report as ``/results/iperf3.json`` and
writes ``/results/tat.json`` (format testbed.tat v1, :mod:`testbed_kit.tat_result`).
On failure it exits non-zero with the reason as the last line of stderr, which the
agent copies into the run's final state. It imports the experiment kit and the
standard library only, so the image needs nothing but python3 and iperf3.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from testbed_kit import iperf3
from testbed_kit.contract import load_config, results_dir, run_experiment
from testbed_kit.results import write_result
from testbed_kit.tat_result import Iperf3OutputError, parse_iperf3

DEFAULTS: dict[str, Any] = {"duration_s": 10, "direction": "uplink", "bin_s": 0.1}


def main() -> None:
    out = results_dir()
    out.mkdir(parents=True, exist_ok=True)
    config = load_config(DEFAULTS)
    params = config["parameters"]
    raw, port = iperf3.measure(
        server=str(config["server_address"]), duration_s=float(params["duration_s"]),
        direction=str(params["direction"]), interface_address=config.get("interface_address"),
        interface=config.get("interface"), raw_file=out / "iperf3.json", log_prefix="tat")
    result = parse_iperf3(
        raw,
        direction=str(params["direction"]),
        interface=str(config.get("interface") or ""),
        server=str(config["server_address"]),
        port=port,
        bin_s=float(params["bin_s"]),
    )
    write_result(out, "tat.json", result)
    print(
        f"tat: {result['direction']} {result['mean_bps'] / 1e6:.2f} Mbit/s receiver mean, "
        f"{result['bytes']} bytes in {result['duration_s']:.1f} s, {len(result['bins'])} bins",
        file=sys.stderr,
    )
    print(json.dumps({k: result[k] for k in ("direction", "mean_bps", "bytes", "port")}))


if __name__ == "__main__":
    sys.exit(run_experiment("tat", main, failures=(Iperf3OutputError, ValueError)))
