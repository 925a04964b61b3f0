import re


def is_valid_email(address):
    return re.search(r".+@.+", address) is not None
