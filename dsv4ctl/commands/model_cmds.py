"""`dsv4ctl build-model`: build a tiny model locally (no downloads), in the engine venv."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..report import output


def build_model(out: Annotated[Path, typer.Option(help="Model directory to write.")] = Path("models/tiny-qwen2"),
                kind: Annotated[str, typer.Option(help="qwen2 (trained, talks) or deepseek (MoE + MLA, random).")]
                = "qwen2",
                steps: Annotated[int, typer.Option(help="Training steps (qwen2).")] = 500,
                seed: Annotated[int, typer.Option(help="Random seed: same seed and steps, same weights.")] = 0,
                python: Annotated[Optional[Path], typer.Option(
                    help="Python with torch and transformers [default: .venv-engine/bin/python].")] = None) -> None:
    """Build a tiny model with a locally trained tokenizer and chat template (see runtime/dsv4rt/tinymodel.py)."""
    from ..external import stream
    from ..paths import project_root, runtime_dir

    interpreter = python or project_root() / ".venv-engine" / "bin" / "python"
    if not Path(interpreter).exists():
        output.error(f"{interpreter} does not exist", hint="run ./scripts/setup-engine (or pass --python)")
        raise typer.Exit(2)
    code = stream([str(interpreter), "-m", "dsv4rt.tinymodel", "--kind", kind, "--out", str(out), "--steps",
                   str(steps), "--seed", str(seed)], env={"PYTHONPATH": str(runtime_dir())})
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("build-model")(build_model)
