"""`python -m grader ...` is the same as the `gpu-course` console script."""

from grader.cli import main

raise SystemExit(main())
