"""python -m services.slack_notifier: post unhappy platinum customer alerts to Slack."""

import sys

from services.core.main import Service, run
from services.slack_notifier.alert import decode_alert
from services.slack_notifier.config import SlackSettings
from services.slack_notifier.sink import make_sink

SERVICE = Service("slack-notifier", SlackSettings, decode_alert, make_sink)

if __name__ == "__main__":
    sys.exit(run(SERVICE))
