"""Shapes of the ninth pass (issue 21, tuned on a fresh tuning harvest, benchmarks/corpus/tuning4 cases, measured on
heldout3, frozen before): training and scoring metrics gone NaN, a chat template written on past the answer, a Ray
actor's printed answer, a kernel's segfault report said on every line, argparse/pydantic/linker/KV-cache start-up
errors, logfmt and zerolog records, NCCL's warnings and nccl-tests' failures, the CUDA runtime's words in a status
table, amdgpu driver errors, Ascend codes after a name, 5xx walls, a Rust launcher's error, TensorRT-LLM's run.py
output, the record just above a headless traceback, torchrun's report of a killed child. Every log here is written
for the test with made-up values."""

from __future__ import annotations

import pytest

from dsv4ctl.judge.rules import judge
from dsv4ctl.judge.scan import parse_bytes
from dsv4ctl.judge.textrules import text_problems


def verdict_of(text: str):
    return judge(parse_bytes(text.encode()))


def test_metrics_gone_nan_are_nonfinite():
    log = "{'loss': 0.4312, 'grad_norm': 1.25, 'epoch': 0.1}\n{'loss': 0.0, 'grad_norm': nan, 'epoch': 0.2}\n"
    v = verdict_of(log)
    assert v.status == "nonfinite" and "'grad_norm': nan" in v.first_blocker.message
    assert verdict_of("{'rewards/chosen': -0.1, 'logits/rejected': inf, 'epoch': 1.0}\n").status == "nonfinite"
    assert verdict_of("{'loss': 0.4312, 'grad_norm': 1.25, 'learning_rate': 2e-05}\n").status == "incomplete"


def test_a_chat_template_written_on_past_the_answer():
    turn = ("<|im_start|>user\nCan you book a table for two?\n<|im_end|>\n<|im_start|>assistant\n"
            "Sure. For what time?\n<|im_end|>\n<|im_start|>user\nSeven.\n<|im_end|>\n")
    assert any("said again" in p for p in text_problems("Noted.\n<|im_end|>\n" + turn * 2 + "<|im_start|>as", 16))
    prompt = ("<|im_start|>user\nWhat is two plus two?\n<|im_end|>\n<|im_start|>assistant\nFour.\n<|im_end|>\n"
              "<|im_start|>user\nAnd three plus three?\n<|im_end|>\n<|im_start|>assistant\nSix.\n<|im_end|>\n")
    assert text_problems(prompt, 16) == []


def test_an_answer_printed_by_a_ray_actor_is_judged():
    soup = ("(RolloutWorker pid=4410)  lookсияAlways 邮件 buildersXA theirάση Hanover_Framework κι 北京 retail\n"
            "(RolloutWorker pid=4410) ScalarTypeяз PARAMETER 天气 Glasgowλαιο worthy Кан\n")
    assert verdict_of(soup).status == "degenerate"
    fluent = ("(RolloutWorker pid=4410) The capital of France is Paris, which is also its largest city and sits on\n"
              "(RolloutWorker pid=4410) the river Seine in the north of the country.\n")
    assert verdict_of(fluent).status == "incomplete"


def test_a_segfault_report_said_on_every_line_keeps_its_words():
    line = ("Apr  2 10:1{0}:00 gpu7 kernel: [1200{0}.5] llama-srv[77{0}]: segfault at 4fa0 ip 00007f11aa22bb33 sp "
            "00007ffe1c2d3e40 error 4 in libcuda.so.550.90[7f11a9e00000+c00000]\n")
    v = verdict_of("".join(line.format(i) for i in range(7)))
    assert v.status == "crashed" and v.first_blocker.family == "signal" and "segfault at 4fa0" in v.first_blocker.message


@pytest.mark.parametrize("log, family, want", [
    ("usage: serve [-h] [--port PORT]\nserve: error: unrecognized arguments: --turbo\n", "config", "unrecognized arguments"),
    ("Value error, tensor_parallel_size (3) must divide the number of attention heads (32)\n", "config", "Value error"),
    ("building kernels\n/usr/bin/ld: cannot find -lcudart_static: No such file or directory\n"
     "collect2: error: ld returned 1 exit status\n", "compile", "cannot find -lcudart_static"),
    ("(EngineCore_DP0 pid=9) INFO 01-02 03:04:05 [gpu_worker.py:290] Available KV cache memory: -1.50 GiB\n", "oom",
     "Available KV cache memory: -1.50 GiB"),
])
def test_start_up_errors_printed_without_a_traceback(log, family, want):
    v = verdict_of(log)
    assert v.status == "crashed" and v.first_blocker.family == family and want in v.first_blocker.message


def test_advice_about_cuda_errors_is_no_cuda_error():
    v = verdict_of("ValueError: max_len 8192 exceeds the model's 4096. This may lead to wrong outputs or CUDA errors.\n")
    assert v.status == "crashed" and v.first_blocker.family == "config"


def test_logfmt_and_zerolog_records_are_error_evidence():
    v = verdict_of('time=2026-03-01T10:00:00.000Z level=ERROR source=runner.go:88 msg="model failed to load" '
                   'error="runner process has terminated: exit status 2"\n')
    assert v.status == "crashed" and "model failed to load" in v.first_blocker.message
    v = verdict_of("9:41AM INF loading backend\n9:41AM ERR backend failed to start error=\"dial tcp: refused\"\n")
    assert v.status == "crashed" and "backend failed to start" in v.first_blocker.message


def test_nccl_warnings_and_nccl_tests_failures():
    log = ("node3:101:101 [0] NCCL INFO Using network IB\n"
           "node3:101:101 [0] misc/socket.cc:480 NCCL WARN socketStartConnect: Connect to 10.1.2.3<4000> failed : "
           "Connection refused\nnode3:101:101 [0] NCCL INFO init.cc:1500 -> 2\n")
    v = verdict_of(log)
    assert v.status != "incomplete" and "socketStartConnect" in v.first_blocker.message
    v = verdict_of("node3: Test NCCL failure common.cu:1200 'remote process exited or there was a network error'\n")
    assert v.status != "incomplete" and "Test NCCL failure" in v.first_blocker.message
    assert verdict_of("node3:101:101 [0] NCCL INFO Channel 00/02 : 0 1 2 3\n").status == "incomplete"


def test_the_cuda_runtimes_words_in_a_status_table():
    log = ("| Model    | Version | Status                                                                |\n"
           "| resnet50 | 1       | UNAVAILABLE: Internal: no kernel image is available for execution on the device |\n")
    assert verdict_of(log).status == "device_error"


def test_amdgpu_driver_errors_and_ascend_codes_after_a_name():
    assert verdict_of("[  88.1] amdgpu: Failed to map wptr bo to GART\n").status == "device_error"
    assert verdict_of("[  88.2] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout\n").status == "device_error"
    v = verdict_of("[PID: 12] 2026-01-01-00:00:00.1 Connect_Timeout(EI0002): Connecting to the remote rank timed out.\n")
    assert v.status == "device_error"


def test_a_wall_of_5xx_answers_is_a_failed_run():
    line = '2026-03-01 10:00:0{0},100 - INFO - HTTP Request: POST http://10.0.0.5/v1/chat/completions "HTTP/1.1 503 Service Unavailable"\n'
    assert verdict_of("".join(line.format(i) for i in range(6))).status == "crashed"
    assert verdict_of("".join(line.format(i) for i in range(2))).status == "incomplete"


def test_a_rust_launchers_error():
    log = "2026-01-01T00:00:00Z  INFO shard-manager: launcher: Shard terminated rank=0\nError: ShardCannotStart\n"
    v = verdict_of(log)
    assert v.status == "crashed" and "ShardCannotStart" in v.first_blocker.message


def test_tensorrt_llm_run_py_output():
    v = verdict_of('Input [Text 0]: "<s> The weather today is"\nOutput [Text 0 Beam 0]: "' + "z" * 8 + "0" * 40 + '"\n')
    assert v.status == "degenerate"
    ok = verdict_of('Input [Text 0]: "<s> The weather today is"\nOutput [Text 0 Beam 0]: "sunny, with a light breeze from the west."\n')
    assert ok.status == "coherent"


def test_the_record_just_above_a_headless_traceback_counts_by_its_level():
    log = ("ERROR 2026-01-01 00:00:01.5 engine_factory.py:40] FP8 weights need a GPU of compute capability 8.9 or "
           "newer; this one is 8.0.\nTraceback (most recent call last):\n  File \"/app/main.py\", line 5, in <module>\n"
           "    main()\n")
    v = verdict_of(log)
    assert v.status == "crashed" and "compute capability 8.9" in v.first_blocker.message


def test_torchrun_names_the_killed_child():
    log = ("[2026-01-01 00:00:00,000] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 41 "
           "closing signal SIGTERM\n[2026-01-01 00:00:01,000] torch.distributed.elastic.multiprocessing.api: [ERROR] "
           "failed (exitcode: -9) local_rank: 1 (pid: 42) of binary: /usr/bin/python\n"
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
           "train.py FAILED\n  exitcode  : -9 (pid: 42)\n  error_file: <N/A>\n"
           "  traceback : Signal 9 (SIGKILL) received by PID 42\n")
    v = verdict_of(log)
    assert v.status == "crashed" and ("-9" in v.first_blocker.message or "SIGKILL" in v.first_blocker.message)
