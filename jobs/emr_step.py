"""EMR entry point: ``spark-submit jobs/emr_step.py run --config s3://.../prod.toml``.

A thin shell over the CLI: EMR (steps or EMR Serverless job runs) passes the same arguments the
``reconstructor`` command takes, and spark-submit has already set the master and the jars.
"""

import sys

from reconstructor.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
