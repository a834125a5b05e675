#!/bin/sh
# Prometheus reads its scrape token from a file (authorization.credentials_file in
# prometheus.yml), not from its environment: write TESTBED_METRICS_TOKEN there, readable
# by Prometheus alone, then run Prometheus with the arguments given.
set -eu
if [ -z "${TESTBED_METRICS_TOKEN:-}" ]; then
    echo "testbed-prometheus: TESTBED_METRICS_TOKEN is unset: Prometheus must send the" \
         "orchestrator's metrics token to see the per-node series (scripts/up generates" \
         "it into deploy/.secrets/compose.env)" >&2
    exit 64
fi
umask 077
printf '%s' "$TESTBED_METRICS_TOKEN" > /run/prometheus/testbed-token
exec prometheus "$@"
