"""The experiment catalogue: manifests, parameter schemas and forecast expressions."""
