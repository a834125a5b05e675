"""The project's ABw estimator (tools/abw, ``abw send``) run from an experiment: the
command for a run's interface and direction, the receivers tried in turn while one
answers busy (for a few rounds: :mod:`testbed_kit.busy`), and its JSON lines kept as the
step's raw output.

Shared by the experiments that measure ABw (abw-tat, abw-tools), so both drive the
tool and read its errors the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from testbed_kit.busy import busy_rounds
from testbed_kit.contract import ExperimentError
from testbed_kit.results import write_raw

#: ABw receivers on the measurement server (one session at a time each).
ABW_PORTS = (7351, 7352, 7353, 7354)
#: An estimate takes ~1 s (pathload-like and spruce-like at low rates: up to a minute
#: or two); beyond this per estimate the tool is hung, not slow.
TIMEOUT_PER_ESTIMATE_S = 20.0


class AbwError(ExperimentError):
    """The estimator failed, or could not be started; the message says why."""


def abw_command(config: dict[str, Any], *, method: str, port: int, count: int, size: int,
                direction: str, capacity_bps: float = 0.0,
                extra: Sequence[str] = ()) -> list[str]:
    """``abw send`` against the run's server on ``port``, from the run's interface
    address; spruce needs ``capacity_bps`` (the caller checks it is given)."""
    cmd = ["abw", "send", "-s", f"{config['server_address']}:{port}", "-m", method,
           "-n", str(count), "--size", str(size)]
    if config.get("interface_address"):
        cmd += ["--bind", str(config["interface_address"])]
    if direction == "downlink":
        cmd.append("--reverse")
    if method == "spruce":
        cmd += ["--capacity", str(int(capacity_bps))]
    return [*cmd, *extra]


def run_abw(config: dict[str, Any], *, method: str, count: int, size: int, direction: str,
            out: Path, capacity_bps: float = 0.0, extra: Sequence[str] = (),
            timeout_s: float | None = None, log_prefix: str = "abw") -> list[dict[str, Any]]:
    """``count`` estimates with ``method``, trying the next receiver port while one
    answers busy, round after round (:func:`~testbed_kit.busy.busy_rounds`). The
    tool's stdout is kept as ``out``; returns its records. Raises
    :class:`AbwError` with the tool's own reason when it fails."""
    timeout = timeout_s if timeout_s is not None else TIMEOUT_PER_ESTIMATE_S * count + 10
    last = ""
    for port in busy_rounds(ABW_PORTS):
        cmd = abw_command(config, method=method, port=port, count=count, size=size,
                          direction=direction, capacity_bps=capacity_bps, extra=extra)
        print(f"{log_prefix}: {' '.join(cmd)}", file=sys.stderr)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  check=False)
        except subprocess.TimeoutExpired as e:
            raise AbwError(f"abw did not finish within {timeout:.0f} s") from e
        except OSError as e:
            raise AbwError(f"cannot start abw: {e}") from e
        write_raw(out.parent, out.name, proc.stdout)
        records = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
        errors = [r for r in records if r.get("type") == "error"]
        if errors and errors[0].get("kind") == "busy":
            last = str(errors[0].get("error"))
            continue
        if errors or proc.returncode != 0:
            detail = errors[0].get("error") if errors else proc.stderr.strip()[-300:]
            raise AbwError(f"abw {method} failed: {detail}")
        return records
    raise AbwError(f"every ABw receiver on the server is busy ({last})")
