#!/usr/bin/env bash
# Runs anvil's whole test suite on a fresh machine: installs what the tests need, then tests.
# This is the README's test command, and exactly what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."

# The recorded provider streams live in shared/fixtures beside the repository.
if [[ -z "${ANVIL_FIXTURES:-}" && ! -d ../shared/fixtures ]]; then
  echo "test.sh: ../shared/fixtures not found; set ANVIL_FIXTURES to the recorded streams" >&2
  exit 2
fi

# The sandbox and grader tests run bubblewrap for real; the terminal test drives anvil in tmux.
bash scripts/install-deps.sh --tests

cargo test --workspace
