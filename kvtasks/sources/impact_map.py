"""The impact map (built by kvtasks.run.impact) and what it infers from a PR's changed files: the
routes a change reaches, the tests that call them, their shape vars and the parametrize argnames that
feed those.

A change counts for the functions of its module its hunks touch, and for every function of the
module when a hunk lies outside them all (a constant, an import, a new function): the map's items
that called one of them lead to the routes those items called (the launchers of a `@triton.jit`
kernel; in a checkout without one, the functions the tests call themselves). A changed test file
leads to the routes its own items called, and is their target. A change that reaches no route
through the map, or touches a function no item called (a data file, a C source, a build file, a test
no route is called from, an untested function), is unreached: the PR's report names it and cannot
PASS. Documentation and CI files need no validation.

A change inside a `@triton.jit` kernel counts for the launchers that launch it (or a kernel calling
it). A route's targets are the test files with the most items calling it; on the CPU tier, where an
item costs seconds to minutes, a target is narrowed to one item or one test function (`_on_tier`),
even where the PR changes the test file: its tests base had no item of run only on a GPU.
"""
from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field

from kvtasks.records import InferredTarget
from kvtasks.sources.launchers import Function, is_test_path

TESTS_PER_ROUTE = 2  # the test files that validate one route: those with the most items calling it
SHAPE_VARS = 4  # at most this many dimensions named per route


class RouteCall(BaseModel):
    """An item's calls of one route, and what its first call held."""
    count: int
    outside: bool  # called from outside the mapped modules (by the test itself)
    arrays: dict[str, list[int]] = Field(default_factory=dict)  # array argument -> its dimensions
    scalars: dict[str, int | str] = Field(default_factory=dict)  # integers and short strings its frame held at return

    @property
    def ints(self) -> dict[str, int]:
        return {name: value for name, value in self.scalars.items() if type(value) is int}


class Item(BaseModel):
    params: dict[str, Any] = Field(default_factory=dict)
    calls: dict[str, RouteCall] = Field(default_factory=dict)
    seconds: float | None = None  # how long it ran under the map's probe (None: a map from before they were kept)
    stopped: bool = False  # the map's bound stopped it: a target that costs more than the bound


class ImpactMap(BaseModel):
    """Base's map: its functions, and per test item which of them it called."""
    base_oid: str
    functions: list[Function]
    items: dict[str, Item]
    tests: list[str]  # base's test files
    ran: list[str] = Field(default_factory=list)  # those its run ran (the others' items kept from an ancestor's map)
    note: str = ""  # how its run went
    cpu_tier: bool = False  # its items ran in the CPU tier's interpreter, where each costs seconds to minutes
    interrupted: str = ""  # why its run stopped short of its end other than by TIMEOUT: not stored, run again


def _routes_of(item: Item, launchers: set[str]) -> list[str]:
    if launchers:
        return sorted(route for route in item.calls if route in launchers)
    return sorted(route for route, call in item.calls.items() if call.outside)


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def touched(functions: list[Function], hunks: list[tuple[int, int]] | None) -> set[str]:
    """The functions of one file a change touches: those its hunks overlap, or every one when a hunk
    lies outside them all (a module-level line: a constant, an import, a new function) or the lines
    are unknown."""
    every = {function.route for function in functions}
    if not hunks or any(function.first == 0 for function in functions):
        return every
    hit = set()
    for first, last in hunks:
        overlapping = {function.route for function in functions if function.first <= last and first <= function.last}
        if not overlapping:
            return every
        hit |= overlapping
    return hit


def _name(route: str) -> str:
    """A function's own name: kernels are launched and called by it, wherever they are defined."""
    return route.rpartition(":")[2].rpartition(".")[2]


def _launchers_of(kernel: str, functions: list[Function]) -> set[str]:
    """The launchers of a kernel, named: those launching it or a kernel that calls it, through
    @triton.jit helpers (by name, so two modules' kernels of one name both count)."""
    names, grown = {kernel}, True
    while grown:
        more = {_name(function.route) for function in functions if function.kernel and set(function.kernels) & names}
        grown = not more <= names
        names |= more
    return {function.route for function in functions if function.launches and set(function.kernels) & names}


def _through_kernels(routes: set[str], functions: list[Function]) -> set[str]:
    """The changed routes, each changed kernel replaced by its launchers. A kernel no launch reads
    statically (launched through an alias, a table, `.run`) counts for every function of its module,
    as a module-level change does; in a module of kernels alone it stays, and no item calls it: the
    change is unreached."""
    kernels = {function.route: function for function in functions if function.kernel}
    reached = routes - kernels.keys()
    for route in routes & kernels.keys():
        module = {function.route for function in functions
                  if function.path == kernels[route].path and not function.kernel}
        reached |= _launchers_of(_name(route), functions) or module or {route}
    return reached


def _changed(items: dict[str, set[str]]) -> set[str]:
    """The changed files a test file's items stand for."""
    return set().union(*items.values())


def reach(impact: ImpactMap, changed: list[str], needs_no_validation,
          hunks: dict[str, list[tuple[int, int]]] | None = None) -> tuple[dict, list[str]]:
    """({route: {test file: {nodeid: the changed files it stands for}}}, the changed files no route is
    reached from, or that change a function no item of the map called)."""
    by_path: dict[str, list[Function]] = {}
    for function in impact.functions:
        by_path.setdefault(function.path, []).append(function)
    called = {route for item in impact.items.values() for route in item.calls}
    launchers = {function.route for function in impact.functions if function.launches}
    reached: dict[str, dict[str, dict]] = {}
    unreached = []
    for path in changed:
        if needs_no_validation(path):
            continue
        if is_test_path(path):
            leads = [(nodeid, item) for nodeid, item in impact.items.items() if _file_of(nodeid) == path]
        else:
            functions = _through_kernels(touched(by_path.get(path, []), (hunks or {}).get(path)), impact.functions)
            leads = [(nodeid, item) for nodeid, item in impact.items.items() if functions & item.calls.keys()]
            if functions - called:  # a changed function no test reached: nothing validates it
                unreached.append(path)
        hit = False
        for nodeid, item in leads:
            for route in _routes_of(item, launchers):
                reached.setdefault(route, {}).setdefault(_file_of(nodeid), {}).setdefault(nodeid, set()).add(path)
                hit = True
        if not hit and path not in unreached:
            unreached.append(path)
    for route, files in reached.items():  # a changed test file is its routes' target; other files add none
        tests_changed = {path for path in changed if is_test_path(path)}
        if tests_changed & files.keys():
            reached[route] = {path: items for path, items in files.items()
                              if path in tests_changed or _changed(items) - tests_changed}
    return reached, unreached


def _shape_vars(calls: list[RouteCall]) -> list[str]:
    """The route's array dimensions, by the local name that held each in every call, else `arg.shape[i]`."""
    named: list[str] = []
    for argument, dims in calls[0].arrays.items():
        for index in range(len(dims)):
            def value(call, argument=argument, index=index):
                dims = call.arrays.get(argument)
                return dims[index] if dims is not None and len(dims) > index else None
            values = [value(call) for call in calls]
            local = [name for name in calls[0].ints if name not in named and not name.startswith("_")
                     and all(call.ints.get(name) == seen for call, seen in zip(calls, values))]
            known = [name for name in named if all(_held(call, name) == seen for call, seen in zip(calls, values))]
            if not known:
                named.append(local[0] if local else f"{argument}.shape[{index}]")
    return named[:SHAPE_VARS]


def _held(call: RouteCall, name: str):
    if name in call.scalars:
        return call.scalars[name]
    argument, _, rest = name.partition(".shape[")
    dims = call.arrays.get(argument)
    index = int(rest.rstrip("]")) if rest else -1
    return dims[index] if dims is not None and 0 <= index < len(dims) else None


def _argnames(items: list[Item], calls: list[RouteCall], shape_vars: list[str]) -> list[tuple[str, str]]:
    """(shape var, argname): per shape var, the parametrize argname whose value was that dimension in
    every item; then each other argname whose value a local of the route held in every item (a dtype's
    name), by that local: a parametrize mark is a channel only when the grid fills all its names."""
    found: list[tuple[str, str]] = []

    def feeds(argname: str, name: str) -> bool:
        """The argname's value was the local's in every item, and either they share a name or the
        value varied between items: one coincidence of a value is no evidence of a channel."""
        values = [item.params.get(argname) for item in items]
        return all(type(value) in (int, str) and value == _held(call, name) for value, call in zip(values, calls)) \
            and (argname.lower() == name.lower() or len(set(values)) > 1)
    for name in shape_vars:
        candidates = [argname for argname in items[0].params if argname not in dict(found).values()
                      and feeds(argname, name)]
        if candidates:
            found.append((name, candidates[0]))
    if not found:
        return found
    for argname in items[0].params:
        if argname in dict(found).values():
            continue
        locals_ = sorted((name for name in calls[0].scalars if name not in dict(found) and feeds(argname, name)),
                         key=lambda name: name != argname)
        if locals_:
            found.append((locals_[0], argname))
    return found


def _chosen(files: dict[str, dict[str, set[str]]]) -> list[tuple[str, dict[str, set[str]]]]:
    """The route's test files: the TESTS_PER_ROUTE with the most items calling it, then any other that
    carries a changed file those do not, so no changed file is left without a test that reaches it."""
    ordered = sorted(files.items(), key=lambda pair: (-len(pair[1]), pair[0]))
    chosen = ordered[:TESTS_PER_ROUTE]
    carried = set().union(*(_changed(items) for _, items in chosen))
    for path, items in ordered[TESTS_PER_ROUTE:]:
        if _changed(items) - carried:
            chosen.append((path, items))
            carried |= _changed(items)
    return chosen


def _cost(nodeid: str, item: Item, call: RouteCall) -> tuple:
    """What an item costs as a target: one the map's bound stopped last; then the seconds it ran under
    the map's probe; then what it moves through the route (calls times elements, then the integers its
    frame held), an item whose arrays were not seen (nested in a tuple) last."""
    elements = sum(math.prod(dims) for dims in call.arrays.values())
    return (item.stopped, item.seconds or 0.0, not call.arrays, call.count * elements,
            sum(abs(value) for value in call.ints.values()), nodeid)


def _on_tier(path: str, items: dict[str, set[str]], costs: dict[str, tuple], fed: set[str], axes: set[str],
             changed: set[str]) -> str:
    """The target on the CPU tier, where every program runs in Python: the item that costs the least
    (`_cost`) among those standing for every changed file, unless a grid channel fills
    every parametrize axis the items have (then the function runs the grid's cells alone); where no
    one item stands for all the changes, the one test function of the items, or the file where they
    span several. A channel beside other axes is given up: the grid's rows times the other axes'
    cells is hours in the interpreter. A changed test file is narrowed too: run whole, an operator
    library's file is hours there as well; the item runs head's version of its test."""
    whole = [nodeid for nodeid, leads in items.items() if leads >= changed]
    if whole and (not fed or axes - fed):
        return min(whole, key=costs.__getitem__)
    functions = {nodeid.partition("[")[0] for nodeid in items}
    return functions.pop() if len(functions) == 1 else path


def infer(impact: ImpactMap, changed: list[str], needs_no_validation,
          hunks: dict[str, list[tuple[int, int]]] | None = None) -> tuple[list[InferredTarget], list[str]]:
    """The targets a PR's changed files lead to, and the changed files that lead to none (or change
    a function nothing reached)."""
    reached, unreached = reach(impact, changed, needs_no_validation, hunks)
    # a target is named by its route's function (Class_method for a method), by its module too where two share it
    short = {route: route.rpartition(":")[2].replace(".", "_") for route in reached}
    inferred, used = [], set()
    for route in sorted(reached):
        name = short[route] if list(short.values()).count(short[route]) == 1 else route.replace(":", "_")
        name = name.replace(".", "_")
        while name in used:  # `a.b:f` and `a_b:f` spell the same
            name += "_"
        used.add(name)
        for position, (path, leads) in enumerate(_chosen(reached[route])):
            nodeids = sorted(leads)
            changed_here = _changed(leads)
            items = [impact.items[nodeid] for nodeid in nodeids]
            calls = [item.calls[route] for item in items]
            shape_vars = _shape_vars(calls)
            fed = _argnames(items, calls, shape_vars)
            target = path
            if impact.cpu_tier:
                costs = {nodeid: _cost(nodeid, item, call) for nodeid, item, call in zip(nodeids, items, calls)}
                target = _on_tier(path, leads, costs, {argname for _, argname in fed},
                                  {argname for item in items for argname in item.params}, changed_here)
                if target in leads:  # an item's id names its cells: no grid fills them
                    fed = []
            if fed:
                shape_vars = [name for name, _ in fed]
            inferred.append(InferredTarget(
                name=name if position == 0 else f"{name}-{position + 1}", route=route, target=target,
                shape_vars=shape_vars, shape_argnames=[argname for _, argname in fed],
                changed=sorted(changed_here), tests=nodeids,
                why=f"{', '.join(sorted(changed_here))} -> {len(nodeids)} items of {path} called {route} on base",
                map_base_oid=impact.base_oid))
    return inferred, unreached
