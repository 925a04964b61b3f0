#!/bin/bash
set -euo pipefail
cd /app
python3 - <<'EOF'
import collections, csv
totals = collections.defaultdict(float)
for r in csv.DictReader(open("orders.csv")):
    totals[r["customer"]] += int(r["quantity"]) * float(r["unit_price"])
with open("totals.csv", "w", newline="") as f:
    out = csv.writer(f)
    out.writerow(["customer", "total"])
    for name, total in sorted(totals.items(), key=lambda kv: -kv[1]):
        out.writerow([name, f"{total:.2f}"])
EOF
