"""The results database (one SQLite file, default ./results.db, opened as-is by Datasette).

Owns: the file and its failures (`dbfile`), the schema and its migrations (`migrations`), the store's words and
value conversions (`values`), and the reads and writes every command uses (`core`). May import: `judge` (the one
list of job states, the verdict statuses), `errors`, `config`. Never prints and never imports a capability above it
(campaign, analysis, modes, report, commands): they call it.
"""

from .dbfile import BUSY_TIMEOUT_S, StoreError
from .core import PLACEHOLDERS, RunRow, Store, open_store
from .migrations import MIGRATIONS, check_version, migrate
from .values import (AUTO_LABEL, DEFAULT_DB, FINAL, INT64_MAX, LATEST, LOST, NOT_WAITING, PLANNED, SUBMIT_FAILED,
                     SUBMITTING, UNKNOWN, CampaignNotFound, LabelTaken, RunNotFound, bindable, check_chosen_label,
                     closest, finite_number, known_state, known_status, now)

__all__ = ["AUTO_LABEL", "BUSY_TIMEOUT_S", "DEFAULT_DB", "FINAL", "INT64_MAX", "LATEST", "LOST", "MIGRATIONS",
           "NOT_WAITING", "PLACEHOLDERS", "PLANNED", "SUBMITTING", "SUBMIT_FAILED", "UNKNOWN", "CampaignNotFound",
           "LabelTaken", "RunNotFound", "RunRow", "Store", "StoreError", "bindable", "check_chosen_label",
           "check_version", "closest", "finite_number", "known_state", "known_status", "migrate", "now", "open_store"]
