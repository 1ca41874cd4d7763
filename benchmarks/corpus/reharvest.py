#!/usr/bin/env python3
"""Re-harvest one case of a committed manifest from the thread text it was cut from (no log text is committed).

    python3 benchmarks/corpus/reharvest.py cut KIND CASE CHUNK_FILE [CHUNK_FILE ...]
    python3 benchmarks/corpus/reharvest.py todo KIND [--from N --to M]
    python3 benchmarks/corpus/reharvest.py pick KIND CASE CHUNK_FILE LINES [--unquote]

KIND is `harvest` (manifest.json: failing logs, pinned by first/last line and whole-excerpt hashes), `coherent`
(coherent-manifest.json) or `garbage` (garbage-manifest.json), both pinned by the whole text's hash. CHUNK_FILE holds
the thread text as the `issues` search returned it (one chunk, or two of the same turn in order). `cut` looks for the
excerpt in it: every window of lines, with markdown fences and surrounding blank lines dropped, whose hash is the
manifest's; it writes corpus-local/<KIND>/<split>/<case>/raw.log and meta.json and prints `exact`, or prints
`not found` and writes nothing (the caller may then cut by hand: `--inexact` writes the closest window and marks it
`reharvest.exact: false` in meta.json). `todo` lists the cases not yet on disk. `pick` takes lines of the chunk
that are not next to each other (LINES: 0-based, `7-11,34`; `--unquote` drops a line's enclosing single backticks),
joined by newlines, with and without a final newline, and writes them only when the manifest's hash matches.
"""
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MANIFESTS = {"harvest": "manifest.json", "coherent": "coherent-manifest.json", "garbage": "garbage-manifest.json",
             "coherent2": "coherent2-manifest.json", "harvest3": "heldout3-manifest.json",
             "harvest4": "tuning4-manifest.json", "harvest5": "tuning5-manifest.json",
             "coherent3": "coherent3-manifest.json", "coherent4": "coherent4-manifest.json",
             "coherent5": "coherent5-manifest.json", "coherent6": "coherent6-manifest.json"}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def cases(kind: str) -> list[dict]:
    return json.load(open(os.path.join(HERE, MANIFESTS[kind]), encoding="utf-8"))["cases"]


def name_of(entry: dict) -> str:
    return entry.get("case") or entry["name"]


def case_dir(kind: str, entry: dict) -> str:
    return os.path.join(ROOT, "corpus-local", kind, entry["split"], name_of(entry))


def pin(kind: str, entry: dict) -> tuple[str, int]:
    """(whole-text sha256, number of lines) the excerpt must have."""
    if kind.startswith("harvest"):
        return entry["excerpt"]["sha256"], entry["excerpt"]["lines"]
    return entry["raw_sha256"], entry["raw_lines"]


def candidates(lines: list[str], n: int):
    """Texts of n lines cut from the chunk: contiguous windows, each also without fence and blank lines, with and
    without a final newline, with trailing spaces kept and stripped."""
    plain = [ln.rstrip("\r") for ln in lines]
    variants = [plain, [ln for ln in plain if not ln.lstrip().startswith("```")],
                [ln for ln in plain if ln.strip() and not ln.lstrip().startswith("```")]]
    for src in variants:
        for stripped in (False, True):
            rows = [ln.rstrip() for ln in src] if stripped else src
            for i in range(len(rows)):
                for width in {n, n - 1, n + 1} if n > 1 else {1}:
                    window = rows[i:i + width]
                    if len(window) != width or not window:
                        continue
                    body = "\n".join(window)
                    yield body
                    yield body + "\n"


def sub_line_candidates(lines: list[str]):
    """A one-line text may be part of a line (`Generated text: '...'`): every quoted or post-colon piece."""
    for ln in lines:
        s = ln.rstrip("\r")
        for q in ("'", '"'):
            parts = s.split(q)
            for k in range(1, len(parts), 2):
                yield parts[k]
        if ":" in s:
            yield s.split(":", 1)[1].strip()


def meta_for(kind: str, entry: dict, exact: bool) -> dict:
    if kind.startswith("harvest"):
        meta = {"case": entry["case"], "split": entry["split"], "source": entry["source"],
                "excerpt": {k: entry["excerpt"][k] for k in ("chunks", "partial_edge_lines_dropped", "query")},
                "labels": entry["labels"], "label_confidence": entry["label_confidence"],
                "labeled_before_running_tool": True}
    else:
        expected = entry.get("expected_class", "coherent")
        meta = {"case": entry["name"], "split": entry["split"], "source": entry["source"], "shape": entry["shape"],
                "language": entry.get("language"), "features": entry.get("features", []),
                "labels": {"must_not_pass": expected != "coherent", "expected_class": expected,
                           "acceptable_classes": entry.get("acceptable_classes", []),
                           "root_cause_substring": None, "forbidden_blocker_substrings": []}}
    meta["reharvest"] = {"exact": exact}
    return meta


def write(kind: str, entry: dict, text: str, exact: bool) -> None:
    d = case_dir(kind, entry)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "raw.log"), "w", encoding="utf-8", newline="") as f:
        f.write(text)
    with open(os.path.join(d, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta_for(kind, entry, exact), f, indent=1, ensure_ascii=False)
        f.write("\n")


def cut(kind: str, name: str, files: list[str], inexact: bool) -> int:
    entry = next((e for e in cases(kind) if name_of(e) == name), None)
    if entry is None:
        print(f"error: no case {name!r} in {MANIFESTS[kind]}", file=sys.stderr)
        return 2
    text = "\n".join(open(p, encoding="utf-8").read().rstrip("\n") for p in files)
    lines = text.split("\n")
    want, n = pin(kind, entry)
    found = next((c for c in candidates(lines, n) if sha(c) == want), None)
    if found is None and n == 1:
        found = next((c for c in sub_line_candidates(lines) for c in (c, c + "\n") if sha(c) == want), None)
    if found is not None:
        write(kind, entry, found, True)
        print(f"exact    {name}")
        return 0
    if inexact:
        body = "\n".join(ln.rstrip("\r") for ln in lines if not ln.lstrip().startswith("```")).strip("\n") + "\n"
        write(kind, entry, body, False)
        print(f"inexact  {name} (the whole chunk without fences was written; trim it by hand)")
        return 0
    print(f"not found {name} ({n} lines pinned; no window of the chunk has the manifest's hash)")
    return 1


def pick(kind: str, name: str, path: str, spec: str, unquote: bool) -> int:
    entry = next((e for e in cases(kind) if name_of(e) == name), None)
    if entry is None:
        print(f"error: no case {name!r} in {MANIFESTS[kind]}", file=sys.stderr)
        return 2
    lines = open(path, encoding="utf-8").read().split("\n")
    chosen = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        chosen += lines[int(lo):int(hi or lo) + 1]
    if unquote:
        chosen = [ln[1:-1] if len(ln) > 1 and ln.startswith("`") and ln.endswith("`") else ln for ln in chosen]
    want, _ = pin(kind, entry)
    body = "\n".join(chosen)
    for text in (body, body + "\n"):
        if sha(text) == want:
            write(kind, entry, text, True)
            print(f"exact    {name}")
            return 0
    print(f"not found {name} (the lines picked do not have the manifest's hash)")
    return 1


def todo(kind: str, lo: int, hi: int) -> None:
    for k, e in enumerate(cases(kind), 1):
        if lo <= k <= hi and not os.path.isfile(os.path.join(case_dir(kind, e), "raw.log")):
            q = e["excerpt"]["query"] if kind.startswith("harvest") else e.get("query")
            print(f"{k}\t{name_of(e)}\t{e['source']['url']}\t{e['source'].get('turn')}\t{q}")


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "cut":
        inexact = "--inexact" in argv
        args = [a for a in argv[1:] if a != "--inexact"]
        return cut(args[0], args[1], args[2:], inexact)
    if len(argv) >= 5 and argv[0] == "pick":
        args = [a for a in argv[1:] if a != "--unquote"]
        return pick(args[0], args[1], args[2], args[3], "--unquote" in argv)
    if len(argv) >= 2 and argv[0] == "todo":
        lo = int(argv[argv.index("--from") + 1]) if "--from" in argv else 1
        hi = int(argv[argv.index("--to") + 1]) if "--to" in argv else 10 ** 6
        todo(argv[1], lo, hi)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
