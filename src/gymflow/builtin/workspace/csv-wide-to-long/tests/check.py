import csv
rows = list(csv.reader(open("/app/sales_long.csv")))
assert rows[0] == ["region", "month", "amount"], rows[0]
assert rows[1:] == [["north", "jan", "10"], ["north", "feb", "12"], ["north", "mar", "9"],
                    ["south", "jan", "7"], ["south", "feb", "8"], ["south", "mar", "15"]], rows
