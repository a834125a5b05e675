"""Proxy mode's decisions against the store: per SIM of a proxy-mode campaign, does
its next window need a TAT (:func:`orchestrator.analysis.proxy.tat_needed`)?

The planner is pure and reads the answers from its snapshot (``Snapshot.proxy``); they
are made here at each planning pass (the study's ``proxy_verdicts``, called by
``orchestrator.services.planhooks``), from the campaign's own points in InfluxDB (the
same ones the ``abw-proxy`` page reads). While the store does not answer there is no
answer: every window books its TAT. That costs bytes, never calibration. The core asks
the store without retries (the planner's lock is held), and the first failure ends the
pass's reading.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from orchestrator.analysis.proxy import Policy, Verdict, fit, tat_needed
from orchestrator.analysis.proxy_data import SimHistory, histories
from orchestrator.study import (
    Campaign,
    CampaignId,
    CampaignSpecV2,
    NodeFacts,
    NodeId,
    SimKey,
    TimeScale,
    TimeSeriesError,
    TimeSeriesQuery,
)
from studies.abw_proxy.rows import campaign_points

log = logging.getLogger(__name__)


def policy(spec: CampaignSpecV2) -> Policy:
    assert spec.proxy is not None
    p = spec.proxy
    return Policy(max_relative_width=p.max_relative_width, max_age_s=p.max_age_hours * 3600,
                  min_tats=p.min_tats)


def campaign_now_s(spec: CampaignSpecV2, submitted_at: datetime, now: datetime) -> float:
    """``now`` in the campaign's time (its points are written at campaign time)."""
    scale = TimeScale(spec.time_scale, spec.time_anchor or submitted_at)
    return scale.to_campaign(now).timestamp()


def verdict(h: SimHistory, *, policy: Policy, now_s: float) -> Verdict:
    """The SIM's answer: its model on every TAT so far, asked with its newest signals."""
    latest = max([*((o.time_s, o.signals) for o in h.observations),
                  *((c.time_s, c.signals) for c in h.cheap)],
                 key=lambda ts: ts[0], default=None)
    return tat_needed(fit(h.observations), latest[1] if latest else None, now_s=now_s,
                      policy=policy)


def verdicts(ts: TimeSeriesQuery, proxied: Sequence[Campaign], nodes: Sequence[NodeFacts],
             now: datetime) -> dict[tuple[CampaignId, SimKey], Verdict]:
    """Per proxy-mode campaign and SIM with a history, whether a TAT is needed now."""
    out: dict[tuple[CampaignId, SimKey], Verdict] = {}
    keys = {(n.id, s.mcc_mnc): SimKey(n.id, s.interface, s.mcc_mnc)
            for n in nodes for s in n.sims}
    for c in proxied:
        try:
            sims = histories(*campaign_points(ts, c.id))
        except TimeSeriesError as e:
            # The store is down or refuses: the other campaigns' queries would wait on
            # it too. Every proxy-mode window of this pass books its TAT.
            log.warning("proxy mode: campaign %s's points unreadable (%s); this pass's "
                        "proxy-mode windows book a TAT", c.id, e)
            break
        now_s = campaign_now_s(c.spec, c.submitted_at, now)
        for sim, h in sims.items():
            key = keys.get((NodeId(sim.node), sim.operator))
            if key is not None:
                out[(c.id, key)] = verdict(h, policy=policy(c.spec), now_s=now_s)
    return out
