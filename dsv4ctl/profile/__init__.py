"""dsv4ctl.profile: where the time goes in a run (issue 23).

Owns the `profile:` spec section (section), the streaming trace readers (reader: torch/Kineto Chrome traces;
rocprof: rocprofv3 kernel-trace CSV and JSON), the ordered category rules kept as data (categories, rules.json),
the launch -> nn.Module join (modules), one trace's breakdown (breakdown), a run's traces (sources), its rows in
the store (store), the A/B of profiles (diff) and what commands and the report draw (view).

May import: the store, spec, analysis.stats / analysis.sides (for A/B sides), errors, judge.markers. Standard
library only at import time (no torch, numpy or scipy: scipy is imported inside the statistics)."""
