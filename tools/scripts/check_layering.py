#!/usr/bin/env python3
"""Checks the include layering of include/verl (CONTRIBUTING.md, "Layers").

A module is the first folder under include/verl (a module header such as algo.hpp belongs to its
module). A header may include its own module, modules of a lower layer, and only their public
headers: never a file under another module's detail/ folder. Deprecated forwarding headers (their
first line says "Deprecated path") are checked like any other header.

    tools/scripts/check_layering.py [include/verl]

Prints every offending include and exits 1 when there is one, or when a module is not in the map.
"""
import re
import sys
from pathlib import Path

# Lowest first. Modules of one layer may not include each other.
LAYERS = [
    ["config.hpp"],
    ["core"],
    ["cpu"],
    ["algo", "optim", "tokenizer", "reward"],
    ["parallel"],
    ["kernels", "testing"],
    ["model"],
    ["rollout"],
    ["data"],
    ["hybridflow"],
    ["trainer"],
    ["verl.hpp"],
]
# data sits above model and rollout in the order but may not use them: it needs only the tokenizer.
FORBIDDEN = {("data", "model"), ("data", "rollout")}
RANK = {module: rank for rank, layer in enumerate(LAYERS) for module in layer}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]verl/([^>"]+)[>"]')


def module_of(first_part: str) -> str:
    if first_part.endswith(".hpp") and first_part not in ("config.hpp", "verl.hpp"):
        return first_part[: -len(".hpp")]
    return first_part


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "include/verl")
    problems = []
    for header in sorted(root.rglob("*")):
        if header.suffix not in (".hpp", ".cuh", ".h"):
            continue
        relative = header.relative_to(root)
        source = module_of(relative.parts[0])
        if source not in RANK:
            problems.append(f"{relative}: module '{source}' is not in the layer map of {Path(__file__).name}")
            continue
        for number, line in enumerate(header.read_text(errors="replace").splitlines(), 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            target_parts = match.group(1).split("/")
            target = module_of(target_parts[0])
            if target == source:
                continue
            where = f"{relative}:{number}: includes verl/{match.group(1)}"
            if target not in RANK:
                problems.append(f"{where}: module '{target}' is not in the layer map")
            elif "detail" in target_parts[1:-1]:
                problems.append(f"{where}: another module's detail/ header")
            elif RANK[target] >= RANK[source] or (source, target) in FORBIDDEN:
                problems.append(f"{where}: '{target}' is not below '{source}'")
    for problem in problems:
        print(problem)
    print(f"check_layering: {len(problems)} include(s) against the layers in {root}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
