"""One line of a serve run's JSONL dataset (`load.dataset: jsonl`): what makes it a prompt. Stdlib only.

The job (runtime/dsv4rt/loadplan.py) builds its prompts with `row_problem` and `dsv4ctl validate`
(rules_serve.py) applies the same check to every line, so a file the job would refuse is refused before any server
starts (issue 29 S14: 17 s here, about 5 minutes of DeepSeek V4 start-up, for a broken last line).

A line is {"prompt": str | [token ids]} or {"messages": [{role, content}, ...]}, with an optional positive integer
max_tokens (else sampling.max_tokens).
"""

from __future__ import annotations

from typing import Any


def row_max_tokens(row: dict[str, Any], default: int) -> Any:
    return row.get("max_tokens", default)


def row_problem(row: Any, default_max_tokens: int) -> str | None:
    """Why this parsed JSON line is not a prompt, or None."""
    if not isinstance(row, dict):
        return "expected an object with prompt or messages"
    wanted = row_max_tokens(row, default_max_tokens)
    if isinstance(wanted, bool) or not isinstance(wanted, int) or wanted < 1:
        return "max_tokens must be a positive integer"
    messages, prompt = row.get("messages"), row.get("prompt")
    if messages is not None:
        if not (isinstance(messages, list) and messages and all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages)):
            return "messages must be a list of {role, content} strings"
        return None
    if isinstance(prompt, str):
        return None
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                                   for t in prompt):
        return None
    return "needs a prompt (text or token ids) or messages"
