"""Spec commands: validate, render, expand, switches."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..report import output
from .options import JsonOpt, SpecArg, SpecsArg


def validate(specs: SpecsArg,
             strict: Annotated[bool, typer.Option(help="Treat warnings as errors.")] = False,
             cluster: Annotated[bool, typer.Option(
                 "--cluster", help="Also ask Slurm (sbatch --test-only) whether it would ever run each job.")]
             = False,
             json: JsonOpt = False) -> None:
    """Check spec files: structure, switches and the report's rules. Exit 1 on any error."""
    from ..spec.load import check_files

    files = check_files(specs)
    preflights = _preflight(files) if cluster else {}
    if json:
        output.emit_json([entry for f in files for entry in _validation_json(f, preflights)])
    else:
        for checked in files:
            _show_validation(checked, preflights)
    failed = any(f.failed or (strict and any(p.warnings for p in f.points)) for f in files)
    failed = failed or any(not p.ok for p in preflights.values())
    raise typer.Exit(1 if failed else 0)


def _preflight(files) -> dict:
    """sbatch --test-only for every valid point: {(file, point label): Preflight}."""
    from ..scheduler.preflight import check, require_sbatch

    require_sbatch("--cluster")
    return {(str(p.source), _label(p.point)): check(p.spec) for f in files if f.unreadable is None
            for p in f.points if p.spec is not None and not p.errors}


def _validation_json(checked, preflights: dict) -> list[dict]:
    if checked.unreadable is not None:
        return [{"file": str(checked.source), "point": {}, "name": None, "spec_hash": None, "valid": False,
                 "findings": [{"severity": "error", "path": None, "message": checked.unreadable, "why": "",
                               "file": str(checked.source), "line": None, "column": None}]}]
    entries = []
    for p in checked.points:
        cluster = preflights.get((str(p.source), _label(p.point)))
        entries.append({"file": str(p.source), "point": p.point, "name": p.spec.name if p.spec else None,
                        "spec_hash": p.spec.spec_hash() if p.spec else None,
                        # one verdict per spec: a job the cluster refuses is not valid, whatever its structure
                        "valid": not p.errors and (cluster is None or cluster.ok),
                        "findings": [f.to_json() for f in p.findings],
                        "cluster": None if cluster is None else cluster.to_json()})
    return entries


def _show_validation(checked, preflights: dict) -> None:
    if checked.unreadable is not None:
        output.error(checked.unreadable)  # stderr, as every error; the verdict line below carries it too
        output.text(f"{checked.source}: unreadable: {checked.unreadable}", style="red")
        return
    shown: set[str] = set()  # a finding every matrix point shares (an unknown axis) is printed once
    for point in checked.points:
        for finding in point.findings:
            if str(finding) not in shown:
                shown.add(str(finding))
                output.text(str(finding), style="red" if finding.severity == "error" else "yellow")
        label = f" [{_label(point.point)}]" if point.point else ""
        counts = f"({len(point.errors)} error(s), {len(point.warnings)} warning(s))"
        result = preflights.get((str(point.source), _label(point.point)))
        if point.errors:
            output.text(f"{point.source}{label}: invalid {counts}", style="red")
        elif result is not None and not result.ok:
            # One verdict per spec: the cluster's refusal is the verdict, with the resource it lacks named.
            output.text(f"{point.source}{label}: REFUSED by the cluster: {result.summary()}", style="red")
        else:
            output.text(f"{point.source}{label}: ok {counts}")
            if result is not None:
                output.text(f"  cluster: would run: {result.message}")


def render(spec: SpecArg,
           out: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write the script here.")] = None,
           run_dir: Annotated[Optional[Path], typer.Option(
               help="Write job.sh and spec.json into this directory, ready for sbatch.")] = None,
           point: Annotated[Optional[int], typer.Option(help="Matrix point index (see `expand`).")] = None,
           runtime_dir: Annotated[Optional[str], typer.Option(
               help="runtime/ as the compute node sees it [default: this installation's runtime/].")] = None) -> None:
    """Render the Slurm job script of a spec (one matrix point)."""
    from ..paths import runtime_dir as default_runtime
    from ..spec.render import render_script, write_run_files
    from ..spec.load import select_point

    chosen = select_point(spec, point)
    runtime = runtime_dir or str(default_runtime())
    if run_dir:
        script = write_run_files(chosen, run_dir, runtime)
        output.text(f"wrote {script} and {run_dir / 'spec.json'}")
    elif out:
        out.write_text(render_script(chosen, runtime), encoding="utf-8")
        output.text(f"wrote {out}")
    else:
        output.raw(render_script(chosen, runtime))


def expand(spec: SpecArg, json: JsonOpt = False) -> None:
    """List the matrix points of a spec: one job (times repeats) each."""
    from ..spec.load import load_spec

    points = load_spec(spec)
    if json:
        output.emit_json([{"index": i, "point": p.point, "name": p.spec.name if p.spec else None,
                           "spec_hash": p.spec.spec_hash() if p.spec else None,
                           "repeats": p.spec.repeats if p.spec else None,
                           "errors": [f.to_json() for f in p.errors]} for i, p in enumerate(points)])
    else:
        output.table(f"{spec}: {len(points)} point(s)", ["#", "name", "point", "repeats", "spec", "errors"],
                     [(i, p.spec.name if p.spec else "-", _label(p.point) or "-", p.spec.repeats if p.spec else "-",
                       p.spec.spec_hash() if p.spec else "-", len(p.errors)) for i, p in enumerate(points)])
    raise typer.Exit(1 if any(p.errors for p in points) else 0)


def switches(json: JsonOpt = False) -> None:
    """List the known environment switches with type, default (the report's stable set) and meaning."""
    from ..spec.switches import SWITCHES

    if json:
        output.emit_json([{"name": s.name, "kind": s.kind, "default": s.default, "role": s.role,
                           "choices": list(s.choices), "derived_from": s.derived_from, "meaning": s.meaning,
                           "source": s.source} for s in SWITCHES])
        return
    output.table("Known switches (defaults: report §0.4 stable set)", ["name", "kind", "default", "role", "meaning"],
                 [(s.name, s.kind if not s.choices else "|".join(s.choices), s.default or "-",
                   s.role if not s.derived_from else f"from {s.derived_from}", s.meaning) for s in SWITCHES],
                 styles=["bold", None, "cyan", "dim", None])


def _label(point: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in point.items())


def register(app: typer.Typer) -> None:
    for command in (validate, render, expand, switches):
        app.command()(command)
