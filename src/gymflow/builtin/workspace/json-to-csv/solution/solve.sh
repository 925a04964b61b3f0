#!/bin/bash
set -euo pipefail
cd /app
python3 - <<'EOF'
import csv, json
with open("users.csv", "w", newline="") as f:
    out = csv.writer(f)
    out.writerow(["id", "name", "email"])
    for u in json.load(open("users.json")):
        out.writerow([u["id"], u["name"], u.get("email", "")])
EOF
