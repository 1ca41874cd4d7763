"""The spec half of mode: offline: no rules beyond every spec's, and the metrics the probe's DSV4_METRICS line
records (runtime/dsv4rt/offline.py)."""

from __future__ import annotations

METRICS = frozenset({"gen_s", "output_tokens", "tokens_per_s", "ttft_s", "engine_ready_s", "iterations"})
OFFLINE_METRICS = METRICS
RULES: tuple = ()
