def divide(a, b):
    """a divided by b, as a float; dividing by zero raises ZeroDivisionError."""
    return a // b


def percent(part, whole):
    """part as a percentage of whole, rounded to one decimal."""
    return round(divide(part, whole) * 100, 1)
