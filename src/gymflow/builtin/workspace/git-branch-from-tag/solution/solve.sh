#!/bin/bash
set -euo pipefail
cd /app
git clone -q project.bundle project
git -C project checkout -q -b hotfix v1.0
