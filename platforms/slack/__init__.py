"""Slack, the fourth chat platform (SPEC 17). The adapter comes later; for now the package
holds how the model's Markdown is written as Slack mrkdwn (:mod:`platforms.slack.render`)."""
