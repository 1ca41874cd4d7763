"""The staged probe the rendered job script runs: `python -u dsv4_probe.py spec.json` (see dsv4rt/probe.py)."""

import sys

from dsv4rt.probe import main

if __name__ == "__main__":  # vLLM spawns engine processes: the guard keeps them from re-running the probe
    sys.exit(main(sys.argv[1:]))
