"""Import the raw log of an earlier run (the report's jobs, runs made by hand) into the store.

Issue 29: the log (and its sacct text, and what its mode judges beside it: a serve run's serve files, an align
run's capture) is copied into the runs directory, `runs/ingested/<token>/`, so the run can be judged again after
the original is gone; it is judged by its mode (dsv4ctl/modes/registry.py) exactly as `dsv4ctl verdict RUN` judges it later.
Only a regular file is read (a pipe or /dev/zero never ends), at most MAX_LOG_BYTES; one that looks binary or has
no job-log marker at all is refused without --force. The same content ingested twice is refused, naming the run it
already is (its SHA-256 is stored), unless --again: a second copy counts twice in compare, history and references.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from ..errors import Dsv4Error, UsageError
from ..store import Store
from ..spec.switches import BY_NAME
from ..versions import read_versions
from .verdicts import record_verdict
from ..judge.rules import Verdict

MAX_LOG_BYTES = 16 << 30  # a 1 GiB log ingests in under a second; past 16 GiB it is not one job's log
MAX_SACCT_BYTES = 64 << 20
SNIFF_BYTES = 64 << 10
INGESTED_DIR = "ingested"


class NotALog(UsageError):
    """A file ingest will not read as a job log (not a regular file, too large, binary, no markers)."""


class AlreadyIngested(UsageError):
    """The same log content is stored already as another run."""


@dataclass
class Ingested:
    run_id: int
    verdict: Verdict
    mode: str
    copy_of: int | None = None  # with --again: the run whose content this one repeats


def _label_like(job_id: str) -> bool:
    import re

    from ..spec.models import LABEL_PATTERN, RESERVED_LABELS

    return re.fullmatch(LABEL_PATTERN, job_id) is not None and job_id not in RESERVED_LABELS  # a bare number would read as a run id


def parse_switches(pairs: list[str]) -> dict[str, str]:
    switches = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise Dsv4Error(f"--switch {pair!r}: write NAME=VALUE")
        if name not in BY_NAME:  # as validate refuses it in a spec (issue 26 m18)
            from ..spec.switches import closest

            near = closest(name)
            raise UsageError(f"--switch {name}: unknown switch; "
                             + (f"did you mean {', '.join(near)}?" if near else "see `dsv4ctl switches`"))
        try:
            value = BY_NAME[name].normalise(value) if BY_NAME[name].kind != "text" else value
        except ValueError as exc:
            raise UsageError(f"--switch {name}={value}: {exc}") from None
        switches[name] = value
    return switches


def check_regular(path: Path, what: str, limit: int) -> None:
    """Refuse what is not a regular file of at most `limit` bytes (a pipe, a device, a socket never end or never
    come back: save it to a file first)."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise NotALog(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = ("a pipe" if stat.S_ISFIFO(info.st_mode) else "a device" if stat.S_ISCHR(info.st_mode)
                or stat.S_ISBLK(info.st_mode) else "a socket" if stat.S_ISSOCK(info.st_mode) else "not a file")
        raise NotALog(f"{what} {path} is {kind}, not a regular file: save it to a file first "
                      f"(`cat ... > job.log`)")
    if info.st_size > limit:
        raise NotALog(f"{what} {path} has {info.st_size} bytes, more than the {limit >> 20} MiB ingest reads")


def binary_reason(path: Path) -> str | None:
    """Why the head of a file is not text (NUL bytes, mostly control bytes or not UTF-8), or None."""
    with open(path, "rb") as stream:
        head = stream.read(SNIFF_BYTES)
    if b"\x00" in head:
        return f"NUL bytes in its first {len(head)} bytes"
    odd = sum(1 for b in head if b < 32 and b not in (9, 10, 13, 27))
    text = head.decode("utf-8", "replace")
    if head and (odd > len(head) // 20 or text.count("\ufffd") > len(text) // 10):
        return "mostly control bytes or bytes that are not UTF-8 in its first bytes"
    return None


def has_markers(facts) -> bool:
    """Any line a job log has: a stage, a request block, a DSV4_* line, ENGINE_READY, PY_EXIT, vLLM's own lines."""
    return bool(facts.stages or facts.requests or facts.probe_verdict or facts.metrics or facts.expect
                or facts.py_exit is not None or facts.job_fields or facts.serve or facts.engine_ready_s is not None
                or facts.init_engine_s is not None or facts.tracebacks or facts.model_load_s is not None)


def copy_hashing(source: Path, target: Path, limit: int) -> str:
    """Copy `source` to `target`, at most `limit` bytes (a file still growing past it is refused); its SHA-256."""
    digest, copied = hashlib.sha256(), 0
    with open(source, "rb") as src, open(target, "wb") as dst:
        while chunk := src.read(1 << 20):
            copied += len(chunk)
            if copied > limit:
                raise NotALog(f"{source} grew past the {limit >> 20} MiB ingest reads while it was copied")
            digest.update(chunk)
            dst.write(chunk)
    return digest.hexdigest()


def copy_evidence(source_dir: Path, target: Path, mode: str, facts) -> None:
    """What the mode's judge reads beside raw.log (the mode's `evidence`: a serve run's files, an align run's
    capture and spec.json), copied when present."""
    from ..modes.registry import mode_of

    for name in dict.fromkeys(mode_of(mode).evidence(facts)):
        found = source_dir / name
        if found.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(found, target / name)


def ingest_root(flag: Path | None, db_path: Path) -> Path:
    """The runs directory the copies go under: --runs-dir, DSV4CTL_RUNS_DIR, dsv4ctl.toml's, else `runs/` beside
    the database (the copies belong to the database that records them)."""
    from ..config import DEFAULT_RUNS_DIR, RUNS_DIR_ENV, load_config, resolve

    config = load_config()
    found = resolve(flag, RUNS_DIR_ENV, config.runs_dir, None, config.path)
    return Path(found.value) if found.value is not None else Path(db_path).resolve().parent / DEFAULT_RUNS_DIR


def ingest_log(store: Store, log: Path, experiment: str, sacct: Path | None, switch_pairs: list[str],
               tags: list[str], label: str | None = None, git_sha: str | None = None, *, runs_root: Path,
               mode: str | None = None, again: bool = False, force: bool = False) -> Ingested:
    """Copy, judge by its mode and record a log (and its sacct text) as a run. Its label is `label`, else the job id
    the scheduler record names (J08), made unique (J08-2) when another run has it already."""
    switches = parse_switches(switch_pairs)
    if store.read_only:  # said before anything is copied (the copy would go for nothing)
        from ..store import StoreError

        raise StoreError(f"{store.path}: it is read-only here; reading commands work, recording needs write access")
    check_regular(log, "log", MAX_LOG_BYTES)
    if sacct is not None:
        check_regular(sacct, "sacct file", MAX_SACCT_BYTES)
    if not force and (why := binary_reason(log)):
        raise NotALog(f"{log} does not look like a job log ({why}): --force to ingest it anyway")
    token = f"ingest-{secrets.token_hex(6)}"  # the same log ingested twice in one second is two runs
    target = Path(runs_root).resolve() / INGESTED_DIR / token
    try:
        target.mkdir(parents=True)
        return _ingest_copy(store, log, sacct, target, token, experiment, switches, tags, label, git_sha,
                            mode=mode, again=again, force=force)
    except OSError as exc:
        shutil.rmtree(target, ignore_errors=True)
        raise Dsv4Error(f"cannot copy {log} into {target}, where {store.path} keeps its ingested logs: "
                        f"{exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise


def _ingest_copy(store: Store, log: Path, sacct: Path | None, target: Path, token: str, experiment: str,
                 switches: dict[str, str], tags: list[str], label: str | None, git_sha: str | None, *,
                 mode: str | None, again: bool, force: bool) -> Ingested:
    from ..judge.rules import VerdictOptions
    from ..judge.scan import parse_file
    from ..modes.registry import judge_log, log_mode, mode_of
    from ..spec.render import RAW_LOG_NAME

    copied = target / RAW_LOG_NAME
    sha = copy_hashing(log, copied, MAX_LOG_BYTES)
    earlier = store.runs_with_content(sha)
    if earlier and not again:
        first = earlier[0]
        raise AlreadyIngested(f"{log} is already run {first.id} ({first.data.get('label')}, experiment "
                              f"{first.experiment!r}, ingested from {first.data.get('source_path')}): the same log "
                              "twice would count one run's numbers twice in compare, history and references; "
                              "--again to record it anyway")
    sacct_copy = None
    if sacct is not None:
        sacct_copy = target / "sacct.txt"
        copy_hashing(sacct, sacct_copy, MAX_SACCT_BYTES)
    facts = parse_file(str(copied), VerdictOptions())
    if not force and not has_markers(facts):
        raise NotALog(f"{log} has no line of a job log (### STAGE, REQUEST, DSV4_*, ENGINE_READY, PY_EXIT, a "
                      "traceback): --force to ingest it anyway")
    found_mode = log_mode(facts, mode, log)
    copy_evidence(log.parent, target, found_mode, facts)
    judgement = judge_log(copied, sacct_copy, mode=found_mode, facts=facts)
    described = {"name": experiment, "ingested": True, "switches": dict(sorted(switches.items()))}
    found = mode_of(found_mode)
    if found.named_in_experiment:  # the default mode's ingests keep the experiment hash they had before issue 29
        described["mode"] = found_mode
    if judgement.record is not None and found.settings_section:
        described[found.settings_section] = judgement.record.pop("settings")
    text = json.dumps(described, sort_keys=True)
    experiment_id = store.experiment_id(experiment, hashlib.sha256(text.encode()).hexdigest()[:12], text, str(log))
    verdict = judgement.verdict
    sched = verdict.scheduler or {}
    if label is None and sched.get("job_id") and _label_like(sched["job_id"]) and store.label_free(sched["job_id"]):
        label = sched["job_id"]  # its job id when free (J08); else the automatic r<run id>, never J08-2
    run_id = store.add_run(experiment_id=experiment_id, backend="ingest", token=token, label=label,
        state=sched.get("state") or "INGESTED",
        job_id=sched.get("job_id"), exit_code=sched.get("exit_code"), signal=sched.get("signal"),
        elapsed_s=sched.get("elapsed_s"), max_rss_kib=sched.get("max_rss_kib"), node=sched.get("node_list"),
        run_dir=str(target), log_path=str(copied), switches_json=json.dumps(switches),
        tags=",".join(tags), ingested=1, point_json="{}", repeat_index=0, git_sha=git_sha, content_sha256=sha,
        source_path=str(log.absolute()), sacct_path=str(sacct_copy) if sacct_copy else None)
    record_verdict(store, run_id, verdict.to_json(), read_versions(copied), found_mode, judgement.record)
    return Ingested(run_id, verdict, found_mode, copy_of=earlier[0].id if earlier else None)
