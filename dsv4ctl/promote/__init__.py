"""The stable configuration and its promotions (issue 24): the stable switch set as a file of the project
(`stable.yaml`), the three gates declared in it (numerics, end to end, throughput), and `promote`, which runs them
in that order as campaigns and writes the file only when all three pass.

Owns: stable (the file: parse, write, provenance, diff), gates (each gate's declaration and its pure decision),
run (a promotion: gates as campaigns, resumable), store (its tables, m012_promotions), report (a promotion's data
and page). May import campaign, analysis, bisect (the untestable-run rule), spec, store, scheduler, judge; never a
command module.
"""
