"""One lock helper: an exclusive flock, taken at once or waited for, released when its fd closes."""
import os

from kvtasks.system import locks


def test_a_held_lock_is_refused_at_once_and_free_again_when_its_holder_lets_go(tmp_path):
    path = tmp_path / "locks" / "gpu-0.lock"
    holder = locks.try_hold(path)
    assert holder is not None and locks.try_hold(path) is None
    os.close(holder)
    again = locks.try_hold(path)
    assert again is not None
    with locks.held(locks.open_lock(tmp_path / "tree.lock")):
        assert locks.try_hold(tmp_path / "tree.lock") is None
    assert locks.try_hold(tmp_path / "tree.lock") is not None


def test_another_users_lock_file_is_taken_read_only(tmp_path, monkeypatch):
    path = tmp_path / "gpu-1.lock"
    path.touch()
    real_open = os.open

    def read_only(name, flags, *mode):
        if flags & os.O_RDWR:
            raise PermissionError(13, "Permission denied", str(name))
        return real_open(name, flags, *mode)

    monkeypatch.setattr(os, "open", read_only)
    fd = locks.try_hold(path)
    assert fd is not None and locks.try_hold(path) is None
