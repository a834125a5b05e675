"""What a study contributes to ingest: its result format read into points, and the
schema of the measurements it writes.

The core (:func:`orchestrator.timeseries.schema.bundle_points`) walks a run's files and
hands each JSON result to the study whose reader claims its ``format`` (and version),
with what the study may join it with (:class:`RunInputs`: the flows of the run's
captures, the sender's capture, the modem samples). JSON-lines tool records (the ABw
estimator's) go to the one study that reads records. The core itself reads only the
agent's files (modem, GPS, health samples, captures), which every run has.

Studies are found by entry point (:mod:`orchestrator.catalogue.plugins`); this module
takes from each what ingest needs and refuses an ambiguous set (two readers of one
format, two studies defining one measurement) with a message saying what to do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.analysis.flows import FlowStats
from orchestrator.catalogue.plugins import Loaded, StudyLoadError
from orchestrator.timeseries.lineprotocol import Point

if TYPE_CHECKING:  # schema imports this module for its dispatch
    from orchestrator.timeseries.schema import RunContext


@dataclass(frozen=True)
class FieldSpec:
    """One field of a measurement: its type as stored (float, integer, string,
    boolean) and its unit (empty when it has none), for docs and release tables."""

    type: str = "float"
    unit: str = ""


#: Units by a field name's ending, the project's naming convention (docs/timeseries.md).
_UNITS = (("_bps", "bit/s"), ("_bytes", "bytes"), ("bytes", "bytes"), ("_s", "s"),
          ("_pct", "%"), ("_db", "dB"), ("_dbm", "dBm"))


def field_specs(names: Iterable[str], *, integers: Iterable[str] = (),
                strings: Iterable[str] = (), booleans: Iterable[str] = (),
                ) -> dict[str, FieldSpec]:
    """Fields by name, floats unless said otherwise, each unit read from its name's
    ending (``_bps`` bit/s, ``_s`` seconds, ``_bytes`` bytes, ``_pct`` %)."""
    kinds = {**{n: "integer" for n in integers}, **{n: "string" for n in strings},
             **{n: "boolean" for n in booleans}}
    return {n: FieldSpec(kinds.get(n, "float"),
                         next((u for end, u in _UNITS if n.endswith(end)), ""))
            for n in names}


@dataclass(frozen=True)
class Measurement:
    """A measurement a study writes: its name and its fields (the only ones a point of
    it may carry; a typo is refused as it is written, not discovered in a query)."""

    name: str
    fields: Mapping[str, FieldSpec]

    @property
    def field_names(self) -> frozenset[str]:
        return frozenset(self.fields)


@dataclass
class RunInputs:
    """What a study's reader may join its result with, besides the result itself."""

    ctx: RunContext
    #: The flows of every capture of the node's side of the run (when the reader
    #: ``joins_captures``; empty otherwise).
    flows: Sequence[FlowStats] = ()
    #: The agent's modem samples of the run (meta/modem.jsonl), as records.
    modem: Sequence[Mapping[str, Any]] = ()
    #: The flows of the measurement server's side of the capture (analysed on the first
    #: call; its damage and notes go to ``notes``). Present only when the experiment's
    #: manifest says the server may be the sender (``ingest.sender_capture``).
    server_flows: Callable[[], list[FlowStats]] = list
    #: Whether the bundle holds any server-side capture at all.
    has_server_capture: bool = False
    #: What the reader skipped or found damaged, and why: the run's ingest note.
    notes: list[str] = field(default_factory=list)


ResultPoints = Callable[[Mapping[str, Any], RunInputs], list[Point]]
RecordPoints = Callable[[str, Sequence[Mapping[str, Any]], "RunContext"], list[Point]]


@dataclass(frozen=True)
class ResultReader:
    """Reads result files of the given formats (format name -> versions) into points."""

    formats: Mapping[str, frozenset[int]]
    points: ResultPoints
    #: Read after every capture of the bundle, with their flows (``RunInputs.flows``).
    joins_captures: bool = False


@dataclass(frozen=True)
class RecordsReader:
    """Reads a run's JSON-lines tool records (``results/*.jsonl``) into points."""

    points: RecordPoints


@dataclass(frozen=True)
class Readers:
    """Every installed study's contribution to ingest, checked for conflicts."""

    results: Mapping[str, ResultReader] = field(default_factory=dict)  # by format
    records: RecordsReader | None = None
    measurements: Mapping[str, Measurement] = field(default_factory=dict)

    def reader(self, doc: object) -> ResultReader | None:
        """The reader of a parsed JSON document, by its ``format``; None if none."""
        if not isinstance(doc, Mapping):
            return None
        fmt = doc.get("format")
        return self.results.get(fmt) if isinstance(fmt, str) else None


def _each(study: Loaded, name: str, kind: type[Any]) -> Iterator[Any]:
    value = getattr(study.study, name, None)
    for item in (value if isinstance(value, tuple | list) else (value,)):
        if item is None:
            continue
        if not isinstance(item, kind):
            raise StudyLoadError(f"study {study.entry_point} (from {study.distribution}): "
                                 f"its {name} is a {type(item).__name__}, not a "
                                 f"{kind.__name__}; build it with orchestrator.study")
        yield item


def readers_of(studies: Iterable[Loaded], *, core: Iterable[str] = ()) -> Readers:
    """The studies' readers and measurements; refuses two readers of one format, two
    readers of records, and a measurement defined twice (or one of the ``core``'s)."""
    results: dict[str, tuple[ResultReader, Loaded]] = {}
    records: tuple[RecordsReader, Loaded] | None = None
    measurements: dict[str, tuple[Measurement, Loaded | None]] = {
        m: (Measurement(m, {}), None) for m in core}
    for study in studies:
        for reader in _each(study, "reader", ResultReader):
            for fmt in reader.formats:
                if fmt in results:
                    raise StudyLoadError(
                        f"result format {fmt!r} is claimed by two studies: "
                        f"{results[fmt][1].entry_point} ({results[fmt][1].distribution}) "
                        f"and {study.entry_point} ({study.distribution}); uninstall one "
                        "of them, or rename the format of one")
                results[fmt] = (reader, study)
        for got in _each(study, "records", RecordsReader):
            if records is not None:
                raise StudyLoadError(
                    f"JSON-lines records are read by two studies: {records[1].entry_point} "
                    f"and {study.entry_point}; uninstall one of them")
            records = (got, study)
        for m in _each(study, "measurements", Measurement):
            if m.name in measurements:
                other = measurements[m.name][1]
                owner = f"{other.entry_point}" if other else "the core"
                raise StudyLoadError(
                    f"measurement {m.name!r} of {study.entry_point} ({study.distribution}) "
                    f"is already written by {owner}; give it a name of its own")
            measurements[m.name] = (m, study)
    return Readers({f: r for f, (r, _) in results.items()},
                   records[0] if records else None,
                   {n: m for n, (m, s) in measurements.items() if s is not None})

