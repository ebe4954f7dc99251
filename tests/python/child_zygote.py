"""The parent of the test children (child_process.py): a process that has imported torch, and
forks one child per request, so each child starts with torch imported instead of importing it
again (about 2 s of CPU each). Nothing of autocastgen is imported here: what a test checks is
process-wide state that autocastgen sets up at its import, which each child still does itself.

Protocol: one JSON request a line on stdin ({"code", "env", "stdout", "stderr"}); on the file
descriptor named by argv[1], one line {"pid": N} when the child has started, then one line
{"status": S} when it has ended (S as subprocess's returncode: -N for a signal)."""
from __future__ import annotations

import builtins
import json
import os
import sys
import traceback
import types

import torch  # noqa: F401  (what every child imports first)


def become_child(request: dict, responses: int) -> None:
    """In the forked child: the request's environment, output files and code, as `python -c`
    would run it; ends the process through SystemExit, so exit handlers run as they would."""
    os.close(responses)
    os.environ.clear()
    os.environ.update(request["env"])
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        out = os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, fd)
        os.close(out)
    sys.argv = ["-c"]
    sys.path[0] = ""  # -c puts the working directory first, not this script's folder
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    try:
        exec(compile(request["code"], "<string>", "exec"), main.__dict__)
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        raise SystemExit(1) from None
    raise SystemExit(0)


def serve(responses: int) -> None:
    for line in sys.stdin.buffer:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            become_child(request, responses)  # never returns
        os.write(responses, json.dumps({"pid": pid}).encode() + b"\n")
        _, status = os.waitpid(pid, 0)
        os.write(responses, json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode() + b"\n")


if __name__ == "__main__":
    serve(int(sys.argv[1]))
