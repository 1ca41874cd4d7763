"""Fuzzing the spec front door: hostile YAML (aliases, odd scalars, huge and non-finite numbers, control characters,
deep nesting, unicode, a wrong type at every field) through the real `main()` of `validate`, `expand` and `render`.

Property: exit code 0, 1 or 2; no traceback; no "unexpected" error (an exception nobody turned into a message);
each call within seconds, in a worker whose address space is capped at 1 GiB. The worker is one long-lived
subprocess (starting Python per example would cost the whole time budget), fed one example at a time.
"""

from __future__ import annotations

import json
import os
import resource
import select
import subprocess
import sys
import textwrap

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import BASE_SPEC, ROOT

MEMORY_LIMIT = 1 << 30
SECONDS_PER_CALL = 10

WORKER = textwrap.dedent("""
    import contextlib, io, json, os, sys, tempfile, time
    from dsv4ctl.cli import main
    folder = tempfile.mkdtemp(prefix="dsv4ctl-fuzz-")
    for line in sys.stdin:
        job = json.loads(line)
        path = os.path.join(folder, "spec.yaml")
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(job["text"])
        out, err = io.StringIO(), io.StringIO()
        started = time.monotonic()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main([a.replace("SPEC", path) for a in job["args"]])
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException as exc:
                code, err = -1, io.StringIO(f"Traceback (most recent call last): escaped main(): {exc!r}")
        print(json.dumps({"code": code, "out": out.getvalue()[-2000:], "err": err.getvalue()[-2000:],
                          "seconds": time.monotonic() - started}), flush=True)
""")


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


class Worker:
    """One Python running `dsv4ctl.cli.main` on each spec text it is sent, under RLIMIT_AS."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                        preexec_fn=_cap_memory)

    def call(self, text: str, *args: str) -> dict:
        self.process.stdin.write(json.dumps({"text": text, "args": list(args)}) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], SECONDS_PER_CALL + 20)
        assert ready, f"dsv4ctl {' '.join(args)} took longer than {SECONDS_PER_CALL + 20} s on:\n{text[:500]!r}"
        line = self.process.stdout.readline()
        assert line, f"the worker died (out of memory?): {self.process.stderr.read()[-2000:]}\non:\n{text[:500]!r}"
        return json.loads(line)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def worker():
    w = Worker()
    yield w
    w.close()


COMMANDS = [("validate", "SPEC"), ("expand", "SPEC"), ("render", "SPEC"), ("validate", "--json", "SPEC")]


def check(worker: Worker, text: str, command: tuple[str, ...]) -> None:
    result = worker.call(text, *command)
    shown = f"dsv4ctl {' '.join(command)} on {text[:300]!r}: {result}"
    assert result["code"] in (0, 1, 2), shown
    # The header, not the word: a fuzzed value may be the word "Traceback", and error messages quote values.
    assert "Traceback (most recent call last)" not in result["out"] + result["err"], shown
    assert "error: unexpected " not in result["err"] and "error: out of memory" not in result["err"], shown
    assert result["seconds"] < SECONDS_PER_CALL, shown


def test_the_worker_tells_a_valid_spec_from_an_invalid_one(worker):
    assert worker.call(BASE_SPEC, "validate", "SPEC")["code"] == 0
    refused = worker.call(BASE_SPEC + "repeats: 100000000\n", "validate", "SPEC")
    assert refused["code"] == 1 and "is above the maximum" in refused["out"]


# ---- strategies --------------------------------------------------------------------------------------------------

BASE = yaml.safe_load(BASE_SPEC)
FIELDS = [("name",), ("platform",), ("description",), ("model",), ("model", "path"), ("model", "max_model_len"),
          ("model", "gpu_memory_utilization"), ("model", "seed"), ("model", "extra"), ("parallel", "tp"),
          ("requests",), ("requests", 0), ("requests", 0, "prompt"), ("batch",), ("sampling", "max_tokens"),
          ("sampling", "temperature"), ("sampling", "logprobs"), ("repeats",), ("matrix",), ("matrix", "batch"),
          ("matrix", "repeats"), ("slurm", "nodes"), ("slurm", "gres"), ("slurm", "extra"), ("environment", "env"),
          ("environment", "env", "FOO"), ("environment", "modules"), ("environment", "python"),
          ("expect", "golden_token_ids"), ("expect", "bos_id"), ("throughput", "iterations"),
          ("throughput", "warmup"), ("switches",), ("switches", "DSV4_MOE_ROUTING_Q1"), ("extends",), ("tags",)]

control_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
huge_ints = st.one_of(st.integers(-2**70, 2**70), st.sampled_from([10**8, 10**12, 2**63, -1, 0, 10**4000]))
odd_floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e12, 1e999, -1e999]))
scalars = st.one_of(st.none(), st.booleans(), huge_ints, odd_floats, control_text)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=12)
ODD_SCALARS = ["1e999", ".nan", "-.inf", "0x1F", "0o17", "1_000", "1:20:30", "2001-13-45", "2001-12-14t21:59:43.1-05:00",
               "~", "yes", "off", "!!binary aGk=", "!!float abc", "!!int 1.5", "!!python/object:os.system x",
               "1" * 5000, "\"\\0\"", "\"\\x01\\r\\n\"", "'\u202e\ufeff'", "&a 1", "*nope", "[", "{a: }", "!!set {a}",
               "<<: *x", "!!str", "\"\\ud800\"", "|\n  block", ">-\n  folded", "? x", "- - -", "%TAG ! x", "`"]


def set_field(data: dict, path: tuple, value) -> dict:
    node = data
    for part in path[:-1]:
        child = node[part] if isinstance(node, list) and isinstance(part, int) and part < len(node) else None
        if isinstance(node, dict):
            child = node.setdefault(part, {})
        if not isinstance(child, (dict, list)):
            return data
        node = child
    if isinstance(node, dict):
        node[path[-1]] = value
    elif isinstance(node, list) and path[-1] < len(node):
        node[path[-1]] = value
    return data


@st.composite
def wrong_type_specs(draw) -> str:
    """The valid base spec with one field (at any depth) replaced by a hostile value."""
    data = set_field(json.loads(json.dumps(BASE)), draw(st.sampled_from(FIELDS)), draw(values))
    return yaml.safe_dump(data, allow_unicode=draw(st.booleans()), sort_keys=False)


@st.composite
def odd_scalar_specs(draw) -> str:
    """The base spec's text with one value replaced by a raw YAML token no dumper would write."""
    lines = BASE_SPEC.splitlines()
    index = draw(st.sampled_from([i for i, line in enumerate(lines) if ": " in line]))
    key = lines[index].split(": ")[0]
    lines[index] = f"{key}: {draw(st.sampled_from(ODD_SCALARS))}"
    return "\n".join(lines) + "\n"


@st.composite
def alias_specs(draw) -> str:
    """Anchors and aliases: laughs of any width and depth, recursive ones, aliases as keys and merge keys."""
    width, depth = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    lines = ["a0: &a0 [" + ", ".join(['"lol"'] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, depth)]
    extra = draw(st.sampled_from(["", "r: &r [*r]\n", "m: &m {k: *m}\n", "? *a0\n: 1\n", "<<: *a0\n",
                                  "model: &m {path: /m}\nenvironment: {env: *m}\n"]))
    return BASE_SPEC + "\n".join(lines) + "\n" + extra


@st.composite
def deep_specs(draw) -> str:
    depth = draw(st.integers(1, 6000))
    opener, closer = draw(st.sampled_from([("[", "]"), ("{a: ", "}")]))
    return BASE_SPEC + "x: " + opener * depth + "1" + closer * depth + "\n"


@st.composite
def damaged_specs(draw) -> str:
    """The base spec with characters (NUL, controls, unicode, surrogate-free junk) inserted anywhere."""
    text = BASE_SPEC
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        junk = draw(st.one_of(st.sampled_from(["\x00", "\x1b[31m", "\r", "\t", "\ufeff", "\u2028", "\x85", "\x7f",
                                               "\x0c", ": :", "- ", "&", "*", "!", "%", "@", "'", '"']),
                              st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)))
        text = text[:at] + junk + text[at:]
    return text


any_spec = st.one_of(wrong_type_specs(), odd_scalar_specs(), alias_specs(), deep_specs(), damaged_specs(),
                     st.text(st.characters(blacklist_categories=("Cs",)), max_size=200))

EXAMPLES = int(os.environ.get("DSV4CTL_FUZZ_EXAMPLES", "150"))  # sized to keep the file under a minute on 2 cores
FUZZ = settings(deadline=None, max_examples=EXAMPLES, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                         HealthCheck.too_slow])


@FUZZ
@given(text=wrong_type_specs(), command=st.sampled_from(COMMANDS))
def test_a_wrong_type_at_any_field_is_a_finding(worker, text, command):
    check(worker, text, command)


@FUZZ
@given(text=odd_scalar_specs(), command=st.sampled_from(COMMANDS))
def test_odd_scalars_are_read_or_refused(worker, text, command):
    check(worker, text, command)


@FUZZ
@given(text=alias_specs(), command=st.sampled_from(COMMANDS))
def test_aliases_cannot_blow_up(worker, text, command):
    check(worker, text, command)


@settings(FUZZ, max_examples=max(EXAMPLES // 3, 1))
@given(text=deep_specs(), command=st.sampled_from(COMMANDS))
def test_deep_nesting_is_refused(worker, text, command):
    check(worker, text, command)


@FUZZ
@given(text=damaged_specs(), command=st.sampled_from(COMMANDS))
def test_damaged_text_is_read_or_refused(worker, text, command):
    check(worker, text, command)


@FUZZ
@given(text=any_spec, command=st.sampled_from(COMMANDS))
def test_anything_at_all(worker, text, command):
    check(worker, text, command)
