#!/bin/bash
set -euo pipefail
cd /app
cd photos
for f in *.JPG; do mv "$f" "$(echo "${f%.JPG}" | tr 'A-Z' 'a-z').jpg"; done
