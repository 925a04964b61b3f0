#!/bin/bash
set -euo pipefail
cd /app
echo "from shapes.geometry import area" > shapes/__init__.py
