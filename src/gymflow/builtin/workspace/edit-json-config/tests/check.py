import json
c = json.load(open("/app/config.json"))
assert c["debug"] is False
assert c["server"] == {"host": "0.0.0.0", "port": 8080, "workers": 4, "allowed_hosts": ["example.com"]}, c["server"]
assert c["name"] == "shop" and c["database"] == {"url": "sqlite:///shop.db", "pool": 5}
