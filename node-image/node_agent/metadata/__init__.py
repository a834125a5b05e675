"""Modem and GPS metadata: readers (emulated linkem modems, ModemManager, gpsd), the
sampler that keeps the latest values and records them into a run's bundle, and the
loopback HTTP server that serves them to experiments."""
