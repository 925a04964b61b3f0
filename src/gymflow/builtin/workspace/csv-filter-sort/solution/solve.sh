#!/bin/bash
set -euo pipefail
cd /app
python3 - <<'EOF'
import csv
rows = [r for r in csv.DictReader(open("people.csv")) if int(r["age"]) >= 18]
with open("adults.csv", "w", newline="") as f:
    out = csv.DictWriter(f, ["name", "age", "city"])
    out.writeheader()
    out.writerows(sorted(rows, key=lambda r: r["name"]))
EOF
