"""The dsv4ctl command line: wiring only. Each command group lives in `dsv4ctl/commands/`.

Import cost matters here (`dsv4ctl --help` must stay fast): command modules import their heavy dependencies
inside the command bodies, never at module level.
"""

from __future__ import annotations

import sys

import typer

from . import __version__
from .commands import campaign_cmds, compare_cmd, model_cmds, run_cmds, spec_cmds, verdict_cmd

app = typer.Typer(
    name="dsv4ctl",
    help="Run, judge and compare DeepSeek V4 bring-up experiments on vLLM through Slurm.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: rendering it with rich alone doubled `dsv4ctl --help`'s start time
    context_settings={"help_option_names": ["-h", "--help"]},
)
spec_cmds.register(app)
run_cmds.register(app)
verdict_cmd.register(app)
compare_cmd.register(app)
campaign_cmds.register(app)
model_cmds.register(app)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"dsv4ctl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Show the version and exit.")) -> None:
    """Run, judge and compare DeepSeek V4 bring-up experiments on vLLM through Slurm."""


def main() -> None:
    from .errors import Dsv4Error, SpecInvalid

    try:
        app()
    except SpecInvalid as exc:
        from . import output

        for finding in exc.findings:
            output.problem(str(finding))
        output.error(str(exc), hint="run `dsv4ctl validate SPEC` for every finding")
        sys.exit(exc.exit_code)
    except Dsv4Error as exc:
        from . import output

        output.error(str(exc), hint=exc.hint)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
