"""ORM rows to public schemas, in one place so every endpoint shows the same shape."""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple, Protocol

from orchestrator.model.booking import BOOKED_BY, booked_reason
from orchestrator.model.health import node_health
from orchestrator.schemas import InterfacePublic, NodePublic, RunEventPublic, RunPublic
from orchestrator.settings import HealthSettings
from orchestrator.store.tables import Node, Run
from testbed_common.states import NodeHealth, RunState


class HealthFacts(Protocol):
    """What a node's health is derived from: a :class:`Node` row, or the three columns
    alone (:class:`NodeHealthRow`) where thousands of nodes are judged at once."""

    @property
    def id(self) -> str: ...
    @property
    def last_heartbeat_at(self) -> datetime | None: ...
    @property
    def maintenance(self) -> bool: ...


class NodeHealthRow(NamedTuple):
    id: str
    last_heartbeat_at: datetime | None
    maintenance: bool


def health_of(node: HealthFacts, now: datetime, health: HealthSettings) -> NodeHealth:
    return node_health(
        now=now,
        last_heartbeat=node.last_heartbeat_at,
        maintenance=node.maintenance,
        interval_s=health.heartbeat_interval_s,
        stale_after_beats=health.stale_after_beats,
        offline_after_beats=health.offline_after_beats,
    )


def node_public(node: Node, now: datetime, health: HealthSettings) -> NodePublic:
    return NodePublic(
        id=node.id,
        health=health_of(node, now, health),
        country=node.country,
        timezone=node.timezone,
        model=node.model,
        architecture=node.architecture,
        mobility=node.mobility,
        tags=list(node.tags),
        maintenance=node.maintenance,
        agent_version=node.agent_version,
        registered_at=node.registered_at,
        last_heartbeat_at=node.last_heartbeat_at,
        clock_offset_s=node.clock_offset_s,
        disk_free_bytes=node.disk_free_bytes,
        spooled_bundles=node.spooled_bundles,
        metadata_unavailable=dict(node.metadata_unavailable or {}),
        interfaces=[
            InterfacePublic(
                name=i.name,
                mcc_mnc=i.mcc_mnc,
                operator=i.operator_name,
                rat=i.rat,
                address=i.address,
                up=i.up,
                rx_bytes=i.rx_bytes,
                tx_bytes=i.tx_bytes,
                modem_model=i.modem_model,
                updated_at=i.updated_at,
            )
            for i in node.interfaces
        ],
    )


def run_public(run: Run, project: str, *, with_events: bool = False) -> RunPublic:
    return RunPublic(
        id=run.id,
        campaign=run.campaign_id,
        project=project,
        node=run.node_id,
        interface=run.interface,
        experiment=run.experiment,
        experiment_version=run.experiment_version,
        image=run.image,
        parameters=run.parameters,
        not_before=run.not_before,
        deadline=run.deadline,
        forecast_bytes=run.forecast_bytes,
        state=RunState(run.state),
        reason=run.state_reason,
        state_at=run.state_at,
        bundle_sha256=run.bundle_sha256,
        ingest_note=run.ingest_note,
        mcc_mnc=run.mcc_mnc,
        reserved_bytes=run.reserved_bytes,
        measured_bytes=run.measured_bytes,
        charged_bytes=run.charged_bytes,
        overrun_bytes=run.overrun_bytes,
        session=run.session_occurrence,
        events=history(run) if with_events else [],
    )


def history(run: Run) -> list[RunEventPublic]:
    """Every transition of the run, timestamped and explained: its booking, derived from
    its row (:mod:`orchestrator.model.booking`; its creation is its first transition),
    then the events stored since."""
    booked = RunEventPublic(
        state=RunState.SCHEDULED,
        reason=booked_reason(
            not_before=run.not_before, node=run.node_id, interface=run.interface,
            campaign=run.campaign.name if run.campaign is not None else None,
            session=run.session_occurrence, step=run.step, repetition=run.repetition),
        source=BOOKED_BY,
        at=run.created_at,
    )
    return [booked, *(RunEventPublic(state=RunState(e.state), reason=e.reason,
                                     source=e.source, at=e.at) for e in run.events)]
