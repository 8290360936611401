def slugify(title):
    """Turn a title into a URL slug.

    Lowercase ASCII letters and digits are kept; every run of other characters
    (spaces, punctuation, symbols) becomes a single hyphen; there are no leading
    or trailing hyphens. Accented Latin letters lose their accents first
    ("Crème Brûlée" -> "creme-brulee"). An empty result is "untitled".
    """
    return title
