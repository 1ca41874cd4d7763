"""dsv4ctl: run, judge and compare DeepSeek V4 bring-up experiments on vLLM through Slurm.

This package's top level stays import-light: the job-side runtime imports the judge package
(`dsv4ctl.judge`: the verdict rules, the scanner, sacct parsing) in a venv that has vLLM but none of
the CLI's dependencies, so nothing here may import pydantic, typer, torch or numpy.
"""

__version__ = "0.1.0"
