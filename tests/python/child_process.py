"""Python code run in a child process with the build's autocastgen package: for tests of what is
process-wide (environment variables read at import, files written at exit, a policy loaded once)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

# The environment variables that switch autocastgen's insight or a policy on for a whole process:
# the parent's are not inherited, so a child sees only those the test sets.
PROCESS_SWITCHES = ("AUTOCASTGEN_STATS", "AUTOCASTGEN_RECORD", "AUTOCASTGEN_FINITE", "AUTOCASTGEN_POLICY")


def run_child(build: Path, prelude: str, body: str, env: dict[str, str] | None = None,
              check: bool = True) -> subprocess.CompletedProcess:
    """Runs `prelude` + `body` (dedented) with <build>/python first on the path; with `check`, a
    non-zero exit fails the test with the child's stderr."""
    child_env = dict(os.environ)
    child_env["PYTHONPATH"] = os.pathsep.join([str(build / "python"), child_env.get("PYTHONPATH", "")])
    for name in PROCESS_SWITCHES:
        child_env.pop(name, None)
    child_env.update(env or {})
    result = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(body)],
                            capture_output=True, text=True, env=child_env, timeout=300)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def last_json(result: subprocess.CompletedProcess):
    """The child's last line of output, read as JSON."""
    return json.loads(result.stdout.strip().splitlines()[-1])
