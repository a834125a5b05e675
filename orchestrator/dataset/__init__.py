"""Open-data releases of campaigns: the pure parts (issue 15, docs/open-data.md).

Tables built from a run's points and records, the prefix-preserving anonymisation of
addresses and captures, node pseudonyms and coarse positions, the Frictionless Data
Package descriptor, CITATION.cff and the README datasheet, and SHA256SUMS. None of it
reads or writes a file: :mod:`orchestrator.services.datasets` reads the archive and the
database and writes the release, so the same inputs and key give the same bytes.
"""
