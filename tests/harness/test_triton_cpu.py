"""The Triton CPU tier inside real target processes: sanitizer, device redirect, autotune, sparse grid."""
from pathlib import Path

import pytest

from kvtasks.harness import launching
from kvtasks.request import build_request
from kvtasks.harness.in_target import cpu_devices, cpu_tier
from tests import triton_repos

TIER = {"sparse_programs": 4096}


@pytest.fixture(autouse=True)
def needs_triton():
    triton_repos.require_triton_cpu()


def _run(repo: Path, test: str, tmp_path: Path, cpu_tier=TIER, **grid):
    request = build_request({"repo": str(repo), "target": test})
    return launching.run(request, runner="pytest", run_dir=tmp_path / "run", label="head-tier", cpu_tier=cpu_tier,
                         **grid)


def test_install_refuses_a_triton_release_outside_the_hooks_range_before_patching_anything(monkeypatch):
    import triton
    from triton.runtime import interpreter

    from kvtasks.harness.in_target.configuration import TierSettings

    load = interpreter.InterpreterBuilder.create_masked_load
    monkeypatch.setattr(triton, "__version__", "3.10.0")
    with pytest.raises(RuntimeError, match=r"kvtasks CPU tier: triton 3\.10\.0 is outside the releases the CPU "
                                           r"tier's hooks are built for \(3\.3 to 3\.9\)"):
        cpu_tier.install(TierSettings())
    assert interpreter.InterpreterBuilder.create_masked_load is load


def test_the_sanitizer_names_kernel_argument_offset_and_extent(tmp_path):
    repo = triton_repos.softmax_repo(tmp_path / "repo", triton_repos.SOFTMAX_UNMASKED)
    run = _run(repo, "tests/test_softmax.py", tmp_path, grid_argnames=["M", "N", "dtype"],
               grid_rows=[["4", "100", "f32"]])
    violations = [(v["kernel"], v["op"], v["argument"], v["element_offset"], v["extent_elements"], v["program"])
                  for v in run.receipt.cpu_tier["violations"]]
    assert run.exit == 1 and violations == [("softmax_kernel", "load", "in_ptr", 400, 400, [3, 0, 0])]
    log = Path(run.log).read_text()
    assert "kvtasks bounds sanitizer: load out of bounds in kernel softmax_kernel (program (3, 0, 0))" in log
    assert "argument in_ptr: element offset 400 (byte 1600) is outside its allocation of 400 elements" in log


def test_a_masked_kernel_on_a_hard_coded_cuda_device_passes_only_with_the_redirect_and_skips_bf16_cells(tmp_path):
    repo = triton_repos.softmax_repo(tmp_path / "repo")
    run = _run(repo, "tests/test_softmax.py", tmp_path / "on")
    tier = run.receipt.cpu_tier
    assert run.exit == 0 and run.stats.executed == 2 and run.stats.skipped == 1
    assert tier["redirected_device_calls"] >= 2
    # bf16 cells are an interpreter limitation, said as such
    assert tier["bf16_skipped"] == ["tests/test_softmax.py::test_softmax[2-64-bf16]"]
    assert cpu_tier.BF16_REASON in Path(run.stats.junit_xml).read_text()
    assert tier["violations"] == [] and tier["versions"]["TRITON_INTERPRET"] == "1"
    plain = _run(repo, "tests/test_softmax.py", tmp_path / "off", cpu_tier=None,
                 env_extra={"TRITON_INTERPRET": "1"})
    assert plain.exit != 0 and plain.receipt.cpu_tier is None


def test_an_autotuned_kernel_runs_every_config_once_under_the_sanitizer(tmp_path):
    repo = triton_repos.autotuned_repo(tmp_path / "repo")
    run = _run(repo, "tests/test_add.py", tmp_path)
    tier = run.receipt.cpu_tier
    assert run.exit == 0 and run.stats.executed == 1, run.log_tail()
    assert {k: v for k, v in tier["autotuned"]["add_kernel"].items() if k != "seconds"} == {
        "keys": 1, "configs_run": 3, "duplicates_skipped": 0}
    assert tier["launches"] == 4  # three timed configs, then the chosen one


def test_int32_offset_overflow_past_2_31_elements_is_caught_on_the_sparse_grid(tmp_path):
    rows = [["524289", "4096"]]  # 524289 * 4096 > 2^31 elements; the last row starts past int32
    broken = _run(triton_repos.scale_repo(tmp_path / "int32"), "tests/test_scale.py", tmp_path / "a",
                  grid_argnames=["M", "N"], grid_rows=rows)
    violation = broken.receipt.cpu_tier["violations"][0]
    assert broken.exit == 1
    assert (violation["kernel"], violation["argument"], violation["program"]) == ("scale_kernel", "in_ptr",
                                                                                 [524288, 0, 0])
    assert violation["element_offset"] < 0  # the wrapped 32-bit row offset
    assert broken.receipt.cpu_tier["sparse_launches"][0]["programs_run"] == 2

    fixed = _run(triton_repos.scale_repo(tmp_path / "int64", triton_repos.SCALE_INT64), "tests/test_scale.py",
                 tmp_path / "b", grid_argnames=["M", "N"], grid_rows=rows)
    assert fixed.exit == 0 and fixed.receipt.cpu_tier["violations"] == []
    # only two of 524289 programs ran: the test claims what the sanitizer checked, nothing more
    assert fixed.stats.skipped == 1 and fixed.stats.executed == 0


# What kernel repositories ask torch.cuda and Triton's driver at import, and libdevice in a kernel:
# rsqrt has a tl.math equivalent, tanh a numpy one, j0 none.
QUERIES_AND_LIBDEVICE = '''import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

assert torch.cuda.get_device_capability() == (9, 0)
assert torch.cuda.get_device_properties(0).multi_processor_count >= 1
free, total = torch.cuda.mem_get_info()
assert 0 < free <= total
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
with torch.cuda.device(0), torch.cuda.stream(torch.cuda.Stream()):
    start.record()
    torch.cuda.synchronize()
    end.record()
assert start.elapsed_time(end) >= 0 and torch.cuda.max_memory_allocated() == 0
torch.cuda.reset_peak_memory_stats()
assert triton.runtime.driver.active.get_current_target().arch == 90
assert torch.accelerator.is_available() and torch.accelerator.current_accelerator().type == "cuda"


@triton.jit
def activate(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, libdevice.rsqrt(x) + libdevice.tanh(x), mask=offs < n)


@triton.jit
def bessel(out_ptr, in_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, libdevice.j0(tl.load(in_ptr + offs)))


x = torch.rand(10, device="cuda") + 0.5
out = torch.empty_like(x)
activate[(1,)](out, x, 10, BLOCK=16)
torch.testing.assert_close(out, torch.rsqrt(x) + torch.tanh(x))
try:
    bessel[(1,)](out, x, BLOCK=8)
except Exception as exc:
    assert "libdevice.j0 has no equivalent in the Triton interpreter" in str(exc), exc
else:
    raise AssertionError("libdevice.j0 ran")
'''


def test_cuda_queries_are_answered_and_libdevice_is_forwarded_or_named(tmp_path):
    repo = triton_repos.make_repo(tmp_path / "repo", {"queries.py": QUERIES_AND_LIBDEVICE})
    request = build_request({"repo": str(repo), "target": "queries.py"})
    run = launching.run(request, runner="script", run_dir=tmp_path / "run", label="head-tier",
                        cpu_tier={**TIER, "device_capability": "9.0"})
    tier = run.receipt.cpu_tier
    assert run.exit == 0, Path(run.log).read_text()[-2000:]
    assert tier["device_capability"] == "9.0"
    assert {"get_device_capability", "get_device_properties", "mem_get_info", "get_current_target",
            "synchronize", "max_memory_allocated", "reset_peak_memory_stats",
            "accelerator.current_accelerator"} <= set(tier["cuda_queries"])
    assert tier["libdevice"] == {"forwarded": {"rsqrt": 1, "tanh": 1}, "without_equivalent": {"j0": 1}}


def test_each_closed_gap_reaches_the_tail_bug_behind_it_and_passes_the_fix(tmp_path):
    # every gap in one launch, each in a package and a test module of its own: a gap the tier left open
    # fails, skips or crashes its own module's tests, which are told apart by name below (triton 3.3's
    # autotune has no disk cache: no gap to close there)
    gaps = sorted(gap for gap in triton_repos.GAPS if gap != "autotune_cache" or triton_repos.autotune_has_disk_cache())
    repo = triton_repos.gaps_repo(tmp_path / "repo", gaps)
    request = build_request({"repo": str(repo), "target": "tests", "env": ["TINY_BACKEND=triton"]})
    run = launching.run(request, runner="pytest", run_dir=tmp_path / "run", label="base-tier", cpu_tier=TIER)
    tier = run.receipt.cpu_tier
    log = Path(run.log).read_text()
    assert tier["crashes"] == [], log[-3000:]
    assert run.exit == 1, log[-3000:]
    outcomes = {(case.classname, case.name): case.outcome for case in run.cases}
    assert outcomes == {(f"tests.test_{gap}", f"test_{which}[4-100]"): outcome for gap in gaps
                        for which, outcome in (("fixed", "passed"), ("tail_bug", "failed"))}, log[-3000:]
    violated = sorted((violation["test"], violation["kernel"], violation["op"], violation["argument"])
                      for violation in tier["violations"])
    assert violated == [(f"tests/test_{gap}.py::test_tail_bug[4-100]", "scale_kernel", "store", "out_ptr")
                        for gap in gaps]
    assert {"manual_seed", "manual_seed_all", "initial_seed"} <= set(tier["cuda_queries"])  # cuda_seeding's


def test_a_crash_inside_the_tier_is_named_and_an_assertion_or_a_bounds_violation_is_not(tmp_path):
    import os

    import triton

    def raised_in(path, statement):
        try:
            exec(compile(statement, path, "exec"), {"cpu_tier": cpu_tier})
        except BaseException as exc:  # the exception as pytest would hand it over
            return exc

    autotuner = os.path.join(os.path.dirname(triton.__file__), "runtime", "autotuner.py")
    crash = raised_in(autotuner, "raise AttributeError(\"'function' object has no attribute 'fn'\")")
    assert cpu_tier.crash_cause(crash) == ("AttributeError: 'function' object has no attribute 'fn' "
                                           "(in triton/runtime/autotuner.py)")
    kernel = str(tmp_path / "kernel.py")
    assert cpu_tier.crash_cause(raised_in(kernel, "(3).to")) == (
        "an interpreter value lacks what compiled code has (AttributeError: 'int' object has no attribute 'to')")
    assert cpu_tier.crash_cause(raised_in(kernel, "raise AssertionError('Torch not compiled with CUDA enabled')")) \
        == "an unanswered CUDA query (AssertionError: Torch not compiled with CUDA enabled)"
    # torch's own C++ accelerator query, reached through torch.compile, has no CUDA device to answer with
    assert cpu_tier.crash_cause(raised_in(kernel, "raise RuntimeError('Cannot access accelerator device when none "
                                                  "is available.')")).startswith("an unanswered CUDA query")
    assert cpu_tier.crash_cause(raised_in(kernel, "assert 1 == 2, 'values differ'")) is None
    assert cpu_tier.crash_cause(raised_in(autotuner, "raise cpu_tier.BoundsViolation('store')")) is None
    assert cpu_tier.crash_cause(raised_in(kernel, "raise ValueError('the repository refuses this shape')")) is None
    # a torch operation the test calls raises through the device redirect's pass-through: the test's own
    redirect = {}
    exec(compile("def __torch_function__():\n    raise RuntimeError('linalg.inv: the input matrix is singular')",
                 cpu_devices.__file__, "exec"), redirect)
    through_redirect = None
    try:
        exec(compile("torch_call()", kernel, "exec"), {"torch_call": redirect["__torch_function__"]})
    except RuntimeError as exc:
        through_redirect = exc
    assert cpu_tier.crash_cause(through_redirect) is None


def _raised_in(path: str, statement: str, names: dict):
    try:
        exec(compile(statement, path, "exec"), dict(names))
    except BaseException as exc:  # the exception as pytest would hand it over
        return exc
    raise AssertionError(f"{statement} raised nothing")


def test_a_failure_on_an_object_the_tier_replaced_is_a_tier_crash_wherever_it_is_raised(tmp_path):
    from kvtasks.harness.in_target.cpu_state import STATE

    def plain_kernel():
        """The function an interpreted kernel wraps, reached by a wrapper's `.fn` chain."""

    STATE.kernel_functions.add(plain_kernel)
    STATE.jit_fields.update({"fn", "params", "arg_names"})  # as the target's first kernel sets them
    repository_file = str(tmp_path / "libentry.py")
    unwrapped = _raised_in(repository_file, "plain_kernel.fn", {"plain_kernel": plain_kernel})
    assert cpu_tier.crash_cause(unwrapped) == (
        "an object the tier replaced (AttributeError: 'function' object has no attribute 'fn': the plain function "
        "of the interpreted kernel plain_kernel, where compiled code has a JITFunction)")
    # an attribute a CUDA build's event has and the tier's lacks; a typo on it fails on a GPU too
    event = {"event": cpu_devices._Event()}
    assert cpu_tier.crash_cause(_raised_in(repository_file, "event.ipc_handle()", event)).endswith(
        "the tier's _Event, which lacks what compiled code or a CUDA build has)")
    assert cpu_tier.crash_cause(_raised_in(repository_file, "event.elapsed_tyme", event)) is None
    properties = {"properties": cpu_devices.DeviceProperties(name="x")}
    assert cpu_tier.crash_cause(_raised_in(repository_file, "properties.pci_bus_id", properties)) is not None
    assert cpu_tier.crash_cause(_raised_in(repository_file, "properties.multi_processor_cnt", properties)) is None
    # the repository's own objects, whatever their class is called, and a plain function asked for what no
    # JIT function has, stay the repository's
    class TensorHandle:
        """A repository class named like one of the interpreter's."""
    assert cpu_tier.crash_cause(_raised_in(repository_file, "handle.data", {"handle": TensorHandle()})) is None
    assert cpu_tier.crash_cause(_raised_in(repository_file, "plain_kernel.warp_specialize",
                                           {"plain_kernel": plain_kernel})) is None
    assert cpu_tier.crash_cause(_raised_in(repository_file, "raise AssertionError(\"'TensorHandle' object\")",
                                           {})) is None


KERNEL_AND_TORCH_TESTS = '''import torch

from tiny.scale import scale_rows


def test_kernel():
    x = torch.randn(4, 100, device="cuda")
    torch.testing.assert_close(scale_rows(x, 2.0), x * 2)


def test_torch_alone():
    x = torch.randn(4, 100, device="cuda")
    torch.testing.assert_close(x * 2, x + x)
'''


def test_a_test_that_launches_no_kernel_and_calls_no_route_is_reported_not_exercised(tmp_path):
    from kvtasks.stages import cpu_tier as tier_stage

    repo = triton_repos.make_repo(tmp_path / "repo", {"tiny/__init__.py": "", "tiny/scale.py": triton_repos.gap_kernel(),
                                                      "tests/test_scale.py": KERNEL_AND_TORCH_TESTS})
    run = _run(repo, "tests/test_scale.py", tmp_path)
    assert run.exit == 0 and run.stats.executed == 2, run.log_tail()
    assert tier_stage.not_exercised(run) == ["tests.test_scale::test_torch_alone"]


OWN_CPU_REFERENCE_TEST = '''import torch

from tiny.scale import scale_rows

LIB = torch.library.Library("tiny_ref", "DEF")
LIB.define("scale(Tensor x, float factor) -> Tensor")
LIB.impl("scale", lambda x, factor: x * factor, "CPU")  # the repository's reference
LIB.impl("scale", scale_rows, "CUDA")


def test_kernel_against_its_reference():
    x = torch.randn(4, 100)
    torch.testing.assert_close(torch.ops.tiny_ref.scale(x.cuda(), 2.0).cpu(), torch.ops.tiny_ref.scale(x, 2.0))
'''


def test_an_operator_s_own_cpu_kernel_is_kept_and_its_test_then_exercises_no_kernel(tmp_path):
    from kvtasks.stages import cpu_tier as tier_stage

    repo = triton_repos.make_repo(tmp_path / "repo", {"tiny/__init__.py": "", "tiny/scale.py": triton_repos.gap_kernel(),
                                                      "tests/test_ref.py": OWN_CPU_REFERENCE_TEST})
    run = _run(repo, "tests/test_ref.py", tmp_path)
    tier = run.receipt.cpu_tier
    assert run.exit == 0, run.log_tail()
    assert tier["cuda_registrations_kept"] == {"tiny_ref::scale": "the operator's own CPU kernel is kept"}
    assert tier["cuda_registrations"] == {}
    # on the tier both calls reach the reference: the test compared it with itself, and says so
    assert tier_stage.not_exercised(run) == ["tests.test_ref::test_kernel_against_its_reference"]


CHAINED_COMPARISON = triton_repos.gap_kernel().replace("mask=offs < n, other=0.0", "mask=0 <= offs < n, other=0.0")


def test_a_chained_comparison_fails_where_triton_s_compiler_refuses_it_and_is_no_tier_crash(tmp_path):
    from triton.runtime import interpreter

    repo = triton_repos.make_repo(tmp_path / "repo", {"tiny/__init__.py": "", "tiny/scale.py": CHAINED_COMPARISON,
                                                      "tests/test_scale.py": KERNEL_AND_TORCH_TESTS})
    run = _run(repo, "tests/test_scale.py::test_kernel", tmp_path)
    assert run.receipt.cpu_tier["crashes"] == []
    if hasattr(interpreter.ASTTransformer, "visit_Compare"):  # 3.9 and later compile it
        assert run.exit == 0, run.log_tail()
    else:
        assert run.exit == 1 and "simultaneous multiple comparison is not supported" in Path(run.log).read_text()


FP8_ROUND_TRIP = '''import torch
import triton
import triton.language as tl


@triton.jit
def round_trip(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, x.to(tl.float8e4nv).to(tl.float32), mask=offs < n)


def test_fp8_rounds_as_the_hardware_does():
    # a tie to even, a carry into the exponent, a subnormal, past the largest finite value
    x = torch.tensor([1.0625, 1.96875, -0.001, 500.0, 0.3], device="cuda")
    out = torch.empty_like(x)
    round_trip[(1,)](out, x, 5, BLOCK=8)
    torch.testing.assert_close(out, x.to(torch.float8_e4m3fn).float(), rtol=0, atol=0)
'''


BF16_ARITHMETIC = """import torch
import triton
import triton.language as tl


@triton.jit
def elementwise(out_ptr, x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    y = tl.load(y_ptr + offs, mask=offs < n)
    half = tl.full((BLOCK,), 0.5, tl.bfloat16)
    out = tl.maximum(x * y + x, y - half) / (tl.abs(y) + 1.0).to(tl.bfloat16)
    tl.store(out_ptr + offs, tl.where(x > y, out, -out), mask=offs < n)


@triton.jit
def reductions(sum_ptr, max_ptr, argmax_ptr, cumsum_ptr, x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(sum_ptr, tl.sum(x, axis=0))
    tl.store(max_ptr, tl.max(x, axis=0))
    tl.store(argmax_ptr, tl.argmax(x, axis=0))
    tl.store(cumsum_ptr + offs, tl.cumsum(x, axis=0))


@triton.jit
def matmul(out_ptr, a_ptr, b_ptr, M: tl.constexpr):
    rows = tl.arange(0, M)[:, None] * M + tl.arange(0, M)[None, :]
    acc = tl.dot(tl.load(a_ptr + rows), tl.load(b_ptr + rows))
    tl.store(out_ptr + rows, acc.to(tl.bfloat16))


@triton.jit
def casts(out_ptr, ints_ptr, x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, x.to(tl.bfloat16))
    tl.store(ints_ptr + offs, x.to(tl.bfloat16).to(tl.int32))


def test_elementwise_and_constants_as_torch_rounds_them():
    torch.manual_seed(0)
    x, y = torch.randn(13, dtype=torch.bfloat16, device="cuda"), torch.randn(13, dtype=torch.bfloat16, device="cuda")
    out = torch.empty_like(x)
    elementwise[(1,)](out, x, y, 13, BLOCK=16)
    expected = torch.maximum(x * y + x, y - 0.5) / (y.abs() + 1.0)
    torch.testing.assert_close(out, torch.where(x > y, expected, -expected), rtol=0, atol=0)


def test_reductions_and_scans_on_bf16():
    x = torch.tensor([1.0, 2.5, -3.0, 0.125, 7.0, -0.5, 3.0, 1.5], dtype=torch.bfloat16, device="cuda")
    total, top, where, running = torch.empty(1, dtype=torch.bfloat16), torch.empty(1, dtype=torch.bfloat16), \
        torch.empty(1, dtype=torch.int32), torch.empty_like(x)
    reductions[(1,)](total, top, where, running, x, BLOCK=8)
    assert (total.item(), top.item(), where.item()) == (11.625, 7.0, 4)
    torch.testing.assert_close(running, x.float().cumsum(0).bfloat16(), rtol=0, atol=0)


def test_dot_of_bf16_tiles_accumulates_in_fp32():
    torch.manual_seed(1)
    a, b = torch.randn(16, 16, dtype=torch.bfloat16), torch.randn(16, 16, dtype=torch.bfloat16)
    out = torch.empty_like(a)
    matmul[(1,)](out, a, b, M=16)
    torch.testing.assert_close(out, (a.float() @ b.float()).bfloat16(), rtol=0, atol=0.02)


@triton.jit
def masked(out_ptr, x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    y = tl.load(y_ptr + offs, mask=offs < n)
    bigger = (x > y) & (offs < n)
    tl.store(out_ptr + offs, tl.where(~bigger, y, x), mask=offs < n)  # ~ on int1: 3.3 lacked its type
    tl.store(out_ptr + BLOCK + offs, tl.fma(x, y, x), mask=bigger)


@triton.jit
def narrow_and_wide(half_ptr, from_fp8_ptr, x_ptr, fp8_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(half_ptr + offs, tl.load(x_ptr + offs).to(tl.float16))
    tl.store(from_fp8_ptr + offs, tl.load(fp8_ptr + offs).to(tl.bfloat16))


def test_comparisons_stay_masks_and_an_fma_rounds_once():
    # positive values whose bit patterns order as their values do: comparing bits was right, masks built on it too
    x = torch.tensor([1.5, 2.0, 3.0, 0.5, 1.5, 1.0], dtype=torch.bfloat16, device="cuda")
    y = torch.tensor([1.0, 2.5, 0.25, 1.0, 1.0234375, 1.0], dtype=torch.bfloat16, device="cuda")
    out = torch.zeros(16, dtype=torch.bfloat16, device="cuda")
    masked[(1,)](out, x, y, 5, BLOCK=8)
    assert out[:5].tolist() == torch.maximum(x, y)[:5].tolist() and out[5:8].tolist() == [0.0] * 3
    fused = (x.double() * y.double() + x.double()).bfloat16()  # one rounding of the exact value
    assert out[8:13].tolist() == torch.where(x > y, fused, torch.zeros_like(fused))[:5].tolist()


def test_bf16_to_fp16_and_fp8_to_bf16_keep_inf_and_nan():
    x = torch.tensor([70144.0, -1e5, 1.0e-8, 2.76e-40, 3.0, 65504.0, float("nan"), 0.0], dtype=torch.bfloat16,
                     device="cuda")
    fp8 = torch.tensor([0x7F, 0xFF, 0x38, 0x01, 0x00, 0x7E, 0x40, 0x08], dtype=torch.uint8, device="cuda")
    half, wide = torch.empty(8, dtype=torch.float16), torch.empty(8, dtype=torch.bfloat16)
    narrow_and_wide[(1,)](half, wide, x, fp8.view(torch.float8_e4m3fn), BLOCK=8)
    torch.testing.assert_close(half, x.half(), rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(wide, fp8.view(torch.float8_e4m3fn).bfloat16(), rtol=0, atol=0, equal_nan=True)


def test_fp32_to_bf16_rounds_to_nearest_even():
    # below, at and above the halfway point of two bf16 neighbours, a tie to even, a carry
    x = torch.tensor([1.00390625, 1.005859375, 1.01171875, 1.0029296875, 1.99609375, -3.00390625, 255.5, 0.0],
                     device="cuda")
    out, ints = torch.empty(8, dtype=torch.bfloat16), torch.empty(8, dtype=torch.int32)
    casts[(1,)](out, ints, x, BLOCK=8)
    torch.testing.assert_close(out, x.bfloat16(), rtol=0, atol=0)
    assert ints.tolist() == x.bfloat16().int().tolist()
"""


def test_bf16_arithmetic_reductions_dot_and_casts_as_compiled_code_computes_them(tmp_path):
    repo = triton_repos.make_repo(tmp_path / "repo", {"tests/test_bf16.py": BF16_ARITHMETIC})
    run = _run(repo, "tests/test_bf16.py", tmp_path)
    assert [case.outcome for case in run.cases] == ["passed"] * 6, run.log_tail()


def test_fp8_conversions_round_to_nearest_even_and_saturate(tmp_path):
    repo = triton_repos.make_repo(tmp_path / "repo", {"tests/test_fp8.py": FP8_ROUND_TRIP})
    run = _run(repo, "tests/test_fp8.py", tmp_path)
    assert run.exit == 0 and run.stats.executed == 1, run.log_tail()
