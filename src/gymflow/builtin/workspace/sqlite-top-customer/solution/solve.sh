#!/bin/bash
set -euo pipefail
cd /app
python3 - <<'EOF'
import sqlite3
con = sqlite3.connect("shop.db")
con.executescript(open("shop.sql").read())
con.commit()
name = con.execute(
    "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id "
    "GROUP BY c.id ORDER BY sum(o.amount) DESC LIMIT 1"
).fetchone()[0]
open("top_customer.txt", "w").write(name + "\n")
EOF
