#!/bin/bash
set -euo pipefail
sed -i 's/return a - b/return a + b/' calc.py
python3 -c 'import calc; assert calc.add(2, 3) == 5'
