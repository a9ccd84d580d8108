import sys

from kvtasks.front.cli import main

sys.exit(main())
