import argparse


def main():
    parser = argparse.ArgumentParser(description="Count words in a file.")
    parser.add_argument("path")
    args = parser.parse_args()
    with open(args.path) as f:
        print(len(f.read().split()))


if __name__ == "__main__":
    main()
