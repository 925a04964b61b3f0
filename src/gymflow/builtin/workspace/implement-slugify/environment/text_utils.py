def slugify(text):
    """A URL slug: lowercase ASCII letters and digits, words joined by single hyphens.

    Any run of characters that are not letters or digits separates words; leading and
    trailing separators are dropped. slugify("  Hello, World!  ") == "hello-world".
    """
    raise NotImplementedError
