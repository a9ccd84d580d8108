"""The grid's cells in a pytest run: the parametrize marks binding the grid's argnames, found and
replaced (or, in a merged session, added to); cells arrive as text and become what they spell."""


def coerce(cell):
    """Grid cells arrive as text; "False" is truthy, so literals become what they spell, and a
    tuple-valued cell, "(2049,2)", becomes the tuple."""
    literals = {"True": True, "False": False, "None": None}
    if cell in literals:
        return literals[cell]
    if cell[:1] in "([":
        import ast

        try:
            return ast.literal_eval(cell)
        except (ValueError, SyntaxError):
            return cell
    for kind in (int, float):
        try:
            return kind(cell)
        except ValueError:
            pass
    return cell


def grid_marks(run, metafunc):
    """The parametrize marks the grid replaces, as (node, mark, argnames): those binding exactly the
    grid's argnames; else stacked marks that each bind only grid argnames and together all of them."""
    wanted = set(run.configuration.grid_argnames)
    exact, inside = [], []
    node = metafunc.definition
    while node is not None:
        for mark in getattr(node, "own_markers", []):
            if mark.name != "parametrize" or not mark.args:
                continue
            names = mark.args[0]
            names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
            if set(names) == wanted:
                exact.append((node, mark, names))
            elif set(names) < wanted:
                inside.append((node, mark, names))
        node = getattr(node, "parent", None)
    if exact:
        return [[found] for found in exact]
    covered = sorted(name for _, _, names in inside for name in names)
    return [inside] if len(inside) > 1 and covered == sorted(wanted) else []


def grid_rows(run, names):
    """The grid's rows as values, in the order of `names` (a mark's own order of the grid argnames)."""
    order = [run.configuration.grid_argnames.index(name) for name in names]
    return [tuple(coerce(row[i]) for i in order) for row in run.configuration.grid_rows], order


def replace_mark(node, mark, replacement):
    """`replacement` where `mark` was, on the node and on the object it came from (`pytestmark`), so
    neither the item's markers nor its function, class or module show the mark as written; None
    removes it (a stacked mark the grid's rows replace)."""
    held = getattr(getattr(node, "obj", None), "pytestmark", None)
    for marks in (node.own_markers, held if isinstance(held, list) else []):
        for index in reversed([i for i, item in enumerate(marks)
                               if item is mark or getattr(item, "mark", None) is mark or item == mark]):
            if replacement is None:
                del marks[index]
            else:
                marks[index] = replacement


def made(run, metafunc, replacement, first_name, own):
    """Record the mark the probe made (its `own` leading cells are the repository's) and that this
    test's items index into it by `first_name`."""
    run.replaced.append((replacement, own))
    run.grid_functions[metafunc.definition.nodeid] = (first_name, own)


def replaced_before(run, metafunc, mark, names):
    """Whether `mark` is one the probe already made (a class or module mark is seen by each of its
    tests); if so, this test's items index into it as the first test's did."""
    own = next((own for replacement, own in run.replaced if replacement is mark), None)
    if own is not None:
        run.grid_functions[metafunc.definition.nodeid] = (names[0], own)
    return own is not None
