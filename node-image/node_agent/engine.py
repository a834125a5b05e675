"""The container engine a run's session drives: one Protocol, the Docker SDK behind it.

A session needs only this of an engine (Nomad's task driver, reduced): make sure the
image is there, create the container with its configuration in place, start it, ask
whether it still runs, kill it, wait for its exit code, copy its logs and results out,
remove it; and, when the agent starts, remove what an earlier life left. Another engine
(a Kubernetes pod, Podman) is another implementation of :class:`ContainerEngine`.

:class:`DockerEngine`: the container joins the node's network namespace
(``--net=container:<node>``, as MONROE's no-op namespace container), gets its run
configuration as a read-only /testbed/config.json put in before it starts, and writes
into /results, which is copied out after it exits (so nothing on the host is
bind-mounted into experiments). Limits are hard: a run over its reservation or slot is
killed (SIGKILL) at once, with no grace period.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import tarfile
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, NewType, Protocol

import docker
import docker.errors
import requests

from node_agent.errors import RunnerError
from node_agent.holder import DockerHolder
from node_agent.rundir import agent_note
from node_agent.runnet import ConfinedNetwork
from node_agent.skew import experiment_env
from node_agent.spec import RESULTS_PATH, RunSpec
from testbed_common.bundle import BundleError, safe_extract

log = logging.getLogger(__name__)

LABEL_RUN = "testbed.run"
LABEL_NODE = "testbed.node"
#: The compose project of the node's own container, where it has one (the emulated
#: fleet): scripts/down then finds a run even after its node's container is gone.
LABEL_PROJECT = "testbed.project"
COMPOSE_PROJECT = "com.docker.compose.project"
#: Docker's states of a container that has not ended yet.
_NOT_ENDED = ("created", "running", "restarting")

#: An engine's name for one run's container.
ContainerId = NewType("ContainerId", str)


class ContainerEngine(Protocol):
    """What a run's session asks of a container engine. Every method but
    :meth:`remove` raises :class:`~node_agent.errors.RunnerError` with the reason the
    run fails for."""

    def remove_leftovers(self) -> list[str]:
        """Remove the containers this node's agent started in an earlier life; returns
        their run ids."""
        ...

    def ensure_image(self, image: str) -> str:
        """The image's id, pulled first when the node does not have it."""
        ...

    def create(self, spec: RunSpec) -> ContainerId:
        """A container for ``spec``, not started, with its config.json in place."""
        ...

    def start(self, container: ContainerId) -> None: ...

    def running(self, container: ContainerId) -> bool:
        """True until the container has ended (on its own or killed)."""
        ...

    def await_end(self, container: ContainerId, *, within_s: float) -> None:
        """Return once the container has ended, or after ``within_s`` seconds if it has
        not (nor raise then: :meth:`running` says which). The run's loop pauses here
        between its meter readings, so it sees the end as it comes, not up to an
        interval later: part of every run's time to its result."""
        ...

    def kill(self, container: ContainerId) -> bool:
        """Stop the container now. False when it had already ended on its own: the
        run's stop and its experiment's end can cross (the loop saw it running a moment
        ago), and an experiment that finished keeps its whole results."""
        ...

    def wait(self, container: ContainerId, *, timeout_s: float) -> int:
        """The exit code of the ended (or ending) container."""
        ...

    def collect(self, container: ContainerId, run_dir: Path) -> str:
        """Copy the stopped container's logs (logs/stdout.txt, logs/stderr.txt) and
        its results into ``run_dir``; returns its stderr. What cannot be copied is
        noted in logs/agent.txt and does not fail the run."""
        ...

    def remove(self, container: ContainerId) -> None:
        """Remove the container; a failure is logged, never raised."""
        ...


def container_name(run_id: str) -> str:
    return "testbed-run-" + re.sub(r"[^a-zA-Z0-9_.-]", "-", run_id)


def config_tar(config: dict[str, Any]) -> bytes:
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


def run_labels(run_id: str, node_id: str, project: str | None) -> dict[str, str]:
    """The labels of a run's container: the run, the node, and the node's compose
    project when it has one."""
    labels = {LABEL_RUN: run_id, LABEL_NODE: node_id}
    if project:
        labels[LABEL_PROJECT] = project
    return labels


class DockerEngine:
    """:class:`ContainerEngine` with the local Docker engine (the Docker SDK).

    ``node_id`` labels every container, so that the next agent life finds what this
    one left; ``net_raw``: experiments get CAP_NET_RAW (ping, traceroute);
    ``network``: a confined run network (:class:`~node_agent.runnet.ConfinedNetwork`),
    whose holder container (``holder``) owns the run's namespace and which the
    experiment joins; None: the experiment joins the node's namespace, as always."""

    def __init__(self, client: docker.DockerClient, *, node_id: str,
                 net_raw: bool = True, network: ConfinedNetwork | None = None,
                 holder: DockerHolder | None = None) -> None:
        self.docker = client
        self.node_id = node_id
        self.net_raw = net_raw
        self.network = network
        self.holder = holder
        if (network is None) != (holder is None):
            raise ValueError("a confined network and its holder go together")
        self._projects: dict[str, str | None] = {}
        #: Run id of each experiment container that has a holder and a network.
        self._confined: dict[str, str] = {}

    def _project(self, netns_container: str) -> str | None:
        """The compose project of the container whose network namespace runs share, or
        None (no compose, or the container cannot be inspected: the label is a help for
        clean-up, not a condition of the run)."""
        if netns_container not in self._projects:
            try:
                labels = self.docker.containers.get(netns_container).labels or {}
                self._projects[netns_container] = labels.get(COMPOSE_PROJECT)
            except docker.errors.DockerException:
                return None
        return self._projects[netns_container]

    def remove_leftovers(self) -> list[str]:
        if self.network is not None:
            self.network.clear()
        removed = []
        try:
            for c in self.docker.containers.list(
                all=True, filters={"label": f"{LABEL_NODE}={self.node_id}"}
            ):
                removed.append(str(c.labels.get(LABEL_RUN, c.name)))
                c.remove(force=True)
        except docker.errors.DockerException as e:
            raise RunnerError(f"cannot clean up old experiment containers: {e}") from e
        return removed

    def ensure_image(self, image: str) -> str:
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

    def _confine(self, spec: RunSpec, name: str) -> tuple[str, RunSpec]:
        """The run's holder started and its network attached: the experiment's network
        mode, and its spec as the experiment sees it (its address inside the run's
        namespace, the metadata endpoint it reaches)."""
        assert self.network is not None and self.holder is not None
        booked = [spec.interface]
        labels = run_labels(spec.run_id, self.node_id, self._project(spec.netns_container))
        holder, pid, sandbox = self.holder.start(
            spec.run_id, self.network.holder_needs(spec.run_id, booked), labels=labels)
        self._confined[name] = spec.run_id
        view = self.network.attach(spec.run_id, holder_pid=pid, sandbox_key=sandbox,
                                   booked=booked)
        return f"container:{holder}", replace(
            spec, interface_address=view.addresses.get(spec.interface),
            metadata_url=view.metadata_url)

    def create(self, spec: RunSpec) -> ContainerId:
        name = container_name(spec.run_id)
        try:
            with contextlib.suppress(docker.errors.NotFound):
                self.docker.containers.get(name).remove(force=True)
            network_mode, seen = f"container:{spec.netns_container}", spec
            if self.network is not None:
                network_mode, seen = self._confine(spec, name)
            container = self.docker.containers.create(
                spec.image,
                name=name,
                labels=run_labels(spec.run_id, self.node_id,
                                  self._project(spec.netns_container)),
                network_mode=network_mode,
                # A node on an emulated wrong clock gives its experiments the same.
                environment={**seen.environment(), **experiment_env(os.environ)},
                cap_add=["NET_RAW"] if self.net_raw else None,
                detach=True,
            )
            container.put_archive("/", config_tar(seen.config_json()))
        except docker.errors.DockerException as e:
            self._unconfine(ContainerId(name))
            raise RunnerError(f"node could not create the experiment container: {e}") from e
        except RunnerError:
            self._unconfine(ContainerId(name))
            raise
        return ContainerId(name)

    def _unconfine(self, container: ContainerId) -> None:
        run_id = self._confined.pop(container, None)
        if run_id is not None and self.network is not None and self.holder is not None:
            self.network.detach(run_id)
            self.holder.remove(run_id)

    def _get(self, container: ContainerId) -> Any:
        return self.docker.containers.get(container)

    def start(self, container: ContainerId) -> None:
        try:
            self._get(container).start()
        except docker.errors.DockerException as e:
            raise RunnerError(f"node could not start the experiment container: {e}") from e

    def running(self, container: ContainerId) -> bool:
        try:
            return str(self._get(container).status) in _NOT_ENDED
        except docker.errors.DockerException as e:
            raise _lost(e) from e

    def await_end(self, container: ContainerId, *, within_s: float) -> None:
        try:
            self._get(container).wait(timeout=within_s)
        except requests.RequestException:
            # Not ended within the time (the SDK's timeout arrives as a ConnectionError,
            # "Read timed out"), or the engine failed: the loop's next look says which.
            pass
        except docker.errors.DockerException as e:
            raise _lost(e) from e

    def kill(self, container: ContainerId) -> bool:
        try:
            c = self._get(container)
        except docker.errors.DockerException as e:
            raise _lost(e) from e
        try:
            c.kill()
        except docker.errors.APIError as e:
            # The engine refuses to kill a container that is not running (409): it
            # ended between the loop's look and this kill. Anything else is lost track.
            if self._ended(c):
                return False
            raise _lost(e) from e
        except docker.errors.DockerException as e:
            raise _lost(e) from e
        return True

    @staticmethod
    def _ended(c: Any) -> bool:
        try:
            c.reload()
        except docker.errors.DockerException:
            return False
        return str(c.status) not in _NOT_ENDED

    def wait(self, container: ContainerId, *, timeout_s: float) -> int:
        try:
            return int(self._get(container).wait(timeout=timeout_s).get("StatusCode", -1))
        except docker.errors.DockerException as e:
            raise _lost(e) from e

    def collect(self, container: ContainerId, run_dir: Path) -> str:
        logs = run_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        stderr = ""
        try:
            c = self._get(container)
        except docker.errors.DockerException as e:
            agent_note(run_dir, f"cannot read the container's logs: {e}")
            agent_note(run_dir, f"cannot copy {RESULTS_PATH} out of the container: {e}")
            return stderr
        try:
            stdout_b = c.logs(stdout=True, stderr=False)
            stderr_b = c.logs(stdout=False, stderr=True)
            (logs / "stdout.txt").write_bytes(stdout_b)
            (logs / "stderr.txt").write_bytes(stderr_b)
            stderr = stderr_b.decode(errors="replace")
        except docker.errors.DockerException as e:
            agent_note(run_dir, f"cannot read the container's logs: {e}")
        try:
            stream, _stat = c.get_archive(RESULTS_PATH)
            with tempfile.TemporaryFile() as tmp:
                for block in stream:
                    tmp.write(block)
                tmp.seek(0)
                with tarfile.open(fileobj=tmp, mode="r:") as tar:
                    skipped = safe_extract(tar, run_dir)
            if skipped:
                agent_note(run_dir, f"not copied (links or devices are not results): {skipped}")
        except (docker.errors.DockerException, tarfile.TarError, OSError, BundleError) as e:
            agent_note(run_dir, f"cannot copy {RESULTS_PATH} out of the container: {e}")
        return stderr

    def remove(self, container: ContainerId) -> None:
        try:
            self._get(container).remove(force=True)
        except docker.errors.DockerException as e:
            log.warning("cannot remove container %s: %s", container, e)
        self._unconfine(container)


def _lost(e: Exception) -> RunnerError:
    return RunnerError(f"lost track of the experiment container: {e}")
