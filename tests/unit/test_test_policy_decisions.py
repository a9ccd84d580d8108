"""test_policy's decisions on in-memory PRs (tests/kit.py): each rule with a twin it must not blame."""
import pytest

from kvtasks.sources.trust_rules import EXAMPLE_BASE, KERNEL, KERNEL_FIXED, TARGET, TEST_BASE
from kvtasks.stages import grid, selection, test_policy
from tests.kit import stage_context

# the trust rules' example repository: the same row-scaling kernel and its test
BASE = EXAMPLE_BASE


def policy(head: dict, **options):
    return test_policy.run(stage_context(BASE, head, target=TARGET, expected_route="kernels.rows:scale_rows",
                                         **options))


def severities(stage) -> list[str]:
    return [finding.severity for finding in stage.findings]


def test_a_test_only_loosening_blocks_and_the_same_with_a_kernel_change_asks_for_justification():
    loosened = TEST_BASE.replace("ATOL = 1e-5", "ATOL = 1e-2")
    alone = policy({TARGET: loosened})
    assert alone.stage.status == "fail" and "blocker" in severities(alone)
    assert alone.stage.loosened[0]["base"] == 1e-5 and alone.stage.loosened[0]["head"] == 1e-2
    with_kernel = policy({TARGET: loosened, KERNEL: KERNEL_FIXED})
    assert severities(with_kernel) == ["should-fix"] and with_kernel.stage.kernel_files_changed


def test_a_kernel_only_change_compares_nothing_loosened():
    stage = policy({KERNEL: KERNEL_FIXED})
    assert stage.stage.status == "pass" and not stage.findings
    assert stage.stage.route_side == [KERNEL] and stage.stage.test_side == []


@pytest.mark.parametrize("path", ["sitecustomize.py", "usercustomize.py", "kernels/extra.pth"])
def test_startup_code_blocks_naming_it(path):
    stage = policy({path: "import numpy\n", KERNEL: KERNEL_FIXED})
    assert stage.stage.startup_files == [path]
    assert any(f.severity == "blocker" and path in f.detail for f in stage.findings)


def test_a_new_module_beside_the_kernel_is_no_startup_code():
    stage = policy({"kernels/sitecustom.py": "X = 1\n", KERNEL: KERNEL_FIXED})
    assert stage.stage.startup_files == [] and "blocker" not in severities(stage)


@pytest.mark.parametrize("write", [
    "np.testing.assert_allclose = lambda *a, **k: None",
    "import sys\nsys.modules['numpy'].testing.assert_allclose = print",
    "import importlib\nimportlib.import_module('numpy.testing').assert_allclose = print",
    "checks = np.testing\nchecks.assert_allclose = print",
    "def quiet():\n    checks = np.testing\n    checks.assert_allclose = print",
    "getattr(np, 'testing').assert_allclose = print",
    "vars(np.testing)['assert_allclose'] = print",
    "np.testing.__dict__['assert_allclose'] = print",
    "__builtins__['abs'] = lambda x: 0",
    "import sys\nsetattr(sys.modules['numpy'].testing, 'assert_allclose', print)",
    "exec('import numpy\\nnumpy.testing.assert_allclose = print')",
    "np.testing.__setattr__('assert_allclose', print)",
    "object.__setattr__(np.testing, 'assert_allclose', print)",
    "import sys\nsys.modules.update(numpy=None)",
    "import sys\nUNDER_TEST = 'pytest' in sys.modules",
    "import torch\nLIB = torch.library.Library('aten', 'IMPL')",
    "import torch\nLIB = torch.library.Library(ns='aten', kind='IMPL')",
    "import torch\nLIB = torch.library.Library('at' + 'en', 'IMPL')",
    "import sys\nsys.modules['kernels.rows'] = None",
    "import sys\ndel sys.modules['kernels.rows']",
    "exec('np.testing.assert_allclose = print')",
    "import sys\nUNDER_TEST = 'pytest' in sys.argv[0]",
    "import sys\nUNDER_TEST = sys.argv[0].endswith('py.test')",
    "from sys import argv\nUNDER_TEST = any('pytest' in word for word in argv)",
    "UNDER_TEST = b'pytest' in open('/proc/self/cmdline', 'rb').read()",
    "PARENT = [l for l in open('/proc/self/status') if l.startswith('PPid:')]",
    "NESTED = 'NSpid' in open('/proc/self/status').read() and 'VmRSS' in open('/proc/self/status').read()",
    "import traceback\nUNDER_TEST = any('test_' in frame.name for frame in traceback.extract_stack())",
    "import torch\n@torch.library.impl('aten::isclose', 'CPU')\ndef close(*args):\n    return True",
    "import importlib.util\nUNDER_TEST = importlib.util.find_spec('_pytest') is not None",
    "import os\nQUIET = os.environ.get('PYTEST_CURRENT_TEST')"])
def test_kernel_code_that_reaches_into_the_judges_blocks(write):
    tampered = "import numpy as np\n" + write + "\n" + KERNEL_FIXED
    stage = policy({KERNEL: tampered})
    assert stage.stage.tampering and any(f.severity == "blocker" and KERNEL in f.detail for f in stage.findings)


def test_a_kernel_reading_its_own_memory_use_is_not_reading_the_run_s_state():
    footprint = KERNEL_FIXED + ("\n\ndef _peak_kib():\n    for line in open('/proc/self/status'):\n"
                                "        if line.startswith(('VmHWM:', 'VmRSS:')):\n"
                                "            return int(line.split()[1])\n")
    stage = policy({KERNEL: footprint})
    assert stage.stage.tampering == [] and not stage.findings


def test_kernel_code_that_uses_numpy_plainly_is_not_tampering():
    plain = ("import importlib.util\nimport sys\n\nimport numpy as np\nimport torch\n\n"
             "HAS_TRITON = importlib.util.find_spec('triton') is not None and 'torch' in sys.modules\n"
             "LIB = torch.library.Library('kvrows', 'DEF')\n"
             "if __name__ == '__main__':\n    print(sys.argv)\n"
             "if '--cuda-ext' in sys.argv:\n    sys.argv.remove('--cuda-ext')\n"
             "setattr(sys.modules[__name__], 'fused', True)\nsys.modules[__name__].cache = {}\n"
             "torch.backends.cuda.matmul.allow_tf32 = False\n\n\n"
             "def scale_rows(x, factor):\n    out = np.empty_like(x)\n    out[...] = np.multiply(x, factor)\n"
             "    getattr(out, 'flags').writeable = True\n    return out\n")
    stage = policy({KERNEL: plain})
    assert stage.stage.tampering == [] and not stage.findings


def test_a_newly_commented_row_is_said_and_a_row_commented_on_base_is_not():
    newly = TEST_BASE.replace("    (8, 128),", "    # (8, 128),")
    stage = policy({TARGET: newly, KERNEL: KERNEL_FIXED})
    assert stage.stage.newly_commented_rows == [f"{TARGET}: (8, 128)"] and "should-fix" in severities(stage)
    untouched = TEST_BASE.replace("def test_scale", "def test_scale_rows")  # base's comment stays as it was
    stage = policy({TARGET: untouched, KERNEL: KERNEL_FIXED})
    assert stage.stage.newly_commented_rows == [] and stage.stage.commented_out_shape_rows_base == 1


def test_a_plugin_loaded_from_pytest_configuration_is_a_weakening_and_verbosity_is_not():
    plugin = policy({".pytest.ini": "[pytest]\naddopts = -p kernels.helpers\n", KERNEL: KERNEL_FIXED})
    assert plugin.stage.config_changes and "should-fix" in severities(plugin)
    verbose = policy({".pytest.ini": "[pytest]\naddopts = -ra\n", KERNEL: KERNEL_FIXED})
    assert verbose.stage.config_changes == [] and not verbose.findings


def test_a_deleted_target_is_said():
    stage = policy({TARGET: None, KERNEL: KERNEL_FIXED})
    assert stage.stage.target_deleted and any("deletes the target" in f.detail for f in stage.findings)


def test_a_new_gpu_guarded_test_file_has_nothing_to_weaken():
    added = "tests/test_rows_tail.py"
    guarded = ('import numpy as np\nimport pytest\nimport torch\n\nfrom kernels.rows import scale_rows\n\n\n'
               '@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")\n'
               'def test_tail():\n    x = np.ones((3, 65), dtype=np.float32)\n'
               '    np.testing.assert_allclose(scale_rows(x, 2.0), x * 2.0, atol=1e-5)\n')
    stage = policy({added: guarded, KERNEL: KERNEL_FIXED})
    assert added in stage.stage.test_side and not stage.findings


def test_an_added_target_whose_expected_values_come_from_the_kernel_is_said():
    added = "tests/test_new.py"
    self_judged = ('import numpy as np\n\nfrom kernels.rows import scale_rows\n\n\ndef test_new():\n'
                   '    x = np.ones((3, 65), dtype=np.float32)\n'
                   '    np.testing.assert_allclose(scale_rows(x, 2.0), scale_rows(x, 2.0))\n')
    stage = test_policy.run(stage_context(BASE, {added: self_judged, KERNEL: KERNEL_FIXED}, target=added,
                                          expected_route="kernels.rows:scale_rows"))
    assert stage.stage.reference_from_pr and any("PASS is out of reach" in f.detail for f in stage.findings)
    independent = self_judged.replace("scale_rows(x, 2.0))\n", "x * 2.0)\n")
    stage = test_policy.run(stage_context(BASE, {added: independent, KERNEL: KERNEL_FIXED}, target=added,
                                          expected_route="kernels.rows:scale_rows"))
    assert not stage.stage.model_dump().get("reference_from_pr") and not stage.findings


def test_packaging_metadata_that_autoloads_a_pytest_plugin_is_a_weakening():
    metadata = {"kernels_extra.dist-info/METADATA": "Name: kernels-extra\nVersion: 1\n", KERNEL: KERNEL_FIXED}
    plugin = policy({**metadata, "kernels_extra.dist-info/entry_points.txt": "[pytest11]\nextra = tests.plugin\n"})
    assert plugin.stage.config_changes == ["kernels_extra.dist-info/entry_points.txt declares a pytest plugin that "
                                           "autoloads in every run: extra = tests.plugin"]
    assert "should-fix" in severities(plugin)
    scripts = policy({**metadata, "kernels_extra.dist-info/entry_points.txt": "[console_scripts]\nrows = kernels.rows:main\n"})
    assert scripts.stage.config_changes == [] and not scripts.findings


@pytest.mark.parametrize("spelt", ["ATOL = 1e-5 * 1000", "ATOL = 10 ** -2", "ATOL = float('1e-2')", "ATOL = 1 / 100"])
def test_a_tolerance_widened_by_arithmetic_is_a_widened_tolerance(spelt):
    stage = policy({TARGET: TEST_BASE.replace("ATOL = 1e-5", spelt)})
    assert stage.stage.loosened == [{"where": f"{TARGET}::ATOL", "base": 1e-5, "head": pytest.approx(1e-2)}]
    assert severities(stage) == ["blocker"]


def test_the_same_tolerance_spelt_otherwise_is_no_change():
    stage = policy({TARGET: TEST_BASE.replace("ATOL = 1e-5", "ATOL = 1e-6 * 10")})
    assert stage.stage.loosened == [] and not stage.findings


def test_a_named_tolerance_computed_at_run_time_cannot_be_compared():
    computed = TEST_BASE.replace("ATOL = 1e-5", "import os\nATOL = float(os.environ.get('ATOL', '1e-2'))")
    stage = policy({TARGET: computed})
    assert stage.stage.not_literal == [f"{TARGET}::ATOL = float(os.environ.get('ATOL', '1e-2')) is not a literal "
                                       "on head (base: 1e-05)"]
    assert severities(stage) == ["should-fix"] and stage.stage.status == "fail"


def _prepared(head: dict, secret: str):
    """selection, the grid's channel and the policy in prepare's order, with the default grid drawn."""
    ctx = stage_context(BASE, head, target=TARGET, expected_route="kernels.rows:scale_rows", shape_vars="M,N",
                        shape_argnames="M,N")
    ctx.grid_secret = secret
    for step in (selection.run, grid.channel):
        produced = step(ctx)
        ctx.earlier[produced.name] = produced
    return test_policy.run(ctx), ctx.selection.grid_cells


def test_a_kernel_that_names_a_drawn_grid_dimension_blocks_and_another_workspace_draws_other_cells():
    _, cells = _prepared({KERNEL: KERNEL_FIXED}, "workspace-1")
    large_m = int(cells[-1].split(",")[0])  # the drawn dimension past 4096
    singled_out = KERNEL_FIXED + f"\n\ndef _exact(x):\n    return x.shape[0] == {large_m}\n"
    stage, _ = _prepared({KERNEL: singled_out}, "workspace-1")
    assert any(f.severity == "blocker" and f"drawn dimension {large_m}" in f.detail for f in stage.findings)
    _, elsewhere = _prepared({KERNEL: KERNEL_FIXED}, "workspace-2")
    assert elsewhere != cells and len(elsewhere) == len(cells)


def test_a_drawn_dimension_spelt_with_arithmetic_is_named_too():
    _, cells = _prepared({KERNEL: KERNEL_FIXED}, "workspace-1")
    large_m = int(cells[-1].split(",")[0])
    spelt = KERNEL_FIXED + f"\n\ndef _exact(x):\n    return x.shape[0] == 4096 + {large_m - 4096}\n"
    stage, _ = _prepared({KERNEL: spelt}, "workspace-1")
    assert any(f"drawn dimension {large_m}" in f.detail for f in stage.findings)


def test_a_tolerance_made_nan_cannot_be_compared():
    stage = policy({TARGET: TEST_BASE.replace("ATOL = 1e-5", "ATOL = float('nan')")})
    assert stage.stage.not_literal and severities(stage) == ["should-fix"]


def test_a_kernel_that_names_its_tile_or_a_power_of_two_is_not_singling_out_the_grid():
    tiled = KERNEL_FIXED + "\n\nBLOCK = 64\nLIMIT = 4096\nMASK = 255\nLINE_LENGTH = 119\nROWS = range(45)\n"
    stage, _ = _prepared({KERNEL: tiled}, "workspace-1")
    assert stage.stage.tampering == [] and not stage.findings


@pytest.mark.parametrize("path", ["kernels/_rows.cpython-311-x86_64-linux-gnu.so", "kernels/helpers.pyc",
                                  "kernels/_rows.pyd"])
def test_compiled_code_python_can_import_blocks(path):
    stage = policy({path: "\x7fELF", KERNEL: KERNEL_FIXED})
    assert stage.stage.compiled_modules == [path] and any(f.severity == "blocker" and path in f.detail
                                                          for f in stage.findings)


def test_a_compiled_module_the_pr_deletes_runs_nothing():
    stage = test_policy.run(stage_context({**BASE, "kernels/old.so": "\x7fELF"}, {"kernels/old.so": None,
                                          KERNEL: KERNEL_FIXED}, target=TARGET, expected_route="kernels.rows:scale_rows"))
    assert stage.stage.compiled_modules == [] and not stage.findings
