DEFAULT_PORT = 8080


def load(path):
    """Reads `key = value` lines; returns {"host": str, "port": int}."""
    values = {}
    with open(path) as f:
        for line in f:
            if "=" in line:
                key, value = line.split("=", 1)
                values[key.strip()] = value.strip()
    port = int(values["port"])
    return {"host": values.get("host", "localhost"), "port": port}
