"""The largest values a spec or a command line may ask for: far beyond any real experiment, small enough that a
typo (`repeats: 100000000`) or a hostile file is refused before it costs memory, time or a cluster's queue.

Standard library only: the CLI's argument checks import it on the cold path.
"""

from __future__ import annotations

# -- spec files -------------------------------------------------------------------------------------------------
MAX_SPEC_BYTES = 16 * 1024 * 1024  # golden logprobs of 8 requests x 512 tokens x top-20 are about 2 MB
MAX_YAML_DEPTH = 64  # a spec nests about 4 levels; golden_logprobs about 5
MAX_ALIAS_NODES = 10_000  # nodes produced by expanding `*alias`es (a billion-laughs file needs billions)
MAX_EXTENDS_DEPTH = 16  # `extends` chain length (base <- platform <- experiment is 3)

# -- numbers in a spec --------------------------------------------------------------------------------------------
MAX_REPEATS = 10_000  # runs per matrix point; the report's flakiest finding needed 100
MAX_MATRIX_POINTS = 1_000  # matrix points of one file, counted before any point is built
MAX_RUNS_PER_SPEC = 100_000  # matrix points x repeats of one file
MAX_BATCH = 4_096  # requests submitted together (vLLM's max_num_seqs is 256-1024 in practice)
MAX_REQUESTS = 4_096  # requests written in a spec
MAX_TOKENS = 4_194_304  # tokens generated per request (4 Mi, above any context length shipped)
MAX_MODEL_LEN = 4_194_304  # context length (4 Mi tokens)
MAX_TP = 64  # tensor-parallel ranks (8 nodes of 8 accelerators)
MAX_NODES = 1_024  # Slurm nodes of one job
MAX_CPUS_PER_TASK = 4_096
MAX_ITERATIONS = 10_000  # timed throughput repeats inside one job
MAX_WARMUP = 1_000  # untimed warm-up generations
MAX_REPEAT_RUN = MAX_TOKENS  # same-token run length that counts as degenerate
MAX_TOKEN_ID = 2**31 - 1  # vocabulary ids (int32 in every engine)
MAX_SEED = 2**63 - 1  # torch accepts seeds up to 2**64 - 1; int64 is what every RNG API takes

# -- serving and alignment (issues 14, 15) ----------------------------------------------------------------------
MAX_PROMPTS = 1_000_000  # requests of one serving load (vllm bench serve's default is 1000)
MAX_SERVE_SECONDS = 7 * 24 * 3600  # soak duration and readiness timeout: a week
MAX_SERVE_ARGS = 256  # extra `vllm serve` arguments
MAX_ALIGN_LAYERS = 4_096  # layers named in an alignment
