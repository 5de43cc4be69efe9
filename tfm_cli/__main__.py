"""`python -m tfm_cli` runs the same app as the `tfm` console script."""

from tfm_cli.console import main

if __name__ == "__main__":
    main()
