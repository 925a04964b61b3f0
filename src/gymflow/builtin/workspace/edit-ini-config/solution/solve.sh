#!/bin/bash
set -euo pipefail
cd /app
python3 - <<'EOF'
import configparser
c = configparser.ConfigParser()
c.read("settings.ini")
c["database"]["host"] = "db.internal"
c["database"]["timeout"] = "30"
c.remove_section("legacy")
with open("settings.ini", "w") as f:
    c.write(f)
EOF
