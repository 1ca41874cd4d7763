"""The dsv4ctl command line: wiring only. Each command group lives in `dsv4ctl/commands/`.

Import cost matters here (`dsv4ctl --help` must stay fast): command modules import their heavy dependencies
inside the command bodies, never at module level.
"""

from __future__ import annotations

import sys

import typer

from . import __version__
from .commands import campaign_cmds, compare_cmd, model_cmds, perf_cmds, run_cmds, spec_cmds, verdict_cmd
from .commands import bisect_cmd
from .commands import db_cmds
from .commands import promote_cmd
from .commands import profile_cmd
from .commands.groups import GroupedCommands

app = typer.Typer(
    name="dsv4ctl",
    cls=GroupedCommands,
    help="Run, judge and compare DeepSeek V4 bring-up experiments on vLLM through Slurm.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish)
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
perf_cmds.register(app)
bisect_cmd.register(app)
db_cmds.register(app)
promote_cmd.register(app)
profile_cmd.register(app)


_debug = False  # set by the global --debug (or DSV4CTL_DEBUG=1): show tracebacks of unexpected errors


def _version(value: bool) -> None:
    if value:
        typer.echo(f"dsv4ctl {__version__}")
        raise typer.Exit()


def _set_debug(value: bool) -> None:
    global _debug
    _debug = _debug or value


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Show the version and exit."),
          debug: bool = typer.Option(False, "--debug", envvar="DSV4CTL_DEBUG", callback=_set_debug, is_eager=True,
                                     help="Show the full traceback of unexpected errors."),
          wide: bool = typer.Option(False, "--wide", envvar="DSV4CTL_WIDE",
                                    help="Show table cells whole, however wide (also after the command).")) -> None:
    """Run, judge and compare DeepSeek V4 bring-up experiments on vLLM through Slurm."""


def main(argv: list[str] | None = None) -> None:
    """The `dsv4ctl` entry point: every failure ends as one line on stderr and an exit code, never a traceback
    (unless --debug): 1 the thing failed, 2 usage error, 3 a wait timed out, 130 interrupted. With --json the
    failure is a JSON object on stderr instead: {"error": {"message", "hint", "exit_code"}}."""
    args = hoist_command_options(list(sys.argv[1:] if argv is None else argv))
    args = _take_wide(args)
    as_json = "--json" in args[:args.index("--")] if "--" in args else "--json" in args
    try:
        # standalone_mode=False: usage errors come back here too, so they can be JSON with --json
        code = app(args=args, standalone_mode=False)
    except SystemExit:
        raise  # --show-completion and friends exit by themselves
    except typer.Abort:
        sys.exit(_report(KeyboardInterrupt(), as_json))
    except BaseException as exc:  # noqa: BLE001 - the one place an escaped exception becomes a message
        if _is_usage_error(exc):
            if as_json:
                sys.exit(_json_error(exc.format_message(), "see `dsv4ctl COMMAND --help`", exc.exit_code))
            exc.show()
            sys.exit(exc.exit_code)
        sys.exit(_report(exc, as_json))
    if code == 130:
        sys.exit(_report(KeyboardInterrupt(), as_json))
    sys.exit(code if isinstance(code, int) else 0)


# Options every data command takes, accepted before the command too (`dsv4ctl --db r.db runs`, as `git -C`).
_HOISTED = {"--db": True, "--runs-dir": True, "--json": False}  # option -> takes a value


def hoist_command_options(args: list[str]) -> list[str]:
    """Move the command options given before the command (`--db r.db runs`) to the end of its arguments (before a
    `--`), where the command reads them; root options (--debug, --version) stay where they are."""
    moved: list[str] = []
    rest = list(args)
    i = 0
    while i < len(rest) and rest[i].startswith("-"):
        name = rest[i].split("=", 1)[0]
        if name not in _HOISTED:
            i += 1
            continue
        takes_value = _HOISTED[name] and "=" not in rest[i]
        width = 2 if takes_value and i + 1 < len(rest) else 1
        moved += rest[i:i + width]
        del rest[i:i + width]
    if not moved:
        return args
    end = rest.index("--") if "--" in rest else len(rest)
    return rest[:end] + moved + rest[end:]


def _take_wide(args: list[str]) -> list[str]:
    """`--wide` anywhere before a `--` sets wide tables for the whole command (the output layer reads it)."""
    import os

    end = args.index("--") if "--" in args else len(args)
    if "--wide" not in args[:end]:
        return args
    os.environ["DSV4CTL_WIDE"] = "1"
    return [a for a in args[:end] if a != "--wide"] + args[end:]


def _is_usage_error(exc: BaseException) -> bool:
    """A command-line error typer found itself (no such option, a bad value): click's ClickException, which typer
    does not export; recognised by its public methods rather than by importing typer's internals."""
    return callable(getattr(exc, "show", None)) and callable(getattr(exc, "format_message", None)) \
        and isinstance(getattr(exc, "exit_code", None), int)


def _json_error(message: str, hint: str | None, exit_code: int, findings: list | None = None) -> int:
    """The one JSON error object on stderr; an invalid spec's findings ride along (as `validate --json` gives
    them: severity, path, message, why, file, line, column), so a script needs no second call to see them."""
    import json

    error: dict = {"message": message, "hint": hint, "exit_code": exit_code}
    if findings is not None:
        error["findings"] = [f.to_json() for f in findings]
    sys.stderr.write(json.dumps({"error": error}, ensure_ascii=False) + "\n")
    return exit_code


def _report(exc: BaseException, as_json: bool = False) -> int:
    """Tell the user what failed in one line (the findings of an invalid spec first); return the exit code."""
    import os

    from .report import output
    from .errors import SpecInvalid, explain

    if _debug or os.environ.get("DSV4CTL_DEBUG", "") not in ("", "0"):
        import traceback

        traceback.print_exception(exc)
    if isinstance(exc, SpecInvalid) and not as_json:
        for finding in exc.findings:
            output.problem(str(finding))
        output.error(str(exc), hint="run `dsv4ctl validate SPEC` for every finding")
        return exc.exit_code
    explained = explain(exc)
    if as_json:
        return _json_error(explained.message, explained.hint, explained.exit_code,
                           exc.findings if isinstance(exc, SpecInvalid) else None)
    output.error(explained.message, hint=explained.hint)
    return explained.exit_code


if __name__ == "__main__":
    main()
