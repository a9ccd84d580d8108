"""Launch a replay: the in-target package's replay.py, copied under a neutral name into a private
folder, run as a script in one side's tree by a fresh interpreter with an ordinary user's
environment (no test framework's variables, no VALIDATION_PHASE, no probe on the path), contained
like every launch."""
from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path
from typing import Mapping

from kvtasks.system import containment, processes
from kvtasks.harness import environment
from kvtasks.harness.in_target import replay as replay_format
from kvtasks.request import Request

REPLAY_SCRIPT = Path(replay_format.__file__)


def user_environment(request: Request, run_dir: Path, side: str, visible_devices: Mapping[str, str],
                     import_roots: list[str]) -> dict[str, str]:
    """What an ordinary user's process in the tree has: the caller's allowed variables but any
    test framework's, private caches (the side's own: a JIT build of head's never serves base's),
    the tree's import roots, the claimed device."""
    env = environment.construct(os.environ, phase_dir=run_dir / f"replay-{side}", label="",
                                python_path=import_roots, visible_devices=visible_devices)
    for name in [name for name in env if name.startswith("PYTEST") or name == "VALIDATION_PHASE"]:
        env.pop(name)
    env.update(environment.given_pairs(request.env))
    return env


def replay(request: Request, *, side: str, folders: list[Path], out: Path, run_dir: Path,
           visible_devices: Mapping[str, str], import_roots: list[str]) -> processes.Finished:
    """Replay the calls captured under each of `folders` in the tree `request.repo` holds now;
    what each produced lands under out/<index>/<call>/."""
    private = run_dir / "launches" / secrets.token_hex(8)
    private.mkdir(parents=True)
    script = private / f"x{secrets.token_hex(7)}.py"
    shutil.copyfile(REPLAY_SCRIPT, script)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    try:
        # started by a shell, as a user's command is: the interpreter is no session leader (a launch's
        # leader is one, so a kernel could tell a target run by os.getsid(0) == os.getpid())
        return containment.run(["/bin/sh", "-c", '"$@"; exit $?', "sh", request.host.python_bin, str(script), str(out),
                                *map(str, folders)],
                               timeout_s=request.host.timeout, cwd=request.repo,
                               env=user_environment(request, run_dir, side, visible_devices, import_roots))
    finally:
        shutil.rmtree(private, ignore_errors=True)
