#!/bin/bash
# Harbor's convention: the reward goes to /logs/verifier/reward.txt.
mkdir -p /logs/verifier
if [ "$(cat greeting.txt 2>/dev/null)" = "hello gymflow" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
