"""The smallest experiment: it writes which machine it ran on to ``machine.json``
(format testbed.machine v1), so a run on a new architecture (an arm64 node under
emulation, a Raspberry Pi) shows the platform end to end. It imports only the
experiment kit and the standard library."""

from __future__ import annotations

import json
import platform
import sys

from testbed_kit.contract import load_config, results_dir, run_experiment
from testbed_kit.results import write_result


def main() -> None:
    config = load_config()
    result = {
        "format": "testbed.machine",
        "version": 1,
        "machine": platform.machine(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "interface": config.get("interface"),
    }
    write_result(results_dir(), "machine.json", result)
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(run_experiment("machine", main))
