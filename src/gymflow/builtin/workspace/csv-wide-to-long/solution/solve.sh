#!/bin/bash
set -euo pipefail
cd /app
python3 - <<'EOF'
import csv
rows = list(csv.DictReader(open("sales_wide.csv")))
with open("sales_long.csv", "w", newline="") as f:
    out = csv.writer(f)
    out.writerow(["region", "month", "amount"])
    for row in rows:
        for month in ["jan", "feb", "mar"]:
            out.writerow([row["region"], month, row[month]])
EOF
