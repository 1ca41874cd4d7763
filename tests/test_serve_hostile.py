"""Serve runs under hostile use (issue 29, ../shared/notes/hostile-modes.md S4-S9, S12, S13, S18), judged on
hand-made run directories shaped as the job writes them: a refused request is a request failure, the job's own
signals and the server's shutdown are never a root cause, a server that never became ready says so first, an engine
that dies under load is named, and a job killed mid-load is judged on the records it kept."""

from __future__ import annotations

import json

from dsv4ctl.judge.files import judge_files

from .serving_runs import BOS, SERVING, load_records, record, serve_spec, write_run

REFUSED_IDS = "error event in the stream: BadRequestError: 400: Token id 700000 is out of vocabulary"
REFUSED_LEN = ('HTTP 400 Bad Request: {"error":{"message":"This model\'s maximum context length is 512 tokens. '
               'However, your prompt contains 1900000 characters","type":"BadRequestError","code":400}}')
NOT_READY = ["Traceback (most recent call last):",
             '  File "/work/runtime/dsv4rt/server.py", line 223, in wait_ready',
             "dsv4rt.server.ServerFailed: the vLLM server (pid 6021) did not answer GET /health with 200 within "
             "serve.ready_timeout_s=3"]


def findings(v) -> list[str]:
    return v.evidence["serve"]["judgement"]["findings"]


def raw_line(raw, startswith: str) -> int:
    return next(i for i, line in enumerate(raw.read_text().splitlines(), 1) if line.startswith(startswith))


def refused_run(tmp_path, error: str, server_log: str):
    records = [record(i, send_s=0.01 * i, error=error) for i in range(4)]
    return write_run(tmp_path, records, spec=serve_spec(num_prompts=4), server_log=server_log, py_exit=2,
                     verdict=f"INCOMPLETE (request 0 failed: {error[:40]})")


def test_refused_requests_are_request_failures_while_the_server_stayed_up(tmp_path):
    # S4 badids/S13: vLLM refused every request (400 in the stream) and logged a traceback for each; then the job
    # stopped it, and its shutdown logged a spurious EngineDeadError
    raw = refused_run(tmp_path, REFUSED_IDS, "server-refused-requests.log")
    v = judge_files(raw)
    assert v.status == "incomplete" and not v.passed, v.reasons
    assert v.first_blocker.kind == "request_error"
    assert v.first_blocker.message == f"request 0 failed: {REFUSED_IDS}"
    assert v.first_blocker.line == raw_line(raw, "DSV4_REQUEST_ERROR")  # S13: not "line 0"
    assert not any("ended the" in r or r.startswith("Python exited") for r in v.reasons), v.reasons
    said = findings(v)
    assert any("at line 17 for a request it refused; the server stayed up: vllm.exceptions.VLLMValidationError"
               in f for f in said), said
    assert any("at line 36 during the server's shutdown (begun at line 28), not counted" in f for f in said), said


def test_refused_requests_in_a_log_without_the_jobs_stop_line(tmp_path):
    # runs from before the job marked its stop: vLLM's own shutdown line is where the shutdown began
    raw = refused_run(tmp_path, REFUSED_IDS, "server-refused-requests.log")
    log = tmp_path / "server.log"
    log.write_text("".join(line for line in log.read_text().splitlines(True) if not line.startswith("### dsv4:")))
    v = judge_files(raw)
    assert v.status == "incomplete" and v.first_blocker.kind == "request_error", v.reasons
    assert any("during the server's shutdown (begun at line 28)" in f for f in findings(v))


def test_a_prompt_over_max_model_len_with_a_clean_server_log(tmp_path):
    # S4 huge: HTTP 400 for every request, nothing in server.log: it was "crashed" with an empty first blocker
    v = judge_files(refused_run(tmp_path, REFUSED_LEN, "server-clean.log"))
    assert v.status == "incomplete" and v.first_blocker.message.startswith("request 0 failed: HTTP 400 Bad Request")
    assert not any(r.startswith("Python exited") for r in v.reasons)


def not_ready_run(tmp_path, server_log: str | None, tail: list[str] = NOT_READY):
    raw = write_run(tmp_path, [], server_log=server_log, ready_s=None, verdict=None, py_exit=1, raw_tail=tail)
    (tmp_path / "serve-requests.jsonl").unlink()
    return raw


def test_a_server_that_never_became_ready_says_so_first(tmp_path):
    # S5: the job's SIGINT at the ready timeout interrupted the server's imports: a KeyboardInterrupt traceback
    for with_stop_line in (False, True):
        run = tmp_path / str(with_stop_line)
        raw = not_ready_run(run, "server-sigint-at-startup.log")
        if with_stop_line:
            log = run / "server.log"
            log.write_text("### dsv4: the job stops the server (pid 6021, up and serving) with SIGINT\n"
                           + log.read_text())
        v = judge_files(raw)
        assert v.status == "crashed" and not v.passed
        assert v.reasons[0].startswith("the vLLM server never became ready: ") and "ready_timeout_s=3" in v.reasons[0]
        assert "did not answer GET /health" in v.first_blocker.message
        assert not any("KeyboardInterrupt" in r or "frozen" in r for r in v.reasons), v.reasons
        assert any("from the job's own signal" in f or "during the server's shutdown" in f for f in findings(v))


def test_a_server_that_died_before_ready_keeps_server_logs_root_cause(tmp_path):
    died = [*NOT_READY[:2], "dsv4rt.server.ServerFailed: the vLLM server (pid 6021) exited with code 1 before it was "
            "ready; see server.log above"]
    v = judge_files(not_ready_run(tmp_path, "server-engine-process-died.log", died))
    assert v.status == "crashed" and v.reasons[0].startswith("the vLLM server never became ready")
    assert "Engine process (pid 5188) died" in v.first_blocker.message
    assert v.first_blocker.evidence[0].startswith("server.log line ")


def test_a_port_held_by_another_process_is_named(tmp_path):
    # S6: checked before the server starts, so no server.log and no other process's /health taken for ours
    held = [*NOT_READY[:2], "dsv4rt.server.ServerFailed: serve.port 38556 is in use by another process (pid 4242): "
            "the server was not started"]
    v = judge_files(not_ready_run(tmp_path, None, held))
    assert v.status == "crashed" and "serve.port 38556 is in use by another process" in v.first_blocker.message
    assert v.reasons[0].startswith("the vLLM server never became ready")


def test_an_engine_fatal_error_under_load_is_the_root_cause(tmp_path):
    # S9: 20,000 streams at once; the API server logged a KeyError first, then EngineCore died; TIMEOUT killed the
    # job before its blocks, verdict and PY_EXIT
    records = load_records(6) + [record(i, send_s=1.0, error=f"error event in the stream: EngineDeadError: 500: "
                                                             "EngineCore encountered an issue") for i in range(6, 9)]
    v = judge_files(write_run(tmp_path, records, server_log="server-flood-engine-fatal.log", verdict=None,
                              py_exit=None))
    assert v.status == "crashed" and not v.passed
    assert v.first_blocker.message.startswith("RuntimeError: CPU Generator does not use offset"), v.first_blocker
    assert v.reasons[0] == ("server.log: python error at line 27 ended the engine: RuntimeError: CPU Generator does "
                            "not use offset")
    assert not any("KeyError" in r for r in v.reasons)


def test_a_job_killed_mid_load_is_judged_on_the_records_it_kept(tmp_path):
    # S8: records appended as requests ended (completion order), the job killed before printing anything else; one
    # of them collapsed to BOS: the offline rules judge the records when raw.log has no blocks
    records = load_records(12)[:9]
    records[4] = record(4, send_s=records[4]["send_s"], ids=[150] + [BOS] * 7)
    shuffled = records[3:] + records[:3]
    v = judge_files(write_run(tmp_path, shuffled, verdict=None, py_exit=None))
    assert v.status == "incomplete" and not v.passed
    assert v.metrics["completed"] == 9
    assert any("3 of 12 requests have no record" in r for r in v.reasons), v.reasons
    assert any(r.startswith("request 4: a run of 7 BOS tokens") for r in v.reasons), v.reasons
    assert any("the offline rules judged the 9 record(s)" in f for f in findings(v))


def test_request_indices_are_the_requests_own(tmp_path):
    # S12: requests 0 and 2 refused, 1 and 3 answered: the table shows 1 and 3, not 0 and 1
    records = [record(i, send_s=0.01 * i, error=REFUSED_IDS) if i % 2 == 0 else record(i, send_s=0.01 * i)
               for i in range(4)]
    v = judge_files(write_run(tmp_path, records, spec=serve_spec(num_prompts=4), py_exit=2, verdict="INCOMPLETE"))
    assert [r.index for r in v.requests] == [1, 3]
    assert v.first_blocker.message.startswith("request 0 failed")


def test_a_soak_that_sent_no_request_is_incomplete_not_crashed(tmp_path):
    # S18: duration_s 0.001 ended before the first send; the job said COHERENT and exited 2
    spec = serve_spec(duration_s=0.001, memory_limit_mib=1000)
    v = judge_files(write_run(tmp_path, [], spec=spec, py_exit=2, verdict="COHERENT (fewer than 3 memory samples)"))
    assert v.status == "incomplete" and not v.passed
    assert v.first_blocker.message == "the soak sent no request in duration_s=0.001"
    assert not any(r.startswith("Python exited") for r in v.reasons)


def test_fixture_manifest_lists_every_server_log():
    manifest = json.loads((SERVING / "manifest.json").read_text())
    assert {p.name for p in SERVING.glob("*.log")} == set(manifest["files"])


def test_a_missing_request_is_named_with_the_count_printed(tmp_path):
    # S19 (the offline judge: rules._missing_reason, and the scan numbering a block by its `REQUEST: N` line):
    # "no results were printed" when 9 of 10 were
    lines = ["### STAGE: generate", "ENGINE_READY in 1.0s",
             'DSV4_EXPECT: {"max_tokens": 4, "ignore_eos": true, "n_requests": 10}']
    for i in range(10):
        if i not in (5,):
            lines += [f"REQUEST: {i}", f"TOKEN_IDS: {[100 + i, 101 + i, 102 + i, 103 + i]}", "FINISH_REASON: length"]
    lines += ['DSV4_METRICS: {"gen_s": 1.5}', "DSV4_VERDICT: COHERENT", "PY_EXIT=0"]
    (tmp_path / "raw.log").write_text("\n".join(lines) + "\n")
    v = judge_files(tmp_path / "raw.log")
    assert v.status == "incomplete" and "request 5 has no result (9 of 10 printed)" in v.reasons, v.reasons
    assert [r.index for r in v.requests] == [0, 1, 2, 3, 4, 6, 7, 8, 9]
