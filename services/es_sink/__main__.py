import sys

from services.core.main import run
from services.es_sink.service import SERVICE

sys.exit(run(SERVICE))
