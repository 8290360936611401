#!/usr/bin/env python3
"""Fails on a dependency a workspace crate declares but never uses (called by check-deps.sh).

For each member crate and each dependency it declares, the crate's sources must name the
dependency's library (`-` read as `_`) as a path (`name::`), in a `use`, or as a macro
(`name!`): normal dependencies in src/ outside `#[cfg(test)]` modules (and build.rs),
dev-dependencies in src/ (unit tests), tests/, benches/ and examples/. A dependency declared only to turn on a feature, or used in a
way this cannot see, goes in ALLOWED with the reason.
"""
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent

# (crate, dependency): why it is declared without being named in the sources.
ALLOWED = {
}

def sources(crate_dir, dirs):
    for d in dirs:
        p = crate_dir / d
        if p.is_file():
            yield p
        elif p.is_dir():
            yield from (f for f in p.rglob("*.rs") if "snapshots" not in f.parts)

def used(lib, files, shipped):
    pattern = re.compile(
        rf"(\b{lib}::|\buse\s+{lib}\b|\b{lib}!|extern\s+crate\s+{lib}\b)"
    )
    for f in files:
        text = f.read_text(errors="replace")
        if shipped:
            # Unit tests (a `#[cfg(test)]` module, by convention at the end of the file) may
            # use dev-dependencies; they do not make a normal dependency used.
            text = text.split("#[cfg(test)]")[0]
        if pattern.search(text):
            return True
    return False

def main():
    workspace = tomllib.loads((ROOT / "Cargo.toml").read_text())
    failures = []
    for member in workspace["workspace"]["members"]:
        crate_dir = ROOT / member
        manifest = tomllib.loads((crate_dir / "Cargo.toml").read_text())
        crate = manifest["package"]["name"]
        for section, dirs in [
            ("dependencies", ["src", "build.rs"]),
            ("build-dependencies", ["build.rs"]),
            ("dev-dependencies", ["src", "tests", "benches", "examples", "all.rs", "suite"]),
        ]:
            for dep, spec in manifest.get(section, {}).items():
                if (crate, dep) in ALLOWED:
                    continue
                name = spec.get("package", dep) if isinstance(spec, dict) else dep
                lib = name.replace("-", "_")
                shipped = section != "dev-dependencies"
                if not used(lib, list(sources(crate_dir, dirs)), shipped):
                    failures.append(f"{crate}: [{section}] {dep} is declared but never used")
    for f in failures:
        print(f"check-deps: {f} (remove it, or allow it with a reason in scripts/unused-deps.py)", file=sys.stderr)
    return 1 if failures else 0

if __name__ == "__main__":
    sys.exit(main())
