"""``python -m pytest_fxtrace.merge``: the public name of ``pytest_fxtrace.report.merge``."""

from pytest_fxtrace.report.merge import main

if __name__ == "__main__":
    raise SystemExit(main())
