"""The installed studies are refused as a whole, at start, with a message that says what
to do, when they conflict or one fails to load (issue 33); and the experiments' own
traits are manifest fields, checked as the rest of the manifest is."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from orchestrator.catalogue.manifest import ManifestError, parse_manifest
from orchestrator.catalogue.plugins import GROUP, Loaded, StudyLoadError, _load
from orchestrator.dataset.contrib import tables_of
from orchestrator.dataset.tables import Column, point_table
from orchestrator.pages.contrib import StudyPage, installed_pages, navigation, pages_of
from orchestrator.pages.views import Page
from orchestrator.study import Study, installed_studies_of
from orchestrator.timeseries.readers import Measurement, ResultReader, readers_of
from tests.conftest import REPO


def _reader(fmt: str) -> ResultReader:
    return ResultReader({fmt: frozenset({1})}, lambda doc, inputs: [])


def _loaded(name: str, study: object, dist: str = "") -> Loaded:
    return Loaded(f"{name} = {name}_pkg:STUDY", dist or f"{name}-study", study)


def _page(slug: str) -> StudyPage:
    return StudyPage(slug, slug.title(), "", lambda ts, f, z, r: Page(slug, "", ""))


def test_two_studies_claiming_one_format_are_refused_naming_both() -> None:
    a = _loaded("one", Study("one", reader=_reader("example.x")))
    b = _loaded("two", Study("two", reader=_reader("example.x")))
    with pytest.raises(StudyLoadError, match=r"'example.x' is claimed by two studies: "
                       r"one = .*one-study.* and two = .*two-study.*; uninstall one"):
        readers_of([a, b])
    assert set(readers_of([a]).results) == {"example.x"}


def test_a_study_may_not_redefine_a_measurement_or_take_a_page_or_table() -> None:
    with pytest.raises(StudyLoadError, match="measurement 'modem' .* already written by "
                       "the core; give it a name of its own"):
        readers_of([_loaded("m", Study("m", measurements=(Measurement("modem", {}),)))],
                   core=("modem",))
    with pytest.raises(StudyLoadError, match="/pages/fleet .* already served by the core"):
        pages_of([_loaded("p", Study("p", pages=(_page("fleet"),)))])
    table = point_table("runs", "", "", "x", tags=(), fields=(Column("v", "number", ""),))
    with pytest.raises(StudyLoadError, match="release table 'runs' .* the core's"):
        tables_of([_loaded("t", Study("t", tables=(table,)))])


def test_a_study_that_fails_to_load_says_which_and_what_to_do() -> None:
    ep = EntryPoint(name="broken", value="no_such_study_module_xyz:STUDY", group=GROUP)
    with pytest.raises(StudyLoadError, match=r"study 'broken' .* failed to load: "
                       r"ModuleNotFoundError.*uninstall it"):
        _load(ep)
    not_a_study = _loaded("odd", object())
    with pytest.raises(StudyLoadError, match="not an orchestrator.study.Study"):
        installed_studies_of([not_a_study])


def test_study_pages_join_the_navigation_in_their_order() -> None:
    slugs = [e.slug for e in navigation([*installed_pages(), _page("echo")])]
    assert slugs[-3:] == ["echo", "campaigns", "fleet"]  # order 500: before the core's last
    assert slugs.index("time-of-day") < slugs.index("echo")


def test_the_experiments_traits_are_manifest_fields_checked_with_the_rest() -> None:
    text = (REPO / "experiments/abw-tat/experiment.yaml").read_text()
    assert parse_manifest(text, source="abw-tat").ingest.whole_session
    tat = parse_manifest((REPO / "experiments/tat/experiment.yaml").read_text(), source="tat")
    assert not tat.ingest.whole_session and tat.ingest.records
    with pytest.raises(ManifestError, match=r"bad.yaml: ingest.whole_session: Input should "
                       "be a valid boolean"):
        parse_manifest(text.replace("whole_session: true", "whole_session: often"),
                       source="bad.yaml")
    with pytest.raises(ManifestError, match=r"ingest.sessions: Extra inputs"):
        parse_manifest(text.replace("whole_session: true", "sessions: 2"), source="x")


def test_a_studys_collectors_are_checked_and_one_that_raises_is_left_out(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from collections.abc import Iterator

    from orchestrator.metrics import contrib
    from orchestrator.study import Collector, GaugeMetricFamily, Metric

    class Up(Collector):
        def collect(self) -> Iterator[Metric]:
            yield GaugeMetricFamily("testbed_up_study", "Up", value=1)

    class Broken(Collector):
        def collect(self) -> Iterator[Metric]:
            raise RuntimeError("no store")

    with pytest.raises(StudyLoadError, match="its collectors must be Prometheus collectors"):
        contrib.collectors_of([_loaded("bad", Study("bad", collectors=(object(),)))])  # type: ignore[arg-type]
    given = contrib.collectors_of([_loaded("up", Study("up", collectors=(Up(),))),
                                   _loaded("broken", Study("broken", collectors=(Broken(),)))])
    monkeypatch.setattr(contrib, "installed_collectors", lambda: given)
    assert [f.name for f in contrib.study_families()] == ["testbed_up_study"]
    assert "study broken = broken_pkg:STUDY: its Prometheus collector failed" in caplog.text
