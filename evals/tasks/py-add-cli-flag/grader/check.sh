set -euo pipefail
printf 'one two three\nfour five\n\nsix\n' > sample.txt
words=$(python3 wc.py sample.txt)
lines=$(python3 wc.py --lines sample.txt)
[[ "$words" == "6" ]] || { echo "words: expected 6, got $words"; exit 1; }
[[ "$lines" == "4" ]] || { echo "--lines: expected 4, got $lines"; exit 1; }
echo ok
