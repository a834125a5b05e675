"""The smallest holder a confined run needs: one container that owns the run's network
namespace, which the experiment container joins (``network_mode="container:<holder>"``,
as MONROE's no-op namespace container or a Kubernetes pod's pause container).

It runs the node's own image (the agent's: found from the node's container, or set in
the agent's configuration) with every capability dropped but those its network asks
for (:class:`~node_agent.runnet.HolderNeeds`), no privilege escalation, and the
network's command. It is labelled as the run's containers are, so that the next agent
life removes one left behind.
"""

from __future__ import annotations

import contextlib
import logging
import re
from typing import Any

import docker
import docker.errors

from node_agent.errors import RunnerError
from node_agent.runnet import HolderNeeds

log = logging.getLogger(__name__)


def holder_name(run_id: str) -> str:
    return "testbed-holder-" + re.sub(r"[^a-zA-Z0-9_.-]", "-", run_id)


class DockerHolder:
    """Starts and removes runs' holders on the local Docker engine. ``image``: the
    holder's image (None: the image of ``node_container``, the agent's own)."""

    def __init__(self, client: docker.DockerClient, *, node_container: str,
                 image: str | None = None) -> None:
        self.docker = client
        self.node_container = node_container
        self.image = image

    def _image(self) -> str:
        if self.image is None:
            try:
                self.image = str(self.docker.containers.get(self.node_container)
                                 .attrs["Config"]["Image"])
            except (docker.errors.DockerException, KeyError) as e:
                raise RunnerError(
                    f"cannot find the node's image for the run's holder (from container "
                    f"{self.node_container}): {e}; set run_network.holder_image") from e
        return self.image

    def start(self, run_id: str, needs: HolderNeeds, *,
              labels: dict[str, str]) -> tuple[str, int, str | None]:
        """The started holder's name, its pid (the engine's) and its sandbox file."""
        name = holder_name(run_id)
        options: dict[str, Any] = {}
        if needs.pid_mode:
            options["pid_mode"] = needs.pid_mode
        if needs.sysctls:
            options["sysctls"] = dict(needs.sysctls)
        try:
            with contextlib.suppress(docker.errors.NotFound):
                self.docker.containers.get(name).remove(force=True)
            container = self.docker.containers.run(
                self._image(), name=name, labels=labels, detach=True,
                network_mode=needs.network_mode, cap_drop=["ALL"],
                cap_add=list(needs.cap_add) or None, security_opt=["no-new-privileges"],
                entrypoint=list(needs.command) if needs.command else ["sleep", "infinity"],
                command=[], environment=dict(needs.environment), **options,
            )
            container.reload()
            pid = int(container.attrs["State"]["Pid"])
            sandbox = container.attrs["NetworkSettings"].get("SandboxKey") or None
        except docker.errors.DockerException as e:
            self.remove(run_id)
            raise RunnerError(f"node could not start the run's holder container: {e}") from e
        return name, pid, sandbox

    def remove(self, run_id: str) -> None:
        """Never raises: a holder left behind goes at the agent's next start."""
        try:
            self.docker.containers.get(holder_name(run_id)).remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.DockerException as e:
            log.warning("cannot remove the holder of run %s: %s", run_id, e)
