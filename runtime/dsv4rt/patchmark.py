"""Idempotent patches: a mark on the patched object says which patches it already has. A leaf, so the shim and
the patch modules it registers (moe_patch) can share it without importing each other."""

from __future__ import annotations

MARK = "__dsv4_shim__"


def mark(target: object, name: str) -> bool:
    """True the first time `name` is applied to `target` (idempotence)."""
    done = getattr(target, MARK, None)
    if done is None:
        done = set()
        try:
            setattr(target, MARK, done)
        except (AttributeError, TypeError):
            return False
    if name in done:
        return False
    done.add(name)
    return True
