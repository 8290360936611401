#!/usr/bin/env bash
# Runs anvil's whole test suite on a fresh machine: installs what the tests need, then tests.
# This is the README's test command, and exactly what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."

# The sandbox gives every command a private /tmp, so the sandbox tests' own directories (under
# target/) would vanish from a command's view if the checkout were under /tmp.
case "$(pwd -P)/" in
  /tmp/*)
    echo "test.sh: this checkout is under $(pwd -P | cut -d/ -f1-2); the sandbox tests need it elsewhere" \
      "(commands get a private /tmp that hides it): clone it into your home, e.g. ~/anvil" >&2
    exit 2
    ;;
esac

# The sandbox and grader tests run bubblewrap for real; the terminal test drives anvil in tmux.
bash scripts/install-deps.sh --tests

# The queue tests run against a real Postgres: the one at ANVIL_TEST_POSTGRES (default
# 127.0.0.1:5432), or a throwaway server started here (and stopped on exit) when none answers.
source scripts/test-postgres.sh

cargo test --workspace
