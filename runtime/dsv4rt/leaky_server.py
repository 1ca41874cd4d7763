"""`python -m dsv4rt.leaky_server <vllm serve args>`: the OpenAI server of vLLM with the server-leak fault's
allocating thread running inside it (tests only: DSV4_FAULT=server-leak:MIB with DSV4_TESTING=1), so the memory
the sampler reads is the server's own."""

import os
import runpy
import sys

from . import faults
from .server import SERVER_MODULE

if __name__ == "__main__":
    note = faults.server_leak(faults.active(), float(os.environ.get("DSV4_LEAK_INTERVAL_S", "1")))
    print(f"DSV4_FAULT: {note}", file=sys.stderr, flush=True)
    sys.argv = [SERVER_MODULE, *sys.argv[1:]]
    runpy.run_module(SERVER_MODULE, run_name="__main__", alter_sys=True)
