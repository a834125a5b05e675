"""What an experiment container gets from the node agent, and how it says it failed
(docs/experiment-contract.md).

The run configuration is ``$TESTBED_CONFIG`` (``/testbed/config.json``), its
parameters already validated against the manifest, with the contract's environment
variables as a fallback for what the file lacks; results go to ``$TESTBED_RESULTS``
(``/results``). A failure is reported by exiting non-zero with the reason as the last
line of stderr, which the agent copies into the run's final state:
:func:`run_experiment` does that for every :class:`ExperimentError`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from testbed_kit.interface import ipv4_address

CONFIG_PATH = Path("/testbed/config.json")
RESULTS_PATH = Path("/results")


class ExperimentError(Exception):
    """A failure to report as the run's reason (the last line of stderr)."""


def results_dir() -> Path:
    """The run's results directory: everything written here goes into its bundle."""
    return Path(os.environ.get("TESTBED_RESULTS", str(RESULTS_PATH)))


def load_config(defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The run configuration: ``config.json``, with the interface, its address and the
    measurement server from the environment when the file lacks them (the address
    read from the interface when neither gives it), and each
    parameter of ``defaults`` from the file, else ``$TESTBED_PARAM_<NAME>`` (a string),
    else its default. Raises :class:`ExperimentError` for a file that is not JSON or a
    configuration without a measurement server."""
    path = Path(os.environ.get("TESTBED_CONFIG", str(CONFIG_PATH)))
    config: dict[str, Any] = {}
    if path.exists():
        try:
            loaded = json.loads(path.read_text())
        except ValueError as e:
            raise ExperimentError(f"run configuration {path} is not valid JSON: {e}") from e
        if not isinstance(loaded, dict):
            raise ExperimentError(f"run configuration {path} is not a JSON object")
        config = loaded
    env = os.environ
    config.setdefault("interface", env.get("TESTBED_INTERFACE"))
    config.setdefault("interface_address", env.get("TESTBED_INTERFACE_ADDRESS"))
    config.setdefault("server_address", env.get("TESTBED_SERVER"))
    if not config.get("interface_address") and config.get("interface"):
        config["interface_address"] = ipv4_address(str(config["interface"]))
    given = dict(config.get("parameters") or {})
    params = {**(defaults or {}), **given}
    for name in defaults or {}:
        value = env.get(f"TESTBED_PARAM_{name.upper()}")
        if value is not None and name not in given:
            params[name] = value
    config["parameters"] = params
    if not config.get("server_address"):
        raise ExperimentError(
            "no measurement server given (config server_address / TESTBED_SERVER)"
        )
    return config


def run_experiment(name: str, body: Callable[[], None],
                   failures: tuple[type[BaseException], ...] = ()) -> int:
    """Run an experiment's ``body`` and return its exit code: 0, or 1 with
    ``<name> failed: <reason>`` as the last line of stderr when it raised an
    :class:`ExperimentError`, an OSError or one of ``failures`` (e.g. a parser's
    error). Anything else is a bug, and keeps its traceback."""
    reported: tuple[type[BaseException], ...] = (ExperimentError, OSError, *failures)
    try:
        body()
    except reported as e:
        print(f"{name} failed: {e}", file=sys.stderr)
        return 1
    return 0
