import argparse


def main():
    parser = argparse.ArgumentParser(description="Count words (or lines) in a file.")
    parser.add_argument("path")
    parser.add_argument("--lines", action="store_true", help="count lines instead of words")
    args = parser.parse_args()
    with open(args.path) as f:
        text = f.read()
    print(len(text.splitlines()) if args.lines else len(text.split()))


if __name__ == "__main__":
    main()
