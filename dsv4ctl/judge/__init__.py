"""The judge: raw job log (+ the scheduler's record) -> a verdict that never calls a broken run green.

Stdlib only: the job-side probe imports this package in the engine's venv, which has none of the CLI's
dependencies. Where to look:

  markers   the probe's marker protocol (### STAGE, ENGINE_READY, TOKEN_IDS..., DSV4_* lines, PY_EXIT)
  classify  plain tables: which signature is which error family, what is a wrapper, what is noise
  prefixes  line prefixes added by whatever ran the job (docker, CI viewers, srun --label, journald...)
  outputs   outputs printed by vLLM's examples and people's scripts (`Generated text:`, RequestOutput reprs)
  scan      the streaming scanning engine: bytes in, `LogFacts` out, in bounded memory
  rules     the verdict rules: `LogFacts` + scheduler summary -> `Verdict`
  sacct     `sacct --parsable2` text -> records -> one scheduler summary
  states    the one list of job states, with named sets (final, active, killed)
  files     judge a log file (and sacct file) on disk
"""
