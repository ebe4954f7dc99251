"""Python code run in a child process with the build's autocastgen package: for tests of what is
process-wide (environment variables read at import, files written at exit, a policy loaded once).

The children are forked from one parent per test process that has imported torch already
(child_zygote.py): a child then starts in about 0.1 s of CPU instead of 2. A child still imports
autocastgen itself, in its own environment, as `python -c` would."""
from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

# The environment variables that switch autocastgen's insight or a policy on for a whole process:
# the parent's are not inherited, so a child sees only those the test sets.
PROCESS_SWITCHES = ("AUTOCASTGEN_STATS", "AUTOCASTGEN_RECORD", "AUTOCASTGEN_FINITE", "AUTOCASTGEN_POLICY")
ZYGOTE = Path(__file__).resolve().parent / "child_zygote.py"
TIMEOUT_S = 300


def child_environment(build: Path, env: dict[str, str] | None) -> dict[str, str]:
    child_env = dict(os.environ)
    child_env["PYTHONPATH"] = os.pathsep.join([str(build / "python"), child_env.get("PYTHONPATH", "")])
    for name in PROCESS_SWITCHES:
        child_env.pop(name, None)
    child_env.update(env or {})
    return child_env


class Zygote:
    """The forking parent (child_zygote.py), started with the children's environment less the
    test's own variables; stopped when this process exits."""

    def __init__(self, build: Path):
        responses, theirs = os.pipe()
        self.process = subprocess.Popen([sys.executable, str(ZYGOTE), str(theirs)], stdin=subprocess.PIPE,
                                        pass_fds=(theirs,), env=child_environment(build, None))
        os.close(theirs)
        self.responses = responses
        self.pending = b""  # read from the pipe, not yet a whole line
        atexit.register(self.stop)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(timeout=30)
        os.close(self.responses)

    def response(self, deadline: float) -> dict | None:
        """The next line from the parent, or None at the deadline."""
        while b"\n" not in self.pending:
            ready, _, _ = select.select([self.responses], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(self.responses, 4096)
            if not chunk:
                raise RuntimeError(f"the test children's parent ({ZYGOTE.name}) ended: exit {self.process.wait()}")
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)

    def run(self, code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
        with tempfile.TemporaryDirectory(prefix="child-") as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            request = {"code": code, "env": env, "stdout": str(out), "stderr": str(err)}
            self.process.stdin.write(json.dumps(request).encode() + b"\n")
            self.process.stdin.flush()
            deadline = time.monotonic() + TIMEOUT_S
            started = self.response(deadline)
            if started is None:
                raise RuntimeError(f"the test children's parent ({ZYGOTE.name}) did not fork within {TIMEOUT_S} s")
            ended = self.response(deadline)
            if ended is None:
                os.kill(started["pid"], signal.SIGKILL)
                self.response(time.monotonic() + 30)
                raise subprocess.TimeoutExpired(["python", "-c", "..."], TIMEOUT_S, out.read_text(), err.read_text())
            return subprocess.CompletedProcess(["python", "-c", code], ended["status"], out.read_text(errors="replace"),
                                               err.read_text(errors="replace"))


_zygotes: dict[Path, Zygote] = {}


def run_child(build: Path, prelude: str, body: str, env: dict[str, str] | None = None,
              check: bool = True) -> subprocess.CompletedProcess:
    """Runs `prelude` + `body` (dedented) with <build>/python first on the path; with `check`, a
    non-zero exit fails the test with the child's stderr."""
    if "PYTHONPATH" in (env or {}):  # sys.path was set when the parent started
        raise ValueError("run_child: a child's PYTHONPATH is the parent's (<build>/python first)")
    code = prelude + textwrap.dedent(body)
    child_env = child_environment(build, env)
    zygote = _zygotes.get(build)
    if zygote is None or zygote.process.poll() is not None:
        zygote = _zygotes[build] = Zygote(build)
    result = zygote.run(code, child_env)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def last_json(result: subprocess.CompletedProcess):
    """The child's last line of output, read as JSON."""
    return json.loads(result.stdout.strip().splitlines()[-1])


def run_bounded(build: Path, code: str, *, memory_mb: int = 200, cpu_s: int = 20, file_bytes: int | None = None,
                timeout_s: float = 120) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter that has the build's `autocastgen` package *without*
    importing it (no torch, no runtime: the package's modules that need neither, such as
    autocastgen._core.atomic or autocastgen.reporter.reading, import on their own), under limits set
    before it starts: address space (`ulimit -v`), CPU seconds (SIGXCPU past them: a bound, not a
    timing), and optionally the size of a file it may write (`ulimit -f`: writes past it fail with
    EFBIG, Python ignores SIGXFSZ). The result's stdout/stderr are text."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))
        if file_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))

    package = build / "python" / "autocastgen"
    prelude = ("import sys, types\n"
               f"_package = types.ModuleType('autocastgen'); _package.__path__ = [{str(package)!r}]\n"
               "sys.modules['autocastgen'] = _package\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True,
                          errors="backslashreplace", preexec_fn=limit, env=env, timeout=timeout_s)
