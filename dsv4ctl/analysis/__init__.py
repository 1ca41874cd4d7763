"""Is it faster, and still correct? Owns the A/B decision (`compare`: the correctness gate first, then medians,
bootstrap intervals and Mann-Whitney per metric; `sides`: which runs are on each side, chosen never guessed),
the statistics (`stats`), what differs between two sides (`differences`), a metric over commits or dates
(`history`), performance references and the check of a run against them (`perf`, `reference_source`). May
import: store, spec, judge, modes (a mode's metrics), errors, units. Never prints: the commands draw its results."""
