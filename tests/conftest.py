"""Hypothesis profiles: "ci" (the default) keeps property tests to a few seconds;
`HYPOTHESIS_PROFILE=large python -m pytest tests/test_plan_order.py` runs a local soak."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, settings

settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "large", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def npm_installed(folder: Path, package: str) -> Path:
    """`folder/node_modules/<package>`, installed from `folder/package.json` first when it
    is missing: the README's test command needs no step of its own for the npm packages
    some tests run against (the AG-UI client, the MCP reference server). Once per
    folder, under a lock file, so parallel test processes install it once."""
    import fcntl
    import shutil
    import subprocess

    target = folder / "node_modules" / package
    if target.exists():
        return target
    npm = shutil.which("npm")
    assert npm is not None, "Node.js and npm are needed for this test (Debian: nodejs, npm)"
    with open(folder / ".npm-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=folder,
                check=True,
                timeout=600,
            )
    return target
