"""Render a Slurm job script from a validated spec: a pure function of the spec and the runtime's path.

Every value that reaches the shell goes through `shlex.quote`; values on `#SBATCH` lines are restricted by the spec's
patterns instead, because sbatch parses those lines itself. The same spec always renders byte-identical text.
"""

from __future__ import annotations

import json
import shlex
from functools import lru_cache
from pathlib import Path

import jinja2

from ..judge import markers
from ..paths import templates_dir
from .models import ExperimentSpec

SCRIPT_NAME = "job.sh"
SNAPSHOT_NAME = "spec.json"
RAW_LOG_NAME = "raw.log"
PROBE_NAME = "dsv4_probe.py"


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        # HTML pages escape every value; job scripts never (they are shell-quoted instead).
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",), default_for_string=False, default=False),
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    return env


def _env_value(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def sbatch_options(spec: ExperimentSpec) -> list[tuple[str, str]]:
    slurm = spec.slurm
    options = {
        "partition": slurm.partition,
        "account": slurm.account,
        "gres": slurm.gres,
        "nodes": str(slurm.nodes),
        "cpus-per-task": str(slurm.cpus_per_task) if slurm.cpus_per_task else None,
        "mem": slurm.mem,
        "time": slurm.time,
    }
    options.update({key: str(value) for key, value in slurm.extra.items()})
    return sorted((k, v) for k, v in options.items() if v is not None)


def exports(spec: ExperimentSpec) -> list[tuple[str, str]]:
    values = dict(spec.resolved_switches())
    values.update({name: _env_value(value) for name, value in spec.environment.env.items()})
    return sorted(values.items())


def render_script(spec: ExperimentSpec, runtime_dir: str, token: str | None = None, array: bool = False) -> str:
    """The job script text. `runtime_dir` is the runtime/ folder as the compute node sees it. With `array`, each
    Slurm array task runs in `task-<index>/` beside the script (its own spec.json and raw.log)."""
    runtime = spec.environment.runtime_dir or runtime_dir
    env = spec.environment
    return _environment().get_template("job.sh.j2").render(
        spec=spec,
        spec_hash=spec.spec_hash(),
        token=token,
        array=array,
        sbatch=sbatch_options(spec),
        modules=env.modules,
        venv=env.venv,
        ld_library_path=":".join(env.ld_library_path),
        pythonpath=":".join([runtime, *env.pythonpath]),
        exports=exports(spec),
        python=env.python,
        probe=f"{runtime}/{PROBE_NAME}",
        tracer=spec.profile.tracer() if spec.profile is not None else (),
        markers=markers,
    )


def snapshot_text(spec: ExperimentSpec) -> str:
    return json.dumps(spec.snapshot(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_run_files(spec: ExperimentSpec, run_dir: Path, runtime_dir: str, token: str | None = None) -> Path:
    """Write job.sh and spec.json into `run_dir`; return the script's path."""
    run_dir.mkdir(parents=True, exist_ok=True)
    script = run_dir / SCRIPT_NAME
    script.write_text(render_script(spec, runtime_dir, token), encoding="utf-8")
    script.chmod(0o755)
    (run_dir / SNAPSHOT_NAME).write_text(snapshot_text(spec), encoding="utf-8")
    return script
