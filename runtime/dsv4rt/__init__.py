"""dsv4rt: the job side of dsv4ctl (probe, faults for tests, tiny models, reference numerics).

Runs in the job's venv (vLLM, torch); imports the stdlib-only judge package (dsv4ctl.judge) from the folder above.
"""

import sys
from pathlib import Path


def _make_rules_importable() -> None:
    """Put the folder holding the `dsv4ctl` package on sys.path: the project root in a checkout, site-packages
    in a wheel (where this folder is dsv4ctl/_runtime)."""
    here = Path(__file__).resolve().parent.parent  # runtime/
    for candidate in (here.parent, here.parent.parent):
        if (candidate / "dsv4ctl" / "judge" / "__init__.py").exists():
            if str(candidate) not in sys.path:
                sys.path.append(str(candidate))
            return


_make_rules_importable()
