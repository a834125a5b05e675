"""Prometheus metrics, read from current state at scrape time."""
