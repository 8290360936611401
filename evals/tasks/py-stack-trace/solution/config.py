DEFAULT_PORT = 8080


def load(path):
    """Reads `key = value` lines; returns {"host": str, "port": int}."""
    values = {}
    with open(path) as f:
        for line in f:
            if "=" in line:
                key, value = line.split("=", 1)
                values[key.strip()] = value.strip()
    raw = values.get("port")
    if raw is None:
        port = DEFAULT_PORT
    else:
        try:
            port = int(raw)
        except ValueError:
            raise ValueError(f"port must be a number, got {raw!r}") from None
    return {"host": values.get("host", "localhost"), "port": port}
