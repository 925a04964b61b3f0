import configparser
c = configparser.ConfigParser()
assert c.read("/app/settings.ini")
assert c.sections() == ["app", "database"], c.sections()
assert dict(c["database"]) == {"host": "db.internal", "port": "5432", "timeout": "30"}, dict(c["database"])
assert dict(c["app"]) == {"name": "inventory", "log_level": "info"}
