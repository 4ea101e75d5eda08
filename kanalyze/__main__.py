import sys

from kanalyze.cli import main

sys.exit(main())
