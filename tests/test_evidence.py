"""Message and root cause from evidence (issue 21, point 2): a traceback whose exception line is missing takes its
message from the ERROR record of its process above it, else from its chained exceptions; logger records are error
evidence by level and text; no first blocker ever has an empty message."""

from __future__ import annotations

import pytest

from dsv4ctl.judge.rules import judge
from dsv4ctl.judge.scan import parse_bytes, parse_file

from .conftest import FIXTURES


def verdict_of(text: str):
    return judge(parse_bytes(text.encode()))


def test_a_cut_traceback_takes_the_error_record_above_it():
    v = verdict_of(
        "(EngineCore_DP0 pid=7) ERROR 01-02 03:04:05 [loader.py:88] Failed to allocate expert weights: CUDA out of "
        "memory. Tried to allocate 2.00 GiB.\n"
        "(EngineCore_DP0 pid=7) ERROR 01-02 03:04:05 [core.py:700] EngineCore failed to start.\n"
        "(EngineCore_DP0 pid=7) ERROR 01-02 03:04:05 [core.py:700] Traceback (most recent call last):\n"
        "(EngineCore_DP0 pid=7) ERROR 01-02 03:04:05 [core.py:700]   File \"/x/loader.py\", line 80, in load\n"
        "(EngineCore_DP0 pid=7) ERROR 01-02 03:04:05 [core.py:700]     w = torch.empty(shape)\n")
    fb = v.first_blocker
    assert (v.status, fb.family, fb.line) == ("crashed", "oom", 1)
    assert fb.message.startswith("Failed to allocate expert weights: CUDA out of memory")


def test_a_record_of_another_process_is_not_borrowed():
    v = verdict_of(
        "(Worker_TP1 pid=9) ERROR 01-02 03:04:05 [x.py:1] Failed to load shard 3: CUDA out of memory.\n"
        "(EngineCore_DP0 pid=7) ERROR 01-02 03:04:06 [core.py:700] Traceback (most recent call last):\n"
        "(EngineCore_DP0 pid=7) ERROR 01-02 03:04:06 [core.py:700]   File \"/x/core.py\", line 80, in run\n")
    fb = v.first_blocker
    # The worker's record is an error of its own (an OOM names a family), the cut traceback only a wrapper.
    assert (fb.line, fb.family, fb.process) == (1, "oom", "Worker_TP1")


def test_a_cut_traceback_with_no_evidence_says_so_and_yields_to_any_other_error():
    alone = verdict_of("Traceback (most recent call last):\n  File \"/x/run.py\", line 3, in <module>\n"
                       "    main()\n")
    assert alone.status == "crashed" and alone.first_blocker.wrapper
    assert "exception line is missing" in alone.first_blocker.message and "main()" in alone.first_blocker.message
    with_other = verdict_of("RuntimeError: NCCL error: unhandled cuda error\n"
                            "Traceback (most recent call last):\n  File \"/x/run.py\", line 3, in <module>\n")
    assert (with_other.first_blocker.line, with_other.first_blocker.family) == (1, "collective")


def test_during_handling_ends_a_traceback_that_lost_its_exception_line():
    facts = parse_bytes(b"ERROR 01-02 03:04:05 x.py:1] Traceback (most recent call last):\n"
                        b"ERROR 01-02 03:04:05 x.py:1]   File \"/a.py\", line 1, in f\n"
                        b"During handling of the above exception, another exception occurred:\n\n"
                        b"Traceback (most recent call last):\n  File \"/b.py\", line 2, in g\n"
                        b"ValueError: the chained one\n")
    [tb] = facts.tracebacks
    assert tb.exc_type is None and tb.chain[-1] == "ValueError: the chained one"
    v = judge(facts)
    assert v.first_blocker.message == "ValueError: the chained one" and v.first_blocker.line == 1


@pytest.mark.parametrize("line, family", [
    ("ERROR 01-02 03:04:05 [worker.py:9] HIP out of memory while allocating the KV cache", "oom"),
    ("[2025-01-02 03:04:05 TP0] ERROR something: cudaErrorIllegalAddress raised by the graph replay", "device"),
    ("E0102 03:04:05.123456 77 ProcessGroupNCCL.cpp:1000] [PG 0 Rank 3] NCCL watchdog thread terminated with "
     "exception: ncclUnhandledCudaError", "collective"),
    ("2025-01-02 03:04:05,100 - vllm_ascend - ERROR - Failed to compile the graph: MLIR pass failed", "compile"),
])
def test_logger_records_naming_a_specific_family_are_errors(line, family):
    v = verdict_of(line + "\n")
    assert v.status in ("crashed", "device_error") and v.first_blocker.family == family


def test_error_records_that_name_no_error_are_not_evidence():
    v = verdict_of("(EngineCore pid=3) [ERROR] `max_frames` is part of SomeProcessorKwargs, but not documented.\n")
    assert v.status == "incomplete" and v.first_blocker is None


def test_a_weak_record_does_not_crash_a_run_that_printed_its_results():
    v = verdict_of("ERROR 01-02 03:04:05 [serving.py:9] Error in preprocessing prompt inputs\n"
                   "Prompt: 'Hello', Generated text: ' and welcome to the show, said the host.'\n")
    assert v.status == "coherent"
    alone = verdict_of("ERROR 01-02 03:04:05 [serving.py:9] Error in preprocessing prompt inputs\n")
    assert alone.status == "crashed" and alone.first_blocker.kind == "logged_error"


def test_an_exception_behind_an_unseen_prefix_on_a_tiny_log():
    v = verdict_of("12/31/2025 23:59:01.5 [Error] (app) (Engine pid=4) torch.OutOfMemoryError: CUDA out of memory.\n")
    assert (v.status, v.first_blocker.family, v.first_blocker.exc_type) == ("crashed", "oom", "torch.OutOfMemoryError")
    prose = verdict_of("INFO we caught ValueError: bad value and retried\n")
    assert prose.first_blocker is None


def test_no_first_blocker_ever_has_an_empty_message():
    for path in sorted(FIXTURES.rglob("*.log")):
        v = judge(parse_file(str(path)))
        if v.first_blocker is not None:
            assert v.first_blocker.message.strip(), path.name


def test_levels_written_in_the_text_in_other_frameworks_formats():
    from dsv4ctl.judge.levels import text_level

    assert text_level("2026-01-05T10:00:00.1Z ERROR svc.core pid:3 Failed to start") == ("ERROR", "svc.core pid:3 Failed to start")
    assert text_level("[2025-01-01 10:00:00,1]::[App]::ERROR --> boom failed")[0] == "ERROR"
    assert text_level("2026-01-22 16:55:01.270 | critical |   Always | Read bad value")[0] == "CRITICAL"
    assert text_level("2026-01-22 16:55:01,2 - utils.client - INFO - polling")[0] == "INFO"
    assert text_level("0.10.004.700 E CUDA error: invalid device function")[0] == "ERROR"
    assert text_level("error: command 'gcc' failed")[0] == "ERROR"
    # A word that starts a sentence is not a level; a type name is not one either.
    assert text_level("Error executing method 'load_model'") is None
    assert text_level("RuntimeError: x") is None
    assert text_level("Loading E model 3") is None


def test_quiet_records_in_text_formats_blame_nothing():
    log = (b"2026-01-22 16:55:01.270 | warning  | Alloc | CUDA error: out of memory, retrying with a smaller batch\n"
           b"[2025-03-02 10:11:12,345]::[App]::INFO --> cache sized to avoid a CUDA error: out of memory\n")
    verdict = judge(parse_bytes(log))
    assert verdict.status == "incomplete" and verdict.first_blocker is None


def test_a_terse_device_line_yields_to_the_line_that_says_what_happened():
    log = (b"/src/ggml-cuda.cu:88: CUDA error\n"
           b"CUDA error: an illegal memory access was encountered\n")
    blocker = judge(parse_bytes(log)).first_blocker
    assert blocker.line == 2 and "illegal memory access" in blocker.message


def test_colour_codes_that_lost_their_escape_byte_are_removed():
    from dsv4ctl.judge.values import clean_line

    raw = "\ufffd[1;36m(Worker pid=3)\ufffd[0;0m ERROR 01-01 00:00:00 [x.py:1] boom".encode()
    assert clean_line(raw) == "(Worker pid=3) ERROR 01-01 00:00:00 [x.py:1] boom"


def test_a_short_paste_is_read_whole_and_advice_blames_nothing():
    # No anchor on either line: read because it is among a log's first lines.
    log = b"loading shards 4/4\nWorkerProc failed to start.\n"
    blocker = judge(parse_bytes(log)).first_blocker
    assert blocker is not None and blocker.line == 2
    advice = b"Refer to the documentation on how to address the out of memory issue: https://example.org/oom\n"
    assert judge(parse_bytes(advice)).first_blocker is None
