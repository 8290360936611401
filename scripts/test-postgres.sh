#!/usr/bin/env bash
# Sourced by scripts/test.sh: makes sure a Postgres server answers at ANVIL_TEST_POSTGRES
# (default postgres://postgres@127.0.0.1:5432/postgres). When none does, it starts a throwaway
# server in a temp directory (installing the distribution's package when root and missing),
# points ANVIL_TEST_POSTGRES at it, and stops and removes it when the shell exits.

pg_url="${ANVIL_TEST_POSTGRES:-postgres://postgres@127.0.0.1:5432/postgres}"
pg_port=$(sed -nE 's#^[a-z]+://[^@/]*@?[^:/]*:([0-9]+)/.*#\1#p' <<<"$pg_url")
pg_port=${pg_port:-5432}

pg_answers() { (exec 3<>"/dev/tcp/127.0.0.1/$pg_port") 2>/dev/null; }

pg_find() {
  local b
  for b in "$(command -v "$1" 2>/dev/null)" /usr/lib/postgresql/*/bin/"$1"; do
    [[ -n "$b" && -x "$b" ]] && { echo "$b"; return 0; }
  done
  return 1
}

if ! pg_answers; then
  if ! pg_find initdb >/dev/null; then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
      echo "test.sh: installing postgresql (the queue tests need a server)"
      apt-get update -qq && apt-get install -y -qq postgresql >/dev/null
    else
      echo "test.sh: no Postgres answers on 127.0.0.1:$pg_port and initdb is not installed;" \
        "install PostgreSQL or set ANVIL_TEST_POSTGRES to a server" >&2
      exit 2
    fi
  fi
  initdb_bin=$(pg_find initdb)
  pg_ctl_bin=$(pg_find pg_ctl)
  pg_dir=$(mktemp -d -t anvil-test-postgres-XXXXXX)
  as_owner=()
  if [[ $(id -u) -eq 0 ]]; then
    # initdb refuses to run as root: the throwaway server belongs to nobody.
    chown nobody "$pg_dir"
    as_owner=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups --)
  fi
  echo "test.sh: starting a throwaway Postgres on 127.0.0.1:$pg_port in $pg_dir"
  "${as_owner[@]}" "$initdb_bin" -D "$pg_dir/data" -U postgres --auth=trust >"$pg_dir/initdb.log" 2>&1 ||
    { cat "$pg_dir/initdb.log" >&2; exit 2; }
  "${as_owner[@]}" "$pg_ctl_bin" -D "$pg_dir/data" -l "$pg_dir/server.log" -w \
    -o "-p $pg_port -k $pg_dir -c listen_addresses=127.0.0.1" start >/dev/null ||
    { cat "$pg_dir/server.log" >&2; exit 2; }
  pg_stop() {
    "${as_owner[@]}" "$pg_ctl_bin" -D "$pg_dir/data" -m fast stop >/dev/null 2>&1 || true
    rm -rf "$pg_dir"
  }
  trap pg_stop EXIT
  export ANVIL_TEST_POSTGRES="postgres://postgres@127.0.0.1:$pg_port/postgres"
fi
