"""``testbed results``: the columns the installed studies give (issue 33: the CLI names
no study; what a result means is its study's)."""

from __future__ import annotations

from orchestrator.cli.results import BYTES, figures, installed_columns, study_headers


def test_the_first_party_studies_give_the_tat_and_abw_columns_in_their_order() -> None:
    assert [*study_headers(installed_columns()), BYTES] == [
        "tat", "abw", "rd", "tat/abw bytes", "bytes"]


def test_a_tat_result_shows_its_mean_rate_and_bytes() -> None:
    got = figures({"format": "testbed.tat", "mean_bps": 12_340_000, "bytes": 999},
                  installed_columns())
    assert got == {"tat": "12.34 Mbit/s", "abw": "-", "rd": "-", "tat/abw bytes": "-",
                   "bytes": 999}


def test_a_session_summary_shows_tat_abw_rd_volume_ratio_and_interface_bytes() -> None:
    summary = {"tat_mean_bps": 20e6, "abw_mean_bps": 15e6, "rd": 0.25,
               "volume_ratio_iface": 7.25, "tat_iface_bytes": 5000}
    got = figures({"format": "testbed.abw-tat", "summary": summary}, installed_columns())
    assert got == {"tat": "20.00 Mbit/s", "abw": "15.00 Mbit/s", "rd": "25.0%",
                   "tat/abw bytes": "7.2", "bytes": 5000}


def test_a_result_of_another_study_shows_dashes_but_its_bytes() -> None:
    got = figures({"format": "testbed.goodput", "bytes": 10}, installed_columns())
    assert got == {"tat": "-", "abw": "-", "rd": "-", "tat/abw bytes": "-", "bytes": 10}
    assert figures({}, installed_columns())[BYTES] == "-"
