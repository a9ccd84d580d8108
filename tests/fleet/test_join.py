"""The fleet's parts that need no Ray runtime: joining (fleet-node), the picker's arch restriction,
a manifest's engine and archs, and how a PR's arch runs merge into one verdict."""
import json

import pytest

from kvtasks.front import cli
from kvtasks.run import pipeline
from kvtasks.fleet import arch_report
from kvtasks.gpu import picker
from kvtasks.host import IdleSettings
from tests.batches import doit
from tests.conftest import IDLE_AMD
from tests.test_report import complete_run

MI_B = {**IDLE_AMD, "hip_id": 1, "bdf": "0000:b0:00.0", "market_name": "Fake MI-B", "target_graphics_version": "gfx-b"}


def test_fleet_node_advertises_one_resource_per_arch(gpu_host, capsys):
    gpu_host(amd=[IDLE_AMD, {**IDLE_AMD, "hip_id": 2, "bdf": "0000:c2:00.0"}, MI_B])
    assert cli.main(["fleet-node", "--address", "head:6379", "--dry-run"]) == 0
    # the fake library's banners reach capsys in-process; the command is the last line
    command = capsys.readouterr().out.splitlines()[-1].split()
    assert command[1:4] == ["start", "--address=head:6379", "--num-gpus=3"]
    assert json.loads(command[4].split("=", 1)[1]) == {"kvtasks-arch:gfx-b": 1, "kvtasks-arch:gfx-test": 2}
    assert len(command) == 5
    assert cli.main(["fleet-node", "--address", "head:6379", "--dry-run", "--block"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].split()[1:] == [*command[1:], "--block"]


def test_fleet_node_without_a_gpu_refuses_with_the_pickers_reason(capsys):
    assert cli.main(["fleet-node", "--address", "head:6379"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no GPU to offer the fleet" in err[0] and "no GPU device node" in err[0]


def test_the_picker_claims_only_the_tasks_arch(gpu_host):
    gpu_host(amd=[IDLE_AMD, MI_B])
    settings = IdleSettings(samples=1, interval_s=0)
    assert [w.device.index for w in picker.pick(settings, arch="gfx-b").ranked] == [1]
    missing = picker.pick(settings, arch="gfx-z")
    assert missing.code == picker.NO_GPUS and "no GPU of architecture gfx-z" in missing.message
    assert "gfx-b, gfx-test" in missing.message


@pytest.mark.parametrize("manifest, said", [
    ({"archs": ["gfx942"]}, "with engine=ray"),
    ({"engine": "slurm"}, "'slurm' is not an engine"),
    ({"engine": "ray", "archs": "gfx942"}, "`archs` is a list"),
])
def test_a_manifests_engine_and_archs_are_checked(manifest, said, tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"repo": str(tmp_path), "target": "t.py", "prs": [{"label": "a", "patch": "p"}],
                                **manifest}))
    done = doit(tmp_path / "home", "batch", f"manifest={path}")
    assert done.returncode == 64 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_an_arch_without_a_run_is_inconclusive_and_named():
    missing = arch_report.not_run("gfx950", "no node in the cluster has this architecture")
    assert missing.verdict == "INCONCLUSIVE" and missing.node is None
    assert [(f.severity, f.stage) for f in missing.findings] == [("note", "fleet")]
    assert "gfx950: no node in the cluster has this architecture" == missing.findings[0].detail


def test_archs_that_ran_on_different_runtimes_are_said_to_keep_base_evidence_of_their_own():
    body = pipeline.compose("pr", complete_run())
    runs = {arch: arch_report.arch_run(body, f"node-{arch}", runtime, "r.json")
            for arch, runtime in (("gfx-a", "a" * 64), ("gfx-b", "b" * 64))}
    said = [f.detail for f in arch_report.merge("pr", {"gfx-a": body, "gfx-b": body}, runs).findings
            if f.stage == "fleet"]
    assert said == [f"the archs ran on different runtimes (gfx-a: {'a' * 12}, gfx-b: {'b' * 12}), so each has base "
                    "evidence of its own"]
    runs["gfx-b"] = arch_report.arch_run(body, "node-b", "a" * 64, "r.json")
    assert not [f for f in arch_report.merge("pr", {"gfx-a": body, "gfx-b": body}, runs).findings if f.stage == "fleet"]


def test_the_fleet_modules_import_no_cycle():
    import ast
    from pathlib import Path

    import kvtasks.fleet

    folder = Path(kvtasks.fleet.__file__).parent
    imports = {}
    for path in folder.glob("*.py"):
        named = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "kvtasks.fleet":
                named |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kvtasks.fleet."):
                named.add(node.module.rsplit(".", 1)[1])
        imports[path.stem] = named

    def cycle_through(module: str, path: tuple[str, ...]) -> tuple[str, ...] | None:
        for imported in sorted(imports.get(module, ())):
            if imported == path[0]:
                return (*path, imported)
            if imported not in path:
                found = cycle_through(imported, (*path, imported))
                if found:
                    return found
        return None

    assert [cycle_through(module, (module,)) for module in sorted(imports)] == [None] * len(imports)
