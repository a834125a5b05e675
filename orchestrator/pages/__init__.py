"""The orchestrator's own dashboard pages, for users without Grafana.

Server-rendered HTML with inline SVG charts over the same InfluxDB the Grafana
dashboards read. Pure parts: :mod:`.data` (rows and filters), :mod:`.svg` (chart
primitives), :mod:`.views` (page models), :mod:`.html` (layout); :mod:`.queries` holds
the InfluxQL and :mod:`.routes` the FastAPI router (``router``) and its sign-in.
"""
