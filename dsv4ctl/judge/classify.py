"""What counts as what: plain tables of signatures. The scanner finds candidate lines; these tables say which error
family a line or exception belongs to, whether it is a generic wrapper around a root cause printed elsewhere, and
whether it is noise. Read top to bottom: the first matching row wins.

Families (`first_blocker.family`): device, oom, collective, compile, config, python, signal, worker_death,
scheduler, setup. `signal` is a process ended by a fatal signal rather than a Python exception: a segfault or an
abort (with or without Python's faulthandler, C++ frame dumps, `core dumped`, `terminate called after throwing`),
or a bare `Killed` (SIGKILL, exit 137 / -9; the scheduler's record turns it into `oom` or a scheduler kill).
Accelerator runtime faults printed as bare text (ROCm/HIP, CUDA's Xid, Ascend's aicore/ACL errors) are `device`.
"""

from __future__ import annotations

import re

from . import levels

FAMILIES = ("device", "oom", "collective", "compile", "config", "python", "signal", "worker_death", "scheduler",
            "setup")

# Which family names the root cause when several are present: the earliest error of the first family here.
# A device fault explains the OOM-looking and collective errors it triggers on other ranks; a collective timeout
# is usually the echo of a rank that failed for a more specific reason; worker deaths and scheduler kills are
# consequences; a setup failure stops everything before Python starts, so it is alone anyway.
# A fatal signal explains the deaths of the processes waiting on it, but it is often itself the echo of an error
# printed before it: NCCL's watchdog aborts the process after a collective timeout (`terminate called after
# throwing an instance of 'c10::DistBackendError'`), a process segfaults while shutting down after an exception.
SPECIFICITY = ("device", "oom", "compile", "config", "python", "collective", "signal", "worker_death", "scheduler",
               "setup")

# Accelerator runtime faults: ROCm/HIP, CUDA (driver Xid lines), Ascend (aicore/aicpu faults, ACL calls, the
# runtime's 507xxx result codes, `EZ9999: Inner Error!`-style error codes).
_ASCEND = (r"aicore (?:exception|error|execution)|exception of \w+ aicore error|aicpu (?:exception|execution)"
           r"|[Vv]ector core execution timed out|\bE[A-Z]\d{4}: (?:Inner Error|\[PID)|PTA call acl api failed"
           r"|NPU function error|runtime result = 5\d{5}|error code is 5\d{5}|\brt\w+ failed: 5\d{5}"
           # the runtime's error codes at a line's start (`EJ0001: ... Failed to initialize the HCCP process`), its
           # task-exception report (`ReportExceptProc:Task exception! ... retCode=0x91`)
           r"|^E[A-Z]\d{4}: \S|ReportExceptProc|Task exception! device_id|the model stream execute failed"
           r"|\w\(E[A-Z]\d{4}\): \S")  # a code after its name: `Get_Socket_Timeout(EI0006): Getting socket ...`
_XID = r"NVRM: Xid|\bXid \(PCI:|fallen off the bus"
# The amdgpu kernel driver's fault reports (dmesg): a GPU page fault, its VM_L2 protection fault status, a ring
# that timed out, a GPU reset.
_AMDGPU = (r"amdgpu\b.{0,80}?(?:\[\w+hub\] (?:no-)?retry page fault|page fault \(src_id|VM_L2_PROTECTION_FAULT"
           r"|from IH client 0x\w+ \(UTCL2\)|ring \S+ timeout|GPU reset begin|GPU fault detected"
           r"|\*ERROR\*|: Failed to (?:map|pin|alloc|create|init)\w* )")
# Tenstorrent's tt-metal runtime asserts (`TT_THROW: ...`, `TT_FATAL`, records citing its assert.hpp).
_TT = r"\bTT_(?:THROW|FATAL)\b|\(assert\.hpp:\d+\)"

# Exception text ("Type: message", chained links included) -> family. First match wins; an exception that matches
# no row is `python`.
EXCEPTION_FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("oom", re.compile(
        r"OutOfMemoryError|out of memory|No available memory for the cache blocks|KV cache is needed, which is "
        r"larger than the available KV cache memory|larger than the maximum number of tokens that can be stored in"
        r" KV cache|CUDA_ERROR_OUT_OF_MEMORY|hipErrorOutOfMemory|Insufficient memory|not enough memory"
        # Vulkan's and Metal's words (llama.cpp's ggml backends)
        r"|ErrorOutOf(?:Device|Host|Pool)Memory|Device memory allocation of size \d+ failed"
        r"|CallbackErrorOutOfMemory", re.I)),
    ("collective", re.compile(
        r"NCCL|RCCL|ProcessGroupNCCL|ProcessGroupGloo|\bgloo\b|collective operation timeout|DistBackendError"
        r"|DistNetworkError|DistStoreError|c10d|TCPStore|Connection closed by peer|Connection reset by peer"
        r"|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|barrier timed out")),
    ("device", re.compile(
        r"HIP error(?!s)|CUDA error(?!s)|Cuda error(?!s)|hipError\w+|cudaError\w+|illegal memory access|illegal instruction"
        r"|[Dd]evice-side assert(?!ions\.)|HSA_STATUS_ERROR|Memory access fault|VMFault|no kernel image is available"
        r"|invalid device function|misaligned address|unspecified launch failure|CUBLAS_STATUS_(?!SUCCESS)\w+"
        r"|CUDNN_STATUS_(?!SUCCESS)\w+|rocblas_status_(?!success)\w+|hipblaslt error|AcceleratorError"
        r"|CUDA driver error|GPU is lost|Xid \d+|" + _ASCEND + "|" + _XID + "|" + _AMDGPU + "|" + _TT)),
    ("compile", re.compile(
        r"CompilationError|PassManager::run failed|torch\._dynamo|torch\._inductor|InductorError"
        r"|BackendCompilerFailed|TorchRuntimeError|ptxas|\bnvcc\b|\bhipcc\b|Failed to find C compiler|LLVM ERROR"
        r"|triton\.compiler|PTX codegen|hipModuleLoad|CUDA graph capture failed|MLIR"
        r"|OutOfResources|out of resource: shared memory")),
    ("config", re.compile(
        r"ValidationError|not supported|[Uu]nsupported|only supports?\b|does not support|is not valid"
        r"|not a valid|[Ii]nvalid (?:value|choice|argument|configuration)|must be (?:one of|a |an |divisible|"
        r"greater|less|positive|set)|is greater than|exceeds the|max_model_len|max_num_batched_tokens"
        r"|Unknown (?:quantization|model|argument|architecture)|unrecognized arguments|ArgumentError"
        r"|trust_remote_code|not found in the model|[Mm]odel architectures? .* (?:not|are not) supported"
        r"|is_fa_version_supported|is not divisible by|no attention backend|Cannot find any of"
        r"|No adapter found|does not exist|No such file or directory|could not be found|was not found")),
)

# Lines outside any traceback that are errors on their own (C++/driver/runtime messages, watchdogs, deaths).
# (family, kind, pattern); searched in the line's text after its prefixes.
LINE_ERRORS: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("device", "gpu_memory_fault", re.compile(r"Memory access fault by GPU|VMFault")),
    ("device", "hsa_error", re.compile(r"HSA_STATUS_ERROR\w*|Queue 0x[0-9a-f]+ aborting with error")),
    ("device", "device_assert", re.compile(r"Device-side assert|[Dd]evice-side assertion .*failed"
                                           # a kernel's own assert: `Indexing.cu:1236: ...: block: [0,0,0], thread:
                                           # [96,0,0] Assertion `srcIndex < srcSelectDimSize` failed.`
                                           r"|block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion .{0,200}failed")),
    # other accelerators' drivers and runtimes: Gaudi's habanalabs driver, Apple's MPS/Metal
    ("device", "accelerator_fault", re.compile(r"\bhabanalabs \S+: .{0,80}(?:[Ff]ailed|[Ee]rror|timeout|not usable)"
                                               r"|failed assertion `\[MPS|\bMTLCommandBuffer\w* .{0,40}[Ee]rror"
                                               r"|kIOGPUCommandBufferCallbackError\w+")),
    ("device", "device_error", re.compile(r"Failed: (?:Cuda|CUDA|HIP) error|CUDA driver error|GPU is lost")),
    ("device", "xid", re.compile(_XID)),
    ("device", "amdgpu_fault", re.compile(_AMDGPU)),
    ("device", "ascend_error", re.compile(_ASCEND)),
    ("device", "runtime_assert", re.compile(_TT)),
    # the CUDA runtime's words for its errors, wherever a program printed them (a server's status table, a log record)
    # (not where `CUDA error:` names them: exceptions and their reprs are read as such, with their tracebacks)
    ("device", "cuda_error_text", re.compile(
        r"^(?!.*(?:CUDA|Cuda|HIP) error).*?(?:the provided PTX was compiled with an unsupported toolchain|no kernel image is available for execution"
        r"|an illegal memory access was encountered|unspecified launch failure|device-side assert triggered"
        r"|cudaError[A-Z]\w+ \(error \d+\))")),
    ("collective", "collective_timeout", re.compile(r"Watchdog caught collective operation timeout")),
    # nccl-tests / rccl-tests: `host: Test NCCL failure common.cu:1285 'internal error ...'`; NCCL's own warnings
    # that a connection or a call failed (`NCCL WARN socketStartConnect: Connect to ... failed`)
    ("collective", "collective_error", re.compile(r"\bTest NCCL failure \S+ '|\bNCCL WARN .{0,200}?(?:[Ff]ailed|[Ee]rror"
                                                  r"|[Tt]imeout|[Tt]imed out|[Aa]bort)")),
    ("collective", "collective_error", re.compile(r"ncclInternalError|ncclSystemError|ncclUnhandledCudaError"
                                                  r"|NCCL error in:")),
    ("worker_death", "worker_died", re.compile(r"died unexpectedly|A worker died or was killed|\bpid \d+ died, exit code: -?\d+"
                                               r"|killed due to memory pressure|Worker process .* died"
                                               r"|Engine process \(pid \d+\) died")),  # V0 serve's MQLLMEngine
    ("worker_death", "fatal_check", re.compile(r"\bCheck failed: ")),  # a C++ process's fatal CHECK (glog, Ray)
    ("setup", "setup_error", re.compile(r"Lmod has detected the following error|: command not found$")),
    # argparse's last words (`vllm: error: unrecognized arguments: --omni`), pydantic's (`Value error, ...`)
    ("config", "usage_error", re.compile(r"^[\w./\-]+: error: (?:unrecognized arguments|argument |the following "
                                         r"arguments are required|invalid choice)|^\s*Value error, \S")),
    # a link that failed (an extension or a JIT kernel built at start-up: `ld: cannot find -lcuda`)
    ("compile", "link_error", re.compile(r"(?:^|/)ld(?:\.\w+)?: cannot find -l\S+|collect2: error: ld returned")),
    # vLLM's profile run left nothing for the KV cache
    ("oom", "kv_cache_negative", re.compile(r"Available KV cache memory: -\d")),
    # A container that never started (docker's daemon refusing the GPU request), a build that failed (pip, CMake).
    ("setup", "container_error", re.compile(r"^(?:docker: )?Error response from daemon: |nvidia-container-cli: \w+ error")),
    ("setup", "build_error", re.compile(r"^\s*(?:CMake Error at |ninja: build stopped: |ERROR: Failed building wheel for )")),
    # Another runtime's fatal crash: a Go panic (gin's per-request recovery prints the runtime error bare) or a
    # Rust panic.
    ("signal", "runtime_panic", re.compile(r"^panic: \S|^runtime error: |^fatal error: [a-z]"
                                            r"|^thread '[^']*' panicked at ")),
    # A Rust launcher's main returning its error (TGI's `Error: WebserverFailed`, `Error: ShardCannotStart`)
    ("worker_death", "launcher_error", re.compile(r"^Error: [A-Z][a-z]+[A-Z]\w*$"
                                                  # a Go command's last word (`Error: could not create directory ...`)
                                                  r"|(?:^|\]: )Error: [a-z]\w*(?: \w+)* ")),
    # llama.cpp / ollama: the model never loaded, or the runner under the server died
    ("config", "model_load_error", re.compile(r"\berror loading model\b|\bfailed to load model\b")),
    ("worker_death", "runner_died", re.compile(r"\b(?:llama runner|llama-server|runner) process has terminated"
                                               r"|\berror starting (?:the )?(?:llama )?runner\b")),
    # Kubernetes: a pod that keeps dying, or was killed for memory (`kubectl get pods`, events)
    ("oom", "pod_oom_killed", re.compile(r"\bOOMKilled\b")),
    ("worker_death", "pod_crashloop", re.compile(r"\bCrashLoopBackOff\b")),
    # TensorFlow's kernels: `OP_REQUIRES failed at nccl_create.cc:112 : Internal: unhandled system error`
    ("python", "op_failed", re.compile(r"\bOP_REQUIRES failed at \S+ : \w+")),
    ("oom", "oom_kill", re.compile(r"Out of memory: Kill(?:ed)? process|invoked oom-killer|oom_kill_process"
                                   r"|^srun: error: \S+: tasks? [\d,\-]+: Out Of Memory")),
    ("signal", "fatal_signal", re.compile(
        r"Fatal Python error: (?:Segmentation fault|Aborted|Bus error|Floating point exception|Illegal instruction)"
        r"|\*\*\* ?SIG(?:SEGV|ABRT|BUS|FPE|ILL)\b|\bSIG(?:SEGV|ABRT|BUS|FPE|ILL)\b(?: \(@[^)]*\))? received"
        r"|received signal SIG(?:SEGV|ABRT|BUS|FPE|ILL)|[Cc]aught signal \d+ \(SIG|Segmentation fault|core dumped"
        r"|terminate called after throwing an instance of|signal (?:11|6) \(SIG(?:SEGV|ABRT)\)"
        # the kernel's own report (dmesg / journal): `python[4242]: segfault at 7f00 ip 00007f.. sp .. error 4 in ...`
        r"|\bsegfault at [0-9a-f]+ ip [0-9a-f]+ sp [0-9a-f]+ error \d+"
        # systemd's (`Main process exited, code=dumped, status=11/SEGV`), a launcher's exit code of a signal
        # (`Job entrypoint command failed with exit code -11`), torchrun's `Signal 6 (SIGABRT) received by PID 42`
        r"|code=(?:dumped|killed), status=\d+/(?:SEGV|ABRT|BUS|ILL|FPE)\b"
        r"|exit(?:ed)? (?:with )?(?:status|code)[:= ]+(?:-(?:11|6|7|4|8)|13[24569])\b"  # 128+N, not 137 (a kill)
        r"|\b[Ss]ignal (?:11|6|7|4|8) \(SIG(?:SEGV|ABRT|BUS|ILL|FPE)\)"
        # MPI launchers: Open MPI's `*** Process received signal ***` / `Signal: Aborted (6)`, MPICH's banner
        r"|\*\*\* Process received signal \*\*\*|^(?:\[[^\]]*\] )?Signal: [A-Z][a-z]+(?: [a-z]+)* \(\d+\)"
        r"|BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES"
        # zsh's job control (`[1]  4242 segmentation fault  python ...`, `zsh: abort  python`), macOS's shell
        # (`Abort trap: 6`, `Segmentation fault: 11`) and its crash report's `"indicator":"Abort trap: 6"`
        r"|^(?:zsh: |\[\d+\] +\d+ )(?:segmentation fault|abort|bus error|illegal hardware instruction)\b"
        r"|\b(?:Abort trap: 6|Segmentation fault: 11|Bus error: 10|Illegal instruction: 4)\b"
        # a shell's word for its child's signal, on a line of its own (`Illegal instruction (core dumped)`)
        r"|^(?:Illegal instruction|Bus error|Aborted|Floating point exception|Trace/breakpoint trap)"
        r"(?: \(core dumped\))?$")),
    ("signal", "killed", re.compile(
        r"^(?:zsh: |\[\d+\] +\d+ )killed +\S|^Killed$|[\]|]Killed$|^(?:\S+: )?line \d+: +\d+ Killed\b|^\[\d+\]\+? +Killed +\S|exit(?:ed)? (?:with )?(?:status|code)[:= ]+137\b"
        r"|exitcode ?[:=] ?-9\b|[Ss]ignal 9 \(SIGKILL\)|received SIGKILL|return ?code ?[:=]? ?-9\b"
        r"|code=killed, status=9/KILL|[Kk]illed by signal 9\b|^=\s+EXIT CODE: (?:9|137)$")),
)

# The scheduler's own words in the log (slurmstepd): (kind, family, pattern). First match wins.
STEPD_EVENTS: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("time_limit", "scheduler", re.compile(r"CANCELLED AT \S+ DUE TO TIME LIMIT")),
    ("preempted", "scheduler", re.compile(r"CANCELLED AT \S+ DUE TO PREEMPTION")),
    ("node_fail", "scheduler", re.compile(r"DUE TO NODE FAILURE")),
    ("oom_kill", "oom", re.compile(r"oom[-_]kill event|Exceeded job memory limit|OUT_OF_MEMORY")),
    ("cancelled", "scheduler", re.compile(r"CANCELLED AT")),
)

# Generic wrappers: they report that something failed elsewhere. Chosen as the first blocker only when nothing more
# specific is in the log (a cut log may hold only the wrapper).
WRAPPERS = re.compile(
    r"Engine core initialization failed|EngineCore failed to start|Engine process failed to start"
    r"|WorkerProc failed to start|Worker failed with error|check the stack trace above|See root cause above"
    r"|See stack trace \(above\)|EngineDeadError|MQEngineDeadError|AsyncEngineDeadError|EngineGenerateError"
    r"|RayTaskError|ActorDiedError|RaySystemError|ChildProcessError|Executor failed|Got fatal signal from worker"
    r"|LLMEngine is already dead|Engine iteration timed out|CancelledError|Scheduler hit an exception"
    r"|scheduler is dead|Received sigquit from a child process|EngineCore encountered a fatal error"
    r"|^SystemExit|^KeyboardInterrupt|BrokenProcessPool|Call to collective_rpc method failed"
    r"|failed with exit code|Subprocess .* (?:failed|died)|Engine background task failed"
    r"|Future exception was never retrieved|Exception in callback|Task exception was never retrieved"
    r"|Exception in ASGI application"  # uvicorn's header over the request's traceback
    r"|ChildFailedError"  # torchrun's report that a child failed: the child's own words say why
    r"|The Inner error is reported as above"  # Ascend's PyTorch adapter: the E-code lines hold the error
    # Timeouts of a process waiting on another: the echo of a hang or a death elsewhere.
    r"|RPC call to \w+ timed out|^asyncio\.(?:exceptions\.)?TimeoutError$")

# Tracebacks that are noise, by the line printed just above them or by their text (report §11).
NOISE_BEFORE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("usage_thread", re.compile(r"_report_usage_worker|usage_lib")),
    ("shutdown", re.compile(r"^(?:Exception ignored in|Error in atexit)")),
)
NOISE_TEXT: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("shutdown", re.compile(r"libcudart is not loaded")),
    ("usage_thread", re.compile(r"_report_usage_worker")),
)


# Logger records (vLLM, SGLang, Ray, glog/c10, Ascend's `[ERROR]`, Python logging's `- ERROR -`) are error evidence
# by their level and their text: an ERROR/CRITICAL record counts when its text names an error. One whose text names
# a specific family (device, oom, collective, compile) counts like any error line; any other is weak evidence,
# chosen only when no stronger error is in the log, and never ends a run that printed its results.
NAMES_ERROR = re.compile(
    r"error|exception|\bfail(?:ed|ure|s|ing)?\b|fatal|timed out|timeout|out of memory|\bOOM\b|abort|killed|died"
    r"|\bdead\b|crash|fault|segmentation|unable to|cannot|can't|could not|couldn't|not supported|unsupported"
    r"|refused|denied|panic|\binvalid\b", re.I)
STRONG_RECORD_FAMILIES = frozenset({"device", "oom", "collective", "compile"})
ERROR_LEVELS = levels.ERROR_LEVELS


def names_error(text: str) -> bool:
    return bool(NAMES_ERROR.search(text))


def error_record(level: str | None, content: str, by_level: bool = False) -> str | None:
    """The message of an ERROR/CRITICAL logger record that names an error (any, `by_level`), else None. `level` is
    the logger head's level when the scanner took one off; otherwise a level token in the text itself is looked
    for."""
    if level is not None:
        message = content if level in ERROR_LEVELS else None
    else:
        level, message = levels.text_level(content) or (None, None)
        message = message if level in ERROR_LEVELS else None
    if message is None:
        return None
    message = message.strip()
    # A critical or fatal record is an error by its level alone (tt-metal's `| critical | Read unexpected ...`).
    return message if len(message) >= 8 and (by_level or names_error(message) or level in ("CRITICAL", "FATAL")) \
        else None


def signature_family(text: str) -> str | None:
    """`oom` or `device` when a line names an OOM or a device fault the way the runtimes print it (`CUDA error
    209 at ggml-cuda.cu:6701: no kernel image ...`, `cuMemCreate CUDA_ERROR_OUT_OF_MEMORY`, vLLM's messages printed
    without their exception type), else None. The hints printed beside such errors name no fault."""
    if _ADVICE.match(text):
        return None
    if _OOM.search(text):
        return "oom"
    if _DEVICE.search(text):
        return "device"
    return None


def record_family(text: str) -> str:
    """The family of a logger record's text: a stand-alone error line's family, else an exception's."""
    found = line_error(text)
    return found[0] if found else exception_family(text)


def exception_family(text: str) -> str:
    """The family of an exception's text (`Type: message`, all chained links)."""
    for family, pattern in EXCEPTION_FAMILIES:
        if pattern.search(text):
            return family
    return "python"


def is_wrapper(text: str) -> bool:
    return bool(WRAPPERS.search(text))


def line_error(text: str) -> tuple[str, str] | None:
    """(family, kind) of a stand-alone error line, or None."""
    for family, kind, pattern in LINE_ERRORS:
        if pattern.search(text):
            return family, kind
    return None


_OOM = dict(EXCEPTION_FAMILIES)["oom"]
# Advice printed beside an error ("Refer to the documentation on how to address the out of memory issue").
_ADVICE = re.compile(r"(?:Refer to|See |Consider|Try |To avoid|If (?:you|this)|Please|For debugging|You (?:can|may)"
                     r"|Set |Use |HINT|Hint|Tip|Note)", re.I)
_DEVICE = dict(EXCEPTION_FAMILIES)["device"]


def rank(family: str | None) -> int:
    return SPECIFICITY.index(family) if family in SPECIFICITY else len(SPECIFICITY)
