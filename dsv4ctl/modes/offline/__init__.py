"""mode: offline, the default: one judged generation by the probe (runtime/dsv4rt/offline.py). Its spec half is
`spec_rules` (no rules of its own, the metrics the probe records); its judgement is the verdict's rules as they are
(modes/offline/mode.py)."""
