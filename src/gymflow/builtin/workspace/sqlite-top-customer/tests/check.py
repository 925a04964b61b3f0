import sqlite3
con = sqlite3.connect("file:/app/shop.db?mode=ro", uri=True)
assert con.execute("SELECT count(*) FROM orders").fetchone()[0] == 5
assert open("/app/top_customer.txt").read().strip() == "Ana"
