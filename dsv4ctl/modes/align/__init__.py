"""mode: align (issue 15): the engine's hidden states compared with a reference layer by layer. `mode` (the
plug-in), `spec_rules` (its spec rules and metrics), `result` (an align run's result in the verdict and the store,
the reference fixed at submit), `compare` + `rungs` (the numpy compare of two captures, the ladder's rungs), `view`
(show's rung table), `report` (1 - cosine by layer in a campaign's page)."""
