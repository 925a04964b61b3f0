def calc_total(items):
    return sum(items)
