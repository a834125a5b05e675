"""What a release says about itself: its identity, exclusions and changelog (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date

#: Licences a release may carry without further text (SPDX id -> title, URL).
LICENCES = {
    "CC-BY-4.0": ("Creative Commons Attribution 4.0 International",
                  "https://creativecommons.org/licenses/by/4.0/"),
    "CC-BY-SA-4.0": ("Creative Commons Attribution-ShareAlike 4.0 International",
                     "https://creativecommons.org/licenses/by-sa/4.0/"),
    "CC0-1.0": ("Creative Commons Zero v1.0 Universal",
                "https://creativecommons.org/publicdomain/zero/1.0/"),
    "ODbL-1.0": ("Open Data Commons Open Database License v1.0",
                 "https://opendatacommons.org/licenses/odbl/1-0/"),
}

EXCLUSION_KINDS = ("run", "node", "sim")
_VERSION = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+-]{0,63}$")


class BadRelease(ValueError):
    """A release setting that cannot be used; says what to give instead."""


@dataclass(frozen=True)
class Exclusion:
    """A run, node or SIM (``node/interface``) left out of the release, and why."""

    kind: str
    target: str
    reason: str

    def matches(self, *, run: str, node: str, interface: str) -> bool:
        return {"run": run, "node": node, "sim": f"{node}/{interface}"}[self.kind] == self.target


def parse_exclusion(text: str) -> Exclusion:
    """``run:ID=reason``, ``node:ID=reason`` or ``sim:NODE/IFACE=reason``."""
    head, sep, reason = text.partition("=")
    kind, colon, target = head.partition(":")
    if not (sep and colon and target.strip() and reason.strip()):
        raise BadRelease(f"exclusion {text!r}: write KIND:ID=REASON, e.g. "
                         "'node:se-03=owner withdrew consent' (KIND: run, node or sim)")
    kind = kind.strip().lower()
    if kind not in EXCLUSION_KINDS:
        raise BadRelease(f"exclusion {text!r}: kind {kind!r} is not one of "
                         f"{', '.join(EXCLUSION_KINDS)}")
    if kind == "sim" and "/" not in target:
        raise BadRelease(f"exclusion {text!r}: a SIM is NODE/INTERFACE, e.g. sim:se-01/op0")
    return Exclusion(kind, target.strip(), reason.strip())


def check_version(version: str) -> str:
    if not _VERSION.match(version):
        raise BadRelease(f"release version {version!r}: use letters, digits, dots, + and -, "
                         "e.g. 1.0.0 or 2026-11-24")
    return version


def check_licence(licence: str) -> str:
    if licence not in LICENCES:
        raise BadRelease(f"licence {licence!r} is not known; use one of "
                         f"{', '.join(sorted(LICENCES))}")
    return licence


@dataclass(frozen=True)
class Release:
    """A release's identity and settings: everything its metadata says besides tables."""

    name: str
    version: str
    campaigns: tuple[str, ...]
    period_from: date | None = None  # inclusive, UTC days
    period_to: date | None = None  # exclusive
    licence: str = "CC-BY-4.0"
    authors: tuple[str, ...] = ("MBB testbed operators",)
    tool_version: str = ""
    images: tuple[str, ...] = ()
    link_profiles: tuple[tuple[str, str], ...] = ()  # (SIM, file in the release)
    exclusions: tuple[Exclusion, ...] = ()
    excluded_runs: tuple[tuple[str, str], ...] = ()  # (run, reason), as applied
    pseudonymised: bool = False
    grid_deg: float = 0.01
    raw: bool = False
    caveats: tuple[str, ...] = ()
    changelog: tuple[str, ...] = field(default_factory=tuple)

    @property
    def period(self) -> str:
        if self.period_from is None and self.period_to is None:
            return "the campaigns' whole span"
        start = self.period_from.isoformat() if self.period_from else "the start"
        end = self.period_to.isoformat() if self.period_to else "the end"
        return f"{start} (inclusive) to {end} (exclusive), UTC"


def daily_period(day: date) -> tuple[date, date]:
    """A daily release's window: the day, UTC (MONROE's daily dumps)."""
    from datetime import timedelta
    return day, day + timedelta(days=1)


def changelog(version: str, previous: str | None, counts: dict[str, int],
              before: dict[str, int] | None, older: str = "") -> str:
    """CHANGELOG.md: this version's entry (rows per table, and the change since the
    previous release when there was one) above the previous release's log."""
    lines = [f"## {version}", ""]
    if previous is None:
        lines.append("- First release.")
    else:
        lines.append(f"- Follows {previous}.")
    for table, n in sorted(counts.items()):
        if before is not None and table in before:
            lines.append(f"- {table}: {n} rows ({n - before[table]:+d} since {previous}).")
        else:
            lines.append(f"- {table}: {n} rows.")
    entry = "\n".join(lines) + "\n"
    tail = older.split("\n", 2)[2] if older.startswith("# Changelog\n") else older
    return "# Changelog\n\n" + entry + ("\n" + tail.lstrip("\n") if tail.strip() else "")
