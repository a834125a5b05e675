"""The executor's steps for one assignment, apart from the agent's threads and state:
deploy it (or refuse it, saying why), run its session, bundle what it left.

The agent (:meth:`node_agent.agent.Agent.execute`) calls them in that order and reports
the run's end in between. State reports go through the ``report`` callable the agent
passes in (its outbox), so these steps hold no state of their own.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

from node_agent import __version__
from node_agent.clock import ClockEstimate
from node_agent.config import AgentConfig
from node_agent.diskspace import disk_refusal, run_footprint
from node_agent.errors import RunnerError
from node_agent.interfaces import interface_address
from node_agent.rundir import RunOutcome
from node_agent.runner import Runner
from node_agent.session import StopRequest
from node_agent.spec import RunSpec, build_spec
from node_agent.spool import Spool
from testbed_common.bundle import build_bundle
from testbed_common.states import RunState
from testbed_common.wire import Assignment

log = logging.getLogger(__name__)

#: How a step reports a run's state: (run id, state, reason).
Report = Callable[[str, RunState, str], None]


def deploy(a: Assignment, config: AgentConfig, *, report: Report,
           spool: Spool, clock: ClockEstimate | None = None) -> RunSpec | RunOutcome:
    """The run's spec; or, when the node refuses the run (its captures and bundle would
    not fit on the disk, an interface it does not have), the FAILED outcome, reported
    before anything ran (so nothing is metered and its reservation is released).
    DEPLOYING is reported once the disk has room. ``clock``: the offset estimate the
    run's bundle records."""
    refusal = room_refusal(a, config, spool)
    if refusal is not None:
        log.error("run %s: refused: %s", a.run_id, refusal)
        report(a.run_id, RunState.FAILED, refusal)
        return RunOutcome(RunState.FAILED, refusal)
    report(a.run_id, RunState.DEPLOYING, f"deploying {a.image} on {a.interface}")
    try:
        return build_spec(a, config,
                          interface_address=interface_address(config, a.interface),
                          clock=clock)
    except RunnerError as e:
        report(a.run_id, RunState.FAILED, str(e))
        return RunOutcome(RunState.FAILED, str(e))


def room_refusal(a: Assignment, config: AgentConfig, spool: Spool) -> str | None:
    """Why the state disk has no room for the run (:mod:`node_agent.diskspace`), or
    None. Nothing is deleted to make room: the spool waits for the orchestrator."""
    iface = config.interface(a.interface)
    captures = 0
    if config.capture.enabled:
        captures = 1 + (iface is not None and iface.server_capture_url is not None)
    footprint = run_footprint(a.max_bytes, captures=captures, snaplen=config.capture.snaplen,
                              capture_max_bytes=config.capture.max_bytes,
                              floor_bytes=config.min_free_disk_bytes)
    waiting = spool.pending()
    return disk_refusal(free_bytes=shutil.disk_usage(config.state_dir).free,
                        footprint=footprint, path=str(config.state_dir),
                        spooled_bundles=len(waiting),
                        spooled_bytes=sum(item.size for item in waiting))


def run_session(runner: Runner, spec: RunSpec, run_dir: Path, *, stop: StopRequest,
                report: Report) -> RunOutcome:
    """Run the spec's session in a fresh ``run_dir`` (the node's modem and GPS samples
    of its span are one of its hooks: the runner's); RUNNING is reported when the
    container starts."""
    shutil.rmtree(run_dir, ignore_errors=True)
    outcome = runner.run(
        spec, run_dir,
        on_running=lambda: report(
            spec.run_id, RunState.RUNNING,
            f"experiment container started on {spec.interface}"),
        stop=stop,
    )
    log.info("run %s: %s (%s)", spec.run_id, outcome.state, outcome.reason)
    return outcome


def bundle_run(run_dir: Path, *, run_id: str, node_id: str, state: RunState,
               spool: Spool) -> str | None:
    """Put the run's bundle into the spool and drop its run directory. When the disk
    cannot hold the bundle: the reason the run fails, and its results stay where they
    are."""
    data = build_bundle(run_dir, run_id=run_id, node_id=node_id,
                        extra={"state": str(state), "agent_version": __version__})
    try:
        item = spool.put(run_id, data)
    except OSError as e:  # a full disk: say so; the results stay in the work dir
        spool.discard(run_id)
        reason = (f"node could not spool the run's bundle: {e.strerror or e}; its "
                  f"results stay in {run_dir} on the node and earlier bundles stay in the "
                  "spool (upload the spool or free space there)")
        log.error("run %s: %s", run_id, reason)
        return reason
    shutil.rmtree(run_dir, ignore_errors=True)
    log.info("run %s: bundle of %d bytes spooled", run_id, item.size)
    return None
