import csv
rows = list(csv.reader(open("/app/users.csv")))
assert rows == [["id", "name", "email"], ["1", "Ana", "ana@example.com"], ["2", "Bo", ""], ["3", "Cy, Jr.", "cy@example.com"]], rows
