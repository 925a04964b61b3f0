import csv
rows = list(csv.reader(open("/app/totals.csv")))
assert rows == [["customer", "total"], ["cy", "15.00"], ["bo", "13.50"], ["ana", "13.00"]], rows
