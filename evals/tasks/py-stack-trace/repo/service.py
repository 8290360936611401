from config import load


def describe(cfg):
    return f"listening on {cfg['host']}:{cfg['port']}"


def main():
    print(describe(load("settings.ini")))


if __name__ == "__main__":
    main()
