lines = [l for l in open("/app/.env").read().splitlines() if l.strip()]
assert lines == ["APP_NAME=orders", "LOG_LEVEL=warning", "DATABASE_URL=postgres://db/orders", "CACHE_TTL=600"], lines
