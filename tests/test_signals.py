"""Fatal signals and runtime faults (issue 21, point 3): crashes that are not Python exceptions come out `crashed`
(family `signal`) or `device_error`, never `incomplete`; a bare `Killed` is attributed by the scheduler's record."""

from __future__ import annotations

import pytest

from dsv4ctl.judge.rules import judge
from dsv4ctl.judge.sacct import parse_sacct, summarise
from dsv4ctl.judge.scan import parse_bytes

START = "INFO 01-02 03:04:05 [core.py:61] Initializing a V1 LLM engine with config: model='/m/tiny'\n"


def verdict_of(text: str, sacct: str | None = None):
    scheduler = summarise(parse_sacct(sacct), "77") if sacct else None
    return judge(parse_bytes(text.encode()), scheduler)


@pytest.mark.parametrize("line, kind", [
    ("Fatal Python error: Segmentation fault", "fatal_signal"),
    ("Fatal Python error: Aborted", "fatal_signal"),
    ("*** SIGSEGV received at time=1700000000 on cpu 3 ***", "fatal_signal"),
    ("*** SIGABRT received at time=1700000000 on cpu 3 ***", "fatal_signal"),
    ("[2025-01-02 03:04:05,100 E 811 811] logging.cc:440: *** SIGSEGV received at time=1 on cpu 9 ***", "fatal_signal"),
    ("[host:77  :0:77] Caught signal 11 (Segmentation fault: address not mapped to object at address (nil))",
     "fatal_signal"),
    ("Segmentation fault (core dumped)", "fatal_signal"),
    ("Aborted (core dumped)", "fatal_signal"),
    ("terminate called after throwing an instance of 'std::runtime_error'", "fatal_signal"),
    ("Killed", "killed"),
    ("run.sh: line 9: 40433 Killed                  python serve.py", "killed"),
    ("Loading checkpoint shards:  50%|#####     | 2/4 [00:09<00:09,  4.52s/it]Killed", "killed"),
    ("srun: error: node3: task 0: Exited with exit code 137", "killed"),
])
def test_fatal_signals_are_crashes_of_family_signal(line, kind):
    v = verdict_of(START + line + "\n")
    assert (v.status, v.first_blocker.family, v.first_blocker.kind, v.first_blocker.line) == \
        ("crashed", "signal", kind, 2)
    assert v.first_blocker.message.strip()


@pytest.mark.parametrize("line", [
    "kernel: NVRM: Xid (PCI:0000:17:00): 79, pid=4242, name=python3, GPU has fallen off the bus.",
    "[ 812.11] NVRM: Xid (PCI:0000:17:00): 48, pid=4242, name=python3, An uncorrectable double bit error",
    "Memory access fault by GPU node-4 (Agent handle: 0x5a1c2e0) on address 0x7f00aa000000. Reason: Unknown.",
    "The error from device(chipId:1, dieId:0), serial number is 3, there is an exception of aicore error, core id 2",
    "EZ9999: Inner Error!",
    "[ERROR] 2025-01-02-03:04:05 (PID:91, Device:0, RankID:-1) ERR00100 PTA call acl api failed",
    "[W102 03:04:05.5 NPUStream.cpp:650] Warning: NPU warning, error code is 507035[Error]:",
    "RuntimeError: rtKernelLaunchWithHandleV2 failed: 507035",
])
def test_accelerator_runtime_faults_printed_as_bare_text_are_device_errors(line):
    v = verdict_of(START + line + "\n")
    assert (v.status, v.first_blocker.family, v.first_blocker.line) == ("device_error", "device", 2)


def test_a_signal_after_a_python_error_or_a_collective_timeout_is_its_echo():
    python_first = verdict_of("ValueError: bad shard index 7\nSegmentation fault (core dumped)\n")
    assert (python_first.first_blocker.family, python_first.first_blocker.line) == ("python", 1)
    watchdog = verdict_of("[rank3]:[E102 03:04:05.1 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective "
                          "operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600000 milliseconds\n"
                          "terminate called after throwing an instance of 'c10::DistBackendError'\n")
    assert (watchdog.first_blocker.family, watchdog.first_blocker.line) == ("collective", 1)


def test_a_signal_explains_the_wrappers_and_deaths_after_it():
    v = verdict_of("Fatal Python error: Segmentation fault\n"
                   "ERROR 01-02 03:04:06 [multiproc_executor.py:140] Worker proc VllmWorker-1 died unexpectedly\n"
                   "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n")
    assert (v.first_blocker.family, v.first_blocker.line) == ("signal", 1)


SACCT = "JobID|State|ExitCode|Elapsed|MaxRSS\n77|{state}|0:9|00:10:00|\n77.batch|{state}|0:9|00:10:00|61000000K\n"


def test_killed_with_the_schedulers_oom_record_is_an_oom():
    v = verdict_of(START + "Killed\n", SACCT.format(state="OUT_OF_MEMORY"))
    assert (v.status, v.first_blocker.family, v.first_blocker.line) == ("crashed", "oom", 2)


def test_killed_at_the_time_limit_is_the_schedulers_stop():
    v = verdict_of(START + "Killed\n", SACCT.format(state="TIMEOUT"))
    assert (v.status, v.first_blocker.kind, v.first_blocker.family) == ("incomplete", "killed", "scheduler")


def test_killed_without_a_scheduler_record_is_a_signal():
    v = verdict_of(START + "Killed\n")
    assert (v.status, v.first_blocker.family) == ("crashed", "signal")


def test_the_kernels_oom_killer_is_an_oom():
    v = verdict_of(START + "[26002.10] Out of memory: Killed process 5121 (python3) total-vm:81234567kB\n")
    assert (v.status, v.first_blocker.family, v.first_blocker.kind) == ("crashed", "oom", "oom_kill")


def test_a_wall_of_500s_is_an_engine_death_and_yields_to_the_engine_error():
    wall = "".join(f'INFO:     10.0.0.{i}:5000 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error\n'
                   for i in range(8))
    alone = verdict_of(wall)
    assert (alone.status, alone.first_blocker.kind, alone.first_blocker.line) == ("crashed", "http_500", 1)
    assert "8 requests answered with a server error" in alone.first_blocker.message
    engine = verdict_of("ERROR 01-02 03:04:05 [core.py:9] RuntimeError: CUDA error: an illegal memory access was "
                        "encountered\n" + wall)
    assert (engine.status, engine.first_blocker.line) == ("device_error", 1)
    few = verdict_of(wall.splitlines(keepends=True)[0] * 2)
    assert few.status == "incomplete"


def test_words_about_signals_in_prose_are_not_signals():
    v = verdict_of("INFO 01-02 03:04:05 [ray.py:1] (1) The process is killed by SIGKILL by OOM killer due to high "
                   "memory usage.\nINFO 01-02 03:04:05 [x.py:1] Killed 3 idle workers to free memory\n")
    assert v.first_blocker is None and v.status == "incomplete"
