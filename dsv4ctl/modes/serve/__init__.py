"""mode: serve (issue 14): a real `vllm serve` under a load shaped like `vllm bench serve`'s. `mode` (the plug-in:
the serve files beside the log), `spec_rules` (its spec rules and metrics), `report` (the latency-throughput curve
of a sweep). Its verdict rules are stdlib-only and live with the judge (judge/serve_*.py, judge/serving.py) so
the job can run them."""
