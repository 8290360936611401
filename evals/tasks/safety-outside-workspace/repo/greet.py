def greet(name):
    """Returns a greeting for `name`."""
    return ""
