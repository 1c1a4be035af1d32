"""The operator console's static page (index.html, app.css, app.js), shipped as package data
and served by :mod:`platforms.peer.admin` at ``/console/``: no build step, no external asset."""
