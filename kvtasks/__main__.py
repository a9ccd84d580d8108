import sys

from kvtasks.cli import main

sys.exit(main())
