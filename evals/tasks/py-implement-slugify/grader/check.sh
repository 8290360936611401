set -euo pipefail
python3 -m unittest discover -s tests -q 2>&1
