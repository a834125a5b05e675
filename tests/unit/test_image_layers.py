"""The images' shared layers (docs/architecture.md, "Images"): Docker's classic builder
reuses a layer only when the image's instructions up to it are the same, so the
Dockerfiles must begin with the same lines in the same order. One edited line in one
Dockerfile silently builds that layer (the apt install of the runtime and the tools) twice
on a fresh machine; these tests say which file drifted."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IMAGES = {
    "orchestrator": REPO / "orchestrator/Dockerfile",
    "node": REPO / "node-image/Dockerfile",
    "server": REPO / "server-image/Dockerfile",
    "influxdb": REPO / "deploy/influxdb/Dockerfile",
    "postgres": REPO / "deploy/postgres/Dockerfile",
    "front": REPO / "deploy/front/Dockerfile",
    "prometheus": REPO / "deploy/prometheus/Dockerfile",
    "alertmanager": REPO / "deploy/alertmanager/Dockerfile",
    "tat": REPO / "experiments/tat/Dockerfile",
    "abw-tat": REPO / "experiments/abw-tat/Dockerfile",
    "short-flows": REPO / "experiments/short-flows/Dockerfile",
    "cca-compare": REPO / "experiments/cca-compare/Dockerfile",
    "abw-tools": REPO / "experiments/abw-tools/Dockerfile",
    "goodput-sequence": REPO / "experiments/goodput-sequence/Dockerfile",
    "machine": REPO / "experiments/machine/Dockerfile",  # arm64: build-arm64-images.sh
}
#: Every Dockerfile of an image scripts/build-images.sh (or, for arm64,
#: scripts/build-arm64-images.sh) builds is listed above.
BUILT = {REPO / "orchestrator/Dockerfile", REPO / "node-image/Dockerfile",
         REPO / "server-image/Dockerfile", *REPO.glob("deploy/*/Dockerfile"),
         *REPO.glob("experiments/*/Dockerfile")}
#: Images of third-party services (Debian's packages), which need no Python and no
#: network tools.
SERVICES = {"influxdb", "postgres", "front", "prometheus", "alertmanager"}


def instructions(path: Path) -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped,
    whitespace normalised: what the builder's cache compares."""
    out: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        out.append(" ".join((pending + line).split()))
        pending = ""
    return out


def test_every_built_image_is_checked() -> None:
    assert set(IMAGES.values()) == BUILT


def test_every_python_image_shares_one_runtime_and_tools_layer() -> None:
    """The Python runtime and the network tools in one apt layer (one `apt-get update`,
    one commit), the same line in every image that runs Python."""
    first = instructions(IMAGES["orchestrator"])[:3]
    assert first[0] == "FROM debian:bookworm-slim"
    assert all(word in first[2] for word in ("python3", "iperf3", "nftables"))
    for name, path in IMAGES.items():
        if name not in SERVICES:
            assert instructions(path)[:3] == first, f"{name}: its first three lines differ"


def test_services_build_from_the_base_alone() -> None:
    """The third-party services run no Python: they wait for no shared layer on a fresh
    machine and carry no runtime they never use."""
    for name in SERVICES:
        steps = instructions(IMAGES[name])
        assert steps[0] == "FROM debian:bookworm-slim"
        assert not any("python3" in step for step in steps), f"{name} installs python3"


def test_the_node_installs_the_agents_wheels_alone() -> None:
    """A real node fetches its image over its own links: the orchestrator's numpy, scipy
    and pyarrow (most of the old shared venv) have no place in it."""
    node = instructions(IMAGES["node"])
    assert "COPY build/wheels/node/ /wheels/" in node
    assert not any("build/wheels/orchestrator" in i or "build/wheels/deps" in i for i in node)
    assert "COPY build/wheels/orchestrator/ /wheels/" in instructions(IMAGES["orchestrator"])


METADATA = ("ENV", "VOLUME", "LABEL", "ENTRYPOINT", "CMD", "EXPOSE", "USER", "WORKDIR")


def test_metadata_comes_before_the_venv() -> None:
    """Each instruction is a container commit, several times dearer once the venv is in
    the image (bench/RESULTS.md): the two venv images put their metadata first."""
    for name in ("orchestrator", "node"):
        steps = instructions(IMAGES[name])
        venv = next(i for i, step in enumerate(steps)
                    if step.startswith("RUN") and "/opt/venv" in step)
        late = [step for step in steps[venv:] if step.split()[0] in METADATA]
        assert not late, f"{name}: metadata after its venv layer: {late}"
