"""The category of a work item from the ordered first-match rules in rules.json (data, not code), and the hash of
the rules, stored with each profile so that breakdowns made under other rules are never compared as equals."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..errors import UsageError

RULES_FILE = Path(__file__).with_name("rules.json")
MAX_CACHED = 65_536  # distinct (event, name, module path) triples remembered; past that each is matched again


class RulesError(UsageError):
    """A rules file that cannot be used (not JSON, an unknown field, a bad regular expression)."""


@dataclass(frozen=True)
class Rule:
    category: str
    event: str | None
    name: re.Pattern[str] | None
    module: re.Pattern[str] | None

    def matches(self, event: str, name: str, module_path: str) -> bool:
        return ((self.event is None or self.event == event)
                and (self.name is None or self.name.search(name) is not None)
                and (self.module is None or self.module.search(module_path) is not None))


@dataclass(frozen=True)
class RuleSet:
    categories: tuple[str, ...]
    rules: tuple[Rule, ...]
    digest: str  # sha256 of the canonical JSON of the rules, first 16 hex digits
    _seen: dict[tuple[str, str, str], str] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def categorise(self, event: str, name: str, module_path: str = "") -> str:
        key = (event, name, module_path)
        found = self._seen.get(key)
        if found is None:
            found = next((r.category for r in self.rules if r.matches(event, name, module_path)), "other")
            if len(self._seen) < MAX_CACHED:
                self._seen[key] = found
        return found


def parse_rules(text: str, source: str = "rules") -> RuleSet:
    try:
        data = json.loads(text)
        categories = tuple(data["categories"])
        raw = data["rules"]
        rules = []
        for i, r in enumerate(raw):
            unknown = set(r) - {"category", "event", "name", "module"}
            if unknown or r.get("category") not in categories:
                raise RulesError(f"{source}: rule {i + 1}: " + (f"unknown field {sorted(unknown)[0]!r}" if unknown
                                 else f"category {r.get('category')!r} is not one of {', '.join(categories)}"))
            rules.append(Rule(r["category"], r.get("event"), _compile(r.get("name"), source, i),
                              _compile(r.get("module"), source, i)))
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise RulesError(f"{source}: not a rules file ({type(exc).__name__}: {exc})") from None
    canonical = json.dumps({"categories": categories, "rules": raw}, sort_keys=True, separators=(",", ":"))
    return RuleSet(categories, tuple(rules), hashlib.sha256(canonical.encode()).hexdigest()[:16])


def _compile(pattern: str | None, source: str, index: int) -> re.Pattern[str] | None:
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise RulesError(f"{source}: rule {index + 1}: bad regular expression {pattern!r} ({exc})") from None


@lru_cache(maxsize=8)
def load_rules(path: str | None = None) -> RuleSet:
    """The rules shipped with dsv4ctl, or a user's file (`--rules FILE`)."""
    file = Path(path) if path else RULES_FILE
    try:
        return parse_rules(file.read_text(encoding="utf-8"), str(file))
    except OSError as exc:
        raise RulesError(f"{file}: cannot be read ({exc.strerror or exc})") from None


def module_class(name: str) -> str:
    """`nn.Module: DeepseekV4MoE_3` -> `DeepseekV4MoE` (the class, without the instance suffix)."""
    name = name.removeprefix("nn.Module: ")
    head, _, tail = name.rpartition("_")
    return head if head and tail.isdigit() else name
