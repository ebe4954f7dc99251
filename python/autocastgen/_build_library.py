"""Child process of compile_policy: builds one generated wrapper file with torch.utils.cpp_extension.

Run as ``python _build_library.py SPEC.json`` (a file, not ``-m``: the child needs only torch, not
this package or its runtime already loaded). The spec names the source, the build folder and the
flags; cpp_extension writes a ninja file with the running torch's own include paths, libraries,
C++ string ABI and compiler, builds ``<name>.so`` and loads it, so a library that cannot be loaded
(an unresolved symbol) fails here, in the child, and never reaches the cache. Output (the compiler's
included) goes to stdout; the exit status says whether it worked.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: _build_library.py SPEC.json", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    import torch.utils.cpp_extension as cpp_extension

    path = cpp_extension.load(
        name=spec["name"],
        sources=[spec["source"]],
        extra_cflags=spec["cflags"],
        extra_ldflags=spec["ldflags"],
        extra_include_paths=spec["include_dirs"],
        build_directory=spec["build_dir"],
        verbose=True,
        is_python_module=False,
    )
    print(f"autocastgen: built and loaded {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
