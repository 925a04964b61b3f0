#!/bin/bash
set -euo pipefail
cd /app
python3 - <<'EOF'
from pathlib import Path
p = Path("stats/core.py")
s = p.read_text().replace(
    "    return ordered[len(ordered) // 2]\n",
    "    middle = len(ordered) // 2\n"
    "    if len(ordered) % 2:\n"
    "        return ordered[middle]\n"
    "    return (ordered[middle - 1] + ordered[middle]) / 2\n",
)
p.write_text(s)
EOF
