set -euo pipefail
if grep -rn "calc_total" src; then
  echo "the old name calc_total is still in src/"
  exit 1
fi
cargo test --offline --quiet 2>&1
