"""Fresh noise is fresh in every process, not only from one call to the next.

Two calls in one process can differ while every process repeats the same sequence (a per-process
counter or a fixed default seed behind ``rng=None``): then two runs of the same command, or two
workers of one job, release identical noise, and the difference of their outputs is the
difference of their inputs. Each case here runs in two separate interpreters and compares.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: each prints the hex of the first and the second fresh draw of one path, in a new process
CASES = {
    "mechanism.privatize": (
        "from privembed import LaplaceMechanism\n"
        "m = LaplaceMechanism(epsilon=5.0)\n"
        "X = np.eye(4, 8)\n"
        "draws = [m.privatize(X), m.privatize(X)]\n"
    ),
    "release.protect": (
        "from privembed import GaussianMechanism\n"
        "from privembed.release import protect\n"
        "m = GaussianMechanism(epsilon=5.0, delta=1e-5)\n"
        "X = np.eye(4, 8)\n"
        "draws = [protect(X, m), protect(X, m)]\n"
    ),
    "rng.as_generator": (
        "from privembed.core.rng import as_generator\n"
        "draws = [as_generator(None).standard_normal(8), as_generator(None).standard_normal(8)]\n"
    ),
    "rng.spawn": (
        "from privembed.core.rng import spawn\ndraws = [g.standard_normal(8) for g in spawn(None, 2)]\n"
    ),
}


def _draws(code: str) -> list[bytes]:
    env = {**os.environ, "PYTHONPATH": str(SRC), "PRIVEMBED_JIT": "0"}
    program = (
        "import numpy as np\n"
        + code
        + "for d in draws: print(np.ascontiguousarray(d, dtype='<f8').tobytes().hex())\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return [bytes.fromhex(line) for line in r.stdout.split()]


@pytest.mark.parametrize("path", list(CASES))
def test_fresh_noise_differs_across_processes(path):
    a1, a2 = _draws(CASES[path])
    b1, b2 = _draws(CASES[path])
    # within a process, and across processes call by call: no two draws share a value
    values = [np.frombuffer(x, dtype="<f8") for x in (a1, a2, b1, b2)]
    for i in range(4):
        for j in range(i + 1, 4):
            assert not np.any(values[i] == values[j]), (path, i, j)
