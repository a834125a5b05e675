"""The REST API (FastAPI): thin routes that validate, call one service, map errors."""
