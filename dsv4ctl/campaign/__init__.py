"""Runs on a cluster, from specs to stored verdicts. Owns planning and submitting a campaign (`plan`), finding a
job whose submitting CLI died (`reconcile`), following jobs and judging each once it has settled (`watch`), what a
run in flight is doing (`progress`), runs still in the scheduler's hands (`inflight`), the one writer of verdicts
(`verdicts`), regression suites (`suite`), failure-rate sweeps (`sweep`), golden ids from a stored run (`golden`)
and importing earlier logs (`ingest`). May import: modes (a run's mode), analysis (the perf check), store,
scheduler, spec, judge."""
