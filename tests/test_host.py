"""The host is read one way: every settings field names its variable; bad values are usage errors."""
import pytest

from kvtasks.host import HostSettings, IdleSettings
from kvtasks.errors import UsageError


def test_unset_variables_keep_their_defaults_and_perf_timeout_follows_timeout():
    host = HostSettings.from_environ({"TIMEOUT": "60", "KVTASKS_IDLE_SAMPLES": "4", "PICKER": " "})
    assert (host.timeout, host.perf_timeout, host.perf_repeat, host.picker) == (60, 60, 3, None)
    assert host.idle == IdleSettings(samples=4)
    assert HostSettings.from_environ({"TIMEOUT": "60", "PERF_TIMEOUT": "90"}).perf_timeout == 90


@pytest.mark.parametrize("variable,value,message", [
    ("KVTASKS_IDLE_SAMPLES", "0", "KVTASKS_IDLE_SAMPLES must be a positive integer"),
    ("KVTASKS_IDLE_INTERVAL_S", "-1", "KVTASKS_IDLE_INTERVAL_S must be a number >= 0"),
    ("KVTASKS_IDLE_MIN_FREE_GIB", "lots", "KVTASKS_IDLE_MIN_FREE_GIB must be a number"),
    ("PERF_CONTROL_TOL", "1.5", "PERF_CONTROL_TOL must be in (0, 1]"),
    ("PYLIB", "/nonexistent/lib", "PYLIB '/nonexistent/lib' is not a directory"),
])
def test_a_bad_value_names_its_variable(variable, value, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace("]", r"\]")):
        HostSettings.from_environ({variable: value})
