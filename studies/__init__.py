"""The platform's own studies, one package each, found by entry point like any other
(``testbed.studies`` in pyproject.toml; docs/writing-a-study.md)."""
