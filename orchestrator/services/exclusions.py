"""Runs, nodes and SIMs left out of every dataset release, and why (table
``dataset_exclusions``): a node whose owner withdrew consent stays out of tomorrow's
daily release without anyone repeating it (docs/open-data.md, "Leaving data out").

Recorded by administrators, over the API or with ``testbed dataset exclude`` where the
orchestrator runs: what leaves the fleet's data out of publications is a fleet-wide
decision, like a SIM's quota. The reason is printed in every release that applied it.
Needs none of the ``dataset`` extra: the record is kept even where releases are not
built.
"""

from __future__ import annotations

import logging
import re

from sqlalchemy import select

from orchestrator.dataset.release import Exclusion
from orchestrator.errors import Invalid, NotFound
from orchestrator.schemas import ExclusionPublic
from orchestrator.services.auth import Principal
from orchestrator.services.context import Context
from orchestrator.store.tables import DatasetExclusion, Node, Run
from testbed_common.bounds import INTERFACE_PATTERN, NODE_ID_PATTERN, RECORD_ID_PATTERN

log = logging.getLogger(__name__)

#: What each kind's target looks like, and an example to say when it does not.
_TARGETS = {
    "run": (re.compile(RECORD_ID_PATTERN), "a run id, e.g. run:r-20261124-ab12"),
    "node": (re.compile(NODE_ID_PATTERN), "a node id, e.g. node:se-03"),
    "sim": (re.compile(NODE_ID_PATTERN.rstrip("$") + "/" + INTERFACE_PATTERN.lstrip("^")),
            "NODE/INTERFACE, e.g. sim:se-01/op0"),
}


def _public(row: DatasetExclusion) -> ExclusionPublic:
    return ExclusionPublic(id=row.id, kind=row.kind, target=row.target,
                           rule=f"{row.kind}:{row.target}", reason=row.reason,
                           created_at=row.created_at)


def record_exclusion(ctx: Context, rule: Exclusion) -> ExclusionPublic:
    """Leave ``rule``'s run, node or SIM out of every release from now on (a new reason
    replaces the old one). Invalid for a target of the wrong form, NotFound for a run
    or node this orchestrator never had: a typo would otherwise leave out nothing."""
    pattern, form = _TARGETS[rule.kind]
    if not pattern.match(rule.target):
        raise Invalid(f"{rule.kind} {rule.target!r}: give {form}")
    with ctx.db.session() as s:
        if rule.kind == "run":
            if s.get(Run, rule.target) is None:
                raise NotFound(f"no run {rule.target!r}: give run ids as `testbed run "
                               "list` shows them")
        elif s.get(Node, rule.target.split("/", 1)[0]) is None:
            raise NotFound(f"no node {rule.target.split('/', 1)[0]!r}: give node ids as "
                           "`testbed node list` shows them")
        row = s.scalar(select(DatasetExclusion).where(DatasetExclusion.kind == rule.kind,
                                                      DatasetExclusion.target == rule.target))
        if row is None:
            row = DatasetExclusion(kind=rule.kind, target=rule.target, reason=rule.reason,
                                   created_at=ctx.clock.now())
            s.add(row)
        else:
            row.reason, row.created_at = rule.reason, ctx.clock.now()
        s.flush()
        return _public(row)


def recorded_exclusions(ctx: Context) -> list[ExclusionPublic]:
    """Every recorded exclusion, by kind and target."""
    with ctx.db.session() as s:
        rows = s.scalars(select(DatasetExclusion).order_by(DatasetExclusion.kind,
                                                           DatasetExclusion.target)).all()
        return [_public(r) for r in rows]


def recorded_rules(ctx: Context) -> list[Exclusion]:
    """The recorded exclusions as a build applies them."""
    return [Exclusion(e.kind, e.target, e.reason) for e in recorded_exclusions(ctx)]


def drop_exclusion(ctx: Context, kind: str, target: str) -> bool:
    """Releases include the run, node or SIM again; False when it was not excluded."""
    with ctx.db.session() as s:
        row = s.scalar(select(DatasetExclusion).where(DatasetExclusion.kind == kind,
                                                      DatasetExclusion.target == target))
        if row is None:
            return False
        s.delete(row)
        return True


# --- over the API (administrators) ---------------------------------------------------------


def exclude(ctx: Context, principal: Principal, rule: Exclusion) -> ExclusionPublic:
    principal.require_admin()
    out = record_exclusion(ctx, rule)
    log.info("dataset exclusion %s recorded by %s: %s", out.rule, principal.name, out.reason)
    return out


def list_exclusions(ctx: Context, principal: Principal) -> list[ExclusionPublic]:
    principal.require_admin()
    return recorded_exclusions(ctx)


def include_again(ctx: Context, principal: Principal, exclusion_id: int) -> None:
    """Drop exclusion ``exclusion_id``: releases built from now on include its data."""
    principal.require_admin()
    with ctx.db.session() as s:
        row = s.get(DatasetExclusion, exclusion_id)
        if row is None:
            raise NotFound(f"no dataset exclusion {exclusion_id}: GET "
                           "/api/v1/dataset-exclusions lists them")
        log.info("dataset exclusion %s:%s dropped by %s", row.kind, row.target,
                 principal.name)
        s.delete(row)
