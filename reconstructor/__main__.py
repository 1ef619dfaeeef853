import sys

from reconstructor.cli import main

sys.exit(main())
