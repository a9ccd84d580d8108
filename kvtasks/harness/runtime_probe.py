"""Runs inside the target's interpreter and environment: import one module, say where it came from.

Usage: python runtime_probe.py OUT.json MODULE TIER ROOT [ROOT ...]
Writes {module, module_path, module_version, python_executable, python_version, inside_roots,
native_artifacts[{path, size, sha256}], distributions["name==version"], editable{name: source
folder}, pytest (where it would be imported from; "" when it cannot be), cpu_tier_error, error,
traceback (on error)}.
TIER is "" or JSON {"folder", "package", "settings"}: on the Triton CPU tier the module is imported the
way the target will be, under the tier's hooks (the in-target package, copied under a random name
into that folder, whose CPU tier is installed first). Standard
library only: it must run in any target environment, and it never imports kvtasks.
"""
import hashlib
import importlib
import importlib.util
import json
import os
import sys


def _loaded_libraries():
    try:
        with open("/proc/self/maps") as maps:
            return sorted({line.split()[-1] for line in maps
                           if ".so" in line.rsplit("/", 1)[-1] and line.split()[-1].startswith("/")})
    except OSError:
        return []


def _digest(path):
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _editable_source(distribution):
    """The source folder of an editable install (PEP 610 direct_url.json), else None."""
    try:
        direct = json.loads(distribution.read_text("direct_url.json") or "{}")
    except ValueError:
        return None
    url = direct.get("url", "")
    if not direct.get("dir_info", {}).get("editable") or not url.startswith("file://"):
        return None
    from urllib.parse import unquote, urlparse

    return os.path.realpath(unquote(urlparse(url).path))


def _install_tier(tier):
    """Load the CPU tier's hooks from the package's copy and install them; return why not, or None."""
    spec = json.loads(tier)
    sys.path.insert(0, spec["folder"])
    try:
        settings = importlib.import_module(spec["package"] + ".configuration").TierSettings.of(spec["settings"])
        importlib.import_module(spec["package"] + ".cpu_tier").install(settings)
    except BaseException as exc:  # without torch or triton the import below says what it says
        return f"{type(exc).__name__}: {exc}"
    finally:
        sys.path.remove(spec["folder"])  # the package stays loaded; its folder shadows nothing
    return None


def main(out, module_name, tier, *roots):
    roots = [os.path.realpath(root) + os.sep for root in roots]
    found = {"module": module_name, "python_executable": sys.executable,
             "python_version": sys.version.split()[0], "error": None, "cpu_tier_error": None}
    if tier:
        found["cpu_tier_error"] = _install_tier(tier)
    try:
        module = importlib.import_module(module_name)
        path = os.path.realpath(getattr(module, "__file__", None) or next(iter(module.__path__)))
        found.update(module_path=path, module_version=getattr(module, "__version__", None),
                     inside_roots=any(path.startswith(root) for root in roots))
    except BaseException as exc:  # the probe reports, it never crashes: SystemExit from a module body too
        import traceback

        found["error"] = f"{type(exc).__name__}: {exc}"
        found["traceback"] = traceback.format_exc()[-2000:]
    artifacts = []
    for library in _loaded_libraries():
        real = os.path.realpath(library)
        if any(real.startswith(root) for root in roots) and os.path.isfile(real):
            artifacts.append({"path": real, "size": os.path.getsize(real), "sha256": _digest(real)})
    found["native_artifacts"] = artifacts
    try:  # where `python -m pytest` would import pytest from (found, not imported: that costs a second)
        spec = importlib.util.find_spec("pytest")
        found["pytest"] = (spec.origin or "namespace package") if spec is not None else ""
    except Exception as exc:  # a broken finder on the path: the pytest run itself will say more
        found["pytest"] = f"unfindable: {type(exc).__name__}: {exc}"
    try:
        from importlib import metadata

        # each .metadata access parses the file again: once per distribution is what a large
        # environment (a torch stack) can afford on every validation
        named = [(d, d.metadata) for d in metadata.distributions()]
        named = [(d, meta["Name"], meta["Version"]) for d, meta in named if meta["Name"]]
        found["distributions"] = sorted({f"{name}=={version}" for _, name, version in named})
        found["editable"] = {name: source for d, name, _ in named if (source := _editable_source(d))}
    except Exception as exc:  # a broken installation must not hide the rest of the answer
        found["distributions"] = [f"unreadable: {exc}"]
    with open(out, "w") as handle:
        json.dump(found, handle)


if __name__ == "__main__":
    main(*sys.argv[1:])
