"""Slack, the fourth chat platform (SPEC 17): Socket Mode or the Events API in, the Web API
out, on slack_sdk (``adapter`` says why not slack-bolt); replies written as mrkdwn by
:mod:`platforms.slack.render`."""

from platforms.slack.adapter import SlackAdapter

__all__ = ["SlackAdapter"]
