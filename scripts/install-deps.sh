#!/usr/bin/env bash
# Installs what anvil needs beside the Rust toolchain: bubblewrap (every sandboxed command and
# every grade runs in it; without it anvil refuses rather than run unconfined), and tmux for
# the interactive-terminal test. Used by the README's main command and by scripts/test.sh.
set -euo pipefail

need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v git >/dev/null 2>&1 || need+=(git)
command -v python3 >/dev/null 2>&1 || need+=(python3)
if [[ "${1:-}" == "--tests" ]]; then
  command -v tmux >/dev/null 2>&1 || need+=(tmux)
fi
[[ ${#need[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "install-deps.sh: installing ${need[*]}"
  apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
elif command -v sudo >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  echo "install-deps.sh: installing ${need[*]} (sudo)"
  sudo apt-get update -qq && sudo apt-get install -y -qq "${need[@]}" >/dev/null
else
  echo "install-deps.sh: missing ${need[*]}; install them with your package manager and run again" >&2
  exit 2
fi
