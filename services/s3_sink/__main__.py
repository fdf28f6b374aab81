"""python -m services.s3_sink: enriched ratings into the data lake until stopped (SIGTERM)."""

import sys

from services.core.main import run
from services.s3_sink.service import SERVICE

sys.exit(run(SERVICE))
