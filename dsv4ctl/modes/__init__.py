"""The modes a spec runs in, each a plug-in: `offline` (the probe), `serve` (a real `vllm serve` under load),
`align` (layer-by-layer alignment with a reference). `base` says what a mode is (its judge, markers, evidence
files, record, submit checks); `registry` finds a mode by name for the watcher, `status`, `verdict`, `ingest`
and the verdict writer. Each mode's package holds its own code: `mode.py` (the plug-in), `spec_rules.py` (the
spec half: rules and recorded metrics, read by the spec layer through spec/modes.py, so it imports only the
spec's models and findings), and its views. Adding a mode: a folder here, one line in `registry`, one in
spec/modes.py, its sections in spec/models.py MODE_SECTIONS, its job in runtime/dsv4rt (probe.py JOBS)."""
