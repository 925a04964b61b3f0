#!/bin/bash
set -euo pipefail
printf 'hello gymflow\n' > greeting.txt
