#!/bin/bash
set -euo pipefail
cd /app
grep -rl calc_total src | xargs sed -i 's/calc_total/order_total/g'
