#!/usr/bin/env bash
# Renders an HTML report (`anvil-evals report --format html -o report.html`) to a PNG in a real
# headless browser, to look at it as a reader would:
#
#   scripts/screenshot-report.sh report.html report.png [WIDTHxHEIGHT]
#
# The size defaults to 1400x4000 (a wide window, tall enough for a report of a few dozen
# tasks; the page's white below its end is cut off). Needs Chromium (Debian: `apt-get install
# chromium`, or `scripts/install-deps.sh --screenshot`); the test suite never does. The page
# is opened as a file with networking off: a report that needed anything from the network
# would show it missing.
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]]; then
  echo "usage: $0 REPORT.html OUT.png [WIDTHxHEIGHT]" >&2
  exit 64
fi
html=$1
png=$2
size=${3:-1400x4000}
if [[ ! -f $html ]]; then
  echo "$0: no such file: $html" >&2
  exit 66
fi
if [[ ! $size =~ ^([0-9]+)x([0-9]+)$ ]]; then
  echo "$0: size must be WIDTHxHEIGHT, e.g. 1400x4000: $size" >&2
  exit 64
fi
width=${BASH_REMATCH[1]}
height=${BASH_REMATCH[2]}

browser=""
for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null 2>&1; then
    browser=$b
    break
  fi
done
if [[ -z $browser ]]; then
  echo "$0: Chromium is not installed (Debian: apt-get install chromium; or scripts/install-deps.sh --screenshot)" >&2
  exit 69
fi

abs_html=$(cd "$(dirname "$html")" && pwd)/$(basename "$html")
mkdir -p "$(dirname "$png")"
abs_png=$(cd "$(dirname "$png")" && pwd)/$(basename "$png")
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT

# --no-sandbox: Chromium refuses to start as root with its sandbox; the page is a local file.
flags=(--headless --disable-gpu --hide-scrollbars --no-first-run --no-default-browser-check
  --user-data-dir="$profile" --proxy-server=127.0.0.1:9 --proxy-bypass-list='<-loopback>'
  --window-size="$width,$height" --screenshot="$abs_png")
if [[ $(id -u) -eq 0 ]]; then
  flags+=(--no-sandbox)
fi
if ! "$browser" "${flags[@]}" "file://$abs_html" >"$profile/log" 2>&1 || [[ ! -s $abs_png ]]; then
  echo "$0: $browser did not write $png:" >&2
  tail -20 "$profile/log" >&2
  exit 1
fi

# Cut the blank page below the report's end when ImageMagick is there (the real one: on some
# machines `convert` is a stand-in that cannot trim).
if command -v convert >/dev/null 2>&1 && convert -version 2>/dev/null | grep -q ImageMagick; then
  convert "$abs_png" -background white -gravity north -trim +repage \
    -bordercolor white -border 16 "$abs_png" 2>/dev/null || true
fi
echo "$png (${width}x${height} window)"
