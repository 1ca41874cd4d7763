#!/usr/bin/env python3
"""Build or check the manifest of the harvested verdict corpus (no log text is stored here).

    python3 benchmarks/corpus/manifest.py build [HARVEST_DIR]   # write manifest.json from the case folders
    python3 benchmarks/corpus/manifest.py check [HARVEST_DIR]   # re-harvested folders match the manifest?
    python3 benchmarks/corpus/manifest.py fresh harvest3|harvest4|harvest5|coherent3|coherent4   # a fresh set

HARVEST_DIR defaults to corpus-local/harvest (git-ignored: the raw.log files are third-party text). Each case lives
in HARVEST_DIR/<split>/<case>/ with raw.log and meta.json.
"""
import hashlib, json, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MANIFEST = os.path.join(HERE, "manifest.json")
SPLITS = ("tuning", "heldout")


def sha(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def split_of(url):
    """The split rule, fixed before any verdict was seen: by thread URL, about half held out."""
    return "heldout" if int(sha(url)[:8], 16) % 100 < 50 else "tuning"


def entry(case_dir):
    meta = json.load(open(os.path.join(case_dir, "meta.json"), encoding="utf-8"))
    raw = open(os.path.join(case_dir, "raw.log"), encoding="utf-8").read()
    lines = raw.splitlines()
    src = meta["source"]
    ex = meta["excerpt"]
    return {
        "case": meta["case"], "split": meta["split"],
        "source": {k: src[k] for k in ("repo", "kind", "number", "url", "title", "turn")},
        "excerpt": {"first_line_sha256": sha(lines[0]), "last_line_sha256": sha(lines[-1]), "lines": len(lines),
                    "bytes": len(raw.encode("utf-8")), "sha256": sha(raw), "chunks": ex["chunks"],
                    "partial_edge_lines_dropped": ex["partial_edge_lines_dropped"], "query": ex.get("query")},
        "labels": meta["labels"], "label_confidence": meta["label_confidence"],
    }


def walk(root):
    for split in SPLITS:
        d = os.path.join(root, split)
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if os.path.isfile(os.path.join(d, name, "meta.json")):
                yield split, os.path.join(d, name)


def build(root):
    cases = []
    for split, d in walk(root):
        e = entry(d)
        if e["split"] != split or split_of(e["source"]["url"]) != split:
            sys.exit(f"{e['case']}: split mismatch")
        cases.append(e)
    cases.sort(key=lambda e: e["case"])
    doc = {"about": "Manifest of real job logs harvested from public GitHub threads to measure the verdict's "
                    "generalization (issue 21). No log text: each case names its thread and turn and pins the excerpt "
                    "by hashes. See README.md.",
           "split_rule": "heldout iff int(sha256(thread_url)[:8], 16) % 100 < 50, else tuning",
           "cases": cases}
    with open(MANIFEST, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False); f.write("\n")
    by = {}
    for e in cases:
        by[e["split"]] = by.get(e["split"], 0) + 1
    print(f"{len(cases)} cases, {len({e['source']['url'] for e in cases})} threads, {by}")


def check(root):
    want = {e["case"]: e for e in json.load(open(MANIFEST, encoding="utf-8"))["cases"]}
    have = {os.path.basename(d): entry(d) for _, d in walk(root)}
    bad = 0
    for name, e in sorted(want.items()):
        h = have.get(name)
        if h is None:
            print(f"missing  {name}"); bad += 1
        elif h["excerpt"]["sha256"] != e["excerpt"]["sha256"]:
            print(f"differs  {name} (first line {'same' if h['excerpt']['first_line_sha256'] == e['excerpt']['first_line_sha256'] else 'differs'}, "
                  f"last line {'same' if h['excerpt']['last_line_sha256'] == e['excerpt']['last_line_sha256'] else 'differs'})"); bad += 1
    print(f"{len(want) - bad}/{len(want)} cases match the manifest")
    return bad == 0


FRESH = {  # sets harvested after the rules had been tuned on the first held-out set: (manifest, what, split)
    "harvest3": ("heldout3-manifest.json", "failing and clean job logs", "heldout"),
    "harvest4": ("tuning4-manifest.json", "failing and clean job logs", "tuning"),
    "harvest5": ("tuning5-manifest.json", "failing and clean job logs", "tuning"),
    "coherent3": ("coherent3-manifest.json", "coherent model outputs", "heldout"),
    "coherent4": ("coherent4-manifest.json", "coherent model outputs", "heldout"),
    "coherent5": ("coherent5-manifest.json", "coherent model outputs", "heldout"),
    "coherent6": ("coherent6-manifest.json", "coherent model outputs", "heldout"),
}


def fresh(kind):
    """Write the manifest of corpus-local/<kind>/heldout/: every case held out, pinned by hashes, no text."""
    name, what, split = FRESH[kind]
    root = os.path.join(ROOT, "corpus-local", kind, split)
    cases, urls = [], set()
    for case in sorted(os.listdir(root)):
        d = os.path.join(root, case)
        if not os.path.isfile(os.path.join(d, "meta.json")):
            continue
        meta = json.load(open(os.path.join(d, "meta.json"), encoding="utf-8"))
        raw = open(os.path.join(d, "raw.log"), encoding="utf-8").read()
        src = {k: meta["source"].get(k) for k in ("repo", "kind", "number", "url", "title", "turn")}
        urls.add(src["url"])
        if kind.startswith("harvest"):
            e = entry(d)
            e["split"] = split
        else:
            e = {"name": case, "split": split, **{k: meta.get(k) for k in ("shape", "language", "features",
                                                                               "outputs")},
                 "source": src, "raw_sha256": sha(raw), "raw_bytes": len(raw.encode("utf-8")),
                 "raw_lines": len(raw.splitlines()), "query": meta.get("query"), "labels": meta["labels"]}
        cases.append(e)
    role = "a fresh held-out set" if split == "heldout" else "a fresh tuning set"
    doc = {"what": f"{what} from public threads ({role}, issue 21): verbatim text kept outside the repo "
                   f"under corpus-local/{kind}/{split}/<case>/raw.log (third-party, not committed)",
           "split_rule": f"all {split}: threads never used by the team or any earlier harvest (checked against every "
                         "committed manifest), labelled by harvesters who never read dsv4ctl/ nor ran any scorer",
           "count": len(cases), "threads": len(urls), "cases": cases}
    with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False); f.write("\n")
    print(f"{name}: {len(cases)} cases, {len(urls)} threads")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else "build"
    root = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "corpus-local", "harvest")
    if cmd == "build":
        build(root)
    elif cmd == "fresh":
        fresh(sys.argv[2])
    elif cmd == "check":
        sys.exit(0 if check(root) else 1)
    else:
        sys.exit(__doc__)
