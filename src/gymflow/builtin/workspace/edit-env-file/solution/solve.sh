#!/bin/bash
set -euo pipefail
cd /app
sed -i -e '/^DEBUG=/d' -e 's/^LOG_LEVEL=.*/LOG_LEVEL=warning/' .env
echo CACHE_TTL=600 >> .env
