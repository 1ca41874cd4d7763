"""Judge a serve run on disk: raw.log's verdict, joined with the run directory's serve files.

  serve-requests.jsonl   the request records: the serve rules (serve_rules.assess) and the metrics (serving.summarise)
  serve-memory.jsonl     the server's memory samples: slope, suspected leak, load.memory_limit_mib
  server.log             vLLM's own log, scanned like any vLLM log: a server that died mid-load makes the run
                         `crashed` with server.log's root cause as the first blocker (raw.log may only show the
                         client's side: connection refused, requests failing)

Reading is bounded: a record line past MAX_LINE_BYTES, a line that is not a JSON object, or one whose fields have the
wrong types is counted as unreadable, and a run with unreadable evidence cannot pass. Records keep no text (the
offline rules judged raw.log's blocks); token ids are kept compact.
"""

from __future__ import annotations

import json
import math
from array import array
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .rules import Blocker, Verdict, judge, main_path_errors
from .sacct import SchedulerSummary
from .scan import LogFacts, parse_file
from .serve_cause import ServerStory, first_line, read_story, refused, sharpest
from .serve_rules import ServeJudgement, assess, model_eos_ids, offline_rules, serve_options
from .serving import is_completed, summarise

FILES = {"server_log": "server.log", "requests": "serve-requests.jsonl", "memory": "serve-memory.jsonl"}
MAX_LINE_BYTES = 4 << 20  # one record: max_tokens ids and the text fit many times over
MAX_RECORDS = 2_000_000  # past this the file is not the load a spec can ask for (limits.MAX_PROMPTS is 1e6)
MAX_SAMPLES = 1 << 20  # memory samples: a week at one sample every 0.6 s
MAX_UNREADABLE_SHOWN = 8
_NUMBER = (int, float)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, _NUMBER) and not isinstance(v, bool) and math.isfinite(v)


def record_problem(obj: Any) -> str | None:
    """Why a line of serve-requests.jsonl is not a record of the contract, or None."""
    if not isinstance(obj, dict):
        return "not a JSON object"
    checks = (("index", _is_int), ("warmup", lambda v: isinstance(v, bool)), ("send_s", _is_num),
              ("ttft_s", lambda v: v is None or _is_num(v)), ("e2el_s", lambda v: v is None or _is_num(v)),
              ("itl_s", lambda v: isinstance(v, list) and all(_is_num(x) for x in v)),
              ("prompt_tokens", lambda v: v is None or (_is_int(v) and v >= 0)),
              ("output_tokens", lambda v: _is_int(v) and v >= 0),
              ("token_ids", lambda v: v is None or (isinstance(v, list) and all(_is_int(x) and 0 <= x < 1 << 62
                                                                                 for x in v))),
              ("finish_reason", lambda v: v is None or isinstance(v, str)),
              ("stop_reason", lambda v: v is None or isinstance(v, str) or _is_int(v)),
              ("error", lambda v: v is None or isinstance(v, str)))
    for key, ok in checks:
        if key not in obj or not ok(obj[key]):
            return f"field {key!r} missing or of the wrong type"
    return None


def _slim(record: dict[str, Any]) -> dict[str, Any]:
    """What the rules and the metrics read; the text goes, the ids are packed (8 bytes each, not ~36)."""
    slim = {k: record[k] for k in ("index", "warmup", "send_s", "ttft_s", "itl_s", "e2el_s", "prompt_tokens",
                                   "output_tokens", "finish_reason", "stop_reason")}
    slim["error"] = record["error"][:1000] if record["error"] is not None else None
    slim["token_ids"] = array("q", record["token_ids"]) if record["token_ids"] is not None else None
    return slim


@dataclass
class JsonlRead:
    rows: list[dict[str, Any]] = field(default_factory=list)
    unreadable: int = 0
    examples: list[str] = field(default_factory=list)  # "line N: why"
    past_cap: int = 0
    missing: bool = False


def read_jsonl(path: Path, check, cap: int, keep=lambda row: row) -> JsonlRead:
    """Lines of a JSONL file, each checked (`check(obj)` -> problem or None); never raises on content."""
    out = JsonlRead()
    try:
        stream = open(path, "rb")
    except OSError:
        out.missing = True
        return out
    with stream:
        for number, raw in enumerate(iter(lambda: stream.readline(MAX_LINE_BYTES + 1), b""), 1):
            problem = None
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                problem = f"longer than {MAX_LINE_BYTES} bytes"
                while raw and not raw.endswith(b"\n"):  # skip the rest of that line
                    raw = stream.readline(MAX_LINE_BYTES)
            elif not raw.strip():
                continue
            else:
                try:
                    obj = json.loads(raw.decode("utf-8"))
                except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
                    problem = "not JSON"
                else:
                    problem = check(obj)
            if problem is not None:
                out.unreadable += 1
                if len(out.examples) < MAX_UNREADABLE_SHOWN:
                    out.examples.append(f"line {number}: {problem}")
            elif len(out.rows) < cap:
                out.rows.append(keep(obj))
            else:
                out.past_cap += 1
    return out


def sample_problem(obj: Any) -> str | None:
    if not isinstance(obj, dict) or not _is_num(obj.get("t_s")) or not _is_num(obj.get("rss_mib")):
        return "not a {t_s, rss_mib} sample"
    return None


def _file(run_dir: Path, serve: dict[str, Any], key: str) -> Path:
    """The file DSV4_SERVE names, when it is a plain name inside the run directory; else the contract's name."""
    named = (serve.get("files") or {}).get(key) if isinstance(serve.get("files"), dict) else None
    ok = isinstance(named, str) and named and Path(named).name == named and not named.startswith(".")
    return run_dir / (named if ok else FILES[key])


def _eos_ids(serve: dict[str, Any], snapshot: dict[str, Any]) -> frozenset[int]:
    """EOS ids from DSV4_SERVE, else from the model directory's generation_config.json / config.json."""
    listed = serve.get("eos_token_ids")
    if isinstance(listed, list) and all(_is_int(i) for i in listed):
        return frozenset(listed)
    model = snapshot.get("model")
    return model_eos_ids(model.get("path") if isinstance(model, dict) else None)


def _duration(facts: LogFacts, records: list[dict[str, Any]]) -> tuple[float | None, str]:
    """The load's wall time: the job's own (DSV4_METRICS duration), else the records' span."""
    stated = facts.metrics.get("duration")
    if _is_num(stated) and stated > 0:
        return float(stated), "DSV4_METRICS"
    ends = [r["send_s"] + r["e2el_s"] for r in records if not r["warmup"] and r["e2el_s"] is not None]
    starts = [r["send_s"] for r in records if not r["warmup"]]
    if ends and starts and max(ends) > min(starts):
        return max(ends) - min(starts), "records"
    return None, "none"


@dataclass
class ServeEvidence:
    requests: JsonlRead
    memory: JsonlRead
    server_facts: LogFacts | None  # None: no server.log
    eos_ids: frozenset[int]
    server_log: Path | None = None


def read_evidence(run_dir: Path, serve: dict[str, Any], snapshot: dict[str, Any]) -> ServeEvidence:
    requests = read_jsonl(_file(run_dir, serve, "requests"), record_problem, MAX_RECORDS, _slim)
    # Appended as each request ended (a killed job's file is in completion order): warm-ups first, then by index.
    requests.rows.sort(key=lambda r: (not r["warmup"], r["index"]))
    memory = read_jsonl(_file(run_dir, serve, "memory"), sample_problem, MAX_SAMPLES)
    server_log = _file(run_dir, serve, "server_log")
    try:
        server_facts = parse_file(str(server_log))
    except OSError:
        server_facts = None
    return ServeEvidence(requests, memory, server_facts, _eos_ids(serve, snapshot), server_log)


def judge_serve_run(facts: LogFacts, scheduler: SchedulerSummary | None, snapshot: dict[str, Any] | None,
                    run_dir: Path) -> Verdict:
    """raw.log's verdict under the serve options, then the serve files' evidence joined into it."""
    said = facts.serve.get("expect") if isinstance(facts.serve.get("expect"), dict) else {}
    spec = snapshot or {"load": facts.serve.get("load") if isinstance(facts.serve.get("load"), dict) else {},
                        "sampling": {"ignore_eos": facts.serve.get("ignore_eos", True)},
                        "expect": {k: v for k, v in {**said, **facts.expect}.items()
                                   if k in ("bos_id", "max_repeat_run") and _is_int(v)}}
    options = serve_options(spec, 1 << 62)
    if isinstance(facts.expect.get("n_requests"), int):
        # A failed request prints DSV4_REQUEST_ERROR instead of a block: raw.log owes blocks for the others only
        # (the failures are judged, by name, from the records).
        options = replace(options, expected_requests=max(0, facts.expect["n_requests"] - facts.request_error_count))
    verdict = judge(facts, scheduler, options)
    evidence = read_evidence(Path(run_dir), facts.serve, spec)
    ready = facts.serve.get("ready_s") if _is_num(facts.serve.get("ready_s")) else facts.engine_ready_s
    records = evidence.requests.rows
    unreadable = evidence.requests.unreadable + evidence.requests.past_cap
    judgement = assess(spec, records, evidence.memory.rows, eos_ids=evidence.eos_ids, ready_s=ready,
                       unreadable=unreadable)
    if not facts.requests and any(map(is_completed, records)):  # killed before its blocks: the records are all
        offline_rules(judgement, spec, records)
        judgement.findings.append(f"raw.log has no request blocks: the offline rules judged the {len(records)} "
                                  "record(s) of serve-requests.jsonl")
    if evidence.memory.unreadable:
        judgement.blockers.append(f"{evidence.memory.unreadable} unreadable memory sample(s) "
                                  f"({evidence.memory.examples[0]}): the memory record cannot be trusted")
    _join(verdict, judgement, evidence, facts, scheduler)
    duration, source = _duration(facts, records)
    if not evidence.requests.missing:
        slo = (spec.get("load") or {}).get("slo")
        verdict.metrics.update(summarise(records, duration, slo if isinstance(slo, dict) else None))
    verdict.evidence["serve"] = {
        "judgement": judgement.to_json(), "duration_source": source, "eos_ids": sorted(evidence.eos_ids)[:8],
        "files": {"requests": _read_note(evidence.requests), "memory": _read_note(evidence.memory),
                  "server_log": None if evidence.server_facts is None else {
                      "lines": evidence.server_facts.lines,
                      "errors": len(main_path_errors(evidence.server_facts))}},
        "request_errors_in_log": facts.request_error_count,
    }
    return verdict


def _read_note(read: JsonlRead) -> dict[str, Any]:
    return {"missing": read.missing, "rows": len(read.rows), "unreadable": read.unreadable,
            "examples": read.examples, "past_cap": read.past_cap}


def _server_failed(facts: LogFacts) -> Blocker | None:
    """raw.log's ServerFailed (the job's word that its server did not come up, or died, or was not its own)."""
    return next((e for e in main_path_errors(facts) if "ServerFailed" in (e.message or "")), None)


NEVER_READY = ("before it was ready", "did not answer GET /health", "is in use by another process",
               "was answered by")


def _join(verdict: Verdict, judgement: ServeJudgement, evidence: ServeEvidence, facts: LogFacts,
          scheduler: SchedulerSummary | None) -> None:
    """Fold the serve evidence into raw.log's verdict; status, first blocker, passed and false green follow."""
    story = read_story(evidence.server_facts, evidence.server_log) if evidence.server_facts is not None else None
    failed = _server_failed(facts)
    never_ready = failed is not None and any(p in failed.message for p in NEVER_READY)
    load_hurt = (judgement.status == "incomplete" or verdict.status in ("crashed", "incomplete")
                 or evidence.requests.missing)
    _server_status(verdict, judgement, story, failed, never_ready, load_hurt)
    if evidence.requests.missing and verdict.status == "coherent":
        verdict.status = "incomplete"
        verdict.reasons.append("serve-requests.jsonl is missing: the load's own record is not there")
    # raw.log alone called the run crashed or degenerate for want of request blocks (every request failed, none
    # was sent, the job exited 2): the records say what went wrong.
    no_cause = verdict.first_blocker is None and verdict.status in ("crashed", "degenerate")
    only_probe_said = verdict.status == "degenerate" and bool(verdict.reasons) and \
        verdict.reasons[0].startswith("the probe itself judged")
    if judgement.status != "coherent" and (verdict.status == "coherent" or only_probe_said or no_cause):
        if no_cause and verdict.status == "crashed":
            verdict.reasons = [r for r in verdict.reasons if not r.startswith("Python exited ")]
        verdict.status = judgement.status
        verdict.first_blocker = _request_blocker(judgement, facts)
    verdict.reasons += [r for r in judgement.reasons if r not in verdict.reasons]
    verdict.reasons += judgement.blockers
    verdict.passed = verdict.passed and verdict.status == "coherent" and not judgement.blockers
    success = [s for s, on in (("PY_EXIT=0", facts.py_exit == 0),
                               ("COMPLETED 0:0", scheduler is not None and scheduler.completed_ok),
                               ("probe said COHERENT", facts.probe_verdict == "COHERENT")) if on]
    was_false_green = verdict.false_green
    verdict.false_green = verdict.status != "coherent" and bool(success)
    if verdict.false_green and not was_false_green:
        verdict.reasons.append(f"FALSE GREEN: {', '.join(success)} although the run is {verdict.status}")


def _server_status(verdict: Verdict, judgement: ServeJudgement, story: ServerStory | None,
                   failed: Blocker | None, never_ready: bool, load_hurt: bool) -> None:
    """What server.log changes: a device error or a server that ended is `crashed` with its root cause; a server
    that stayed up has its errors said, not blamed (a refused request is logged too); the shutdown's are said."""
    cause = story.cause if story is not None else None
    ended = failed is not None or (story is not None and (story.engine_death is not None
                                                          or story.marks.ended_before_stop))
    if never_ready and failed is not None:
        verdict.reasons = [r for r in verdict.reasons if "ServerFailed" not in r]
        verdict.reasons.insert(0, f"the vLLM server never became ready: {first_line(failed)}")
        if cause is None:
            verdict.status, verdict.first_blocker = "crashed", failed
    if cause is not None and cause.family == "device" and verdict.status != "device_error":
        verdict.status, verdict.first_blocker = "device_error", cause
        verdict.reasons.insert(0, f"server.log: device-side failure at line {cause.line}: {first_line(cause)}")
    elif cause is not None and load_hurt and ended and verdict.status not in ("device_error", "nonfinite"):
        verdict.status, verdict.first_blocker = "crashed", cause
        what = "ended the engine" if cause is story.engine_death else "ended the server"
        verdict.reasons.insert(1 if never_ready else 0,
                               f"server.log: {cause.family} error at line {cause.line} {what}: {first_line(cause)}")
    elif cause is not None:
        first_failed = judgement.first_failed
        why = ("although the load completed" if not load_hurt else
               "for a request it refused; the server stayed up" if first_failed and refused(first_failed["error"])
               else "while the server stayed up")
        judgement.findings.append(f"server.log has an error at line {cause.line} {why}: {first_line(cause, 200)}")
    if story is not None and story.after:
        noise = next((e for e in story.after if e.exc_type), None) or sharpest(story.after)
        begun = story.marks.job_stop or story.marks.shutdown
        when = (f"during the server's shutdown (begun at line {begun})" if begun is not None and noise.line > begun
                else "from the job's own signal to the server")
        judgement.findings.append(f"server.log has an error at line {noise.line} {when}, not counted: "
                                  f"{first_line(noise, 200)}")


def _request_blocker(judgement: ServeJudgement, facts: LogFacts) -> Blocker:
    if judgement.first_failed is not None:
        failed = judgement.first_failed
        return Blocker(_request_error_line(facts, failed["index"]), "request_error",
                       f"request {failed['index']} failed: {failed['error']}", evidence=["serve-requests.jsonl"])
    if judgement.first_bad is not None:
        bad = judgement.first_bad
        return Blocker(0, "degenerate_output", f"request {bad['index']}: {bad['problem']}",
                       evidence=["serve-requests.jsonl"])
    return Blocker(0, "missing_requests", judgement.reasons[0] if judgement.reasons else "requests missing")


def _request_error_line(facts: LogFacts, index) -> int:
    """raw.log's DSV4_REQUEST_ERROR line of that request (0 when raw.log has none)."""
    for event in facts.request_errors:
        try:
            if json.loads(event.text).get("index") == index:
                return event.line
        except (ValueError, AttributeError):
            continue
    return 0
