"""The time-series adapter: results and metadata as InfluxDB points.

:mod:`.lineprotocol` (points, their text, the :class:`TimeSeriesSink` seam) and
:mod:`.schema` (measurement and tag names, results to points) are pure;
:mod:`.influx` is the real sink, an InfluxDB v1 HTTP API client.
"""
