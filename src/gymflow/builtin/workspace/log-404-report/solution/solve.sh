#!/bin/bash
set -euo pipefail
cd /app
awk '$9 == 404 {print $7}' access.log | sort | uniq -c | sort -k1,1nr -k2,2 | awk '{print $1, $2}' > report.txt
