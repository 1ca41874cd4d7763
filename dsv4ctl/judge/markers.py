"""The marker protocol between the job and the judge: what the job script and the probe print, and what the scanner
reads back. One place for the words, so the three never drift apart.

    ### STAGE: <name>                     stage boundaries (the last one names where a run stopped)
    ENGINE_READY in <s>s                  the engine is up
    SERVER_READY in <s>s                  mode serve: `vllm serve` answered GET /health (the engine is up)
    DSV4_EXPECT: {json}                   what the probe asked for (max_tokens, ignore_eos, n_requests, bos_id...)
    REQUEST: <i>                          then, per request:
    TOKEN_IDS: [ids]  FINISH_REASON: ...  TOKEN_DECODE: [...]  OUTPUT_REPR: '...'  OUTPUT: ...  LOGPROBS: [...]
    [DSV4_DIAG][tag] key = value          diagnostics (`*_finite = False` and NaN/Inf values are judged)
    DSV4_METRICS: {json}                  timings and counts
    DSV4_VERDICT: <STATUS> (reasons)      the probe's own verdict
    DSV4_JOB / DSV4_SETUP_ERROR / DSV4_FAULT
    DSV4_SERVE: {json}                    mode serve: the load sent and the server's files (server.log...)
    DSV4_REQUEST_ERROR: {json}            mode serve: a request that failed ({"index", "error"})
    PY_EXIT=<code>                        Python's exit code, always the job's last line
"""

from __future__ import annotations

import json
import re
from typing import Any

STAGE = "### STAGE:"
ENGINE_READY = "ENGINE_READY"
SERVER_READY = "SERVER_READY"
PY_EXIT = "PY_EXIT="
REQUEST = "REQUEST:"
DIAG = "[DSV4_DIAG]"
FIELDS = ("TOKEN_IDS", "FINISH_REASON", "TOKEN_DECODE", "OUTPUT_REPR", "OUTPUT", "STOP_REASON", "LOGPROBS")
DSV4_KEYS = ("DSV4_VERDICT", "DSV4_METRICS", "DSV4_EXPECT", "DSV4_SETUP_ERROR", "DSV4_JOB", "DSV4_FAULT",
             "DSV4_SERVE", "DSV4_REQUEST_ERROR")
MAX_EXIT_DIGITS = 6  # an exit code is 0-255 (or a negative signal); anything longer is garbage, not a number

STAGE_RE = re.compile(r"^### STAGE:\s*(?P<name>.*?)\s*$")
ENGINE_READY_RE = re.compile(r"(?:ENGINE|SERVER)_READY in (?P<s>[0-9]{1,9}(?:\.[0-9]{1,9})?)\s*s")
PY_EXIT_RE = re.compile(r"^PY_EXIT=(?P<rc>-?\d+)\s*$")
FIELD_RE = re.compile(r"^(?P<key>" + "|".join(sorted(FIELDS, key=len, reverse=True)) + r")"
                      r"(?:\[(?P<idx>\d{1,9})\])?:\s?(?P<value>.*)$")
REQUEST_RE = re.compile(r"^(?:REQUEST|### REQUEST)[ :]\s*(?P<idx>\d{1,9})")
DSV4_RE = re.compile(r"^(?P<key>" + "|".join(DSV4_KEYS) + r"):\s*(?P<value>.*?)\s*$")
DIAG_RE = re.compile(r"\[DSV4_DIAG\](?:\[(?P<tag>[^\]]+)\])?\s*(?P<key>[\w.]+)\s*[=:]\s*(?P<value>.*?)\s*$")


def stage_line(name: str) -> str:
    return f"{STAGE} {name}"


def engine_ready_line(seconds: float) -> str:
    return f"{ENGINE_READY} in {seconds:.1f}s"


def server_ready_line(seconds: float) -> str:
    return f"{SERVER_READY} in {seconds:.1f}s"


def request_line(index: int) -> str:
    return f"{REQUEST} {index}"


def field_line(key: str, value: str) -> str:
    assert key in FIELDS, key
    return f"{key}: {value}"


def dsv4_line(key: str, value: Any) -> str:
    assert key in DSV4_KEYS, key
    return f"{key}: {value if isinstance(value, str) else json.dumps(value)}"


def diag_line(key: str, value: Any) -> str:
    return f"{DIAG} {key} = {value}"


def py_exit_line(code: int) -> str:
    return f"{PY_EXIT}{code}"
