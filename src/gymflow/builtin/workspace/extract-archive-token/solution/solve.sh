#!/bin/bash
set -euo pipefail
cd /app
mkdir -p /tmp/extract && tar -xzf backup.tar.gz -C /tmp/extract
grep -rh '^token=' /tmp/extract | cut -d= -f2 > token.txt
