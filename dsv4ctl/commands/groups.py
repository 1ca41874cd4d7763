"""The grouped `dsv4ctl --help`: one table of which group each command belongs to and its one-line summary, and
the click group that draws it. A summary is written to fit an 80-column terminal whole, never cut mid-sentence."""

from __future__ import annotations

import click
from typer.core import TyperGroup

GROUPS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("Run", (
        ("submit", "Render and submit specs (Slurm or local); --wait follows them."),
        ("status", "Poll the scheduler once for runs in flight; judge those that ended."),
        ("cancel", "Cancel runs (scancel, or stop a local job)."),
        ("resume", "Resubmit a campaign's runs that never got a job or were lost."),
        ("suite", "Run a folder of specs as one regression campaign."),
        ("sweep", "Failure rate per matrix point, with Wilson intervals."),
        ("ingest", "Import the log of an earlier run, judged and stored."),
    )),
    ("Inspect", (
        ("runs", "List recorded runs, newest first."),
        ("show", "Everything recorded about one run."),
        ("logs", "Print or follow a run's raw.log."),
        ("verdict", "Judge a stored run or a raw log: the status and first blocker."),
        ("campaigns", "List campaigns: runs, states, verdicts."),
        ("db", "Export, import (merge), check or vacuum the results database."),
    )),
    ("Analyse", (
        ("compare", "Is the candidate faster, and still correct?"),
        ("report", "A campaign as a self-contained HTML, Markdown or JSON page."),
        ("history", "A metric of passed runs over commits or dates."),
        ("profile", "Where the time goes in a run (by category, module), A vs B."),
        ("reference", "Performance references that passed runs are checked against."),
    )),
    ("Bisect", (
        ("bisect", "Find the change (or field value) that breaks a run."),
        ("bisect-report", "A stored bisection as an HTML page (or Markdown, JSON)."),
    )),
    ("Promote", (
        ("stable", "The stable switch set with provenance; history, diff SPEC."),
        ("promote", "Put a switch into the stable set through the three gates."),
        ("promotion-report", "A stored promotion as an HTML page (or Markdown, JSON)."),
    )),
    ("Set up", (
        ("init", "Write a commented starter dsv4ctl.toml."),
        ("validate", "Check specs: structure, switches and the report's rules."),
        ("render", "Print the Slurm job script of a spec."),
        ("expand", "List the matrix points of a spec."),
        ("switches", "List the known environment switches."),
        ("build-model", "Build a tiny model locally (tokenizer and weights)."),
    )),
)


class GroupedCommands(TyperGroup):
    """Commands listed by group, each with the summary from GROUPS; a command missing from the table is listed
    under "Other" with its own first line, so a new command is never hidden."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        known = {name for _, commands in GROUPS for name, _ in commands}
        sections = [(group, [(name, summary) for name, summary in commands if name in self.commands])
                    for group, commands in GROUPS]
        other = [(name, (self.commands[name].get_short_help_str(limit=60)))
                 for name in self.list_commands(ctx) if name not in known and not self.commands[name].hidden]
        if other:
            sections.append(("Other", other))
        for group, rows in sections:
            if rows:
                with formatter.section(group):
                    formatter.write_dl(rows)
