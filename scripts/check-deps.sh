#!/usr/bin/env bash
# The dependency direction between anvil's crates is a hard rule (docs/ARCHITECTURE.md):
#   llm <- agent <- grader <- runner <- evals, and report <- runner/evals.
# For each workspace crate, list the workspace crates it may depend on (normal dependencies),
# and fail naming any edge that breaks the rule. anvil-test-support is dev-only: any crate may
# take it in [dev-dependencies], none in [dependencies] (the normal edges checked here), so it
# is in no shipped crate's list. Last, no crate may declare a dependency it never uses
# (scripts/unused-deps.py).
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A allowed=(
  [anvil-llm]=""
  [anvil-agent]="anvil-llm"
  [anvil-report]=""
  [anvil-grader]="anvil-llm anvil-agent"
  [anvil-runner]="anvil-llm anvil-agent anvil-grader anvil-report"
  [anvil-evals]="anvil-llm anvil-agent anvil-grader anvil-report anvil-runner"
  [anvil-tests]="anvil-llm anvil-agent anvil-grader anvil-report anvil-runner anvil-evals anvil-test-support"
  # Dev-only, below everything so every crate's tests may use it: the provider layer's SSE
  # builders and nothing else of the workspace.
  [anvil-test-support]="anvil-llm"
)

members=$(cargo metadata --no-deps --format-version 1 \
  | python3 -c 'import json,sys; print("\n".join(p["name"] for p in json.load(sys.stdin)["packages"]))')

status=0
for crate in $members; do
  if [[ -z ${allowed[$crate]+set} ]]; then
    echo "check-deps: $crate has no rule in scripts/check-deps.sh; add one" >&2
    status=1
    continue
  fi
  deps=$(cargo tree -p "$crate" -e normal --prefix none --format '{p}' 2>/dev/null \
    | awk '{print $1}' | grep '^anvil-' | grep -vx "$crate" | sort -u || true)
  for dep in $deps; do
    if ! grep -qw -- "$dep" <<<"${allowed[$crate]}"; then
      echo "check-deps: $crate must not depend on $dep (allowed: ${allowed[$crate]:-none})" >&2
      status=1
    fi
  done
done

# report is pure: no async runtime, no HTTP, no database.
if grep -qx anvil-report <<<"$members"; then
  if cargo tree -p anvil-report -e normal --prefix none --format '{p}' | awk '{print $1}' \
      | grep -qE '^(tokio|reqwest|sqlx)$'; then
    echo "check-deps: anvil-report must stay pure (no tokio, reqwest or sqlx)" >&2
    status=1
  fi
fi

# Declared but unused dependencies.
python3 scripts/unused-deps.py || status=1

[[ $status -eq 0 ]] && echo "check-deps: dependency direction OK, no unused dependency ($(wc -w <<<"$members") crates)"
exit $status
