#!/bin/bash
set -euo pipefail
cd /app
python3 - <<'EOF'
import json
c = json.load(open("config.json"))
c["debug"] = False
c["server"]["port"] = 8080
c["server"]["allowed_hosts"] = ["example.com"]
json.dump(c, open("config.json", "w"), indent=2)
EOF
