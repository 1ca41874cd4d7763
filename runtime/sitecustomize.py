"""The gfx936 compatibility shim (report §9.1), loaded by every Python process whose PYTHONPATH starts with
runtime/ — the probe and vLLM's spawned workers alike. Kept cheap: it imports nothing heavy at start-up."""

try:
    from dsv4rt import shim as _shim

    _shim.install()
except Exception as _exc:  # a broken shim must never stop an unrelated Python process
    import sys as _sys

    print(f"dsv4 shim: not installed: {_exc!r}", file=_sys.stderr)
