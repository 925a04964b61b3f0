import csv
rows = list(csv.reader(open("/app/adults.csv")))
assert rows == [["name", "age", "city"], ["Ben", "52", "Kyiv"], ["Mia", "18", "Lima"], ["Zoe", "34", "Oslo"]], rows
