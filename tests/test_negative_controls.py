"""Every claim has a negative control: a test next to it in claims/ (``@pytest.mark.control(id)``)
that runs the claim's own measurement and rule on a case where the effect is absent or reversed
and shows the rule coming out the other way. A rule that cannot fail is a defect."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_claim_has_a_negative_control():
    listed = subprocess.run([sys.executable, "-m", "pytest", "claims", "--claims-list", "-q",
                             "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True)
    assert listed.returncode == 0, listed.stdout[-2000:] + listed.stderr[-2000:]
    claims = [line for line in listed.stdout.splitlines() if "  [cpu]  " in line]
    assert len(claims) >= 40, listed.stdout[-2000:]
    uncontrolled = [line.split()[0] for line in claims if line.endswith("control: NONE")]
    assert not uncontrolled, f"claims without a negative control: {uncontrolled}"


def test_steps_to_accuracy_counts_the_window():
    from normsys.training.diagnostics import steps_to_accuracy

    fast = [0.5] * 20 + [1.0] * 200
    assert steps_to_accuracy(fast, 0.9, window=50) == 60  # window of steps 11-60: 10 x 0.5, 40 x 1.0
    assert math.isnan(steps_to_accuracy([0.5] * 100))  # never reached: NaN -> inconclusive
