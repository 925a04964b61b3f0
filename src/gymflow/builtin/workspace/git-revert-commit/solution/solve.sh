#!/bin/bash
set -euo pipefail
cd /app
git clone -q repo.bundle repo
git -C repo -c user.name=Oracle -c user.email=oracle@example.com revert --no-edit HEAD >/dev/null
