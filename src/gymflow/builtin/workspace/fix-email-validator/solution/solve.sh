#!/bin/bash
set -euo pipefail
cd /app
cat > validators.py <<'EOF'
import re

_EMAIL = re.compile(r"[A-Za-z0-9_+\-][A-Za-z0-9._+\-]*@(?:[A-Za-z0-9\-]+\.)+[A-Za-z]{2,}")


def is_valid_email(address):
    return _EMAIL.fullmatch(address) is not None
EOF
