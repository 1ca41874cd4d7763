"""What people read. Owns the terminal output layer (`output`: rich tables that fit the terminal, stderr notes,
`--json` kept clean), a verdict drawn for people (`verdict_view`), a campaign's page in HTML, Markdown or JSON
(`campaign`, with the modes' sections) and the one Markdown escaping (`markdown`). May import: analysis, modes
(their report sections), store, judge, units."""
