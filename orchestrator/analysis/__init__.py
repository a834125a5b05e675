"""Analysis of raw results: packet captures, TCP flows, ABw-TAT-ABw sessions, operator
policing profiles and time-of-day effects.

Pure functions over bytes and records already in memory: they read no file and open
no socket (an import-linter contract keeps it so), so the ingest service, a rebuild
from the raw archive and a researcher's notebook all get the same figures from the
same bundle. One session's figures are the experiment kit's (``testbed_kit.session``),
which the abw-tat experiment writes its summary with: this package pairs and
aggregates them over archived runs.
"""
