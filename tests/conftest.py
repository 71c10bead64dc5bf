"""Hypothesis profiles: "ci" (the default) keeps property tests to a few seconds;
`HYPOTHESIS_PROFILE=large python -m pytest tests/test_plan_order.py` runs a local soak."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "large", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
