"""`python -m gymflow.cli`: the `gym` / `gymflow` command without its console script."""

from gymflow.cli import main

if __name__ == "__main__":
    main()
