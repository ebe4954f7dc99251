#!/usr/bin/env python3
"""The C++ runtime's rooms depend one way (Note [runtime layers]): a file of runtime/torch/ or
runtime/include/ includes, and an object of libautocastgen_runtime_torch.so calls, only its own
room and rooms of lower layers; rooms of one layer include and call none of each other.

The layers and which files each room holds are read from the one place that states them, the
block of docs/architecture.md marked `<!-- runtime layers -->`: a line per room, top layer first,

    LAYER  ROOM  PATH...
               PATH...        (more of the room's paths)

with PATH relative to runtime/ (`torch/state/`: a folder and all below it; `torch/*.h`: a pattern
whose `*` stays within one folder). Every file of runtime/torch/ and runtime/include/ must belong
to exactly one room.

Checked:
- includes: every `#include "..."` (and `<autocastgen/...>`) of those files that names a file of
  the runtime, resolved as the build resolves it (the including file's folder, runtime/torch,
  runtime/include);
- calls: every symbol an object of one room leaves undefined and an object of another room defines
  (nm), so a call through a header's inline code counts too. A call through a function pointer a
  higher room registered (Note [runtime layers]) is no symbol and is what the rule allows. The
  objects are the runtime's (CMake's $<TARGET_OBJECTS>); none given is an error, since an empty list
  would check no call: `--includes-only` says there is no runtime built to read them from.
Usage: check_layers.py OBJECT.o... | --includes-only | --self-test"""
from __future__ import annotations

import fnmatch
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "runtime"
DOC = ROOT / "docs" / "architecture.md"
MARKER = "<!-- runtime layers -->"
INCLUDE = re.compile(r'^\s*#\s*include\s*(?:"(?P<quoted>[^"]+)"|<(?P<angled>autocastgen/[^>]+)>)')
SOURCES = (".h", ".hpp", ".cpp", ".cu", ".cuh")


@dataclass(frozen=True)
class Room:
    name: str
    layer: int  # 1 = the bottom
    paths: tuple[str, ...]


def read_layers(text: str, doc: str = "docs/architecture.md") -> list[Room]:
    """The rooms of the block after MARKER (its first fenced block), top layer first."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == MARKER)
    except StopIteration:
        raise SystemExit(f"FAIL: {doc} has no '{MARKER}' block") from None
    fence = next(i for i in range(start + 1, len(lines)) if lines[i].strip().startswith("```"))
    end = next(i for i in range(fence + 1, len(lines)) if lines[i].strip().startswith("```"))
    rows: list[tuple[int, str, list[str]]] = []
    for line in lines[fence + 1:end]:
        fields = line.split()
        if len(fields) >= 3 and fields[0].isdigit() and re.fullmatch(r"[a-z0-9_]+", fields[1]):
            rows.append((int(fields[0]), fields[1], fields[2:]))
        elif fields and "/" in fields[0] and rows:
            rows[-1][2].extend(fields)  # more paths of the room above
    rooms = [Room(name, layer, tuple(paths)) for layer, name, paths in rows]
    if not rooms:
        raise SystemExit(f"FAIL: the '{MARKER}' block of {doc} lists no room")
    layers = [room.layer for room in rooms]
    if layers != sorted(layers, reverse=True):
        raise SystemExit(f"FAIL: the '{MARKER}' block lists its layers top first: {layers}")
    names = [room.name for room in rooms]
    if len(set(names)) != len(names):
        raise SystemExit(f"FAIL: a room is listed twice in the '{MARKER}' block: {names}")
    return rooms


def matches(path: str, pattern: str) -> bool:
    if pattern.endswith("/"):
        return path.startswith(pattern)
    parts, wanted = path.split("/"), pattern.split("/")
    return len(parts) == len(wanted) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts, wanted))


def room_of(path: str, rooms: list[Room]) -> Room | None:
    """The room of `path` (relative to runtime/); None when no room holds it."""
    found = [room for room in rooms if any(matches(path, pattern) for pattern in room.paths)]
    if len(found) > 1:
        raise SystemExit(f"FAIL: runtime/{path} is in rooms {', '.join(r.name for r in found)}; "
                         f"the '{MARKER}' block must give it one")
    return found[0] if found else None


def allowed(user: Room, used: Room) -> bool:
    return user == used or used.layer < user.layer


def runtime_files() -> list[str]:
    return sorted(p.relative_to(RUNTIME).as_posix() for folder in ("torch", "include")
                  for p in (RUNTIME / folder).rglob("*") if p.is_file() and p.suffix in SOURCES)


def resolve(including: str, name: str, angled: bool) -> str | None:
    """The runtime file an include names, relative to runtime/; None for one outside the runtime."""
    folders = [] if angled else [(RUNTIME / including).parent]
    folders += [RUNTIME / "torch", RUNTIME / "include"]
    for folder in folders:
        candidate = (folder / name).resolve()
        if candidate.is_file():
            try:
                return candidate.relative_to(RUNTIME.resolve()).as_posix()
            except ValueError:
                return None  # core/, kernels/ through a relative path
    return None


def check_includes(rooms: list[Room], files: list[str], read=lambda f: (RUNTIME / f).read_text()) -> list[str]:
    problems = []
    for path in files:
        user = room_of(path, rooms)
        if user is None:
            problems.append(f"runtime/{path}: in no room (add it to the '{MARKER}' block of docs/architecture.md)")
            continue
        for number, line in enumerate(read(path).splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = resolve(path, m["quoted"] or m["angled"], angled=m["angled"] is not None)
            if target is None:
                continue
            used = room_of(target, rooms)
            if used is not None and not allowed(user, used):
                problems.append(f"runtime/{path}:{number}: includes runtime/{target}: room {user.name} "
                                f"(layer {user.layer}) may not use room {used.name} (layer {used.layer})")
    return problems


def source_of(obj: str) -> str | None:
    """runtime/-relative source of a CMake object (…/autocastgen_runtime_torch.dir/torch/x/y.cpp.o)."""
    m = re.search(r"\.dir/(torch/.+?)\.o(bj)?$", os.path.normpath(obj).replace("\\", "/"))
    return m.group(1) if m else None


def object_problems(rooms: list[Room], objects: list[str]) -> list[str]:
    """An object that is not of a room's source: its calls would be checked against no room."""
    return [f"{obj}: an object of no room's source (expected …/<target>.dir/torch/...)"
            for obj in objects if (source := source_of(obj)) is None or room_of(source, rooms) is None]


def check_calls(rooms: list[Room], objects: list[str]) -> list[str]:
    defined: dict[str, str] = {}
    undefined: dict[str, set[str]] = {}
    for obj in objects:
        out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            fields = line.split()
            if len(fields) == 3 and fields[1] in "TDBR":
                defined[fields[2]] = obj
            elif len(fields) == 2 and fields[0] == "U":
                undefined.setdefault(obj, set()).add(fields[1])
    return object_problems(rooms, objects) + call_problems(rooms, defined, undefined)


def call_problems(rooms: list[Room], defined: dict[str, str], undefined: dict[str, set[str]]) -> list[str]:
    """`defined`: symbol -> the object defining it; `undefined`: object -> the symbols it takes."""
    problems = []
    for obj, names in sorted(undefined.items()):
        source = source_of(obj)
        user = room_of(source, rooms) if source else None
        if user is None:
            continue
        for name in sorted(names):
            if name not in defined:
                continue
            target = source_of(defined[name])
            used = room_of(target, rooms) if target else None
            if used is not None and not allowed(user, used):
                demangled = subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip() or name
                problems.append(f"runtime/{source} calls {demangled} of runtime/{target}: room {user.name} "
                                f"(layer {user.layer}) may not use room {used.name} (layer {used.layer})")
    return problems


def objects_of(argv: list[str]) -> list[str] | None:
    """The object files of the command line; None for --includes-only. Anything else is refused:
    an argument that is no object, or no object at all (an empty $<TARGET_OBJECTS> checks no call)."""
    if argv == ["--includes-only"]:
        return None
    if not argv:
        raise SystemExit("FAIL: no object files given: the runtime's objects (CMake's $<TARGET_OBJECTS>), or "
                         "--includes-only where no runtime is built")
    odd = [a for a in argv if not a.endswith((".o", ".obj"))]
    if odd:
        raise SystemExit(f"FAIL: not an object file: {', '.join(odd)} (usage: check_layers.py OBJECT.o... | "
                         "--includes-only | --self-test)")
    return argv


def _refusal(call) -> str:
    """The message of the SystemExit that ``call()`` raises ('' when it raises none)."""
    try:
        call()
    except SystemExit as stop:
        return str(stop.code)
    return ""


def self_test(rooms: list[Room]) -> int:
    """Each rule of the checker, on a case that breaks it and one that keeps it; the real rooms for
    the includes and calls, small made-up blocks for the block's own rules."""
    failures: list[str] = []

    def expect(what: str, got: object, ok: bool) -> None:
        if not ok:
            failures.append(f"{what}: got {got!r}")

    by_name = {room.name: room for room in rooms}
    top = rooms[0]
    bottom = rooms[-1]
    # The block: read with a room's paths continued on the next line; refused without the marker,
    # with no room, with its layers not top first, with a room twice.
    def block(body: str) -> str:
        return f"text\n{MARKER}\n```\nlayer room files\n{body}```\n"
    read = read_layers(block("  2  upper  torch/upper/\n             include/upper.h\n  1  lower  torch/*.h\n"))
    expect("a block with a continued room", read, read == [Room("upper", 2, ("torch/upper/", "include/upper.h")),
                                                           Room("lower", 1, ("torch/*.h",))])
    for what, text, wanted in (
            ("a block without the marker", "```\nlayer room files\n  1  lower  torch/\n```\n", "has no"),
            ("a block with no room", block("nothing here\n"), "lists no room"),
            ("layers bottom first", block("  1  lower  torch/a/\n  2  upper  torch/b/\n"), "top first: [1, 2]"),
            ("a room listed twice", block("  2  upper  torch/a/\n  1  upper  torch/b/\n"), "listed twice")):
        got = _refusal(lambda text=text: read_layers(text))
        expect(what, got, wanted in got)
    # A file in two rooms is refused; `*` stays within one folder.
    twice = [Room("upper", 2, ("torch/a/",)), Room("lower", 1, ("torch/*/x.h",))]
    got = _refusal(lambda: room_of("torch/a/x.h", twice))
    expect("a file in two rooms", got, "is in rooms upper, lower" in got)
    expect("torch/*.h and a file below torch/x/", room_of("torch/state/state.h", [Room("base", 1, ("torch/*.h",))]),
           room_of("torch/state/state.h", [Room("base", 1, ("torch/*.h",))]) is None)
    # Includes: one up reported, naming the room it goes up to; one into a room of the same layer
    # reported; down, within the room, and outside the runtime not; a file in no room reported.
    up = f"torch/{bottom.name}/up.cpp" if bottom.name != "base" else "torch/up.h"
    files = {up: '#include "autocastgen/torch/policy_call.h"\n'}
    problems = check_includes(rooms, list(files), read=files.__getitem__)
    expect(f"an include of {top.name} from {bottom.name}", problems, len(problems) == 1 and top.name in problems[0])
    same_layer = [name for name in ("insight", "fp8") if name in by_name]
    if len(same_layer) == 2 and by_name["insight"].layer == by_name["fp8"].layer:
        files = {"torch/insight/side.cpp": "#include <autocastgen/fp8/fp8.h>\n"}
        problems = check_includes(rooms, list(files), read=files.__getitem__)
        expect("an include of fp8 from insight (one layer)", problems,
               len(problems) == 1 and "room insight (layer 3) may not use room fp8 (layer 3)" in problems[0])
    else:
        failures.append(f"the self-test's rooms insight and fp8 are not of one layer: {rooms}")
    down = {"torch/policies/down.cpp": '#include "state/state_internal.h"\n#include "support/strings.h"\n'
                                       '#include "policy_call.cpp"\n#include <vector>\n#include "torch/torch.h"\n'}
    if "policies" in by_name:
        problems = check_includes(rooms, list(down), read=down.__getitem__)
        expect("downward and outside includes", problems, problems == [])
    problems = check_includes(rooms, ["core/elsewhere.cpp"], read=lambda f: "")
    expect("a file in no room", problems, problems == ["runtime/core/elsewhere.cpp: in no room (add it to the "
                                                         f"'{MARKER}' block of docs/architecture.md)"])
    # Calls: up (state's object taking a symbol the drivers' object defines) and across a layer
    # reported; down and undefined everywhere not; an object of no room's source reported.
    obj = "x/autocastgen_runtime_torch.dir/./torch/{}.cpp.o".format
    defined = {"_ZN11autocastgen5torch13wrapper_traceEv": obj("policies/policy_call"),
               "_ZN11autocastgen14autocast_dtypeEN3c1010DeviceTypeE": obj("state/state"),
               "_ZN11autocastgen3fp84castEv": obj("fp8/cast")}
    up_calls = call_problems(rooms, defined, {obj("state/cast_cache"): {"_ZN11autocastgen5torch13wrapper_traceEv"}})
    expect("a call up", up_calls, len(up_calls) == 1 and "wrapper_trace" in up_calls[0])
    across = call_problems(rooms, defined, {obj("insight/stats"): {"_ZN11autocastgen3fp84castEv"}})
    expect("a call across one layer", across, len(across) == 1 and "room insight (layer 3) may not use room fp8"
           in across[0])
    down_calls = call_problems(rooms, defined, {obj("policies/runtime_policy"): {
        "_ZN11autocastgen14autocast_dtypeEN3c1010DeviceTypeE", "_Znwm"}})
    expect("a call down and one to no object's symbol", down_calls, down_calls == [])
    strays = object_problems(rooms, ["x/other.dir/core/a.cpp.o", obj("policies/policy_call"), "x/a.dir/torch/nowhere/a.cpp.o"])
    expect("objects of no room's source", strays, [s.split(":")[0] for s in strays] == ["x/other.dir/core/a.cpp.o",
                                                                                          "x/a.dir/torch/nowhere/a.cpp.o"])
    # The command line: objects, or --includes-only; none, or anything else, is refused.
    expect("objects given", objects_of(["a.cpp.o", "b.obj"]), objects_of(["a.cpp.o", "b.obj"]) == ["a.cpp.o", "b.obj"])
    expect("--includes-only", objects_of(["--includes-only"]), objects_of(["--includes-only"]) is None)
    for what, argv, wanted in (("no object", [], "no object files given"),
                               ("an argument that is no object", ["a.cpp.o", "lib.so"], "not an object file: lib.so"),
                               ("--includes-only with objects", ["--includes-only", "a.cpp.o"], "not an object file")):
        got = _refusal(lambda argv=argv: objects_of(argv))
        expect(what, got, wanted in got)
    for failure in failures:
        print(f"FAIL self-test: {failure}")
    if failures:
        return 1
    print("self-test: the block's rules, a file in two rooms or none, includes and calls up and across a layer "
          "reported, down not; objects of no room and an empty or odd command line refused")
    return 0


def main(argv: list[str]) -> int:
    rooms = read_layers(DOC.read_text())
    if argv and argv[0] == "--self-test":
        return self_test(rooms)
    objects = objects_of(argv)
    files = runtime_files()
    problems = check_includes(rooms, files)
    if objects is not None:
        problems += check_calls(rooms, objects)
    for problem in problems:
        print(f"FAIL {problem}")
    if problems:
        return 1
    order = " > ".join("|".join(r.name for r in rooms if r.layer == layer)
                       for layer in sorted({r.layer for r in rooms}, reverse=True))
    print(f"{len(files)} files" + (f", {len(objects)} objects" if objects else "") + ": every include"
          + (" and call" if objects else "") + f" goes down the layers {order}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
