"""The experiment kit's contract side: the run configuration, the failure convention,
result files, interface counters and the watched client process."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed_kit.contract import ExperimentError, load_config, run_experiment
from testbed_kit.interface import Counters, interface_counters, step_cost
from testbed_kit.results import write_raw, write_result
from testbed_kit.watch import run_watched

PROC_NET_DEV = (
    "Inter-|   Receive                            |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|bytes ...\n"
    "   op0: 1000 10 0 0 0 0 0 0 2000 20 0 0 0 0 0 0\n"
    "    lo: 5 1 0 0 0 0 0 0 5 1 0 0 0 0 0 0\n"
)


def test_interface_counters_read_proc_net_dev(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.write_text(PROC_NET_DEV)
    assert interface_counters("op0", dev) == Counters(rx_bytes=1000, tx_bytes=2000)
    assert interface_counters("op0", dev).total == 3000
    with pytest.raises(LookupError, match=r"'op9' not in .*\['lo', 'op0'\]"):
        interface_counters("op9", dev)


def test_a_failed_step_still_records_its_error_its_files_and_its_cost(tmp_path: Path) -> None:
    record: dict[str, object] = {"kind": "tat"}
    (tmp_path / "tat-3.json").write_text("{}")
    with pytest.raises(RuntimeError, match="server gone"), \
            step_cost(record, "lo", lambda: sorted(f.name for f in tmp_path.iterdir())):
        # Traffic on the interface while the step runs: it is counted.
        with socket.create_server(("127.0.0.1", 0)) as server, \
                socket.create_connection(server.getsockname()) as client:
            client.sendall(b"x" * 10_000)
        raise RuntimeError("server gone")
    assert record["error"] == "server gone"
    assert record["raw"] == ["tat-3.json"]
    assert isinstance(record["iface_tx_bytes"], int) and record["iface_tx_bytes"] >= 10_000
    assert "end" in record


def test_without_an_interface_a_step_costs_nothing_counted() -> None:
    record: dict[str, object] = {}
    with step_cost(record, "", list):
        pass
    assert (record["iface_rx_bytes"], record["iface_tx_bytes"], record["raw"]) == (0, 0, [])
    assert "error" not in record


def test_config_file_then_environment_then_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"interface_address": "10.0.0.2",
                                "parameters": {"duration_s": 20}}))
    monkeypatch.setenv("TESTBED_CONFIG", str(path))
    monkeypatch.setenv("TESTBED_SERVER", "10.0.0.1")
    monkeypatch.setenv("TESTBED_INTERFACE", "op0")
    monkeypatch.setenv("TESTBED_PARAM_DURATION_S", "5")  # the file's value wins
    monkeypatch.setenv("TESTBED_PARAM_DIRECTION", "downlink")  # the file has none
    config = load_config({"duration_s": 10, "direction": "uplink", "bin_s": 0.1})
    assert config["server_address"] == "10.0.0.1" and config["interface"] == "op0"
    assert config["interface_address"] == "10.0.0.2"
    assert config["parameters"] == {"duration_s": 20, "direction": "downlink", "bin_s": 0.1}


@pytest.mark.parametrize(("text", "needle"), [
    ("{not json", "is not valid JSON"),
    ("[1, 2]", "is not a JSON object"),
    ("{}", "no measurement server given"),
])
def test_a_configuration_that_cannot_be_used_is_an_experiment_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, needle: str
) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    monkeypatch.setenv("TESTBED_CONFIG", str(path))
    monkeypatch.delenv("TESTBED_SERVER", raising=False)
    with pytest.raises(ExperimentError, match=needle):
        load_config()


def test_a_failure_is_the_last_stderr_line_and_exit_code_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def fails() -> None:
        print("working", file=sys.stderr)
        raise ExperimentError("iperf3 did not finish within 40 s")

    assert run_experiment("tat", fails) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        "tat failed: iperf3 did not finish within 40 s")
    assert run_experiment("tat", lambda: None) == 0

    def parser_fails() -> None:
        raise LookupError("interface 'op9' not in /proc/net/dev")

    assert run_experiment("x", parser_fails, failures=(LookupError,)) == 1
    with pytest.raises(KeyError):  # a bug keeps its traceback
        run_experiment("x", lambda: {}["missing"])


def test_a_result_is_versioned_and_written_whole(tmp_path: Path) -> None:
    path = write_result(tmp_path, "tat.json", {"mean_bps": 1.5, "version": 1,
                                               "format": "testbed.tat"})
    doc = json.loads(path.read_text())
    assert list(doc)[:2] == ["format", "version"] and doc["mean_bps"] == 1.5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tat.json"]  # no partial left
    for bad, needle in [({"version": 1}, "format"),
                        ({"format": "testbed.tat"}, "version"),
                        ({"format": "testbed.tat", "version": "1"}, "positive integer"),
                        ({"format": "testbed.tat", "version": True}, "positive integer")]:
        with pytest.raises(ValueError, match=needle):
            write_result(tmp_path, "bad.json", bad)
    assert not (tmp_path / "bad.json").exists()
    with pytest.raises(ValueError, match="plain file name"):
        write_result(tmp_path, "../tat.json", {"format": "f", "version": 1})


def test_raw_outputs_are_kept_as_given(tmp_path: Path) -> None:
    assert write_raw(tmp_path, "a.txt", "text\n").read_text() == "text\n"
    assert write_raw(tmp_path, "b.log", b"\x00\xff").read_bytes() == b"\x00\xff"
    assert json.loads(write_raw(tmp_path, "c.json", {"end": {}}).read_text()) == {"end": {}}


def _sleeper(seconds: float) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_client_that_never_starts_is_killed_early() -> None:
    begun = time.monotonic()
    done = run_watched(_sleeper(30), timeout_s=20, start_within_s=0.5, started=lambda: False)
    assert done.killed == "never_started" and done.returncode != 0
    assert time.monotonic() - begun < 5


def test_a_started_client_is_killed_at_its_deadline_and_one_that_ends_is_not() -> None:
    done = run_watched(_sleeper(30), timeout_s=1, start_within_s=0.1, started=lambda: True)
    assert done.killed == "timeout"
    proc = subprocess.Popen([sys.executable, "-c", "print('report')"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    done = run_watched(proc, timeout_s=10, start_within_s=5, started=lambda: False)
    assert done.killed is None and done.returncode == 0 and done.stdout == "report\n"
