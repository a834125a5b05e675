"""Processor architectures and image platforms, in the OCI's names.

A node reports its architecture (``amd64``, ``arm64``, ...: the names an OCI image index
uses, not the kernel's ``x86_64``/``aarch64``); an experiment declares the platforms its
image provides (``linux/amd64``, ``linux/arm64``). The planner books an experiment only
on a node whose architecture one of them names. The node agent and the orchestrator
both speak these names, so the one vocabulary lives here.
"""

from __future__ import annotations

import re

#: An agent that reports no architecture (older than this field, or a node created
#: without one) is taken to be amd64: every node of the platform was amd64 until nodes
#: reported theirs.
DEFAULT_ARCHITECTURE = "amd64"
#: What an experiment that declares no platforms provides (its image built on the
#: platform's amd64 hosts, as every image was).
DEFAULT_PLATFORMS = ("linux/amd64",)
#: The word a node or a registration uses for "not reported".
UNKNOWN = "unknown"

#: The kernel's names (``uname -m``, Python's ``platform.machine()``) -> the OCI's, as
#: the OCI image index spec lists them (GOARCH values).
_MACHINE_TO_OCI = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "aarch64_be": "arm64",
    "armv6l": "arm",
    "armv7l": "arm",
    "armv8l": "arm",
    "i386": "386",
    "i486": "386",
    "i586": "386",
    "i686": "386",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
    "mips64": "mips64",
    "loongarch64": "loong64",
}
#: Architectures an experiment's platform may name.
ARCHITECTURES = frozenset(_MACHINE_TO_OCI.values())
_PLATFORM = re.compile(r"^linux/([a-z0-9]+)(?:/(v[0-9]+))?$")


def oci_architecture(machine: str) -> str:
    """The OCI name of a kernel's machine string (``aarch64`` -> ``arm64``); a name
    already in OCI form is kept, and one not known comes back lower-cased as it is (a
    node is never refused for an exotic machine: it is simply booked for nothing that
    does not name it)."""
    name = machine.strip().lower()
    return _MACHINE_TO_OCI.get(name, name) if name else UNKNOWN


def node_architecture(reported: str) -> str:
    """The architecture the planner takes a node to have: what it reported, or amd64
    for a node that reported none (:data:`DEFAULT_ARCHITECTURE`)."""
    name = oci_architecture(reported)
    return DEFAULT_ARCHITECTURE if name == UNKNOWN else name


def parse_platform(value: str) -> str:
    """A platform as an image index names it, ``linux/ARCH`` or ``linux/ARCH/VARIANT``;
    raises ``ValueError`` saying what is accepted."""
    m = _PLATFORM.match(value.strip())
    if m is None or m.group(1) not in ARCHITECTURES:
        raise ValueError(
            f"platform {value!r} is not an OS/architecture pair this platform runs; "
            f"write linux/ARCH with ARCH one of {sorted(ARCHITECTURES)} "
            "(e.g. linux/amd64, linux/arm64)"
        )
    return value.strip()


def platform_architecture(platform: str) -> str:
    """``linux/arm64`` -> ``arm64``; ``linux/arm/v7`` -> ``arm``."""
    return platform.split("/")[1]
