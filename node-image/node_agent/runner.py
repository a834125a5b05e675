"""Run one experiment container with the local Docker engine, and enforce its limits.

The container joins the node's network namespace (``--net=container:<node>``, as
MONROE's no-op namespace container), gets its run configuration as a read-only
/testbed/config.json put in before it starts, and writes into /results, which is
copied out after it exits (so nothing on the host is bind-mounted into experiments).
While it runs, the interface counters are read every ``meter_interval_s`` and the
container is killed at its data-volume reservation or its deadline. The outcome and
the run directory (results/, logs/, meta/run.json) are what the bundle is built from.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker
import docker.errors
import httpx

from node_agent import __version__
from node_agent.backstop import BackstopError, NftBackstop
from node_agent.config import AgentConfig, CaptureConfig
from node_agent.errors import RunnerError
from node_agent.interfaces import Counters, CounterSource, InterfaceMissing
from node_agent.limits import Usage, exit_reason, verdict
from node_agent.server_capture import META_FILE as SERVER_CAPTURE_META
from node_agent.server_capture import ServerCapture, capture_limit_s
from node_agent.server_capture import disabled_document as server_capture_disabled
from testbed_common.bundle import BundleError, safe_extract
from testbed_common.capture import RunningCapture, capture_member, disabled_document
from testbed_common.states import RunState
from testbed_common.wire import Assignment, Operator

log = logging.getLogger(__name__)

LABEL_RUN = "testbed.run"
LABEL_NODE = "testbed.node"
CONFIG_PATH = "/testbed/config.json"
RESULTS_PATH = "/results"
#: Seconds Docker waits after SIGTERM before SIGKILL when the agent stops a container.
#: Limits are hard: a run over its reservation or slot gets SIGKILL at once.
STOP_GRACE_S = 0


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class RunSpec:
    """Everything the container gets (the experiment contract's config.json)."""

    run_id: str
    experiment: str
    image: str
    node_id: str
    netns_container: str
    interface: str
    interface_address: str | None
    operator: Operator
    server_address: str
    parameters: dict[str, Any]
    deadline: datetime
    max_bytes: int
    #: Live metadata server for the experiment (``$TESTBED_METADATA_URL``), when on.
    metadata_url: str | None = None
    #: The measurement server's capture service (the agent's, not the experiment's).
    server_capture_url: str | None = None

    def config_json(self) -> dict[str, Any]:
        return {
            "format": "testbed.run-config",
            "version": 1,
            "run_id": self.run_id,
            "experiment": self.experiment,
            "node_id": self.node_id,
            "interface": self.interface,
            "interface_address": self.interface_address,
            "operator": self.operator.model_dump(mode="json"),
            "server_address": self.server_address,
            "parameters": self.parameters,
            "deadline": self.deadline.isoformat(),
            "max_bytes": self.max_bytes,
        }

    def environment(self) -> dict[str, str]:
        env = {
            "TESTBED_CONFIG": CONFIG_PATH,
            "TESTBED_RESULTS": RESULTS_PATH,
            "TESTBED_RUN_ID": self.run_id,
            "TESTBED_INTERFACE": self.interface,
            "TESTBED_INTERFACE_ADDRESS": self.interface_address or "",
            "TESTBED_SERVER": self.server_address,
        }
        if self.metadata_url:
            env["TESTBED_METADATA_URL"] = self.metadata_url
        for name, value in self.parameters.items():
            key = "TESTBED_PARAM_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()
            env[key] = value if isinstance(value, str) else json.dumps(value)
        return env


def build_spec(
    assignment: Assignment, config: AgentConfig, *, interface_address: str | None
) -> RunSpec:
    """The run's spec from its assignment and the node's interface table (pure)."""
    iface = config.interface(assignment.interface)
    if iface is None:
        configured = ", ".join(i.name for i in config.interfaces)
        raise RunnerError(
            f"interface {assignment.interface} is not configured on this node ({configured})"
        )
    return RunSpec(
        run_id=assignment.run_id,
        experiment=assignment.experiment,
        image=assignment.image,
        node_id=config.node_id,
        netns_container=config.netns_container,
        interface=iface.name,
        interface_address=interface_address,
        operator=iface.operator,
        server_address=iface.server_address,
        parameters=dict(assignment.parameters),
        deadline=assignment.deadline,
        max_bytes=assignment.max_bytes,
        metadata_url=(f"http://127.0.0.1:{config.metadata_port}"
                      if config.metadata_port else None),
        server_capture_url=iface.server_capture_url,
    )


class StopRequest:
    """A request to stop a run early, with the state and reason to report."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.state = RunState.CANCELLED
        self.reason = ""

    def set(self, state: RunState, reason: str) -> None:
        if not self._event.is_set():
            self.state, self.reason = state, reason
            self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()


@dataclass(frozen=True)
class RunOutcome:
    state: RunState  # UPLOADING (exit 0), FAILED or CANCELLED
    reason: str
    exit_code: int | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    bytes_used: int = 0
    image_id: str | None = None
    counters_before: dict[str, dict[str, int]] = field(default_factory=dict)
    counters_after: dict[str, dict[str, int]] = field(default_factory=dict)


def _agent_note(run_dir: Path, line: str) -> None:
    """One line in the run's logs/agent.txt: what went wrong around the experiment
    (capture, backstop, copying results) without failing it."""
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / "agent.txt").open("a") as f:
        f.write(line.rstrip("\n") + "\n")


def _container_name(run_id: str) -> str:
    return "testbed-run-" + re.sub(r"[^a-zA-Z0-9_.-]", "-", run_id)


def _config_tar(config: dict[str, Any]) -> bytes:
    """A tar for put_archive at /: testbed/config.json (read-only) and results/."""
    buf = io.BytesIO()
    data = json.dumps(config, indent=2).encode()
    now = time.time()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, mode in (("testbed", 0o755), ("results", 0o777)):
            d = tarfile.TarInfo(name)
            d.type, d.mode, d.mtime = tarfile.DIRTYPE, mode, now
            tar.addfile(d)
        f = tarfile.TarInfo("testbed/config.json")
        f.size, f.mode, f.mtime = len(data), 0o444, now
        tar.addfile(f, io.BytesIO(data))
    return buf.getvalue()


class DockerRunner:
    def __init__(
        self,
        client: docker.DockerClient,
        *,
        counters: CounterSource,
        node_id: str,
        interfaces: Sequence[str],
        meter_interval_s: float = 0.5,
        net_raw: bool = True,
        clock: Callable[[], datetime] = utcnow,
        capture: CaptureConfig | None = None,
        capture_netns_pid: Callable[[], int] | None = None,
        backstop: NftBackstop | None = None,
        server_capture_transport: httpx.BaseTransport | None = None,
    ) -> None:
        """``capture``: tcpdump each run's interface (None or disabled: no capture),
        and ask the measurement server for its side when the interface has a
        ``server_capture_url``; ``capture_netns_pid``: when the agent is not in the
        node's network namespace, the pid of a process that is (tcpdump is then run
        under nsenter); ``backstop``: the kernel quota that holds each run to its
        reservation (None: the meter alone); ``server_capture_transport``: an httpx
        transport for the server's capture service (tests)."""
        self.docker = client
        self.counters = counters
        self.node_id = node_id
        self.interfaces = tuple(interfaces)
        self.meter_interval_s = meter_interval_s
        self.net_raw = net_raw
        self.clock = clock
        self.capture = capture
        self.capture_netns_pid = capture_netns_pid
        self.backstop = backstop
        self.server_capture_transport = server_capture_transport

    # -- housekeeping --------------------------------------------------------------------

    def remove_leftovers(self) -> list[str]:
        """Remove containers this node's agent started in an earlier life."""
        removed = []
        try:
            for c in self.docker.containers.list(
                all=True, filters={"label": f"{LABEL_NODE}={self.node_id}"}
            ):
                removed.append(str(c.labels.get(LABEL_RUN, c.name)))
                c.remove(force=True)
        except docker.errors.DockerException as e:
            raise RunnerError(f"cannot clean up old experiment containers: {e}") from e
        if self.backstop is not None:
            try:
                self.backstop.clear()
            except BackstopError as e:
                log.warning("cannot clear the kernel quotas of an earlier life: %s", e)
        return removed

    def _snapshot(self) -> dict[str, dict[str, int]]:
        out = {}
        for name in self.interfaces:
            try:
                c = self.counters.read(name)
            except InterfaceMissing:
                continue
            out[name] = {"rx_bytes": c.rx_bytes, "tx_bytes": c.tx_bytes}
        return out

    def _ensure_image(self, image: str) -> str:
        try:
            return str(self.docker.images.get(image).id)
        except docker.errors.ImageNotFound:
            pass
        except docker.errors.DockerException as e:
            raise RunnerError(f"cannot inspect image {image}: {e}") from e
        try:
            log.info("image %s not present; pulling", image)
            return str(self.docker.images.pull(image).id)
        except docker.errors.DockerException as e:
            raise RunnerError(
                f"image {image} not present on node and could not be pulled: {e}"
            ) from e

    # -- one run -------------------------------------------------------------------------

    def run(
        self,
        spec: RunSpec,
        run_dir: Path,
        *,
        on_running: Callable[[], None],
        stop: StopRequest,
    ) -> RunOutcome:
        """Run ``spec`` to its end, writing results/, logs/ and meta/run.json to run_dir."""
        run_dir.mkdir(parents=True, exist_ok=True)
        before = self._snapshot()
        image_id: str | None = None
        container: Any = None
        capture = self._new_capture(spec, run_dir)
        server = self._new_server_capture(spec)
        try:
            image_id = self._ensure_image(spec.image)
            container = self._create(spec)
            outcome = self._supervise(
                spec, container, run_dir, on_running, stop, before, capture, server
            )
            outcome = replace(outcome, image_id=image_id)
        except RunnerError as e:
            outcome = RunOutcome(
                RunState.FAILED, str(e), image_id=image_id, counters_before=before,
                counters_after=self._snapshot(),
            )
        finally:
            if container is not None:
                try:
                    container.remove(force=True)
                except docker.errors.DockerException as e:
                    log.warning("run %s: cannot remove its container: %s", spec.run_id, e)
        self._finish_capture(spec, run_dir, capture)
        self._finish_server_capture(spec, run_dir, server)
        self._write_meta(spec, run_dir, outcome)
        return outcome

    # -- packet capture ------------------------------------------------------------------

    def _new_capture(self, spec: RunSpec, run_dir: Path) -> RunningCapture | None:
        if self.capture is None or not self.capture.enabled:
            return None
        pid: int | None = None
        if self.capture_netns_pid is not None:
            try:
                pid = self.capture_netns_pid()
            except Exception as e:  # a capture problem must not fail the run
                log.warning("run %s: cannot find the node's netns for capture: %s",
                            spec.run_id, e)
        # Written outside results/ while the run lasts (the container's /results is
        # copied over results/ afterwards), moved into results/capture/ at the end.
        return RunningCapture(
            spec.interface, run_dir / "capture" / Path(capture_member(spec.interface)).name,
            snaplen=self.capture.snaplen, max_bytes=self.capture.max_bytes, netns_pid=pid,
        )

    def _finish_capture(
        self, spec: RunSpec, run_dir: Path, capture: RunningCapture | None
    ) -> None:
        """Stop tcpdump if still running, move its file to results/capture/<iface>.pcap
        and write meta/capture.json; problems go to logs/agent.txt, never fail the run."""
        meta = run_dir / "meta"
        meta.mkdir(parents=True, exist_ok=True)
        if capture is None:
            doc = disabled_document(spec.interface)
        else:
            doc = dict(capture.stop())
            member = capture_member(spec.interface)
            if capture.path.exists():
                target = run_dir / member
                if target.exists():  # the experiment wrote a file of that name itself
                    member = member.removesuffix(".pcap") + ".agent.pcap"
                    target = run_dir / member
                try:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    capture.path.replace(target)
                    doc["file"] = member
                    with contextlib.suppress(OSError):
                        capture.path.parent.rmdir()
                except OSError as e:
                    doc["error"] = f"cannot move the capture into results/: {e}"
            if doc.get("error"):
                log.warning("run %s: capture: %s", spec.run_id, doc["error"])
                _agent_note(run_dir, f"packet capture: {doc['error']}")
        (meta / "capture.json").write_text(json.dumps(doc, indent=2))

    def _new_server_capture(self, spec: RunSpec) -> ServerCapture | None:
        if self.capture is None or not self.capture.enabled or not spec.server_capture_url:
            return None
        return ServerCapture(
            spec.server_capture_url, interface=spec.interface,
            address=spec.interface_address, snaplen=self.capture.snaplen,
            max_bytes=self.capture.max_bytes,
            max_s=capture_limit_s(spec.deadline, self.clock()), label=spec.run_id,
            transport=self.server_capture_transport,
        )

    def _finish_server_capture(
        self, spec: RunSpec, run_dir: Path, server: ServerCapture | None
    ) -> None:
        """Stop the server's capture if still running, fetch it into
        server/capture/<iface>.pcap and write meta/server-capture.json; problems go to
        logs/agent.txt, never fail the run."""
        if server is None:
            why = ("packet capture is off (capture.enabled)"
                   if self.capture is None or not self.capture.enabled
                   else f"no server_capture_url for interface {spec.interface}")
            doc = server_capture_disabled(spec.interface, why)
        else:
            try:
                doc = server.fetch(run_dir)
            except Exception as e:  # the server's capture must never fail the run
                doc = {**server_capture_disabled(spec.interface, "failed"), "enabled": True,
                       "error": f"{type(e).__name__}: {e}"}
            if doc.get("error"):
                log.warning("run %s: server capture: %s", spec.run_id, doc["error"])
                _agent_note(run_dir, f"server packet capture: {doc['error']}")
        meta = run_dir / SERVER_CAPTURE_META
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text(json.dumps(doc, indent=2))

    def _create(self, spec: RunSpec) -> Any:
        name = _container_name(spec.run_id)
        try:
            with contextlib.suppress(docker.errors.NotFound):
                self.docker.containers.get(name).remove(force=True)
            container = self.docker.containers.create(
                spec.image,
                name=name,
                labels={LABEL_RUN: spec.run_id, LABEL_NODE: self.node_id},
                network_mode=f"container:{spec.netns_container}",
                environment=spec.environment(),
                cap_add=["NET_RAW"] if self.net_raw else None,
                detach=True,
            )
            container.put_archive("/", _config_tar(spec.config_json()))
        except docker.errors.DockerException as e:
            raise RunnerError(f"node could not create the experiment container: {e}") from e
        return container

    def _supervise(
        self,
        spec: RunSpec,
        container: Any,
        run_dir: Path,
        on_running: Callable[[], None],
        stop: StopRequest,
        before: dict[str, dict[str, int]],
        capture: RunningCapture | None = None,
        server: ServerCapture | None = None,
    ) -> RunOutcome:
        try:
            baseline = self.counters.read(spec.interface)
        except InterfaceMissing as e:
            raise RunnerError(f"cannot meter the run's interface: {e}") from e
        if capture is not None and not capture.start():
            log.warning("run %s: no packet capture: %s", spec.run_id, capture.error)
        if server is not None and not self._start_server_capture(server):
            log.warning("run %s: no server-side capture: %s", spec.run_id, server.error)
        armed = self._arm_backstop(spec, run_dir)
        try:
            return self._start_and_watch(spec, container, run_dir, on_running, stop, before,
                                         baseline, capture, armed, server)
        finally:
            if capture is not None:
                capture.stop()
            self._stop_server_capture(server)
            if armed:
                self._disarm_backstop(spec)

    @staticmethod
    def _start_server_capture(server: ServerCapture) -> bool:
        try:
            return server.start()
        except Exception as e:  # the server's capture must never fail the run
            server.error = f"{type(e).__name__}: {e}"
            return False

    @staticmethod
    def _stop_server_capture(server: ServerCapture | None) -> None:
        if server is None:
            return
        try:
            server.stop()
        except Exception as e:  # recorded; fetch() reports it
            server.error = server.error or f"{type(e).__name__}: {e}"

    def _arm_backstop(self, spec: RunSpec, run_dir: Path) -> bool:
        """Arm the run's kernel quota; a node without nft runs on the meter alone, and
        the run's logs say so."""
        if self.backstop is None:
            return False
        try:
            self.backstop.arm(spec.run_id, interface=spec.interface,
                              address=spec.interface_address, limit_bytes=spec.max_bytes)
        except BackstopError as e:
            log.warning("run %s: no kernel quota backstop: %s", spec.run_id, e)
            _agent_note(run_dir, f"no kernel quota backstop (the meter alone holds the "
                                 f"reservation): {e}")
            return False
        return True

    def _disarm_backstop(self, spec: RunSpec) -> None:
        assert self.backstop is not None
        try:
            self.backstop.disarm(spec.run_id)
        except BackstopError as e:  # cleared at the next agent start at the latest
            log.warning("run %s: cannot remove its kernel quota: %s", spec.run_id, e)

    def _backstop_spent(self, spec: RunSpec, armed: bool) -> bool:
        if not armed:
            return False
        assert self.backstop is not None
        try:
            return self.backstop.state(spec.run_id).spent
        except BackstopError as e:
            log.warning("run %s: cannot read its kernel quota: %s", spec.run_id, e)
            return False

    def _start_and_watch(
        self,
        spec: RunSpec,
        container: Any,
        run_dir: Path,
        on_running: Callable[[], None],
        stop: StopRequest,
        before: dict[str, dict[str, int]],
        baseline: Counters,
        capture: RunningCapture | None,
        armed: bool = False,
        server: ServerCapture | None = None,
    ) -> RunOutcome:
        try:
            container.start()
        except docker.errors.DockerException as e:
            raise RunnerError(f"node could not start the experiment container: {e}") from e
        started = self.clock()
        on_running()
        killed: tuple[RunState, str] | None = None
        used = 0
        try:
            while True:
                container.reload()
                if container.status not in ("created", "running", "restarting"):
                    break
                try:
                    current = self.counters.read(spec.interface)
                except InterfaceMissing as e:
                    current = baseline
                    log.warning("run %s: %s", spec.run_id, e)
                used = Usage(baseline, current).bytes
                reason = verdict(
                    now=self.clock(), deadline=spec.deadline, used_bytes=used,
                    max_bytes=spec.max_bytes,
                    quota_spent=self._backstop_spent(spec, armed),
                )
                if reason is None and stop.is_set():
                    killed = (stop.state, stop.reason)
                elif reason is not None:
                    killed = (RunState.FAILED, reason)
                if killed is not None:
                    log.warning("run %s: stopping: %s", spec.run_id, killed[1])
                    container.kill()
                    break
                time.sleep(self.meter_interval_s)
            exit_code = int(container.wait(timeout=60).get("StatusCode", -1))
        except docker.errors.DockerException as e:
            raise RunnerError(f"lost track of the experiment container: {e}") from e
        ended = self.clock()
        if capture is not None:
            capture.stop()  # right after the container's end, before results are copied
        self._stop_server_capture(server)
        with contextlib.suppress(InterfaceMissing):
            used = Usage(baseline, self.counters.read(spec.interface)).bytes
        stderr = self._collect(container, run_dir)
        if killed is not None:
            state, reason = killed
        elif exit_code == 0:
            state, reason = RunState.UPLOADING, exit_reason(0, stderr)
        else:
            state, reason = RunState.FAILED, exit_reason(exit_code, stderr)
        return RunOutcome(
            state, reason, exit_code=exit_code, started_at=started, ended_at=ended,
            bytes_used=used, counters_before=before, counters_after=self._snapshot(),
        )

    def _collect(self, container: Any, run_dir: Path) -> str:
        """Copy logs and /results out of the stopped container; returns stderr."""
        logs = run_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        stderr = ""
        try:
            stdout_b = container.logs(stdout=True, stderr=False)
            stderr_b = container.logs(stdout=False, stderr=True)
            (logs / "stdout.txt").write_bytes(stdout_b)
            (logs / "stderr.txt").write_bytes(stderr_b)
            stderr = stderr_b.decode(errors="replace")
        except docker.errors.DockerException as e:
            _agent_note(run_dir, f"cannot read the container's logs: {e}")
        try:
            stream, _stat = container.get_archive(RESULTS_PATH)
            with tempfile.TemporaryFile() as tmp:
                for block in stream:
                    tmp.write(block)
                tmp.seek(0)
                with tarfile.open(fileobj=tmp, mode="r:") as tar:
                    skipped = safe_extract(tar, run_dir)
            if skipped:
                _agent_note(run_dir, f"not copied (links or devices are not results): {skipped}")
        except (docker.errors.DockerException, tarfile.TarError, OSError, BundleError) as e:
            _agent_note(run_dir, f"cannot copy {RESULTS_PATH} out of the container: {e}")
        return stderr

    def _write_meta(self, spec: RunSpec, run_dir: Path, outcome: RunOutcome) -> None:
        meta = run_dir / "meta"
        meta.mkdir(parents=True, exist_ok=True)
        doc = {
            "format": "testbed.run-meta",
            "version": 1,
            "run_config": spec.config_json(),
            "image": spec.image,
            "image_id": outcome.image_id,
            "exit_code": outcome.exit_code,
            "state": str(outcome.state),
            "reason": outcome.reason,
            "started_at": outcome.started_at.isoformat() if outcome.started_at else None,
            "ended_at": outcome.ended_at.isoformat() if outcome.ended_at else None,
            "interface": spec.interface,
            "bytes_used": outcome.bytes_used,
            "counters_before": outcome.counters_before,
            "counters_after": outcome.counters_after,
            "agent_version": __version__,
        }
        (meta / "run.json").write_text(json.dumps(doc, indent=2))
