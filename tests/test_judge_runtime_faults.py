"""Accelerator runtime faults printed as bare text (issue 21, pass 5): Ascend's error-code lines and task-exception
records are device errors and its 'Inner error is reported as above' a wrapper; Vulkan's and Metal's out-of-memory
words are OOM."""

from __future__ import annotations

from dsv4ctl.judge.classify import exception_family, is_wrapper, line_error, signature_family
from dsv4ctl.judge.rules import judge
from dsv4ctl.judge.scan import parse_bytes


def test_ascend_error_codes_and_task_exceptions_are_device_errors():
    assert line_error("EJ0001: 2025-01-01-00:00:00.000.000 Failed to initialize the HCCP process.")[0] == "device"
    assert line_error("[ERROR] RUNTIME(1,python):x ReportExceptProc:Task exception! device_id=0, retCode=0x91")[0] \
        == "device"
    assert line_error("E1201 12:00:00.123 glog record of another kind") is None  # glog's level letter, not a code
    assert is_wrapper("RuntimeError: The Inner error is reported as above. The process exits for this inner error")


def test_the_error_code_line_is_the_root_cause_not_the_wrapper():
    log = ("RuntimeError: The Inner error is reported as above. The process exits for this inner error.\n"
           "EZ1234: 2025-01-01-00:00:00.000.000 Device memory check failed on stream 3.\n")
    verdict = judge(parse_bytes(log.encode()))
    assert verdict.status == "device_error" and verdict.first_blocker.line == 2


def test_vulkan_and_metal_out_of_memory_words():
    for line in ("ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory",
                 "ggml_vulkan: Device memory allocation of size 4294967296 failed.",
                 "error: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)"):
        assert signature_family(line) == "oom" or exception_family(line) == "oom", line
    verdict = judge(parse_bytes(b"ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory\n"))
    assert verdict.status == "crashed" and verdict.first_blocker.family == "oom"
