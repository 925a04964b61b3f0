#!/bin/bash
set -euo pipefail
cd /app
git init -q -b main
git add -A
git -c user.name="Gym Flow" -c user.email=gym@example.com commit -q -m "Initial import"
