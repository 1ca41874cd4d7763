"""dsv4ctl: run, judge and compare DeepSeek V4 bring-up experiments on vLLM through Slurm.

This package's top level stays import-light: the job-side runtime imports the verdict rules
(`dsv4ctl.verdict`, `dsv4ctl.judge.scan`, `dsv4ctl.judge.sacct`) in a venv that has vLLM but none of
the CLI's dependencies, so nothing here may import pydantic, typer, torch or numpy.
"""

__version__ = "0.1.0"
