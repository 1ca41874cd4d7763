#!/usr/bin/env python3
"""Score the verdict on folders of labelled real logs: the generalization protocol of issue 21.

    python benchmarks/verdict_corpus.py DIR [DIR...] [--markdown] [--json] [--quiet] [--text-rules]

A case is any folder (at any depth under DIR) holding `raw.log` and `meta.json`; an optional `sacct.txt` (or
`raw.sacct`) beside them is the scheduler's record. The labels are those of `../shared/corpus/` (`labels.
expected_class`, `acceptable_classes`, `root_cause_substring`, `root_cause_alternatives`,
`forbidden_blocker_substrings`, `must_not_pass`), scored exactly as `../shared/corpus/score.py` scores them:

  class right  the status is the expected class or an acceptable one ('oom' is scored as 'crashed')
  root right   with a root-cause substring: first_blocker.message (or, failing that, the raw line its `line`
               points at) holds it or an alternative, ignoring case; without one: no first blocker, or one that
               holds none of the forbidden substrings
  tool error   the judge raised, or the verdict is not JSON-serialisable
  coherent FP  a case labelled `coherent` that the verdict calls anything else; of them, the false alarms are
               those called degenerate, nonfinite or an error (`incomplete` is an answer the judge did not read)

`--text-rules` also runs the text rules alone on every coherent-labelled case: on each output the scanner read, or
on the whole excerpt when it read none (an answer pasted as plain text), and prints what they flagged and the
false-positive rate.

It judges in-process (`dsv4ctl.judge`), one parse per case, so hundreds of cases take seconds. The last line is
the totals; `--json` prints one object per case and the totals as JSON lines instead.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dsv4ctl.judge.files import judge_files  # noqa: E402
from dsv4ctl.judge.scan import parse_file  # noqa: E402
from dsv4ctl.judge.textrules import text_problems  # noqa: E402

SACCT_NAMES = ("sacct.txt", "raw.sacct")


def find_cases(root: Path) -> list[Path]:
    """Every case folder under root (root itself included), sorted by path."""
    found = []
    for folder, _dirs, names in os.walk(root):
        if "raw.log" in names and "meta.json" in names:
            found.append(Path(folder))
    return sorted(found)


def blocker_text(verdict: dict, log: Path) -> str:
    fb = verdict.get("first_blocker") or {}
    text = fb.get("message") or ""
    if not text and isinstance(fb.get("line"), int):
        with open(log, encoding="utf-8", errors="replace") as f:
            for i, line in enumerate(f, 1):
                if i == fb["line"]:
                    return line
    return text


def score_case(case: Path) -> dict:
    meta = json.loads((case / "meta.json").read_text(encoding="utf-8"))
    labels = meta["labels"]
    log = case / "raw.log"
    sacct = next((case / n for n in SACCT_NAMES if (case / n).is_file()), None)
    t0 = time.monotonic()
    error, verdict = None, {}
    try:
        verdict = judge_files(log, sacct).to_json()
        json.dumps(verdict)
    except Exception as exc:  # noqa: BLE001 - a tool error is a figure here, not a crash of the scorer
        error = f"{type(exc).__name__}: {exc}"
        if os.environ.get("VERDICT_CORPUS_DEBUG"):
            traceback.print_exc()
        verdict = {}
    seconds = time.monotonic() - t0
    status = verdict.get("status")
    expected = labels["expected_class"]
    allowed = {expected, *labels.get("acceptable_classes", [])}
    if "oom" in allowed:
        allowed.add("crashed")
    text = blocker_text(verdict, log) if verdict else ""
    want = labels.get("root_cause_substring")
    if want:
        root_ok = any(s.lower() in text.lower() for s in [want, *labels.get("root_cause_alternatives", [])])
    else:
        fb = verdict.get("first_blocker")
        root_ok = not fb or not any(s.lower() in text.lower() for s in labels.get("forbidden_blocker_substrings", []))
    return {
        "case": str(case), "expected": expected, "status": status, "class_ok": status in allowed,
        "root_ok": bool(root_ok) and error is None, "passed": bool(verdict.get("passed")),
        "must_not_pass": bool(labels.get("must_not_pass")), "coherent_label": expected == "coherent",
        "error": error, "seconds": round(seconds, 3), "blocker": text.strip()[:160],
        "family": (verdict.get("first_blocker") or {}).get("family"),
    }


def totals(rows: list[dict]) -> dict:
    coherent = [r for r in rows if r["coherent_label"]]
    return {
        "cases": len(rows),
        "passes_on_must_not_pass": sum(r["must_not_pass"] and r["passed"] for r in rows),
        "class_right": sum(r["class_ok"] for r in rows),
        "root_cause_right": sum(r["root_ok"] for r in rows),
        "tool_errors": sum(r["error"] is not None for r in rows),
        "coherent_cases": len(coherent),
        "coherent_false_positives": sum(r["status"] != "coherent" for r in coherent),
        # A coherent answer judged degenerate, nonfinite or an error: a false alarm of the rules. `incomplete` (a
        # plain answer with no shape the judge reads as an output) is not one: it never passes, and blames nothing.
        "coherent_false_alarms": sum(r["status"] not in ("coherent", "incomplete") for r in coherent),
        "seconds": round(sum(r["seconds"] for r in rows), 2),
    }


def totals_line(t: dict) -> str:
    fp = (f", coherent false positives: {t['coherent_false_positives']}/{t['coherent_cases']} (false alarms, "
          f"not incomplete: {t['coherent_false_alarms']})" if t["coherent_cases"] else "")
    return (f"real logs: {t['cases']} cases, passes on must-not-pass: {t['passes_on_must_not_pass']}, "
            f"class right: {t['class_right']}/{t['cases']}, root cause right: {t['root_cause_right']}/{t['cases']}, "
            f"tool errors: {t['tool_errors']}{fp}")


def text_rule_alarms(cases: list[Path]) -> tuple[int, list[tuple[str, str]]]:
    """(texts judged, [(case, problem)]) for the text rules alone on the coherent-labelled cases."""
    judged, alarms = 0, []
    for case in cases:
        meta = json.loads((case / "meta.json").read_text(encoding="utf-8"))
        if meta["labels"]["expected_class"] != "coherent":
            continue
        texts = [r.output for r in parse_file(str(case / "raw.log")).requests if r.output is not None]
        if not texts:
            texts = [(case / "raw.log").read_text(encoding="utf-8", errors="replace")]
        for text in texts:
            judged += 1
            problems = text_problems(text, 8)
            if problems:
                alarms.append((case.name, problems[0]))
    return judged, alarms


def main(argv: list[str]) -> int:
    flags = {a for a in argv if a.startswith("--")}
    roots = [Path(a) for a in argv if not a.startswith("--")]
    if not roots or "--help" in flags or "-h" in argv:
        print(__doc__.strip())
        return 2
    missing = [str(r) for r in roots if not r.is_dir()]
    if missing:
        print(f"error: not a folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    cases = [c for r in roots for c in find_cases(r)]
    if not cases:
        print(f"error: no case (raw.log + meta.json) under {', '.join(map(str, roots))}", file=sys.stderr)
        return 2
    rows = [score_case(c) for c in cases]
    t = totals(rows)
    mark = lambda ok: "yes" if ok else "NO"  # noqa: E731
    if "--json" in flags:
        for r in rows:
            print(json.dumps(r))
        print(json.dumps({"totals": t}))
        return 0
    if "--markdown" in flags:
        print("| case | expected | status | class | root cause | s |\n|---|---|---|---|---|---|")
    common = os.path.commonpath([str(r.resolve()) for r in roots]) if len(roots) > 1 else str(roots[0])
    for r in rows:
        name = os.path.relpath(Path(r["case"]).resolve(), common) if len(roots) > 1 else os.path.relpath(r["case"], common)
        if "--markdown" in flags:
            print(f"| {name} | {r['expected']} | {r['status']} | {mark(r['class_ok'])} | {mark(r['root_ok'])} "
                  f"| {r['seconds']:.2f} |")
        elif "--quiet" not in flags or not (r["class_ok"] and r["root_ok"]):
            print(f"{name:48s} expected={r['expected']:12s} status={str(r['status']):12s} "
                  f"class={mark(r['class_ok']):3s} root={mark(r['root_ok']):3s} {r['error'] or ''}| {r['blocker'][:100]}")
    print(totals_line(t))
    if "--text-rules" in flags:
        judged, alarms = text_rule_alarms(cases)
        for name, problem in alarms:
            print(f"text rules flagged {name}: {problem[:120]}")
        rate = f"{len(alarms) / judged:.1%}" if judged else "n/a"
        print(f"text rules on coherent outputs: {len(alarms)} flagged of {judged} ({rate})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
