"""Everything kvtasks reads from Python source, read from the AST here and nowhere else.

One module per job: syntax (parsing, names, numbers), imports (modules, aliases, the files they
name, setup.py packaging), cells, flags (argparse), environment (env reads), parametrize (marks and
rows), structure (what a target file defines: tests, a __main__ guard, argv parsed at import),
and the test policy of a file: tolerances and dtypes (tables), skips (what a weakening looks like),
policy (records), reader (read_policy, with bypasses, parametrize_rows and text_readings) and
compare (head against base). Nothing here runs, imports or writes the code it reads; a stage that
wants a reading asks this package.
"""
from kvtasks.sources.cells import cell_text, literal_rows, row_text
from kvtasks.sources.compare import Comparison, compare
from kvtasks.sources.dtypes import canonical_dtype
from kvtasks.sources.environment import reads_env
from kvtasks.sources.flags import argparse_flags
from kvtasks.sources.imports import aliases, imported_names, imported_files, imported_modules, module_files, setup_py_layout
from kvtasks.sources.parametrize import parametrize_groups, parametrize_marks
from kvtasks.sources.policy import Policy
from kvtasks.sources.reader import read_policy
from kvtasks.sources.syntax import dotted, error_line, number, parse, qualified

__all__ = ["Comparison", "Policy", "aliases", "argparse_flags", "canonical_dtype", "cell_text", "compare", "dotted",
           "error_line", "imported_names", "imported_files", "imported_modules", "literal_rows", "module_files", "number",
           "parametrize_groups", "parametrize_marks", "parse", "qualified", "read_policy", "reads_env", "row_text",
           "setup_py_layout"]
