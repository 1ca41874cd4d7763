"""The numeric compare of two alignment captures (issue 15): per layer cosine, max abs and relative L2; top-k
overlap; the first greedy divergence under vLLM's logprob rule; both perplexities; the first rung out of
tolerance.

The same code runs in the job (reference: hf, both captures side by side) and in dsv4ctl when a run is judged
(any reference, including `run:ID`), so the log's verdict and the stored one cannot disagree. numpy is imported
inside the functions (the CLI's cold path stays free of it); the safetensors files are read here with numpy, not
the safetensors package, and every file is treated as hostile: a capture that cannot be read or does not fit the
other side is `not compared`, never `aligned`.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .rungs import CaptureError  # noqa: F401 - re-exported

MAX_HEADER_BYTES = 64 * 1024 * 1024
MAX_CAPTURE_BYTES = 8 * 1024**3  # 61 layers x 8 prompts x 32 positions x 7168 x 4 bytes is 0.45 GB
MAX_META_BYTES = 256 * 1024 * 1024
DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2"}


@dataclass
class Capture:
    meta: dict[str, Any]
    tensors: dict[str, Any]  # name -> numpy array
    where: str


def read_safetensors(path: Path) -> dict[str, Any]:
    """{name: float array} of a safetensors file: 8-byte little-endian header length, JSON header, raw data."""
    import numpy as np

    try:
        size = path.stat().st_size
        if size > MAX_CAPTURE_BYTES:
            raise CaptureError(f"{path}: {size} bytes, more than a bounded capture holds")
        blob = path.read_bytes()
    except OSError as exc:
        raise CaptureError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(blob) < 8:
        raise CaptureError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > min(MAX_HEADER_BYTES, len(blob) - 8):
        raise CaptureError(f"{path}: header length {n} does not fit the file")
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise CaptureError(f"{path}: the header is not JSON") from None
    if not isinstance(header, dict):
        raise CaptureError(f"{path}: the header is not a JSON object")
    data = memoryview(blob)[8 + n:]
    return {name: _tensor(path, name, entry, data, np) for name, entry in header.items() if name != "__metadata__"}


def _tensor(path: Path, name: str, entry: Any, data: memoryview, np) -> Any:
    try:
        dtype, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
    except (TypeError, KeyError, ValueError):
        raise CaptureError(f"{path}: tensor {name!r} has no dtype/shape/data_offsets") from None
    if dtype not in DTYPES or not isinstance(shape, list) or len(shape) > 8:
        raise CaptureError(f"{path}: tensor {name!r} has dtype {dtype!r} or shape {shape!r} a capture never has")
    if not all(type(d) is int and 0 <= d < 2**40 for d in shape) or not all(type(o) is int for o in (begin, end)):
        raise CaptureError(f"{path}: tensor {name!r} has a bad shape or offsets")
    count = math.prod(shape)
    item = np.dtype(DTYPES[dtype]).itemsize
    if not 0 <= begin <= end <= len(data) or end - begin != count * item:
        raise CaptureError(f"{path}: tensor {name!r} does not fit its bytes ({begin}..{end} for {shape} {dtype})")
    return np.frombuffer(data[begin:end], dtype=DTYPES[dtype]).reshape(shape).astype(np.float64)


def read_capture(directory: Path, side: str) -> Capture:
    """One side's capture: `<side>.json` (prompts, ids, top-k, perplexity, rungs) and `<side>.safetensors`."""
    meta_path = Path(directory) / f"{side}.json"
    try:
        if meta_path.stat().st_size > MAX_META_BYTES:
            raise CaptureError(f"{meta_path}: too large for a capture's metadata")
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CaptureError(f"cannot read {meta_path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise CaptureError(f"{meta_path}: not JSON") from None
    _check_meta(meta, meta_path)
    return Capture(meta, read_safetensors(Path(directory) / f"{side}.safetensors"), str(meta_path))


def _ints(value: Any) -> bool:
    return isinstance(value, list) and all(type(v) is int for v in value)


def _top_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(p, list) and len(p) == 2 and type(p[0]) is int and isinstance(p[1], (int, float))
        and not isinstance(p[1], bool) for p in value)


def _check_meta(meta: Any, where: Path) -> None:
    """The shape every later step relies on; a capture that lacks it is refused here, once."""
    if not isinstance(meta, dict) or not isinstance(meta.get("prompts"), list) or not meta["prompts"]:
        raise CaptureError(f"{where}: no prompts")
    if not _ints(meta.get("layers")):
        raise CaptureError(f"{where}: `layers` is not a list of layer indices")
    for i, p in enumerate(meta["prompts"]):
        ok = (isinstance(p, dict) and _ints(p.get("token_ids")) and _ints(p.get("positions"))
              and _ints(p.get("greedy_ids")) and _top_list(p.get("next_top"))
              and isinstance(p.get("greedy_top"), list) and all(_top_list(s) for s in p["greedy_top"]))
        if not ok:
            raise CaptureError(f"{where}: prompt {i} lacks token_ids, positions, greedy ids or top-k lists")
        n, positions = len(p["token_ids"]), p["positions"]
        if not n or positions != sorted(set(positions)) or not positions or not 0 <= positions[0] <= positions[-1] < n:
            raise CaptureError(f"{where}: prompt {i} keeps positions that are not its own")
        if not p["greedy_ids"] or len(p["greedy_top"]) != len(p["greedy_ids"]) or not p["next_top"]:
            raise CaptureError(f"{where}: prompt {i} has no greedy continuation with a top-k per token")
    ppl = meta.get("perplexity")
    if not isinstance(ppl, dict) or not isinstance(ppl.get("ppl"), (int, float)) or isinstance(ppl["ppl"], bool):
        raise CaptureError(f"{where}: no perplexity")


def compare_dirs(engine_dir: Path, engine_side: str, reference_dir: Path, reference_side: str,
                 align: dict[str, Any]) -> dict[str, Any]:
    """Read both captures and compare them; a capture that cannot be read gives `not compared`, not aligned."""
    try:
        engine = read_capture(Path(engine_dir), engine_side)
        reference = read_capture(Path(reference_dir), reference_side)
        return compare_captures(engine, reference, align)
    except (CaptureError, ValueError, TypeError, KeyError, IndexError, OverflowError, MemoryError) as exc:
        message = str(exc) if isinstance(exc, CaptureError) else f"{type(exc).__name__}: {exc}"
        return not_compared(message[:500])


def not_compared(message: str) -> dict[str, Any]:
    return {"aligned": False, "compared": False, "verdict": f"not compared: {message}", "first": None, "rungs": [],
            "metrics": {}}


def compare_captures(engine: Capture, reference: Capture, align: dict[str, Any]) -> dict[str, Any]:
    """The rungs of two captures; CaptureError when they cannot be compared, naming a model difference (the
    `model` each capture records) when that is why."""
    try:
        return _compare(engine, reference, align)
    except CaptureError as exc:
        models = engine.meta.get("model"), reference.meta.get("model")
        if models[0] != models[1] and all(isinstance(m, str) for m in models):
            raise CaptureError(f"{exc}: the captures are of different models (engine {models[0][:200]}, "
                               f"reference {models[1][:200]})") from None
        raise


def _compare(engine: Capture, reference: Capture, align: dict[str, Any]) -> dict[str, Any]:
    from .rungs import greedy_rung, layer_rungs, logits_rung, lower_rungs, perplexity_rung

    tol = align["tolerances"]
    e_prompts, r_prompts = engine.meta["prompts"], reference.meta["prompts"]
    if [p["token_ids"] for p in e_prompts] != [p["token_ids"] for p in r_prompts]:
        raise CaptureError(f"{engine.where} and {reference.where} are not captures of the same prompt token ids")
    rungs = lower_rungs(engine.meta.get("rungs"), tol) if align.get("rungs", True) else []
    rungs += layer_rungs(engine, reference, align.get("layers"), tol)
    rungs.append(logits_rung(e_prompts, r_prompts, tol))
    rungs.append(greedy_rung(e_prompts, r_prompts, tol))
    rungs.append(perplexity_rung(engine.meta["perplexity"], reference.meta["perplexity"], tol))
    first = next((r for r in rungs if not r["ok"]), None)
    cosines = [r["cosine"] for r in rungs if r["kind"] in ("layer", "norm")]
    metrics = {"align_min_cosine": min(cosines) if cosines and None not in cosines else None,
               "ppl_engine": rungs[-1]["engine"], "ppl_reference": rungs[-1]["reference"],
               "ppl_ratio": rungs[-1]["ratio"]}
    return {"aligned": first is None, "verdict": "aligned" if first is None else f"diverged at {first['name']}",
            "first": first, "rungs": rungs, "metrics": {k: v for k, v in metrics.items() if _finite(v)}}


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
