"""The probe reads the tolerance each judging call of the checkout's code really received, wherever it
was spelt, with the defaults resolved to numbers; a library's own calls are not the checkout's."""
import subprocess
import sys

from kvtasks.harness import receipts

KERNEL = '''import numpy as np

ACC = np.float16
TOL = float(np.finfo(ACC).eps * 84)


def add(x):
    return x + 1
'''
TEST = '''import math
import unittest

import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose

from kern.ops import TOL, add


def test_numpy_and_friends():
    x = np.arange(3, dtype=np.float32)
    for _ in range(2):
        assert_allclose(add(x), x + 1, atol=TOL)
    assert np.allclose(add(x), x + 1)
    assert add(x)[0] == pytest.approx(1.0, abs=1e-3)
    assert math.isclose(1.0, 1.0)
    np.testing.assert_array_almost_equal(add(x), x + 1, decimal=3)
    np.testing.assert_array_equal(np.ones(2), np.ones(2))  # a library function calling numpy's judges inside


def test_torch():
    x = torch.ones(3, dtype=torch.bfloat16)
    torch.testing.assert_close(x, x)
    torch.testing.assert_close(x, x.float(), check_dtype=False)
    assert x.allclose(x, atol=1e-2) and torch.isclose(x, x, equal_nan=True).all()


class TestUnit(unittest.TestCase):
    def test_places(self):
        self.assertAlmostEqual(1.0, 1.0, places=4)
'''


def test_each_judging_call_s_effective_tolerance_is_recorded(tmp_path):
    for name, text in {"kern/__init__.py": "", "kern/ops.py": KERNEL, "tests/test_ops.py": TEST}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    probe = receipts.prepare(tmp_path / "probe", routes=["kern.ops:add"], shape_vars=[], receipt=tmp_path / "r.json")
    done = subprocess.run([sys.executable, "-m", probe.name, "--pytest", "-q", "-p", f"{probe.name}.plugin", "tests"],
                          cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": f"{probe.folder}:{tmp_path}", "PATH": "/usr/bin:/bin", **probe.environment})
    assert done.returncode == 0, done.stdout + done.stderr
    receipt, _, note = receipts.read(probe, "head-repo")
    seen = [(call.test.rpartition("::")[2], call.caller.rpartition(":")[2], call.ordinal, call.function.rpartition(".")[2],
             call.rtol, call.atol, call.equal_nan, call.check_dtype) for call in receipt.judgments]
    numpy_test, torch_test = "test_numpy_and_friends", "test_torch"
    assert seen == [
        (numpy_test, "15", 0, "assert_allclose", 1e-7, 0.08203125, True, None),  # f16's eps * 84, from the kernel's package
        (numpy_test, "15", 1, "assert_allclose", 1e-7, 0.08203125, True, None),
        (numpy_test, "16", 0, "allclose", 1e-5, 1e-8, False, None),
        (numpy_test, "17", 0, "approx", 0.0, 1e-3, False, None),  # an absolute tolerance alone: no relative one
        (numpy_test, "18", 0, "isclose", 1e-9, 0.0, None, None),
        (numpy_test, "19", 0, "assert_array_almost_equal", 0.0, 1.5e-3, None, None),
        (torch_test, "25", 0, "assert_close", 1.6e-2, 1e-5, False, True),  # bfloat16's defaults
        (torch_test, "26", 0, "assert_close", 1.6e-2, 1e-5, False, False),  # the looser of the two dtypes
        (torch_test, "27", 0, "allclose", 1e-5, 1e-2, False, None),
        (torch_test, "27", 1, "isclose", 1e-5, 1e-8, True, None),
        ("test_places", "32", 0, "assertAlmostEqual", 0.0, 5e-5, None, None),
    ]
    assert receipt.judgments[6].dtypes == ["bfloat16", "bfloat16"] and receipt.judgments_dropped == 0
