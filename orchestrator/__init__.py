"""The testbed orchestrator: REST API, run lifecycle, result ingest and the CLI.

Layers, outer to inner: ``api`` and ``cli`` -> ``services`` -> (``scheduling``,
``catalogue``, ``archive``, ``store``) -> ``model``. Pure layers (``model``,
``scheduling``, ``catalogue.expr``) import no I/O library; an import-linter contract
keeps it so.
"""
