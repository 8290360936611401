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

# The grader's and the sandbox's tests run bubblewrap for real (Debian package `bubblewrap`).
if ! command -v bwrap >/dev/null 2>&1; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: installing bubblewrap (the sandbox tests need it)"
    apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "test.sh: bubblewrap is missing; install it (apt-get install bubblewrap) and run again" >&2
    exit 2
  fi
fi
# The interactive-terminal test drives anvil in tmux.
if ! command -v tmux >/dev/null 2>&1; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq tmux >/dev/null
  else
    echo "test.sh: tmux is missing; install it (apt-get install tmux) and run again" >&2
    exit 2
  fi
fi

cargo test --workspace
