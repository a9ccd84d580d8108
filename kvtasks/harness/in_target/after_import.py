"""Run a callback on a module right after it executes, before anyone takes an alias of what it holds:
the routes are instrumented this way, and the judging functions wrapped."""
import sys

from . import loads


class _Loader:
    def __init__(self, inner, after, phase):
        self.inner, self.after, self.phase = inner, after, phase

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        if self.phase:
            loads.during(self.phase, self.inner.exec_module, module)
        else:
            self.inner.exec_module(module)
        self.after(module)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class _Finder:
    def __init__(self, modules, after, phase):
        self.modules, self.after, self.phase = modules, after, phase

    def find_spec(self, name, path, target=None):
        if name not in self.modules:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _Loader(spec.loader, self.after, self.phase)
        return spec


def watch(modules: set[str], after, phase: str = "") -> None:
    """after(module) once each of `modules` executed; its execution noted as `phase` when given."""
    sys.meta_path.insert(0, _Finder(set(modules), after, phase))
