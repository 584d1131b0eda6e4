#!/usr/bin/env python3
"""Audits that every key PPOConfig binds is read by something: a key that is bound but read by
nothing is silently ignored, which verl-cpp never does (a key verl acts on is acted on or refused).

The bound keys come from the VERL_CONFIG_FIELDS lists in trainer/config/ppo_config.hpp and the
member types of the structs they name. A key `...section.field` counts as read where a source
file (include/verl and tools/, the configuration's own definition and loading machinery left out)
accesses `field` through the section: `section.field`, `section->field`, or through a variable
bound to the section (`const auto& r = config.actor_rollout_ref.rollout;` ... `r.field`) or
declared with its type (`const OptimConfig& optim` ... `optim.field`).

Usage: check_config_reads.py [REPO_ROOT]; exit status 1 lists the keys nothing reads.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]
CONFIG = ROOT / "include" / "verl" / "trainer" / "config" / "ppo_config.hpp"
# Where keys are declared, parsed and range-checked generically: reads there do not count.
NOT_READERS = {CONFIG, *(ROOT / "include" / "verl" / "trainer" / "config" / "detail").glob("*.hpp")}


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def bound_keys(text):
    """[(key path, owning struct, field, section member name)] in visiting order."""
    fields = {}
    for match in re.finditer(r"VERL_CONFIG_FIELDS\((\w+),([^)]*)\)", text):
        fields[match.group(1)] = [f.strip() for f in match.group(2).split(",") if f.strip()]
    member_types = {}
    for match in re.finditer(r"struct (\w+) \{(.*?)\n\};", text, flags=re.S):
        struct, body = match.group(1), match.group(2)
        for member in re.finditer(r"^\s+([\w:<>, ]+?)\s+(\w+)\s*(?:=[^;]*)?;", body, flags=re.M):
            member_types[(struct, member.group(2))] = member.group(1).strip()
    keys = []

    def walk(struct, prefix, section):
        for field in fields.get(struct, []):
            child = member_types.get((struct, field), "")
            path = f"{prefix}.{field}" if prefix else field
            if child in fields:
                walk(child, path, field)
            else:
                keys.append((path, struct, field, section))

    walk("PPOConfig", "", "")
    return keys, member_types


def main():
    text = strip_comments(CONFIG.read_text())
    keys, member_types = bound_keys(text)
    if len(keys) < 100:
        print(f"check_config_reads: found only {len(keys)} bound keys in {CONFIG}; the parser needs updating")
        return 1
    # Each section struct's member names (how code reaches it: config.trainer, actor.optim, ...).
    names_of = {}
    for (struct, member), type_name in member_types.items():
        names_of.setdefault(type_name, set()).add(member)
    # Per source: every `object.member` / `object->member` access, and the variables bound to a
    # section by name or declared with a section's type.
    access = re.compile(r"(?=\b(\w+)\s*(?:\.|->)\s*(\w+)\b)")  # overlapping: a.b.c gives (a, b) and (b, c)
    sources = []
    for folder in ("include/verl", "tools"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in (".hpp", ".cpp", ".cuh", ".cu") and path not in NOT_READERS:
                source = strip_comments(path.read_text(errors="replace"))
                bindings = {}  # variable -> the member it was bound from
                for variable, member in re.findall(r"(\w+)\s*=\s*[\w.\->()]*?\b(\w+)\s*;", source):
                    bindings.setdefault(member, set()).add(variable)
                typed = {}  # struct -> variables declared with it
                for struct_name, variable in re.findall(r"\b(\w+)\s*[&*]?\s*(\w+)\s*[=;,)]", source):
                    typed.setdefault(struct_name, set()).add(variable)
                sources.append((set(access.findall(source)), bindings, typed))
    # A probe nothing can read: the audit must report it, or it could not fail at all.
    probe = ("trainer.verl_cpp_audit_probe", "TrainerConfig", "verl_cpp_audit_probe", "trainer")
    unread = []
    for path, struct, field, section in keys + [probe]:
        names = set(names_of.get(struct, set())) | ({section} if section else set())
        if struct == "PPOConfig":
            names |= {"config", "config_", "c", "cfg"}
        found = False
        for accesses, bindings, typed in sources:
            aliases = set(names) | typed.get(struct, set())
            for name in names:
                aliases |= bindings.get(name, set())
            if any((alias, field) in accesses for alias in aliases):
                found = True
                break
        if not found:
            unread.append(path)
    if probe[0] not in unread:
        print("check_config_reads: the audit did not notice a key nothing reads; the audit itself is broken")
        return 1
    unread.remove(probe[0])
    if unread:
        print("check_config_reads: keys bound to PPOConfig that nothing reads (act on them, refuse them, or unbind them):")
        for path in unread:
            print(f"  {path}")
        return 1
    print(f"check_config_reads: every one of the {len(keys)} bound keys is read")
    return 0


if __name__ == "__main__":
    sys.exit(main())
