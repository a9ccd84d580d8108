"""A soak under signals: validations of small built repositories, each sent SIGINT, SIGTERM or
SIGKILL at a random fault point (kvtasks.system.faults) or left alone, and checked after each.

Runs are single validations (`python -m kvtasks`), `doit -n 2` batches of three PRs and, one run
in RAY_EVERY, a `doit batch engine=ray` of two PRs on a local Ray runtime; all share one
workspace, so later runs reuse (or refuse) what killed ones stored. SIGINT goes to the
validator's whole job, as a terminal's Ctrl-C does; SIGTERM and SIGKILL to the validator process.
After each run:
- the tree is byte-identical to what was supplied with its journal settled (after a SIGKILL,
  waiting up to HANDED_BACK_S for the guardian); a fleet run's node trees are clean too;
- no process of the run is alive (its environment tag, or a working directory in its trees)
  once ORPHAN_GRACE_S has passed; orphans are listed, counted and killed;
- no heartbeat still beats: some PRs' kernels start, at import, a process that outlives its
  test as a hostile kernel would (a double-forked setsid daemon with its environment cleared, in
  '/', re-forking every 10 ms; a child that ignores SIGTERM; a shell loop sent into the
  background), each writing a heartbeat file; one still written ORPHAN_GRACE_S after the run is
  a survivor (counted, and its writers told to stop by a file beside the heartbeat);
- the store is consistent: every evidence document reads and names only artifacts that exist,
  and every published report parses and says what its stored evidence composes to (verdict and
  stage statuses; a fleet report, its verdict); anything else counts as fabricated.
Prints a line per kind of run, then last
`soak: N runs, K signals, trees handed back K/K, orphans 0, fabricated 0, survivors 0` with the
measured numbers. With --smoke, one sequential run (a single validation) and its checks: a check
that the bench runs, not a soak.

    python bench/soak.py --runs 200 --seed 1
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvtasks.run import phases
from kvtasks.system import faults  # noqa: E402
from kvtasks.evidence.store import Store  # noqa: E402
from kvtasks.evidence.workspace import Workspace  # noqa: E402
from kvtasks.worktree import Worktree  # noqa: E402
from tests.batches import PROJECT, eight_prs, write_manifest  # noqa: E402
from tests.conftest import FAKES, IDLE_AMD  # noqa: E402
from tests.kernel_repos import (DAEMON_AT_IMPORT, KERNEL, KERNEL_TAIL_BUG, TESTS, git, kernel_repo,  # noqa: E402
                                make_patch, snapshot, tiled_repo)

SIGNALS = (None, signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
POINTS = ("picker", "lease", "merge_sim", "apply", "launch", "correctness_repo_tests",
          "sensitivity", "report", "page")
BATCH_EVERY, RAY_EVERY = 4, 40  # run i is a -n 2 batch when i % BATCH_EVERY == BATCH_EVERY - 1, Ray likewise
RUN_BOUND_S = 300  # a run, or what is left of it after its signal, must end within this
HANDED_BACK_S = 30
ORPHAN_GRACE_S = 15
# Ray's own agents (dashboard, runtime env) notice their raylet died with a SIGKILLed driver only
# after about a minute, and then exit
RAY_ORPHAN_GRACE_S = 90
TAG = "KVTASKS_SOAK_RUN"
BEAT_QUIET_S = 0.3  # a heartbeat unchanged for this long has stopped

# kernels that leave a process behind at import, each beating into the file named {beat}
DAEMONS = {
    "setsid-daemon": DAEMON_AT_IMPORT,
    "sigterm-ignorer": """import subprocess, sys
subprocess.Popen([sys.executable, "-c", "import signal, time\\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
                  "import os\\nwhile not os.path.exists({beat!r} + '.stop'):\\n    open({beat!r}, 'a').write('beat\\\\n')\\n    time.sleep(0.05)"])
""",
    "background-shell": """import os
os.system("while [ ! -e '{beat}.stop' ]; do echo beat >> '{beat}'; sleep 0.05; done > /dev/null 2>&1 &")
""",
}


class Soak:
    def __init__(self, work: Path, seed: int):
        self.work, self.rng = work, random.Random(seed)
        self.home = work / "home"
        self.fleet_home = work / "nodes"
        fake = work / "amdsmi.json"
        fake.write_text(json.dumps({"devices": [IDLE_AMD, {**IDLE_AMD, "hip_id": 58, "bdf": "0000:c2:00.0"}]}))
        (work / "locks").mkdir()
        self.env = {**os.environ, "KVTASKS_HOME": str(self.home), "KVTASKS_FAKE_AMDSMI": str(fake),
                    "KVTASKS_LOCK_DIR": str(work / "locks"), "KVTASKS_SCRATCH": str(work / "scratch"),
                    "KVTASKS_IDLE_SAMPLES": "2", "KVTASKS_IDLE_INTERVAL_S": "0",
                    "PYTEST_ADDOPTS": "-p no:hypothesispytest", "KVTASKS_FLEET_HOME": str(self.fleet_home),
                    "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(FAKES), os.environ.get("PYTHONPATH")]))}
        for name in ("RAY_ADDRESS", "PICKER", faults.POINT_VARIABLE, faults.MARKER_VARIABLE):
            self.env.pop(name, None)
        self.kernels = kernel_repo(work / "kernels")
        self.kernel_prs = [
            make_patch(self.kernels, {"kernels/scale.py": KERNEL_TAIL_BUG}, work / "tail.patch"),
            make_patch(self.kernels, {"README.md": "docs\n"}, work / "docs.patch"),
            make_patch(self.kernels, {"tests/test_scale.py": TESTS.replace("atol=1e-6", "atol=1e-1"),
                                      "tests/test_added.py": "def test_added():\n    pass\n"}, work / "loose.patch"),
        ]
        (work / "beats").mkdir()
        self.beats = {name: work / "beats" / name for name in DAEMONS}
        self.kernel_prs += [make_patch(self.kernels, {"kernels/scale.py": DAEMONS[name].format(beat=str(beat)) + KERNEL},
                                       work / f"{name}.patch") for name, beat in self.beats.items()]
        self.tiled = tiled_repo(work / "tiled")
        self.tiled_prs = eight_prs(self.tiled, work / "tiled-patches")
        self.supplied = {self.kernels: snapshot(self.kernels), self.tiled: snapshot(self.tiled)}
        self.counts = Counter()
        self.by_kind: dict[str, Counter] = {}
        self.failures: list[str] = []
        self.checked: set[tuple[str, str, float]] = set()  # evidence documents read already, as written

    # -- one run ---------------------------------------------------------------------------------
    def command(self, number: int, kind: str) -> tuple[list[str], Path, list[str]]:
        """The validator's argv, the tree it is given and the labels it publishes."""
        if kind == "sequential":
            label = f"s{number}"
            patch = self.rng.choice(self.kernel_prs)
            return ([sys.executable, "-m", "kvtasks", "--repo", str(self.kernels), "--patch", str(patch), "--target",
                     "tests/test_scale.py", "--no-perf", "--quiet", "--label", label,
                     "--out", str(self.work / "out" / f"{label}.json")], self.kernels, [label])
        chosen = ("docs-1", "tail", "loose") if kind == "batch" else ("docs-1", "tail")
        prs = {f"{kind[0]}{number}-{name}": self.tiled_prs[name] for name in chosen}
        manifest = write_manifest(self.tiled, prs, self.work / "manifests" / f"{kind}-{number}.json")
        parallel = ["-n", "2"] if kind == "batch" else []
        engine = ["engine=ray"] if kind == "ray" else []
        return ([sys.executable, "-m", "doit", "-f", str(PROJECT / "dodo.py"), *parallel, "batch",
                 f"manifest={manifest}", *engine], self.tiled, list(prs))

    def run(self, number: int, kind: str) -> None:
        sig = self.rng.choice(SIGNALS)
        point = self.rng.choice(POINTS)
        argv, tree, labels = self.command(number, kind)
        marker = self.work / "markers" / f"{number}"
        env = {**self.env, TAG: str(number)}
        if sig is not None:
            env.update({faults.POINT_VARIABLE: point, faults.MARKER_VARIABLE: str(marker)})
        log = self.work / "logs" / f"{number}-{kind}.log"
        started = time.monotonic()
        with open(log, "w") as output:
            validator = subprocess.Popen(argv, cwd=PROJECT, env=env, stdin=subprocess.DEVNULL, stdout=output,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        sent = self._signal(validator, sig, marker, started)
        stats = self.by_kind.setdefault(kind, Counter())
        stats["runs"] += 1
        if sent:
            self.counts["signals"] += 1
            stats[signal.Signals(sig).name] += 1
        try:
            validator.wait(timeout=max(1.0, RUN_BOUND_S - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            self._fail(number, f"{kind} run still running {RUN_BOUND_S}s on ({log})")
            os.killpg(validator.pid, signal.SIGKILL)
            validator.wait()
        stats["wall_s"] += time.monotonic() - started
        back = self._handed_back(number, tree, kind)
        if sent:
            self.counts["handed_back"] += back
        self._orphans(number, tree, RAY_ORPHAN_GRACE_S if kind == "ray" else ORPHAN_GRACE_S)
        self._survivors(number)
        self._fabricated(number, labels)
        if not sent:  # left alone, or never reached its point: a whole validation with its reports
            missing = [label for label in labels if not (self.home / "reports" / label / "validation_report.json").exists()]
            if validator.returncode not in (0, 1, 2) or missing:
                self._fail(number, f"a run nothing stopped exited {validator.returncode} without reports for {missing} "
                                   f"({log})")
        said = f"{signal.Signals(sig).name} at {point}" if sent else "left alone" if sig is None else \
            f"{signal.Signals(sig).name} never sent ({point} not reached)"
        print(f"run {number} {kind}: {said}, exit {validator.returncode}, {time.monotonic() - started:.1f}s",
              flush=True)

    def _signal(self, validator: subprocess.Popen, sig, marker: Path, started: float) -> bool:
        """Wait for the fault point and send `sig`; False when none is sent (left alone, or the run
        ended without reaching the point)."""
        if sig is None:
            return False
        while faults.reached(marker) is None:
            if validator.poll() is not None or time.monotonic() - started > RUN_BOUND_S:
                return False
            time.sleep(0.02)
        if sig == signal.SIGINT:
            os.killpg(validator.pid, sig)
        else:
            validator.send_signal(sig)
        return True

    # -- the checks --------------------------------------------------------------------------------
    def _handed_back(self, number: int, tree: Path, kind: str) -> bool:
        trees = [tree] + (sorted(self.fleet_home.glob("clones/*/trees/*")) if kind == "ray" else [])
        deadline = time.monotonic() + HANDED_BACK_S
        while True:
            dirty = [path for path in trees if not self._clean(path, self.supplied.get(path))]
            if not dirty or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        for path in dirty:
            self._fail(number, f"tree {path} not handed back: journal {Worktree(path, None).journal.pending()}, "
                               f"status {git(path, 'status', '--porcelain', '--ignored')!r}")
        return not dirty

    @staticmethod
    def _clean(tree: Path, supplied) -> bool:
        if Worktree(tree, None).journal.pending() is not None:
            return False
        if supplied is not None:
            return snapshot(tree) == supplied
        return git(tree, "status", "--porcelain", "--ignored", "--untracked-files=all") == ""

    def _orphans(self, number: int, tree: Path, grace_s: float) -> None:
        places = (tree, self.fleet_home)
        deadline = time.monotonic() + grace_s
        while (left := _processes_of(str(number), places)) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid, argv in left.items():
            self.counts["orphans"] += 1
            self._fail(number, f"orphan pid {pid}: {argv[:160]}")
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _survivors(self, number: int) -> None:
        """Every heartbeat has stopped: waited for up to ORPHAN_GRACE_S (a SIGKILLed validator's
        guardian ends its launches), then each one still beating is a survivor, its writers killed."""
        deadline = time.monotonic() + ORPHAN_GRACE_S
        while (beating := [name for name, beat in self.beats.items() if _beating(beat)]) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        for name in beating:
            self.counts["survivors"] += 1
            self._fail(number, f"the {name} kernel's process still beats after the run")
            _kill_writers(self.beats[name])

    def _fabricated(self, number: int, labels: list[str]) -> None:
        workspace = Workspace(self.home)
        store = Store(self.home / "cache")
        for label in labels:
            for path in (self.home / "reports" / label / "validation_report.json",
                         self.work / "out" / f"{label}.json"):
                if not path.exists():
                    continue
                why = _disagrees(workspace, store, label, path)
                if why:
                    self.counts["fabricated"] += 1
                    self._fail(number, f"report {path}: {why}")
        for entry in store.entries():
            written = (entry["kind"], entry["key"], entry["written"])
            if written in self.checked:
                continue
            self.checked.add(written)
            why = store.unreadable(entry["kind"], entry["key"]) or _missing_artifacts(store, entry)
            if why:
                self.counts["fabricated"] += 1
                self._fail(number, f"evidence {entry['kind']}:{entry['key']}: {why}")

    def _fail(self, number: int, what: str) -> None:
        self.failures.append(f"run {number}: {what}")
        print(f"  FAIL run {number}: {what}", flush=True)


def _disagrees(workspace: Workspace, store: Store, label: str, path: Path) -> str | None:
    """Why a published report does not say what its stored evidence composes to, or None."""
    try:
        published = json.loads(path.read_text())
    except ValueError as exc:
        return f"does not parse ({exc})"
    if store.missing_evidence(label):
        return f"its evidence is missing: {store.missing_evidence(label)}"
    record = store.label(label) or {}
    if record.get("fleet"):
        from kvtasks.fleet import arch_report
        composed, runs = {}, {}
        for arch, arch_label in record["fleet"]["archs"].items():
            stored = arch_report.ArchRun.model_validate(record["fleet"]["runs"][arch])
            if arch_label is not None:
                composed[arch] = phases.compose(workspace, arch_label)
                stored = arch_report.arch_run(composed[arch], stored.node, stored.runtime_hash, stored.report or "")
            runs[arch] = stored
        expected = {"verdict": arch_report.merge(label, composed, runs).verdict}
        seen = {"verdict": published["verdict"]}
    else:
        composed = phases.compose(workspace, label).model_dump(mode="json")
        expected = {"verdict": composed["verdict"],
                    "stages": {name: (stage or {}).get("status") for name, stage in composed["stages"].items()}}
        seen = {"verdict": published["verdict"],
                "stages": {name: (stage or {}).get("status") for name, stage in published["stages"].items()}}
    return None if seen == expected else f"published {seen} but its evidence composes to {expected}"


def _missing_artifacts(store: Store, entry: dict) -> str | None:
    """An evidence document that names a kept artifact the store does not hold."""
    runs = str(store.root / "runs") + os.sep
    text = Path(entry["path"]).read_text()
    for piece in text.split('"'):
        if piece.startswith(runs) and not Path(piece).exists():
            return f"names {piece}, which the store does not hold"
    return None


def _beating(beat: Path) -> bool:
    """Whether something still writes the heartbeat file."""
    if not beat.exists():
        return False
    size = beat.stat().st_size
    time.sleep(BEAT_QUIET_S)
    return beat.stat().st_size != size


def _kill_writers(beat: Path) -> None:
    """Stop a survivor's line (every one of the kernels above ends at the file beside its heartbeat)."""
    stop = beat.with_name(beat.name + ".stop")
    stop.touch()
    deadline = time.monotonic() + 5
    while _beating(beat) and time.monotonic() < deadline:
        pass
    stop.unlink()


def _processes_of(tag: str, places: tuple[Path, ...]) -> dict[int, str]:
    """Live processes of one run: those carrying its tag, or working in one of its trees."""
    found = {}
    wanted = f"{TAG}={tag}".encode()
    roots = [str(place.resolve()) for place in places]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            environ = (entry / "environ").read_bytes().split(b"\0")
            cwd = os.readlink(entry / "cwd")
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if state != "Z" and (wanted in environ or any(cwd == root or cwd.startswith(root + os.sep) for root in roots)):
            found[int(entry.name)] = argv
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="one sequential run (overrides --runs)")
    args = parser.parse_args()
    runs = 1 if args.smoke else args.runs
    with tempfile.TemporaryDirectory(prefix="kvtasks-soak-") as folder:
        work = Path(folder)
        for sub in ("markers", "logs", "out", "manifests"):
            (work / sub).mkdir()
        soak = Soak(work, args.seed)
        for number in range(runs):
            kind = "ray" if number % RAY_EVERY == RAY_EVERY - 1 else \
                "batch" if number % BATCH_EVERY == BATCH_EVERY - 1 else "sequential"
            soak.run(number, kind)
        for kind, stats in soak.by_kind.items():
            sent = ", ".join(f"{name} {stats[name]}" for name in ("SIGINT", "SIGTERM", "SIGKILL"))
            print(f"{kind}: {stats['runs']} runs ({sent}), mean {stats['wall_s'] / stats['runs']:.1f}s a run")
        for failure in soak.failures:
            print(failure)
        counts = soak.counts
        print(f"soak: {runs} runs, {counts['signals']} signals, trees handed back "
              f"{counts['handed_back']}/{counts['signals']}, orphans {counts['orphans']}, "
              f"fabricated {counts['fabricated']}, survivors {counts['survivors']}")
        sys.exit(1 if soak.failures else 0)


if __name__ == "__main__":
    main()
