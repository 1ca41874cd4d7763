"""The gfx936 shim's gating and patches, on a CPU machine: real interpreters started with runtime/ on PYTHONPATH
(so sitecustomize loads as in a job), and a stand-in `triton` package with DAS Triton's gaps."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import ROOT

RUNTIME = ROOT / "runtime"


@pytest.fixture
def fake_triton(tmp_path: Path) -> Path:
    pkg = tmp_path / "fake" / "triton"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("def jit(fn):\n    return fn\n")
    (pkg / "language.py").write_text(textwrap.dedent("""\
        def reduce(input, axis, combine):
            out = input[0]
            for x in input[1:]:
                out = combine(out, x)
            return out

        def softmax(x, ieee_rounding=False, _builder=None):
            return ("softmax", tuple(x))
        """))
    return tmp_path / "fake"


def run(code: str, fake: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    path = [str(RUNTIME)] + ([str(fake)] if fake else [])
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DSV4_", "VLLM_"))}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**clean, "PYTHONPATH": ":".join(path), **env})


def test_off_on_cpu_without_asking(fake_triton):
    result = run("import os, sys, dsv4rt.shim as s; import triton.language as tl; "
                 "print(s.enabled(), hasattr(tl, 'reduce_or'), 'VLLM_ROCM_USE_SKINNY_GEMM' in os.environ)",
                 fake_triton)
    assert result.stdout.split() == ["False", "False", "False"], result.stderr


def test_dsv4_shim_0_keeps_it_off(fake_triton):
    assert run("import dsv4rt.shim as s; print(s.enabled())", fake_triton, DSV4_SHIM="0").stdout.strip() == "False"


def test_forced_on_patches_triton_when_triton_is_imported_and_not_before(fake_triton):
    code = ("import sys, os; print('triton' in sys.modules); import triton.language as tl; "
            "print(tl.reduce_or([1, 0, 4], 0)); print(tl.softmax([1.0, 2.0], dim=0)[0]); "
            "print(os.environ['VLLM_ROCM_USE_SKINNY_GEMM'])")
    result = run(code, fake_triton, DSV4_SHIM="1", DSV4_SHIM_DEBUG="1")
    assert result.stdout.split() == ["False", "5", "softmax", "0"], result.stderr
    assert "[dsv4 shim] triton.language.reduce_or backported" in result.stderr
    assert "softmax accepts dim=" in result.stderr


def test_patches_are_idempotent(fake_triton):
    code = ("import dsv4rt.shim as s, triton.language as tl; first = tl.reduce_or; "
            "s.apply_module_patches('triton.language', tl); s.apply_module_patches('triton.language', tl); "
            "print(tl.reduce_or is first, len(s.APPLIED))")
    assert run(code, fake_triton, DSV4_SHIM="1").stdout.split() == ["True", "3"]


def test_an_explicit_skinny_gemm_setting_wins(fake_triton):
    code = "import os; print(os.environ['VLLM_ROCM_USE_SKINNY_GEMM'])"
    assert run(code, fake_triton, DSV4_SHIM="1", VLLM_ROCM_USE_SKINNY_GEMM="1").stdout.strip() == "1"


def test_gfx936_is_read_from_the_kfd_topology(tmp_path):
    from importlib import import_module

    sys.path.insert(0, str(RUNTIME))
    try:
        shim = import_module("dsv4rt.shim")
        node = tmp_path / "nodes" / "1"
        node.mkdir(parents=True)
        (node / "properties").write_text("cpu_cores_count 0\ngfx_target_version 90306\n")
        assert shim.on_gfx936(str(tmp_path / "nodes"))
        (node / "properties").write_text("gfx_target_version 90010\n")
        assert not shim.on_gfx936(str(tmp_path / "nodes"))
        assert not shim.on_gfx936(str(tmp_path / "missing"))
    finally:
        sys.path.remove(str(RUNTIME))


def test_a_broken_shim_never_breaks_python(tmp_path):
    broken = tmp_path / "dsv4rt"
    broken.mkdir()
    (broken / "__init__.py").write_text("")
    (broken / "shim.py").write_text("raise ImportError('boom')\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DSV4_")}
    result = subprocess.run([sys.executable, "-c", "print('alive')"], capture_output=True, text=True,
                            env={**clean, "PYTHONPATH": f"{tmp_path}:{RUNTIME}"})
    # runtime/sitecustomize imports the first dsv4rt on the path: the broken one
    assert result.stdout.strip() == "alive"


@pytest.fixture
def fake_vllm_rope(tmp_path: Path) -> Path:
    """vLLM's rope module as the CPU build lays it out: forward_cpu calls the C++ op, forward_native is PyTorch."""
    pkg = tmp_path / "fake" / "vllm" / "model_executor" / "layers" / "rotary_embedding"
    pkg.mkdir(parents=True)
    for parent in (pkg, *list(pkg.parents)[:3]):
        (parent / "__init__.py").touch()
    (pkg / "__init__.py").write_text("from .base import RotaryEmbedding\n")
    (pkg / "base.py").write_text(textwrap.dedent("""\
        class RotaryEmbedding:
            def forward_native(self, x):
                return ("native", x)

            def forward_cpu(self, x):
                return ("c++ op", x)

        class ScaledRotaryEmbedding(RotaryEmbedding):
            def forward_native(self, x):
                return ("scaled native", x)
        """))
    return tmp_path / "fake"


ROPE_CALLS = ("from vllm.model_executor.layers.rotary_embedding import base; "
              "print(base.RotaryEmbedding().forward_cpu(1)[0], '|', base.ScaledRotaryEmbedding().forward_cpu(2)[0])")


def test_native_rope_switch_routes_forward_cpu_to_forward_native_on_cpu(fake_vllm_rope):
    result = run(ROPE_CALLS, fake_vllm_rope, DSV4_NATIVE_ROPE="1")
    # A subclass keeps its own forward_native; the gfx936 patches stay off on this CPU machine.
    assert result.stdout.strip() == "native | scaled native", result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("[dsv4 shim]")]
    # Said once, without DSV4_SHIM_DEBUG: it changes the numbers, so the log must show it.
    assert len(lines) == 1 and "DSV4_NATIVE_ROPE=1" in lines[0] and "forward_native" in lines[0], result.stderr


@pytest.mark.parametrize("value", [None, "0"])
def test_native_rope_is_off_unless_its_switch_is_1(fake_vllm_rope, value):
    result = run(ROPE_CALLS, fake_vllm_rope, **({"DSV4_NATIVE_ROPE": value} if value else {}))
    assert result.stdout.strip() == "c++ op | c++ op" and "[dsv4 shim]" not in result.stderr, result.stderr


def test_native_rope_patches_a_module_imported_before_the_shim(fake_vllm_rope):
    # The rare order where vLLM's rope module is already loaded when install() runs: it is patched in place.
    code = ("import sys, dsv4rt.shim as s; sys.meta_path.remove(s._HOOK); s._HOOK = None; "
            "from vllm.model_executor.layers.rotary_embedding import base; "
            "print(base.RotaryEmbedding().forward_cpu(1)[0]); "
            "s.install(); s.install(); print(base.RotaryEmbedding().forward_cpu(1)[0], len(s.APPLIED))")
    result = run(code, fake_vllm_rope, DSV4_NATIVE_ROPE="1")
    assert result.stdout.split() == ["c++", "op", "native", "1"], result.stderr
