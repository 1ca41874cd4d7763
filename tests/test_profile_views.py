"""Profiles where a user meets them besides `dsv4ctl profile` (issue 23): `compare --profile`, `show RUN`, the
campaign report's stacked bars, and a profile of a failed run saying so. The runs are real store rows (SQLite)
with verdicts; their profiles are the breakdowns of the GPU-shaped fixtures (tests/fixtures/profiles) stored
with save_profile. The candidate's are the baseline's with the shared expert grown by SHARED_GROWTH_US."""

from __future__ import annotations

import copy
import json
import random
import shutil
import subprocess

import pytest

from dsv4ctl.cli import main
from dsv4ctl.profile.breakdown import read_breakdown
from dsv4ctl.profile.store import save_profile
from dsv4ctl.store import open_store

from .conftest import FIXTURES
from .test_compare import add_side, sample

PROFILES = FIXTURES / "profiles"
RANKS = ("cuda_tp2_rank0.pt.trace.json.gz", "cuda_tp2_rank1.pt.trace.json.gz")
SHARED_GROWTH_US = 80.0  # per rank: over the gate's 50 us and 5% floors, the other categories move by noise
SHARED_MODULES = ("DeepseekV4MLP", "MergedColumnParallelLinear", "DeepseekV4MoE", "DeepseekV4DecoderLayer",
                  "DeepseekV4ForCausalLM")


def _ranks(rng: random.Random, grow: float) -> list:
    """One run's two ranks: the fixtures' breakdowns, a little noise (seeded), the shared expert grown by `grow`."""
    out = []
    for name in RANKS:
        b = copy.deepcopy(read_breakdown(PROFILES / name))
        noise = {k: abs(rng.gauss(0, 0.5)) for k in b.categories}
        b.categories = {k: v + noise[k] for k, v in b.categories.items()}
        b.kernel_us += sum(noise.values()) + grow
        b.categories["moe_shared"] += grow
        for m in SHARED_MODULES:
            b.modules[m] += grow
        out.append(b)
    return out


def profiled_store(path, n: int = 6, bad: int = 0, profiled: int | None = None):
    """A j17-baseline / q1-off pair of n runs each (the candidate's first `bad` failed their verdict), the first
    `profiled` of each side with stored profiles."""
    store = open_store(path)
    rng = random.Random(23)
    base = add_side(store, "j17-baseline.yaml", sample(rng, 100, 1, n))
    cand = add_side(store, "q1-off.yaml", sample(rng, 104, 1, n), bad=bad)
    for side, grow in ((base, 0.0), (cand, SHARED_GROWTH_US)):
        for run_id in side[:n if profiled is None else profiled]:
            for b in _ranks(rng, grow):
                save_profile(store, run_id, "skip2+3", b)
    return store, base, cand


def run_main(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exited.value.code or 0, out, err


# ---- compare --profile -----------------------------------------------------------------------------------------


def test_compare_profile_names_the_category_and_module_that_grew(tmp_path, capsys):
    db = tmp_path / "r.db"
    profiled_store(db)
    code, out, _ = run_main(capsys, "compare", "j17-baseline", "q1-off", "--db", db, "--json")
    plain = json.loads(out)
    code_p, out, _ = run_main(capsys, "compare", "j17-baseline", "q1-off", "--db", db, "--json", "--profile")
    data = json.loads(out)
    assert code_p == code and {k: v for k, v in data.items() if k != "profile"} == plain  # compare's own, unchanged
    prof = data["profile"]
    assert prof["error"] is None and len(prof["profiled"]["baseline"]) == len(prof["profiled"]["candidate"]) == 6
    rows = {(r["kind"], r["name"]): r for r in prof["rows"]}
    assert all({"name", "base_us", "cand_us", "delta_us", "p", "changed"} <= set(r) for r in prof["rows"])
    shared = rows[("category", "moe_shared")]
    assert shared["changed"] and shared["delta_us"] == pytest.approx(SHARED_GROWTH_US, abs=1.0) and shared["p"] < 0.05
    assert rows[("module", "DeepseekV4MLP")]["changed"]
    assert rows[("total", "(total)")]["delta_us"] == pytest.approx(SHARED_GROWTH_US, abs=3.0)
    assert not rows[("category", "gemm")]["changed"] and not rows[("module", "FusedMoE")]["changed"]
    assert prof["explains"] == ["moe_shared"] and prof["explained_share"] == pytest.approx(1.0, abs=0.05)
    assert prof["changed"] and prof["gate"] == {"alpha": 0.05, "min_relative": 0.05, "min_us": 50.0}


def test_compare_profile_in_the_terminal_and_markdown(tmp_path, capsys):
    db = tmp_path / "r.db"
    profiled_store(db)
    _, out, _ = run_main(capsys, "compare", "j17-baseline", "q1-off", "--db", db, "--profile")
    assert "profiles: 6 baseline and 6 candidate runs that passed" in out
    line = next(l for l in out.splitlines() if "moe_shared" in l)
    assert "+80." in line and "CHANGED" in line
    assert "what explains the delta: moe_shared (100% of the total change)" in out
    _, out, _ = run_main(capsys, "compare", "j17-baseline", "q1-off", "--db", db, "--profile", "--markdown")
    assert "| category | moe_shared |" in out and "CHANGED |" in out
    _, out, _ = run_main(capsys, "compare", "j17-baseline", "q1-off", "--db", db)
    assert "moe_shared" not in out  # only when asked


def test_compare_profile_leaves_failed_and_unprofiled_runs_out_and_says_so(tmp_path, capsys):
    db = tmp_path / "r.db"
    _, base, cand = profiled_store(db, bad=2, profiled=5)
    code, out, _ = run_main(capsys, "compare", "j17-baseline", "q1-off", "--db", db, "--json", "--profile")
    data = json.loads(out)
    assert code == 1 and data["decision"] == "blocked"  # compare's decision: a run failed
    prof = data["profile"]
    assert prof["profiled"] == {"baseline": base[:5], "candidate": cand[2:5]}
    notes = " ".join(prof["notes"])
    assert "2 run(s) that did not pass their verdict are left out" in notes
    assert "1 passed run(s) have no profile traces" in notes
    assert prof["explains"] == ["moe_shared"] and 0.95 < prof["explained_share"] < 1.05


def test_compare_profile_without_profiles_says_why_and_keeps_compare_s_exit(tmp_path, capsys):
    db = tmp_path / "r.db"
    profiled_store(db, profiled=0)
    code, out, _ = run_main(capsys, "compare", "j17-baseline", "q1-off", "--db", db, "--json", "--profile")
    prof = json.loads(out)["profile"]
    assert prof["rows"] == [] and "no profiled run that passed on the baseline and the candidate side" in \
        prof["error"]
    code_t, out, err = run_main(capsys, "compare", "j17-baseline", "q1-off", "--db", db, "--profile")
    assert code_t == code and "no profile A/B" in err and "Traceback" not in err


def test_what_explains_the_delta_leaves_out_categories_that_moved_by_noise():
    """Regression: every category that moved the total's way was listed until their sum reached the total's change,
    so noise of 0.2 us in attention (p ~ 0.6) stood beside the shared expert's 80 us."""
    from dsv4ctl.profile.diff import diff_profiles

    def run(attention: float, grow: float) -> list:
        b = copy.deepcopy(read_breakdown(PROFILES / RANKS[0]))
        b.categories["attention"] += attention
        b.categories["moe_shared"] += grow
        b.kernel_us += attention + grow
        return [b]

    base = [run(0.4 * i, 0.0) for i in range(6)]
    cand = [run(0.4 * i + 0.2, SHARED_GROWTH_US) for i in range(6)]
    d = diff_profiles("A", base, "B", cand)
    attention = next(r for r in d.rows if r.name == "attention")
    assert attention.delta_us == pytest.approx(0.2) and attention.p > 0.05
    assert d.explains == ["moe_shared"] and d.explained_share == pytest.approx(80.0 / 80.2)


# ---- show RUN, and a profile of a failed run ---------------------------------------------------------------------


def _run_with_traces(store, tmp_path, passed: bool) -> int:
    """A run whose job left the TP-2 fixture traces in `<run dir>/profile/` (where the probe puts them)."""
    run_dir = tmp_path / "runs" / "r1"
    (run_dir / "profile").mkdir(parents=True)
    for name in RANKS:
        shutil.copy(PROFILES / name, run_dir / "profile" / name)
    experiment = store.experiment_id("e", "h", "{}", "test")
    run = store.add_run(experiment_id=experiment, token="t1", state="COMPLETED", run_dir=str(run_dir), label="P1")
    store.save_verdict(run, {"status": "coherent" if passed else "degenerate", "passed": passed,
                             "false_green": False, "py_exit": 0, "requests": [], "metrics": {"gen_s": 1.0},
                             "first_blocker": None if passed else {"line": 3, "kind": "degenerate_output"}})
    return run


def test_show_says_where_unread_traces_are_then_draws_the_stored_profile(tmp_path, capsys):
    db = tmp_path / "r.db"
    run = _run_with_traces(open_store(db), tmp_path, passed=True)
    code, out, _ = run_main(capsys, "show", run, "--db", db)
    assert code == 0 and f"not read yet: `dsv4ctl profile {run}` reads and stores them" in out
    _, out, _ = run_main(capsys, "show", run, "--db", db, "--json")
    assert json.loads(out)["profile"] is None  # nothing stored yet: show never reads a trace on the way
    code, out, _ = run_main(capsys, "profile", run, "--db", db, "--json")
    read = json.loads(out)
    assert code == 0 and read["ranks"] == 2
    code, out, _ = run_main(capsys, "show", run, "--db", db, "--json")
    shown = json.loads(out)["profile"]
    assert {k: v for k, v in read.items() if k != "per_rank"} == shown
    expected = sum(read_breakdown(PROFILES / n).kernel_us for n in RANKS) / 2
    assert shown["kernel_us"] == pytest.approx(expected) and shown["verdict"] == {"status": "coherent",
                                                                                   "passed": True}
    _, out, _ = run_main(capsys, "runs", "--db", db, "--json")
    assert json.loads(out)[0]["profile"] == shown  # one run shape: runs --json carries it too
    _, out, err = run_main(capsys, "show", run, "--db", db)
    assert "not read yet" not in out and "profile:" in out and "categories" in out
    assert "top 8 modules (inclusive)" in out and "DeepseekV4MLP" in out and "moe_routed" in out
    assert "top kernels" not in out and "FAILED" not in out + err
    assert out.index("profile:") < out.index("recorded fields") and "profile " not in out.split("recorded fields")[1]


def test_a_profile_of_a_failed_run_says_so_in_profile_and_show(tmp_path, capsys):
    db = tmp_path / "r.db"
    run = _run_with_traces(open_store(db), tmp_path, passed=False)
    code, out, err = run_main(capsys, "profile", run, "--db", db)
    assert code == 0 and "P1 FAILED its verdict (degenerate): this profile is of a broken run" in err
    code, out, _ = run_main(capsys, "profile", run, "--db", db, "--json")
    data = json.loads(out)
    assert data["verdict"] == {"status": "degenerate", "passed": False}
    assert any("FAILED its verdict (degenerate)" in n for n in data["notes"])
    _, out, _ = run_main(capsys, "show", run, "--db", db, "--json")
    assert any("FAILED its verdict" in n for n in json.loads(out)["profile"]["notes"])
    _, out, err = run_main(capsys, "show", run, "--db", db)
    assert "FAILED its verdict (degenerate)" in err


# ---- the campaign report's section -----------------------------------------------------------------------------


def _report_page(tmp_path):
    """A campaign's runs (6 + 6 profiled, the candidate's shared expert grown, one candidate failed its verdict) and
    one run whose traces are not read yet: campaign_profiles' bars and the section rendered by itself."""
    from types import SimpleNamespace

    from dsv4ctl.profile.stored import campaign_profiles
    from dsv4ctl.spec.render import _environment

    store, base, cand = profiled_store(tmp_path / "r.db", bad=1)
    unread = _run_with_traces(store, tmp_path, passed=True)
    bars = campaign_profiles(store, store.runs_by_ids(base + cand + [unread]))
    page = _environment().get_template("report_profile.html.j2").render(data=SimpleNamespace(profiles=bars))
    return store, base, cand, unread, bars, page


def test_campaign_profiles_are_one_bar_per_profiled_run(tmp_path):
    from dsv4ctl.profile.store import load_profiles

    store, base, cand, unread, bars, _ = _report_page(tmp_path)
    assert [b["run"] for b in bars] == base + cand + [unread]
    drawn = bars[:-1]
    for bar in drawn:
        ranks = load_profiles(store, bar["run"])
        mean = {k: sum(r.categories[k] for r in ranks) / len(ranks) for k in ranks[0].categories}
        assert {s["name"]: s["kernel_us"] for s in bar["segments"]} == pytest.approx(
            {k: v for k, v in mean.items() if v > 0}, abs=1e-3)
        assert sum(s["share"] for s in bar["segments"]) == pytest.approx(1.0, abs=1e-5)
        names = [m["name"] for m in bar["modules"]]  # below the wrappers (ForCausalLM, DecoderLayer: ~100%)
        assert names[0] == "DeepseekV4MoE" and "DeepseekV4MLP" in names and "DeepseekV4DecoderLayer" not in names
    assert max(b["width"] for b in drawn) == 1.0
    assert max(b["width"] for b in drawn[:6]) < min(b["width"] for b in drawn[6:])  # the grown candidate is longer
    assert [b["run"] for b in drawn if b["failed"]] == [cand[0]]
    assert bars[-1]["unread"] and bars[-1]["segments"] == [] and "dsv4ctl profile" in bars[-1]["notes"][0]


def test_profile_section_is_self_contained_and_draws_in_chromium(tmp_path):
    import re

    _, base, cand, unread, bars, page = _report_page(tmp_path)
    assert page.count('role="img"') == 12 and page.count('data-category="moe_shared"') == 12
    assert "FAILED its verdict (degenerate)" in page and f"<code>dsv4ctl profile {unread}</code>" in page
    assert not re.search(r"<script|<link|<img|src=|href=|url\(|https?://", page)  # no asset, nothing fetched
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is missing: ./scripts/setup installs it")
    # measure the laid-out bars: each segment's width against its share, each bar's against its kernel time
    probe = ("<script>for (const bar of document.querySelectorAll('[role=img]')) { const w = bar.getBoundingClientRect()"
             ".width; bar.dataset.px = w.toFixed(2); for (const s of bar.children) s.dataset.frac = "
             "(s.getBoundingClientRect().width / w).toFixed(4); }</script>")
    html = f"<!DOCTYPE html><html><body style='width:1000px'>{page}{probe}</body></html>"
    (tmp_path / "p.html").write_text(html, encoding="utf-8")
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                          f"--user-data-dir={tmp_path / 'chrome'}", "--dump-dom", f"file://{tmp_path / 'p.html'}"],
                         capture_output=True, text=True, timeout=120).stdout
    widths = [float(w) for w in re.findall(r'data-px="([\d.]+)"', dom)]
    assert len(widths) == 12 and max(widths[:6]) < min(widths[6:])
    for bar, px in zip(bars, widths):
        assert px / max(widths) == pytest.approx(bar["width"], abs=0.01)
    fracs = [float(f) for f in re.findall(r'data-frac="([\d.]+)"', dom)]
    shares = [s["share"] for bar in bars for s in bar["segments"]]
    assert fracs == pytest.approx(shares, abs=0.01)


def test_fixture_manifest_names_every_file_and_the_docs_its_shape_follows():
    manifest = json.loads((PROFILES / "manifest.json").read_text(encoding="utf-8"))
    fixtures = {p.name for p in PROFILES.iterdir() if p.is_file() and p.name not in ("manifest.json",
                                                                                     "make_traces.py")}
    assert set(manifest["files"]) == fixtures and manifest["captured"] is False
    for name, entry in manifest["files"].items():
        assert entry["shape"] and (entry["docs"] or name == "expected.json")
        assert all(d.startswith("https://") for d in entry["docs"])


def test_markdown_report_has_the_profile_section_with_the_bars_figures(tmp_path):
    """`report --markdown`'s profile table: one row per profiled run with the HTML bars' categories (largest first,
    their shares), the failed run said, the unread one named with its command; through the real command."""
    import re

    from dsv4ctl.report.markdown import markdown_profiles

    store, base, cand, unread, bars, _ = _report_page(tmp_path)
    lines = markdown_profiles(bars)
    rows = [line for line in lines if re.match(r"\| \d", line)]
    assert lines[1] == "## Where the time goes (profiles)" and len(rows) == len(bars) == 13
    for bar, row in zip(bars, rows):
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert cells[0].split()[0] == str(bar["run"])
        if bar["unread"]:
            assert cells[3] == "-" and f"`dsv4ctl profile {unread}`" in cells[4]
            continue
        assert float(cells[3].replace(",", "")) == pytest.approx(bar["kernel_us"], abs=0.05)
        shares = re.findall(r"([a-z_]+) ([\d.]+)%", cells[4])
        ranked = sorted(bar["segments"], key=lambda s: -s["share"])
        assert [n for n, _ in shares] == [s["name"] for s in ranked]
        assert [float(p) for _, p in shares] == pytest.approx([100 * s["share"] for s in ranked], abs=0.051)
        assert ("FAILED its verdict (degenerate)" in cells[4]) == bar["failed"]
        assert cells[5].startswith("DeepseekV4MoE ")
    assert markdown_profiles([]) == []
    # the same section in the page `dsv4ctl report --markdown` writes, for a campaign of profiled runs
    cid = store.create_campaign("profiled", "local", "test")
    eid = store.experiment_id("e", "h", "{}", "test")
    run_id = store.add_run(campaign_id=cid, experiment_id=eid, token="t-md", state="COMPLETED", label="M1")
    store.save_verdict(run_id, {"status": "coherent", "passed": True, "false_green": False, "bos_run": 0,
                                "py_exit": 0, "first_blocker": None, "requests": [], "metrics": {"gen_s": 1.0}})
    for name in RANKS:
        save_profile(store, run_id, "skip2+3", read_breakdown(PROFILES / name))
    out = tmp_path / "r.md"
    with pytest.raises(SystemExit) as exited:
        main(["report", "profiled", "--markdown", "--db", str(tmp_path / "r.db"), "--output", str(out)])
    assert exited.value.code in (0, None)
    page = out.read_text(encoding="utf-8")
    (row,) = [line for line in page.splitlines() if line.startswith(f"| {run_id} (M1) |")]
    assert "## Where the time goes (profiles)" in page and "moe_routed" in row and "DeepseekV4MoE" in row
