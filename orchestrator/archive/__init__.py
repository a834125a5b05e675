"""The raw archive: run bundles byte for byte, the source of truth for derived data."""
