"""Which change breaks a run. Owns a bisection's plan and rounds as campaigns, resumable (`run`), the search over
commits, field values and numeric ranges (`search`, `changes`, `ddmin`: pure delta debugging), the decision at
each point from failure rates with Wilson bounds (`rates`) and its page (`report`). May import: campaign,
analysis, store, spec, scheduler, judge, report (markdown, output)."""
