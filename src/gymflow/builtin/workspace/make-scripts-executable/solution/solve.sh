#!/bin/bash
set -euo pipefail
cd /app
chmod +x bin/*.sh
ln -s run.sh bin/start
