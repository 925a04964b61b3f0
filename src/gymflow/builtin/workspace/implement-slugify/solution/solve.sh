#!/bin/bash
set -euo pipefail
cd /app
cat > text_utils.py <<'EOF'
import re


def slugify(text):
    """A URL slug: lowercase ASCII letters and digits, words joined by single hyphens."""
    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))
EOF
