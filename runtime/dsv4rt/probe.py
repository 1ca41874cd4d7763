"""The staged probe, the one entry of every job (`python -u dsv4_probe.py spec.json`): reads the resolved spec and
runs its mode's job (offline.py, serve.py, align.py), each printing evidence the verdict can trust: `### STAGE:`
markers, DSV4_* lines, every line flushed as printed. A Python error exits 1 with its traceback.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from .stages import *  # noqa: F401,F403 - the shared stages, as `probe.say`, `probe.registry_stage` before

# Each mode's job, by the mode's name in the spec: a module of this package with `main(spec) -> exit code`.
JOBS = {"offline": "offline", "serve": "serve", "align": "align"}


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0] if argv else "spec.json").read_text(encoding="utf-8"))
    job = importlib.import_module(f".{JOBS[spec.get('mode') or 'offline']}", __package__)
    return job.main(spec)
