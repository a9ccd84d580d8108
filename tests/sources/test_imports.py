"""kvtasks.sources.imports and .syntax: what a source imports, the names its imports bind, and the
files those imports may be."""
from pathlib import PurePosixPath

from kvtasks.sources import aliases, canonical_dtype, imported_files, imported_modules, parse, qualified


def test_imports_and_aliases_resolve_every_spelling():
    tree = parse("import numpy as np\nimport torch.testing\nfrom numpy.testing import assert_allclose as aac\n"
                 "from . import local\n")
    assert imported_modules(tree) == ["numpy", "torch.testing", "numpy.testing"]
    bound = aliases(tree)
    assert qualified(parse("np.testing.assert_allclose").body[0].value, bound) == "numpy.testing.assert_allclose"
    assert qualified(parse("aac").body[0].value, bound) == "numpy.testing.assert_allclose"
    assert parse("def broken(:") is None
    assert [canonical_dtype(t) for t in ("f32", "torch.bfloat16", "<class 'numpy.float16'>", "M")] == \
        ["float32", "bfloat16", "float16", None]


def test_imported_files_follow_relative_imports_and_the_folder_beside_the_source():
    tree = parse("import helpers\nfrom ..common.ref import reference\nfrom . import util\nimport os.path\n")
    files = imported_files(tree, PurePosixPath("tests/kernels"))
    assert files == ["tests/kernels/helpers.py", "tests/kernels/helpers/__init__.py",
                     "tests/common/ref.py", "tests/common/ref/__init__.py",
                     "tests/kernels/util.py", "tests/kernels/util/__init__.py",
                     "tests/kernels/os/path.py", "tests/kernels/os/path/__init__.py"]
    assert imported_files(None, PurePosixPath(".")) == []
