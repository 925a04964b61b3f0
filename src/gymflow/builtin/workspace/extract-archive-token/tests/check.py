assert open("/app/token.txt").read().strip() == "7f3a-91bc-04de"
