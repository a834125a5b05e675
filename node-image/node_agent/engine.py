"""The container engine a run's session drives: one Protocol, the Docker SDK behind it.

A session needs only this of an engine (Nomad's task driver, reduced): make sure the
image is there, create the run's holder and its experiment container, start the
experiment, ask whether it still runs, kill it, wait for its end, look at its bounds,
copy its logs and results out, remove both; and, when the agent starts, remove what an
earlier life left. Another engine (a Kubernetes pod, Podman) is another implementation
of :class:`ContainerEngine`.

:class:`DockerEngine`: a run is two containers. The holder, a small container of the
node's own image that only sleeps, holds the run's network namespace (what the run's
:class:`~node_agent.runnet.RunNetwork` asks) and keeps the run's three tmpfs volumes
mounted: /results (bounded in bytes and files), /tmp (bounded in bytes) and /testbed,
where the run's config.json is written through the holder. The experiment joins the
holder's namespace (``--net=container:<holder>``), mounts /testbed read-only, and is
confined (docs/security.md, "Run confinement"): every capability dropped but those its
manifest declares, no-new-privileges, the engine's default seccomp profile, never
privileged, a read-only root, memory, CPU and process limits. After it exits, /results
is copied out of the holder (nothing on the host is bind-mounted into experiments).
Limits are hard: a run over its reservation or slot is killed (SIGKILL) at once, with no
grace period.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NewType, Protocol

import docker
import docker.errors
import requests
from docker.types import Mount

from node_agent.confinement import BoundsUsage, RunLimits, VolumeUsage
from node_agent.errors import RunnerError
from node_agent.rundir import agent_note
from node_agent.runnet import HolderNeeds
from node_agent.skew import experiment_env
from node_agent.spec import CONFIG_PATH, RESULTS_PATH, TMP_PATH, RunSpec
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
#: Where the holder mounts the run's /tmp (to look at its use).
HOLDER_TMP = "/run/testbed-tmp"
#: The config volume: one small file (config.json), read-only in the experiment.
CONFIG_DIR = str(Path(CONFIG_PATH).parent)
CONFIG_VOLUME_OPTS = "size=1m,nr_inodes=16,mode=0755"
#: The holder only sleeps: a few MiB and processes (the engine's execs that look at the
#: run's volumes run in it too).
HOLDER_MEMORY = "32m"
HOLDER_PIDS = 16
#: Options every container of a run gets: no privilege gained through setuid or file
#: capabilities; the engine's default seccomp profile applies as none is named.
SECURITY_OPT = ["no-new-privileges"]

#: An engine's name for one run's container.
ContainerId = NewType("ContainerId", str)


@dataclass(frozen=True)
class Holder:
    """A run's holder container, started: its namespace's process and sandbox."""

    id: ContainerId
    pid: int
    sandbox_key: str | None


@dataclass(frozen=True)
class Ended:
    """How the experiment container ended."""

    exit_code: int
    oom_killed: bool = False


class ContainerEngine(Protocol):
    """What a run's session asks of a container engine. Every method but
    :meth:`remove` and :meth:`usage` raises :class:`~node_agent.errors.RunnerError` with
    the reason the run fails for."""

    def remove_leftovers(self) -> list[str]:
        """Remove the containers (and volumes) this node's agent started in an earlier
        life; returns their run ids."""
        ...

    def ensure_image(self, image: str) -> str:
        """The image's id, pulled first when the node does not have it."""
        ...

    def create_holder(self, spec: RunSpec, needs: HolderNeeds) -> Holder:
        """The run's holder, started, with the run's bounded volumes mounted."""
        ...

    def create(self, spec: RunSpec, holder: Holder) -> ContainerId:
        """The experiment container for ``spec``, not started, in ``holder``'s namespace,
        with its config.json in place."""
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

    def wait(self, container: ContainerId, *, timeout_s: float) -> Ended:
        """How the ended (or ending) container ended."""
        ...

    def usage(self, holder: Holder, container: ContainerId | None) -> BoundsUsage:
        """What the run uses of its bounds now; what cannot be read is None (never
        raises)."""
        ...

    def collect(self, container: ContainerId, holder: Holder, run_dir: Path) -> str:
        """Copy the stopped container's logs (logs/stdout.txt, logs/stderr.txt) and
        its results (from the holder) into ``run_dir``; returns its stderr. What cannot
        be copied is noted in logs/agent.txt and does not fail the run."""
        ...

    def remove(self, container: ContainerId) -> None:
        """Remove the container; a failure is logged, never raised."""
        ...

    def remove_holder(self, spec: RunSpec) -> None:
        """Remove the run's holder and its volumes; never raises."""
        ...


def container_name(run_id: str) -> str:
    return "testbed-run-" + re.sub(r"[^a-zA-Z0-9_.-]", "-", run_id)


def holder_name(run_id: str) -> str:
    return container_name(run_id) + "-holder"


def volume_names(run_id: str) -> dict[str, str]:
    """The run's three volumes by what they hold."""
    base = container_name(run_id)
    return {part: f"{base}-{part}" for part in ("results", "tmp", "config")}


def tmpfs_options(limits: RunLimits) -> dict[str, str]:
    """The mount options of each of a run's tmpfs volumes: /results bounded in bytes
    and files (one inode is its own root), /tmp in bytes, both writable by any user
    (an image may run as one), the config volume tiny."""
    return {
        "results": f"size={limits.results_mb}m,nr_inodes={limits.result_files + 1},mode=1777",
        "tmp": f"size={limits.tmp_mb}m,mode=1777",
        "config": CONFIG_VOLUME_OPTS,
    }


def confinement_options(limits: RunLimits) -> dict[str, Any]:
    """The Docker options that confine an experiment container (pure: unit-tested)."""
    memory = f"{limits.memory_limit_mb}m"
    return {
        "cap_drop": ["ALL"],
        "cap_add": list(limits.capabilities) or None,
        "security_opt": list(SECURITY_OPT),
        "privileged": False,
        "read_only": True,
        "mem_limit": memory,
        "memswap_limit": memory,  # no swap past the limit
        "nano_cpus": int(limits.cpus * 1e9),
        "pids_limit": limits.pids,
    }


def config_tar(config: dict[str, Any]) -> bytes:
    """A tar for put_archive into the config volume: config.json (read-only)."""
    buf = io.BytesIO()
    data = json.dumps(config, indent=2).encode()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        f = tarfile.TarInfo(Path(CONFIG_PATH).name)
        f.size, f.mode, f.mtime = len(data), 0o444, time.time()
        tar.addfile(f, io.BytesIO(data))
    return buf.getvalue()


def run_labels(run_id: str, node_id: str, project: str | None) -> dict[str, str]:
    """The labels of a run's containers and volumes: the run, the node, and the node's
    compose project when it has one."""
    labels = {LABEL_RUN: run_id, LABEL_NODE: node_id}
    if project:
        labels[LABEL_PROJECT] = project
    return labels


def parse_statfs(output: str) -> list[VolumeUsage]:
    """``stat -f -c '%S %b %f %c %d'`` lines (block size, blocks, free blocks, files,
    free files) as volume usages."""
    out = []
    for line in output.split("\n"):
        fields = line.split()
        if len(fields) != 5:
            continue
        bsize, blocks, free, files, ffree = (int(f) for f in fields)
        out.append(VolumeUsage(size_bytes=bsize * blocks, free_bytes=bsize * free,
                               files=files, free_files=ffree))
    return out


class DockerEngine:
    """:class:`ContainerEngine` with the local Docker engine (the Docker SDK).

    ``node_id`` labels every container and volume, so that the next agent life finds
    what this one left; ``holder_image``: the holders' image (None: that of the
    container whose namespace the node's runs share, the node's own image)."""

    def __init__(self, client: docker.DockerClient, *, node_id: str,
                 holder_image: str | None = None) -> None:
        self.docker = client
        self.node_id = node_id
        self.holder_image = holder_image
        self._projects: dict[str, str | None] = {}
        self._images: dict[str, str] = {}

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

    def _holder_image(self, netns_container: str) -> str:
        if self.holder_image is not None:
            return self.holder_image
        if netns_container not in self._images:
            try:
                c = self.docker.containers.get(netns_container)
                self._images[netns_container] = str(c.attrs["Image"])
            except docker.errors.DockerException as e:
                raise RunnerError(
                    f"cannot find the image for the run's holder container (the image of "
                    f"{netns_container}; or set run_policy.holder_image): {e}") from e
        return self._images[netns_container]

    def remove_leftovers(self) -> list[str]:
        removed: set[str] = set()
        selector = {"label": f"{LABEL_NODE}={self.node_id}"}
        try:
            for c in self.docker.containers.list(all=True, filters=selector):
                removed.add(str(c.labels.get(LABEL_RUN, c.name)))
                c.remove(force=True)
            for v in self.docker.volumes.list(filters=selector):
                v.remove(force=True)
        except docker.errors.DockerException as e:
            raise RunnerError(f"cannot clean up old experiment containers: {e}") from e
        return sorted(removed)

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

    def _mounts(self, spec: RunSpec, *, holder: bool) -> list[Mount]:
        names = volume_names(spec.run_id)
        return [
            Mount(RESULTS_PATH, names["results"], type="volume", no_copy=True),
            Mount(HOLDER_TMP if holder else TMP_PATH, names["tmp"], type="volume",
                  no_copy=True),
            Mount(CONFIG_DIR, names["config"], type="volume", no_copy=True,
                  read_only=not holder),
        ]

    def create_holder(self, spec: RunSpec, needs: HolderNeeds) -> Holder:
        self.remove_holder(spec)  # an earlier try of the same run
        labels = run_labels(spec.run_id, self.node_id, self._project(spec.netns_container))
        try:
            image = self._holder_image(spec.netns_container)
            for part, opts in tmpfs_options(spec.limits).items():
                self.docker.volumes.create(
                    volume_names(spec.run_id)[part], driver="local", labels=labels,
                    driver_opts={"type": "tmpfs", "device": "tmpfs", "o": opts})
            c = self.docker.containers.create(
                image, name=holder_name(spec.run_id), labels=labels,
                entrypoint=list(needs.command or ("sleep", "infinity")), command=[],
                network_mode=needs.network_mode, environment=dict(needs.environment),
                # A confined run's holder lives in the agent's pid namespace, where the
                # agent finds it, and its namespace gets the node's TCP settings
                # (node_agent.runnet); a shared one needs neither.
                pid_mode=needs.pid_mode, sysctls=dict(needs.sysctls) or None,
                cap_drop=["ALL"], cap_add=list(needs.cap_add) or None,
                security_opt=list(SECURITY_OPT), read_only=True,
                mem_limit=HOLDER_MEMORY, pids_limit=HOLDER_PIDS,
                mounts=self._mounts(spec, holder=True), detach=True,
            )
            c.start()
            c.reload()
            sandbox = c.attrs["NetworkSettings"].get("SandboxKey") or None
            return Holder(ContainerId(str(c.name)), int(c.attrs["State"]["Pid"]), sandbox)
        except docker.errors.DockerException as e:
            self.remove_holder(spec)  # what was made of it: its volumes, its container
            raise RunnerError(f"node could not start the run's holder container: {e}") from e

    def create(self, spec: RunSpec, holder: Holder) -> ContainerId:
        name = container_name(spec.run_id)
        try:
            with contextlib.suppress(docker.errors.NotFound):
                self.docker.containers.get(name).remove(force=True)
            self.docker.containers.get(holder.id).put_archive(
                CONFIG_DIR, config_tar(spec.config_json()))
            self.docker.containers.create(
                spec.image,
                name=name,
                labels=run_labels(spec.run_id, self.node_id,
                                  self._project(spec.netns_container)),
                network_mode=f"container:{holder.id}",
                # A node on an emulated wrong clock gives its experiments the same.
                environment={**spec.environment(), **experiment_env(os.environ)},
                mounts=self._mounts(spec, holder=False),
                detach=True,
                **confinement_options(spec.limits),
            )
        except docker.errors.DockerException as e:
            raise RunnerError(f"node could not create the experiment container: {e}") from e
        return ContainerId(name)

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

    def wait(self, container: ContainerId, *, timeout_s: float) -> Ended:
        try:
            c = self._get(container)
            code = int(c.wait(timeout=timeout_s).get("StatusCode", -1))
            c.reload()
            return Ended(code, oom_killed=bool(c.attrs["State"].get("OOMKilled")))
        except docker.errors.DockerException as e:
            raise _lost(e) from e

    def usage(self, holder: Holder, container: ContainerId | None) -> BoundsUsage:
        results = tmp = None
        pids = memory = None
        cpu_s: float | None = None
        try:
            code, out = self._get(holder.id).exec_run(
                ["stat", "-f", "-c", "%S %b %f %c %d", RESULTS_PATH, HOLDER_TMP])
            volumes = parse_statfs(out.decode(errors="replace")) if code == 0 else []
            if len(volumes) == 2:
                results, tmp = volumes
        except (docker.errors.DockerException, requests.RequestException, ValueError) as e:
            log.debug("cannot look at the run's volumes: %s", e)
        if container is not None:
            try:
                stats = self._get(container).stats(stream=False, one_shot=True)
                pids = stats.get("pids_stats", {}).get("current")
                memory = stats.get("memory_stats", {}).get("usage")
                cpu_ns = stats.get("cpu_stats", {}).get("cpu_usage", {}).get("total_usage")
                cpu_s = cpu_ns / 1e9 if cpu_ns is not None else None
            except (docker.errors.DockerException, requests.RequestException) as e:
                log.debug("cannot read the experiment's stats: %s", e)
        return BoundsUsage(results=results, tmp=tmp, pids=pids, memory_bytes=memory,
                           cpu_s=cpu_s)

    def collect(self, container: ContainerId, holder: Holder, run_dir: Path) -> str:
        logs = run_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        stderr = ""
        try:
            c = self._get(container)
            stdout_b = c.logs(stdout=True, stderr=False)
            stderr_b = c.logs(stdout=False, stderr=True)
            (logs / "stdout.txt").write_bytes(stdout_b)
            (logs / "stderr.txt").write_bytes(stderr_b)
            stderr = stderr_b.decode(errors="replace")
        except docker.errors.DockerException as e:
            agent_note(run_dir, f"cannot read the container's logs: {e}")
        try:
            stream, _stat = self._get(holder.id).get_archive(RESULTS_PATH)
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

    def remove_holder(self, spec: RunSpec) -> None:
        try:
            self._get(ContainerId(holder_name(spec.run_id))).remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.DockerException as e:
            log.warning("run %s: cannot remove its holder: %s", spec.run_id, e)
        for name in volume_names(spec.run_id).values():
            try:
                self.docker.volumes.get(name).remove(force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.DockerException as e:
                log.warning("run %s: cannot remove its volume %s: %s", spec.run_id, name, e)


def _lost(e: Exception) -> RunnerError:
    return RunnerError(f"lost track of the experiment container: {e}")
