from pricing import calc_total

print(calc_total([40, 2]))
