"""XLA_FLAGS for a test's subprocess: this session's flags (tests/conftest.py: the compile options every
test runs with) with another fake CPU device count, so that its results are bitwise comparable with ours."""
import os
import re

_DEVICES = re.compile(r"--xla_force_host_platform_device_count=\d+\s*")


def xla_flags(devices: int) -> str:
    """``--xla_force_host_platform_device_count=DEVICES`` plus every other flag of this process's XLA_FLAGS."""
    others = _DEVICES.sub("", os.environ.get("XLA_FLAGS", "")).strip()
    return f"--xla_force_host_platform_device_count={devices} {others}".strip()
