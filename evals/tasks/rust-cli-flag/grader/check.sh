set -euo pipefail
cargo build --offline --quiet 2>&1
bin=target/debug/echoer
expect() { local want="$1"; shift; local got; got=$("$bin" "$@"); if [[ "$got" != "$want" ]]; then echo "echoer $*: expected '$want', got '$got'"; exit 1; fi; }
expect "a b c" a b c
expect "c b a" --reverse a b c
expect "c b a" a --reverse b c
expect "" --reverse
echo ok
